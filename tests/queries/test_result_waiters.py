"""jobs_finish_batch notifies awa_finished once a batch, and only for a batch
that ends a job someone waits for (awa.result_waiters)."""

from __future__ import annotations

import asyncpg

from awa import sql
from tests.support import finish_params


def Q(name: str) -> str:
    return sql.query(name)


async def running_jobs(conn: asyncpg.Connection, count: int) -> list[asyncpg.Record]:
    await conn.execute(
        "INSERT INTO awa.jobs (kind, queue) SELECT 'k', 'q' FROM generate_series(1, $1)", count
    )
    worker = await conn.fetchval(Q("workers_register"), "host", 1, ["q"])
    rows = await conn.fetch(Q("jobs_claim"), ["q"], [count], worker, [], [], [None])
    return sorted((row for row in rows if row["id"] is not None), key=lambda row: row["id"])


async def finish(conn, rows, states, leases=None):
    return await conn.fetchrow(
        Q("jobs_finish_batch"),
        *finish_params(
            [row["id"] for row in rows],
            leases or [row["run_lease"] for row in rows],
            states,
            delays=[None if state != "retryable" else 30.0 for state in states],
        ),
    )


async def test_a_batch_nobody_waits_for_notifies_nothing(conn):
    rows = await running_jobs(conn, 3)
    written = await finish(conn, rows, ["completed"] * 3)
    assert (written["applied"], written["notified"]) == (3, 0)


async def test_a_batch_ending_a_job_with_a_waiter_notifies_once(conn):
    rows = await running_jobs(conn, 3)
    await conn.fetchval(Q("result_waiters_add"), rows[1]["id"])
    await conn.fetchval(Q("result_waiters_add"), rows[1]["id"])  # two waiters, one job
    written = await finish(conn, rows, ["completed", "failed", "completed"])
    assert (written["applied"], written["notified"]) == (3, 1)


async def test_a_batch_that_ends_no_job_notifies_nothing_even_with_a_waiter(conn):
    rows = await running_jobs(conn, 2)
    await conn.fetchval(Q("result_waiters_add"), rows[0]["id"])
    written = await finish(conn, rows, ["retryable", "retryable"])
    assert (written["applied"], written["notified"]) == (2, 0)


async def test_a_stale_batch_notifies_nothing(conn):
    rows = await running_jobs(conn, 1)
    await conn.fetchval(Q("result_waiters_add"), rows[0]["id"])
    written = await finish(conn, rows, ["completed"], leases=[rows[0]["run_lease"] - 1])
    assert (written["applied"], written["notified"]) == (0, 0)


async def test_a_removed_waiter_no_longer_counts(conn):
    rows = await running_jobs(conn, 1)
    waiter = await conn.fetchval(Q("result_waiters_add"), rows[0]["id"])
    await conn.execute(Q("result_waiters_remove"), rows[0]["id"], waiter)
    written = await finish(conn, rows, ["completed"])
    assert (written["applied"], written["notified"]) == (1, 0)


async def test_a_waiter_row_a_day_old_is_deleted_by_the_next_waiter(conn):
    await conn.execute(
        "INSERT INTO awa.result_waiters (job_id, since) VALUES (1, now() - interval '25 hours')"
    )
    await conn.fetchval(Q("result_waiters_add"), 2)
    assert await conn.fetch("SELECT job_id FROM awa.result_waiters") == [(2,)]


async def test_the_observed_write_notifies_the_same_way(conn):
    rows = await running_jobs(conn, 2)
    await conn.fetchval(Q("result_waiters_add"), rows[0]["id"])
    changed = await conn.fetch(
        Q("jobs_finish_batch_observed"),
        *finish_params([row["id"] for row in rows], [row["run_lease"] for row in rows],
                       ["completed", "completed"]),
    )  # fmt: skip
    assert [row["id"] for row in changed] == [row["id"] for row in rows]
    assert [row["notified"] for row in changed] == [1, 1]
