"""The notifier: LISTENs for new work so idle workers start within milliseconds.

Overview: inserts, promotions and releases call ``pg_notify('awa_available',
<queue>)``; delivery happens when their transaction commits. This service
holds one connection LISTENing on that channel and tells the claimers which
queue may have jobs. The same connection LISTENs on ``awa_control``
(messages about running jobs, see :mod:`awa.worker.control`).

Failure handling: if the connection drops, notifications sent meanwhile are
lost, so after reconnecting it says every queue may have jobs; the poll
timer covers the gap either way. A connection that was lost after it worked
is replaced after a short fixed delay; only attempts that keep failing back
off (up to ``MAX_RETRY_DELAY_S``), and a good connection resets that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from awa._events import wait_for_event
from awa.db import Database, release_quietly, session_changed, terminate_quietly
from awa.worker.control import CHANNEL as CONTROL_CHANNEL

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.notifier")

CHANNEL: Final = "awa_available"
SERVICE: Final = "notifier"
RECONNECT_DELAY_S: Final = 0.1
MAX_RETRY_DELAY_S: Final = 2.0


class Notifier:
    def __init__(
        self,
        db: Database,
        on_available: Callable[[str | None], None],
        on_control: Callable[[str], None],
        health: Health,
    ) -> None:
        self._db = db
        self._on_available = on_available
        self._on_control = on_control
        self._health = health
        self._stop = asyncio.Event()
        self.listening = asyncio.Event()
        self.received = 0
        self.sessions = 0

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                await self._listen_until_stopped_or_lost()
                failures = 0
                why = "the connection was lost"
            except Exception as error:  # noqa: BLE001 - listen again once the cause clears
                failures += 1
                self._health.failed(SERVICE, error)
                why = f"{type(error).__name__}: {error}"
            if self._stop.is_set():
                return
            delay = (
                min(MAX_RETRY_DELAY_S, RECONNECT_DELAY_S * 2 ** min(failures, 16))
                if failures
                else (RECONNECT_DELAY_S)
            )
            log.warning("not listening for new jobs (%s); reconnecting in %.1fs", why, delay)
            await wait_for_event(self._stop, delay)

    async def _listen_until_stopped_or_lost(self) -> None:
        lost = asyncio.Event()
        connection: Any = None
        pooled = True
        try:
            connection, pooled = await self._db.listen_connection()
            if pooled:
                session_changed(connection)  # LISTENs are undone when it goes back
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(CHANNEL, self._on_notification)
            await connection.add_listener(CONTROL_CHANNEL, self._on_control_message)
            self.sessions += 1
            self.listening.set()
            self._health.ok(SERVICE)
            # Anything sent while we were not listening is lost: look everywhere once.
            self._on_available(None)
            stop = asyncio.ensure_future(self._stop.wait())
            dropped = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({stop, dropped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                dropped.cancel()
        finally:
            self.listening.clear()
            await self._let_go(connection, pooled, lost.is_set())

    async def _let_go(self, connection: Any, pooled: bool, lost: bool) -> None:
        """Gives the connection back to the pool without its listeners, or
        closes it. One that is lost or closed is terminated: a protocol error
        closes a connection without telling its termination listeners, and
        asyncpg keeps the LISTEN callbacks of a closed connection, so handing
        it back would only earn a warning about them."""
        if connection is None:
            return
        if not pooled or lost or _closed(connection):
            terminate_quietly(connection)
            return
        try:
            await connection.remove_listener(CHANNEL, self._on_notification)
            await connection.remove_listener(CONTROL_CHANNEL, self._on_control_message)
        except Exception:  # a connection that cannot unlisten is not reused
            log.debug("removing the listeners failed", exc_info=True)
            terminate_quietly(connection)
            return
        await release_quietly(self._db.pool, connection)

    def _on_notification(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self.received += 1
        self._on_available(payload)

    def _on_control_message(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self._on_control(payload)


def _closed(connection: Any) -> bool:
    """Whether ``connection`` is closed; one the pool took back counts as closed
    (asyncpg refuses every call on it)."""
    try:
        return bool(connection.is_closed())
    except Exception:  # noqa: BLE001 - a detached pool proxy raises on every call
        return True
