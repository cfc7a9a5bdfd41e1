"""The dead-letter queue: failed jobs kept for inspection and redrive.

Every job that ends ``failed`` stays in ``awa.jobs`` with its error history
and a ``failure_reason`` (:class:`DeadLetterReason`) until retention prunes
it (``dead_letter_retention``, 14 days by default, per queue with
``dead_letter_retention_by_queue``; 0 keeps none). ``list_dlq`` shows them,
``retry_from_dlq`` sends them back to work with attempts and crashes reset,
``purge_dlq`` deletes them. Redrive and purge take ids or filters, never
nothing: acting on every dead letter has to be asked for by name.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from awa.db import Database
from awa.errors import ValidationError
from awa.job import Job

#: Rows per statement when redriving or purging; each is its own transaction.
BATCH_SIZE: Final = 1000


class DeadLetterReason(StrEnum):
    """Why a job failed for good."""

    MaxAttemptsExhausted = "max_attempts_exhausted"
    TerminalError = "terminal_error"
    CallbackTimeout = "callback_timeout"
    DeadlineExceeded = "deadline_exceeded"
    CrashLoop = "crash_loop"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A failed job and why it failed."""

    job: Job[Any]
    reason: DeadLetterReason | None


@dataclass(frozen=True, slots=True)
class Filters:
    ids: list[int] | None
    queue: str | None
    kind: str | None
    reason: str | None

    def args(self) -> tuple[Any, ...]:
        return (self.ids, self.queue, self.kind, self.reason)

    @property
    def empty(self) -> bool:
        return self.ids is None and self.queue is None and self.kind is None and self.reason is None


def filters(ids: Sequence[int] | None, queue: str | None, kind: str | None, reason: Any) -> Filters:
    if ids is not None:
        if isinstance(ids, str | bytes) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise ValidationError("ids: must be a list of job ids", "ids")
        ids = list(ids)
    for name, value in (("queue", queue), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{name}: must be a string", name)
    if reason is not None:
        try:
            reason = DeadLetterReason(reason).value
        except ValueError:
            choices = ", ".join(r.value for r in DeadLetterReason)
            raise ValidationError(
                f"reason: must be one of {choices} (got {reason!r})", "reason"
            ) from None
    return Filters(ids, queue, kind, reason)


def require_selection(selected: Filters, everything: bool, action: str) -> None:
    if selected.empty and not everything:
        raise ValidationError(
            f"{action}: give ids or a filter (queue, kind, reason), or everything=True to "
            "act on every dead letter",
            "ids",
        )


async def list_dead_letters(
    db: Database, decode: Any, selected: Filters, limit: int, include_payload: bool
) -> list[DeadLetter]:
    rows = await db.fetch("jobs_dead_letters", *selected.args(), limit, include_payload)
    letters = []
    for row in rows:
        job = Job.from_record(row, decode(row["kind"]), with_payload=include_payload)
        reason = row["failure_reason"]
        letters.append(DeadLetter(job, None if reason is None else DeadLetterReason(reason)))
    return letters


async def redrive(db: Database, selected: Filters) -> list[int]:
    redriven: list[int] = []
    while True:
        ids: list[int] = list(await db.fetchval("jobs_redrive", *selected.args(), BATCH_SIZE))
        redriven.extend(ids)
        if len(ids) < BATCH_SIZE:
            return redriven


async def purge(db: Database, selected: Filters, before: datetime.datetime | None) -> int:
    purged = 0
    while True:
        count: int = await db.fetchval(
            "jobs_purge_dead_letters", *selected.args(), BATCH_SIZE, before
        )
        purged += count
        if count < BATCH_SIZE:
            return purged
