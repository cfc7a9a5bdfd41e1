"""Jobs as handlers and inspection see them: :class:`Job` and :class:`JobState`."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from awa import _core
from awa.config import positive_seconds
from awa.errors import AwaError, PayloadOmitted, StagingError

if TYPE_CHECKING:
    from awa.attempts import AttemptRecord
    from awa.control import JobControl
    from awa.db import Database
    from awa.followups import FollowUpStage

T = TypeVar("T")


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

    @property
    def is_terminal(self) -> bool:
        """Completed, failed and cancelled jobs never run again on their own."""
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.Completed, JobState.Failed, JobState.Cancelled})
_STATE_BY_NAME: Mapping[str, JobState] = {state.value: state for state in JobState}

# Positions of the columns every job query returns (python/awa/sql/queries/jobs.sql).
(
    _ID,
    _RUN_LEASE,
    _KIND,
    _QUEUE,
    _STATE,
    _PRIORITY,
    _ATTEMPT,
    _MAX_ATTEMPTS,
    _CRASHES,
    _MAX_CRASHES,
    _RUN_AT,
    _CREATED_AT,
    _ATTEMPTED_AT,
    _FINALIZED_AT,
    _ARGS,
    _TAGS,
    _METADATA,
    _ERRORS,
    _CALLBACK_ID,
    _CALLBACK_TIMEOUT_AT,
) = range(20)

ArgsDecoder = Callable[[str], Any]


class Job(Generic[T]):
    """One job: what it is, where it stands, and its history.

    Handlers receive the running attempt (``state`` is ``running``; ``attempt``
    counts this run). ``args`` is decoded into the task's argument type;
    ``metadata`` and ``errors`` are decoded on first access. Timestamps are
    timezone-aware ``datetime`` objects in UTC.
    """

    __slots__ = (
        "_args",
        "_args_json",
        "_control",
        "_db",
        "_decode_args",
        "_errors",
        "_errors_json",
        "_metadata",
        "_metadata_json",
        "_payload_omitted",
        "_stage",
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
        "priority",
        "queue",
        "run_at",
        "run_lease",
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
    _args_json: str
    _metadata_json: str | None
    _errors_json: str | None
    _decode_args: ArgsDecoder
    _args: Any
    _metadata: Any
    _errors: Any
    _payload_omitted: bool
    _stage: FollowUpStage | None
    _db: Database | None
    _control: JobControl | None

    @classmethod
    def from_row(cls, row: Any, decode_args: ArgsDecoder | None = None) -> Job[Any]:
        """Builds a job from a row of any job query (positional columns)."""
        job: Job[Any] = cls.__new__(cls)
        job.id = row[_ID]
        job.run_lease = row[_RUN_LEASE]
        job.kind = row[_KIND]
        job.queue = row[_QUEUE]
        job.state = _STATE_BY_NAME[row[_STATE]]
        job.priority = row[_PRIORITY]
        job.attempt = row[_ATTEMPT]
        job.max_attempts = row[_MAX_ATTEMPTS]
        job.crashes = row[_CRASHES]
        job.max_crashes = row[_MAX_CRASHES]
        job.run_at = row[_RUN_AT]
        job.created_at = row[_CREATED_AT]
        job.attempted_at = row[_ATTEMPTED_AT]
        job.finalized_at = row[_FINALIZED_AT]
        job.tags = row[_TAGS] or []
        job._args_json = row[_ARGS]
        job._metadata_json = row[_METADATA]
        job._errors_json = row[_ERRORS]
        job.callback_id = row[_CALLBACK_ID]
        job.callback_timeout_at = row[_CALLBACK_TIMEOUT_AT]
        job._stage = None
        job._db = None
        job._control = None
        job._decode_args = decode_args or _core.decode_json
        job._args = _UNSET
        job._metadata = _UNSET
        job._errors = _UNSET
        job._payload_omitted = False
        return job

    def finished(self, row: Any) -> Job[T]:
        """This attempt's job as its outcome committed it: a copy taking the
        columns ``jobs_finish_batch_observed`` returns (state, attempt,
        run_at when rescheduled, finalized_at, errors when appended,
        callback, tags) from ``row``. Arguments and metadata are decoded again from the stored
        text, so nothing the handler changed in its copy leaks into this one."""
        job: Job[T] = Job.__new__(Job)
        job.id = self.id
        job.run_lease = self.run_lease
        job.kind = self.kind
        job.queue = self.queue
        job.state = _STATE_BY_NAME[row[1]]
        job.priority = self.priority
        job.attempt = row[2]
        job.max_attempts = self.max_attempts
        job.crashes = self.crashes
        job.max_crashes = self.max_crashes
        job.run_at = self.run_at if row[3] is None else row[3]
        job.created_at = self.created_at
        job.attempted_at = self.attempted_at
        job.finalized_at = row[4]
        job.tags = row[8] or []
        job._args_json = self._args_json
        job._metadata_json = self._metadata_json
        job._errors_json = self._errors_json if row[5] is None else row[5]
        job.callback_id = row[6]
        job.callback_timeout_at = row[7]
        job._stage = None
        job._db = None
        job._control = None
        job._decode_args = self._decode_args
        job._args = _UNSET
        job._metadata = _UNSET
        job._errors = _UNSET
        job._payload_omitted = False
        return job

    def _omit_payload(self) -> None:
        """Marks a job read without its args and metadata (inspection)."""
        self._payload_omitted = True

    def _require_payload(self) -> None:
        if self._payload_omitted:
            raise PayloadOmitted(self.id)

    @property
    def args(self) -> T:
        """The job's arguments, decoded into the task's argument type."""
        self._require_payload()
        if self._args is _UNSET:
            self._args = self._decode_args(self._args_json)
        return self._args  # type: ignore[no-any-return]

    @property
    def args_json(self) -> str:
        """The arguments exactly as stored (compact JSON text)."""
        self._require_payload()
        return self._args_json

    @property
    def metadata(self) -> dict[str, Any]:
        """Free-form metadata given at insert (an empty dict when none was)."""
        self._require_payload()
        if self._metadata is _UNSET:
            raw = self._metadata_json
            self._metadata = {} if raw is None else _core.decode_json(raw)
        return self._metadata  # type: ignore[no-any-return]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """One entry per failed attempt, oldest first: ``attempt``, ``type``,
        ``message``, ``traceback`` (its tail), ``outcome`` and ``at``."""
        if self._errors is _UNSET:
            raw = self._errors_json
            self._errors = [] if raw is None else _core.decode_json(raw)
        return self._errors  # type: ignore[no-any-return]

    @property
    def attempts(self) -> list[AttemptRecord]:
        """Every run of this job, oldest first: outcome (``succeeded``,
        ``failed``, ``timed_out``, ``abandoned``, ``cancelled``, ``running``,
        ``waiting``), start, end, worker and error (see :mod:`awa.attempts`)."""
        from awa.attempts import attempt_records  # attempts imports this module

        return attempt_records(self)

    def enqueue_on_completion(self, args: Any, **options: Any) -> None:
        """Stages a follow-up job, inserted only if this attempt completes.

        Call it from the handler; ``options`` are those of
        :meth:`awa.AsyncClient.insert` (``kind``, ``queue``, ``priority``,
        ``max_attempts``, ``max_crashes``, ``run_at``, ``tags``,
        ``metadata``, ``unique_opts``). The follow-up is checked now and
        written in the same transaction as the completion, after the
        follow-ups of registered ``on_completed_enqueue`` specs; any other
        outcome discards it. At most 16 follow-ups and 64 KiB per attempt.

        Raises :class:`awa.StagingError` for anything the insert would refuse,
        and once the handler has returned. A handler that catches the error
        and then returns normally (completes) fails for good instead.
        """
        if self._stage is None:
            raise StagingError(
                "enqueue_on_completion works only on the job a handler is running "
                "(this job came from a query, or its attempt has finished)"
            )
        self._stage.add(args, options)

    async def register_callback(
        self,
        timeout_seconds: float = 3600.0,
        *,
        filter: str | None = None,
        on_fail: str | None = None,
        on_complete: str | None = None,
        transform: str | None = None,
    ) -> uuid.UUID:
        """Gives this attempt a callback id to hand to an external system, and
        returns it; ``return awa.WaitForCallback(callback_id)`` then parks the
        job until ``complete_external``, ``fail_external``,
        ``retry_external`` or ``resolve_callback`` resolves it (or
        ``await job.wait_for_callback(callback_id)`` waits in place for
        ``resume_external``). Register before handing the id out: it is
        stored first. ``timeout_seconds`` sets ``callback_timeout_at``.

        ``filter``, ``on_fail``, ``on_complete`` and ``transform`` are CEL
        expressions over ``payload`` that ``resolve_callback`` applies (see
        :mod:`awa.callback_policy`); they are checked here and stored with
        the job. Registering again replaces the callback and its policy.
        """
        if self._db is None:
            raise AwaError("register_callback works only on the job a handler is running")
        from awa.callback_policy import policy_json

        seconds = positive_seconds(timeout_seconds, "timeout_seconds")
        policy = policy_json(
            {
                "filter": filter,
                "on_fail": on_fail,
                "on_complete": on_complete,
                "transform": transform,
            }
        )
        row = await self._db.fetchrow(
            "jobs_register_callback", self.id, self.run_lease, seconds, policy
        )
        if row is None:
            raise AwaError(
                f"job {self.id}: this attempt no longer holds the job (rescued or released); "
                "no callback was registered"
            )
        self.callback_id, self.callback_timeout_at = row[0], row[1]
        return row[0]  # type: ignore[no-any-return]

    def is_cancelled(self) -> bool:
        """Whether this job was cancelled on request (``client.cancel``) while
        this handler runs. Long handlers should check it between steps and
        return: the job is already ``cancelled``, and nothing this attempt
        writes afterwards is applied. Always false outside a worker."""
        return self._control is not None and self._control.is_cancelled(self.id)

    async def wait_for_callback(self, callback_id: uuid.UUID) -> Any:
        """Waits, inside the handler, until ``resume_external`` answers the
        callback this attempt registered, and returns its payload.

        Meanwhile the job shows ``waiting_external`` and its callback deadline
        applies, but this handler keeps its worker slot: for long waits,
        ``return awa.WaitForCallback(callback_id)`` frees it instead. A
        payload that arrived before the call is returned at once. Raises
        :class:`awa.AttemptLost` if the job left this attempt meanwhile
        (completed, failed or retried through the callback, or its deadline
        passed); let it propagate.
        """
        if self._db is None:
            raise AwaError("wait_for_callback works only on the job a handler is running")
        if callback_id is None or callback_id != self.callback_id:
            raise AwaError(
                f"job {self.id}: wait_for_callback needs the callback id that "
                "`await job.register_callback()` last gave this attempt"
            )
        from awa.control import wait_for_resume  # control imports this module

        row = await wait_for_resume(self._db, self._control, self, callback_id)
        self.callback_id = None
        self.callback_timeout_at = None
        self._metadata_json = row["metadata"]
        self._metadata = _UNSET
        result = row["callback_result"]
        return None if result is None else _core.decode_json(result)

    def __repr__(self) -> str:
        return (
            f"<Job id={self.id} kind={self.kind!r} queue={self.queue!r} "
            f"state={self.state.value} attempt={self.attempt}/{self.max_attempts}>"
        )


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()
