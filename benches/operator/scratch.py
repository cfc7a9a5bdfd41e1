"""What the operator benchmarks share: a scratch database filled with a
big jobs table, the median of a timed call, and the command line."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database


@asynccontextmanager
async def filled(
    admin_url: str, prefix: str, fill: str, jobs: int
) -> AsyncIterator[awa.AsyncClient]:
    """A client of a fresh, migrated scratch database whose jobs table
    ``fill`` (taking the job count) filled and ANALYZE read; dropped after."""
    name = scratch_name(prefix)
    await create_database(admin_url, name)
    url = with_database(admin_url, name)
    try:
        async with awa.AsyncClient(url) as client:
            await client.migrate()
            conn = await asyncpg.connect(url)
            try:
                await conn.execute(fill, jobs)
                await conn.execute("VACUUM ANALYZE awa.jobs")
            finally:
                await conn.close()
            yield client
    finally:
        await drop_database(admin_url, name)


async def median_ms(ask: Callable[[], Awaitable[object]], rounds: int) -> float:
    """The median time of ``ask()`` over ``rounds`` calls after a warm one."""
    await ask()
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        await ask()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds) * 1000


def main(run: Callable[[str, int, int], Awaitable[dict[str, float]]], doc: str) -> None:
    """``--admin-url``, ``--jobs`` and ``--rounds``, then each timing in ms."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True, help="a superuser URL on this machine")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    timings = asyncio.run(run(options.admin_url, options.jobs, options.rounds))
    print(f"{options.jobs} jobs, median of {options.rounds} (ms):")
    for label, ms in timings.items():
        print(f"  {ms:8.1f}  {label}")
