"""PostgreSQL restarts (``-m fast``, ``-m immediate``) of a server the test
starts itself: workers reconnect on their own, every job completes with its
completion applied once, and no run lease is handed out twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg
import pytest

import awa
from awa import sql
from tests.processes import LEDGER_SQL
from tests.support import FAST_WORKER, eventually, finish_params

JOBS = 2000


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_worker_comes_through_a_server_restart(own_server, mode):
    conn = await asyncpg.connect(own_server.url)
    await conn.execute(LEDGER_SQL)
    runs: Counter[int] = Counter()
    try:
        async with awa.AsyncClient(own_server.url) as client:

            @client.task(dict, kind="work")
            async def work(job):
                runs[job.id] += 1
                await asyncio.sleep(0.002)

            await client.enqueue_many_copy([{}] * JOBS, kind="work")
            await client.start([("default", 20)], **FAST_WORKER)

            async def completed() -> int:
                try:
                    return int(await conn.fetchval("SELECT count(*) FROM test_completions"))
                except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                    return 0

            await eventually(lambda: _at_least(completed, JOBS // 4), timeout=60)
            own_server.restart(mode)
            restarted_at = time.monotonic()
            conn = await asyncpg.connect(own_server.url)
            before = await completed()
            await eventually(lambda: _at_least(completed, before + 1), timeout=30)
            recovery_s = time.monotonic() - restarted_at
            await eventually(lambda: _at_least(completed, JOBS), timeout=90)
            print(f"{mode} restart: first completion after {recovery_s:.2f}s")
            worker = client.worker
            assert worker is not None and worker.healthy
    finally:
        await conn.close()
    conn = await asyncpg.connect(own_server.url)
    try:
        per_job = await conn.fetch(
            """SELECT jobs.id, jobs.state::text AS state, count(c.job_id) AS completions
               FROM awa.jobs LEFT JOIN test_completions c ON c.job_id = jobs.id
               GROUP BY jobs.id, jobs.state"""
        )
    finally:
        await conn.close()
    assert len(per_job) == JOBS
    assert {(row["state"], row["completions"]) for row in per_job} == {("completed", 1)}
    assert set(runs) == {row["id"] for row in per_job}


async def _at_least(count, target: int) -> bool:
    return await count() >= target


async def test_no_run_lease_is_handed_out_twice_after_an_immediate_restart(own_server):
    conn = await asyncpg.connect(own_server.url)
    try:
        job_id = await conn.fetchval("INSERT INTO awa.jobs (kind) VALUES ('k') RETURNING id")
        worker_id = await conn.fetchval(
            "INSERT INTO awa.workers (hostname, pid, queues) VALUES ('h', 1, '{default}') "
            "RETURNING id"
        )
        # The claim commits asynchronously (it says so itself): the immediate
        # stop comes before the WAL writer flushed it, so the server forgets it.
        [first] = await conn.fetch(
            sql.query("jobs_claim"), ["default"], [1], worker_id, [], [], [None]
        )
        await conn.close()
        own_server.restart("immediate")
        conn = await asyncpg.connect(own_server.url)
        assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job_id) == (
            "available"
        ), "the claim should have been lost with the crash"
        [second] = await conn.fetch(
            sql.query("jobs_claim"), ["default"], [1], worker_id, [], [], [None]
        )
        assert second["id"] == first["id"] == job_id
        assert second["run_lease"] != first["run_lease"], "a run lease was handed out twice"
        # The forgotten attempt's outcome cannot finish the new one.
        applied = await conn.fetchval(
            sql.query("jobs_finish_batch"),
            *finish_params([job_id], [first["run_lease"]], ["completed"]),
        )
        assert applied == 0
    finally:
        await conn.close()
