"""Lifecycle events: what hooks registered with ``client.on_event`` receive.

Every event carries ``job``, the row as committed by the transition that
produced it (``job.state`` is the state after it), and ``args``: an instance
of the type given to ``on_event``, or the plain decoded dict for
``on_event_kind``. Events are immutable.

Each event, and when it fires:

- ``Started``: the claim committed, as the handler starts.
- ``WaitingForCallback``: the handler returned ``awa.WaitForCallback`` and
  the job parked in ``waiting_external``.
- ``Completed``: the job finished successfully (with the handler's
  ``result``).
- ``Retried``: the attempt failed (or returned ``RetryAfter``) and the job
  will run again.
- ``Exhausted``: the job failed for good: no attempts left, or a
  ``TerminalError``.
- ``Cancelled``: the job was cancelled.
- ``Rescued``: maintenance took the job back from a worker that stopped
  heartbeating, from a deadline or from a callback timeout.

``Snooze`` emits nothing: it is a reschedule, not an outcome.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeAlias, TypeVar

from awa.job import Job

T = TypeVar("T")


class RescueReason(StrEnum):
    """Why maintenance rescued a job."""

    #: The worker holding the job stopped heartbeating (it died or hung).
    StaleHeartbeat = "stale_heartbeat"
    #: The attempt ran past its deadline.
    DeadlineExceeded = "deadline_exceeded"
    #: A parked job's callback was not resolved in time.
    CallbackTimeout = "callback_timeout"


@dataclass(frozen=True, slots=True)
class Started(Generic[T]):
    """The claim committed; the handler is starting (``job.state`` is ``running``)."""

    job: Job[T]
    args: T


@dataclass(frozen=True, slots=True)
class WaitingForCallback(Generic[T]):
    """The job parked in ``waiting_external``; ``job.callback_id`` names the callback."""

    job: Job[T]
    args: T


@dataclass(frozen=True, slots=True)
class Completed(Generic[T]):
    """The job completed. ``duration`` is how long the handler ran (zero when a
    callback completed the job: no handler ran for that part); ``result`` is
    what the handler returned (see :attr:`awa.Job.result`)."""

    job: Job[T]
    args: T
    duration: datetime.timedelta

    @property
    def result(self) -> Any:
        """What the handler returned, decoded from the JSON stored (``None``
        when it returned ``None``, and when a callback completed the job)."""
        return self.job.result


@dataclass(frozen=True, slots=True)
class Retried(Generic[T]):
    """The attempt failed and the job runs again at ``next_run_at``.

    ``error`` is ``"<ExceptionType>: <message>"`` (or why a retry was asked
    for); ``attempt`` is the attempt that failed.
    """

    job: Job[T]
    args: T
    error: str
    attempt: int
    next_run_at: datetime.datetime


@dataclass(frozen=True, slots=True)
class Exhausted(Generic[T]):
    """The job failed for good (``job.state`` is ``failed``)."""

    job: Job[T]
    args: T
    error: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Cancelled(Generic[T]):
    """The job was cancelled, with the reason given."""

    job: Job[T]
    args: T
    reason: str


@dataclass(frozen=True, slots=True)
class Rescued(Generic[T]):
    """Maintenance rescued the job; ``job.state`` says where it went
    (``retryable``, or ``failed`` when its budget ran out)."""

    job: Job[T]
    args: T
    reason: RescueReason


JobEvent: TypeAlias = (
    Started[Any]
    | WaitingForCallback[Any]
    | Completed[Any]
    | Retried[Any]
    | Exhausted[Any]
    | Cancelled[Any]
    | Rescued[Any]
)
"""Any one of this module's events: what a hook registered with ``client.on_event`` receives."""
