"""The pruner: retention for finished jobs.

Overview: runs on the maintenance leader every ``prune_interval``. Completed
and cancelled jobs are deleted once they are older (``finalized_at``) than
their retention, failed jobs (the dead-letter queue) once older than
``dead_letter_retention``, or their queue's entry in
``dead_letter_retention_by_queue``.

How it finds them: by walking the table's pages, ``PAGES_PER_STATEMENT``
at a time, from where the last statement stopped, back to the first page
after the last. There is no index on ``finalized_at`` to search: one would
cost every completion its HOT update (migration 0012). Each pass walks its
share of the table so that a whole walk takes about a tenth of the shortest
retention (or one pass, if that is longer): a job is deleted that long
after its retention ends, and each finished row is read about ten times in
its life, a few microseconds of server time per job.

Locks: each statement deletes at most ``prune_batch_size`` rows, skipping
rows others hold, in a transaction of its own. Nothing waits on a lock, and
no transaction stays open long.

Failure handling: a failed pass is logged and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from awa.db import Database
from awa.maintenance.passes import run_passes

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.pruner")

# 2 MiB of heap per statement: at about 16 rows a page, some 4 000 rows read.
PAGES_PER_STATEMENT: Final = 256
WALKS_PER_RETENTION: Final = 10
# A bound on one pass, whatever the table's size and deletions.
MAX_STATEMENTS_PER_PASS: Final = 1000


class Pruner:
    def __init__(
        self,
        db: Database,
        interval_s: float,
        batch_size: int,
        completed_s: float,
        cancelled_s: float,
        dead_letter_s: float,
        dead_letter_by_queue: Mapping[str, float] | None,
    ) -> None:
        self._db = db
        self._interval_s = interval_s
        self._batch_size = batch_size
        self._retentions = (completed_s, cancelled_s, dead_letter_s)
        overrides = dict(dead_letter_by_queue or {})
        shortest = min([completed_s, cancelled_s, dead_letter_s, *overrides.values()])
        # The share of the table one pass walks (see the module's docstring).
        self._share = min(1.0, interval_s * WALKS_PER_RETENTION / shortest) if shortest else 1.0
        self._override_queues = list(overrides)
        self._override_seconds = [float(seconds) for seconds in overrides.values()]
        self._next_page = 0
        self.pruned = 0

    async def run(self, stop: asyncio.Event, health: Health | None = None) -> None:
        """Passes until ``stop`` is set (a pass under way finishes)."""
        await run_passes("pruner", self._pass, self._interval_s, health, log, stop)

    async def _pass(self) -> None:
        await self.prune_once()

    async def prune_once(self) -> int:
        """One pass; returns how many jobs were deleted."""
        pruned = walked = 0
        share: int | None = None
        for _ in range(MAX_STATEMENTS_PER_PASS):
            [row] = await self._db.fetch(
                "jobs_prune",
                *self._retentions,
                self._batch_size,
                self._next_page,
                PAGES_PER_STATEMENT,
                self._override_queues,
                self._override_seconds,
            )
            pruned += row["pruned"]
            if share is None:
                share = max(PAGES_PER_STATEMENT, math.ceil(row["table_pages"] * self._share))
            if row["wrapped"]:
                self._next_page = 0
                break  # the end of the table: the next pass starts over
            if row["next_page"] != self._next_page:  # else cut short: the same pages again
                walked += PAGES_PER_STATEMENT
            self._next_page = row["next_page"]
            if walked >= share:
                break
        if pruned:
            log.info("pruned %d finished jobs past their retention", pruned)
        self.pruned += pruned
        return pruned
