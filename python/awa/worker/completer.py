"""The completer: records attempt outcomes and writes them in one guarded
statement per batch.

Overview: the executor hands over each attempt's outcome as a value,
:meth:`Completer.record(job, outcome) <Completer.record>`, which buffers it
in the Rust completion batch (the core decides the row: retry backoff,
exhausted attempts, error entry). This loop takes the whole batch when it is
due (``flush_batch_size`` rows, or the oldest row has waited
``flush_interval``) and applies it with ``jobs_finish_batch``: one
``UPDATE … FROM unnest(...)``, one array per column. While a flush is in
flight new outcomes pile up, so batches grow with load on their own.

Results: what a completing handler returned (JSON text, on the
:class:`Outcome`) is kept here by job id and goes with its row in the same
statement, as one more array aligned with the batch; a batch that holds no
result sends NULL for it, so jobs that return ``None`` cost nothing more.
The same goes for the last progress report of an attempt that made one: it
is written with its outcome, whatever the outcome, so a report no beat wrote
(or one a beat skipped, see ``jobs_heartbeat_with_progress``) is not lost;
it leaves the heartbeat's :class:`~awa.worker.progress.ProgressBuffer`.
A batch that ends a job someone waits for (``client.result``, registered in
``awa.result_waiters``) notifies ``awa_finished`` once, in the statement
(see ``jobs_finish_batch``); batches nobody waits on notify nothing.

State model: each row is guarded by ``(id, run_lease, state = 'running')``;
rows from stale attempts (rescued, or released at shutdown) match nothing
and are counted in ``stale``.

Observed outcomes: the completer keeps what hooks, follow-up specs and
staged follow-ups need (a :class:`Pending` per attempt) until its write
commits. A batch holding one becomes one transaction: the guarded update
returning what it changed in each row, their follow-ups inserted, the
commit; events go to hooks only after it. If a spec's closure raises for a
job, the transaction is rolled back, that job's row leaves the batch and its
outcome is recorded again as a failed attempt naming the closure (its own
specs apply; then a terminal failure; then a bare one), and the rest is
written: a trigger never commits without its follow-ups, and no job is ever
stuck.

Failure handling: a write that fails is retried with backoff on a fresh
connection, the same rows again, for as long as the worker lives; the
worker's health says when it has failed too long. Nothing is dropped:
:meth:`stop` writes everything buffered, and whatever could not be written
by the worker's final deadline is reported (:attr:`unwritten`,
:attr:`last_error`); those jobs stay ``running`` and are rescued.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from awa import _core
from awa._events import wait_for_event
from awa.db import Database, release_quietly
from awa.followups import FollowUpFailed, FollowUpStage
from awa.hooks import COMPLETED, EXHAUSTED, FAILED, RETRIED, WAITING_FOR_CALLBACK, Transition
from awa.job import Job, JobState
from awa.lifecycle import FollowUpRows, Lifecycle
from awa.metrics import WorkerTally
from awa.worker.outcome import SNOOZED, Outcome
from awa.worker.progress import ProgressBuffer

if TYPE_CHECKING:
    from awa._core import _OutcomeCode
    from awa.worker.attempt import RunningJob
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.completer")

SERVICE: Final = "completer"
RETRY_DELAY_S: Final = 0.05
MAX_RETRY_DELAY_S: Final = 2.0
# A follow-up failure turns an outcome into a failed attempt (round 1), then
# into a terminal failure (round 2); after that it is written bare.
MAX_FOLLOW_UP_REPLACEMENTS: Final = 2


@dataclass(slots=True)
class Pending:
    """An attempt's outcome that hooks, specs or staged follow-ups care about,
    kept until the write that applies it commits."""

    job: RunningJob[Any]  # the attempt as the handler saw it
    outcome: Outcome
    stage: FollowUpStage | None = None
    #: Times a failing follow-up spec replaced this outcome.
    replacements: int = 0
    #: Set when the follow-ups failed so often that the outcome is written bare.
    without_follow_ups: bool = False

    def transition(self, committed: Job[Any]) -> Transition:
        event = self.outcome.event
        if event == FAILED:
            event = RETRIED if committed.state is JobState.Retryable else EXHAUSTED
        return Transition(
            event,
            committed,
            duration_s=self.outcome.duration_s,
            error=self.outcome.error_text,
            attempt=self.job.attempt,
            reason=self.outcome.reason,
        )

    @property
    def staged_count(self) -> int:
        return 0 if self.stage is None else self.stage.count

    def discard_staged(self, why: str) -> None:
        """Drops what the attempt staged: it did not complete (or not for real)."""
        stage = self.stage
        if stage is None or not stage.count:
            return
        if self.outcome.event == WAITING_FOR_CALLBACK:
            log.warning(
                "job %d (%s) parked for a callback with %d staged follow-up(s); they are "
                "discarded (only a completion inserts them; an on_completed_enqueue spec sees "
                "the callback's result in job.metadata)",
                self.job.id,
                self.job.kind,
                stage.count,
            )
        else:
            log.debug(
                "job %d: %d staged follow-up(s) discarded (%s)", self.job.id, stage.count, why
            )
        stage.discard()
        self.stage = None


class Completer:
    def __init__(
        self,
        db: Database,
        lifecycle: Lifecycle,
        health: Health,
        progress: ProgressBuffer,
        tally: WorkerTally,
        *,
        batch_size: int,
        flush_interval_s: float,
    ) -> None:
        self._db = db
        self._lifecycle = lifecycle
        self._health = health
        self._batch = _core.CompletionBatch(batch_size, flush_interval_s, random.getrandbits(64))
        self._observed: dict[int, Pending] = {}
        # Results of recorded completions, and the progress of recorded
        # outcomes that no heartbeat wrote yet (JSON text), by job id.
        self._results: dict[int, str] = {}
        self._progress: dict[int, str] = {}
        self._progress_buffer = progress
        # The batch being written, its observed outcomes, results and
        # progress, until it commits.
        self._flush: Any = None
        self._flush_observed: dict[int, Pending] = {}
        self._flush_results: dict[int, str] = {}
        self._flush_progress: dict[int, str] = {}
        self._finish = db.statement("jobs_finish_batch")
        self._prepare_session = db.statement("jobs_write_prepare_session")
        self._finish_observed = db.statement("jobs_finish_batch_observed")
        self._insert_follow_ups = db.statement("jobs_insert_follow_ups")
        self._connection: Any = None
        self._wake = asyncio.Event()
        self._written = asyncio.Event()
        self._stopping = False
        self.flushes = 0
        #: Where write sizes are counted (the pipeline's tally).
        self.tally = tally
        self.applied = 0
        self.stale = 0
        #: Why the latest write failed (None once one succeeded).
        self.last_error: BaseException | None = None

    # ── what the executor calls ─────────────────────────────────────────

    def record(self, job: RunningJob[Any], outcome: Outcome) -> None:
        """Buffers one attempt's outcome; it is written with the next batch."""
        self._buffer(job, outcome)
        if outcome.result is not None:
            self._results[job.id] = outcome.result
        if job._reported:
            self._take_last_report(job)
        stage = job._stage
        if (stage is not None and stage.rows is not None) or self._lifecycle.observes_any:
            self._observe(job, outcome)

    def _buffer(self, job: RunningJob[Any], outcome: Outcome) -> None:
        self._batch.record(
            job.id, job.run_lease, job.attempt, job.max_attempts, job.crashes,
            outcome.code, time.monotonic(), outcome.delay_s, outcome.error_type,
            outcome.message, outcome.traceback,
        )  # fmt: skip
        self._wake.set()

    def _take_last_report(self, job: RunningJob[Any]) -> None:
        """The attempt's last report goes with its outcome; the heartbeat
        need not write it."""
        self._progress_buffer.take(job.id)
        if job._progress_json is not None:
            self._progress[job.id] = job._progress_json

    def _observe(self, job: RunningJob[Any], outcome: Outcome) -> None:
        """Keeps what hooks and follow-ups will need once the outcome commits;
        drops staged follow-ups of any outcome but a completion."""
        stage = job._stage
        staged = stage is not None and stage.count > 0
        event = outcome.event
        wanted = event != SNOOZED and (
            self._lifecycle.observes(job.kind, event) or (event == COMPLETED and staged)
        )
        if not (wanted or staged):
            return
        pending = Pending(job, outcome, stage if staged else None)
        if staged and event != COMPLETED:
            pending.discard_staged(event)
        if wanted:
            self._observed[job.id] = pending

    @property
    def backlog(self) -> int:
        """Outcomes recorded and not yet written."""
        return len(self._batch) + (0 if self._flush is None else len(self._flush))

    async def wait_written(self, timeout_s: float) -> None:
        """Returns once a write commits, or after ``timeout_s``."""
        await wait_for_event(self._written, timeout_s)

    def unwritten_ids(self) -> set[int]:
        """Jobs whose outcome is recorded but not yet committed."""
        ids = set(self._batch.ids())
        if self._flush is not None:
            ids.update(self._flush.ids)
        return ids

    # ── the loop ────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Writes batches as they fall due; ends after :meth:`stop` once
        everything is written."""
        try:
            while True:
                # A batch left in flight (a restart of this service) goes first.
                while self._flush is not None or len(self._batch):
                    if self._flush is None:
                        await self._wait_until_due()
                        self._flush = self._batch.take()
                        self._flush_observed = self._take_observed(self._flush.ids)
                        self._flush_results = _take(self._results, self._flush.ids)
                        self._flush_progress = _take(self._progress, self._flush.ids)
                    await self._write_until_done()
                    self._flush, self._flush_observed = None, {}
                    self._flush_results, self._flush_progress = {}, {}
                if self._stopping:
                    return
                await self._wake.wait()
                self._wake.clear()
        finally:
            connection, self._connection = self._connection, None
            await release_quietly(self._db.pool, connection)

    def stop(self) -> None:
        """Write what is buffered, then end."""
        self._stopping = True
        self._wake.set()

    @property
    def unwritten(self) -> int:
        """Outcomes not written (after :meth:`stop` gave up, what is lost
        with the process: their jobs are rescued)."""
        return self.backlog

    async def _wait_until_due(self) -> None:
        if self._stopping:
            return
        delay = self._batch.due_in(time.monotonic())
        if delay:
            await asyncio.sleep(delay)

    def _take_observed(self, ids: list[int]) -> dict[int, Pending]:
        observed = self._observed
        if not observed:
            return {}
        return {job_id: observed.pop(job_id) for job_id in ids if job_id in observed}

    def _json_columns(self, flush: Any) -> tuple[list[str | None] | None, ...]:
        """The batch's results and progress, each aligned with its rows, or
        None (the whole column NULL) when no row has one: the common case
        costs nothing."""
        return _column(self._flush_results, flush), _column(self._flush_progress, flush)

    async def _write_until_done(self) -> None:
        """Writes the batch in flight, retrying on fresh connections until it
        commits (the rows are guarded, so a retry after a commit whose reply
        was lost applies nothing twice)."""
        failures = 0
        while True:
            flush = self._flush
            if not len(flush):
                return
            try:
                connection = await self._acquire()
                if self._flush_observed:
                    applied = await self._write_observed(connection, flush)
                else:
                    applied = await self._finish.fetchval(
                        connection, *flush.array_literals(), *self._json_columns(flush)
                    )
            except Exception as error:  # noqa: BLE001 - every failure is retried, never dropped
                failures += 1
                self.last_error = error
                self._health.failed(SERVICE, error)
                delay = min(MAX_RETRY_DELAY_S, RETRY_DELAY_S * 2 ** min(failures - 1, 16))
                log.warning(
                    "writing %d outcomes failed (%s: %s); retrying in %.2fs",
                    len(flush), type(error).__name__, error, delay,
                )  # fmt: skip
                await self._discard_connection()
                await asyncio.sleep(delay)
                continue
            self.last_error = None
            self._health.ok(SERVICE)
            self._written.set()
            self._written.clear()
            self.flushes += 1
            self.tally.flushed(len(flush))
            self.applied += applied
            self.stale += len(flush) - applied
            return

    async def _acquire(self) -> Any:
        """The completer's connection, kept across batches. On a session of
        its own (no pooler), its writes never plan a scan of the whole table
        (``jobs_write_prepare_session``); the pool resets that when the
        connection goes back."""
        if self._connection is None:
            self._connection = await self._db.acquire_session(self._prepare_session)
        return self._connection

    async def _discard_connection(self) -> None:
        connection, self._connection = self._connection, None
        await release_quietly(self._db.pool, connection)

    async def _write_observed(self, connection: Any, flush: Any) -> int:
        """Writes a batch holding observed outcomes; returns the rows applied.

        When only hooks watch, the guarded update returning the committed
        rows is the whole write (one statement, one round trip); when
        follow-ups may be inserted it runs in a transaction with them.
        """
        observed = self._flush_observed
        while True:
            if not len(flush):
                return 0
            if not self._may_insert(observed.values()):
                changed = await self._finish_observed.fetch(
                    connection, *flush.array_literals(), *self._json_columns(flush)
                )
                transitions = self._transitions(changed, observed)
                follow_ups, inserted = None, None
                break
            try:
                async with connection.transaction():
                    changed = await self._finish_observed.fetch(
                        connection, *flush.array_literals(), *self._json_columns(flush)
                    )
                    transitions = self._transitions(changed, observed)
                    follow_ups, inserted = await self._insert_follow_ups_for(
                        connection, transitions, observed
                    )
            except FollowUpFailed as failed:
                self._record_again(flush, failed)
                continue
            break
        committed = {transition.job.id for transition in transitions}
        for job_id, pending in observed.items():
            if job_id not in committed:
                pending.discard_staged("stale attempt")
        self._flush_observed = {}
        self._lifecycle.committed(transitions, follow_ups, inserted)
        return len(changed)

    def _may_insert(self, observed: Any) -> bool:
        follow_ups = self._lifecycle.follow_ups
        for pending in observed:
            if pending.without_follow_ups:
                continue
            if pending.staged_count or follow_ups.may_follow(
                pending.job.kind, pending.outcome.event
            ):
                return True
        return False

    def _transitions(self, changed: list[Any], observed: dict[int, Pending]) -> list[Transition]:
        """Transitions of the observed rows this write changed (stale ones are absent)."""
        transitions = []
        for row in changed:
            pending = observed.get(row["id"])
            if pending is not None:
                committed = pending.job.finished(row, self._flush_results.get(row["id"]))
                transitions.append(pending.transition(committed))
        return transitions

    async def _insert_follow_ups_for(
        self, connection: Any, transitions: list[Transition], observed: dict[int, Pending]
    ) -> tuple[FollowUpRows | None, list[bytes] | None]:
        """Inside the write's transaction: inserts the transitions' follow-ups;
        returns them and the unique keys the insert wrote."""
        pairs = []
        for transition in transitions:
            pending = observed[transition.job.id]
            if not pending.without_follow_ups:
                pairs.append((transition, pending.stage))
        follow_ups = self._lifecycle.follow_up_rows(pairs)
        if not len(follow_ups):
            return follow_ups, None
        inserted_keys = await self._insert_follow_ups.fetchval(
            connection, follow_ups.rows.json_rows(), follow_ups.parents
        )
        return follow_ups, inserted_keys

    def _record_again(self, flush: Any, failed: FollowUpFailed) -> None:
        """A spec failed for one job: its row leaves this write, and its
        outcome is recorded again as a failed attempt (retried or exhausted by
        its budget), then as a terminal failure, then as a terminal failure
        without follow-ups; the next write applies it."""
        job_id = failed.transition.job.id
        pending = self._flush_observed.pop(job_id)
        flush.remove(job_id)
        self._flush_results.pop(job_id, None)  # it no longer completes
        progress = self._flush_progress.pop(job_id, None)
        if progress is not None:
            self._progress[job_id] = progress
        rounds = pending.replacements = pending.replacements + 1
        message = str(failed)
        log.error("%s; the job's outcome is rolled back and recorded as a failure", message)
        code: _OutcomeCode = "failed" if rounds == 1 else "failed_terminal"
        error_type = type(failed.error).__name__
        pending.outcome = Outcome(
            code, FAILED, error_type=error_type, message=message, traceback=""
        )
        if rounds > MAX_FOLLOW_UP_REPLACEMENTS:
            pending.without_follow_ups = True
        pending.discard_staged("follow-up failed")
        self._observed[job_id] = pending
        self._buffer(pending.job, pending.outcome)


def _take(by_id: dict[int, str], ids: list[int]) -> dict[int, str]:
    """The entries of ``ids``, taken out of ``by_id``."""
    if not by_id:
        return {}
    return {job_id: by_id.pop(job_id) for job_id in ids if job_id in by_id}


def _column(by_id: dict[int, str], flush: Any) -> list[str | None] | None:
    if not by_id:
        return None
    return [by_id.get(job_id) for job_id in flush.ids]
