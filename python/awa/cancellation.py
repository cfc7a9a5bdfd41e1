"""Cancelling jobs on request: ``client.cancel`` and ``cancel_by_unique_key``.

A job that has not finished is cancelled at once, whatever its state, in
one transaction with the follow-ups of its ``on_cancelled_enqueue`` specs
(a failing spec rolls the cancellation back: :class:`awa.FollowUpError`).
After the commit the ``Cancelled`` event goes to this process's hooks.

A running attempt cannot be stopped from another process, only told: the
cancellation sends ``cancel:<id>`` on ``awa_control`` and the worker holding
the job turns ``job.is_cancelled()`` true (and cancels the handler's
asyncio task if its task was registered with ``interrupt_on_cancel=True``).
Whatever the attempt writes afterwards is refused by the state guard, so a
handler that never looks still cannot resurrect the job.
"""

from __future__ import annotations

from typing import Any, Final

from awa.db import Database
from awa.hooks import CANCELLED, Transition
from awa.job import Job
from awa.lifecycle import Lifecycle

DEFAULT_REASON: Final = "cancelled on request"


async def cancel(
    db: Database, lifecycle: Lifecycle, job_ids: list[int], reason: str
) -> list[Job[Any]]:
    """Cancels the unfinished jobs among ``job_ids``; returns them as committed."""
    if not job_ids:
        return []
    await db.require_schema()
    async with db.pool.acquire() as connection, connection.transaction():
        rows = await db.fetch("jobs_cancel", job_ids, reason, connection=connection)
        transitions = [
            Transition(
                CANCELLED, lifecycle.committed_job(row), reason=reason, attempt=row["attempt"]
            )
            for row in rows
        ]
        await lifecycle.insert_follow_ups(
            db, connection, transitions, CANCELLED, "nothing was cancelled"
        )
    lifecycle.committed(transitions, None, None)
    return [transition.job for transition in transitions]
