"""The notifier: LISTENs for new work so idle workers start within milliseconds.

Overview: inserts, promotions and releases call ``pg_notify('awa_available',
<queue>)``; delivery happens when their transaction commits. This service
holds one connection LISTENing on that channel and wakes the producer for
the named queue. The same connection LISTENs on ``awa_control`` (messages
about running jobs, see :mod:`awa.control`).

Failure handling: if the connection drops, notifications sent meanwhile are
lost, so after reconnecting it wakes every queue once; the producer's poll
timer covers the gap either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from awa._events import wait_for_event
from awa.control import CHANNEL as CONTROL_CHANNEL
from awa.db import TRANSIENT_ERRORS, Database, session_changed

log = logging.getLogger("awa.notifier")

CHANNEL: Final = "awa_available"
MAX_RETRY_DELAY_S = 5.0


class Notifier:
    def __init__(
        self,
        db: Database,
        wake: Callable[[str | None], None],
        control: Callable[[str], None] | None = None,
    ) -> None:
        self._db = db
        self._wake = wake
        self._control = control
        self._stop = asyncio.Event()
        self.listening = asyncio.Event()
        self.received = 0

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                await self._listen_until_stopped_or_lost()
                failures = 0
            except TRANSIENT_ERRORS as error:
                failures += 1
                delay = min(MAX_RETRY_DELAY_S, 0.1 * 2**failures)
                log.warning("listening failed (%s); retrying in %.1fs", error, delay)
                await wait_for_event(self._stop, delay)

    async def _listen_until_stopped_or_lost(self) -> None:
        lost = asyncio.Event()
        async with self._db.pool.acquire() as connection:
            session_changed(connection)
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(CHANNEL, self._on_notification)
            if self._control is not None:
                await connection.add_listener(CONTROL_CHANNEL, self._on_control)
            self.listening.set()
            # Anything sent while we were not listening is lost: look everywhere once.
            self._wake(None)
            try:
                stop = asyncio.ensure_future(self._stop.wait())
                dropped = asyncio.ensure_future(lost.wait())
                await asyncio.wait({stop, dropped}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                dropped.cancel()
            finally:
                self.listening.clear()
                if not connection.is_closed():
                    await connection.remove_listener(CHANNEL, self._on_notification)
                    if self._control is not None:
                        await connection.remove_listener(CONTROL_CHANNEL, self._on_control)

    def _on_notification(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self.received += 1
        self._wake(payload)

    def _on_control(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        assert self._control is not None
        self._control(payload)
