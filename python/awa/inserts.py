"""Insert options, shared by every path that writes new jobs: the client's
inserts, durable follow-ups and handler-staged follow-ups.

:func:`add_job` turns one job's arguments and options into a row of a Rust
:class:`awa._core.InsertRows`, which checks every limit; nothing here talks
to the database.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from awa import _core
from awa.config import positive_seconds
from awa.errors import ValidationError
from awa.job import JobState

if TYPE_CHECKING:
    from awa.tasks import Registry

DEFAULT_PRIORITY: Final = 2
DEFAULT_MAX_ATTEMPTS: Final = 25
#: Crashes (worker died mid-attempt) a job survives before it fails with
#: ``crash_loop``. ``None`` means unbounded.
DEFAULT_MAX_CRASHES: Final = 5
#: ``max_crashes`` left to the queue: the client's ``set_queue_defaults``
#: for the job's queue, else :data:`DEFAULT_MAX_CRASHES`.
QUEUE_DEFAULT: Final = "queue_default"

#: Every keyword an insert accepts besides the arguments themselves.
INSERT_OPTIONS: Final = frozenset(
    {
        "kind",
        "queue",
        "priority",
        "max_attempts",
        "max_crashes",
        "run_at",
        "tags",
        "metadata",
        "unique_opts",
        "timeout",
        "deadline",
    }
)

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND: Final = datetime.timedelta(microseconds=1)
_INT64_MAX: Final = 2**63 - 1
_STATE_BITS: Final = {state: 1 << index for index, state in enumerate(JobState)}

#: The states a job waits or runs in. ``unique_opts.states`` must include
#: every one. A job that held its key in only some of them would let a
#: duplicate in while it was elsewhere, and then could not move back while
#: the duplicate held the key: the database refuses two holders, and the
#: statement moving it (a promotion, a claim, a batch of outcomes) would
#: fail for every job in it. Only the finished states are a choice.
UNIQUE_STATES_REQUIRED: Final = frozenset(
    {
        JobState.Scheduled,
        JobState.Available,
        JobState.Running,
        JobState.Retryable,
        JobState.WaitingExternal,
    }
)

#: While a job is in one of these states, another job with its unique key is
#: not inserted. ``completed`` is included: a finished job keeps blocking
#: duplicates until it is pruned.
DEFAULT_UNIQUE_STATES: Final = UNIQUE_STATES_REQUIRED | {JobState.Completed}


@dataclass(frozen=True, slots=True)
class UniqueOpts:
    """What makes two jobs duplicates, and for how long.

    The key always covers the kind; ``by_args`` adds the arguments (key order
    in dicts does not matter), ``by_queue`` the queue, and ``by_period``
    (seconds, or a ``timedelta``) the time window the insert falls in.
    ``states`` are the states in which an existing job blocks a new one:
    every state a job waits or runs in (scheduled, available, running,
    retryable, waiting_external), plus any of completed, failed and cancelled
    (a set without all five raises :class:`awa.ValidationError`).
    ``unique_opts={}`` on an insert means these defaults.
    """

    by_args: bool = True
    by_queue: bool = False
    by_period: float | datetime.timedelta | None = None
    states: frozenset[JobState] = field(default=DEFAULT_UNIQUE_STATES)

    def core(self) -> tuple[bool, bool, int | None, int]:
        """The ``(by_args, by_queue, period_s, states_mask)`` the Rust core takes."""
        return (
            _flag("by_args", self.by_args),
            _flag("by_queue", self.by_queue),
            _period_seconds(self.by_period),
            _states_mask(self.states),
        )


def unique_core(value: UniqueOpts | Mapping[str, Any] | None) -> Any:
    """``unique_opts`` as given to an insert, in the Rust core's form."""
    if value is None:
        return None
    if isinstance(value, UniqueOpts):
        return value.core()
    if isinstance(value, Mapping):
        unknown = set(value) - {"by_args", "by_queue", "by_period", "states"}
        if unknown:
            raise ValidationError(
                f"unique_opts: unknown options {sorted(unknown)} "
                "(by_args, by_queue, by_period, states)",
                "unique_opts",
            )
        options = dict(value)
        if "states" in options:
            options["states"] = _state_set(options["states"])
        return UniqueOpts(**options).core()
    raise ValidationError(
        f"unique_opts: must be awa.UniqueOpts or a dict (got {type(value).__name__})",
        "unique_opts",
    )


def add_job(
    rows: Any,
    registry: Registry,
    args: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_crashes: int | Literal["queue_default"] | None = QUEUE_DEFAULT,
    run_at: datetime.datetime | datetime.timedelta | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    unique_opts: UniqueOpts | Mapping[str, Any] | None = None,
    timeout: float | datetime.timedelta | None = None,
    deadline: datetime.datetime | datetime.timedelta | None = None,
    batch: bool = False,
    require_task: bool = False,
) -> str:
    """Checks one job and appends it to ``rows`` (an :class:`awa._core.InsertRows`);
    returns its kind."""
    kind, queue = registry.resolve(args, kind, queue, require_task=require_task)
    if max_crashes == QUEUE_DEFAULT:
        max_crashes = registry.queue_max_crashes.get(queue, DEFAULT_MAX_CRASHES)
    limits = {}
    if timeout is not None:
        limits["timeout_ms"] = timeout_ms(timeout)
    if deadline is not None:
        limits["deadline_us"] = moment_us(deadline, "deadline")
    rows.add(
        args,
        kind,
        queue,
        priority,
        max_attempts,
        max_crashes,
        run_at_us(run_at),
        tags,
        metadata,
        batch,
        unique=unique_core(unique_opts),
        now_us=now_us(),
        **limits,
    )
    return kind


def check_option_names(options: Iterable[str], where: str) -> None:
    if INSERT_OPTIONS.issuperset(options):  # no set built: follow-ups check per job
        return
    unknown = set(options) - INSERT_OPTIONS
    if unknown:
        raise ValidationError(
            f"{where}: unknown options {sorted(unknown)} (known: {sorted(INSERT_OPTIONS)})", where
        )


def now_us() -> int:
    return time.time_ns() // 1000


def run_at_us(run_at: Any) -> int | None:
    """``run_at`` as microseconds since the epoch (UTC), for the Rust checks."""
    if run_at is None:
        return None
    return moment_us(run_at, "run_at")


def moment_us(value: Any, field: str) -> int:
    """A moment (aware datetime, or timedelta from now) as microseconds since
    the epoch, clamped into an int64; the Rust core checks the year range."""
    if isinstance(value, datetime.timedelta):
        micros = now_us() + value // _MICROSECOND
    elif isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(
                f"{field}: must be timezone-aware (e.g. datetime.now(datetime.UTC))", field
            )
        micros = (value - _EPOCH) // _MICROSECOND
    else:
        raise ValidationError(
            f"{field}: must be a timezone-aware datetime or a timedelta "
            f"(got {type(value).__name__})",
            field,
        )
    # Far beyond the years 1–9999 the Rust check reports; keep it an int64.
    return max(min(micros, _INT64_MAX), -_INT64_MAX)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(
            f"unique_opts.{name}: must be True or False (got {value!r})", f"unique_opts.{name}"
        )
    return value


def _period_seconds(value: Any) -> int | None:
    """Whole seconds from 1 to ``_core.MAX_UNIQUE_PERIOD_S`` (NaN, infinities
    and longer periods are refused, not truncated)."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 1 <= value <= _core.MAX_UNIQUE_PERIOD_S
    ):
        raise ValidationError(
            "unique_opts.by_period: must be from 1 second to "
            f"{_core.MAX_UNIQUE_PERIOD_S} seconds (got {value!r})",
            "unique_opts.by_period",
        )
    return int(value)


def _state_set(value: Any) -> frozenset[JobState]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError(
            "unique_opts.states: must be a collection of job states", "unique_opts.states"
        )
    states = set()
    for item in value:
        try:
            states.add(JobState(item))
        except ValueError:
            raise ValidationError(
                f"unique_opts.states: {item!r} is not a job state", "unique_opts.states"
            ) from None
    return frozenset(states)


def _states_mask(states: Iterable[JobState]) -> int:
    chosen = _state_set(states)
    if not chosen:
        raise ValidationError(
            "unique_opts.states: must name at least one state", "unique_opts.states"
        )
    missing = [state.value for state in JobState if state in UNIQUE_STATES_REQUIRED - chosen]
    if missing:
        raise ValidationError(
            f"unique_opts.states: must include {', '.join(missing)}: a job holds its unique "
            "key in every state it waits or runs in (scheduled, available, running, "
            "retryable, waiting_external); only completed, failed and cancelled are a choice",
            "unique_opts.states",
        )
    mask = 0
    for state in chosen:
        mask |= _STATE_BITS[state]
    return mask


def timeout_ms(value: Any) -> int:
    """A job's own attempt timeout (seconds or ``timedelta``) in whole
    milliseconds, at least 1, clamped into an int64; the Rust core checks the
    upper bound."""
    if isinstance(value, int) and not isinstance(value, bool):
        # An int beyond a float's range would overflow the finiteness check.
        value = max(min(value, _INT64_MAX), -_INT64_MAX)
    milliseconds = min(positive_seconds(value, "timeout") * 1000, _INT64_MAX)
    return max(1, round(milliseconds))
