"""Scheduled and retryable jobs held in awa.job_due (migration 0013): the
table names exactly those jobs, by when they are due, on every path that
writes jobs (awa's statements, an operator's own SQL, COPY, TRUNCATE), and a
job that is never scheduled writes nothing to it."""

from __future__ import annotations

import json

import asyncpg

from awa import sql
from tests.queries.test_jobs_queries import claim, finish, register_worker
from tests.support import table_counters

Q = sql.query


JOB = {"kind": "k", "queue": "q", "args": {}, "priority": 2, "max_attempts": 25}


async def insert_at(conn: asyncpg.Connection, run_in_s: float, count: int = 1) -> list[int]:
    """Jobs through jobs_insert, due run_in_s from now (scheduled when later)."""
    run_at = await conn.fetchval("SELECT now() + $1 * interval '1 second'", run_in_s)
    rows = [JOB | {"run_at": run_at.isoformat()} for _ in range(count)]
    return [row["id"] for row in await conn.fetch(Q("jobs_insert"), json.dumps(rows))]


async def assert_due_true_to_jobs(conn: asyncpg.Connection) -> set[int]:
    due = {(r["run_at"], r["job_id"]) for r in await conn.fetch("SELECT * FROM awa.job_due")}
    waiting = {
        (r["run_at"], r["id"])
        for r in await conn.fetch(
            "SELECT run_at, id FROM awa.jobs WHERE state IN ('scheduled', 'retryable')"
        )
    }
    assert due == waiting
    return {job_id for _, job_id in due}


async def test_each_path_in_and_out_of_the_waiting_states_keeps_the_table_true(conn):
    worker = await register_worker(conn)
    later = await insert_at(conn, 3600)
    now = await insert_at(conn, -1, count=4)
    assert await assert_due_true_to_jobs(conn) == set(later)
    # Outcomes: a retry and a snooze wait; a completion does not.
    rows = sorted(await claim(conn, ["q"], [4], worker), key=lambda r: r["id"])
    await finish(
        conn,
        [r["id"] for r in rows],
        [r["run_lease"] for r in rows],
        ["retryable", "scheduled", "completed", "retryable"],
        delays=[30.0, 60.0, None, 0.0],
        errors=['{"type": "E", "message": "m", "attempt": 1}', None, None, None],
    )
    retried, snoozed, _done, due_now = now
    assert await assert_due_true_to_jobs(conn) == {*later, retried, snoozed, due_now}
    # Promotion of the one due now; its row goes with its state.
    promoted = await conn.fetchrow(Q("jobs_promote_due"), 100)
    assert promoted["promoted"] == 1
    assert await assert_due_true_to_jobs(conn) == {*later, retried, snoozed}
    # An operator's own SQL: moved, cancelled, deleted.
    await conn.execute(
        "UPDATE awa.jobs SET run_at = run_at + interval '1 day' WHERE id = $1", later[0]
    )
    await conn.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = $1", retried)
    await conn.execute("DELETE FROM awa.jobs WHERE id = $1", snoozed)
    assert await assert_due_true_to_jobs(conn) == set(later)
    await conn.execute("TRUNCATE awa.jobs")
    assert await conn.fetchval("SELECT count(*) FROM awa.job_due") == 0


async def test_next_due_reads_the_table_and_skips_jobs_held_forever(conn):
    assert await conn.fetchval(Q("jobs_next_due")) is None
    [held] = await insert_at(conn, 3600)
    await conn.execute("UPDATE awa.jobs SET run_at = 'infinity' WHERE id = $1", held)
    assert await conn.fetchval(Q("jobs_next_due")) is None
    await insert_at(conn, 120)
    assert 110 < await conn.fetchval(Q("jobs_next_due")) <= 120
    await assert_due_true_to_jobs(conn)


async def test_copy_of_scheduled_jobs_fills_the_table(conn):
    run_at = await conn.fetchval("SELECT now() + interval '1 hour'")
    await conn.copy_records_to_table(
        "jobs",
        schema_name="awa",
        columns=["kind", "state", "run_at"],
        records=[("k", "scheduled", run_at)] * 50 + [("k", "available", run_at)] * 50,
    )
    assert len(await assert_due_true_to_jobs(conn)) == 50


async def test_a_job_never_scheduled_writes_nothing_to_the_table(conn):
    worker = await register_worker(conn)
    before = await table_counters(conn, "job_due")
    await insert_at(conn, -1, count=5)
    rows = await claim(conn, ["q"], [5], worker)
    await finish(conn, [r["id"] for r in rows], [r["run_lease"] for r in rows], ["completed"] * 5)
    assert len(rows) == 5
    assert await table_counters(conn, "job_due") == before
