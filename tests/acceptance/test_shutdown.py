"""Graceful shutdown: finish what runs, write every outcome, give back the rest."""

from __future__ import annotations

import asyncio

from tests.support import FAST_WORKER, eventually, states


async def test_shutdown_lets_running_jobs_finish_and_loses_no_outcome(client, conn):
    finished: list[int] = []
    started = asyncio.Event()

    @client.task(dict, kind="work")
    async def work(job):
        started.set()
        await asyncio.sleep(0.2)
        finished.append(job.id)

    await client.insert_many([{}] * 30, kind="work")
    await client.start([("default", 10)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 10)
    await client.shutdown(timeout=10)

    found = await states(conn)
    assert found.get("running", 0) == 0
    assert found.get("completed", 0) == len(finished) >= 10
    assert found.get("completed", 0) + found.get("available", 0) == 30
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_jobs_still_running_at_the_timeout_are_given_back(client, conn):
    started = asyncio.Event()
    cancelled: list[int] = []

    @client.task(dict, kind="stuck")
    async def stuck(job):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(job.id)
            raise

    job = await client.insert({}, kind="stuck")
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 10)
    await client.shutdown(timeout=0.1)

    assert cancelled == [job.id]
    row = await conn.fetchrow(
        "SELECT state::text, attempt, worker_id, errors FROM awa.jobs WHERE id = $1", job.id
    )
    assert (row["state"], row["attempt"], row["worker_id"], row["errors"]) == (
        "available",
        0,
        None,
        None,
    )


async def test_a_released_job_is_picked_up_by_the_next_worker(client, conn, database_url):
    import awa

    started = asyncio.Event()

    leases: list[int] = []

    @client.task(dict, kind="handover")
    async def first(job):
        leases.append(job.run_lease)
        started.set()
        await asyncio.sleep(3600)

    job = await client.insert({}, kind="handover")
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 10)
    await client.shutdown(timeout=0)

    async with awa.AsyncClient(database_url) as successor:

        @successor.task(dict, kind="handover")
        async def second(job):
            return None

        await successor.start([("default", 1)], **FAST_WORKER)

        async def completed() -> bool:
            return (await successor.get_job(job.id)).state is awa.JobState.Completed

        await eventually(completed)
        await successor.shutdown()
    row = await conn.fetchrow("SELECT attempt, run_lease FROM awa.jobs WHERE id = $1", job.id)
    assert row["attempt"] == 1, "the released attempt was not counted"
    assert row["run_lease"] == leases[0] + 1


async def test_sync_handlers_are_waited_for_too(client, conn):
    import threading

    gate = threading.Event()
    entered = threading.Event()

    @client.task(dict, kind="blocking")
    def blocking(job):
        entered.set()
        gate.wait(10)

    await client.insert({}, kind="blocking")
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
    shutdown = asyncio.create_task(client.shutdown(timeout=10))
    await asyncio.sleep(0.05)
    assert not shutdown.done()
    gate.set()
    await shutdown
    assert await states(conn) == {"completed": 1}


async def test_shutdown_twice_and_without_start_is_harmless(client):
    await client.shutdown()
    await client.shutdown()
