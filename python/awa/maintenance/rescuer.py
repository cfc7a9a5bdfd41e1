"""The rescuer: returns jobs held by dead worker processes.

Overview: runs on the maintenance leader every ``rescue_interval``. A
running job is orphaned when its worker's row is gone or has not
heartbeated for ``heartbeat_staleness``; running jobs are found through
the claims that took them (``awa.claims``, one row per claim, deleted by
each pass once all its jobs left ``running``). The Rust core decides each
orphan's fate: one more crash, counted apart from failures; back to
``retryable`` after a backoff on the crash count, or ``failed`` with
reason ``crash_loop`` once ``max_crashes`` is spent. The update is guarded
by ``(id, run_lease, running)``, so a job its worker finished meanwhile is
left alone. Silent worker rows are deleted once they hold nothing.

Parked jobs whose callback deadline passed (``callback_timeout_at``) are
treated like a failed attempt: ``retryable`` after a backoff while attempts
remain, else ``failed``, each with a ``CallbackTimeout`` error entry; the
callback id dies with them.

Quarantine: every crash also counts against the job's fingerprint (kind and
arguments, ``awa.job_fingerprint``); ``quarantine_threshold`` crashes within
``quarantine_window`` quarantine it, and claims hold its jobs (any job with
those arguments, not only the one that crashed) until an operator releases
it. A single poison job is stopped by ``max_crashes``; quarantine stops the
same poison arriving again and again. Running attempts past their deadline
(``attempt_deadline_at``, from the task's or queue's timeout) by more than
``heartbeat_staleness`` are treated the same way: their worker, which
cancels a handler at its deadline, hung or died.

Lifecycle: after a rescue commits, jobs whose kind has hooks or
``on_rescued_enqueue`` specs are read back; the specs' follow-ups are
inserted in a transaction of their own and ``Rescued`` events dispatched.
That step is best effort by design: a failing closure is logged and the
rescue stands (tying rescue to user code could leave a job stuck running).

Failure handling: a failed pass is logged and retried at the next tick;
nothing is half-applied (each pass is one statement per step).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from awa import _core, metrics
from awa.db import Database
from awa.errors import FollowUpError
from awa.events import RescueReason
from awa.hooks import RESCUED, Transition
from awa.lifecycle import Lifecycle
from awa.maintenance.passes import run_passes

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.rescuer")

RESCUE_BATCH_SIZE: Final = 1000
# Claims younger than this are not looked at (their jobs are most likely
# still running), and at most this many are deleted per statement.
CLAIM_MIN_AGE_S: Final = 1.0
FORGET_BATCH_SIZE: Final = 10_000
# How often the deadline pass scans from the earliest deadline again (see
# Rescuer._expire_deadlines).
FULL_DEADLINE_SCAN_S: Final = 600.0
EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
CRASH_REASON: Final = "the worker process stopped heartbeating (crashed or was killed)"
CALLBACK_TIMEOUT_ERROR: Final = "CallbackTimeout"
CALLBACK_TIMEOUT_REASON: Final = "the callback was not resolved before its deadline"
ATTEMPT_TIMEOUT_ERROR: Final = "AttemptTimeout"
ATTEMPT_TIMEOUT_REASON: Final = (
    "the attempt ran past its deadline and its worker did not stop it (hung or died)"
)


class Rescuer:
    def __init__(
        self,
        db: Database,
        lifecycle: Lifecycle,
        interval_s: float,
        staleness_s: float,
        quarantine_threshold: int = 3,
        quarantine_window_s: float = 3600.0,
    ) -> None:
        self._db = db
        self._lifecycle = lifecycle
        self._interval_s = interval_s
        self._staleness_s = staleness_s
        self._quarantine_threshold = quarantine_threshold
        self._quarantine_window_s = quarantine_window_s
        self._deadline_floor = EARLIEST
        self._deadline_floor_expires = 0.0
        self.rescued = 0

    async def run(self, stop: asyncio.Event, health: Health | None = None) -> None:
        """Passes until ``stop`` is set (a pass under way finishes)."""
        await run_passes("rescuer", self._pass, self._interval_s, health, log, stop)

    async def _pass(self) -> None:
        await self.rescue_once()

    async def rescue_once(self) -> int:
        """One pass; returns how many jobs were rescued."""
        # Deadlines first: an attempt past its deadline whose worker also
        # died is rescued as timed out (what its handler was doing), not as
        # a crash.
        rescued = await self._expire_attempts()
        while True:
            orphans = await self._db.fetch("jobs_orphaned", self._staleness_s, RESCUE_BATCH_SIZE)
            if not orphans:
                break
            ids, leases, states, delays, _refunds, errors = _core.plan_rescue(
                [row["id"] for row in orphans],
                [row["run_lease"] for row in orphans],
                [row["attempt"] for row in orphans],
                [row["max_attempts"] for row in orphans],
                [row["crashes"] for row in orphans],
                [row["max_crashes"] for row in orphans],
                CRASH_REASON,
                random.getrandbits(64),
            )
            changed = await self._db.fetch(
                "jobs_rescue", ids, leases, states, delays, errors, "crash"
            )
            count = len(changed)
            rescued += count
            metrics.add(metrics.JOB_RESCUED, count, reason=RescueReason.StaleHeartbeat.value)
            log.warning("rescued %d orphaned jobs (%s)", count, ", ".join(map(str, ids[:10])))
            if changed:
                held_by = {row["id"]: row["worker_id"] for row in orphans}
                crashed = [row["id"] for row in changed]
                await self._count_crashes(crashed, [held_by[job_id] for job_id in crashed])
            observed = [row["id"] for row in changed if self._observes(row["kind"])]
            if observed:
                await self._after_rescue(observed, RescueReason.StaleHeartbeat)
            if len(orphans) < RESCUE_BATCH_SIZE:
                break
        await self._db.execute("workers_delete_stale", self._staleness_s)
        await self._forget_finished_claims()
        rescued += await self._expire_callbacks()
        rescued += await self._expire_deadlines()
        self.rescued += rescued
        return rescued

    async def _forget_finished_claims(self) -> None:
        """Deletes claims (``awa.claims``) whose jobs all left ``running``:
        the running set this pass reads stays the size of what is in flight."""
        while True:
            forgotten = await self._db.fetchval(
                "claims_forget_finished", CLAIM_MIN_AGE_S, FORGET_BATCH_SIZE
            )
            if forgotten < FORGET_BATCH_SIZE:
                return

    async def _expire_callbacks(self) -> int:
        """Parked jobs past their callback deadline: retryable while attempts
        remain (the wait counts as a failed attempt), else failed."""
        return await self._expire(
            "jobs_callbacks_expired", (), "callback_deadline",
            CALLBACK_TIMEOUT_ERROR, CALLBACK_TIMEOUT_REASON, RescueReason.CallbackTimeout,
        )  # fmt: skip

    async def _expire_deadlines(self) -> int:
        """Unfinished jobs past their overall deadline: failed for good.

        The deadline index also holds finished jobs (they keep their
        deadline until retention removes them), so each pass starts at the
        floor the last one left: the earliest passed deadline of a job still
        unfinished. A job can only get below the floor by arriving with a
        deadline already past (an insert, a redrive), so the floor is dropped
        every ``FULL_DEADLINE_SCAN_S`` and such a job fails then."""
        if time.monotonic() >= self._deadline_floor_expires:
            self._deadline_floor = EARLIEST
            self._deadline_floor_expires = time.monotonic() + FULL_DEADLINE_SCAN_S
        floor = self._deadline_floor
        expired = await self._fail_deadlines_from(floor)
        self._deadline_floor = await self._db.fetchval("jobs_deadline_floor", floor)
        return expired

    async def _fail_deadlines_from(self, floor: datetime) -> int:
        expired = 0
        while True:
            changed = await self._db.fetch("jobs_deadlines_passed", RESCUE_BATCH_SIZE, floor)
            expired += len(changed)
            metrics.add(
                metrics.JOB_RESCUED, len(changed), reason=RescueReason.DeadlineExceeded.value
            )
            if changed:
                log.warning(
                    "%d jobs failed: their deadline passed (%s)",
                    len(changed),
                    ", ".join(str(row["id"]) for row in changed[:10]),
                )
            observed = [row["id"] for row in changed if self._observes(row["kind"])]
            if observed:
                await self._after_rescue(observed, RescueReason.DeadlineExceeded)
            if len(changed) < RESCUE_BATCH_SIZE:
                return expired

    async def _expire_attempts(self) -> int:
        """Running attempts past their deadline whose worker did not cancel
        them (it hung or died): a timed-out attempt, as if it had."""
        return await self._expire(
            "jobs_attempts_expired", (self._staleness_s,), "attempt_deadline",
            ATTEMPT_TIMEOUT_ERROR, ATTEMPT_TIMEOUT_REASON, RescueReason.DeadlineExceeded,
        )  # fmt: skip

    async def _expire(
        self,
        query: str,
        query_args: tuple[Any, ...],
        why: str,
        error_type: str,
        message: str,
        reason: RescueReason,
    ) -> int:
        expired = 0
        while True:
            rows = await self._db.fetch(query, *query_args, RESCUE_BATCH_SIZE)
            if not rows:
                return expired
            decisions = _core.CompletionBatch(len(rows), 0.0, random.getrandbits(64))
            now = time.monotonic()
            for row in rows:
                decisions.record(
                    row["id"], row["run_lease"], row["attempt"], row["max_attempts"],
                    row["crashes"], "failed", now, None, error_type, message, None,
                )  # fmt: skip
            ids, leases, states, delays, _refunds, errors = decisions.take().params()
            changed = await self._db.fetch("jobs_rescue", ids, leases, states, delays, errors, why)
            expired += len(changed)
            metrics.add(metrics.JOB_RESCUED, len(changed), reason=reason.value)
            if changed:
                log.warning(
                    "%d jobs rescued: %s (%s)",
                    len(changed),
                    message,
                    ", ".join(str(row["id"]) for row in changed[:10]),
                )
            observed = [row["id"] for row in changed if self._observes(row["kind"])]
            if observed:
                await self._after_rescue(observed, reason)
            if len(rows) < RESCUE_BATCH_SIZE:
                return expired

    async def _count_crashes(self, job_ids: list[int], worker_ids: list[int | None]) -> None:
        """Each dead worker counts one crash against the fingerprint of the
        jobs it held; too many in the window quarantine it (claims hold its
        jobs)."""
        counted = await self._db.fetch(
            "quarantine_record_crashes",
            job_ids,
            self._quarantine_window_s,
            self._quarantine_threshold,
            worker_ids,
        )
        for row in counted:
            if row["newly_quarantined"]:
                log.error(
                    "quarantined fingerprint %s of kind %r after %d worker crashes: its jobs are "
                    "held until client.release_quarantine(%r)",
                    row["fingerprint"].hex(),
                    row["kind"],
                    row["crashes"],
                    row["fingerprint"].hex(),
                )

    def _observes(self, kind: str) -> bool:
        return self._lifecycle.observes(kind, RESCUED)

    async def _after_rescue(self, job_ids: list[int], reason: RescueReason) -> None:
        """Best effort, after the rescue committed: follow-ups, then events."""
        lifecycle = self._lifecycle
        try:
            rows = await self._db.fetch("jobs_by_ids", job_ids)
        except Exception as error:  # noqa: BLE001 - the rescue stands either way
            log.error("reading rescued jobs back failed (%s: %s)", type(error).__name__, error)
            return
        transitions = [
            Transition(RESCUED, lifecycle.committed_job(row), reason=reason.value) for row in rows
        ]
        for transition in transitions:
            await self._insert_follow_ups(transition)
        lifecycle.committed(transitions, None, None)

    async def _insert_follow_ups(self, transition: Transition) -> None:
        try:
            # No connection: its own statement, after the rescue committed.
            await self._lifecycle.insert_follow_ups(
                self._db, None, [transition], RESCUED, "the rescue stands without its follow-up"
            )
        except FollowUpError as failed:
            log.error("%s", failed)
        except Exception as error:  # noqa: BLE001 - the rescue stands either way
            log.error(
                "inserting the follow-ups of rescued job %d failed (%s: %s); the rescue stands",
                transition.job.id,
                type(error).__name__,
                error,
            )
