"""Worker settings, checked once when a worker starts."""

from __future__ import annotations

import datetime
import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from awa._core import check_queue_name
from awa.errors import ConfigurationError, ValidationError

DEFAULT_MAX_WORKERS = 10
#: How long a worker may be silent before the fleet counts it as gone.
DEFAULT_HEARTBEAT_STALENESS_S = 30.0
#: The role (``awa.leaders``) of the worker that runs the fleet's maintenance.
MAINTENANCE_ROLE = "maintenance"
#: Crashes (worker died mid-attempt) a job survives before it fails with
#: ``crash_loop``. ``None`` means unbounded.
DEFAULT_MAX_CRASHES = 5
# Settings for which 0 means something (flush at once, keep nothing).
_ZERO_ALLOWED = frozenset(
    {
        "flush_interval",
        "completed_retention",
        "cancelled_retention",
        "dead_letter_retention",
        "prefetch_wait",
    }
)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker process claims, runs and reports jobs. Times are seconds."""

    queues: tuple[tuple[str, int], ...]
    #: Claim at most this many jobs per queue in one statement. A claim
    #: costs the database and the worker about the same whatever its size,
    #: so larger ones cost less per job; a claim never takes more than the
    #: queue's free slots and prefetch allowance.
    claim_batch_size: int = 100
    #: Claims that may be in flight at once (each on its own connection).
    claim_concurrency: int = 1
    #: Jobs per queue claimed ahead of free slots, so a freed slot starts
    #: its next job at once instead of waiting for a claim's round trip; 0
    #: turns it off. A queue holds only as many as its slots get through
    #: within ``prefetch_wait`` at its mean handler time (none until one of
    #: its handlers has finished), so long jobs are never held back in one
    #: process while another has a free slot. While prefetched jobs keep
    #: the slots busy, claims wait until they can take a full
    #: ``claim_batch_size`` or half the queue's allowance, whichever is
    #: less (the other half keeps the slots busy while the claim is in
    #: flight). A prefetched job is ``running`` in the database while it
    #: waits, its attempt's deadline counts from the claim, and shutdown
    #: gives it back unrun. ``global_max_workers`` turns prefetch off (a
    #: waiting job would hold a place under the cap).
    prefetch: int = 200
    #: Seconds a prefetched job should expect to wait for its slot, at
    #: most; see ``prefetch`` (0: never prefetch). A few claims' round
    #: trips: enough to keep short handlers' slots busy, while a more
    #: urgent job inserted meanwhile waits no longer than this.
    prefetch_wait: float = 0.005
    #: Cap on handlers running at once across all queues (None: sum of queues).
    #: Under it, queues share the free slots by ``weight`` (queue entries
    #: ``{"name": "q", "max_workers": 8, "weight": 2, "min_workers": 1}``):
    #: every queue with work gets its share, and one below its
    #: ``min_workers`` gets freed slots first.
    global_max_workers: int | None = None
    #: ``(queue, weight, min_workers)`` of the queue entries that set them
    #: (from ``queues``; not a setting of its own).
    queue_shares: tuple[tuple[str, int, int], ...] = ()
    #: Poll for jobs this often even without notifications (the fallback).
    poll_interval: float = 1.0
    #: Flush outcomes once this many are buffered (and write at most this
    #: many per statement)…
    flush_batch_size: int = 500
    #: …or once the oldest has waited this long.
    flush_interval: float = 0.001
    #: How often this process proves it is alive.
    heartbeat_interval: float = 5.0
    #: Claims of a process silent this long are rescued.
    heartbeat_staleness: float = DEFAULT_HEARTBEAT_STALENESS_S
    #: How often the maintenance leader looks for orphaned claims.
    rescue_interval: float = 5.0
    #: How often the maintenance leader sweeps each lane (queue and
    #: priority) for jobs a claim that rolled back left behind its hint.
    sweep_interval: float = 1.0
    #: How often that sweep starts again from each lane's beginning, as a
    #: last net (docs/storage.md, Lanes).
    full_sweep_interval: float = 3600.0
    #: How often the maintenance leader promotes due scheduled/retryable jobs (at most).
    promote_interval: float = 1.0
    #: Promote at most this many jobs per statement.
    promote_batch_size: int = 1000
    #: How often a non-leader tries to become the maintenance leader.
    leader_election_interval: float = 5.0
    #: How long a maintenance leadership lasts without renewal (the leader
    #: renews every third of it). A leader that dies or hangs hands over
    #: within this plus one election interval.
    leader_lease: float = 10.0
    #: How often a worker compares the jobs the database says it runs with
    #: those it holds, and gives back the difference (claims whose reply was
    #: lost); it also does so after any failed claim.
    reconcile_interval: float = 60.0
    #: How often the worker logs a summary line (jobs/s, failures, queue lag).
    report_interval: float = 60.0
    #: How often the worker reads its queues' depth and lag for the metrics
    #: (``awa.queue.depth``, ``awa.queue.lag``; one indexed statement for
    #: all its queues). None: never (``awa worker --metrics-port`` sets 15).
    queue_metrics_interval: float | None = None
    #: How long a handler may block the event loop before the process counts
    #: as hung: its heartbeats (sent from a thread of their own) stop and its
    #: jobs are rescued. Blocks past a second are logged either way.
    max_loop_block: float = 300.0
    #: A service that keeps failing this long makes the worker unhealthy: it
    #: stops claiming and heartbeating, and says why.
    unhealthy_after: float = 60.0
    #: Writing the last outcomes at shutdown gets at least this long, on top
    #: of the handlers' timeout; what is still unwritten then is reported.
    final_write_timeout: float = 10.0
    #: Threads for synchronous (``def``) handlers (None: one per worker slot, up to 64).
    sync_handler_threads: int | None = None
    #: Seconds an attempt may run, by queue (tasks may set their own
    #: ``timeout``); queues not named have no limit.
    queue_timeouts: Mapping[str, float] | None = None
    #: Retention, in seconds since a job finished: completed jobs…
    completed_retention: float = 86_400.0
    #: …cancelled jobs…
    cancelled_retention: float = 86_400.0
    #: …and failed jobs, the dead-letter queue (14 days)…
    dead_letter_retention: float = 14 * 86_400.0
    #: …or, for the queues named here, this long (0: keep no dead letters).
    dead_letter_retention_by_queue: Mapping[str, float] | None = None
    #: Worker crashes of one fingerprint (kind + arguments) that quarantine
    #: it: claims hold its jobs until ``client.release_quarantine``…
    quarantine_threshold: int = 3
    #: …when they happen within this many seconds of its first crash.
    quarantine_window: float = 3600.0
    #: How often the maintenance leader prunes finished jobs…
    prune_interval: float = 60.0
    #: …deleting at most this many per statement.
    prune_batch_size: int = 1000

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in {
                "queues",
                "queue_shares",
                "queue_timeouts",
                "dead_letter_retention_by_queue",
            }:
                continue
            if (
                field.name
                in {"global_max_workers", "sync_handler_threads", "queue_metrics_interval"}
                and value is None
            ):
                continue
            if field.name == "prefetch" and value == 0 and not isinstance(value, bool):
                continue
            if field.type in ("int", "int | None"):
                _require_positive_int(field.name, value)
            else:
                _require_positive_seconds(field.name, value, allow_zero=field.name in _ZERO_ALLOWED)
        self._check_queue_timeouts()
        self._check_dead_letter_retention()
        if self.leader_lease <= self.leader_election_interval:
            raise ConfigurationError(
                "leader_lease must be longer than leader_election_interval "
                f"({self.leader_lease} <= {self.leader_election_interval})"
            )
        if self.heartbeat_staleness <= self.heartbeat_interval:
            raise ConfigurationError(
                "heartbeat_staleness must be longer than heartbeat_interval "
                f"({self.heartbeat_staleness} <= {self.heartbeat_interval})"
            )

    def _check_queue_timeouts(self) -> None:
        if self.queue_timeouts is None:
            return
        if not isinstance(self.queue_timeouts, Mapping):
            raise ConfigurationError("queue_timeouts must map queue names to seconds")
        served = {name for name, _ in self.queues}
        for name, value in self.queue_timeouts.items():
            if name not in served:
                raise ConfigurationError(
                    f"queue_timeouts names {name!r}, which this worker does not serve"
                )
            timeout_seconds(value, f"queue_timeouts[{name!r}]")

    def _check_dead_letter_retention(self) -> None:
        overrides = self.dead_letter_retention_by_queue
        if overrides is None:
            return
        if not isinstance(overrides, Mapping):
            raise ConfigurationError("dead_letter_retention_by_queue must map queues to seconds")
        for name, value in overrides.items():
            if not isinstance(name, str):
                raise ConfigurationError("dead_letter_retention_by_queue keys are queue names")
            _require_positive_seconds(
                f"dead_letter_retention_by_queue[{name!r}]", value, allow_zero=True
            )

    def queue_timeout(self, queue: str) -> float | None:
        if self.queue_timeouts is None:
            return None
        return timeout_seconds(self.queue_timeouts.get(queue), "queue_timeouts")

    @property
    def connections_needed(self) -> int:
        """Pool connections a worker holds: claimers, completer, notifier,
        leader, and one for heartbeats and maintenance."""
        return self.claim_concurrency + 4

    @property
    def total_slots(self) -> int:
        total = sum(max_workers for _, max_workers in self.queues)
        return min(total, self.global_max_workers or total)


def normalize_queues(
    queues: Sequence[tuple[str, int]] | Mapping[str, int] | Sequence[Mapping[str, Any]],
) -> tuple[tuple[str, int], ...]:
    """Accepts ``[("email", 8)]``, ``{"email": 8}`` or ``[{"name": "email", "max_workers": 8}]``."""
    if isinstance(queues, Mapping):
        pairs: list[tuple[Any, Any]] = list(queues.items())
    else:
        pairs = []
        for entry in queues:
            if isinstance(entry, Mapping):
                pairs.append(_queue_entry(entry))
            elif isinstance(entry, tuple | list) and len(entry) == 2:
                pairs.append((entry[0], entry[1]))
            else:
                raise ConfigurationError(f"a queue must be (name, max_workers), got {entry!r}")
    if not pairs:
        raise ConfigurationError("a worker needs at least one queue")
    seen = set()
    for name, max_workers in pairs:
        if not isinstance(name, str):
            raise ConfigurationError(f"a queue name must be a string, got {name!r}")
        try:
            check_queue_name(name)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
        if name in seen:
            raise ConfigurationError(f"queue {name!r} is listed twice")
        seen.add(name)
        _require_positive_int(f"max_workers of queue {name!r}", max_workers)
    return tuple((name, int(max_workers)) for name, max_workers in pairs)


_QUEUE_ENTRY_KEYS = ("name", "max_workers", "weight", "min_workers")


def _queue_entry(entry: Mapping[str, Any]) -> tuple[Any, Any]:
    # A key awa would drop (a limit it does not have) must not pass silently:
    # the deployment would run without it.
    for key in entry:
        if key not in _QUEUE_ENTRY_KEYS:
            raise ConfigurationError(
                f"queue entry {dict(entry)!r}: unknown key {key!r}; "
                f"a queue entry takes {', '.join(_QUEUE_ENTRY_KEYS)}"
            )
    if "name" not in entry:
        raise ConfigurationError(f"queue entry {dict(entry)!r} needs a 'name'")
    return entry["name"], entry.get("max_workers", DEFAULT_MAX_WORKERS)


def worker_config(
    queues: Sequence[tuple[str, int]] | Mapping[str, int] | Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
) -> WorkerConfig:
    """A :class:`WorkerConfig` from a worker's queues and keyword settings,
    refusing any setting it does not know by name."""
    accepted = [
        field.name for field in fields(WorkerConfig) if field.name not in {"queues", "queue_shares"}
    ]
    for key in settings:
        if key not in accepted:
            close = difflib.get_close_matches(str(key), accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigurationError(
                f"unknown worker setting {key!r}{hint}; the settings are: {', '.join(accepted)}"
            )
    normalized = normalize_queues(queues)
    shares = queue_shares(queues, dict(normalized))
    if shares and settings.get("global_max_workers") is None:
        raise ConfigurationError(
            "weight and min_workers share global_max_workers among the queues; "
            "set global_max_workers too (without it each queue has its own max_workers)"
        )
    return WorkerConfig(queues=normalized, queue_shares=shares, **settings)


def queue_shares(queues: Any, max_workers: Mapping[str, int]) -> tuple[tuple[str, int, int], ...]:
    """``(name, weight, min_workers)`` of the dict queue entries that set either."""
    if isinstance(queues, Mapping):
        return ()
    shares = []
    for entry in queues:
        if not isinstance(entry, Mapping) or not ({"weight", "min_workers"} & entry.keys()):
            continue
        name = entry["name"]
        weight, min_workers = entry.get("weight", 1), entry.get("min_workers", 0)
        _require_positive_int(f"weight of queue {name!r}", weight)
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 0:
            raise ConfigurationError(
                f"min_workers of queue {name!r} must be a whole number, 0 or more "
                f"(got {min_workers!r})"
            )
        if min_workers > max_workers[name]:
            raise ConfigurationError(
                f"min_workers of queue {name!r} ({min_workers}) must not exceed its "
                f"max_workers ({max_workers[name]})"
            )
        shares.append((name, int(weight), int(min_workers)))
    return tuple(shares)


def _require_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1 (got {value!r})")


def _require_positive_seconds(name: str, value: Any, *, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a number of seconds (got {value!r})")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigurationError(f"{name} must be > 0 seconds (got {value!r})")


def timeout_seconds(value: Any, name: str) -> float | None:
    """An attempt timeout setting as seconds (``None`` stays ``None``)."""
    return None if value is None else positive_seconds(value, name, ConfigurationError)


def positive_seconds(
    value: Any, field: str, error: type[ConfigurationError | ValidationError] = ValidationError
) -> float:
    """A duration given as a positive, finite number of seconds or a
    ``timedelta``; every timeout and deadline length awa takes goes through
    here. Raises ``error`` naming ``field``."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        message = f"{field}: must be a positive number of seconds or a timedelta (got {value!r})"
        raise ValidationError(message, field) if error is ValidationError else error(message)
    return float(value)
