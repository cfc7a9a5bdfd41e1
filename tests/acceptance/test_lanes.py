"""Lanes, end to end: a worker's leader sweeps each lane, so a job left
behind its lane's hint (as a claim that rolled back leaves its jobs) is run
without anyone telling the worker of it."""

from __future__ import annotations

import asyncio

from awa import sql
from tests.support import FAST_WORKER


async def test_a_job_left_behind_the_hint_is_found_by_the_sweep_and_run(client, conn):
    ran: list[int] = []
    done = asyncio.Event()

    @client.task(dict, kind="lane_probe")
    async def probe(job):
        ran.append(job.args["n"])
        done.set()

    lost = await client.insert({"n": 1}, kind="lane_probe")
    # Claimed by another worker's claim, then given back with the triggers
    # off: no lowering, no notification, and the hint has passed the job.
    # Nothing but the sweep can find it now; a new leader's first pass
    # sweeps every lane from its start.
    await conn.fetchval(sql.query("lanes_open"), ["default"])
    elsewhere = await conn.fetchval(sql.query("workers_register"), "elsewhere", 1, ["default"])
    claimed = await conn.fetch(
        sql.query("jobs_claim"), ["default"], [10], elsewhere, [], [], [None]
    )
    assert [row["id"] for row in claimed] == [lost.id]
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = $1", lost.id)
    await client.start([("default", 2)], **FAST_WORKER, sweep_interval=0.1)
    await asyncio.wait_for(done.wait(), 10)
    assert ran == [1]
    worker = client.worker
    assert worker is not None and worker.sweeper.found >= 1
