"""Reading jobs back: get_job, list_jobs and their errors."""

from __future__ import annotations

import pytest

import awa


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
