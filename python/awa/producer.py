"""The producer: claims batches of jobs and hands them to the executor.

Overview: ``claim_concurrency`` claimer loops per worker process, each on
its own connection. A claimer asks the Rust dispatcher how many jobs each
queue can take (the plan reserves those slots), claims them all in one
statement (``jobs_claim``: ``FOR UPDATE SKIP LOCKED``, priority order), and
starts a handler per row. While one claim is in flight, slots freed
meanwhile are claimed by the next claimer instead of waiting for it. A
claimer sleeps when no queue can take work and wakes on a notification for
one of its queues, on a freed slot, or on the poll timer (the fallback when
notifications are lost).

Claims commit with ``synchronous_commit = off``: if the database crashes
and forgets a claim, the job simply becomes available again and its outcome
from the forgotten attempt is rejected by the run-lease guard, so nothing is
lost and delivery stays at least once. Outcomes are written durably.

Failure handling: a failed claim gives back its reservation, waits with
backoff and retries on a fresh connection. A claim is never cancelled half
way: stopping waits for the statement in flight, so no job is claimed
without being started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from awa import _core
from awa._events import wait_for_event
from awa.db import TRANSIENT_ERRORS, Database, session_changed

log = logging.getLogger("awa.producer")

MAX_RETRY_DELAY_S = 5.0


class Producer:
    def __init__(
        self,
        db: Database,
        dispatcher: _core.Dispatcher,
        start_job: Callable[[Any, int], None],
        worker_id: int,
        poll_interval_s: float,
        claim_concurrency: int,
        kind_timeouts: Mapping[str, float] | None = None,
        queue_timeouts: Mapping[str, float] | None = None,
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._start_job = start_job
        self._worker_id = worker_id
        self._poll_interval_s = poll_interval_s
        self._claim = db.statement("jobs_claim")
        # Attempt timeouts, as the claim sets each attempt's deadline.
        kind_timeouts = kind_timeouts or {}
        self._timeout_kinds = list(kind_timeouts)
        self._kind_timeouts = list(kind_timeouts.values())
        self._queue_timeouts = dict(queue_timeouts or {})
        self._prepare_session = db.statement("jobs_claim_prepare_session")
        self._claimers = claim_concurrency
        self._wake = asyncio.Event()
        self._stopping = False
        self._failures = 0  # consecutive failed claims, for the retry backoff
        self.claims = 0

    def wake(self, queue: str | None = None) -> None:
        """Something says ``queue`` (or every queue) may have jobs."""
        if queue is None:
            self._dispatcher.mark_all_ready()
        elif not self._dispatcher.mark_ready(queue):
            return
        self._wake.set()

    def slot_freed(self, can_claim: bool) -> None:
        if can_claim:
            self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        await asyncio.gather(*(self._claimer() for _ in range(self._claimers)))

    async def _claimer(self) -> None:
        while not self._stopping:
            try:
                async with self._db.pool.acquire() as connection:
                    session_changed(connection)
                    await self._prepare_session.execute(connection)
                    await self._claim_loop(connection)
                return
            except Exception as error:  # noqa: BLE001 - keep claiming once the cause clears
                self._failures += 1
                delay = min(MAX_RETRY_DELAY_S, 0.1 * 2**self._failures)
                level = logging.WARNING if isinstance(error, TRANSIENT_ERRORS) else logging.ERROR
                log.log(
                    level,
                    "claiming failed (%s: %s); retrying in %.1fs",
                    type(error).__name__,
                    error,
                    delay,
                )
                await self._sleep_unless_stopped(delay)

    async def _claim_loop(self, connection: Any) -> None:
        next_poll = time.monotonic() + self._poll_interval_s
        while not self._stopping:
            now = time.monotonic()
            if now >= next_poll:
                self._dispatcher.mark_all_ready()
                next_poll = now + self._poll_interval_s
            plan = self._dispatcher.plan_claim()
            if plan is None:
                await self._wait_for_wake(next_poll - now)
                continue
            plan_id, queues, counts = plan
            try:
                rows = await self._claim.fetch(
                    connection,
                    queues,
                    counts,
                    self._worker_id,
                    self._timeout_kinds,
                    self._kind_timeouts,
                    [self._queue_timeouts.get(queue) for queue in queues],
                )
                self.claims += 1
                self._failures = 0
                for row in rows:
                    self._start_job(row, plan_id)
            finally:
                self._dispatcher.settle_claim(plan_id)

    async def _wait_for_wake(self, timeout_s: float) -> None:
        self._wake.clear()
        if self._stopping or self._dispatcher.can_claim():
            return
        await wait_for_event(self._wake, timeout_s)

    async def _sleep_unless_stopped(self, delay_s: float) -> None:
        self._wake.clear()
        await wait_for_event(self._wake, delay_s)
