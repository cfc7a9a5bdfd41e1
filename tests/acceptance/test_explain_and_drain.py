"""``client.explain(job_id)`` says why a job is not running, with a reason
per cause; ``client.drain_queue(queue)`` waits for what spec 002's drain
waits for, and skips what it skips."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import awa
from awa import ExplainReason
from tests.support import FAST_WORKER, wait_for_state

QUEUE = "explained"


async def _live_worker(conn, queue: str = QUEUE) -> None:
    """A worker row that serves ``queue`` and claims nothing (none runs)."""
    await conn.execute(
        "INSERT INTO awa.workers (hostname, pid, queues) VALUES ('elsewhere', 1, $1)", [queue]
    )


async def test_an_unknown_job_is_not_found(client, conn):
    with pytest.raises(awa.JobNotFound):
        await client.explain(424242)


async def test_a_job_due_later_is_scheduled_until_its_run_at(client, conn):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE, run_at=later)
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.SCHEDULED
    assert explained.until == later
    assert str(job.id) in explained.message


async def test_a_due_job_nobody_serves_says_no_worker(client, conn):
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE)
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.NO_WORKER
    assert QUEUE in explained.message


async def test_a_paused_queue_comes_before_every_other_cause(client, conn):
    await _live_worker(conn)
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE)
    await client.pause_queue(QUEUE, paused_by="ops")
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.QUEUE_PAUSED
    assert "paused by ops" in explained.message


async def test_a_quarantined_job_says_so(client, conn):
    await _live_worker(conn)
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE)
    await conn.execute(
        "INSERT INTO awa.quarantine (fingerprint, kind, crashes, window_started_at, "
        "last_crash_at, last_job_id, quarantined_at, reason) "
        "SELECT awa.job_fingerprint(kind, args), kind, 3, now(), now(), id, now(), 'test' "
        "FROM awa.jobs WHERE id = $1",
        job.id,
    )
    assert (await client.explain(job.id)).reason is ExplainReason.QUARANTINED


async def test_a_job_behind_more_urgent_ones_counts_them_and_the_first_is_next(client, conn):
    await _live_worker(conn)
    urgent = await client.insert_many(
        [{"n": n} for n in range(3)], kind="k", queue=QUEUE, priority=1
    )
    waiting = await client.insert({"n": 9}, kind="k", queue=QUEUE, priority=4)
    explained = await client.explain(waiting.id)
    assert (explained.reason, explained.ahead) == (ExplainReason.BEHIND_OTHER_JOBS, 3)
    assert (await client.explain(urgent[0].id)).reason is ExplainReason.NEXT


async def test_running_and_finished_jobs(client, conn):
    release = asyncio.Event()

    @client.task(dict, kind="held", queue=QUEUE)
    async def held(job):
        await release.wait()

    job = await client.insert({"n": 1}, kind="held")
    await client.start([(QUEUE, 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "running")
    assert (await client.explain(job.id)).reason is ExplainReason.RUNNING
    release.set()
    await wait_for_state(conn, job.id, "completed")
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.FINISHED and "completed" in explained.message


async def test_a_full_ceiling_names_the_jobs_holding_it(client, conn):
    release = asyncio.Event()

    @client.task(dict, kind="held", queue=QUEUE)
    async def held(job):
        await release.wait()

    await client.configure_queue(QUEUE, global_max_running=1)
    holder = await client.insert({"n": 1}, kind="held")
    await client.start([(QUEUE, 4)], **FAST_WORKER)
    await wait_for_state(conn, holder.id, "running")
    waiting = await client.insert({"n": 2}, kind="held")
    try:
        explained = await client.explain(waiting.id)
        assert explained.reason is ExplainReason.CEILING_REACHED
        assert explained.holders == (holder.id,)
        assert f"jobs {holder.id} hold the slots" in explained.message
    finally:
        release.set()
    await wait_for_state(conn, waiting.id, "completed")


async def test_an_empty_token_bucket_says_when_the_next_token_comes(client, conn):
    await _live_worker(conn)
    await client.configure_queue(QUEUE, rate_limit=(0.01, 1))  # one token per 100 s
    await conn.execute(
        "UPDATE awa.queue_settings SET rate_tokens = 0, rate_tokens_at = now() WHERE queue = $1",
        QUEUE,
    )
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE)
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.RATE_LIMITED
    assert explained.until is not None
    wait = explained.until - dt.datetime.now(dt.UTC)
    assert dt.timedelta(seconds=90) < wait <= dt.timedelta(seconds=100)
    assert "rate limited (0.01/s, burst 1)" in explained.message


async def test_an_empty_rate_class_says_so(client, conn):
    await _live_worker(conn)
    await client.configure_rate_class("partner-api", rate=0.01, burst=1)
    await conn.execute("UPDATE awa.rate_classes SET tokens = 0, tokens_at = now()")
    job = await client.insert({"n": 1}, kind="k", queue=QUEUE, rate_class="partner-api")
    explained = await client.explain(job.id)
    assert explained.reason is ExplainReason.RATE_LIMITED
    assert "its rate class partner-api is rate limited (0.01/s, burst 1)" in explained.message


# ── drain ───────────────────────────────────────────────────────────────


async def test_drain_waits_for_due_running_and_retrying_jobs(client, conn):
    attempts: list[int] = []

    @client.task(dict, kind="drained", queue=QUEUE)
    async def drained(job):
        attempts.append(job.attempt)
        if job.args["n"] == 0 and job.attempt == 1:
            return awa.RetryAfter(1.0)  # waits for its backoff: still outstanding
        await asyncio.sleep(0.05)

    jobs = await client.insert_many([{"n": n} for n in range(10)], kind="drained")
    await client.start([(QUEUE, 4)], **FAST_WORKER)
    assert await client.drain_queue(QUEUE, timeout=60) == 10
    states = await conn.fetch("SELECT state FROM awa.jobs WHERE id = ANY($1)", [j.id for j in jobs])
    assert {row["state"] for row in states} == {"completed"}
    assert attempts.count(2) == 1


async def test_drain_skips_jobs_delayed_at_insert_that_never_ran(client, conn):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    await client.insert({"n": 1}, kind="k", queue=QUEUE, run_at=later)
    assert await client.drain_queue(QUEUE, timeout=5) == 0


async def test_drain_of_a_paused_queue_times_out_saying_why(client, conn):
    await client.insert({"n": 1}, kind="k", queue=QUEUE)
    await client.pause_queue(QUEUE)
    with pytest.raises(TimeoutError) as timed_out:
        await client.drain_queue(QUEUE, timeout=0.5)
    assert "1 jobs still outstanding (the queue is paused" in str(timed_out.value)


@pytest.mark.parametrize("timeout", [0, -1, "soon"])
async def test_drain_refuses_a_bad_timeout(client, conn, timeout):
    with pytest.raises(awa.ValidationError) as refused:
        await client.drain_queue(QUEUE, timeout=timeout)
    assert refused.value.field == "timeout"
