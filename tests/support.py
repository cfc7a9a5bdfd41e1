"""Helpers for tests: bounded waiting on the database, and small readers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

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


async def states(connection: asyncpg.Connection) -> dict[str, int]:
    rows = await connection.fetch("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1")
    return {row[0]: row[1] for row in rows}


async def job_row(connection: asyncpg.Connection, job_id: int) -> Any:
    return await connection.fetchrow("SELECT * FROM awa.jobs WHERE id = $1", job_id)
