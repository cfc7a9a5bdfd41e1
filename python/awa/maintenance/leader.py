"""Leader election: one worker per database runs maintenance.

Overview: leadership is a session-level advisory lock held on one pooled
connection. Every worker tries to take it every ``leader_election_interval``;
the one that holds it runs the scheduler, the rescuer and the pruner. If the leader's
process dies, PostgreSQL drops its connection and the lock with it, so a
survivor takes over at its next try.

State model: follower → (lock acquired) → leader → (stop, or the connection
fails its liveness check) → follower.

Failure handling: a leader whose connection breaks stops its services at
once. Two leaders at the same time (a connection PostgreSQL has not yet
noticed is dead) is harmless: every maintenance write is guarded and uses
``SKIP LOCKED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from awa._events import wait_for_event
from awa.db import TRANSIENT_ERRORS, Database, session_changed

log = logging.getLogger("awa.leader")

# Arbitrary but fixed: the advisory lock key every awa worker competes for.
LEADER_LOCK_KEY: Final = 0x61_77_61_6C_65_61_64  # "awalead"

ServiceFactory = Callable[[], Coroutine[Any, Any, None]]


class Leader:
    def __init__(
        self, db: Database, services: list[ServiceFactory], election_interval_s: float
    ) -> None:
        self._db = db
        self._services = services
        self._interval_s = election_interval_s
        self._stop = asyncio.Event()
        self.is_leader = False
        self.became_leader = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                async with self._db.pool.acquire() as connection:
                    await self._compete(connection)
            except TRANSIENT_ERRORS as error:
                log.warning("leader election failed (%s)", error)
            await self._pause(self._interval_s)

    async def _compete(self, connection: Any) -> None:
        while not self._stop.is_set():
            session_changed(connection)  # it may hold the leader lock when released
            if await self._db.fetchval("locks_try_leader", LEADER_LOCK_KEY, connection=connection):
                try:
                    await self._lead(connection)
                finally:
                    await self._resign(connection)
                return
            await self._pause(self._interval_s)

    async def _lead(self, connection: Any) -> None:
        self.is_leader = True
        self.became_leader.set()
        log.info("this worker is now the maintenance leader")
        tasks = [asyncio.create_task(service()) for service in self._services]
        try:
            while not self._stop.is_set():
                failed = [task for task in tasks if task.done()]
                if failed:
                    for task in failed:
                        if not task.cancelled() and task.exception() is not None:
                            log.error("maintenance service stopped", exc_info=task.exception())
                    return
                await self._pause(self._interval_s)
                # Liveness: a broken connection means the lock is gone too.
                await self._db.fetchval("locks_check_connection", connection=connection)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.is_leader = False
            self.became_leader.clear()

    async def _resign(self, connection: Any) -> None:
        if connection.is_closed():
            return
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await self._db.fetchval("locks_release_leader", LEADER_LOCK_KEY, connection=connection)

    async def _pause(self, seconds: float) -> None:
        await wait_for_event(self._stop, seconds)
