"""The periodic enqueuer: fires the schedules registered with ``client.periodic``.

Overview: runs on the maintenance leader. Its first pass (and one every
``SYNC_INTERVAL_S``) writes the schedules this process's code registers to
``awa.periodic`` and retires the ones it no longer registers (a process
that registers none leaves the table alone). Each pass then reads the
due schedules with the database's clock and, per schedule, in one
transaction: moves ``next_fire_at`` by compare-and-set and, only if that
moved it, inserts the fire times' jobs (:meth:`Schedule.due` applies the
missed-fire policy). A leader that lost its lease and a new one racing it
cannot both move it, so each fire time is enqueued once. It sleeps until
the next fire time, at most ``MAX_SLEEP_S``.

Failure handling: a failed pass is logged and retried (the transaction
rolled back, nothing was enqueued); a schedule whose jobs are refused before any
SQL (its kind's arguments no longer validate) is logged as an error, its
fire times pass, and the others go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from awa.db import Database
from awa.errors import ValidationError
from awa.maintenance.passes import run_passes
from awa.periodic import PeriodicJob, Schedule

if TYPE_CHECKING:
    import datetime

    from awa.worker.supervisor import Health

log = logging.getLogger("awa.periodic")

MAX_SLEEP_S: Final = 1.0
MIN_SLEEP_S: Final = 0.005
SYNC_INTERVAL_S: Final = 60.0

#: Inserts one fire's jobs on the given connection (the client's insert path).
Enqueue = Callable[
    [str, str, Any, Mapping[str, Any], Sequence["datetime.datetime"], Any], Awaitable[None]
]


class PeriodicEnqueuer:
    def __init__(self, db: Database, jobs: Mapping[str, PeriodicJob], enqueue: Enqueue) -> None:
        self._db = db
        self._jobs = dict(jobs)
        self._names = list(self._jobs)
        self._enqueue = enqueue
        self._synced_at: float | None = None
        self.fired = 0

    async def run(self, stop: asyncio.Event, health: Health | None = None) -> None:
        """Passes until ``stop`` is set (a pass under way finishes)."""
        await run_passes("periodic", self.fire_once, MAX_SLEEP_S, health, log, stop)

    async def fire_once(self) -> float:
        """One pass; returns how long to sleep before the next."""
        if not self._jobs:
            return SYNC_INTERVAL_S
        now_s = time.monotonic()
        if self._synced_at is None or now_s - self._synced_at >= SYNC_INTERVAL_S:
            await self.sync()
            self._synced_at = now_s
        for row in await self._db.fetch("periodic_due", self._names):
            await self._fire(row)
        seconds = await self._db.fetchval("periodic_next_due", self._names)
        if seconds is None:
            return MAX_SLEEP_S
        return min(max(float(seconds), MIN_SLEEP_S), MAX_SLEEP_S)

    async def sync(self) -> None:
        jobs = list(self._jobs.values())
        now = await self._db.fetchval("periodic_now")
        retired = await self._db.fetchval(
            "periodic_sync",
            [job.name for job in jobs],
            [job.schedule.cron for job in jobs],
            [job.schedule.timezone for job in jobs],
            [job.kind for job in jobs],
            [json.dumps(job.args) for job in jobs],
            [json.dumps(dict(job.options)) for job in jobs],
            [job.schedule.missed_fire_policy for job in jobs],
            [job.schedule.next_after(now) for job in jobs],
        )
        if retired:
            log.info("retired %d periodic jobs no longer registered in code", retired)

    async def _fire(self, row: Any) -> None:
        schedule = Schedule(row["name"], row["cron"], row["timezone"], row["missed_fire_policy"])
        fires, next_fire = schedule.due(row["next_fire_at"], row["now"])
        args, options = json.loads(row["args"]), json.loads(row["options"])
        async with self._db.pool.acquire() as connection, connection.transaction():
            moved = await self._db.fetchval(
                "periodic_advance", schedule.name, row["next_fire_at"],
                fires[-1] if fires else None, next_fire, connection=connection,
            )  # fmt: skip
            if moved is None or not fires:
                return
            try:
                await self._enqueue(schedule.name, row["kind"], args, options, fires, connection)
            except ValidationError as error:
                # Refused before any SQL: its jobs could never run. The fire
                # times pass (retrying would fail the same way every pass).
                log.error(
                    "periodic job %s: %d fire times not enqueued (%s)",
                    schedule.name, len(fires), error,
                )  # fmt: skip
                return
        self.fired += len(fires)
