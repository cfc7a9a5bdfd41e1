"""Fleet-wide queue settings (``pause_queue``, ``resume_queue``,
``configure_queue``, ``get_queue_config``), rate classes
(``configure_rate_class``) and ``drain_queue``.

Settings live in ``awa.queue_settings`` (one row per queue that has one),
so every worker process and host agrees and a change applies without a
restart: a change is sent on ``awa_control`` and every worker also rereads
the settings at each poll interval (:mod:`awa.worker.queue_settings`). A
paused queue still takes inserts; no worker claims from it until it is
resumed. Priority aging, ceilings and rate limits are applied by every
claim in the database (``awa.claim_v2``, migrations 0019 and 0020), so they hold for
the fleet at once.

Queue names follow one grammar everywhere (inserts, worker queues, these
settings): 1-64 characters of letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from awa._core import check_queue_name
from awa.db import Database
from awa.errors import ValidationError, check_text
from awa.job import JobState


@dataclass(frozen=True)
class QueueConfig:
    """A queue's fleet-wide settings; a queue never configured has the
    defaults (``updated_at`` is then ``None``)."""

    queue: str
    paused: bool = False
    #: When the queue was paused (``None`` while it is not).
    paused_at: datetime.datetime | None = None
    #: Who paused it, as ``pause_queue(..., paused_by=)`` said (``None`` while it is not).
    paused_by: str | None = None
    #: When a setting last changed.
    updated_at: datetime.datetime | None = None
    #: Seconds a due job waits per level of priority it gains (``None``: no aging).
    priority_aging_interval: float | None = None
    #: At most this many of the queue's jobs run at once across the fleet.
    global_max_running: int | None = None
    #: ``(max_rate_per_s, burst)``: claims start at most this many jobs a
    #: second across the fleet, with up to ``burst`` at once after a lull.
    rate_limit: tuple[float, int] | None = None
    #: Whether claims go round-robin across the partitions (``partition_key=``)
    #: with jobs waiting, rather than in key order across them all.
    fair: bool = False
    #: At most this many jobs of each partition (``partition_key=``) run at
    #: once across the fleet; jobs without a key are not capped. A capped
    #: queue is claimed partition by partition, as a fair one is.
    max_workers_per_partition: int | None = None


@dataclass(frozen=True)
class QueueSummary:
    """A queue's settings and what waits in it (``list_queues``)."""

    config: QueueConfig
    #: Jobs available and due now, waiting for a worker.
    due: int
    running: int
    #: Jobs that become due later: scheduled, retrying after a backoff, or
    #: available with a run_at still ahead.
    later: int
    #: Jobs parked for a callback.
    waiting_external: int
    #: Dead letters (``list_dlq``).
    failed: int
    #: The run_at of the oldest due job: how far behind the queue is.
    oldest_due_at: datetime.datetime | None


class _Unset:
    """A ``configure_queue`` setting not given: it keeps its value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
RateLimit: TypeAlias = tuple[float, int]
#: The highest ceiling and burst accepted (a smallint-sized sanity bound).
MAX_LIMIT: Final = 1_000_000


def check_queue(queue: Any) -> str:
    """``queue`` if it is a queue name, else :class:`ValidationError` saying why."""
    if not isinstance(queue, str):
        raise ValidationError(f"queue: must be a string (got {type(queue).__name__})", "queue")
    try:
        check_queue_name(queue)
    except ValueError as error:
        raise ValidationError(str(error), "queue") from None
    return queue


#: The longest ``paused_by`` kept.
MAX_PAUSED_BY_CHARS: Final = 200


async def set_paused(
    db: Database, queue: str, paused: bool, paused_by: str | None = None
) -> QueueConfig:
    """Pauses (by ``paused_by``) or resumes ``queue`` for every worker;
    returns its settings."""
    check_queue(queue)
    _check_paused_by(paused_by)
    await db.require_schema()
    row = await db.fetchrow("queue_settings_set_paused", queue, paused, paused_by)
    return _config(row)


def _check_paused_by(paused_by: Any) -> None:
    if paused_by is not None:
        check_text(paused_by, "paused_by", MAX_PAUSED_BY_CHARS)


async def configure(
    db: Database,
    queue: str,
    *,
    priority_aging_interval: float | datetime.timedelta | _Unset | None = UNSET,
    global_max_running: int | _Unset | None = UNSET,
    rate_limit: RateLimit | _Unset | None = UNSET,
    fair: bool | _Unset = UNSET,
    max_workers_per_partition: int | _Unset | None = UNSET,
) -> QueueConfig:
    """Sets the flow-control settings given (``None`` removes one) and keeps
    the others; returns the queue's settings."""
    check_queue(queue)
    if not isinstance(fair, _Unset | bool):
        raise ValidationError(f"fair: must be True or False (got {fair!r})", "fair")
    aging = (
        priority_aging_interval
        if isinstance(priority_aging_interval, _Unset)
        else _aging_s(priority_aging_interval)
    )
    if not isinstance(global_max_running, _Unset):
        _check_cap(global_max_running, "global_max_running")
    if not isinstance(max_workers_per_partition, _Unset):
        _check_cap(max_workers_per_partition, "max_workers_per_partition")
    rate = rate_limit if isinstance(rate_limit, _Unset) else _rate_limit(rate_limit)
    await db.require_schema()
    row = await db.fetchrow(
        "queue_settings_configure",
        queue,
        not isinstance(aging, _Unset), None if isinstance(aging, _Unset) else aging,
        not isinstance(global_max_running, _Unset),
        None if isinstance(global_max_running, _Unset) else global_max_running,
        not isinstance(rate, _Unset),
        None if isinstance(rate, _Unset) or rate is None else rate[0],
        None if isinstance(rate, _Unset) or rate is None else rate[1],
        not isinstance(fair, _Unset), None if isinstance(fair, _Unset) else fair,
        not isinstance(max_workers_per_partition, _Unset),
        None if isinstance(max_workers_per_partition, _Unset) else max_workers_per_partition,
    )  # fmt: skip
    return _config(row)


def _aging_s(interval: Any) -> float | None:
    if interval is None:
        return None
    seconds = interval.total_seconds() if isinstance(interval, datetime.timedelta) else interval
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValidationError(
            "priority_aging_interval: must be a positive number of seconds or a timedelta "
            f"(got {interval!r})",
            "priority_aging_interval",
        )
    return float(seconds)


def _check_cap(cap: Any, setting: str) -> None:
    """A count of running jobs (a ceiling, a cap per partition), or ``None``."""
    if cap is None:
        return
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_LIMIT:
        raise ValidationError(
            f"{setting}: must be an integer from 1 to {MAX_LIMIT} (got {cap!r})", setting
        )


def _rate_limit(limit: Any) -> RateLimit | None:
    if limit is None:
        return None
    problem = (
        "rate_limit: must be (max_rate_per_s, burst): a positive number of jobs a second "
        f"and an integer burst from 1 to {MAX_LIMIT} (got {limit!r})"
    )
    if not isinstance(limit, tuple | list) or len(limit) != 2:
        raise ValidationError(problem, "rate_limit")
    rate, burst = limit
    if not (_is_rate(rate) and _is_burst(burst)):
        raise ValidationError(problem, "rate_limit")
    return float(rate), burst


def _is_rate(rate: Any) -> bool:
    return not isinstance(rate, bool) and isinstance(rate, int | float) and 0 < rate <= MAX_LIMIT


def _is_burst(burst: Any) -> bool:
    return not isinstance(burst, bool) and isinstance(burst, int) and 1 <= burst <= MAX_LIMIT


@dataclass(frozen=True)
class RateClass:
    """A token budget shared by every job that names it (``rate_class=``),
    whatever its queue: ``rate_per_s`` tokens a second, ``burst`` at most."""

    name: str
    rate_per_s: float
    burst: int
    updated_at: datetime.datetime


def check_rate_class_name(name: Any) -> str:
    """``name`` if it can name a rate class (the queue-name grammar), else
    :class:`ValidationError` saying why."""
    if not isinstance(name, str):
        raise ValidationError(
            f"rate_class: must be a string (got {type(name).__name__})", "rate_class"
        )
    try:
        check_queue_name(name)
    except ValueError as error:
        message = str(error).removeprefix("queue: ").replace("a queue name", "a rate class name")
        raise ValidationError(f"rate_class: {message}", "rate_class") from None
    return name


async def configure_rate_class(db: Database, name: str, rate: Any, burst: Any) -> RateClass:
    check_rate_class_name(name)
    if not _is_rate(rate):
        raise ValidationError(
            f"rate: must be a positive number of jobs a second up to {MAX_LIMIT} (got {rate!r})",
            "rate",
        )
    if not _is_burst(burst):
        raise ValidationError(
            f"burst: must be an integer from 1 to {MAX_LIMIT} (got {burst!r})", "burst"
        )
    await db.require_schema()
    row = await db.fetchrow("rate_classes_configure", name, float(rate), burst)
    assert row is not None  # an upsert returns its row
    await db.fetchval("rate_classes_announce")
    return RateClass(**dict(row))


async def delete_rate_class(db: Database, name: str) -> bool:
    check_rate_class_name(name)
    await db.require_schema()
    deleted = await db.fetchrow("rate_classes_delete", name) is not None
    await db.fetchval("rate_classes_announce")
    return deleted


async def list_rate_classes(db: Database) -> list[RateClass]:
    await db.require_schema()
    return [RateClass(**dict(row)) for row in await db.fetch("rate_classes_list")]


async def get_config(db: Database, queue: str) -> QueueConfig:
    check_queue(queue)
    await db.require_schema()
    row = await db.fetchrow("queue_settings_get", queue)
    return QueueConfig(queue) if row is None else _config(row)


async def summaries(db: Database) -> list[QueueSummary]:
    await db.require_schema()
    return [
        QueueSummary(
            config=_config(row),
            due=row["due"],
            running=row["running"],
            later=row["later"],
            waiting_external=row["waiting_external"],
            failed=row["failed"],
            oldest_due_at=row["oldest_due_at"],
        )
        for row in await db.fetch("queue_settings_summaries")
    ]


#: How often a drain looks again, at least (slower when the count is slow).
DRAIN_POLL_S: Final = 0.2


async def drain(db: Database, queue: str, timeout_s: float | None) -> int:
    """Waits until ``queue`` has nothing a drain waits for (spec 002): no
    running job, no due queued job, no retry waiting for its backoff. Jobs
    delayed by their insert that never ran are not waited for. Returns how
    many it waited for when it started; raises ``TimeoutError`` (saying
    how many are left) after ``timeout_s``."""
    check_queue(queue)
    if timeout_s is not None and not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise ValidationError(
            f"timeout: must be a positive number of seconds (got {timeout_s!r})", "timeout"
        )
    await db.require_schema()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    first: int | None = None
    while True:
        asked = time.monotonic()
        outstanding = int(await db.fetchval("jobs_drain_outstanding", queue))
        took = time.monotonic() - asked
        if first is None:
            first = outstanding
        if not outstanding:
            return first
        if deadline is not None and time.monotonic() >= deadline:
            paused = (await get_config(db, queue)).paused
            why = " (the queue is paused: nothing claims from it)" if paused else ""
            raise TimeoutError(
                f"queue {queue} did not drain within {timeout_s:g}s: {outstanding} jobs "
                f"still outstanding{why}"
            )
        # Never more than a tenth of the database's time on counting.
        await asyncio.sleep(max(DRAIN_POLL_S, 10 * took))


def _config(row: Any) -> QueueConfig:
    return QueueConfig(
        queue=row["queue"],
        paused=row["paused"],
        paused_at=row["paused_at"],
        paused_by=row["paused_by"],
        updated_at=row["updated_at"],
        priority_aging_interval=row["priority_aging_s"],
        global_max_running=row["global_max_running"],
        rate_limit=None if row["rate_per_s"] is None else (row["rate_per_s"], row["rate_burst"]),
        fair=row["fair"],
        max_workers_per_partition=row["max_workers_per_partition"],
    )


#: ``queue_stats``'s window when not told (seconds): five minutes.
DEFAULT_STATS_WINDOW_S: Final = 300.0
#: The longest window accepted (seconds): thirty days.
MAX_STATS_WINDOW_S: Final = 30 * 86_400.0


@dataclass(frozen=True)
class QueueStats:
    """How a queue is doing (``queue_stats``): its jobs by state, what
    finished in the window, how far behind it is and what runs now."""

    queue: str
    #: The window the rates are over, in seconds.
    window_s: float
    #: Jobs in each state (every state, zeros included).
    counts: dict[JobState, int]
    #: Jobs completed in the window.
    completed: int
    #: Jobs failed for good (dead letters) in the window; attempts that were
    #: retried are not failures here.
    failed: int
    #: Completed jobs a minute, over the window.
    throughput_per_min: float
    #: ``failed / (completed + failed)`` in the window (``None``: none finished).
    failure_rate: float | None
    #: Seconds the oldest due job has waited past its run_at (``None``: none is due).
    lag_s: float | None
    #: Jobs running now.
    in_flight: int


def stats_window_s(window: Any) -> float:
    """``window`` (seconds or a timedelta) in seconds, or :class:`ValidationError`."""
    seconds = window.total_seconds() if isinstance(window, datetime.timedelta) else window
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_STATS_WINDOW_S
    ):
        raise ValidationError(
            f"window: must be a positive number of seconds or a timedelta, at most "
            f"{MAX_STATS_WINDOW_S:g} s (got {window!r})",
            "window",
        )
    return float(seconds)


async def stats(db: Database, window: Any, queue: str | None) -> list[QueueStats]:
    """Every queue with jobs (or only ``queue``, zeros if it has none), by name."""
    window_s = stats_window_s(window)
    if queue is not None:
        check_queue(queue)
    await db.require_schema()
    rows: dict[str, list[Any]] = {}
    found = (
        await db.fetch("jobs_queue_stats", window_s)
        if queue is None
        else await db.fetch("jobs_queue_stats_of_queue", window_s, queue)
    )
    for row in found:
        rows.setdefault(row["queue"], []).append(row)
    if queue is not None and queue not in rows:
        rows[queue] = []
    return [_stats(name, window_s, found) for name, found in rows.items()]


def _stats(queue: str, window_s: float, rows: list[Any]) -> QueueStats:
    """One queue's figures from its rows of ``jobs_queue_stats`` (one a state)."""
    counts = dict.fromkeys(JobState, 0)
    finished = dict.fromkeys(JobState, 0)
    lag_s = None
    for row in rows:
        state = JobState(row["state"])
        counts[state] = row["jobs"]
        finished[state] = row["finished_in_window"]
        if state is JobState.Available and row["oldest_due_s"] is not None:
            lag_s = max(0.0, row["oldest_due_s"])
    completed, failed = finished[JobState.Completed], finished[JobState.Failed]
    return QueueStats(
        queue=queue,
        window_s=window_s,
        counts=counts,
        completed=completed,
        failed=failed,
        throughput_per_min=completed / (window_s / 60),
        failure_rate=failed / (completed + failed) if completed + failed else None,
        lag_s=lag_s,
        in_flight=counts[JobState.Running],
    )
