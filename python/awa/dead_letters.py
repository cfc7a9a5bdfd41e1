"""The dead-letter queue: failed jobs kept for inspection and redrive.

Every job that ends ``failed`` stays in ``awa.jobs`` with its error history
and a ``failure_reason`` (:class:`DeadLetterReason`) until retention prunes
it (``dead_letter_retention``, 14 days by default, per queue with
``dead_letter_retention_by_queue``; 0 keeps none). ``list_dlq`` shows them,
``retry_from_dlq`` sends them back to work with attempts and crashes reset,
``purge_dlq`` deletes them. Redrive and purge take ids or filters, never
nothing: acting on every dead letter has to be asked for by name.

A dead letter whose unique key another job took meanwhile (the default
states leave out ``failed``, so a new job may take the key of a failed one)
cannot go back: it stays ``failed``, the rest of the redrive commits, and
``retry_from_dlq`` then raises :class:`awa.UniqueConflict` naming the holder.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import asyncpg

from awa.db import Database
from awa.errors import UniqueConflict, ValidationError
from awa.job import Job

#: Rows per statement when redriving or purging; each is its own transaction.
BATCH_SIZE: Final = 1000
#: Times one redrive batch runs while concurrent inserts keep taking the keys
#: of its dead letters (each run sees the keys taken before it started).
REDRIVE_TRIES: Final = 5
UNIQUE_INDEX: Final = "job_unique_keys_pkey"


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
    db: Database, job_of: Any, selected: Filters, limit: int, include_payload: bool
) -> list[DeadLetter]:
    """The selected dead letters; ``job_of(row, with_payload=...)`` makes
    each one's job (``Registry.committed_job``)."""
    rows = await db.fetch("jobs_dead_letters", *selected.args(), limit, include_payload)
    letters = []
    for row in rows:
        job = job_of(row, with_payload=include_payload)
        reason = row["failure_reason"]
        letters.append(DeadLetter(job, None if reason is None else DeadLetterReason(reason)))
    return letters


async def redrive(db: Database, selected: Filters) -> list[int]:
    """Redrives the selected dead letters in batches of :data:`BATCH_SIZE`,
    each its own transaction, and returns their ids. Dead letters whose
    unique key another job holds stay ``failed``; once every batch has
    committed, :class:`UniqueConflict` names them (and carries the ids that
    were redriven)."""
    redriven: list[int] = []
    conflicts: list[tuple[int, int]] = []
    after = 0
    while True:
        row = await _redrive_batch(db, selected, after)
        redriven.extend(row["ids"])
        conflicts.extend(zip(row["conflicted_ids"], row["holder_ids"], strict=True))
        if row["examined"] < BATCH_SIZE:
            break
        after = row["last_id"]
    if conflicts:
        job_id, holder_id = conflicts[0]
        raise UniqueConflict(holder_id, job_id=job_id, conflicts=conflicts, redriven=redriven)
    return redriven


async def _redrive_batch(db: Database, selected: Filters, after: int) -> Any:
    # The statement skips dead letters whose key it sees held. One inserted
    # by a transaction that commits while the statement runs makes it fail
    # (job_unique_keys_pkey); run again, it sees that holder and skips the letter.
    tries = 1
    while True:
        try:
            return await db.fetchrow("jobs_redrive", *selected.args(), BATCH_SIZE, after)
        except asyncpg.UniqueViolationError as error:
            if error.constraint_name != UNIQUE_INDEX or tries >= REDRIVE_TRIES:
                raise
            tries += 1


async def purge(db: Database, selected: Filters, before: datetime.datetime | None) -> int:
    purged = 0
    while True:
        count: int = await db.fetchval(
            "jobs_purge_dead_letters", *selected.args(), BATCH_SIZE, before
        )
        purged += count
        if count < BATCH_SIZE:
            return purged
