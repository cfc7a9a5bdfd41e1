"""The fleet-wide settings of the queues this worker serves, as it last read them.

Overview: ``client.pause_queue`` and ``client.configure_queue`` store a
queue's settings in ``awa.queue_settings`` and send ``queues:<queue>`` on
``awa_control``; every worker's :class:`QueueSettingsWatcher` reloads the
settings of the queues it serves when told, at start, and at every poll
interval. A paused queue is told to the dispatcher, which plans no claim
for it; resuming marks the queue ready, so its claimers look at once.

Ceilings, rate limits, rate classes and priority aging are applied by the
claim itself, in the database (awa.claim_v2), for the whole fleet at once;
the claim also says when to look again at a queue a limit held back. The
worker hands each claim what it last read here (each queue's aging
interval, whether it has a limit, whether any rate class is configured), so
the claim reads no settings of its own, and orders a claim's jobs by their
aged level.

Failure handling: a failed reload keeps the last known settings and is
reported to the worker's health (a database that refuses it for
``unhealthy_after`` makes the worker unhealthy, like any service). A
message lost with a dropped connection delays a change by at most one poll
interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from awa._events import wait_for_event

if TYPE_CHECKING:
    from awa import _core
    from awa.db import Database
    from awa.worker.claims import ClaimSignal
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.queue_settings")

SERVICE: Final = "queue-settings"
#: The ``awa_control`` verb that says a queue's settings changed.
VERB: Final = "queues"


class QueueSettingsWatcher:
    def __init__(
        self,
        db: Database,
        dispatcher: _core.Dispatcher,
        claims: ClaimSignal,
        health: Health,
        queues: list[str],
        reload_interval_s: float,
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._claims = claims
        self._health = health
        self._queues = queues
        self._reload_interval_s = reload_interval_s
        self._told = asyncio.Event()
        #: The served queues paused now, as last read.
        self.paused: frozenset[str] = frozenset()
        #: The served queues with priority aging, each with its interval (s).
        self.aging_s: Mapping[str, float] = {}
        #: The served queues with a ceiling or a rate limit.
        self.limited: frozenset[str] = frozenset()
        #: Whether any rate class is configured (a claim then checks classes).
        self.classes_configured = False
        #: The served queues claimed round-robin across partitions.
        self.fair: frozenset[str] = frozenset()
        self.reloads = 0

    def told(self) -> None:
        """A ``queues:`` control message arrived: reload now."""
        self._told.set()

    async def load(self) -> None:
        """Reads the settings and applies them; raises if the read fails."""
        rows = await self._db.fetch("queue_settings_served", self._queues)
        self._apply(frozenset(row["queue"] for row in rows if row["paused"]))
        self.aging_s = {
            row["queue"]: row["priority_aging_s"]
            for row in rows
            if row["priority_aging_s"] is not None
        }
        self.limited = frozenset(row["queue"] for row in rows if row["limited"])
        self.fair = frozenset(row["queue"] for row in rows if row["fair"])
        self.classes_configured = bool(
            await self._db.fetchval("queue_settings_rate_classes_configured")
        )
        self.reloads += 1

    async def run(self) -> None:
        while True:
            await wait_for_event(self._told, self._reload_interval_s)
            self._told.clear()
            try:
                await self.load()
            except Exception as error:  # noqa: BLE001 - keep the last known settings
                log.warning("reloading queue settings failed (%s: %s)", type(error).__name__, error)
                self._health.failed(SERVICE, error)
                continue
            self._health.ok(SERVICE)

    def _apply(self, paused: frozenset[str]) -> None:
        if paused == self.paused:
            return
        for queue in paused - self.paused:
            self._dispatcher.set_paused(queue, True)
            log.info("queue %s is paused: no claims until it is resumed", queue)
        resumed = self.paused - paused
        for queue in resumed:
            self._dispatcher.set_paused(queue, False)
            log.info("queue %s is resumed", queue)
        self.paused = paused
        if resumed:
            self._claims.poke()
