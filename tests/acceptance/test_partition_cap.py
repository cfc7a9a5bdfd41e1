"""A cap on each partition's running jobs across the fleet
(configure_queue(max_workers_per_partition=N)): it holds across worker
processes, a capped partition does not hold back the others, jobs without
a key are not capped, explain names it, and its setting is validated."""

from __future__ import annotations

import asyncio
import time

import pytest

import awa
from tests.processes import spawn_worker, stop_worker
from tests.support import FAST_WORKER, eventually

QUEUE = "capped"


async def _insert_per_tenant(client: awa.AsyncClient, tenants: str, count: int) -> list[int]:
    """``count`` ``crashy`` jobs of queue QUEUE for each tenant (a partition key)."""
    ids: list[int] = []
    for tenant in tenants:
        jobs = await client.insert_many(
            [{"n": n} for n in range(count)], kind="crashy", queue=QUEUE, partition_key=tenant
        )
        ids += [job.id for job in jobs]
    return ids


async def _peak_running_per_partition(conn, ids: list[int], timeout_s: float) -> dict[str, int]:
    """Samples the jobs ``ids`` every 10 ms until all are completed (or
    ``timeout_s`` passed); the most running at once in each partition."""
    peaks: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = await conn.fetch(
            """SELECT partition_key, count(*) FILTER (WHERE state = 'running') AS running,
                      count(*) FILTER (WHERE state = 'completed') AS done
               FROM awa.jobs WHERE id = ANY($1) GROUP BY partition_key""",
            ids,
        )
        for row in rows:
            key = row["partition_key"]
            peaks[key] = max(peaks.get(key, 0), row["running"])
        if sum(row["done"] for row in rows) == len(ids):
            break
        await asyncio.sleep(0.01)
    return peaks


async def _completed(conn, ids: list[int]) -> int:
    return await conn.fetchval(
        "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND state = 'completed'", ids
    )


@pytest.mark.timeout(180)
async def test_a_cap_of_two_per_partition_holds_across_two_processes_of_ten_slots(
    database_url, ledger
):
    conn = ledger
    async with awa.AsyncClient(database_url) as client:
        await client.configure_queue(QUEUE, max_workers_per_partition=2)
        ids = await _insert_per_tenant(client, "abc", 20)
        workers = [
            await spawn_worker(database_url, f"w{n}", mode="sleep:0.05", queue=QUEUE, slots=10)
            for n in range(2)
        ]
        try:
            peaks = await _peak_running_per_partition(conn, ids, timeout_s=60)
        finally:
            for worker in workers:
                await stop_worker(worker)
        assert await _completed(conn, ids) == len(ids)
        assert peaks == {"a": 2, "b": 2, "c": 2}
        # Both processes took part: the cap is the fleet's, not one process's.
        assert await conn.fetchval("SELECT count(DISTINCT worker) FROM test_runs") == 2


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_worker_killed_while_it_holds_a_partitions_slot_frees_it_once_rescued(
    database_url, ledger
):
    """The killed worker's job keeps its partition's slot until the leader
    rescues it (a crash, not a failure); the cap holds throughout and every
    job completes."""
    conn = ledger
    async with awa.AsyncClient(database_url) as client:
        await client.configure_queue(QUEUE, max_workers_per_partition=1)
        ids = await _insert_per_tenant(client, "ab", 6)
        victim = await spawn_worker(database_url, "victim", mode="sleep:0.3", queue=QUEUE, slots=5)

        async def victim_runs_a_job() -> bool:
            return bool(
                await conn.fetchval("SELECT count(*) FROM test_runs WHERE worker = 'victim'")
            )

        await eventually(victim_runs_a_job, timeout=30)
        victim.kill()
        await victim.wait()
        survivor = await spawn_worker(
            database_url, "survivor", mode="sleep:0.3", queue=QUEUE, slots=5
        )
        try:
            peaks = await _peak_running_per_partition(conn, ids, timeout_s=90)
        finally:
            await stop_worker(survivor)
        assert await _completed(conn, ids) == len(ids)
        assert max(peaks.values()) == 1
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND crashes > 0", ids
            )
            >= 1
        )


@pytest.mark.timeout(120)
async def test_a_partition_at_its_cap_does_not_hold_back_the_others(client, conn):
    """Tenant A's slow, more urgent jobs run one at a time; tenant B's jobs,
    less urgent, all run meanwhile."""
    await client.configure_queue(QUEUE, max_workers_per_partition=1)
    release = asyncio.Event()

    @client.task(dict, kind="tenant_job", queue=QUEUE)
    async def tenant_job(job):
        if job.partition_key == "a":
            await release.wait()

    await client.insert_many([{}] * 20, kind="tenant_job", partition_key="a", priority=1)
    b_jobs = await client.insert_many([{}] * 30, kind="tenant_job", partition_key="b", priority=3)
    await client.start([(QUEUE, 10)], **FAST_WORKER)
    try:

        async def b_done() -> bool:
            return await _completed(conn, [job.id for job in b_jobs]) == len(b_jobs)

        await eventually(b_done, timeout=30)
        running_a = await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE partition_key = 'a' AND state = 'running'"
        )
        assert running_a == 1
    finally:
        release.set()


@pytest.mark.timeout(120)
async def test_jobs_without_a_key_are_not_capped(client, conn):
    await client.configure_queue(QUEUE, max_workers_per_partition=1)
    release = asyncio.Event()

    @client.task(dict, kind="plain_job", queue=QUEUE)
    async def plain_job(job):
        await release.wait()

    await client.insert_many([{}] * 5, kind="plain_job")
    await client.start([(QUEUE, 10)], **FAST_WORKER)
    try:

        async def all_running() -> bool:
            return await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state = 'running'") == 5

        await eventually(all_running, timeout=30)
    finally:
        release.set()


@pytest.mark.timeout(120)
async def test_explain_names_the_partitions_cap_and_its_holders(client):
    await client.configure_queue(QUEUE, max_workers_per_partition=1)
    release = asyncio.Event()

    @client.task(dict, kind="tenant_job", queue=QUEUE)
    async def tenant_job(job):
        await release.wait()

    first, second = await client.insert_many([{}] * 2, kind="tenant_job", partition_key="t-1")
    await client.start([(QUEUE, 10)], **FAST_WORKER)
    try:

        async def first_running() -> bool:
            return (await client.get_job(first.id)).state == awa.JobState.Running

        await eventually(first_running, timeout=30)
        explained = await client.explain(second.id)
        assert explained.reason == awa.ExplainReason.PARTITION_CAP_REACHED
        assert explained.holders == (first.id,)
        assert explained.message == (
            f"partition t-1 of queue {QUEUE} runs 1 jobs, its cap "
            f"(max_workers_per_partition=1): jobs {first.id} hold the slots"
        )
    finally:
        release.set()


async def test_the_cap_is_set_kept_removed_and_shown(client):
    config = await client.configure_queue(QUEUE, max_workers_per_partition=3)
    assert config.max_workers_per_partition == 3
    config = await client.configure_queue(QUEUE, global_max_running=10)
    assert config.max_workers_per_partition == 3  # not given: kept
    assert (await client.get_queue_config(QUEUE)).max_workers_per_partition == 3
    config = await client.configure_queue(QUEUE, max_workers_per_partition=None)
    assert config.max_workers_per_partition is None and config.global_max_running == 10


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "2", 1_000_001])
async def test_a_bad_cap_is_refused_by_name(client, value):
    with pytest.raises(
        awa.ValidationError, match=r"^max_workers_per_partition: must be an integer from 1"
    ):
        await client.configure_queue(QUEUE, max_workers_per_partition=value)
