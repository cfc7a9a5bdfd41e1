"""Attempt records: what each run of a job did, for inspection.

Nothing extra is written for them. Every attempt that did not succeed left
an entry in the job's error history (with when it started, which worker ran
it and when it ended), and a succeeded or running attempt is the job row
itself (``attempted_at``, ``finalized_at``). :func:`attempt_records` puts
the two together, so ``awa jobs show`` can tell the whole story at no cost
to the path every job takes.

Outcomes, by the entry's error type: ``WorkerCrash`` → ``abandoned``,
``AttemptTimeout`` and ``CallbackTimeout`` → ``timed_out``, ``Cancel`` →
``cancelled``, anything else → ``failed``, but an entry whose outcome is
``undecodable`` (the worker could not decode the arguments and gave the
attempt back, so the next run has the same number) → ``undecodable``; the
row gives ``succeeded``, ``running`` or ``waiting`` (parked on a callback).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Protocol

_OUTCOME_BY_ERROR_TYPE: Final = {
    "WorkerCrash": "abandoned",
    "AttemptTimeout": "timed_out",
    "CallbackTimeout": "timed_out",
    "Cancel": "cancelled",
}
UNDECODABLE: Final = "undecodable"
_OUTCOME_BY_STATE: Final = {
    "completed": "succeeded",
    "running": "running",
    "waiting_external": "waiting",
}


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One run of a job."""

    attempt: int
    #: succeeded, failed, timed_out, abandoned, cancelled, undecodable,
    #: running or waiting.
    outcome: str
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    worker_id: int | None
    #: The error entry this attempt left (None for succeeded and live ones).
    error: dict[str, Any] | None = None


class JobHistory(Protocol):
    """What an attempt record is put together from (an :class:`awa.Job`)."""

    @property
    def errors(self) -> list[dict[str, Any]]: ...

    @property
    def state(self) -> Enum: ...

    @property
    def attempt(self) -> int: ...

    @property
    def attempted_at(self) -> datetime.datetime | None: ...

    @property
    def finalized_at(self) -> datetime.datetime | None: ...


def attempt_records(job: JobHistory) -> list[AttemptRecord]:
    records = []
    for entry in job.errors:
        started = entry.get("started_at")
        if entry.get("type") == "Cancel" and started is None:
            continue  # a queued job's cancellation ended no attempt
        records.append(
            AttemptRecord(
                attempt=int(entry.get("attempt", 0)),
                outcome=_entry_outcome(entry),
                started_at=_timestamp(started),
                finished_at=_timestamp(entry.get("at")),
                worker_id=entry.get("worker_id"),
                error=entry,
            )
        )
    live = _OUTCOME_BY_STATE.get(job.state.value)
    if live is not None and job.attempt > 0:
        records.append(
            AttemptRecord(
                attempt=job.attempt,
                outcome=live,
                started_at=job.attempted_at,
                finished_at=job.finalized_at if live == "succeeded" else None,
                worker_id=None,
            )
        )
    return records


def _entry_outcome(entry: dict[str, Any]) -> str:
    if entry.get("outcome") == UNDECODABLE:
        return UNDECODABLE
    return _OUTCOME_BY_ERROR_TYPE.get(entry.get("type", ""), "failed")


def _timestamp(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
