"""A cap on each partition's running jobs across the fleet
(configure_queue(max_workers_per_partition=N), migration 0024): claims of
the queue count the jobs the cap let start that still run, by partition,
and take no more; a partition at its cap waits in place while the others
are served."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from awa import sql
from tests.queries.test_fairness import backlog, partitions_of
from tests.queries.test_jobs_queries import claim, register_worker

Q = sql.query


@pytest.fixture(autouse=True)
async def _lanes_of_q(conn: asyncpg.Connection) -> None:
    await conn.fetchval(Q("lanes_open"), ["q"])


async def set_cap(conn: asyncpg.Connection, cap: int | None) -> None:
    await conn.fetchrow(
        Q("queue_settings_configure"),
        "q", False, None, False, None, False, None, None, False, None, True, cap,
    )  # fmt: skip


async def claim_ids(conn: asyncpg.Connection, worker: int, count: int) -> list[int]:
    """The jobs a claim takes, without its row that is not a job (when to
    look again, while jobs wait behind a cap)."""
    rows = await claim(conn, ["q"], [count], worker)
    return sorted(row["id"] for row in rows if row["id"] is not None)


async def complete(conn: asyncpg.Connection, ids: list[int]) -> None:
    await conn.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY ($1)", ids
    )


async def test_a_claim_takes_no_more_of_a_partition_than_its_cap(conn):
    await set_cap(conn, 2)
    worker = await register_worker(conn)
    for tenant in ("a", "b", "c"):
        await backlog(conn, tenant, 20)
    taken = await claim_ids(conn, worker, 50)
    assert sorted(await partitions_of(conn, taken)) == ["a", "a", "b", "b", "c", "c"]
    # Every partition is at its cap: the next claim takes nothing.
    assert await claim_ids(conn, worker, 50) == []


async def test_an_outcome_frees_its_partitions_slot(conn):
    await set_cap(conn, 2)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "a", 20)
    b_jobs = await backlog(conn, "b", 20)
    assert await claim_ids(conn, worker, 10) == [*a_jobs[:2], *b_jobs[:2]]
    await complete(conn, a_jobs[:1])
    assert await claim_ids(conn, worker, 10) == [a_jobs[2]]


async def test_a_capped_claim_that_has_room_says_when_to_look_again(conn):
    await set_cap(conn, 1)
    worker = await register_worker(conn)
    await backlog(conn, "a", 5)
    rows = await claim(conn, ["q"], [10], worker)
    assert [row["id"] is None for row in rows] == [False, True]
    # Not a job: when to look again, in 50 ms (an outcome frees a slot
    # without a word to the claimers).
    look_again = rows[1]
    assert look_again["queue"] == "q"
    assert 0 < (look_again["attempt_deadline_at"] - look_again["attempted_at"]).total_seconds() < 1


async def test_a_partition_at_its_cap_does_not_hold_back_less_urgent_partitions(conn):
    """Its priority-1 jobs wait; the claim serves the other partition's
    priority-2 jobs (a capped partition takes no level in the claim's order)."""
    await set_cap(conn, 1)
    worker = await register_worker(conn)
    urgent = list(
        await conn.fetchval(
            "WITH made AS (INSERT INTO awa.jobs (kind, queue, priority, partition_key)"
            " SELECT 'k', 'q', 1, 'a' FROM generate_series(1, 5) RETURNING id)"
            " SELECT array_agg(id ORDER BY id) FROM made"
        )
    )
    b_jobs = await backlog(conn, "b", 3)
    assert await claim_ids(conn, worker, 1) == urgent[:1]
    assert await claim_ids(conn, worker, 10) == b_jobs[:1]


async def test_jobs_without_a_key_are_not_capped(conn):
    await set_cap(conn, 1)
    worker = await register_worker(conn)
    no_key = await backlog(conn, None, 5)
    assert await claim_ids(conn, worker, 10) == no_key


async def test_a_second_claimer_waits_for_the_first_and_sees_its_jobs(conn, database_url):
    """The claims of a capped queue take turns on its settings row: a claim
    made while another is open waits for it, then counts its jobs."""
    await set_cap(conn, 3)
    worker = await register_worker(conn)
    await backlog(conn, "a", 50)
    other = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            first = await claim_ids(conn, worker, 10)
            second = asyncio.create_task(claim_ids(other, worker, 10))
            await asyncio.sleep(0.2)
            assert not second.done()
        assert len(first) == 3
        assert await second == []
    finally:
        await other.close()


async def test_removing_the_cap_lets_the_partition_run_freely(conn):
    await set_cap(conn, 1)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "a", 10)
    assert await claim_ids(conn, worker, 10) == a_jobs[:1]
    await set_cap(conn, None)
    assert await claim_ids(conn, worker, 10) == a_jobs[1:]
