"""Attempt records: every run of a job, with its outcome, start, end,
worker and error, from the job row alone; and ``awa jobs show``."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from awa.cli.jobs import describe_job
from tests.acceptance.test_hooks import orphan
from tests.support import FAST_WORKER, wait_for_state


class Report(BaseModel):
    n: int


async def test_a_job_tells_the_story_of_each_attempt(client, conn):
    runs = 0

    @client.task(Report, timeout=0.2)
    async def report(job):
        nonlocal runs
        runs += 1
        if runs == 1:
            raise ValueError("first try fails")
        if runs == 2:
            await asyncio.sleep(5)  # times out
        return None

    job = await client.insert(Report(n=1), max_attempts=5)
    await orphan(conn, job.id)  # attempt 1 was abandoned by a dead worker
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed", timeout=60)
    worker_id = client.worker.worker_id
    done = await client.get_job(job.id)
    outcomes = [(r.attempt, r.outcome) for r in done.attempts]
    assert outcomes == [(1, "abandoned"), (2, "failed"), (3, "timed_out"), (4, "succeeded")]
    abandoned, failed, timed_out, succeeded = done.attempts
    assert abandoned.worker_id == 987654321 and abandoned.error["type"] == "WorkerCrash"
    assert failed.worker_id == worker_id and failed.error["message"] == "first try fails"
    for record in (failed, timed_out, succeeded):
        assert record.started_at is not None and record.finished_at is not None
        assert record.started_at <= record.finished_at
    assert succeeded.finished_at == done.finalized_at and succeeded.error is None

    lines = describe_job(done, with_payload=False)
    assert lines[0].startswith(f"job {job.id}  kind report")
    assert "not shown" in lines[3]
    assert any("timed_out" in line and "AttemptTimeout" in line for line in lines)
    with_payload = describe_job(
        await client.get_job(job.id, include_payload=True), with_payload=True
    )
    assert '  args {"n": 1}' in with_payload


async def test_cancelling_a_queued_job_ends_no_attempt(client, conn):
    job = await client.insert(Report(n=2))
    cancelled = await client.cancel(job.id)
    assert cancelled is not None and cancelled.attempts == []
