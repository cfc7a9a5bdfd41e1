"""Tenant fairness: a fair queue's claims go round-robin across the
partitions with jobs waiting, through partition lanes that keep their own
hints (migration 0022; docs/flow-control.md, docs/storage.md, Lanes)."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from awa import sql
from tests.queries.test_jobs_queries import claim, register_worker
from tests.queries.test_lanes import claim_ids, lane, produce_and_claim

Q = sql.query


@pytest.fixture(autouse=True)
async def _lanes_of_q(conn: asyncpg.Connection) -> None:
    await conn.fetchval(Q("lanes_open"), ["q"])


async def set_fair(conn: asyncpg.Connection, fair: bool) -> None:
    await conn.fetchrow(
        Q("queue_settings_configure"),
        "q", False, None, False, None, False, None, None, True, fair, False, None,
    )  # fmt: skip


async def backlog(conn: asyncpg.Connection, partition: str | None, count: int) -> list[int]:
    """``count`` jobs of queue q in ``partition``, inserted as other SQL
    would (the trigger opens the partition's lanes)."""
    return list(
        await conn.fetchval(
            "WITH made AS (INSERT INTO awa.jobs (kind, queue, priority, partition_key)"
            " SELECT 'k', 'q', 2, $1 FROM generate_series(1, $2) RETURNING id)"
            " SELECT array_agg(id ORDER BY id) FROM made",
            partition,
            count,
        )
    )


async def partitions_of(conn: asyncpg.Connection, ids: list[int]) -> list[str | None]:
    rows = await conn.fetch(
        "SELECT partition_key FROM awa.jobs WHERE id = ANY ($1) ORDER BY id", ids
    )
    return [row["partition_key"] for row in rows]


async def test_a_tenants_first_job_is_claimed_ahead_of_another_tenants_backlog(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "tenant-a", 10_000)
    [b_job] = await backlog(conn, "tenant-b", 1)
    # A claim of 10 serves one partition (at least 100 jobs each): A's lane,
    # opened first. The next claim serves B's first, least recently served,
    # then fills up from A's.
    assert await claim_ids(conn, worker, 10) == a_jobs[:10]
    assert await claim_ids(conn, worker, 10) == sorted([b_job, *a_jobs[10:19]])


async def test_a_claim_serves_several_partitions_at_least_100_jobs_each(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "tenant-a", 10_000)
    [b_job] = await backlog(conn, "tenant-b", 1)
    assert await claim_ids(conn, worker, 30) == a_jobs[:30]
    taken = await claim_ids(conn, worker, 60)
    assert taken == sorted([*a_jobs[30:89], b_job])


async def test_without_fairness_the_backlog_goes_first(conn):
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "tenant-a", 100)
    [b_job] = await backlog(conn, "tenant-b", 1)
    assert await claim_ids(conn, worker, 10) == a_jobs[:10]
    assert b_job not in await claim_ids(conn, worker, 80)


async def test_claims_go_round_robin_least_recently_served_first(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    for tenant in ("a", "b", "c", "d"):
        await backlog(conn, tenant, 20)
    served = [await partitions_of(conn, await claim_ids(conn, worker, 2)) for _ in range(8)]
    assert served == [[tenant, tenant] for tenant in "abcdabcd"]


async def test_a_claim_larger_than_the_shares_fills_from_the_partitions_with_more(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "a", 250)
    b_jobs = await backlog(conn, "b", 2)
    none_jobs = await backlog(conn, None, 3)
    # Each partition's share of 210 is at least 100: A gives 100, B 2, the
    # jobs without a key 3, and the next round takes 105 more from A.
    taken = await claim_ids(conn, worker, 210)
    assert len(taken) == 210
    assert set(b_jobs + none_jobs) <= set(taken)
    assert sorted(set(taken) & set(a_jobs)) == a_jobs[:205]


async def test_a_partition_visited_gives_at_least_100_and_the_next_what_is_left(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "a", 120)
    b_jobs = await backlog(conn, "b", 120)
    assert await claim_ids(conn, worker, 40) == a_jobs[:40]
    # B, served least recently, first: its 100, then A what is left.
    assert await claim_ids(conn, worker, 170) == [*a_jobs[40:110], *b_jobs[:100]]


async def test_priority_still_comes_first_in_a_fair_queue(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    await backlog(conn, "a", 5)
    urgent = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, priority, partition_key)"
        " VALUES ('k', 'q', 1, 'b') RETURNING id"
    )
    rows = await claim(conn, ["q"], [1], worker)
    assert [row["id"] for row in rows] == [urgent]


async def test_turning_fairness_on_and_off_loses_and_repeats_no_job(conn):
    worker = await register_worker(conn)
    inserted: list[int] = []
    taken: list[int] = []
    for round_number in range(6):
        await set_fair(conn, round_number % 2 == 0)
        for tenant in ("a", "b", None):
            inserted += await backlog(conn, tenant, 7)
        taken += await claim_ids(conn, worker, 9)
    await set_fair(conn, True)
    taken += await claim_ids(conn, worker, 1000)
    await set_fair(conn, False)
    taken += await claim_ids(conn, worker, 1000)
    assert len(taken) == len(set(taken))
    assert sorted(taken) == sorted(inserted)


async def test_the_lane_of_jobs_without_a_key_moves_past_the_keyed_jobs_when_idle(conn):
    """Its reads step over the keyed jobs after its hint (migration 0023):
    idle, with a hint 100 ms old, it moves even when the keyed lanes
    fill the claim, and a job without a key inserted later is still taken."""
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "a", 300)
    no_key_lane = (await lane(conn, 2, ""))["id"]
    hint_past_jobs = (
        "SELECT (SELECT hint_run_at FROM awa.lane_moves WHERE lane_id = $1"
        " ORDER BY seq DESC LIMIT 1) >= (SELECT max(run_at) FROM awa.jobs)"
    )
    assert await conn.fetchval(hint_past_jobs, no_key_lane) is False
    assert await claim_ids(conn, worker, 10) == a_jobs[:10]
    assert await conn.fetchval(hint_past_jobs, no_key_lane) is True
    [no_key] = await backlog(conn, None, 1)
    taken = await claim_ids(conn, worker, 60)
    assert no_key in taken


async def test_an_idle_whole_lane_moves_at_most_once_a_second(conn):
    """Only the lane of a fair queue's jobs without a key moves up to ten
    times a second when idle; a whole lane's move is once a second (each
    move is a write the claim makes)."""
    worker = await register_worker(conn)
    jobs = await backlog(conn, None, 30)
    assert await claim_ids(conn, worker, 10) == jobs[:10]
    idle_lane = (await lane(conn, 1))["seq"]
    await asyncio.sleep(0.3)
    assert await claim_ids(conn, worker, 10) == jobs[10:20]
    assert (await lane(conn, 1))["seq"] == idle_lane


async def test_jobs_without_a_key_leave_the_partition_lane_index_empty(conn):
    """Only keyed jobs have an entry in jobs_partition_lane_idx (migration
    0023): every insert without a key writes one index entry fewer."""
    await backlog(conn, None, 5_000)
    await backlog(conn, "a", 5)
    # The metapage and one leaf, where 5 005 entries would need some 30.
    assert await conn.fetchval("SELECT pg_relation_size('awa.jobs_partition_lane_idx')") == 2 * 8192


async def test_a_job_made_claimable_again_behind_its_partition_lanes_hint_is_claimed(conn):
    await set_fair(conn, True)
    worker = await register_worker(conn)
    [job] = await backlog(conn, "a", 1)
    assert await claim_ids(conn, worker, 10) == [job]
    # Given back with its old key (a release at shutdown): the lowering
    # reaches its partition lane.
    await conn.execute("UPDATE awa.jobs SET state = 'available', attempt = 0 WHERE id = $1", job)
    assert await claim_ids(conn, worker, 10) == [job]


async def test_the_sweep_finds_a_job_left_behind_a_partition_lanes_hint(conn):
    """A job made available with the triggers off (as a claim that rolls
    back leaves its jobs) waits only for its partition lane's sweep."""
    await set_fair(conn, True)
    worker = await register_worker(conn)
    [lost, *_] = await backlog(conn, "a", 3)
    assert len(await claim_ids(conn, worker)) == 3
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = $1", lost)
    assert await claim_ids(conn, worker) == []
    partition_lane = await lane(conn, 2, "a")
    assert await conn.fetchval(Q("lanes_sweep"), partition_lane["id"], False, 1000) is True
    assert await claim_ids(conn, worker) == [lost]


async def test_fair_producers_and_claimers_at_once_claim_every_job_once_without_the_sweep(
    conn, database_url
):
    """The lanes' stress test on a fair queue, with random partitions (and
    jobs without one), priorities and back-dated jobs: every job is taken
    exactly once by claims alone, and no partition lane's sweep from its
    start finds anything left behind."""
    await set_fair(conn, True)
    worker = await register_worker(conn)
    inserted, taken = await produce_and_claim(
        database_url, worker, random.Random(17), claimers=2, rollbacks=0.0, mixed=True,
        partitions=5,
    )  # fmt: skip
    for _ in range(5):  # notes, lowerings and later levels are each used up by a claim
        taken.extend(await claim_ids(conn, worker, 100_000))
    assert len(inserted) > 100
    assert set(await partitions_of(conn, inserted)) == {None, "p0", "p1", "p2", "p3", "p4"}
    assert len(taken) == len(set(taken))
    assert sorted(set(inserted) - set(taken)) == []
    for row in await conn.fetch(Q("lanes_list")):
        if row["queue"] == "q" and row["partition_key"] is not None:
            assert await conn.fetchval(Q("lanes_sweep"), row["id"], True, 10**6) is False


async def test_a_claim_given_the_settings_takes_them_as_given(conn):
    """jobs_claim_with_settings: the worker says each queue's settings as it
    last read them, so the claim does not read them again. Here the stored
    settings say fair, the caller says not: its claim takes the backlog first."""
    await set_fair(conn, True)
    worker = await register_worker(conn)
    a_jobs = await backlog(conn, "tenant-a", 30)
    [b_job] = await backlog(conn, "tenant-b", 1)
    rows = await conn.fetch(
        Q("jobs_claim_with_settings"),
        ["q"], [20], worker, [], [], [None], [None], [False], False, [False],
    )  # fmt: skip
    assert sorted(row["id"] for row in rows) == a_jobs[:20]
    rows = await conn.fetch(
        Q("jobs_claim_with_settings"),
        ["q"], [11], worker, [], [], [None], [None], [False], False, [True],
    )  # fmt: skip
    assert sorted(row["id"] for row in rows) == [*a_jobs[20:30], b_job]
