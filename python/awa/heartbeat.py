"""The heartbeat: proves this worker process is alive, so its claims stand.

Overview: liveness is kept per process, not per job: one small UPDATE every
``heartbeat_interval`` however many jobs run. The rescuer treats running
jobs of a process silent for ``heartbeat_staleness`` as orphaned.

Failure handling: a missed beat is logged and retried at the next tick. If
the rescuer already removed this worker's row (it was silent too long), the
row is put back; the jobs it lost were rescued, and their late outcomes are
rejected by the run-lease guard.
"""

from __future__ import annotations

import asyncio
import logging

from awa._events import wait_for_event
from awa.db import Database

log = logging.getLogger("awa.heartbeat")


class Heartbeat:
    def __init__(
        self,
        db: Database,
        worker_id: int,
        hostname: str,
        pid: int,
        queues: list[str],
        interval_s: float,
    ) -> None:
        self._db = db
        self._worker_id = worker_id
        self._identity = (hostname, pid, queues)
        self._interval_s = interval_s
        self._stop = asyncio.Event()
        self.beats = 0

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        while not await wait_for_event(self._stop, self._interval_s):
            try:
                await self.beat()
            except Exception as error:  # noqa: BLE001 - a missed beat must not end the loop
                log.warning("heartbeat failed (%s: %s)", type(error).__name__, error)

    async def beat(self) -> None:
        found = await self._db.fetchval("workers_heartbeat", self._worker_id)
        if found is None:
            log.warning(
                "worker %d was presumed dead (silent too long); registering again",
                self._worker_id,
            )
            await self._db.execute("workers_reregister", self._worker_id, *self._identity)
        self.beats += 1
