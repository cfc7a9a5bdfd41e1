"""The queries of schema versions and undecodable jobs on a real
PostgreSQL, guards included: claims return each job's version, parking is
guarded by the run lease and gives the attempt back, retries take only
undecodable jobs matching their filters, keys stay held throughout."""

from __future__ import annotations

import datetime
import json

import asyncpg

from awa import sql
from tests.queries.test_jobs_queries import claim, register_worker

Q = sql.query
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

ENTRY = json.dumps({"attempt": 1, "type": "UnknownJobKind", "message": "m",
                    "outcome": "undecodable", "reason": "unknown_kind"})  # fmt: skip


async def insert_job(
    conn: asyncpg.Connection,
    *,
    kind: str = "k",
    queue: str = "q",
    schema_version: int | None = None,
    unique_key: bytes | None = None,
) -> int:
    return await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, schema_version, unique_key, unique_states) "
        "VALUES ($1, $2, $3, $4, $5) RETURNING id",
        kind,
        queue,
        schema_version,
        unique_key,
        None if unique_key is None else 0b11_1111,
    )


async def park(conn: asyncpg.Connection, row, reason: str = "unknown_kind"):
    return await conn.fetchval(
        Q("jobs_park_undecodable"), row["id"], row["run_lease"], reason, ENTRY
    )


async def claimed_and_parked(conn: asyncpg.Connection, **job) -> int:
    worker = await register_worker(conn)
    job_id = await insert_job(conn, **job)
    [row] = await claim(conn, [job.get("queue", "q")], [1], worker)
    assert await park(conn, row) == job_id
    return job_id


async def retry(conn, ids=None, queue=None, kind=None, limit=1000):
    return await conn.fetchrow(Q("jobs_retry_undecodable"), ids, queue, kind, limit)


async def test_a_claim_returns_each_jobs_schema_version(conn):
    worker = await register_worker(conn)
    first = await insert_job(conn)
    third = await insert_job(conn, schema_version=3)
    rows = await claim(conn, ["q"], [2], worker)
    assert {row["id"]: row["schema_version"] for row in rows} == {first: None, third: 3}
    one = await insert_job(conn, schema_version=2)
    row = await conn.fetchrow(Q("jobs_claim_one"), None, None, worker)
    assert (row["id"], row["schema_version"]) == (one, 2)


async def test_parking_gives_the_attempt_back_and_records_why(conn):
    job_id = await claimed_and_parked(conn)
    row = await conn.fetchrow("SELECT * FROM awa.jobs WHERE id = $1", job_id)
    assert (row["state"], row["attempt"], row["failure_reason"]) == (
        "undecodable",
        0,
        "unknown_kind",
    )
    assert (row["worker_id"], row["attempt_deadline_at"], row["finalized_at"]) == (None,) * 3
    [entry] = json.loads(row["errors"])
    assert entry["outcome"] == "undecodable" and entry["started_at"] is not None


async def test_parking_is_guarded_by_the_run_lease_and_state(conn):
    worker = await register_worker(conn)
    await insert_job(conn)
    [row] = await claim(conn, ["q"], [1], worker)
    stale = {"id": row["id"], "run_lease": row["run_lease"] - 1}
    assert await park(conn, stale) is None
    assert await park(conn, row) == row["id"]
    assert await park(conn, row) is None  # no longer running


async def test_retry_takes_only_undecodable_jobs_matching_its_filters(conn):
    parked = await claimed_and_parked(conn, kind="a")
    other_kind = await claimed_and_parked(conn, kind="b")
    other_queue = await claimed_and_parked(conn, kind="a", queue="r")
    waiting = await insert_job(conn, kind="a")
    retried = await retry(conn, kind="a", queue="q")
    assert (retried["retried"], retried["notified"]) == (1, 1)
    assert (await retry(conn, ids=[other_kind, waiting]))["retried"] == 1
    assert (await retry(conn, ids=[other_kind]))["retried"] == 0
    rows = await conn.fetch("SELECT id, state::text, failure_reason FROM awa.jobs")
    found = {row["id"]: (row["state"], row["failure_reason"]) for row in rows}
    assert found[parked] == ("available", None)
    assert found[other_kind] == ("available", None)
    assert found[other_queue] == ("undecodable", "unknown_kind")
    assert found[waiting] == ("available", None)


async def test_retry_is_bounded(conn):
    for _ in range(3):
        await claimed_and_parked(conn)
    assert (await retry(conn, kind="k", limit=2))["retried"] == 2
    assert (await retry(conn, kind="k", limit=2))["retried"] == 1


async def test_an_undecodable_job_holds_its_unique_key_through_parking_and_retry(conn):
    key = b"\x01" * 16
    job_id = await claimed_and_parked(conn, unique_key=key)

    async def holder() -> int | None:
        return await conn.fetchval(
            "SELECT job_id FROM awa.job_unique_keys WHERE unique_key = $1", key
        )

    assert await holder() == job_id
    await retry(conn, ids=[job_id])
    assert await holder() == job_id


async def test_an_undecodable_job_past_its_deadline_fails(conn):
    job_id = await claimed_and_parked(conn)
    await conn.execute(
        "UPDATE awa.jobs SET deadline_at = now() - interval '1 second' WHERE id = $1", job_id
    )
    failed = await conn.fetch(Q("jobs_deadlines_passed"), 10, EPOCH)
    assert [row["id"] for row in failed] == [job_id]
    row = await conn.fetchrow(
        "SELECT state::text, failure_reason FROM awa.jobs WHERE id = $1", job_id
    )
    assert (row["state"], row["failure_reason"]) == ("failed", "deadline_exceeded")


async def test_an_undecodable_jobs_bit_is_availables(conn):
    bits = await conn.fetchrow(
        "SELECT awa.job_state_bit('undecodable') AS undecodable, "
        "awa.job_state_bit('available') AS available"
    )
    assert bits["undecodable"] == bits["available"]
