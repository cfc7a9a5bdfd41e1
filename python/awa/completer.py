"""The completer: writes buffered outcomes in one guarded statement per batch.

Overview: handlers record outcomes in the Rust completion batch; this loop
takes the whole batch when it is due (``flush_batch_size`` rows, or the
oldest row has waited ``flush_interval``) and applies it with
``jobs_finish_batch``: one ``UPDATE … FROM unnest(...)``, one array per
column. While a flush is in flight new outcomes pile up, so batches grow
with load on their own.

State model: each row is guarded by ``(id, run_lease, state = 'running')``;
rows from stale attempts (rescued, or released at shutdown) match nothing
and are counted in ``stale``.

Observed outcomes: when an outcome in the batch has hooks, follow-up specs
or staged follow-ups, the flush becomes one transaction: the guarded
update returning what it changed in each row (the worker holds the rest),
then their follow-ups inserted,
then the commit; events go to hooks only after it. If a spec's closure
raises for a job, the transaction is rolled back and that job's outcome is
replaced by a failed attempt naming the closure (its own specs apply),
then the batch is written again: a trigger never commits without its
follow-ups. A job whose replacement fails too is written as failed
without follow-ups, so no job is ever stuck.

Failure handling: a flush that fails is retried with backoff, the same rows
again, until it succeeds or the worker's final drain gives up; outcomes are
never dropped silently. If they are lost with the process, the jobs are
rescued and run again (handlers must tolerate duplicate execution).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Final

from awa import _core
from awa.db import Database, affected_rows
from awa.followups import FollowUpFailed
from awa.hooks import FAILED, Transition
from awa.lifecycle import FollowUpRows, Lifecycle, Pending, discard_staged

log = logging.getLogger("awa.completer")

MAX_RETRY_DELAY_S = 5.0
# A follow-up failure turns an outcome into a failed attempt (round 1), then
# into a terminal failure (round 2); after that it is written bare.
MAX_FOLLOW_UP_REPLACEMENTS: Final = 2


class Completer:
    def __init__(
        self,
        db: Database,
        batch: _core.CompletionBatch,
        lifecycle: Lifecycle,
        pending: dict[int, Pending],
    ) -> None:
        self._db = db
        self._batch = batch
        self._lifecycle = lifecycle
        self._observed = pending
        self._finish = db.statement("jobs_finish_batch")
        self._finish_observed = db.statement("jobs_finish_batch_observed")
        self._insert_follow_ups = db.statement("jobs_insert_follow_ups")
        self._pending = asyncio.Event()
        self._stopping = False
        self.flushes = 0
        self.applied = 0
        self.stale = 0

    def notify(self) -> None:
        """An outcome was recorded."""
        self._pending.set()

    async def run(self) -> None:
        connection = await self._db.pool.acquire()
        try:
            while True:
                await self._pending.wait()
                self._pending.clear()
                while len(self._batch):
                    await self._wait_until_due()
                    connection = await self._flush(connection, self._batch.take())
                if self._stopping:
                    return
        finally:
            await self._db.pool.release(connection)

    def stop(self) -> None:
        """Flush what is buffered, then end."""
        self._stopping = True
        self._pending.set()

    async def _wait_until_due(self) -> None:
        if self._stopping:
            return
        delay = self._batch.due_in(time.monotonic())
        if delay:
            await asyncio.sleep(delay)

    async def _flush(self, connection: Any, columns: tuple[Any, ...]) -> Any:
        observed = self._take_observed(columns[0]) if self._observed else {}
        failures = 0
        while True:
            try:
                if observed:
                    applied = await self._write_observed(connection, list(columns), observed)
                else:
                    applied = affected_rows(await self._finish.execute(connection, *columns))
            except Exception as error:  # noqa: BLE001 - every failure is retried, never dropped
                failures += 1
                delay = min(MAX_RETRY_DELAY_S, 0.05 * 2**failures)
                log.warning(
                    "writing %d outcomes failed (%s: %s); retrying in %.2fs",
                    len(columns[0]),
                    type(error).__name__,
                    error,
                    delay,
                )
                await asyncio.sleep(delay)
                connection = await self._replace_if_closed(connection)
                continue
            self.flushes += 1
            self.applied += applied
            self.stale += len(columns[0]) - applied
            return connection

    def _take_observed(self, ids: list[int]) -> dict[int, Pending]:
        observed = self._observed
        return {job_id: observed.pop(job_id) for job_id in ids if job_id in observed}

    async def _write_observed(
        self, connection: Any, columns: list[list[Any]], observed: dict[int, Pending]
    ) -> int:
        """Writes a batch holding observed outcomes; returns the rows applied.

        When only hooks watch, the guarded update returning the committed
        rows is the whole write (one statement, one round trip); when
        follow-ups may be inserted it runs in a transaction with them.
        """
        while True:
            if not self._may_insert(observed.values()):
                changed = await self._finish_observed.fetch(connection, *columns)
                transitions, follow_ups, inserted = self._transitions(changed, observed), None, None
                break
            try:
                async with connection.transaction():
                    changed = await self._finish_observed.fetch(connection, *columns)
                    transitions = self._transitions(changed, observed)
                    follow_ups, inserted = await self._insert_follow_ups_for(
                        connection, transitions, observed
                    )
            except FollowUpFailed as failed:
                self._replace_outcome(columns, observed, failed)
                continue
            break
        committed = {transition.job.id for transition in transitions}
        for job_id, pending in observed.items():
            if job_id not in committed:
                discard_staged(pending, "stale attempt")
        self._lifecycle.committed(transitions, follow_ups, inserted)
        return len(changed)

    def _may_insert(self, observed: Any) -> bool:
        follow_ups = self._lifecycle.follow_ups
        for pending in observed:
            if pending.without_follow_ups:
                continue
            if pending.staged_count or follow_ups.may_follow(pending.job.kind, pending.outcome):
                return True
        return False

    def _transitions(self, changed: list[Any], observed: dict[int, Pending]) -> list[Transition]:
        """Transitions of the observed rows this flush changed (stale ones are absent)."""
        transitions = []
        for row in changed:
            pending = observed.get(row[0])
            if pending is not None:
                transitions.append(pending.transition(pending.job.finished(row)))
        return transitions

    async def _insert_follow_ups_for(
        self, connection: Any, transitions: list[Transition], observed: dict[int, Pending]
    ) -> tuple[FollowUpRows | None, list[bytes] | None]:
        """Inside the flush transaction: inserts the transitions' follow-ups;
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
            connection, follow_ups.rows.json_rows()
        )
        return follow_ups, inserted_keys

    def _replace_outcome(
        self, columns: list[list[Any]], observed: dict[int, Pending], failed: FollowUpFailed
    ) -> None:
        """A spec failed for one job: that job's outcome becomes a failed
        attempt (retried or exhausted by its budget), then a terminal
        failure, then a terminal failure without follow-ups."""
        job_id = failed.transition.job.id
        pending = observed[job_id]
        job = pending.job
        rounds = pending.replacements = pending.replacements + 1
        message = str(failed)
        log.error("%s; the job's outcome is rolled back and recorded as a failure", message)
        scratch = _core.CompletionBatch(1, 0.0, random.getrandbits(64))
        error_type = type(failed.error).__name__
        now = time.monotonic()
        if rounds == 1:
            scratch.failed(
                job.id, job.run_lease, job.attempt, job.max_attempts, job.crashes,
                error_type, message, "", now,
            )  # fmt: skip
        else:
            scratch.failed_terminal(
                job.id, job.run_lease, job.attempt, error_type, message, "", now
            )
        if rounds > MAX_FOLLOW_UP_REPLACEMENTS:
            pending.without_follow_ups = True
        if pending.stage is not None:
            discard_staged(pending, "follow-up failed")
            pending.stage = None
        pending.outcome = FAILED
        pending.error = f"{error_type}: {message}"
        replacement: tuple[list[Any], ...] = scratch.take()
        index = columns[0].index(job_id)
        for column, values in zip(columns, replacement, strict=True):
            column[index] = values[0]

    async def _replace_if_closed(self, connection: Any) -> Any:
        if not connection.is_closed():
            return connection
        await self._db.pool.release(connection)
        try:
            return await self._db.pool.acquire()
        except Exception:  # noqa: BLE001 - keep a handle; the next attempt retries
            return connection
