"""Jobs as inspection and events see them: :class:`Job` (a committed row,
read-only) and :class:`JobState`.

A running handler receives an :class:`awa.RunningJob`, a ``Job`` that also
carries what the attempt may do (stage follow-ups, register and wait for a
callback, see a cancellation); it lives with the worker
(``awa/worker/attempt.py``). Nothing here holds a connection.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Generic, NoReturn, TypeVar

from awa import _core
from awa.errors import PayloadOmitted

if TYPE_CHECKING:
    from awa.attempts import AttemptRecord

#: The type of a job's arguments. Covariant: a job is read-only, so a
#: ``Job[SendEmail]`` is also a ``Job[BaseModel]`` (and a ``Job[object]``).
T_co = TypeVar("T_co", covariant=True)


class JobState(StrEnum):
    """The durable state of a job; each value is the name stored in the database."""

    Scheduled = "scheduled"
    Available = "available"
    Running = "running"
    Retryable = "retryable"
    WaitingExternal = "waiting_external"
    Completed = "completed"
    Failed = "failed"
    Cancelled = "cancelled"
    #: No worker could decode its arguments (no task for its kind, a schema
    #: version newer than the task's, an upcaster that raised, arguments
    #: that do not validate): parked, its attempt given back, until
    #: ``retry_undecodable`` makes it available again.
    Undecodable = "undecodable"

    @property
    def is_terminal(self) -> bool:
        """Completed, failed and cancelled jobs never run again on their own.
        (An undecodable job does not either, but it is not finished: it keeps
        its unique key and goes back to work with ``retry_undecodable``.)"""
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.Completed, JobState.Failed, JobState.Cancelled})
_STATE_BY_NAME: Mapping[str, JobState] = {state.value: state for state in JobState}

#: The columns every job query returns, by name (python/awa/sql/queries/jobs.sql);
#: a claim's rows lack :data:`OPTIONAL_JOB_COLUMNS`.
JOB_COLUMNS: Final = (
    "id",
    "run_lease",
    "kind",
    "queue",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "crashes",
    "max_crashes",
    "run_at",
    "created_at",
    "attempted_at",
    "finalized_at",
    "args",
    "tags",
    "metadata",
    "errors",
    "callback_id",
    "callback_timeout_at",
    "schema_version",
    "rate_class",
    "partition_key",
)

#: The columns a row may lack (``awa.claim_v2`` returns none of them, a
#: claim adds progress, ``jobs_get`` and ``jobs_list`` add progress, result
#: and parent_id); a job read from such a row has ``None`` for them.
OPTIONAL_JOB_COLUMNS: Final = ("rate_class", "partition_key", "progress", "result", "parent_id")

ArgsDecoder = Callable[[str], Any]

#: The version of arguments whose ``schema_version`` column is NULL.
FIRST_SCHEMA_VERSION: Final = 1

_set = object.__setattr__
JobT = TypeVar("JobT", bound="Job[Any]")
_BUILDERS: dict[type[Any], type[Any]] = {}


def writable(cls: type[JobT]) -> JobT:
    """A new, empty ``cls`` whose fields can be set with plain assignments;
    :func:`sealed` makes it read-only. Jobs are made once per claim and per
    event, and plain stores cost a third of ``object.__setattr__``."""
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = type(
            f"_Writable{cls.__name__}",
            (cls,),
            {
                "__slots__": (),
                "__setattr__": object.__setattr__,
                "__delattr__": object.__delattr__,
                "__module__": cls.__module__,
            },
        )
    return object.__new__(builder)  # type: ignore[no-any-return]


def sealed(job: JobT, cls: type[JobT]) -> JobT:
    """``job`` (from :func:`writable`) as the read-only ``cls`` it was made for."""
    job.__class__ = cls
    return job


@dataclass(frozen=True, slots=True)
class Progress:
    """What a job's handler last reported with ``job.set_progress``."""

    #: From 0 to 100.
    percent: float
    message: str | None
    #: The keyword arguments given to ``set_progress`` (decoded JSON).
    data: dict[str, Any]

    @classmethod
    def from_json(cls, text: str) -> Progress:
        report = _core.decode_json(text)
        return cls(report["percent"], report["message"], report["data"])


class Job(Generic[T_co]):
    """One job as committed: what it is, where it stands, and its history.

    Read-only: a job from a query, an event or ``insert`` never changes; read
    it again for news. ``args`` is decoded into the task's argument type;
    ``metadata`` and ``errors`` are decoded on first access. Timestamps are
    timezone-aware ``datetime`` objects in UTC.
    """

    __slots__ = (
        "_args",
        "_args_json",
        "_decode_args",
        "_errors",
        "_errors_json",
        "_metadata",
        "_metadata_json",
        "_payload_omitted",
        "_progress_json",
        "_result_json",
        "attempt",
        "attempted_at",
        "callback_id",
        "callback_timeout_at",
        "crashes",
        "created_at",
        "finalized_at",
        "id",
        "kind",
        "max_attempts",
        "max_crashes",
        "parent_id",
        "partition_key",
        "priority",
        "queue",
        "rate_class",
        "run_at",
        "run_lease",
        "schema_version",
        "state",
        "tags",
    )

    id: int
    kind: str
    queue: str
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    crashes: int
    max_crashes: int | None
    run_lease: int
    run_at: datetime.datetime
    created_at: datetime.datetime
    attempted_at: datetime.datetime | None
    finalized_at: datetime.datetime | None
    tags: list[str]
    callback_id: uuid.UUID | None
    callback_timeout_at: datetime.datetime | None
    #: The schema version its arguments are at (1 for a task that declares
    #: none): as stored, or the version of this process's task for the kind
    #: when the arguments were upcast to it (see ``@client.task``).
    schema_version: int
    #: The rate class whose shared budget its claims spend (``rate_class=``
    #: at insert, else its task's), or ``None``. ``None`` also in a job a
    #: claim handed to a handler (see :data:`OPTIONAL_JOB_COLUMNS`).
    rate_class: str | None
    #: The partition (tenant) it was inserted for (``partition_key=``), or
    #: ``None``. ``None`` also in a job a claim handed to a handler.
    partition_key: str | None
    #: The job whose transition inserted this one as a follow-up (an
    #: ``on_*_enqueue`` spec's, or one its handler staged), else ``None``;
    #: ``None`` also in a job a claim handed to a handler, and where the
    #: query read no such column (see :data:`OPTIONAL_JOB_COLUMNS`).
    parent_id: int | None
    _args_json: str
    _metadata_json: str | None
    _errors_json: str | None
    _decode_args: ArgsDecoder
    _args: Any
    _metadata: Any
    _errors: Any
    _payload_omitted: bool
    _progress_json: str | None
    _result_json: str | None

    @classmethod
    def from_record(
        cls,
        row: Any,
        decode_args: ArgsDecoder | None = None,
        *,
        with_payload: bool = True,
        upcast: tuple[str, int] | None = None,
    ) -> Job[Any]:
        """Builds a job from a row of any job query, reading its columns by
        name (:data:`JOB_COLUMNS`). ``with_payload=False`` marks a row read
        for inspection without its args and metadata; ``upcast``, the
        arguments' JSON and version, stands for the row's arguments when
        they were upcast to the task's schema version."""
        job = writable(cls)
        fill(job, row, decode_args, with_payload, upcast)
        return sealed(job, cls)

    def finished(self, row: Any, result_json: str | None = None) -> Job[T_co]:
        """This attempt's job as its outcome committed it: a new ``Job`` taking
        the columns ``jobs_finish_batch_observed`` returns (state, attempt,
        run_at when rescheduled, finalized_at, errors when appended,
        callback, tags) from ``row``, its result from ``result_json`` (what
        the completion wrote) and the rest from this one. Arguments and
        metadata are decoded again from the stored text, so nothing a handler
        changed in its copy leaks into this one."""
        job: Job[T_co] = writable(Job)
        job.id = self.id
        job.run_lease = self.run_lease
        job.kind = self.kind
        job.queue = self.queue
        job.state = _STATE_BY_NAME[row["state"]]
        job.priority = self.priority
        job.attempt = row["attempt"]
        job.max_attempts = self.max_attempts
        job.crashes = self.crashes
        job.max_crashes = self.max_crashes
        job.run_at = self.run_at if row["run_at"] is None else row["run_at"]
        job.created_at = self.created_at
        job.attempted_at = self.attempted_at
        job.finalized_at = row["finalized_at"]
        job.tags = row["tags"] or []
        job._args_json = self._args_json
        job._metadata_json = self._metadata_json
        job._errors_json = self._errors_json if row["errors"] is None else row["errors"]
        job.callback_id = row["callback_id"]
        job.callback_timeout_at = row["callback_timeout_at"]
        job.schema_version = self.schema_version
        job.rate_class = self.rate_class
        job.partition_key = self.partition_key
        job.parent_id = self.parent_id
        job._decode_args = self._decode_args
        job._args = _UNSET
        job._metadata = _UNSET
        job._errors = _UNSET
        job._payload_omitted = False
        job._progress_json = self._progress_json
        job._result_json = result_json
        return sealed(job, Job)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(
            f"awa.Job is read-only (tried to set {name!r}); read the job again for its "
            "current state"
        )

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"awa.Job is read-only (tried to delete {name!r})")

    def _require_payload(self) -> None:
        if self._payload_omitted:
            raise PayloadOmitted(self.id)

    @property
    def args(self) -> T_co:
        """The job's arguments, decoded into the task's argument type."""
        self._require_payload()
        if self._args is _UNSET:
            _set(self, "_args", self._decode_args(self._args_json))
        return self._args  # type: ignore[no-any-return]

    @property
    def args_json(self) -> str:
        """The arguments exactly as stored (compact JSON text); in a
        running job of an older schema version, as upcast to its task's."""
        self._require_payload()
        return self._args_json

    @property
    def metadata(self) -> dict[str, Any]:
        """Free-form metadata given at insert (an empty dict when none was)."""
        self._require_payload()
        if self._metadata is _UNSET:
            raw = self._metadata_json
            _set(self, "_metadata", {} if raw is None else _core.decode_json(raw))
        return self._metadata  # type: ignore[no-any-return]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """One entry per failed attempt, oldest first: ``attempt``, ``type``,
        ``message``, ``traceback`` (its tail), ``outcome`` and ``at``."""
        if self._errors is _UNSET:
            raw = self._errors_json
            _set(self, "_errors", [] if raw is None else _core.decode_json(raw))
        return self._errors  # type: ignore[no-any-return]

    @property
    def progress(self) -> Progress | None:
        """What the handler last reported (``set_progress``), kept across
        retries; ``None`` before any report. In a running job, the latest
        report of this attempt, written or not; elsewhere, what was written
        (by a heartbeat or ``flush_progress``) when the row was read."""
        raw = self._progress_json
        return None if raw is None else Progress.from_json(raw)

    @property
    def result(self) -> Any:
        """What the handler returned when it completed the job, decoded from
        JSON (dicts, lists, strings, numbers; a pydantic model or dataclass
        comes back as a dict); ``None`` when it returned ``None``, and for a
        job that has not completed. Like ``args``, it may hold personal data:
        a job read without its payload (``get_job``/``list_jobs`` without
        ``include_payload=True``) raises :class:`awa.PayloadOmitted`;
        ``client.result`` reads it either way."""
        self._require_payload()
        raw = self._result_json
        return None if raw is None else _core.decode_json(raw)

    @property
    def attempts(self) -> list[AttemptRecord]:
        """Every run of this job, oldest first: outcome (``succeeded``,
        ``failed``, ``timed_out``, ``abandoned``, ``cancelled``,
        ``undecodable``, ``running``, ``waiting``), start, end, worker and
        error (see :mod:`awa.attempts`)."""
        from awa.attempts import attempt_records  # attempts imports this module

        return attempt_records(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} id={self.id} kind={self.kind!r} queue={self.queue!r} "
            f"state={self.state.value} attempt={self.attempt}/{self.max_attempts}>"
        )


def fill(
    job: Job[Any],
    row: Any,
    decode_args: ArgsDecoder | None,
    with_payload: bool,
    upcast: tuple[str, int] | None = None,
) -> None:
    """Sets a :func:`writable` job's fields from a row, by column name;
    ``upcast`` (JSON, version), when given, in place of the row's arguments
    and their version."""
    job.id = row["id"]
    job.run_lease = row["run_lease"]
    job.kind = row["kind"]
    job.queue = row["queue"]
    job.state = _STATE_BY_NAME[row["state"]]
    job.priority = row["priority"]
    job.attempt = row["attempt"]
    job.max_attempts = row["max_attempts"]
    job.crashes = row["crashes"]
    job.max_crashes = row["max_crashes"]
    job.run_at = row["run_at"]
    job.created_at = row["created_at"]
    job.attempted_at = row["attempted_at"]
    job.finalized_at = row["finalized_at"]
    job.tags = row["tags"] or []
    if upcast is None:
        job._args_json = row["args"]
        job.schema_version = row["schema_version"] or FIRST_SCHEMA_VERSION
    else:
        job._args_json, job.schema_version = upcast
    job._metadata_json = row["metadata"]
    job._errors_json = row["errors"]
    job.callback_id = row["callback_id"]
    job.callback_timeout_at = row["callback_timeout_at"]
    job.rate_class = row.get("rate_class")
    job.partition_key = row.get("partition_key")
    job.parent_id = row.get("parent_id")
    job._progress_json = row.get("progress")
    job._result_json = row.get("result")
    job._decode_args = decode_args or _core.decode_json
    job._args = _UNSET
    job._metadata = _UNSET
    job._errors = _UNSET
    job._payload_omitted = not with_payload


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()
