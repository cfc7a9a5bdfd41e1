"""Reading jobs back: get_job, list_jobs and their errors."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

import awa


class SendEmail(pydantic.BaseModel):
    to: str


@dataclasses.dataclass
class Other:
    note: str


async def test_get_job_of_a_missing_id_raises_job_not_found(client):
    with pytest.raises(awa.JobNotFound) as raised:
        await client.get_job(123456)
    assert raised.value.job_id == 123456
    assert "123456" in str(raised.value)


async def test_get_job_refuses_a_non_integer_id(client):
    with pytest.raises(awa.ValidationError):
        await client.get_job("1")  # type: ignore[arg-type]


async def test_list_jobs_filters_and_orders_newest_first(client, conn):
    a = await client.insert({}, kind="alpha", queue="one")
    b = await client.insert({}, kind="beta", queue="one")
    c = await client.insert({}, kind="alpha", queue="two")
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", c.id)
    assert [job.id for job in await client.list_jobs()] == [c.id, b.id, a.id]
    assert [job.id for job in await client.list_jobs(kind="alpha")] == [c.id, a.id]
    assert [job.id for job in await client.list_jobs(queue="one")] == [b.id, a.id]
    assert [job.id for job in await client.list_jobs(state=awa.JobState.Completed)] == [c.id]
    assert [job.id for job in await client.list_jobs(state="available", limit=1)] == [b.id]
    completed = (await client.list_jobs(state="completed"))[0]
    assert completed.state is awa.JobState.Completed


async def test_list_jobs_filters_by_tag_and_pages_with_before(client):
    a = await client.insert({}, kind="alpha", tags=["x", "y"])
    b = await client.insert({}, kind="alpha", tags=["y"])
    c = await client.insert({}, kind="alpha", tags=["x"])
    assert [job.id for job in await client.list_jobs(tag="x")] == [c.id, a.id]
    assert [job.id for job in await client.list_jobs(tag="z")] == []
    first = await client.list_jobs(limit=2)
    assert [job.id for job in first] == [c.id, b.id]
    assert [job.id for job in await client.list_jobs(limit=2, before=first[-1].id)] == [a.id]
    with pytest.raises(awa.ValidationError) as raised:
        await client.list_jobs(before="10")  # type: ignore[arg-type]
    assert raised.value.field == "before"


async def test_list_jobs_refuses_unknown_states_and_bad_limits(client):
    with pytest.raises(awa.ValidationError) as raised:
        await client.list_jobs(state="done")
    assert raised.value.field == "state"
    with pytest.raises(awa.ValidationError):
        await client.list_jobs(limit=0)


async def test_error_history_is_decoded(client, conn):
    job = await client.insert({}, kind="k")
    await conn.execute(
        """UPDATE awa.jobs SET errors = '[{"attempt": 1, "type": "ValueError", "message": "m",
           "at": "2026-01-01T00:00:00+00:00"}]' WHERE id = $1""",
        job.id,
    )
    [entry] = (await client.get_job(job.id)).errors
    assert entry["type"] == "ValueError" and entry["attempt"] == 1


async def test_inspection_leaves_args_and_metadata_out_unless_asked(client, conn):
    job = await client.insert({"email": "a@b.c"}, kind="signup", metadata={"ip": "10.0.0.1"})
    for seen in (await client.get_job(job.id), (await client.list_jobs(kind="signup"))[0]):
        assert seen.id == job.id and seen.state is awa.JobState.Available
        for field in ("args", "args_json", "metadata"):
            with pytest.raises(awa.PayloadOmitted, match="include_payload=True"):
                getattr(seen, field)
    full = await client.get_job(job.id, include_payload=True)
    assert full.args == {"email": "a@b.c"} and full.metadata == {"ip": "10.0.0.1"}
    [listed] = await client.list_jobs(kind="signup", include_payload=True)
    assert listed.args == {"email": "a@b.c"}
    with pytest.raises(awa.ValidationError, match="include_payload"):
        await client.get_job(job.id, include_payload="yes")  # type: ignore[arg-type]


async def test_get_job_with_args_type_decodes_the_args_as_that_type(client):
    job = await client.insert({"to": "a@b.c"}, kind="send_email")
    # No task for the kind: the args only need to decode as the type.
    read = await client.get_job(job.id, args_type=SendEmail, include_payload=True)
    assert read.args == SendEmail(to="a@b.c")

    @client.task(SendEmail)
    async def send(job: awa.Job[SendEmail]) -> None: ...

    read = await client.get_job(job.id, args_type=SendEmail, include_payload=True)
    assert read.args == SendEmail(to="a@b.c")
    raw = await client.insert({"any": ["json"]}, kind="raw")
    client.task(dict, kind="raw")(lambda job: None)
    assert (await client.get_job(raw.id, args_type=dict, include_payload=True)).args == {
        "any": ["json"]
    }


async def test_get_job_refuses_an_args_type_other_than_the_kinds_task(client):
    @client.task(SendEmail)
    async def send(job: awa.Job[SendEmail]) -> None: ...

    job = await client.insert(SendEmail(to="a@b.c"))
    for include_payload in (False, True):
        with pytest.raises(awa.ValidationError) as raised:
            await client.get_job(job.id, args_type=Other, include_payload=include_payload)
        assert raised.value.field == "args_type"
        assert str(raised.value) == (
            f"args_type: job {job.id} is a 'send_email' job, whose task takes SendEmail, not Other"
        )


async def test_get_job_refuses_an_args_type_its_args_do_not_decode_as(client):
    job = await client.insert(SendEmail(to="a@b.c"))  # no task registered for send_email

    with pytest.raises(awa.ValidationError) as raised:
        await client.get_job(job.id, args_type=Other, include_payload=True)

    assert raised.value.field == "args_type"
    message = str(raised.value)
    assert message.startswith(
        f"args_type: the args of job {job.id} ('send_email') do not decode as Other: "
    )
    assert "note" in message  # pydantic's reason: the missing field
    assert isinstance(raised.value.__cause__, pydantic.ValidationError)
    # Without the payload nothing is decoded, so only the task check applies.
    unread = await client.get_job(job.id, args_type=Other)
    with pytest.raises(awa.PayloadOmitted):
        unread.args  # noqa: B018
