"""Waiting for a job's result: ``client.result(job_id, timeout=...)``.

Overview: the waiter LISTENs on ``awa_finished``, registers in
``awa.result_waiters``, then reads its job once (so a job that ended before
it registered is not missed), and reads it again each time a notification
arrives. The completer sends one notification per batch that ended a job
(completed, failed or cancelled) that has a waiter, in the statement that
writes the batch, never one per job, and none for the batches nobody waits
on: a notification wakes every LISTENing backend of the database (each
worker's notifier too), which is worth paying only for a waiter. Every
waiter reads its own job again, one small primary-key read.

A batch checks for waiters once its update is done, with a snapshot of its
own (``awa.result_awaited_v1``); the waiter reads its job ``FOR SHARE``, so
a batch that wrote the job before the waiter registered is waited for and
seen. No completion slips between the two.

A cancel and a callback's resolution notify the same channel. Maintenance
(a rescue or a callback timeout that fails a job, retention) does not; a
waiter therefore also reads its job every ``RECHECK_INTERVAL_S``. Behind a
pooler in transaction mode without ``listen_url`` there is no LISTEN at
all (as for the worker's notifier): the waiter reads its job every
``POLL_INTERVAL_S``.

The LISTEN uses the same connection as the worker's notifier would: a
direct connection to ``listen_url``, closed afterwards, or one of the pool,
given back without its listener (its session is reset).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from awa import _core
from awa._events import wait_for_event
from awa.db import release_quietly, session_changed, terminate_quietly
from awa.errors import JobNotCompleted, JobNotFound, ResultTimeout

if TYPE_CHECKING:
    from awa.db import Database

log = logging.getLogger("awa.results")

#: What the completer notifies when a batch it wrote ended a job.
CHANNEL: Final = "awa_finished"
#: How often a listening waiter reads its job without a notification (for
#: maintenance, which ends jobs without notifying).
RECHECK_INTERVAL_S: Final = 5.0
#: How often a waiter that cannot LISTEN (pooler, no listen_url) reads its job.
POLL_INTERVAL_S: Final = 0.5

_ENDED_OTHERWISE: Final = frozenset({"failed", "cancelled"})


async def wait_for_result(db: Database, job_id: int, timeout_s: float | None) -> Any:
    """The result of job ``job_id`` once it completed (see
    ``AsyncClient.result``)."""
    seen = ["unknown"]  # the job's state as last read, for the timeout's message
    try:
        async with asyncio.timeout(timeout_s):
            return await _wait(db, job_id, seen)
    except TimeoutError:
        assert timeout_s is not None
        raise ResultTimeout(job_id, timeout_s, seen[0]) from None


async def _wait(db: Database, job_id: int, seen: list[str]) -> Any:
    woken = asyncio.Event()
    async with _listening(db, woken) as listening, _registered(db, job_id, listening):
        interval_s = RECHECK_INTERVAL_S if listening else POLL_INTERVAL_S
        while True:
            woken.clear()
            row = await db.fetchrow("jobs_result", job_id)
            if row is None:
                raise JobNotFound(job_id)
            state = seen[0] = row["state"]
            if state == "completed":
                raw = row["result"]
                return None if raw is None else _core.decode_json(raw)
            if state in _ENDED_OTHERWISE:
                raise _not_completed(job_id, row)
            await wait_for_event(woken, interval_s)


def _not_completed(job_id: int, row: Any) -> JobNotCompleted:
    error_type, message = row["error_type"], row["error_message"]
    if row["state"] == "cancelled":
        error = message or ""
    else:
        error = f"{error_type}: {message}" if error_type else ""
    return JobNotCompleted(job_id, row["state"], row["failure_reason"], error)


@contextlib.asynccontextmanager
async def _listening(db: Database, woken: asyncio.Event) -> AsyncIterator[bool]:
    """LISTENs on :data:`CHANNEL` for the block, setting ``woken`` on each
    notification; yields whether it listens (not behind a pooler without
    ``listen_url``)."""
    if db.poll_only:
        yield False
        return

    def notified(_connection: Any, _pid: int, _channel: str, _payload: str) -> None:
        woken.set()

    connection, pooled = await db.listen_connection()
    try:
        if pooled:
            session_changed(connection)  # the LISTEN is undone when it goes back
        await connection.add_listener(CHANNEL, notified)
        yield True
    finally:
        await _let_go(db, connection, pooled, notified)


@contextlib.asynccontextmanager
async def _registered(db: Database, job_id: int, listening: bool) -> AsyncIterator[None]:
    """Registers the waiter for the block, so that batches ending its job
    notify (only while it listens: otherwise no one would hear them)."""
    if not listening:
        yield
        return
    waiter = await db.fetchval("result_waiters_add", job_id)
    try:
        yield
    finally:
        await asyncio.shield(db.execute("result_waiters_remove", job_id, waiter))


async def _let_go(db: Database, connection: Any, pooled: bool, listener: Any) -> None:
    """Closes a direct connection; gives a pooled one back without the
    listener (a connection that cannot drop it is closed instead)."""
    if not pooled:
        terminate_quietly(connection)
        return
    try:
        await connection.remove_listener(CHANNEL, listener)
    except Exception:  # a connection that cannot unlisten is not reused
        log.debug("removing the result listener failed", exc_info=True)
        terminate_quietly(connection)
        return
    await release_quietly(db.pool, connection)
