"""What the worker claims, when, and how many at once."""

from __future__ import annotations

import asyncio
import collections

import awa
from tests.support import FAST_WORKER, wait_for_state, wait_until_settled


async def test_max_workers_is_never_exceeded_per_queue(client, conn):
    running: collections.Counter[str] = collections.Counter()
    peak: collections.Counter[str] = collections.Counter()

    @client.task(dict, kind="slow")
    async def slow(job):
        running[job.queue] += 1
        peak[job.queue] = max(peak[job.queue], running[job.queue])
        await asyncio.sleep(0.02)
        running[job.queue] -= 1

    await client.insert_many([{}] * 40, kind="slow", queue="narrow")
    await client.insert_many([{}] * 40, kind="slow", queue="wide")
    await client.start([("narrow", 3), ("wide", 7)], **FAST_WORKER)
    await wait_until_settled(conn, 80)
    await client.shutdown()
    assert peak == {"narrow": 3, "wide": 7}


async def test_global_max_workers_caps_all_queues_together(client, conn):
    running = 0
    peak = 0

    @client.task(dict, kind="slow")
    async def slow(job):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    for queue in ("a", "b", "c"):
        await client.insert_many([{}] * 20, kind="slow", queue=queue)
    await client.start([("a", 4), ("b", 4), ("c", 4)], global_max_workers=5, **FAST_WORKER)
    await wait_until_settled(conn, 60)
    await client.shutdown()
    assert peak == 5


async def test_jobs_run_most_urgent_first_then_oldest(client, conn):
    order: list[str] = []

    @client.task(dict, kind="ordered")
    async def ordered(job):
        order.append(job.args["name"])

    await client.insert({"name": "p3"}, kind="ordered", priority=3)
    await client.insert({"name": "p2-second"}, kind="ordered")
    await client.insert({"name": "p1"}, kind="ordered", priority=1)
    await client.insert({"name": "p4"}, kind="ordered", priority=4)
    await client.insert({"name": "p2-third"}, kind="ordered")
    await client.insert({"name": "p2-first"}, kind="ordered")
    await conn.execute(
        "UPDATE awa.jobs SET run_at = now() - interval '1 minute' WHERE args->>'name' = 'p2-first'"
    )
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_until_settled(conn, 6)
    await client.shutdown()
    assert order == ["p1", "p2-first", "p2-second", "p2-third", "p3", "p4"]


async def test_a_notification_wakes_an_idle_worker_without_polling(client, conn):
    @client.task(dict, kind="wake")
    async def wake(job):
        return None

    await client.start([("default", 2)], **{**FAST_WORKER, "poll_interval": 3600})
    worker = client.worker
    assert worker is not None
    await asyncio.wait_for(worker.notifier.listening.wait(), 10)
    claims_before = worker.producer.claims
    job = await client.insert({}, kind="wake")
    # Polling would take an hour; only the notification can start it.
    await wait_for_state(conn, job.id, "completed", timeout=10)
    assert worker.notifier.received >= 1
    assert worker.producer.claims > claims_before
    await client.shutdown()


async def test_scheduled_jobs_run_once_due(client, conn):
    import datetime

    @client.task(dict, kind="later")
    async def later(job):
        return None

    job = await client.insert({}, kind="later", run_at=datetime.timedelta(seconds=0.3))
    assert job.state is awa.JobState.Scheduled
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "completed")
    await client.shutdown()
    assert row["attempted_at"] >= row["run_at"]


async def test_queues_the_worker_does_not_serve_are_left_alone(client, conn):
    @client.task(dict, kind="k")
    async def handler(job):
        return None

    served = await client.insert({}, kind="k", queue="mine")
    other = await client.insert({}, kind="k", queue="theirs")
    await client.start([("mine", 1)], **FAST_WORKER)
    await wait_for_state(conn, served.id, "completed")
    await client.shutdown()
    assert (await client.get_job(other.id)).state is awa.JobState.Available


async def test_polling_finds_jobs_inserted_without_a_notification(client, conn):
    @client.task(dict, kind="raw")
    async def raw(job):
        return None

    await client.start([("default", 1)], **{**FAST_WORKER, "poll_interval": 0.1})
    worker = client.worker
    assert worker is not None
    await asyncio.wait_for(worker.notifier.listening.wait(), 10)
    received = worker.notifier.received
    # Plain SQL, as another service might write it: no pg_notify.
    job_id = await conn.fetchval("INSERT INTO awa.jobs (kind) VALUES ('raw') RETURNING id")
    await wait_for_state(conn, job_id, "completed")
    await client.shutdown()
    assert worker.notifier.received == received


async def test_outcomes_are_written_in_batches_by_size(client, conn):
    @client.task(dict, kind="quick")
    async def quick(job):
        return None

    await client.insert_many([{}] * 40, kind="quick")
    # The age trigger is far away: only the size trigger can flush.
    await client.start([("default", 20)], flush_batch_size=10, flush_interval=3600, **FAST_WORKER)
    await wait_until_settled(conn, 40)
    worker = client.worker
    assert worker is not None
    flushes = worker.completer.flushes
    await client.shutdown()
    assert flushes == 4
