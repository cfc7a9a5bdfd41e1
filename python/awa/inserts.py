"""Insert options, defined once for every path that writes new jobs: the
client's inserts (one, many, COPY), durable follow-ups and handler-staged
follow-ups.

:class:`InsertOptions` is the keywords an insert accepts (the client's
methods take them as ``**options``); :class:`InsertOpts` is the same
options checked and converted once (moments to microseconds, ``unique_opts``
to the core's tuple). :func:`add_jobs` hands a whole list of jobs to the
Rust :class:`awa._core.InsertRows`, which reads each options object by
name, resolves kinds once per argument type through the registry, encodes
and checks every job; nothing here talks to the database.
"""

from __future__ import annotations

import datetime
import difflib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

from awa import _core
from awa.config import positive_seconds
from awa.errors import ValidationError
from awa.job import ArgsDecoder, JobState
from awa.tracing import with_trace_context

if TYPE_CHECKING:
    from awa.tasks import Registry

DEFAULT_PRIORITY: Final = 2
DEFAULT_MAX_ATTEMPTS: Final = 25
#: ``max_crashes`` left to the queue: the client's ``set_queue_defaults``
#: for the job's queue, else :data:`DEFAULT_MAX_CRASHES`.
QUEUE_DEFAULT: Final = "queue_default"


class CopyInsertOptions(TypedDict, total=False):
    """The options of a COPY insert: every insert option but ``unique_opts``
    (COPY cannot skip duplicates).

    ``kind`` (default: the task registered for the argument type, else the
    class name in snake case) and ``queue`` (default: the task's queue, else
    ``default``) are 1–200 characters; ``priority`` 1 (first) to 4, default 2;
    ``max_attempts`` 1–1000, default 25; ``max_crashes`` 0–10 000, ``None``
    (unbounded) or ``"queue_default"`` (the queue's, see
    ``set_queue_defaults``; default 5); ``run_at`` an aware datetime or a
    ``timedelta`` from now (``None``, or a moment past, runs now);
    ``tags`` at most 20 strings of 1–200 characters; ``metadata`` a dict
    that serializes to a JSON object; ``timeout`` (seconds or ``timedelta``)
    bounds each attempt, over the task's and queue's timeouts; ``deadline``
    (a datetime or a ``timedelta`` from now) bounds the whole job;
    ``schema_version`` (1–32 767; default: the kind's task's, else 1) is
    the version the arguments are written at (see ``@client.task``);
    ``rate_class`` names the shared token budget its claim spends (default:
    the kind's task's; see ``configure_rate_class``); ``partition_key``
    (1–255 characters, no control characters; default: none) names the
    tenant whose jobs share the queue fairly with other tenants' (no task
    default: it belongs to each insert).
    """

    kind: str | None
    queue: str | None
    priority: int
    max_attempts: int
    max_crashes: int | Literal["queue_default"] | None
    run_at: datetime.datetime | datetime.timedelta | None
    tags: Sequence[str] | None
    metadata: Mapping[str, Any] | None
    timeout: float | datetime.timedelta | None
    deadline: datetime.datetime | datetime.timedelta | None
    schema_version: int | None
    rate_class: str | None
    partition_key: str | None


class InsertOptions(CopyInsertOptions, total=False):
    """Every option an insert accepts besides the arguments themselves (see
    :class:`CopyInsertOptions`), and ``unique_opts``: an
    :class:`awa.UniqueOpts` or a dict of its fields (``{}`` for the
    defaults), or ``None`` for no unique key."""

    unique_opts: UniqueOpts | Mapping[str, Any] | None


#: Every keyword an insert accepts besides the arguments themselves.
INSERT_OPTIONS: Final = InsertOptions.__required_keys__ | InsertOptions.__optional_keys__

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND: Final = datetime.timedelta(microseconds=1)
_INT64_MAX: Final = 2**63 - 1
#: One bit per state, as ``awa.job_state_bit``: an undecodable job waits to
#: be made available again, so it holds its key as an available one does.
_STATE_BITS: Final = {
    **{state: 1 << index for index, state in enumerate(JobState)},
    JobState.Undecodable: 1 << list(JobState).index(JobState.Available),
}

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


@dataclass(frozen=True, slots=True)
class InsertOpts:
    """Insert options checked and converted once, read by name by the Rust
    core (:meth:`awa._core.InsertRows.add_many`): one object serves every job
    of a batch that shares them."""

    kind: Any = None
    queue: Any = None
    priority: Any = DEFAULT_PRIORITY
    max_attempts: Any = DEFAULT_MAX_ATTEMPTS
    max_crashes: Any = None
    #: ``max_crashes`` is the queue's default (``"queue_default"``).
    max_crashes_from_queue: bool = True
    run_at_us: int | None = None
    tags: Any = None
    metadata: Any = None
    #: ``(by_args, by_queue, period_s, states_mask)``, or ``None``.
    unique: tuple[bool, bool, int | None, int] | None = None
    timeout_ms: int | None = None
    deadline_us: int | None = None
    #: ``None``: the kind's task's version (the registry's resolution).
    schema_version: Any = None
    #: ``None``: the kind's task's rate class (the registry's resolution).
    rate_class: Any = None
    #: ``None``: no partition.
    partition_key: Any = None

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str = "options") -> InsertOpts:
        """Checks the option names (errors name ``where``) and converts the
        values the core cannot read as they are."""
        check_option_names(options, where)
        if not options:
            return DEFAULT_OPTS
        max_crashes = options.get("max_crashes", QUEUE_DEFAULT)
        from_queue = isinstance(max_crashes, str) and max_crashes == QUEUE_DEFAULT
        timeout = options.get("timeout")
        deadline = options.get("deadline")
        return cls(
            kind=options.get("kind"),
            queue=options.get("queue"),
            priority=options.get("priority", DEFAULT_PRIORITY),
            max_attempts=options.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
            max_crashes=None if from_queue else max_crashes,
            max_crashes_from_queue=from_queue,
            run_at_us=run_at_us(options.get("run_at")),
            tags=options.get("tags"),
            metadata=options.get("metadata"),
            unique=unique_core(options.get("unique_opts")),
            timeout_ms=None if timeout is None else timeout_ms(timeout),
            deadline_us=None if deadline is None else moment_us(deadline, "deadline"),
            schema_version=options.get("schema_version"),
            rate_class=options.get("rate_class"),
            partition_key=options.get("partition_key"),
        )


#: The options of an insert given none.
DEFAULT_OPTS: Final = InsertOpts()


def add_jobs(
    rows: Any,
    registry: Registry,
    jobs: Sequence[Any],
    options: InsertOpts | list[InsertOpts],
    *,
    batch: bool = False,
    require_task: bool = False,
) -> list[tuple[str, type]]:
    """Checks ``jobs`` and appends them to ``rows`` (an
    :class:`awa._core.InsertRows`) in one call, with one options object for
    all or a list of one per job; returns the distinct ``(kind, argument
    type)`` pairs. All or nothing: a refused job adds none."""
    resolve = registry.resolver(require_task=require_task)
    options = with_trace_context(options)
    return rows.add_many(jobs, options, resolve, now_us=now_us(), batch=batch)  # type: ignore[no-any-return]


def add_job(
    rows: Any,
    registry: Registry,
    args: Any,
    *,
    batch: bool = False,
    require_task: bool = False,
    **options: Any,
) -> str:
    """Checks one job and appends it to ``rows``; returns its kind."""
    [(kind, _type)] = add_jobs(
        rows, registry, [args], InsertOpts.of(options), batch=batch, require_task=require_task
    )
    return kind


def single_row(
    registry: Registry, args: Any, options: Mapping[str, Any]
) -> tuple[Any, ArgsDecoder]:
    """One job as :class:`awa._core.InsertRows` (the one parameter of
    ``jobs_insert``, by ``json_rows()``), and how its row read back decodes:
    as ``args`` was given."""
    rows = _core.InsertRows(1)
    [(kind, _type)] = add_jobs(rows, registry, [args], InsertOpts.of(options), require_task=True)
    return rows, registry.decoder(kind, type(args))


def batch_rows(
    registry: Registry,
    jobs: Sequence[Any],
    opts: Sequence[Mapping[str, Any] | None] | None,
    defaults: Mapping[str, Any],
    *,
    copy: bool = False,
) -> tuple[Any, dict[str, ArgsDecoder | None]]:
    """The jobs as :class:`awa._core.InsertRows` (the whole list in one
    call to the core), and by kind how the rows read back decode: as
    the one type of arguments given for the kind, or ``None`` (as its
    task says) for a kind given several."""
    if isinstance(jobs, Mapping) or not isinstance(jobs, Sequence):
        raise ValidationError("jobs: must be a list of job arguments", "jobs")
    if copy and "unique_opts" in defaults:
        raise ValidationError(
            "unique_opts: COPY cannot skip duplicates; insert unique jobs with insert_many",
            "unique_opts",
        )
    shared = InsertOpts.of(defaults, "options")
    rows = _core.InsertRows(len(jobs))
    seen = add_jobs(
        rows, registry, jobs, _per_job(shared, defaults, opts, len(jobs), copy),
        batch=True, require_task=True,
    )  # fmt: skip
    types_by_kind: dict[str, Any] = {}
    for kind, args_type in seen:
        if types_by_kind.setdefault(kind, args_type) is not args_type:
            types_by_kind[kind] = None
    decoders = {
        kind: None if args_type is None else registry.decoder(kind, args_type)
        for kind, args_type in types_by_kind.items()
    }
    return rows, decoders


def _per_job(
    shared: InsertOpts,
    defaults: Mapping[str, Any],
    opts: Sequence[Mapping[str, Any] | None] | None,
    count: int,
    copy: bool,
) -> InsertOpts | list[InsertOpts]:
    """``shared`` for every job, or with ``opts``, one options object per
    job (``shared`` where a job overrides nothing)."""
    if opts is None:
        return shared
    if isinstance(opts, Mapping) or not isinstance(opts, Sequence):
        raise ValidationError("opts: must be a list of dicts, one per job", "opts")
    if len(opts) != count:
        raise ValidationError(
            f"opts: needs one entry per job ({len(opts)} for {count} jobs)", "opts"
        )
    per_job = []
    # Jobs that override the same simple values share one options object
    # (read once, here and in the core): a list of 20 000 jobs across
    # eight tenants builds eight.
    made: dict[tuple[Any, ...], InsertOpts] = {}
    for index, override in enumerate(opts):
        if not override:
            per_job.append(shared)
            continue
        key = _override_key(override)
        known = made.get(key) if key is not None else None
        if known is not None:
            per_job.append(known)
            continue
        where = f"opts[{index}]"
        check_option_names(override, where)
        if copy and override.get("unique_opts") is not None:
            raise ValidationError(
                f"{where}.unique_opts: COPY cannot skip duplicates; "
                "insert unique jobs with insert_many",
                f"{where}.unique_opts",
            )
        options = InsertOpts.of({**defaults, **override}, where)
        if key is not None:
            made[key] = options
        per_job.append(options)
    return per_job


#: Option values a per-job override may share an options object by.
_SHAREABLE = frozenset((str, int, float, bool, type(None), datetime.datetime, datetime.timedelta))


def _override_key(override: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What identifies a per-job override of immutable values (each value's
    type too: ``True`` is not ``1``), or ``None`` for one that holds a list,
    a dict or an object, which is read on its own. Names in another order
    make another key (and one more options object), not a wrong one: the
    key is built once per job, so it is not sorted."""
    key: list[Any] = []
    for name, value in override.items():
        kind = type(value)
        if kind not in _SHAREABLE:
            return None
        key += (name, kind, value)
    return tuple(key)


def check_option_names(options: Iterable[str], where: str) -> None:
    if INSERT_OPTIONS.issuperset(options):  # no set built: follow-ups check per job
        return
    unknown = sorted(set(options) - INSERT_OPTIONS, key=str)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), INSERT_OPTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValidationError(
            f"{where}: unknown options {unknown}{hint} (known: {sorted(INSERT_OPTIONS)})", where
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
