"""Attempt deadlines: a task's or queue's timeout cancels a handler still
running then (async) or records the attempt as timed out (sync), and
maintenance rescues attempts past their deadline whose worker hung or died."""

from __future__ import annotations

import asyncio
import datetime
import json
import time

import pytest
from pydantic import BaseModel

import awa
from awa import events
from tests.acceptance.test_hooks import Recorder
from tests.support import FAST_WORKER, job_row, wait_for_state


class Render(BaseModel):
    pages: int


async def test_an_async_handler_past_its_task_timeout_is_cancelled_and_retried(client, conn):
    interrupted = asyncio.Event()

    @client.task(Render, timeout=0.2)
    async def render(job):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            interrupted.set()
            raise

    job = await client.insert(Render(pages=1), max_attempts=2)
    await client.start([("default", 2)], **FAST_WORKER)
    await asyncio.wait_for(interrupted.wait(), 15)
    row = await wait_for_state(conn, job.id, "failed", timeout=30)
    entries = json.loads(row["errors"])
    assert [entry["type"] for entry in entries] == ["AttemptTimeout", "AttemptTimeout"]
    assert "0.2s deadline" in entries[0]["message"]
    assert row["attempt"] == 2


async def test_the_queue_timeout_applies_and_the_task_timeout_overrides_it(client, conn):
    @client.task(Render)
    async def render(job):
        await asyncio.sleep(0.5)

    @client.task(dict, kind="quick", timeout=5)
    async def quick(job):
        await asyncio.sleep(0.5)

    slow = await client.insert(Render(pages=2), max_attempts=1)
    fine = await client.insert({}, kind="quick", max_attempts=1)
    await client.start([("default", 2)], queue_timeouts={"default": 0.1}, **FAST_WORKER)
    row = await wait_for_state(conn, slow.id, "failed")
    assert json.loads(row["errors"])[0]["type"] == "AttemptTimeout"
    await wait_for_state(conn, fine.id, "completed")


async def test_a_sync_handler_past_its_deadline_is_recorded_as_timed_out(client, conn):
    @client.task(Render, timeout=0.1)
    def render(job):
        time.sleep(0.6)

    job = await client.insert(Render(pages=3), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed")
    assert json.loads(row["errors"])[0]["type"] == "AttemptTimeout"


async def test_timeouts_are_checked_when_configured(client):
    with pytest.raises(awa.ConfigurationError, match="timeout"):
        client.task(Render, timeout=0)
    client.task(Render)(lambda job: None)
    with pytest.raises(awa.ConfigurationError, match="does not serve"):
        await client.start([("default", 1)], queue_timeouts={"other": 5})


async def past_deadline(conn, job_id: int, worker_id: int) -> None:
    """Makes the job look claimed by ``worker_id`` with a deadline long past."""
    await conn.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = run_lease + 1, "
        "worker_id = $2, attempted_at = now() - interval '1 minute', "
        "attempt_deadline_at = now() - interval '30 seconds' WHERE id = $1",
        job_id,
        worker_id,
    )


@pytest.mark.parametrize("worker", ["hung", "killed"])
async def test_maintenance_rescues_an_attempt_past_its_deadline(client, conn, worker):
    recorder = Recorder()
    client.on_event(Render, recorder)
    client.on_rescued_enqueue(
        Render, lambda args, job, reason: awa.EnqueueRequest({"why": reason}, kind="note")
    )

    @client.task(Render, queue="elsewhere")
    async def render(job):
        return None

    job = await client.insert(Render(pages=4), max_attempts=3)
    # The maintenance worker serves another queue: the job is never claimed
    # again during the test, only rescued.
    await client.start([("maintenance", 1)], **FAST_WORKER)
    live_worker = client._worker.worker_id
    await past_deadline(conn, job.id, live_worker if worker == "hung" else 987654321)
    [rescued] = await recorder.wait_for(events.Rescued)
    assert rescued.reason is events.RescueReason.DeadlineExceeded
    row = await job_row(conn, job.id)
    assert row["state"] == "retryable" and row["crashes"] == 0
    assert json.loads(row["errors"])[-1]["type"] == "AttemptTimeout"
    [note] = await conn.fetch("SELECT args FROM awa.jobs WHERE kind = 'note'")
    assert json.loads(note["args"]) == {"why": "deadline_exceeded"}


async def test_a_jobs_own_timeout_overrides_its_tasks(client, conn):
    @client.task(Render, timeout=30)
    async def render(job):
        await asyncio.sleep(5)

    job = await client.insert(Render(pages=5), timeout=0.2, max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed")
    assert row["timeout_ms"] == 200
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "AttemptTimeout" and entry["reason"] == "deadline_exceeded"


async def test_a_job_past_its_deadline_never_runs_and_fails(client, conn):
    recorder = Recorder()
    client.on_event(Render, recorder)
    ran: list[int] = []

    @client.task(Render)
    async def render(job):
        ran.append(job.id)

    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.3)
    job = await client.insert(Render(pages=6), run_at=datetime.timedelta(seconds=5), deadline=soon)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed")
    assert ran == [] and row["failure_reason"] == "deadline_exceeded"
    [letter] = await client.list_dlq(reason="deadline_exceeded")
    assert letter.job.id == job.id
    [rescued] = await recorder.wait_for(events.Rescued)
    assert rescued.reason is events.RescueReason.DeadlineExceeded


async def test_the_deadline_also_ends_a_running_attempt(client, conn):
    @client.task(Render)
    async def render(job):
        await asyncio.sleep(30)

    job = await client.insert(
        Render(pages=7), deadline=datetime.timedelta(seconds=0.5), max_attempts=5
    )
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed", timeout=30)
    types = [entry["type"] for entry in json.loads(row["errors"])]
    assert types[0] == "AttemptTimeout" and row["failure_reason"] == "deadline_exceeded"


async def test_bulk_paths_carry_timeouts_and_deadlines(client, conn):
    deadline = datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC)
    copied = await client.insert_many_copy(
        [Render(pages=1), Render(pages=2)], opts=[{"timeout": 2.5}, {"deadline": deadline}]
    )
    many = await client.insert_many([Render(pages=3)], timeout=datetime.timedelta(seconds=4))
    rows = await conn.fetch(
        "SELECT timeout_ms, deadline_at FROM awa.jobs WHERE id = ANY ($1) ORDER BY id",
        [*(job.id for job in copied), many[0].id],
    )
    assert [(r["timeout_ms"], r["deadline_at"]) for r in rows] == [
        (2500, None),
        (None, deadline),
        (4000, None),
    ]
    with pytest.raises(awa.ValidationError, match="timeout"):
        await client.insert(Render(pages=4), timeout=-1)
    with pytest.raises(awa.ValidationError, match="deadline"):
        await client.insert(Render(pages=4), deadline=datetime.datetime(2031, 1, 1))
