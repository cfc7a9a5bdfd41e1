"""The queue gauges: how deep each of a worker's queues is, and how late.

Overview: with ``WorkerConfig.queue_metrics_interval`` set (``awa worker
--metrics-port`` sets it), the worker reads, that often, each of its
queues' due jobs and the oldest one's wait past its ``run_at``
(``jobs_queue_depths``, which reads lanes from their hints) into its
:class:`awa.metrics.WorkerTally`, where the exporters find them as
``awa.queue.depth`` and ``awa.queue.lag``. The lag is the database's
``now()`` less the job's ``run_at``, so the worker's clock plays no part.

Failure handling: a failed read is the service's failure like any other
(supervised, restarted with backoff); the gauges keep their last values
meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Final

from awa.db import Database
from awa.metrics import QueueGauges, WorkerTally

SERVICE: Final = "queue-gauges"
#: Due jobs counted per queue at most (the gauge saturates there).
DEPTH_CAP: Final = 100_000


class QueueGaugeReader:
    def __init__(
        self, db: Database, tally: WorkerTally, queues: list[str], interval_s: float
    ) -> None:
        self._db = db
        self._tally = tally
        self._queues = queues
        self._interval_s = interval_s

    async def run(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(self._interval_s)

    async def read(self) -> None:
        rows = await self._db.fetch("jobs_queue_depths", self._queues, DEPTH_CAP)
        for row in rows:
            self._tally.queues[row["queue"]] = QueueGauges(row["depth"], row["lag_s"] or 0.0)
