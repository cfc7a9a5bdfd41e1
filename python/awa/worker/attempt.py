"""The running attempt a handler receives: :class:`RunningJob`.

A ``RunningJob`` is the claimed row (an :class:`awa.Job`) plus what the
attempt may do while it runs: stage follow-ups that commit with its
completion, register and wait for a callback, see whether it was cancelled,
report its progress.
The executor makes one per claim; nothing else holds a connection or a
control channel (a committed ``Job`` from a query or an event has neither).
Handlers annotated ``awa.Job[T]`` receive one too.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from awa.config import positive_seconds
from awa.errors import AwaError, StagingError
from awa.job import _UNSET, ArgsDecoder, Job, fill, writable
from awa.outcomes import CallbackToken, callback_uuid
from awa.worker.progress import progress_json

if TYPE_CHECKING:
    from awa.db import Database
    from awa.envelope import Decoded
    from awa.followups import FollowUpStage
    from awa.worker.control import JobControl
    from awa.worker.progress import ProgressBuffer

T_co = TypeVar("T_co", covariant=True)

_set = object.__setattr__


class RunningJob(Job[T_co]):
    """A job while a handler runs it: the claimed row plus the attempt's
    capabilities (:meth:`enqueue_on_completion`, :meth:`register_callback`,
    :meth:`wait_for_callback`, :meth:`is_cancelled`, :meth:`set_progress`,
    :meth:`flush_progress`)."""

    __slots__ = ("_control", "_db", "_progress_buffer", "_reported", "_stage")

    _stage: FollowUpStage | None
    _db: Database | None
    _control: JobControl | None
    _progress_buffer: ProgressBuffer | None
    #: Whether this attempt called set_progress (its outcome then carries
    #: the last report).
    _reported: bool

    @classmethod
    def claimed(
        cls,
        row: Any,
        decode_args: ArgsDecoder | None,
        stage: FollowUpStage | None,
        db: Database | None,
        control: JobControl | None,
        decoded: Decoded | None = None,
        progress: ProgressBuffer | None = None,
    ) -> RunningJob[Any]:
        """The attempt a claim returned ``row`` for; with its arguments
        already ``decoded`` (and upcast) when the worker decoded them, and
        the ``progress`` buffer its worker's heartbeat writes."""
        job: RunningJob[Any] = writable(cls)
        if decoded is None:
            fill(job, row, decode_args, True)
        else:
            fill(job, row, decode_args, True, decoded.upcast)
            job._args = decoded.value
        job._stage = stage
        job._db = db
        job._control = control
        job._progress_buffer = progress
        job._reported = False
        job.__class__ = cls  # sealed
        return job

    @property
    def stage(self) -> FollowUpStage | None:
        """What the handler staged (the worker reads it once the handler returns)."""
        return self._stage

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
                "enqueue_on_completion works only while the handler runs "
                "(this attempt has finished)"
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
    ) -> CallbackToken:
        """Gives this attempt a callback id to hand to an external system, and
        returns it as an :class:`awa.CallbackToken` (a ``uuid.UUID`` with
        ``.id``); ``return awa.WaitForCallback(token)`` then parks the
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
        db = self._require_db("register_callback")
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
        row = await db.fetchrow("jobs_register_callback", self.id, self.run_lease, seconds, policy)
        if row is None:
            raise AwaError(
                f"job {self.id}: this attempt no longer holds the job (rescued or released); "
                "no callback was registered"
            )
        _set(self, "callback_id", row["callback_id"])
        _set(self, "callback_timeout_at", row["callback_timeout_at"])
        return CallbackToken(int=row["callback_id"].int)

    def is_cancelled(self) -> bool:
        """Whether this job was cancelled on request (``client.cancel``) while
        this handler runs. Long handlers should check it between steps and
        return: the job is already ``cancelled``, and nothing this attempt
        writes afterwards is applied."""
        return self._control is not None and self._control.is_cancelled(self.id)

    async def wait_for_callback(self, callback_id: uuid.UUID | str) -> Any:
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
        db = self._require_db("wait_for_callback")
        callback_id = callback_uuid(callback_id)
        if callback_id != self.callback_id:
            raise AwaError(
                f"job {self.id}: wait_for_callback needs the callback id that "
                "`await job.register_callback()` last gave this attempt"
            )
        from awa.worker.control import wait_for_resume

        row = await wait_for_resume(db, self._control, self, callback_id)
        _set(self, "callback_id", None)
        _set(self, "callback_timeout_at", None)
        _set(self, "_metadata_json", row["metadata"])
        _set(self, "_metadata", _UNSET)
        result = row["callback_result"]
        from awa import _core

        return None if result is None else _core.decode_json(result)

    def set_progress(self, percent: float, message: str | None = None, **data: Any) -> None:
        """Reports how far the handler has got: ``percent`` (0 to 100), an
        optional ``message`` and any JSON-serialisable ``data``, at most
        ``MAX_PROGRESS_BYTES`` (8 KiB) of JSON in all.

        Nothing is written now: the worker's next heartbeat writes the latest
        report of every job it runs in its one statement (or call
        :meth:`flush_progress`); the last report also goes with the
        attempt's outcome. :attr:`progress` shows it at once. The
        report outlives this attempt: a retry starts from it. Raises
        :class:`awa.errors.ProgressError` (a ``ValidationError``) naming the
        value that cannot be stored; nothing is kept then.
        """
        text = progress_json(percent, message, data)
        _set(self, "_progress_json", text)
        _set(self, "_reported", True)
        if self._progress_buffer is not None:
            self._progress_buffer.put(self.id, self.run_lease, text)

    async def flush_progress(self) -> bool:
        """Writes the latest progress report now, instead of at the next
        heartbeat; returns whether it was written: false when there is no
        report, or when this attempt no longer holds the job (rescued,
        cancelled), which then keeps whatever it had."""
        db = self._require_db("flush_progress")
        buffer = self._progress_buffer
        pending = buffer.take(self.id) if buffer is not None else None
        text = self._progress_json
        if text is None:
            return False
        try:
            written = await db.fetchval("jobs_set_progress", self.id, self.run_lease, text)
        except BaseException:
            if buffer is not None and pending is not None:
                buffer.put_back({self.id: pending})
            raise
        return written is not None

    def _require_db(self, what: str) -> Database:
        if self._db is None:
            raise AwaError(f"{what} works only on a job a worker is running")
        return self._db
