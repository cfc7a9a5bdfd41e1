"""Callbacks beyond parking: early resolution while the handler still runs,
deadline heartbeats, callback-timeout rescue (both ways) and callbacks that
died with their attempt."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import events
from tests.acceptance.test_hooks import Recorder, orphan
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state


class Payout(BaseModel):
    amount: int


async def test_a_callback_resolved_while_the_handler_runs_wins_over_its_outcome(client, conn):
    recorder = Recorder()
    client.on_event(Payout, recorder)
    registered: asyncio.Queue[uuid.UUID] = asyncio.Queue()
    resolved = asyncio.Event()

    @client.task(Payout)
    async def payout(job):
        callback = await job.register_callback(timeout_seconds=600)
        await registered.put(callback)
        await resolved.wait()  # the external system answered before we parked
        return awa.WaitForCallback(callback)

    job = await client.insert(Payout(amount=3))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(registered.get(), 15)
    done = await client.complete_external(callback, {"ok": True})
    assert done.state is awa.JobState.Completed and done.callback_id is None
    resolved.set()
    [completed] = await recorder.wait_for(events.Completed)
    assert completed.duration.total_seconds() == 0
    await eventually(lambda: _worker_stale_outcomes(client))
    row = await job_row(conn, job.id)
    assert row["state"] == "completed" and row["worker_id"] is None
    assert json.loads(row["metadata"]) == {"callback_result": {"ok": True}}
    assert not recorder.of(events.WaitingForCallback)
    with pytest.raises(awa.CallbackNotFound):
        await client.fail_external(callback, "too late")


async def _worker_stale_outcomes(client) -> int:
    return client._worker.completer.stale


async def test_heartbeat_callback_moves_the_deadline(client, conn):
    parked: asyncio.Queue[uuid.UUID] = asyncio.Queue()

    @client.task(Payout)
    async def payout(job):
        callback = await job.register_callback(timeout_seconds=5)
        await parked.put(callback)
        return awa.WaitForCallback(callback)

    job = await client.insert(Payout(amount=1))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(parked.get(), 15)
    before = (await wait_for_state(conn, job.id, "waiting_external"))["callback_timeout_at"]
    extended = await client.heartbeat_callback(callback, 3600)
    assert extended.callback_timeout_at is not None
    assert (extended.callback_timeout_at - before).total_seconds() > 3000
    assert extended.state is awa.JobState.WaitingExternal
    with pytest.raises(awa.CallbackNotFound):
        await client.heartbeat_callback(uuid.uuid4(), 60)
    with pytest.raises(awa.ValidationError, match="timeout_seconds"):
        await client.heartbeat_callback(callback, 0)


async def park_briefly(client, *, max_attempts: int, timeout_s: float = 0.2) -> awa.Job[Any]:
    """A handler that parks on its first attempt with a short deadline and
    completes on any later one."""

    @client.task(Payout)
    async def payout(job):
        if job.attempt == 1:
            callback = await job.register_callback(timeout_seconds=timeout_s)
            return awa.WaitForCallback(callback)
        return None

    return await client.insert(Payout(amount=2), max_attempts=max_attempts)


async def test_an_expired_callback_is_retried_while_attempts_remain(client, conn):
    recorder = Recorder()
    client.on_event(Payout, recorder)
    client.on_rescued_enqueue(
        Payout, lambda args, job, reason: awa.EnqueueRequest({"why": reason}, kind="note")
    )
    job = await park_briefly(client, max_attempts=3)
    await client.start([("default", 1)], **FAST_WORKER)
    [rescued] = await recorder.wait_for(events.Rescued)
    assert rescued.reason is events.RescueReason.CallbackTimeout
    assert rescued.job.state is awa.JobState.Retryable and rescued.job.callback_id is None
    [entry] = rescued.job.errors
    assert entry["type"] == "CallbackTimeout" and entry["attempt"] == 1
    # The retry runs the handler again, which completes this time.
    row = await wait_for_state(conn, job.id, "completed", timeout=30)
    assert row["attempt"] == 2
    [note] = await conn.fetch("SELECT args FROM awa.jobs WHERE kind = 'note'")
    assert json.loads(note["args"]) == {"why": "callback_timeout"}


async def test_an_expired_callback_without_attempts_left_fails(client, conn):
    recorder = Recorder()
    client.on_event(Payout, recorder)
    job = await park_briefly(client, max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed")
    assert row["callback_id"] is None and row["finalized_at"] is not None
    assert json.loads(row["errors"])[-1]["type"] == "CallbackTimeout"
    [rescued] = await recorder.wait_for(events.Rescued)
    assert rescued.reason is events.RescueReason.CallbackTimeout
    assert rescued.job.state is awa.JobState.Failed


async def test_the_callback_of_a_rescued_attempt_is_gone(client, conn):
    @client.task(Payout)
    async def payout(job):
        return None

    job = await client.insert(Payout(amount=4), run_at=_far_future())
    callback = uuid.uuid4()
    await orphan(conn, job.id)
    await conn.execute(
        "UPDATE awa.jobs SET callback_id = $2, callback_timeout_at = now() + interval '1 hour' "
        "WHERE id = $1",
        job.id,
        callback,
    )
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "retryable")
    assert row["callback_id"] is None
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(callback)


def _far_future() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)


class WaitsInPlace:
    """A handler that registers a callback, hands it out, and waits in place
    for its payload (optionally only after ``go`` is set)."""

    def __init__(self, client, *, timeout_s: float = 600, wait_at_once: bool = True) -> None:
        self.callbacks: asyncio.Queue[uuid.UUID] = asyncio.Queue()
        self.payloads: list[Any] = []
        self.errors: list[BaseException] = []
        self.go = asyncio.Event()
        if wait_at_once:
            self.go.set()

        @client.task(Payout)
        async def payout(job):
            callback = await job.register_callback(timeout_seconds=timeout_s)
            await self.callbacks.put(callback)
            await self.go.wait()
            try:
                self.payloads.append(await job.wait_for_callback(callback))
            except awa.AttemptLost as error:
                self.errors.append(error)
                raise

    async def callback(self) -> uuid.UUID:
        return await asyncio.wait_for(self.callbacks.get(), 15)


async def test_resume_external_hands_the_payload_to_the_waiting_handler(client, conn):
    recorder = Recorder()
    client.on_event(Payout, recorder)
    handler = WaitsInPlace(client)
    job = await client.insert(Payout(amount=9))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await handler.callback()
    parked = await wait_for_state(conn, job.id, "waiting_external")
    assert parked["worker_id"] is not None  # its worker still holds it
    resumed = await client.resume_external(callback, {"approved": True})
    assert resumed.state is awa.JobState.Running and resumed.callback_id is None
    row = await wait_for_state(conn, job.id, "completed")
    assert handler.payloads == [{"approved": True}]
    assert row["attempt"] == 1
    assert json.loads(row["metadata"]) == {"callback_result": {"approved": True}}
    await recorder.wait_for(events.Completed)
    # Started again when the job re-entered execution; nothing for parking.
    assert len(await recorder.wait_for(events.Started, 2)) == 2
    assert not recorder.of(events.WaitingForCallback)
    with pytest.raises(awa.CallbackNotFound):
        await client.resume_external(callback, {"approved": False})


async def test_a_resume_that_arrives_before_the_handler_waits_is_kept_for_it(client, conn):
    handler = WaitsInPlace(client, wait_at_once=False)
    job = await client.insert(Payout(amount=1))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await handler.callback()
    early = await client.resume_external(callback, [1, 2])
    assert early.state is awa.JobState.Running
    handler.go.set()
    await wait_for_state(conn, job.id, "completed")
    assert handler.payloads == [[1, 2]]


async def test_resume_refuses_a_job_parked_by_returning_wait_for_callback(client, conn):
    parked: asyncio.Queue[uuid.UUID] = asyncio.Queue()

    @client.task(Payout)
    async def payout(job):
        callback = await job.register_callback()
        await parked.put(callback)
        return awa.WaitForCallback(callback)

    job = await client.insert(Payout(amount=1))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(parked.get(), 15)
    await wait_for_state(conn, job.id, "waiting_external")
    with pytest.raises(awa.CallbackNotResumable, match="complete_external"):
        await client.resume_external(callback, None)
    assert (await job_row(conn, job.id))["state"] == "waiting_external"
    with pytest.raises(awa.CallbackNotFound):
        await client.resume_external(uuid.uuid4(), None)


async def test_a_waiting_handler_learns_its_job_was_completed_by_the_callback(client, conn):
    handler = WaitsInPlace(client)
    job = await client.insert(Payout(amount=1))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await handler.callback()
    await wait_for_state(conn, job.id, "waiting_external")
    await client.complete_external(callback, {"done": "elsewhere"})
    await eventually(lambda: _resolved(handler))
    assert isinstance(handler.errors[0], awa.AttemptLost)
    assert "completed" in str(handler.errors[0])
    await eventually(lambda: _worker_stale_outcomes(client))
    assert (await job_row(conn, job.id))["state"] == "completed"


async def _resolved(handler: WaitsInPlace) -> bool:
    return bool(handler.errors or handler.payloads)


async def test_a_waiting_handler_whose_deadline_passes_loses_the_job(client, conn):
    handler = WaitsInPlace(client, timeout_s=0.3)
    job = await client.insert(Payout(amount=1), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    await handler.callback()
    row = await wait_for_state(conn, job.id, "failed")
    assert json.loads(row["errors"])[-1]["type"] == "CallbackTimeout"
    await eventually(lambda: _resolved(handler))
    assert isinstance(handler.errors[0], awa.AttemptLost)


async def test_an_early_resume_then_returning_wait_for_callback_parks_the_job(client, conn):
    """resume_external is for handlers that wait in place; one that returns
    WaitForCallback after an early resume must not leave the job running
    with nobody to finish it: it parks, and can still be resolved."""
    callbacks: asyncio.Queue[uuid.UUID] = asyncio.Queue()
    go = asyncio.Event()

    @client.task(Payout)
    async def payout(job):
        callback = await job.register_callback()
        await callbacks.put(callback)
        await go.wait()
        return awa.WaitForCallback(callback)

    job = await client.insert(Payout(amount=5))
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(callbacks.get(), 15)
    await client.resume_external(callback, {"early": True})
    with pytest.raises(awa.CallbackNotFound):
        await client.resume_external(callback, {"twice": True})
    go.set()
    row = await wait_for_state(conn, job.id, "waiting_external")
    assert row["callback_id"] == callback
    assert json.loads(row["metadata"]) == {"callback_result": {"early": True}}
    done = await client.complete_external(callback, {"late": True})
    assert done.state is awa.JobState.Completed
