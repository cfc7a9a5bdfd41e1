"""Lanes, end to end: a worker's leader sweeps each lane, so a job left
behind its lane's hint (as a claim that rolled back leaves its jobs) is run
without anyone telling the worker of it."""

from __future__ import annotations

import asyncio

from tests.support import FAST_WORKER, wait_for_state


async def test_a_job_left_behind_the_hint_is_found_by_the_sweep_and_run(client, conn):
    ran: list[int] = []
    done = asyncio.Event()

    @client.task(dict, kind="lane_probe")
    async def probe(job):
        ran.append(job.args["n"])
        if job.args["n"] == 2:
            done.set()

    first = await client.insert({"n": 1}, kind="lane_probe")
    await client.start([("default", 2)], **FAST_WORKER, sweep_interval=0.1)
    await wait_for_state(conn, first.id, "completed")
    # Taken back with the triggers off: no lowering, no notification, and
    # the hint has passed the job. Only the sweep can find it now.
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute(
            "UPDATE awa.jobs SET state = 'available', args = '{\"n\": 2}' WHERE id = $1",
            first.id,
        )
    await asyncio.wait_for(done.wait(), 10)
    assert ran == [1, 2]
    worker = client.worker
    assert worker is not None and worker.sweeper.found >= 1
