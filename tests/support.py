"""Helpers for tests: bounded waiting on the database, small readers, and a
worker started until it leads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg

import awa

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = 15.0, interval: float = 0.02
) -> T:
    """Polls ``check`` until it returns something truthy, or fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {result!r})")
        await asyncio.sleep(interval)


async def at_once(value: T) -> T:
    """``value``, awaitable: a check for :func:`eventually` that needs no query."""
    return value


async def states(connection: asyncpg.Connection) -> dict[str, int]:
    rows = await connection.fetch("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1")
    return {row[0]: row[1] for row in rows}


async def job_row(connection: asyncpg.Connection, job_id: int) -> Any:
    return await connection.fetchrow("SELECT * FROM awa.jobs WHERE id = $1", job_id)


#: Worker settings that keep acceptance tests quick: maintenance runs often.
FAST_WORKER = {
    "poll_interval": 0.2,
    "promote_interval": 0.05,
    "rescue_interval": 0.1,
    "heartbeat_interval": 0.1,
    "heartbeat_staleness": 1.0,
    "leader_election_interval": 0.1,
    "leader_lease": 1.0,
}


async def wait_for_state(
    connection: asyncpg.Connection, job_id: int, state: str, *, timeout: float = 15.0
) -> Any:
    """Waits until the job reaches ``state``; returns its row."""

    async def reached() -> Any:
        row = await job_row(connection, job_id)
        return row if row is not None and row["state"] == state else None

    return await eventually(reached, timeout=timeout)


async def wait_until_settled(
    connection: asyncpg.Connection, count: int, *, timeout: float = 30.0
) -> dict[str, int]:
    """Waits until ``count`` jobs are completed, failed or cancelled."""

    async def settled() -> dict[str, int] | None:
        found = await states(connection)
        done = sum(found.get(state, 0) for state in ("completed", "failed", "cancelled"))
        return found if done >= count else None

    return await eventually(settled, timeout=timeout)


async def flush_statistics(connection: asyncpg.Connection) -> None:
    """Makes this session's table statistics, and every other session's
    flushed so far, visible to its next read of ``pg_stat_user_tables``."""
    await connection.execute("SELECT pg_stat_force_next_flush()")
    await connection.execute("SELECT 1")  # the flush happens as a statement ends
    await connection.execute("SELECT pg_stat_clear_snapshot()")


async def table_counters(connection: asyncpg.Connection, table: str) -> asyncpg.Record:
    """awa.<table>'s cumulative row counters (``n_tup_ins``, ``n_tup_upd``,
    ``n_tup_hot_upd``, ``n_tup_del``), this session's writes included."""
    await flush_statistics(connection)
    return await connection.fetchrow(
        "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables "
        "WHERE schemaname = 'awa' AND relname = $1",
        table,
    )


def array_literal(values: Sequence[Any]) -> str:
    """A PostgreSQL array literal of ``values``, as ``jobs_finish_batch``
    takes each column (strings quoted, ``None`` as NULL)."""

    def element(value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, str):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return str(value)

    return "{" + ",".join(element(value) for value in values) + "}"


def finish_params(
    ids: Sequence[int],
    leases: Sequence[int],
    states: Sequence[str],
    delays: Sequence[float | None] | None = None,
    refunds: Sequence[int] | None = None,
    errors: Sequence[str | None] | None = None,
) -> tuple[str | None, ...]:
    """The parameters of ``jobs_finish_batch`` for these outcomes: its six
    columns, then no results and no progress (NULL)."""
    n = len(ids)
    columns = (ids, leases, states, delays or [None] * n, refunds or [0] * n, errors or [None] * n)
    return (*(array_literal(column) for column in columns), None, None)


async def start_leading(client: awa.AsyncClient) -> Any:
    """Starts ``client``'s worker on ``default`` (a no-op task, FAST_WORKER
    settings) and returns it once it is the maintenance leader."""

    @client.task(dict, kind="k")
    async def handler(job: Any) -> None:
        return None

    await client.start([("default", 2)], **FAST_WORKER)
    worker = client.worker
    assert worker is not None
    await asyncio.wait_for(worker.leader.became_leader.wait(), 10)
    return worker
