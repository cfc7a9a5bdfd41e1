"""The pruner: retention for finished jobs.

Overview: runs on the maintenance leader every ``prune_interval``. Completed
and cancelled jobs are deleted once they are older (``finalized_at``) than
their retention, failed jobs (the dead-letter queue) once older than
``dead_letter_retention``, or their queue's entry in
``dead_letter_retention_by_queue``.

Locks: each statement deletes at most ``prune_batch_size`` rows, skipping
rows others hold, in a transaction of its own; a pass stops after
``MAX_BATCHES_PER_PASS`` statements and the next pass continues. Nothing
waits on a lock, and no transaction stays open long.

Failure handling: a failed pass is logged and retried at the next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from awa.db import Database
from awa.maintenance.passes import run_passes

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.pruner")

MAX_BATCHES_PER_PASS: Final = 50


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
        self._override_queues = list(overrides)
        self._override_seconds = [float(seconds) for seconds in overrides.values()]
        self.pruned = 0

    async def run(self, health: Health | None = None) -> None:
        await run_passes("pruner", self._pass, self._interval_s, health, log)

    async def _pass(self) -> None:
        await self.prune_once()

    async def prune_once(self) -> int:
        """One pass; returns how many jobs were deleted."""
        pruned = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            count = await self._db.fetchval(
                "jobs_prune",
                *self._retentions,
                self._batch_size,
                self._override_queues,
                self._override_seconds,
            )
            pruned += count
            if count < self._batch_size:
                break
        if pruned:
            log.info("pruned %d finished jobs past their retention", pruned)
        self.pruned += pruned
        return pruned
