"""Parking on a callback and resolving it through the client: the
WaitingForCallback event and spec, the resolution events, and resolution
follow-ups that commit or roll back with the resolution."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import events, metrics
from tests.acceptance.test_hooks import Recorder
from tests.support import FAST_WORKER, job_row, wait_for_state


class Charge(BaseModel):
    amount: int


async def park(client, conn, recorder: Recorder | None = None) -> tuple[awa.Job[Any], Any]:
    callbacks: list[Any] = []

    @client.task(Charge)
    async def charge(job):
        callback = await job.register_callback(timeout_seconds=600)
        callbacks.append(callback)
        job.enqueue_on_completion({"never": True}, kind="staged_note")
        return awa.WaitForCallback(callback)

    if recorder is not None:
        client.on_event(Charge, recorder)
    job = await client.insert(Charge(amount=5))
    await client.start([("default", 2)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "waiting_external")
    return job, row


async def notes(conn, kind: str = "note") -> list[Any]:
    return await conn.fetch("SELECT * FROM awa.jobs WHERE kind = $1 ORDER BY id", kind)


async def test_parking_emits_waiting_for_callback_runs_its_spec_and_discards_staged(client, conn):
    recorder = Recorder()
    client.on_waiting_for_callback_enqueue(
        Charge,
        lambda args, job: awa.EnqueueRequest({"callback": str(job.callback_id)}, kind="note"),
    )
    discarded_before = metrics.value(metrics.STAGED_FOLLOW_UPS_DISCARDED)
    _job, row = await park(client, conn, recorder)
    [waiting] = await recorder.wait_for(events.WaitingForCallback)
    assert waiting.job.state is awa.JobState.WaitingExternal
    assert waiting.job.callback_id == row["callback_id"] is not None
    assert row["callback_timeout_at"] is not None and row["worker_id"] is None
    [note] = await notes(conn)
    assert json.loads(note["args"]) == {"callback": str(row["callback_id"])}
    assert await notes(conn, "staged_note") == []
    assert metrics.value(metrics.STAGED_FOLLOW_UPS_DISCARDED) - discarded_before == 1


async def test_complete_external_completes_with_zero_duration_and_its_follow_up(client, conn):
    recorder = Recorder()
    client.on_completed_enqueue(
        Charge, lambda args, job: awa.EnqueueRequest({"paid": args.amount}, kind="note")
    )
    job, row = await park(client, conn, recorder)
    done = await client.complete_external(row["callback_id"], {"receipt": "r-1"})
    assert done.state is awa.JobState.Completed
    assert done.metadata == {"callback_result": {"receipt": "r-1"}}
    assert done.callback_id is None
    [completed] = await recorder.wait_for(events.Completed)
    assert completed.duration.total_seconds() == 0
    [note] = await notes(conn)
    assert note["created_at"] == (await job_row(conn, job.id))["finalized_at"]
    assert await notes(conn, "staged_note") == []


async def test_fail_external_exhausts_and_retry_external_resets_attempts(client, conn):
    recorder = Recorder()
    _job, row = await park(client, conn, recorder)
    failed = await client.fail_external(str(row["callback_id"]), "card declined")
    assert failed.state is awa.JobState.Failed
    assert failed.errors[-1]["message"] == "card declined"
    [exhausted] = await recorder.wait_for(events.Exhausted)
    assert (exhausted.error, exhausted.attempt) == ("card declined", 1)

    second = await client.insert(Charge(amount=6))
    parked = await wait_for_state(conn, second.id, "waiting_external")
    retried_job = await client.retry_external(parked["callback_id"])
    assert retried_job.state is awa.JobState.Available and retried_job.attempt == 0
    retried = [e for e in await recorder.wait_for(events.Retried) if e.job.id == second.id]
    assert retried[0].attempt == 1


async def test_a_second_or_unknown_resolution_raises_callback_not_found(client, conn):
    _job, row = await park(client, conn)
    await client.complete_external(row["callback_id"])
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(row["callback_id"])
    with pytest.raises(awa.CallbackNotFound):
        await client.retry_external("00000000-0000-0000-0000-000000000000")
    with pytest.raises(awa.ValidationError):
        await client.fail_external("not-a-uuid", "x")


async def test_a_failing_resolution_spec_rolls_back_the_resolution_and_can_be_retried(client, conn):
    attempts = 0

    def flaky(args, job):
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("downstream not ready")
        return awa.EnqueueRequest({"paid": True}, kind="note")

    client.on_completed_enqueue(Charge, flaky)
    job, row = await park(client, conn)
    with pytest.raises(awa.FollowUpError, match="downstream not ready"):
        await client.complete_external(row["callback_id"])
    assert (await job_row(conn, job.id))["state"] == "waiting_external"
    assert await notes(conn) == []
    await client.complete_external(row["callback_id"])
    assert (await job_row(conn, job.id))["state"] == "completed"
    assert len(await notes(conn)) == 1


async def test_wait_for_callback_without_registering_is_a_failed_attempt(client, conn):
    import uuid

    @client.task(Charge)
    async def charge(job):
        return awa.WaitForCallback(uuid.uuid4())

    job = await client.insert(Charge(amount=1), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "failed")
    assert "register_callback" in json.loads(row["errors"])[0]["message"]
