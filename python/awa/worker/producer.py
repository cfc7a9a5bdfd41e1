"""The producer: claims batches of jobs and hands them to the executor.

Overview: ``claim_concurrency`` claimers per worker process, each a
supervised service with a connection of its own. A claimer asks the Rust
dispatcher how many jobs each queue can take (the plan reserves those
slots), claims them all in one statement (``jobs_claim``: each lane of a
queue from its hint, ``FOR UPDATE SKIP LOCKED``, priority order; see
docs/storage.md, "Lanes"), and starts a handler per row. While one claim is
in flight, slots freed meanwhile are claimed by the next claimer. A claimer
sleeps when no queue can take work and wakes through its
:class:`ClaimSignal`: a notification for one of its queues, a freed slot, or
the poll timer (the fallback when notifications are lost).

Claims commit with ``synchronous_commit = off`` (set for their own
transaction, so nothing lingers in the session): if the database crashes
and forgets a claim, the job simply becomes available again; the run lease
the next claim hands out is above any the forgotten one had
(``awa.run_lease_floor``), so that attempt's outcome is refused.

Failure handling: a failed claim gives back its reservation without marking
its queues empty, and the claimer retries at once on a fresh connection,
then with backoff while it keeps failing. A claim is never cancelled half
way: stopping waits for the statement in flight, so no job is claimed
without being started. A claim can still commit on the server and lose its
reply (the connection dropped in between): the reconciler compares what the
database says this worker runs with what it holds, after any failed claim
and every ``reconcile_interval``, and gives back the difference (the
database's list comes from the worker's claims, ``awa.claims``). It is a
service of its own and claims go on while it reads: its list once took
seconds on a table whose running-jobs index was full of finished jobs
vacuum had not yet removed, and claims paused for that long were the
worst latency of a busy worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from awa import _core
from awa._events import wait_for_event
from awa.db import TRANSIENT_ERRORS, Database, release_quietly
from awa.metrics import WorkerTally

if TYPE_CHECKING:
    from awa.worker.claims import ClaimSignal
    from awa.worker.completer import Completer
    from awa.worker.executor import Executor
    from awa.worker.queue_settings import QueueSettingsWatcher
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.producer")

RETRY_DELAY_S: Final = 0.05
MAX_RETRY_DELAY_S: Final = 2.0
#: While more outcomes than this many batches (and per worker slot) wait to
#: be written, claiming pauses until a write commits: a completer that
#: cannot write must not let claimed work pile up behind it.
BACKLOG_BATCHES: Final = 4
BACKLOG_PER_SLOT: Final = 4
BACKLOG_WAIT_S: Final = 0.5


class Producer:
    def __init__(
        self,
        db: Database,
        dispatcher: _core.Dispatcher,
        executor: Executor,
        completer: Completer,
        claims: ClaimSignal,
        health: Health,
        worker_id: int,
        *,
        poll_interval_s: float,
        reconcile_interval_s: float,
        total_slots: int,
        flush_batch_size: int,
        kind_timeouts: Mapping[str, float] | None = None,
        queue_timeouts: Mapping[str, float] | None = None,
        tally: WorkerTally,
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._executor = executor
        self._completer = completer
        self._claims = claims
        self._health = health
        self._worker_id = worker_id
        self._poll_interval_s = poll_interval_s
        self._reconcile_interval_s = reconcile_interval_s
        self._backlog_limit = max(
            BACKLOG_PER_SLOT * total_slots, BACKLOG_BATCHES * flush_batch_size
        )
        self._claim = db.statement("jobs_claim_with_settings")
        self._prepare_session = db.statement("jobs_claim_prepare_session")
        # Attempt timeouts, as the claim sets each attempt's deadline.
        kind_timeouts = kind_timeouts or {}
        self._timeout_kinds = list(kind_timeouts)
        self._kind_timeouts = list(kind_timeouts.values())
        self._queue_timeouts = dict(queue_timeouts or {})
        self._stopping = False
        self._stopped = asyncio.Event()
        self._in_flight = 0
        self._no_claim_in_flight = asyncio.Event()
        self._no_claim_in_flight.set()
        self._reconcile_now = asyncio.Event()
        self._next_poll = time.monotonic() + poll_interval_s
        #: The served queues' settings (the worker sets it): their aging
        #: orders a claim's jobs.
        self.queue_settings: QueueSettingsWatcher | None = None
        #: Queues a limit held back, to be looked at again soon.
        self._rechecks: set[str] = set()
        self.claims = 0
        #: Where claim sizes are counted (the pipeline's tally).
        self.tally = tally
        self.reconciled = 0

    def stop(self) -> None:
        self._stopping = True
        self._stopped.set()
        self._claims.poke()
        self._reconcile_now.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def claimer(self, index: int) -> Any:
        """The service of claimer number ``index`` (a coroutine factory)."""

        async def run() -> None:
            await self._claimer(f"claimer-{index}")

        return run

    async def wait_idle(self) -> None:
        """Waits until no claim is in flight (after :meth:`stop`, none starts)."""
        await self._no_claim_in_flight.wait()

    async def _claimer(self, name: str) -> None:
        connection: Any = None
        failures = 0
        try:
            while not self._stopping:
                try:
                    if connection is None:
                        connection = await self._acquire()
                    await self._claim_or_wait(connection)
                    if failures:
                        failures = 0
                        self._health.ok(name)
                except Exception as error:  # noqa: BLE001 - keep claiming once the cause clears
                    failures += 1
                    self._health.failed(name, error)
                    # A claim that failed may have committed: look at once.
                    self._reconcile_now.set()
                    delay = 0.0 if failures == 1 else _backoff(failures - 1)
                    level = (
                        logging.WARNING if isinstance(error, TRANSIENT_ERRORS) else logging.ERROR
                    )
                    log.log(
                        level, "claiming failed (%s: %s); retrying in %.2fs",
                        type(error).__name__, error, delay,
                    )  # fmt: skip
                    await release_quietly(self._db.pool, connection)
                    connection = None
                    if delay:
                        await wait_for_event(self._stopped, delay)
        finally:
            await release_quietly(self._db.pool, connection)

    async def _acquire(self) -> Any:
        """A claimer's connection. On a session of its own (no pooler), claims
        use one generic plan: PostgreSQL otherwise plans each claim anew
        (its statement is cheap to run and costly to plan), about a third of
        a claim's server time; and never a sequential scan
        (``jobs_claim_prepare_session``)."""
        return await self._db.acquire_session(self._prepare_session)

    async def _claim_or_wait(self, connection: Any) -> None:
        now = time.monotonic()
        if now >= self._next_poll:
            self._dispatcher.mark_all_ready()
            self._next_poll = now + self._poll_interval_s
        if self._completer.backlog > self._backlog_limit:
            # Outcomes are not being written: claiming more would only pile them up.
            await self._completer.wait_written(BACKLOG_WAIT_S)
            return
        plan = self._dispatcher.plan_claim()
        if plan is None:
            self._claims.clear()
            if not self._stopping and not self._dispatcher.can_claim():
                wait_s = self._next_poll - now
                await self._claims.wait(wait_s)
            return
        plan_id, queues, counts = plan
        self._in_flight += 1
        self._no_claim_in_flight.clear()
        failed = True
        try:
            rows = await self._claim.fetch(
                connection,
                queues,
                counts,
                self._worker_id,
                self._timeout_kinds,
                self._kind_timeouts,
                [self._queue_timeouts.get(queue) for queue in queues],
                *self._settings_of(queues),
            )
            failed = False
            self.claims += 1
            self.tally.claimed(len(rows))
            if any(row["id"] is None for row in rows):
                rows = self._look_again_later(rows)
            if len(rows) > 1:
                # RETURNING keeps no order; prefetched jobs wait in this one.
                aging_s = self.queue_settings.aging_s if self.queue_settings else {}
                rows.sort(key=functools.partial(_urgency, aging_s))
            for row in rows:
                self._executor.start(row, plan_id)
        finally:
            self._dispatcher.settle_claim(plan_id, failed)
            self._in_flight -= 1
            if not self._in_flight:
                self._no_claim_in_flight.set()

    def _settings_of(self, queues: list[str]) -> tuple[Any, Any, Any, Any]:
        """What the claim needs of ``queues``' fleet-wide settings, as last
        read (``None`` before the first read: the claim reads them)."""
        settings = self.queue_settings
        if settings is None:
            return None, None, None, None
        aging_s, limited, fair = settings.aging_s, settings.limited, settings.fair
        return (
            [aging_s.get(queue) for queue in queues],
            [queue in limited for queue in queues],
            settings.classes_configured,
            [queue in fair for queue in queues],
        )

    def _look_again_later(self, rows: list[Any]) -> list[Any]:
        """The claim's jobs, without its rows that are not jobs: a queue a
        ceiling or a rate limit held back (``awa.claim_v2``). Such a queue
        still has jobs, so it is marked ready again when the claim says a
        slot or a token may be there (its ``attempt_deadline_at``), where
        the short claim would otherwise mark it empty until the next
        notification or poll."""
        loop = asyncio.get_running_loop()
        jobs = []
        for row in rows:
            if row["id"] is not None:
                jobs.append(row)
                continue
            queue = row["queue"]
            if queue in self._rechecks:
                continue
            self._rechecks.add(queue)
            delay_s = (row["attempt_deadline_at"] - row["attempted_at"]).total_seconds()
            loop.call_later(max(0.0, delay_s), self._recheck, queue)
        return jobs

    def _recheck(self, queue: str) -> None:
        self._rechecks.discard(queue)
        if not self._stopping:
            self._claims.ready(queue)

    async def reconciler(self) -> None:
        """The reconciler service: after a failed claim, and every
        ``reconcile_interval``."""
        while not self._stopping:
            await wait_for_event(self._reconcile_now, self._reconcile_interval_s)
            self._reconcile_now.clear()
            if self._stopping:
                return
            await self._reconcile()
            self._health.ok("reconciler")

    async def _reconcile(self) -> None:
        """Gives back jobs the database says this worker runs but it does not
        hold: claims that committed after their reply was lost.

        Claims go on meanwhile. A claim sent after the list arrived ran
        after the list was read, so none of its jobs is in it; a claim sent
        before may be, and is settled (its jobs held) once no claim is in
        flight. What is held and unwritten is read right then, with no
        await in between, so no job of the list is taken for a stray while
        its claim's reply is still on the way. A job whose outcome commits
        meanwhile is left alone by the guarded release."""
        rows = await self._db.fetch("jobs_running_on_worker", self._worker_id)
        await self._no_claim_in_flight.wait()
        held_ids, _held_leases = self._dispatcher.held()
        known = set(held_ids) | self._completer.unwritten_ids()
        strays = [row for row in rows if row["id"] not in known]
        if not strays:
            return
        ids = [row["id"] for row in strays]
        leases = [row["run_lease"] for row in strays]
        released = await self._db.fetchrow("jobs_release", ids, leases)
        count = 0 if released is None else released["released"]
        self.reconciled += count
        # A job whose outcome committed while the list was read shows up
        # here too; the guarded release leaves it alone.
        if count:
            log.warning(
                "gave back %d job(s) the database said this worker runs but it did not "
                "hold (a claim whose reply was lost): %s",
                count, ", ".join(map(str, ids[:10])),
            )  # fmt: skip
            self._claims.ready(None)


def _urgency(aging_s: Mapping[str, float], row: Any) -> tuple[int, Any, int]:
    """The claim's order: with aging, by the level the job had aged to
    when claimed (as awa.claim_v2 reckons it), then run_at, then id."""
    priority = row["priority"]
    interval_s = aging_s.get(row["queue"])
    if interval_s is not None:
        waited_s = (row["attempted_at"] - row["run_at"]).total_seconds()
        priority = max(1, priority - math.floor(waited_s / interval_s))
    return priority, row["run_at"], row["id"]


def _backoff(failures: int) -> float:
    return float(min(MAX_RETRY_DELAY_S, RETRY_DELAY_S * 2 ** min(failures - 1, 16)))
