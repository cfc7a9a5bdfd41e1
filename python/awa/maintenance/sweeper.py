"""The sweeper: finds jobs left behind a lane's hint.

Overview: runs on the maintenance leader every ``sweep_interval``. Claims
start from their lane's hint (a queue at one priority; docs/storage.md,
Lanes), and every way a job can become claimable behind it is covered where
it happens but one: a claim that locked jobs and then rolled back (its
connection dropped, the server restarted) while other claims skipped those
jobs and moved the hint past them. For each lane one statement
(``lanes_sweep``, ``awa.sweep_lane_v1``) walks the jobs claimed since its
last pass, up to the hint, and lowers the hint to the first available job
nobody holds; it also scans for the lane's pending lowerings and deletes
its older moves. A pass costs what was claimed since the last one: a lane
nothing happened in since (``lanes_to_sweep``) is not visited.

As a last net, every ``full_sweep_interval`` the walk starts again from each
lane's beginning (and at once when the database's clock went back, which
would key new jobs behind the hint), ``SWEEP_WALK_LIMIT`` jobs per lane and
pass, until it reaches the hint. A lane whose hint is still where it opened
has nothing behind it, and such a pass leaves it alone.

Failure handling: a failed pass is logged and retried at the next tick; each
lane is swept in a transaction of its own, so one lane's failure or wait
holds up no other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

from awa.db import Database
from awa.maintenance.passes import run_passes

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.sweeper")

#: Jobs one lane's sweep reads at most per pass (about 10 ms of server time).
SWEEP_WALK_LIMIT: Final = 20_000


class Sweeper:
    def __init__(self, db: Database, interval_s: float, full_sweep_interval_s: float) -> None:
        self._db = db
        self._interval_s = interval_s
        self._full_sweep_interval_s = full_sweep_interval_s
        # The first pass of a new leader sweeps from the start: whatever a
        # former leader left unfinished is looked at again.
        self._next_full_sweep = 0.0
        self.found = 0

    async def run(self, stop: asyncio.Event, health: Health | None = None) -> None:
        """Passes until ``stop`` is set (a pass under way finishes)."""
        await run_passes("sweeper", self._pass, self._interval_s, health, log, stop)

    async def _pass(self) -> None:
        await self.sweep_once()

    async def sweep_once(self, *, from_start: bool = False) -> int:
        """One pass over every lane; returns in how many it found jobs left
        behind."""
        if time.monotonic() >= self._next_full_sweep:
            from_start = True
            self._next_full_sweep = time.monotonic() + self._full_sweep_interval_s
        found = 0
        for lane in await self._db.fetch("lanes_to_sweep", from_start):
            if await self._db.fetchval("lanes_sweep", lane["id"], from_start, SWEEP_WALK_LIMIT):
                found += 1
                self.found += 1
                log.warning(
                    "queue %r, priority %d%s: found jobs left behind by a claim that did not "
                    "commit; claims take them now",
                    lane["queue"],
                    lane["priority"],
                    ""
                    if lane["partition_key"] is None
                    else f", partition {lane['partition_key']!r}",
                )
        return found
