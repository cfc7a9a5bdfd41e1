"""The executor: runs one handler per claimed job and records its outcome.

Overview: the producer hands each claimed row to :meth:`Executor.start`,
which builds the :class:`~awa.job.Job` and runs its handler in a task of
its own (sync ``def`` handlers run in a thread pool). When the handler
returns or raises, the outcome goes into the Rust completion batch, the
slot is freed and the completer is nudged. Nothing here waits on the
database.

Outcomes: ``None`` → completed; :class:`~awa.RetryAfter` → retryable (uses
an attempt); :class:`~awa.Snooze` → scheduled (does not); :class:`~awa.Cancel`
→ cancelled; :class:`~awa.TerminalError` → failed; any other exception →
retryable with backoff until ``max_attempts``, then failed.

Failure handling: a handler cancelled by shutdown records nothing; the
worker releases its job. Anything else a handler does, including raising
``CancelledError`` on its own, is an outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import functools
import logging
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from awa import _core
from awa.control import JobControl
from awa.db import Database
from awa.errors import AttemptTimeout, TerminalError, UnknownJobKind
from awa.followups import FollowUpStage
from awa.hooks import CANCELLED, COMPLETED, FAILED, STARTED, WAITING_FOR_CALLBACK, Transition
from awa.job import Job
from awa.lifecycle import Lifecycle, Pending, discard_staged
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback
from awa.tasks import Task

log = logging.getLogger("awa.executor")

TRACEBACK_LINES = 40
#: Snooze is a reschedule, not an outcome: no event, no follow-ups.
SNOOZED = "snoozed"


class Executor:
    def __init__(
        self,
        lifecycle: Lifecycle,
        dispatcher: _core.Dispatcher,
        batch: _core.CompletionBatch,
        pending: dict[int, Pending],
        threads: int,
        db: Database | None = None,
        control: JobControl | None = None,
    ) -> None:
        self._db = db
        self._control = control
        if control is not None:
            control.on_resumed = self.resumed
            control.on_cancel = self.cancel_requested
        self._lifecycle = lifecycle
        self._registry = lifecycle.registry
        self._pending = pending
        self._dispatcher = dispatcher
        self._batch = batch
        self._running: dict[int, asyncio.Task[None]] = {}
        # Running jobs whose task set interrupt_on_cancel, and those of them
        # interrupted by a cancellation (their attempts record nothing).
        self._interruptible: set[int] = set()
        self._cancelled_on_request: set[int] = set()
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="awa-handler")
        self._shutting_down = False
        self._warned_return_kinds: set[str] = set()
        # Set by the worker once the producer and completer exist.
        self.on_slot_freed: Callable[[bool], None] = lambda _can_claim: None
        self.on_outcome: Callable[[], None] = lambda: None
        self.finished = 0

    def start(self, row: Any, plan_id: int) -> None:
        """Starts the handler for a row claimed by plan ``plan_id``."""
        task_def = self._registry.by_kind.get(row[2])
        decode = task_def.decode_args if task_def is not None else None
        job: Job[Any] = Job.from_row(row, decode)
        if not self._dispatcher.start(plan_id, job.id, job.run_lease, job.queue):
            # Cannot happen unless the claim returned more than was asked;
            # the job stays claimed and is rescued if this process dies.
            log.error("claimed %r without a free slot; leaving it to the rescuer", job)
            return
        control = self._control
        if control is not None and control.holds(job.kind, job.args_json):
            self._running[job.id] = asyncio.create_task(self._hold(job), name=f"awa-hold-{job.id}")
            return
        stage = job._stage = FollowUpStage(self._registry)
        job._db = self._db
        job._control = self._control
        if task_def is not None and task_def.interrupt_on_cancel and task_def.is_async:
            self._interruptible.add(job.id)
        budget_s = _attempt_budget(row, job, task_def)
        self._running[job.id] = asyncio.create_task(
            self._run(job, stage, budget_s), name=f"awa-job-{job.id}"
        )
        hooks = self._lifecycle.hooks
        if hooks.wants(job.kind):
            # A job of its own: the handler's may be changed by the handler.
            hooks.emit(Transition(STARTED, Job.from_row(row, decode)))

    async def _hold(self, job: Job[Any]) -> None:
        """The job's fingerprint is quarantined: give it back unrun, parked
        until the quarantine is released."""
        try:
            assert self._db is not None
            await self._db.fetchval("jobs_hold", job.id, job.run_lease)
            log.warning("job %d (%s) is held: its fingerprint is quarantined", job.id, job.kind)
        except Exception as error:  # noqa: BLE001 - the rescue gives it back if this failed
            log.error("holding quarantined job %d failed (%s)", job.id, error)
        finally:
            self._running.pop(job.id, None)
            self.on_slot_freed(self._dispatcher.finish(job.id))

    def cancel_requested(self, job_id: int) -> None:
        """The job was cancelled on request: a handler that opted in is
        interrupted (its attempt then records nothing: the job is already
        cancelled)."""
        task = self._running.get(job_id)
        if task is None:
            return  # not running here
        if self._control is not None:
            self._control.mark_cancelled(job_id)
        if job_id in self._interruptible:
            self._cancelled_on_request.add(job_id)
            task.cancel("the job was cancelled on request")

    def resumed(self, row: Any) -> None:
        """A handler waiting in place was resumed by its callback: the job
        re-entered execution, so ``Started`` fires again."""
        hooks = self._lifecycle.hooks
        if hooks.wants(row["kind"]):
            hooks.emit(Transition(STARTED, self._lifecycle.committed_job(row)))

    async def _run(self, job: Job[Any], stage: FollowUpStage, budget_s: float | None) -> None:
        started = time.monotonic()
        try:
            try:
                result = await self._call_handler(job, budget_s)
            finally:
                stage.seal()  # staging closes when the handler returns or raises
        except asyncio.CancelledError:
            if job.id in self._cancelled_on_request:
                # The job is already cancelled; any write would be refused.
                stage.discard()
                self._finish(job)
                return
            current = asyncio.current_task()
            if self._shutting_down and current is not None and current.cancelling():
                # Shutdown interrupted the handler: the worker releases the job.
                self._running.pop(job.id, None)
                stage.discard()
                raise
            self._record_error(job, asyncio.CancelledError("the handler was cancelled"))
        except TerminalError as error:
            self._record_terminal(job, error)
        except Exception as error:  # noqa: BLE001 - any other exception is a retryable failure
            self._record_error(job, error)
        else:
            self._record_result(job, result, time.monotonic() - started)
        self._finish(job)

    async def _call_handler(self, job: Job[Any], budget_s: float | None) -> Any:
        task_def = self._registry.by_kind.get(job.kind)
        if task_def is None:
            raise UnknownJobKind(
                f"no task handles kind {job.kind!r} in this worker "
                f"(known: {sorted(self._registry.by_kind)})"
            )
        job.args  # noqa: B018 - decode now: bad arguments are this attempt's failure
        if task_def.is_async:
            if budget_s is None:
                return await task_def.handler(job)
            async with asyncio.timeout(budget_s) as scope:
                try:
                    return await task_def.handler(job)
                except asyncio.CancelledError:
                    if scope.expired():
                        raise AttemptTimeout(_timeout_message(budget_s)) from None
                    raise
        context = contextvars.copy_context()
        call = functools.partial(context.run, task_def.handler, job)
        running = asyncio.get_running_loop().run_in_executor(self._threads, call)
        if budget_s is None:
            return await running
        try:
            return await asyncio.wait_for(running, budget_s)
        except TimeoutError:
            log.warning(
                "job %d (%s): the sync handler passed its %gs deadline; its thread runs on "
                "until it returns, but the attempt is recorded as timed out",
                job.id, job.kind, budget_s,
            )  # fmt: skip
            raise AttemptTimeout(_timeout_message(budget_s)) from None

    def _record_result(self, job: Job[Any], result: Any, duration_s: float) -> None:
        now = time.monotonic()
        batch = self._batch
        if result is None:
            self._record_completed(job, duration_s, now)
        elif isinstance(result, RetryAfter):
            self._observe(
                job, FAILED, error=f"RetryAfter: the handler asked to retry in {result.seconds:g}s"
            )
            batch.retry_after(
                job.id,
                job.run_lease,
                job.attempt,
                job.max_attempts,
                job.crashes,
                result.seconds,
                now,
            )
        elif isinstance(result, Snooze):
            self._observe(job, SNOOZED)
            batch.snooze(job.id, job.run_lease, result.seconds, now)
        elif isinstance(result, WaitForCallback):
            if job.callback_id is None or result.callback_id != job.callback_id:
                self._record_error(
                    job,
                    TypeError(
                        "the handler returned WaitForCallback without the callback id "
                        "that `await job.register_callback()` gave this attempt"
                    ),
                )
                return
            self._observe(job, WAITING_FOR_CALLBACK)
            batch.waiting_for_callback(job.id, job.run_lease, now)
        elif isinstance(result, Cancel):
            self._observe(job, CANCELLED, reason=str(result.reason))
            batch.cancelled(job.id, job.run_lease, job.attempt, str(result.reason), now)
        else:
            if job.kind not in self._warned_return_kinds:
                self._warned_return_kinds.add(job.kind)
                log.warning(
                    "handler for %r returned %r; only None, RetryAfter, Snooze, Cancel and "
                    "WaitForCallback mean something, so the job is marked completed",
                    job.kind,
                    type(result).__name__,
                )
            self._record_completed(job, duration_s, now)

    def _record_completed(self, job: Job[Any], duration_s: float, now: float) -> None:
        stage = job._stage
        if stage is not None and stage.error is not None:
            # The handler swallowed a StagingError: completing without the
            # follow-up it meant to stage would lose it silently.
            self._record_terminal(job, stage.error)
            return
        self._observe(job, COMPLETED, duration_s=duration_s)
        self._batch.completed(job.id, job.run_lease, now)

    def _observe(
        self,
        job: Job[Any],
        outcome: str,
        *,
        duration_s: float = 0.0,
        error: str = "",
        reason: str = "",
    ) -> None:
        """Keeps what hooks and follow-ups will need once the outcome commits;
        drops staged follow-ups of any outcome but a completion."""
        stage = job._stage
        staged = stage is not None and stage.count > 0
        wanted = outcome != SNOOZED and (
            self._lifecycle.observes(job.kind, outcome) or (outcome == COMPLETED and staged)
        )
        if not (wanted or staged):
            return
        pending = Pending(job, outcome, duration_s, error, reason, stage if staged else None)
        if staged and outcome != COMPLETED:
            discard_staged(pending, outcome)
            pending.stage = None
        if wanted:
            self._pending[job.id] = pending

    def _record_terminal(self, job: Job[Any], error: BaseException) -> None:
        self._observe(job, FAILED, error=_error_text(error))
        self._batch.failed_terminal(
            job.id,
            job.run_lease,
            job.attempt,
            type(error).__name__,
            str(error),
            _traceback_tail(error),
            time.monotonic(),
        )

    def _record_error(self, job: Job[Any], error: BaseException) -> None:
        self._observe(job, FAILED, error=_error_text(error))
        self._batch.failed(
            job.id,
            job.run_lease,
            job.attempt,
            job.max_attempts,
            job.crashes,
            type(error).__name__,
            str(error),
            _traceback_tail(error),
            time.monotonic(),
        )

    def _finish(self, job: Job[Any]) -> None:
        self._running.pop(job.id, None)
        self._interruptible.discard(job.id)
        self._cancelled_on_request.discard(job.id)
        if self._control is not None:
            self._control.forget(job.id)
        self.finished += 1
        self.on_outcome()
        self.on_slot_freed(self._dispatcher.finish(job.id))

    async def stop(self, timeout_s: float) -> None:
        """Waits up to ``timeout_s`` for running handlers, then cancels the rest
        (they record nothing; their jobs stay held for the worker to release)."""
        pending = set(self._running.values())
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=max(timeout_s, 0.0))
        if pending:
            self._shutting_down = True
            for task in pending:
                task.cancel()
            # Give cancelled handlers a moment to unwind (finally blocks).
            await asyncio.wait(pending, timeout=1.0)
        self._threads.shutdown(wait=False, cancel_futures=True)


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _traceback_tail(error: BaseException) -> str:
    lines = traceback.format_exception(error)
    return "".join(lines[-TRACEBACK_LINES:])


#: Where ``jobs_claim`` puts the attempt's deadline, after the job's columns.
_ATTEMPT_DEADLINE_AT = 20


def _attempt_budget(row: Any, job: Job[Any], task_def: Task | None) -> float | None:
    """Seconds this attempt may run: until the deadline the claim set
    (measured from when it started, so clocks need not agree), else the
    task's own timeout (claims that set no deadline)."""
    deadline: datetime.datetime | None = (
        row[_ATTEMPT_DEADLINE_AT] if len(row) > _ATTEMPT_DEADLINE_AT else None
    )
    if deadline is not None and job.attempted_at is not None:
        return max((deadline - job.attempted_at).total_seconds(), 0.0)
    return None if task_def is None else task_def.timeout_s


def _timeout_message(budget_s: float) -> str:
    return f"the attempt ran past its {budget_s:g}s deadline and was cancelled"
