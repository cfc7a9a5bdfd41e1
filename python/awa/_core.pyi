"""Typed, documented stubs for ``awa._core``, the private Rust extension.

The core does the CPU-bound work and no I/O: it never opens a socket, never
touches the event loop and never reads the clock, so every time is passed in
(``now`` in seconds on the caller's monotonic clock, ``now_us`` in
microseconds since the Unix epoch, UTC). Users import :mod:`awa`; only the
Python layer imports this module.

Limits are checked here so that a bad value raises
:class:`awa.ValidationError` naming its field (``priority``, ``tags[3]``,
``args.items[2].name``) before any SQL runs; a follow-up a handler stages
raises :class:`awa.errors.StagingError` instead.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal, Protocol, Self, TypeAlias, TypedDict, final

__all__ = [
    "FAILURE_REASONS",
    "MAX_BACKOFF_S",
    "MAX_INT_DIGITS",
    "MAX_NAME_CHARS",
    "MAX_STAGED_BYTES",
    "MAX_STAGED_FOLLOW_UPS",
    "MAX_TAGS",
    "MAX_UNIQUE_PERIOD_S",
    "CompletionBatch",
    "Dispatcher",
    "Flush",
    "InsertRows",
    "backoff_seconds",
    "check_queue_name",
    "check_rate_class_name",
    "decode_json",
    "derive_kind",
    "encode_json",
    "plan_rescue",
]

_RecordedState: TypeAlias = Literal[
    "completed", "retryable", "scheduled", "waiting_external", "cancelled", "failed"
]
_OutcomeCode: TypeAlias = Literal[
    "completed",
    "retry_after",
    "snooze",
    "waiting_for_callback",
    "cancelled",
    "failed",
    "failed_terminal",
]

_OutcomeColumns: TypeAlias = tuple[
    list[int],  # job ids
    list[int],  # run leases
    list[str],  # target states
    list[float | None],  # delays in seconds (added to the database's now())
    list[int],  # refunds: 1 gives the attempt back (snooze), else 0
    list[str | None],  # error entries (JSON objects) for the job's history
]
"""One guarded outcome row per job, one list per column, for
``UPDATE … FROM unnest(...)``: ``(ids, run_leases, states, delays_s, refunds,
errors)``."""

FAILURE_REASONS: Final[tuple[str, ...]]
"""Why a job ends ``failed`` (its dead-letter reason), as recorded in the
``reason`` of the error entry that failed it and in ``failure_reason``."""

MAX_BACKOFF_S: Final[float]
"""Retry delays never exceed this many seconds (86 400, one day)."""

MAX_TAGS: Final[int]
"""A job carries at most this many tags (20)."""

MAX_INT_DIGITS: Final[int]
"""Integers in args, metadata and callback payloads have at most this many
decimal digits (4300), whatever the interpreter's own int/str limit: longer
ones are refused when encoding and when reading JSON."""

MAX_UNIQUE_PERIOD_S: Final[int]
"""The longest ``unique_opts.by_period`` in seconds (``2**63 - 1`` microseconds,
in whole seconds: about 292 000 years)."""

MAX_NAME_CHARS: Final[int]
"""Kinds, queues and each tag are 1 to this many characters (200)."""

MAX_STAGED_FOLLOW_UPS: Final[int]
"""A handler may stage at most this many follow-ups per attempt (16)."""

MAX_STAGED_BYTES: Final[int]
"""A handler may stage at most this many bytes of follow-ups per attempt
(65 536): the UTF-8 bytes of each follow-up's kind, queue, args JSON,
metadata JSON and tags, summed."""

_UniqueOptions: TypeAlias = tuple[bool, bool, int | None, int]
"""``(by_args, by_queue, period_s, states_mask)``: an options object's ``unique``."""

class _InsertOptions(Protocol):
    """What :meth:`InsertRows.add_many` reads, by name, from each options
    object (``awa.inserts.InsertOpts``)."""

    kind: object
    queue: object
    priority: object
    max_attempts: object
    max_crashes: object
    max_crashes_from_queue: bool
    run_at_us: int | None
    tags: object
    metadata: object
    unique: _UniqueOptions | None
    timeout_ms: int | None
    deadline_us: int | None
    schema_version: object
    rate_class: object
    partition_key: object

_Resolver: TypeAlias = Callable[
    [object, object, object],
    tuple[object, object, int | None, Callable[[object], object] | None, int | None, str | None],
]
"""``(args, kind, queue) -> (kind, queue, queue_max_crashes, check, schema_version,
rate_class)``: the registry's answer for one argument type with one kind and
queue option."""

class _StagedRow(TypedDict):
    """One row of :meth:`InsertRows.rows`."""

    kind: str
    queue: str
    args: str
    priority: int
    max_attempts: int
    max_crashes: int | None
    run_at_us: int | None
    tags: list[str] | None
    metadata: str | None
    unique_key: bytes | None
    unique_states: int | None
    timeout_ms: int | None
    deadline_us: int | None
    schema_version: int | None
    rate_class: str | None
    partition_key: str | None

def check_queue_name(name: str) -> None:
    """Raises ``ValueError`` (saying which rule ``name`` breaks) unless it is
    a queue name: 1-64 characters of letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter or digit."""

def check_rate_class_name(name: str) -> None:
    """Raises ``ValueError`` (saying which rule ``name`` breaks) unless it is
    a rate class name (the queue-name grammar)."""

def derive_kind(class_name: str) -> str:
    """Returns the job kind for an argument class name, in snake case.

    ``SendEmail`` → ``send_email``, ``SMTPEmail`` → ``smtp_email``,
    ``HTMLToPDF`` → ``html_to_pdf``, ``ProcessV2Import`` → ``process_v2_import``.
    """

def encode_json(value: object, field: str = "args") -> str:
    """Encodes a value as compact JSON text; ``field`` names its root in errors.

    Accepts ``None``, ``bool``, ``int`` of up to :data:`MAX_INT_DIGITS` digits
    (the interpreter's int/str digit limit does not matter), finite
    ``float`` (``1.0`` stays ``1.0``), ``str``, ``list``, ``tuple``, ``dict``
    with ``str`` keys, pydantic models (through their own serializer, by
    alias and in round-trip mode, so ``model_validate_json`` reads them back),
    dataclasses, ``datetime``/``date``/``time`` (ISO 8601), ``UUID`` and
    ``Decimal`` (as strings) and enums (their value), nested to 256 levels.

    Raises :class:`awa.ValidationError` whose ``field`` is the path to the
    offending value (``args.items[2].name``) for NUL characters (in values or
    keys), NaN and infinities (also inside a pydantic model, which would write
    them as ``null``; a model configured with ``ser_json_inf_nan="strings"``
    is stored as it writes), longer integers, lone surrogates, non-string
    keys, ``bytes``, other types, and nesting that is too deep or refers to
    itself. A pydantic serializer that fails is reported the same way, at
    the model's path; errors raised by other user code it calls (a dataclass
    property) propagate unchanged.
    """

def decode_json(text: str) -> Any:
    """Reads JSON text into ``dict``, ``list``, ``str``, ``int``, ``float``,
    ``bool`` and ``None``.

    Reads RFC 8259 JSON and nothing more (no leading zeros, no ``NaN``, no
    signs inside ``\\u`` escapes). Integers beyond 64 bits stay exact, up to
    :data:`MAX_INT_DIGITS` digits; numbers with a fraction or an exponent
    become ``float``; a repeated key keeps its last value. Raises
    ``ValueError`` (``invalid JSON at byte N: why``) for invalid JSON
    (trailing text and lone surrogate escapes included), or when nesting
    exceeds 512 levels.
    """

def backoff_seconds(failures: int, unit: float) -> float:
    """Returns the retry delay in seconds after failure number ``failures``
    (1 for the first failure).

    The delay is ``2**failures`` plus up to 25 % jitter (``unit``, a uniform
    sample in ``[0, 1)``, chooses how much; values outside are clamped), and
    never more than :data:`MAX_BACKOFF_S`.
    """

def plan_rescue(
    ids: Sequence[int],
    run_leases: Sequence[int],
    attempts: Sequence[int],
    max_attempts: Sequence[int],
    crashes: Sequence[int],
    max_crashes: Sequence[int | None],
    reason: str,
    seed: int,
) -> _OutcomeColumns:
    """Decides the fate of running jobs whose worker died, one row each.

    Each column gives one value per job. A crash is counted apart from
    failures: the job goes back to ``retryable`` after a backoff on its crash
    count (crashes + 1), or to ``failed`` with a ``crash_loop`` message once
    that count exceeds ``max_crashes`` (``None``: never). Every row carries a
    ``WorkerCrash`` error entry with ``reason``; ``seed`` feeds the jitter.
    Returns the same column shape as :meth:`CompletionBatch.take`. Raises
    ``ValueError`` when the columns differ in length.
    """

@final
class InsertRows:
    """Validated, encoded jobs for every insert path (one row, many, COPY),
    and the follow-ups a handler stages.

    :meth:`add` checks every insert limit and encodes one job; the rows then
    come out either as one list per column (:meth:`columns`) or as
    PostgreSQL COPY text (:meth:`copy_text`).

    A staging set (``staging=True``) holds the follow-ups one attempt
    stages: it admits at most :data:`MAX_STAGED_FOLLOW_UPS` rows and
    :data:`MAX_STAGED_BYTES` bytes, raises
    :class:`awa.errors.StagingError` instead of
    :class:`awa.ValidationError`, and refuses everything once
    :meth:`seal` has closed it.
    """

    def __new__(cls, capacity: int = 1, *, staging: bool = False) -> Self:
        """Starts an empty set of rows with room for ``capacity`` jobs; a
        staging set when ``staging``."""

    def add_many(
        self,
        jobs: Iterable[object],
        options: _InsertOptions | list[_InsertOptions],
        resolve: _Resolver,
        *,
        now_us: int,
        batch: bool = False,
    ) -> list[tuple[str, type]]:
        """Checks every job and appends them all, or none: a refused job
        leaves the set as it was. Returns the distinct ``(kind, argument
        type)`` pairs seen.

        ``options`` is one options object for every job or a list of one per
        job; each distinct object is read once. ``resolve(args, kind,
        queue)`` is called once per distinct argument type, ``kind`` and
        ``queue`` option and returns the kind and queue to use, the queue's
        default ``max_crashes`` (used where ``max_crashes_from_queue``), a
        check to call on each job's arguments (or ``None``), the kind's
        task's schema version (used where the options give none; ``None``
        is 1) and its rate class (likewise; ``None``: none).

        Limits: ``kind`` and ``queue`` are strings of 1-200 characters;
        ``priority`` 1-4; ``max_attempts`` 1-1000; ``max_crashes`` 0-10 000 or
        ``None`` (unbounded); ``run_at_us`` (microseconds since the epoch,
        UTC; ``None`` runs now) within the years 1-9999; ``tags`` a list of
        at most 20 strings of 1-200 characters; ``args`` and ``metadata``
        (``None``: none) encode, as by :func:`encode_json`, to JSON objects;
        ``timeout_ms`` (an attempt's timeout) 1 to 2 147 483 647 and
        ``deadline_us`` (the job's overall deadline, microseconds since the
        epoch) within the years 1-9999, errors naming ``timeout`` and
        ``deadline``; ``schema_version`` (``None``: the resolver's) 1 to
        32 767, version 1 written as no version (``None`` in :meth:`rows`,
        left out of :meth:`json_rows` and COPY); ``rate_class`` (``None``:
        the resolver's) a queue name's grammar; ``partition_key``
        (``None``: no partition) a string of 1-255 characters without a
        control character (Unicode's Cc, and U+2028, U+2029 and
        U+FFF9-U+FFFB, which some locales' ``[[:cntrl:]]`` count; the error
        names the first and its position). Integers must be ``int``
        (``bool`` is refused) and no text may hold a NUL character.

        ``unique``, ``(by_args, by_queue, period_s, states_mask)``, gives the
        job a unique key: the first 16 bytes of SHA-256 over its kind, its
        queue when ``by_queue``, its args with object keys sorted when
        ``by_args``, and the number of the ``period_s``-second period holding
        ``now_us`` when ``period_s`` is not ``None``. ``states_mask`` (1-255)
        names the states in which an existing job conflicts; ``period_s``
        must be at least 1. Errors name ``unique_opts``,
        ``unique_opts.states`` or ``unique_opts.by_period``.

        Raises :class:`awa.ValidationError` whose ``field`` names the value;
        with ``batch`` its message is prefixed with the job's position
        (``jobs[3].priority: …``).

        In a staging set every refusal is :class:`awa.errors.StagingError`
        instead (``batch`` adds no prefix): with the value's ``field``; with
        ``field`` ``follow_ups`` when the job would be the 17th of the attempt
        or take it past :data:`MAX_STAGED_BYTES` (a refused job consumes no
        budget); and with ``field`` ``None`` once the set is sealed.
        """

    def __len__(self) -> int:
        """The number of jobs added."""

    def rows(self) -> list[_StagedRow]:
        """One dict per row, in order, for showing staged follow-ups:
        ``args`` and ``metadata`` as JSON text, ``tags`` as a list (``None``
        for no tags, ``metadata`` ``None`` for none)."""

    def json_rows(self) -> str:
        """The rows as one JSON array of objects keyed by the fields of the
        ``awa.job_input`` type (``kind``, ``queue``, ``args``, ``priority``,
        ``max_attempts``, ``max_crashes``, ``run_at``, ``tags``,
        ``metadata``, ``unique_key``, ``unique_states``, ``timeout_ms``,
        ``deadline_at``, ``schema_version``, ``rate_class``,
        ``partition_key``), absent values left out,
        moments as UTC timestamp text (``2026-11-30 16:33:51.123456+00``,
        which PostgreSQL reads exactly), the unique key as bytea text (``\\x…``): the one parameter
        of ``jobs_insert`` and ``jobs_insert_follow_ups``."""

    def unique_keys(self) -> list[bytes | None]:
        """Each row's unique key (``None``: no key)."""

    def written(self, inserted_keys: list[bytes] | None) -> list[int]:
        """Positions (0-based) of the rows an insert that skips duplicates
        wrote, given the unique keys it reports inserted (``None``: none):
        every row without a key, and the first row of each inserted key."""

    def has_unique(self) -> bool:
        """Whether any row carries a unique key."""

    def extend(self, other: InsertRows) -> None:
        """Appends every row of ``other`` (which may be this set), unique keys
        included. Raises ``ValueError`` on a staging set, whose limits this
        would bypass."""

    def seal(self) -> None:
        """Closes a staging set: the handler has returned, and :meth:`add`
        raises :class:`awa.errors.StagingError` from now on. Raises
        ``ValueError`` on a set that is not a staging set."""

    @property
    def sealed(self) -> bool:
        """Whether this staging set is closed (always ``False`` for other
        sets)."""

    @property
    def staged_bytes(self) -> int:
        """Bytes staged so far, counted as for :data:`MAX_STAGED_BYTES` (0 for
        sets that are not staging sets)."""

    def copy_text(self, now_us: int, ids: Sequence[int] | None = None) -> bytes:
        """The rows in PostgreSQL's COPY text format, for the columns
        :meth:`copy_columns` names.

        ``now_us`` (microseconds since the epoch, UTC) is the insert's
        enqueue time, read from the database (``jobs_copy_start``): rows
        whose ``run_at_us`` is after it are ``scheduled``, the rest
        ``available``, and rows without one run at it. ``ids``, one per
        row, supplies the job ids (``ValueError`` otherwise). NULL is ``\\N``;
        backslashes, tabs, newlines and carriage returns are escaped.
        """

    def copy_columns(self, with_ids: bool = False) -> list[str]:
        """The column list matching :meth:`copy_text`: ``id`` first when
        ``with_ids``; ``run_at`` always (left to its default, a volatile
        function, it would make PostgreSQL write the rows one by one); an
        optional column (``timeout_ms`` and ``deadline_at``,
        ``schema_version``, ``rate_class``, ``partition_key``) only when
        some row has a value for it."""

    def available_queues(self, now_us: int) -> list[str]:
        """The queues, sorted and without repeats, that receive a job
        available at ``now_us`` (microseconds since the epoch): those to
        notify."""

    def partition_lanes(self) -> tuple[list[str], list[int], list[str]]:
        """The partition lanes (queue, priority, partition key) of the
        partitioned jobs, each once, sorted, as three aligned lists: a COPY
        opens them before it writes."""

    def backdated_lanes(self, now_us: int) -> tuple[list[str], list[int], list[int]]:
        """The lanes (queue, priority) receiving a job available at
        ``now_us`` whose own ``run_at`` is before it, with the earliest such
        ``run_at`` of each (microseconds), as three aligned lists sorted by
        lane: their hints must be lowered (``jobs_lower_lanes``)."""

@final
class Dispatcher:
    """Claim sizing and the set of jobs one worker process holds.

    Before each claim, :meth:`plan_claim` reserves free slots per queue and
    names the plan; :meth:`start` turns one of the plan's reservations into a
    running job and :meth:`settle_claim` gives back what the claim did not
    return (a queue that came back short is skipped until :meth:`mark_ready`).
    Several plans may be in flight at once. :meth:`finish` frees a slot when
    a handler returns, and hands out a prefetched job waiting for it.
    """

    def __new__(
        cls,
        queues: Sequence[tuple[str, int]],
        claim_batch_max: int,
        global_max_workers: int | None = None,
        prefetch: int = 0,
        prefetch_wait_s: float = 0.0,
    ) -> Self:
        """Serves ``queues``, pairs of queue name and its ``max_workers``.

        A claim takes at most ``claim_batch_max`` jobs per queue, and
        ``global_max_workers`` (``None``: no cap) bounds the jobs held across
        all queues. A queue also claims up to ``prefetch`` jobs beyond its
        free slots, as many as its slots get through within
        ``prefetch_wait_s`` seconds at its mean handler time; they wait for
        a slot, and while they keep the slots busy, claims wait until they
        can be full (not under ``global_max_workers``, which
        turns prefetch off). Raises ``ValueError`` for no queues, a
        queue listed twice, a count below 1, or a threshold that is negative
        or not finite.
        """

    def plan_claim(self) -> tuple[int, list[str], list[int]] | None:
        """Reserves free slots and returns ``(plan_id, queues, counts)`` to
        claim, or ``None`` when nothing is worth claiming. Every plan must
        be settled with :meth:`settle_claim`."""

    def start(
        self, plan_id: int, job_id: int, run_lease: int, queue: str
    ) -> Literal["run", "wait"] | None:
        """Records a job claimed by plan ``plan_id`` in one of the plan's
        reserved places of ``queue``: ``"run"`` when a slot is free (start
        it now), ``"wait"`` when it was prefetched (:meth:`finish` hands it
        out once a slot frees).

        Returns ``None`` (and changes nothing) when the plan is unknown or
        has no reservation left for the queue, the queue is not served here,
        or the job is already held.
        """

    def settle_claim(self, plan_id: int, failed: bool = False) -> None:
        """Ends a plan: gives back reservations no job started in, and marks
        a queue that returned fewer jobs than asked as empty, unless the
        claim ``failed`` (it learned nothing about the queues, so they stay
        ready for the retry). Raises ``RuntimeError`` for an unknown (or
        already settled) plan."""

    def finish(
        self, job_id: int, handler_s: float | None = None, start_next: bool = False
    ) -> tuple[bool, int | None]:
        """Frees the place of a job whose handler returned after
        ``handler_s`` seconds (``None``: it left without its handler
        running to the end: released, held back, cancelled while waiting);
        an unknown id is ignored. With ``start_next``, the queue's
        longest-waiting prefetched job takes the freed slot. Returns
        ``(can_claim(), the id of the job to start now or None)``."""

    def can_claim(self) -> bool:
        """Whether a claim now could take anything: a free slot, within the
        global cap, in a queue that may have jobs."""

    def mark_ready(self, queue: str) -> bool:
        """Notes that ``queue`` may have jobs (a notification or a poll);
        ``False`` for a queue this worker does not serve."""

    def mark_all_ready(self) -> None:
        """Notes that every queue may have jobs (a poll tick)."""

    def set_share(self, queue: str, weight: int, min_workers: int) -> None:
        """Sets ``queue``'s share of ``global_max_workers``: its ``weight``
        against the other queues' (at least 1) and the ``min_workers`` it gets
        first while it has work (at most its ``max_workers``). Raises
        ``ValueError`` otherwise."""

    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pauses or resumes ``queue`` in this worker: no claim takes a paused
        queue's jobs; resuming marks it ready. False for a queue this worker
        does not serve."""

    def held(self) -> tuple[list[int], list[int]]:
        """``(job ids, run leases)`` of every job held, in matching order."""

    def lease_of(self, job_id: int) -> int | None:
        """The run lease of a held job, or ``None`` when it is not held."""

    def running(self, queue: str) -> int:
        """Jobs held in ``queue`` (running, or claimed and about to run);
        0 for a queue not served here."""

    def waiting(self, queue: str) -> int:
        """Prefetched jobs of ``queue`` waiting for a slot; 0 for a queue
        not served here."""

    def __len__(self) -> int:
        """The number of jobs held."""

@final
class CompletionBatch:
    """Handler outcomes buffered for one guarded batch update.

    Each outcome method appends one row; :meth:`take` hands them all out as
    columns. ``now`` is the caller's clock in seconds (monotonic is fine) and
    only drives the age trigger. Every write is guarded by
    ``(id, run_lease)``, so a row from a stale attempt matches nothing.
    """

    def __new__(cls, max_rows: int, max_age_s: float, seed: int) -> Self:
        """Flushes are due at ``max_rows`` outcomes (at least 1) or once the
        oldest has waited ``max_age_s`` seconds (finite, >= 0); ``seed``
        feeds the retry jitter. Raises ``ValueError`` for bad settings."""

    def record(
        self,
        job_id: int,
        run_lease: int,
        attempt_no: int,
        max_attempts: int,
        crashes: int,
        outcome: _OutcomeCode,
        now: float,
        delay_s: float | None = None,
        error_type: str = "",
        message: str = "",
        traceback: str | None = None,
    ) -> _RecordedState:
        """Buffers one attempt's outcome and returns the state the job goes to.

        ``outcome`` is one of:

        - ``completed``: state ``completed``.
        - ``retry_after``: ``retryable`` after ``delay_s`` (negative counts
          as 0); this uses an attempt, so with none left (``attempt_no -
          crashes >= max_attempts``) the job fails with a ``RetryAfter``
          error entry.
        - ``snooze``: ``scheduled`` after ``delay_s``; the attempt is refunded.
        - ``waiting_for_callback``: ``waiting_external`` (written only if the
          attempt registered a callback).
        - ``cancelled``: ``cancelled``, with a ``Cancel`` error entry holding
          ``message`` as the reason.
        - ``failed``: ``retryable`` after :func:`backoff_seconds` of the
          failures so far (``attempt_no - crashes``) while attempts remain,
          else ``failed``.
        - ``failed_terminal``: ``failed`` now.

        Failures record an error entry from ``error_type``, ``message`` (cut
        to 2 000 characters) and ``traceback`` (its last 4 000), NUL
        replaced. Raises ``ValueError`` for an unknown ``outcome`` or a
        ``retry_after``/``snooze`` without ``delay_s``."""

    def is_due(self, now: float) -> bool:
        """Whether to flush now: ``max_rows`` outcomes are buffered, or the
        oldest has waited ``max_age_s`` seconds. Never for an empty batch."""

    def due_in(self, now: float) -> float | None:
        """Seconds until a flush is due (0 when it is), ``None`` when empty."""

    def ids(self) -> list[int]:
        """The job ids of the outcomes buffered, oldest first."""

    def take(self) -> Flush:
        """Hands out the oldest ``max_rows`` buffered outcomes (all, when fewer)
        as one :class:`Flush`; what remains is due at once."""

    def __len__(self) -> int:
        """The number of outcomes buffered."""

@final
class Flush:
    """Outcomes taken from a :class:`CompletionBatch` for one write."""

    @property
    def ids(self) -> list[int]:
        """The job ids, in row order."""

    def params(self) -> _OutcomeColumns:
        """``(ids, run_leases, states, delays_s, refunds, errors)``, one list per
        column."""

    def array_literals(self) -> tuple[str, str, str, str, str, str]:
        """The same columns as PostgreSQL array literals (``{1,2}``,
        ``{"completed",NULL}``), for ``jobs_finish_batch``, which casts each
        to its array type."""

    def remove(self, job_id: int) -> bool:
        """Takes the job's row out of this write (its outcome is recorded again
        instead); ``False`` when it holds none."""

    def __len__(self) -> int:
        """The number of outcomes in this write."""
