"""The scheduler: makes due ``scheduled`` and ``retryable`` jobs ``available``.

Overview: runs on the maintenance leader. Each pass promotes up to
``promote_batch_size`` due jobs in one statement (which notifies their
queues), then sleeps until the next job is due or ``promote_interval``,
whichever is sooner. A full batch means more may be due: it goes again at
once. Jobs inserted with a past ``run_at`` never wait for this: they are
``available`` from the start.

Failure handling: a failed pass is logged and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from awa.db import Database
from awa.maintenance.passes import run_passes

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.scheduler")

MIN_SLEEP_S = 0.001


class Scheduler:
    def __init__(self, db: Database, interval_s: float, batch_size: int) -> None:
        self._db = db
        self._interval_s = interval_s
        self._batch_size = batch_size
        self.promoted = 0

    async def run(self, stop: asyncio.Event, health: Health | None = None) -> None:
        """Passes until ``stop`` is set (a pass under way finishes)."""
        await run_passes("scheduler", self.promote_once, self._interval_s, health, log, stop)

    async def promote_once(self) -> float:
        """One pass; returns how long to sleep before the next."""
        row = await self._db.fetchrow("jobs_promote_due", self._batch_size)
        promoted = row["promoted"] if row is not None else 0
        self.promoted += promoted
        if promoted >= self._batch_size:
            return 0.0
        seconds = await self._db.fetchval("jobs_next_due")
        if seconds is None:
            return self._interval_s
        return min(max(float(seconds), MIN_SLEEP_S), self._interval_s)
