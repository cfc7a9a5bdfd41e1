"""Prefetch: jobs claimed ahead of free slots, for queues of short handlers."""

from __future__ import annotations

import asyncio

from tests.support import FAST_WORKER, eventually, wait_for_state, wait_until_settled

SLOTS = 2


async def until(predicate) -> None:
    """Waits until ``predicate()`` holds (a check of the worker's own state)."""

    async def check():
        return predicate()

    await eventually(check)


async def _blocked_worker(client, conn, *, jobs: int, **settings):
    """A worker of SLOTS slots that has learnt its handlers are short (one
    quick job ran), then `jobs` jobs whose handlers wait for the returned
    event. Returns (event, the jobs, the names of the handlers that ran,
    peak handlers at once)."""
    release = asyncio.Event()
    ran: list[str] = []
    running = 0
    peak = 0

    @client.task(dict, kind="blocked")
    async def blocked(job):
        nonlocal running, peak
        ran.append(job.args["name"])
        if job.args["name"] == "warm-up":
            return
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    warm_up = await client.insert({"name": "warm-up"}, kind="blocked")
    await client.start([("default", SLOTS)], **{"prefetch": SLOTS, **FAST_WORKER, **settings})
    await wait_for_state(conn, warm_up.id, "completed")
    inserted = await client.insert_many(
        [{"name": f"job-{index}"} for index in range(jobs)], kind="blocked"
    )
    return release, inserted, ran, lambda: peak


async def test_short_handlers_prefetch_up_to_their_slots_and_never_run_more_at_once(client, conn):
    release, jobs, ran, peak = await _blocked_worker(client, conn, jobs=6)
    worker = client.worker
    assert worker is not None
    await until(lambda: worker.dispatcher.waiting("default") == SLOTS)
    claimed = await conn.fetchval(
        "SELECT count(*) FROM awa.jobs WHERE state = 'running' AND worker_id = $1",
        worker.worker_id,
    )
    assert claimed == 2 * SLOTS, "slots plus prefetch are claimed"
    assert len(ran) == 1 + SLOTS, "prefetched jobs wait for a slot"
    release.set()
    await wait_until_settled(conn, 7)
    await client.shutdown()
    assert peak() == SLOTS
    # Claimed in urgency order, run in that order: prefetch keeps it.
    assert ran == ["warm-up", *(f"job-{index}" for index in range(6))]
    assert {job.id for job in jobs} <= set(
        await conn.fetchval("SELECT array_agg(id) FROM awa.jobs WHERE state = 'completed'")
    )


async def test_shutdown_gives_back_prefetched_jobs_unrun(client, conn):
    release, jobs, ran, _peak = await _blocked_worker(client, conn, jobs=4)
    worker = client.worker
    assert worker is not None
    await until(lambda: worker.dispatcher.waiting("default") == SLOTS)
    shutdown = asyncio.create_task(client.shutdown(timeout=10))
    await asyncio.sleep(0.2)  # shutdown waits for the running handlers
    release.set()
    await shutdown
    assert ran == ["warm-up", "job-0", "job-1"], "no prefetched job starts during shutdown"
    rows = await conn.fetch(
        "SELECT state::text AS state, attempt FROM awa.jobs WHERE id = ANY($1) ORDER BY id",
        [job.id for job in jobs[SLOTS:]],
    )
    assert [(row["state"], row["attempt"]) for row in rows] == [("available", 0)] * 2


async def test_a_prefetched_job_cancelled_while_it_waits_never_runs(client, conn):
    release, jobs, ran, _peak = await _blocked_worker(client, conn, jobs=4)
    worker = client.worker
    assert worker is not None
    await until(lambda: worker.dispatcher.waiting("default") == SLOTS)
    waiting = jobs[SLOTS]
    assert await client.cancel(waiting.id) is not None
    await until(lambda: worker.dispatcher.waiting("default") == SLOTS - 1)
    release.set()
    await wait_until_settled(conn, 5)
    await client.shutdown()
    assert waiting.args["name"] not in ran
    await wait_for_state(conn, waiting.id, "cancelled")
    assert len(ran) == 4, "the warm-up and the three jobs not cancelled"


async def test_prefetch_zero_claims_only_free_slots(client, conn):
    release, _jobs, _ran, _peak = await _blocked_worker(client, conn, jobs=4, prefetch=0)
    worker = client.worker
    assert worker is not None
    await until(lambda: worker.dispatcher.running("default") == SLOTS)
    await asyncio.sleep(0.3)  # a claim would have come back by now
    assert worker.dispatcher.waiting("default") == 0
    claimed = await conn.fetchval(
        "SELECT count(*) FROM awa.jobs WHERE state = 'running' AND worker_id = $1",
        worker.worker_id,
    )
    assert claimed == SLOTS
    release.set()
    await wait_until_settled(conn, 5)
    await client.shutdown()
