"""The completer: writes buffered outcomes in one guarded statement per batch.

Overview: handlers record outcomes in the Rust completion batch; this loop
takes the whole batch when it is due (``flush_batch_size`` rows, or the
oldest row has waited ``flush_interval``) and applies it with
``jobs_finish_batch``: one ``UPDATE … FROM unnest(...)``, one array per
column. While a flush is in flight new outcomes pile up, so batches grow
with load on their own.

State model: each row is guarded by ``(id, run_lease, state = 'running')``;
rows from stale attempts (rescued, or released at shutdown) match nothing
and are counted in ``stale``.

Failure handling: a flush that fails is retried with backoff, the same rows
again, until it succeeds or the worker's final drain gives up; outcomes are
never dropped silently. If they are lost with the process, the jobs are
rescued and run again (handlers must tolerate duplicate execution).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from awa import _core
from awa.db import Database, affected_rows

log = logging.getLogger("awa.completer")

MAX_RETRY_DELAY_S = 5.0


class Completer:
    def __init__(self, db: Database, batch: _core.CompletionBatch) -> None:
        self._db = db
        self._batch = batch
        self._finish = db.statement("jobs_finish_batch")
        self._pending = asyncio.Event()
        self._stopping = False
        self.flushes = 0
        self.applied = 0
        self.stale = 0

    def notify(self) -> None:
        """An outcome was recorded."""
        self._pending.set()

    async def run(self) -> None:
        connection = await self._db.pool.acquire()
        try:
            while True:
                await self._pending.wait()
                self._pending.clear()
                while len(self._batch):
                    await self._wait_until_due()
                    connection = await self._flush(connection, self._batch.take())
                if self._stopping:
                    return
        finally:
            await self._db.pool.release(connection)

    def stop(self) -> None:
        """Flush what is buffered, then end."""
        self._stopping = True
        self._pending.set()

    async def _wait_until_due(self) -> None:
        if self._stopping:
            return
        delay = self._batch.due_in(time.monotonic())
        if delay:
            await asyncio.sleep(delay)

    async def _flush(self, connection: Any, columns: tuple[Any, ...]) -> Any:
        failures = 0
        while True:
            try:
                status = await self._finish.execute(connection, *columns)
            except Exception as error:  # noqa: BLE001 - every failure is retried, never dropped
                failures += 1
                delay = min(MAX_RETRY_DELAY_S, 0.05 * 2**failures)
                log.warning(
                    "writing %d outcomes failed (%s: %s); retrying in %.2fs",
                    len(columns[0]),
                    type(error).__name__,
                    error,
                    delay,
                )
                await asyncio.sleep(delay)
                connection = await self._replace_if_closed(connection)
                continue
            applied = affected_rows(status)
            self.flushes += 1
            self.applied += applied
            self.stale += len(columns[0]) - applied
            return connection

    async def _replace_if_closed(self, connection: Any) -> Any:
        if not connection.is_closed():
            return connection
        await self._db.pool.release(connection)
        try:
            return await self._db.pool.acquire()
        except Exception:  # noqa: BLE001 - keep a handle; the next attempt retries
            return connection
