"""Schema versions and undecodable jobs, end to end: older payloads are
upcast before the handler sees them; a payload a worker cannot decode is
parked ``undecodable`` without using an attempt, firing a hook or a
follow-up; ``retry_undecodable`` sends it to a worker that can; inserts,
follow-ups and periodic jobs record their task's version."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa.testing import AwaTestClient
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state

KIND = "greet"


class GreetV1(BaseModel):
    name: str


class GreetV3(BaseModel):
    first: str
    last: str
    polite: bool


class GreetV4(BaseModel):
    first: str
    last: str
    polite: bool
    language: str


def v1_to_v2(args: dict[str, Any]) -> dict[str, Any]:
    first, _, last = args["name"].partition(" ")
    return {"first": first, "last": last}


def v2_to_v3(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "polite": True}


def v3_to_v4(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "language": "en"}


V3_UPCASTERS = {1: v1_to_v2, 2: v2_to_v3}


def greet_v3(client: awa.AsyncClient, seen: list[Any]) -> None:
    """The release under test: ``greet`` at version 3."""

    @client.task(GreetV3, kind=KIND, schema_version=3, upcasters=V3_UPCASTERS)
    async def greet(job: awa.Job[GreetV3]) -> None:
        assert job.schema_version == 3
        seen.append(job.args)


async def insert_as(
    database_url: str, args: BaseModel, version: int, upcasters: dict[int, Any]
) -> int:
    """A job as the producer of another release inserts it: a client whose
    task for ``greet`` is at ``version``."""
    async with awa.AsyncClient(database_url) as producer:
        producer.task(type(args), kind=KIND, schema_version=version, upcasters=upcasters)(
            lambda job: None
        )
        return (await producer.insert(args)).id


async def insert_raw(database_url: str, args: dict[str, Any], version: int) -> int:
    """A ``greet`` job at ``version`` from a producer that registers no
    tasks, so nothing checks its arguments against a model."""
    async with awa.AsyncClient(database_url) as producer:
        return (await producer.insert(args, kind=KIND, schema_version=version)).id


def thank(args: GreetV3, job: awa.Job[GreetV3]) -> awa.EnqueueRequest:
    return awa.EnqueueRequest({"to": args.first}, kind="thanked")


async def test_a_version_1_payload_is_upcast_to_version_3_before_the_handler_sees_it(
    client, conn, database_url
):
    seen: list[Any] = []
    greet_v3(client, seen)
    old_id = await insert_as(database_url, GreetV1(name="Ada Lovelace"), 1, {})
    new = await client.insert(GreetV3(first="Alan", last="Turing", polite=False))
    assert (await job_row(conn, old_id))["schema_version"] is None  # version 1
    assert (await job_row(conn, new.id))["schema_version"] == 3
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, old_id, "completed")
    await wait_for_state(conn, new.id, "completed")
    await client.shutdown()
    assert GreetV3(first="Ada", last="Lovelace", polite=True) in seen
    assert GreetV3(first="Alan", last="Turing", polite=False) in seen
    # The stored arguments stay as written.
    assert json.loads((await job_row(conn, old_id))["args"]) == {"name": "Ada Lovelace"}


async def test_an_older_job_reads_back_upcast_and_its_hooks_and_follow_ups_see_it_so(
    client, conn, database_url
):
    """Outside a worker's attempt too (inspection, a cancellation's event
    and follow-up), a job of an older version is read at the task's."""
    greet_v3(client, [])
    seen: list[Any] = []
    client.on_event(GreetV3, lambda event: seen.append((event.args, event.job.schema_version)))
    client.task(dict, kind="thanked")(lambda job: None)
    client.on_cancelled_enqueue(GreetV3, lambda args, job, reason: thank(args, job))
    job_id = await insert_raw(database_url, {"name": "Ada Lovelace"}, 1)
    stored = await client.get_job(job_id, include_payload=True)
    upcast = GreetV3(first="Ada", last="Lovelace", polite=True)
    assert (stored.args, stored.schema_version) == (upcast, 3)
    assert json.loads(stored.args_json) == upcast.model_dump()
    await client.cancel(job_id)
    await eventually(lambda: _recorded(seen, (upcast, 3)))
    assert await conn.fetchval("SELECT args ->> 'to' FROM awa.jobs WHERE kind = 'thanked'") == "Ada"
    assert json.loads((await job_row(conn, job_id))["args"]) == {"name": "Ada Lovelace"}


async def test_a_newer_payload_is_parked_undecodable_without_an_attempt_hook_or_follow_up(
    client, conn, database_url
):
    seen: list[Any] = []
    events: list[tuple[str, int]] = []
    greet_v3(client, seen)
    client.task(dict, kind="thanked")(lambda job: None)
    client.on_completed_enqueue(GreetV3, thank)
    client.on_exhausted_enqueue(GreetV3, thank)
    client.on_event_kind(KIND, lambda event: events.append((type(event).__name__, event.job.id)))
    newer = GreetV4(first="Grace", last="Hopper", polite=True, language="en")
    newer_id = await insert_as(database_url, newer, 4, {**V3_UPCASTERS, 3: v3_to_v4})
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, newer_id, "undecodable")
    assert (row["attempt"], row["failure_reason"], row["finalized_at"]) == (
        0,
        "unknown_schema_version",
        None,
    )
    [entry] = json.loads(row["errors"])
    assert (entry["type"], entry["outcome"], entry["reason"]) == (
        "ArgsNotDecodable",
        "undecodable",
        "unknown_schema_version",
    )
    assert "schema version 4" in entry["message"] and entry["attempt"] == 1
    # A job the worker can decode runs after it, hooks and follow-up included:
    # the parked one fired neither.
    current = await client.insert(GreetV3(first="Alan", last="Turing", polite=True))
    await wait_for_state(conn, current.id, "completed")
    await eventually(lambda: _recorded(events, ("Completed", current.id)))
    await client.shutdown()
    assert [job_id for _name, job_id in events if job_id == newer_id] == []
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'thanked'") == 1
    assert len(seen) == 1


async def _recorded(events: list[Any], event: Any) -> bool:
    return event in events


async def test_an_unknown_kind_is_parked_undecodable(client, conn):
    greet_v3(client, [])
    job = await client.insert({"x": 1}, kind="from_a_newer_release")
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "undecodable")
    await client.shutdown()
    assert (row["attempt"], row["failure_reason"]) == (0, "unknown_kind")
    assert json.loads(row["errors"])[0]["type"] == "UnknownJobKind"


async def test_retry_undecodable_sends_a_job_to_a_worker_that_knows_its_version(
    client, conn, database_url
):
    greet_v3(client, [])
    newer = GreetV4(first="Grace", last="Hopper", polite=True, language="fr")
    newer_id = await insert_as(database_url, newer, 4, {**V3_UPCASTERS, 3: v3_to_v4})
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, newer_id, "undecodable")
    await client.shutdown()

    seen: list[GreetV4] = []
    async with awa.AsyncClient(database_url) as upgraded:

        @upgraded.task(
            GreetV4, kind=KIND, schema_version=4, upcasters={**V3_UPCASTERS, 3: v3_to_v4}
        )
        async def greet(job: awa.Job[GreetV4]) -> None:
            seen.append(job.args)

        with pytest.raises(awa.ValidationError, match="give ids, queue or kind"):
            await upgraded.retry_undecodable()
        assert await upgraded.retry_undecodable(kind="another_kind") == 0
        assert await upgraded.retry_undecodable(kind=KIND) == 1
        row = await job_row(conn, newer_id)
        assert (row["state"], row["failure_reason"]) == ("available", None)
        await upgraded.start([("default", 1)], **FAST_WORKER)
        row = await wait_for_state(conn, newer_id, "completed")
    assert seen == [newer]
    assert row["attempt"] == 1  # the parked claim used none
    assert [record.outcome for record in (await client.get_job(newer_id)).attempts] == [
        "undecodable",
        "succeeded",
    ]


async def test_undecodable_jobs_are_listed_and_shown(client, conn, database_url):
    greet_v3(client, [])
    job_id = await insert_raw(database_url, {"name": "too new"}, 9)
    later = datetime.timedelta(hours=1)
    kept = await client.insert(GreetV3(first="A", last="B", polite=True), run_at=later)
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job_id, "undecodable")
    await client.shutdown()
    listed = await client.list_jobs(state="undecodable")
    assert [listed_job.id for listed_job in listed] == [job_id]
    assert listed[0].state is awa.JobState.Undecodable
    shown = await client.get_job(job_id)
    assert shown.state is awa.JobState.Undecodable and not shown.state.is_terminal
    assert shown.errors[-1]["reason"] == "unknown_schema_version"
    assert (await client.count_by_state())[awa.JobState.Undecodable] == 1
    explained = await client.explain(job_id)
    assert explained.reason is awa.ExplainReason.UNDECODABLE
    assert "unknown_schema_version" in explained.message
    assert (await client.get_job(kept.id)).state is awa.JobState.Scheduled


async def test_an_upcaster_that_raises_or_arguments_that_fail_after_upcasting_are_undecodable(
    client, conn, database_url
):
    def broken(args: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("name")

    @client.task(GreetV3, kind=KIND, schema_version=3, upcasters={1: broken, 2: v2_to_v3})
    async def greet(job: awa.Job[GreetV3]) -> None:
        return None

    raised_id = await insert_raw(database_url, {"name": "Ada Lovelace"}, 1)
    invalid_id = await insert_raw(database_url, {"first": "Ada"}, 2)
    results = {result.job.id: result for result in await AwaTestClient(client).drain()}
    assert {results[raised_id].outcome, results[invalid_id].outcome} == {"undecodable"}
    assert (results[raised_id].error or "").startswith("ArgsNotDecodable: the upcaster")
    raised_row = await job_row(conn, raised_id)
    assert raised_row["failure_reason"] == "upcast_failed"
    assert "the upcaster from schema version 1 to 2 raised KeyError" in raised_row["errors"]
    invalid_row = await job_row(conn, invalid_id)
    assert invalid_row["failure_reason"] == "args_invalid"
    assert "do not validate as GreetV3" in invalid_row["errors"]


async def test_an_undecodable_job_keeps_its_unique_key_until_cancelled(client, conn):
    job = await client.insert({"n": 1}, kind="unknown_here", unique_opts={})
    greet_v3(client, [])
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "undecodable")
    await client.shutdown()
    with pytest.raises(awa.UniqueConflict):
        await client.insert({"n": 1}, kind="unknown_here", unique_opts={})
    cancelled = await client.cancel(job.id)
    row = await job_row(conn, job.id)
    assert cancelled is not None
    assert (cancelled.state, row["failure_reason"]) == (awa.JobState.Cancelled, None)


async def test_follow_ups_and_periodic_jobs_record_their_tasks_version(client, conn):
    @client.task(GreetV3, kind=KIND, schema_version=3, upcasters=V3_UPCASTERS)
    async def greet(job: awa.Job[GreetV3]) -> None:
        job.enqueue_on_completion({"to": job.args.first, "staged": True}, kind="thanked")

    client.task(dict, kind="thanked", schema_version=2, upcasters={1: dict})(lambda job: None)
    client.on_completed_enqueue(GreetV3, thank)
    every_2s = "*/2 * * * * *"
    client.periodic("greeting", every_2s, GreetV3, {"first": "P", "last": "Q", "polite": True})
    job = await client.insert(GreetV3(first="Ada", last="L", polite=True))
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")

    async def two_thanks() -> list[Any]:
        rows = await conn.fetch(
            "SELECT schema_version FROM awa.jobs WHERE kind = 'thanked' AND args ->> 'to' = 'Ada'"
        )
        return [row["schema_version"] for row in rows] if len(rows) == 2 else []

    assert await eventually(two_thanks) == [2, 2]

    async def fired() -> Any:
        return await conn.fetchval(
            "SELECT schema_version FROM awa.jobs WHERE metadata ->> 'cron_name' = 'greeting'"
        )

    assert await eventually(fired) == 3
    await client.shutdown()


async def test_the_schema_version_insert_option_is_checked_and_stored(client, conn):
    with pytest.raises(awa.ValidationError, match="schema_version"):
        await client.insert({"a": 1}, kind="raw", schema_version=0)
    with pytest.raises(awa.ValidationError, match="schema_version"):
        await client.insert({"a": 1}, kind="raw", schema_version=True)
    one = await client.insert({"a": 1}, kind="raw", schema_version=1)
    five = await client.insert({"a": 1}, kind="raw", schema_version=5)
    copied = await client.insert_many_copy([{"a": 2}], kind="raw", schema_version=7)
    rows = {
        row["id"]: row["schema_version"]
        for row in await conn.fetch("SELECT id, schema_version FROM awa.jobs")
    }
    assert (rows[one.id], rows[five.id], rows[copied[0].id]) == (None, 5, 7)
