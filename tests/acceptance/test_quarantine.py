"""Quarantine: repeated worker crashes of one fingerprint (kind + arguments)
hold its jobs at claim, operators see why, and releasing it lets them run."""

from __future__ import annotations

import json

import pytest

import awa
from awa.sql import query
from awa.worker.control import fingerprint
from tests.acceptance.test_hooks import orphan
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state


async def test_a_crash_looping_fingerprint_is_held_until_released(client, conn):
    @client.task(dict, kind="render")
    async def render(job):
        return None

    # Three jobs with the same arguments, each of whose workers died (three
    # workers), and one with other arguments.
    poison = [await client.insert({"doc": 13}, kind="render") for _ in range(3)]
    healthy = await client.insert({"doc": 14}, kind="render", run_at=_soon())
    for dead_worker, job in enumerate(poison, start=987654321):
        await orphan(conn, job.id, dead_worker)
    await client.start([("default", 2)], quarantine_threshold=3, **FAST_WORKER)

    async def quarantined() -> list[awa.QuarantinedFingerprint]:
        return await client.list_quarantine()

    [held] = await eventually(quarantined)
    assert held.kind == "render" and held.crashes == 3 and held.held
    assert "3 worker crashes" in (held.reason or "")
    assert held.last_job_id in {job.id for job in poison}

    # The other arguments run; the poison is held: claimed, given back
    # unrun with its attempt refunded, parked until released.
    await wait_for_state(conn, healthy.id, "completed")
    for job in poison:
        row = await wait_for_state(conn, job.id, "scheduled", timeout=30)
        await eventually(lambda job=job: _parked(conn, job.id))
        row = await job_row(conn, job.id)
        assert row["crashes"] == 1 and row["attempt"] == 1
    # Several more claims go by and nothing runs them.
    claims = client.worker.producer.claims
    await eventually(lambda: _claimed_since(client, claims + 3))
    assert {(await job_row(conn, job.id))["state"] for job in poison} == {"scheduled"}

    assert await client.release_quarantine(held.fingerprint) is True
    for job in poison:
        await wait_for_state(conn, job.id, "completed")
    assert await client.list_quarantine(include_watched=True) == []
    assert await client.release_quarantine(held.fingerprint) is False


async def test_crashes_below_the_threshold_are_watched_not_held(client, conn):
    @client.task(dict, kind="render")
    async def render(job):
        return None

    job = await client.insert({"doc": 1}, kind="render")
    await orphan(conn, job.id)
    await client.start([("default", 1)], quarantine_threshold=2, **FAST_WORKER)

    async def watched() -> list[awa.QuarantinedFingerprint]:
        return await client.list_quarantine(include_watched=True)

    [entry] = await eventually(watched)
    assert entry.crashes == 1 and not entry.held
    assert await client.list_quarantine() == []
    await wait_for_state(conn, job.id, "completed", timeout=30)
    row = await job_row(conn, job.id)
    assert json.loads(row["errors"])[0]["type"] == "WorkerCrash"


async def test_one_worker_dying_with_many_jobs_of_a_fingerprint_is_one_crash(client, conn):
    # A worker holds many jobs at once (slots and prefetch): when it dies,
    # jobs of one fingerprint that it held are one crash against it, not
    # one each, or any kind whose arguments repeat would be quarantined by
    # a single unrelated kill.
    @client.task(dict, kind="render")
    async def render(job):
        return None

    held_together = [await client.insert({"doc": 7}, kind="render") for _ in range(5)]
    for job in held_together:
        await orphan(conn, job.id, 987654321)
    await client.start([("default", 2)], quarantine_threshold=3, **FAST_WORKER)

    for job in held_together:
        await wait_for_state(conn, job.id, "completed", timeout=30)
    [entry] = await client.list_quarantine(include_watched=True)
    assert entry.crashes == 1 and not entry.held
    assert {(await job_row(conn, job.id))["crashes"] for job in held_together} == {1}


async def test_a_dead_worker_is_counted_once_however_its_jobs_are_batched(client, conn):
    # The rescuer records crashes in batches; a worker whose jobs span two
    # batches still counts once.
    jobs = [await client.insert({"doc": 8}, kind="render") for _ in range(4)]
    record = query("quarantine_record_crashes")
    dead = 987654321
    first = await conn.fetch(record, [jobs[0].id, jobs[1].id], 3600.0, 3, [dead, dead])
    second = await conn.fetch(record, [jobs[2].id, jobs[3].id], 3600.0, 3, [dead, dead])
    assert [row["crashes"] for row in first] == [1]
    assert second == []  # nothing new to count
    other_worker = await conn.fetch(record, [jobs[3].id], 3600.0, 3, [123])
    assert [row["crashes"] for row in other_worker] == [2]


async def test_fingerprints_ignore_key_order_and_release_checks_its_input(client, conn):
    same = await conn.fetchval(
        "SELECT awa.job_fingerprint('k', '{\"a\": 1, \"b\": 2}') = "
        "awa.job_fingerprint('k', '{\"b\": 2, \"a\": 1}')"
    )
    other = await conn.fetchval(
        "SELECT awa.job_fingerprint('k', '{\"a\": 1}') = awa.job_fingerprint('j', '{\"a\": 1}')"
    )
    assert same is True and other is False
    # Workers compute it from what claims return; it must be the same bytes.
    args_text = await conn.fetchval("""SELECT '{"b": [1, {"z": null}], "a": "é"}'::jsonb::text""")
    in_sql = await conn.fetchval("SELECT awa.job_fingerprint('k', $1::jsonb)", args_text)
    assert fingerprint("k", args_text) == in_sql
    with pytest.raises(awa.ValidationError, match="fingerprint"):
        await client.release_quarantine("not hex")


async def _claimed_since(client, count: int) -> bool:
    return client.worker.producer.claims >= count


async def _parked(conn, job_id: int) -> bool:
    return await conn.fetchval(
        "SELECT state = 'scheduled' AND run_at = 'infinity' FROM awa.jobs WHERE id = $1", job_id
    )


def _soon():
    import datetime

    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
