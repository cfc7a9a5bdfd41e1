"""Resolving callbacks: ``complete_external``, ``fail_external``,
``retry_external``, ``resolve_callback`` (decided by the callback's CEL
policy, :mod:`awa.callback_policy`), ``resume_external`` and
``heartbeat_callback``.

A handler parks its job with ``return awa.WaitForCallback(callback_id)``
after ``await job.register_callback()``; the job waits in
``waiting_external`` until one of these calls, from any process, resolves
the callback. A callback that arrives early, while the handler is still
running, is honoured the same way (the handler's own outcome is then
refused as stale). ``resume_external`` is for a handler that waits in
place (``await job.wait_for_callback(callback_id)``): the job returns to
``running`` and the handler gets the payload; it emits no event itself.

Each resolution is one transaction: the guarded update (only
a job still waiting for exactly this callback), then the follow-ups of the
mapped outcome's specs; if a spec fails, both roll back and the caller gets
:class:`awa.FollowUpError` and may try again. After the commit the mapped
event (``Completed`` with zero duration, ``Exhausted``, ``Retried``) goes
to this process's hooks, so it fires once, where the resolution ran.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from awa import _core
from awa.callback_policy import Resolution, decide, default_action
from awa.config import positive_seconds
from awa.db import Database
from awa.errors import CallbackNotFound, CallbackNotResumable, ValidationError
from awa.hooks import COMPLETED, EXHAUSTED, RETRIED, Transition
from awa.job import Job
from awa.lifecycle import Lifecycle
from awa.outcomes import callback_uuid

RETRIED_BY_CALLBACK = "retried by an external callback"


async def complete(
    db: Database, lifecycle: Lifecycle, callback_id: uuid.UUID | str, payload: Any
) -> Job[Any]:
    encoded = None if payload is None else _core.encode_json(payload, "payload")
    return await _resolve(db, lifecycle, callback_id, COMPLETED, "completed", None, encoded)


async def fail(
    db: Database, lifecycle: Lifecycle, callback_id: uuid.UUID | str, error: str
) -> Job[Any]:
    if not isinstance(error, str):
        raise ValidationError(f"error: must be a string (got {type(error).__name__})", "error")
    entry = _failure_entry(error)
    return await _resolve(db, lifecycle, callback_id, EXHAUSTED, "failed", entry, None, error)


async def retry(db: Database, lifecycle: Lifecycle, callback_id: uuid.UUID | str) -> Job[Any]:
    return await _resolve(
        db, lifecycle, callback_id, RETRIED, "available", None, None, RETRIED_BY_CALLBACK
    )


async def resume(db: Database, callback_id: uuid.UUID | str, payload: Any) -> Job[Any]:
    callback = callback_uuid(callback_id)
    encoded = _core.encode_json(payload, "payload")
    await db.require_schema()
    row = await db.fetchrow("jobs_resume_callback", callback, encoded)
    if row is None:
        raise CallbackNotFound(callback)
    if not row["resumable"]:
        raise CallbackNotResumable(callback, row["target_id"])
    return Job.from_record(row)


async def heartbeat(db: Database, callback_id: uuid.UUID | str, timeout_seconds: float) -> Job[Any]:
    callback = callback_uuid(callback_id)
    seconds = positive_seconds(timeout_seconds, "timeout_seconds")
    await db.require_schema()
    row = await db.fetchrow("jobs_heartbeat_callback", callback, seconds)
    if row is None:
        raise CallbackNotFound(callback)
    return Job.from_record(row)


@dataclass(frozen=True, slots=True)
class CallbackResolution:
    """What ``resolve_callback`` did: ``resolution`` is ``completed``,
    ``failed`` or ``ignored``; ``job`` is the job as committed (``None`` when
    ignored: nothing changed); ``reason`` says which rule decided."""

    resolution: Resolution
    job: Job[Any] | None
    reason: str


async def resolve(
    db: Database,
    lifecycle: Lifecycle,
    callback_id: uuid.UUID | str,
    payload: Any,
    default: Any,
) -> CallbackResolution:
    callback = callback_uuid(callback_id)
    action = default_action(default)
    encoded = None if payload is None else _core.encode_json(payload, "payload")
    await db.require_schema()
    async with db.pool.acquire() as connection, connection.transaction():
        target = await db.fetchrow("jobs_callback_policy", callback, connection=connection)
        if target is None:
            raise CallbackNotFound(callback)
        decoded = None if encoded is None else _core.decode_json(encoded)
        decision = decide(target["callback_config"], decoded, action)
        if decision.resolution is Resolution.Ignored:
            return CallbackResolution(decision.resolution, None, decision.reason)
        if decision.resolution is Resolution.Completed:
            result = (
                None if decision.payload is None else _core.encode_json(decision.payload, "payload")
            )
            job, transition = await _apply(
                db, lifecycle, connection, callback, COMPLETED, "completed", None, result
            )
        else:
            job, transition = await _apply(
                db, lifecycle, connection, callback, EXHAUSTED, "failed",
                _failure_entry(decision.reason), None, decision.reason,
            )  # fmt: skip
    lifecycle.committed([transition], None, None)
    return CallbackResolution(decision.resolution, job, decision.reason)


def _failure_entry(error: str) -> str:
    return _core.encode_json(
        {
            "type": "ExternalFailure",
            "message": error,
            "traceback": None,
            "outcome": "failed",
            "reason": "terminal_error",
        },
        "error",
    )


async def _resolve(
    db: Database,
    lifecycle: Lifecycle,
    callback_id: uuid.UUID | str,
    outcome: str,
    state: str,
    error_entry: str | None,
    payload: str | None,
    error_text: str = "",
) -> Job[Any]:
    callback = callback_uuid(callback_id)
    await db.require_schema()
    async with db.pool.acquire() as connection, connection.transaction():
        job, transition = await _apply(
            db, lifecycle, connection, callback, outcome, state, error_entry, payload, error_text
        )
    lifecycle.committed([transition], None, None)
    return job


async def _apply(
    db: Database,
    lifecycle: Lifecycle,
    connection: Any,
    callback: uuid.UUID,
    outcome: str,
    state: str,
    error_entry: str | None,
    payload: str | None,
    error_text: str = "",
) -> tuple[Job[Any], Transition]:
    """Inside the resolution's transaction: the guarded update, then the
    mapped outcome's follow-ups. The caller dispatches after the commit."""
    row = await db.fetchrow(
        "jobs_resolve_callback", callback, state, error_entry, payload, connection=connection
    )
    if row is None:
        raise CallbackNotFound(callback)
    job = lifecycle.committed_job(row)
    transition = Transition(outcome, job, error=error_text, attempt=row["parked_attempt"])
    await lifecycle.insert_follow_ups(
        db, connection, [transition], outcome, "the callback was not resolved"
    )
    return job, transition
