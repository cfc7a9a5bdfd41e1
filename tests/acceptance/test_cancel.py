"""Cancellation on request: queued, scheduled, parked and running jobs, the
running handler told (and interrupted when it opted in), follow-ups and the
Cancelled event, and cancellation by unique key."""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import events
from tests.acceptance.test_hooks import Recorder
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state


class Export(BaseModel):
    report: str


def later() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)


async def test_queued_and_scheduled_jobs_are_cancelled_at_once_with_event_and_follow_up(
    client, conn
):
    recorder = Recorder()
    client.on_event(Export, recorder)
    client.on_cancelled_enqueue(
        Export, lambda args, job, reason: awa.EnqueueRequest({"why": reason}, kind="note")
    )
    queued = await client.insert(Export(report="a"))
    scheduled = await client.insert(Export(report="b"), run_at=later())
    for job in (queued, scheduled):
        cancelled = await client.cancel(job.id, reason="customer closed the account")
        assert cancelled is not None and cancelled.state is awa.JobState.Cancelled
        assert cancelled.finalized_at is not None
        assert cancelled.errors[-1]["message"] == "customer closed the account"
    found = await recorder.wait_for(events.Cancelled, 2)
    assert {event.job.id for event in found} == {queued.id, scheduled.id}
    assert found[0].reason == "customer closed the account"
    notes = await conn.fetch("SELECT args FROM awa.jobs WHERE kind = 'note'")
    assert [json.loads(n["args"]) for n in notes] == [{"why": "customer closed the account"}] * 2


async def test_a_finished_job_is_not_cancelled_and_an_unknown_one_raises(client, conn):
    job = await client.insert(Export(report="c"))
    assert await client.cancel(job.id) is not None
    assert await client.cancel(job.id) is None  # already finished
    with pytest.raises(awa.JobNotFound):
        await client.cancel(10**12)
    with pytest.raises(awa.ValidationError, match="reason"):
        await client.cancel(job.id, reason="")


async def test_a_running_handler_sees_is_cancelled_and_its_outcome_is_refused(client, conn):
    started = asyncio.Event()
    seen: list[bool] = []

    @client.task(Export)
    async def export(job):
        started.set()
        while not job.is_cancelled():  # noqa: ASYNC110 - a handler polling between steps
            await asyncio.sleep(0.01)
        seen.append(True)
        # Returning normally would complete; the guard refuses it.

    job = await client.insert(Export(report="d"))
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 15)
    await client.cancel(job.id)
    await eventually(lambda: _nonempty(seen))
    await eventually(lambda: _stale(client))
    row = await job_row(conn, job.id)
    assert row["state"] == "cancelled" and row["worker_id"] is None


async def test_a_handler_that_opted_in_is_interrupted_and_frees_its_slot(client, conn):
    interrupted = asyncio.Event()
    started = asyncio.Event()

    @client.task(Export, interrupt_on_cancel=True)
    async def export(job):
        if job.args.report == "slow":
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                interrupted.set()
                raise

    slow = await client.insert(Export(report="slow"))
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 15)
    after = await client.insert(Export(report="next"))
    await client.cancel(slow.id)
    await asyncio.wait_for(interrupted.wait(), 15)
    await wait_for_state(conn, after.id, "completed")  # the only slot was freed
    row = await job_row(conn, slow.id)
    assert row["state"] == "cancelled"
    assert [entry["type"] for entry in json.loads(row["errors"])] == ["Cancel"]


async def test_a_parked_job_is_cancelled_and_its_callback_dies(client, conn):
    recorder = Recorder()
    client.on_event(Export, recorder)
    callbacks: asyncio.Queue[uuid.UUID] = asyncio.Queue()

    @client.task(Export)
    async def export(job):
        callback = await job.register_callback()
        await callbacks.put(callback)
        return awa.WaitForCallback(callback)

    job = await client.insert(Export(report="e"))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(callbacks.get(), 15)
    await wait_for_state(conn, job.id, "waiting_external")
    await client.cancel(job.id, reason="no longer needed")
    [cancelled] = await recorder.wait_for(events.Cancelled)
    assert cancelled.reason == "no longer needed"
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(callback)


async def test_cancel_by_unique_key_cancels_the_job_that_holds_the_key(client, conn):
    held = await client.insert(Export(report="monthly"), unique_opts=awa.UniqueOpts())
    other = await client.insert(Export(report="weekly"), unique_opts=awa.UniqueOpts())
    cancelled = await client.cancel_by_unique_key(Export(report="monthly"))
    assert [job.id for job in cancelled] == [held.id]
    assert (await job_row(conn, other.id))["state"] == "available"
    assert await client.cancel_by_unique_key(Export(report="monthly")) == []


async def _nonempty(items: list[Any]) -> bool:
    return bool(items)


async def _stale(client) -> int:
    return client._worker.completer.stale
