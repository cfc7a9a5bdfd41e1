"""resolve_callback: the callback's CEL policy (filter, on_fail, on_complete,
transform) or the caller's default action decides, in any process."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import events
from tests.acceptance.test_hooks import Recorder
from tests.support import FAST_WORKER, job_row, wait_for_state


class Order(BaseModel):
    number: int


POLICY = {
    "filter": 'payload.event != "ping"',
    "on_fail": 'payload.status == "declined"',
    "on_complete": 'payload.status == "paid"',
    "transform": '{"receipt": payload.id}',
}


async def park(client, conn, **policy: Any) -> tuple[awa.Job[Any], uuid.UUID]:
    callbacks: asyncio.Queue[uuid.UUID] = asyncio.Queue()

    @client.task(Order)
    async def order(job):
        callback = await job.register_callback(timeout_seconds=600, **policy)
        await callbacks.put(callback)
        return awa.WaitForCallback(callback)

    job = await client.insert(Order(number=1), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    callback = await asyncio.wait_for(callbacks.get(), 15)
    await wait_for_state(conn, job.id, "waiting_external")
    return job, callback


async def test_on_complete_completes_with_the_transformed_payload(client, conn):
    recorder = Recorder()
    client.on_event(Order, recorder)
    job, callback = await park(client, conn, **POLICY)
    payload = {"event": "charge", "status": "paid", "id": "r-7"}
    outcome = await client.resolve_callback(callback, payload, default_action="ignore")
    assert outcome.resolution == "completed" and "on_complete" in outcome.reason
    assert outcome.job is not None and outcome.job.metadata == {
        "callback_result": {"receipt": "r-7"}
    }
    [completed] = await recorder.wait_for(events.Completed)
    assert completed.job.id == job.id


async def test_on_fail_fails_the_job_with_the_rule_as_its_error(client, conn):
    recorder = Recorder()
    client.on_event(Order, recorder)
    job, callback = await park(client, conn, **POLICY)
    outcome = await client.resolve_callback(callback, {"event": "charge", "status": "declined"})
    assert outcome.resolution == "failed"
    row = await job_row(conn, job.id)
    assert row["state"] == "failed"
    assert "on_fail matched" in json.loads(row["errors"])[-1]["message"]
    [exhausted] = await recorder.wait_for(events.Exhausted)
    assert "on_fail matched" in exhausted.error


async def test_a_filtered_delivery_is_ignored_and_the_job_stays_parked(client, conn):
    job, callback = await park(client, conn, **POLICY)
    outcome = await client.resolve_callback(callback, {"event": "ping"}, default_action="complete")
    assert outcome.resolution == "ignored" and outcome.job is None
    assert (await job_row(conn, job.id))["state"] == "waiting_external"
    # Neither condition matches: the default decides.
    pending = {"event": "charge", "status": "pending", "id": "x"}
    ignored = await client.resolve_callback(callback, pending, default_action="ignore")
    assert ignored.resolution == "ignored"
    completed = await client.resolve_callback(callback, pending, default_action="complete")
    assert completed.resolution == "completed"
    assert completed.job is not None and completed.job.metadata["callback_result"] == {
        "receipt": "x"
    }


@pytest.mark.parametrize(("default", "state"), [("complete", "completed"), ("fail", "failed")])
async def test_without_a_policy_the_default_action_decides(client, conn, default, state):
    job, callback = await park(client, conn)
    outcome = await client.resolve_callback(callback, {"any": 1}, default_action=default)
    assert outcome.resolution == state
    row = await job_row(conn, job.id)
    assert row["state"] == state
    if state == "completed":
        assert json.loads(row["metadata"]) == {"callback_result": {"any": 1}}


async def test_a_policy_that_cannot_be_evaluated_fails_the_job(client, conn):
    job, callback = await park(client, conn, on_complete="payload.amount")
    outcome = await client.resolve_callback(callback, {"amount": 3})
    assert outcome.resolution == "failed"
    assert "not a bool" in outcome.reason
    assert (await job_row(conn, job.id))["state"] == "failed"


async def test_bad_expressions_are_refused_at_registration(client, conn):
    errors: list[BaseException] = []

    @client.task(Order)
    async def order(job):
        for policy in ({"on_complete": "payload.status =="}, {"on_fail": "secret == 1"}):
            try:
                await job.register_callback(**policy)
            except awa.ValidationError as error:
                errors.append(error)

    job = await client.insert(Order(number=2))
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    assert "not a valid CEL expression" in str(errors[0])
    assert "only variable is `payload`" in str(errors[1])


async def test_unknown_callbacks_and_bad_default_actions_are_refused(client):
    with pytest.raises(awa.CallbackNotFound):
        await client.resolve_callback(uuid.uuid4(), {})
    with pytest.raises(awa.ValidationError, match="default_action"):
        await client.resolve_callback(uuid.uuid4(), {}, default_action="maybe")
