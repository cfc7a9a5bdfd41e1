"""The executor: runs one handler per claimed job and hands its outcome on.

Overview: the producer hands each claimed row to :meth:`Executor.start`,
which builds the :class:`~awa.RunningJob` and runs its handler in a task of
its own (sync ``def`` handlers run in a thread pool). A prefetched job (the
dispatcher claimed it ahead of a free slot) waits here until a handler of
its queue finishes, and starts in that handler's slot at once; the time it
waited comes off its attempt's budget, which counts from the claim. When
the handler returns or raises, :mod:`awa.worker.outcome` turns that into an
:class:`~awa.worker.outcome.Outcome`, which goes to the completer as a value
(``completer.record(job, outcome)``); the slot is freed and the producer
told. Nothing here waits on the database.

Before a handler starts, its job's arguments are decoded (upcast first
when they were written at an older schema version, see
:mod:`awa.envelope`). A job that cannot be decoded never starts: it is
parked ``undecodable`` (``jobs_park_undecodable``, its attempt given back),
with no event and no follow-up, and its slot is freed.

Failure handling: a handler cancelled by shutdown records nothing; the
worker releases its job, as it does every prefetched job that never started
(none starts once shutdown begins). Anything else a handler does, including raising
``CancelledError`` on its own, is an outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from awa import _core
from awa.db import Database
from awa.envelope import Undecodable, decode_claimed
from awa.errors import AttemptTimeout
from awa.followups import FollowUpStage
from awa.hooks import STARTED, Transition
from awa.job import Job
from awa.lifecycle import Lifecycle
from awa.tasks import Task
from awa.tracing import job_span, worker_tracer
from awa.worker import outcome
from awa.worker.attempt import RunningJob
from awa.worker.control import JobControl
from awa.worker.progress import ProgressBuffer
from awa.worker.report import Reporter

if TYPE_CHECKING:
    from awa.worker.claims import ClaimSignal
    from awa.worker.completer import Completer

log = logging.getLogger("awa.executor")

JOB_TASK_PREFIX = "awa-job-"


class Executor:
    def __init__(
        self,
        lifecycle: Lifecycle,
        dispatcher: _core.Dispatcher,
        completer: Completer,
        claims: ClaimSignal,
        db: Database,
        threads: int,
        reporter: Reporter,
        progress: ProgressBuffer,
    ) -> None:
        self._lifecycle = lifecycle
        self._reporter = reporter
        self._registry = lifecycle.registry
        self._dispatcher = dispatcher
        self._completer = completer
        self._claims = claims
        self._db = db
        # What handlers report with set_progress; the heartbeat writes it.
        self._progress = progress
        #: Messages about running jobs (cancel, resume, quarantine) land here.
        self.control = JobControl(on_cancel=self.cancel_requested, on_resumed=self.resumed)
        # Running handlers (and quarantined jobs being given back) by job id.
        self._running: dict[int, tuple[asyncio.Task[None], RunningJob[Any]]] = {}
        # Prefetched rows waiting for a slot, with when they were claimed.
        self._waiting: dict[int, tuple[Any, float]] = {}
        self._starting_new = True
        # Running jobs whose task set interrupt_on_cancel, and those of them
        # interrupted by a cancellation (their attempts record nothing).
        self._interruptible: set[int] = set()
        self._cancelled_on_request: set[int] = set()
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="awa-handler")
        self._shutting_down = False
        self.finished = 0
        #: Where handler spans go (None: no tracer provider, no spans).
        self._tracer = worker_tracer()

    def start(self, row: Any, plan_id: int) -> None:
        """Starts the handler for a row claimed by plan ``plan_id``, or keeps
        the row until a slot frees (it was prefetched)."""
        verdict = self._dispatcher.start(plan_id, row["id"], row["run_lease"], row["queue"])
        if verdict is None:
            # The claim returned more than was asked, or a job this worker
            # already runs (a claim the server forgot and handed out again):
            # the reconciler gives it back.
            log.error("claimed job %d without a free slot; leaving it claimed", row["id"])
        elif verdict == "wait":
            self._waiting[row["id"]] = (row, time.monotonic())
        else:
            self._begin(row, waited_s=0.0)

    def _begin(self, row: Any, *, waited_s: float) -> None:
        """Runs the handler of a held job, in the slot the dispatcher gave it."""
        task_def = self._registry.by_kind.get(row["kind"])
        decode = task_def.decode_args if task_def is not None else None
        control = self.control
        if control.holds(row["kind"], row["args"]):
            job: RunningJob[Any] = RunningJob.claimed(row, decode, None, self._db, control)
            task = asyncio.create_task(self._hold(job), name=f"awa-hold-{job.id}")
            self._running[job.id] = (task, job)
            return
        try:
            decoded = decode_claimed(
                task_def, row["kind"], row["args"], row["schema_version"],
                self._registry.by_kind,
            )  # fmt: skip
        except Undecodable as undecodable:
            job = RunningJob.claimed(row, None, None, self._db, control)
            task = asyncio.create_task(
                self._park(job, undecodable), name=f"awa-undecodable-{job.id}"
            )
            self._running[job.id] = (task, job)
            return
        assert task_def is not None  # decode_claimed refuses a job without a task
        stage = FollowUpStage(self._registry)
        job = RunningJob.claimed(row, decode, stage, self._db, control, decoded, self._progress)
        if task_def.interrupt_on_cancel and task_def.is_async:
            self._interruptible.add(job.id)
        budget_s = _attempt_budget(row, job, task_def, waited_s)
        task = asyncio.create_task(
            self._run(job, stage, task_def, budget_s), name=f"{JOB_TASK_PREFIX}{job.id}"
        )
        self._running[job.id] = (task, job)
        self._reporter.started(job)
        hooks = self._lifecycle.hooks
        if hooks.wants(job.kind):
            # A job of its own: the handler's may be changed by the handler.
            started = Job.from_record(row, decode, upcast=decoded.upcast)
            hooks.emit(Transition(STARTED, started))

    def describe(self, job_id: int) -> str | None:
        """``kind (handler)`` of a job running here, for logs."""
        running = self._running.get(job_id)
        if running is None:
            return None
        job = running[1]
        task_def = self._registry.by_kind.get(job.kind)
        handler = "no handler" if task_def is None else _qualified_name(task_def.handler)
        return f"job {job_id} ({job.kind}: {handler})"

    @property
    def running_ids(self) -> set[int]:
        return set(self._running)

    async def _hold(self, job: RunningJob[Any]) -> None:
        """The job's fingerprint is quarantined: give it back unrun, parked
        until the quarantine is released."""
        try:
            await self._db.fetchval("jobs_hold", job.id, job.run_lease)
            log.warning("job %d (%s) is held: its fingerprint is quarantined", job.id, job.kind)
        except Exception as error:  # noqa: BLE001 - the reconciler gives it back if this failed
            log.error("holding quarantined job %d failed (%s)", job.id, error)
        finally:
            self._running.pop(job.id, None)
            self._free_slot(job.id, handler_s=None)

    async def _park(self, job: RunningJob[Any], undecodable: Undecodable) -> None:
        """The job's arguments cannot be decoded here: give it back unrun,
        parked as undecodable with its attempt given back, until
        ``retry_undecodable``."""
        try:
            parked = await self._db.fetchval(
                "jobs_park_undecodable", job.id, job.run_lease, undecodable.reason.value,
                _core.encode_json(undecodable.entry(job.attempt)),
            )  # fmt: skip
            if parked is not None:
                self._reporter.undecodable(job, undecodable)
        except Exception as error:  # noqa: BLE001 - the reconciler gives it back if this failed
            log.error("parking undecodable job %d failed (%s)", job.id, error)
        finally:
            self._running.pop(job.id, None)
            self._free_slot(job.id, handler_s=None)

    def cancel_requested(self, job_id: int) -> None:
        """The job was cancelled on request: a handler that opted in is
        interrupted (its attempt then records nothing: the job is already
        cancelled)."""
        if self._waiting.pop(job_id, None) is not None:
            # Prefetched and not started: it simply never runs here.
            self._free_slot(job_id, handler_s=None)
            return
        running = self._running.get(job_id)
        if running is None:
            return  # not running here
        self.control.mark_cancelled(job_id)
        if job_id in self._interruptible:
            self._cancelled_on_request.add(job_id)
            running[0].cancel("the job was cancelled on request")

    def resumed(self, row: Any) -> None:
        """A handler waiting in place was resumed by its callback: the job
        re-entered execution, so ``Started`` fires again."""
        hooks = self._lifecycle.hooks
        if hooks.wants(row["kind"]):
            hooks.emit(Transition(STARTED, self._lifecycle.committed_job(row)))

    async def _run(
        self,
        job: RunningJob[Any],
        stage: FollowUpStage,
        task_def: Task,
        budget_s: float | None,
    ) -> None:
        started = time.monotonic()
        try:
            try:
                call = self._call_handler if self._tracer is None else self._call_traced
                result = await call(job, task_def, budget_s)
            finally:
                stage.seal()  # staging closes when the handler returns or raises
        except asyncio.CancelledError:
            if job.id in self._cancelled_on_request:
                # The job is already cancelled; any write would be refused.
                stage.discard()
                self._finish(job, handler_s=None)
                return
            current = asyncio.current_task()
            if self._shutting_down and current is not None and current.cancelling():
                # Shutdown interrupted the handler: the worker releases the job.
                self._forget(job)
                stage.discard()
                raise
            decided = outcome.of_error(asyncio.CancelledError("the handler was cancelled"))
        except Exception as error:  # noqa: BLE001 - every exception is an outcome
            decided = outcome.of_error(error)
        else:
            decided = outcome.of_result(job, result, time.monotonic() - started)
        handler_s = time.monotonic() - started
        self._completer.record(job, decided)
        self._reporter.finished(job, decided, handler_s)
        self._finish(job, handler_s=handler_s)

    async def _call_traced(
        self, job: RunningJob[Any], task_def: Task, budget_s: float | None
    ) -> Any:
        """The handler inside its span (a tracer provider is configured)."""
        with job_span(self._tracer, job):
            return await self._call_handler(job, task_def, budget_s)

    async def _call_handler(
        self, job: RunningJob[Any], task_def: Task, budget_s: float | None
    ) -> Any:
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

    def _forget(self, job: RunningJob[Any]) -> None:
        job_id = job.id
        self._running.pop(job_id, None)
        if self._interruptible:
            self._interruptible.discard(job_id)
            self._cancelled_on_request.discard(job_id)
        self.control.forget(job_id)

    def _finish(self, job: RunningJob[Any], *, handler_s: float | None) -> None:
        self._forget(job)
        self.finished += 1
        self._free_slot(job.id, handler_s=handler_s)

    def _free_slot(self, job_id: int, *, handler_s: float | None) -> None:
        """The job's place is free: a prefetched job of its queue takes the
        slot (unless shutdown began), and idle claimers hear of the room."""
        can_claim, next_id = self._dispatcher.finish(job_id, handler_s, self._starting_new)
        if next_id is not None:
            row, claimed_at = self._waiting.pop(next_id)
            self._begin(row, waited_s=time.monotonic() - claimed_at)
        self._claims.slot_freed(can_claim)

    async def stop(self, timeout_s: float) -> None:
        """Waits up to ``timeout_s`` for running handlers, then cancels the rest
        (they record nothing; their jobs stay held for the worker to release).
        No prefetched job starts from here on: the worker releases them."""
        self._starting_new = False
        pending = {task for task, _job in self._running.values()}
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=max(timeout_s, 0.0))
        if pending:
            self._shutting_down = True
            for task in pending:
                task.cancel()
            # Give cancelled handlers a moment to unwind (finally blocks).
            await asyncio.wait(pending, timeout=1.0)
        self._threads.shutdown(wait=False, cancel_futures=True)


def _qualified_name(function: Any) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module else name


def _attempt_budget(
    row: Any, job: Job[Any], task_def: Task | None, waited_s: float
) -> float | None:
    """Seconds this attempt may run: until the deadline the claim set
    (measured from when it started, so clocks need not agree), else the
    task's own timeout (claims that set no deadline); less the ``waited_s``
    a prefetched job spent waiting for its slot since the claim."""
    deadline: datetime.datetime | None = row.get("attempt_deadline_at")
    if deadline is not None and job.attempted_at is not None:
        budget_s: float | None = (deadline - job.attempted_at).total_seconds()
    else:
        budget_s = None if task_def is None else task_def.timeout_s
    return None if budget_s is None else max(budget_s - waited_s, 0.0)


def _timeout_message(budget_s: float) -> str:
    return f"the attempt ran past its {budget_s:g}s deadline and was cancelled"
