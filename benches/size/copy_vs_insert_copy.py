#!/usr/bin/env python3
"""``insert_many_copy`` (returns the jobs) against ``enqueue_many_copy`` (returns
a count), on the same 20 000 pydantic models, in one process.

Each round truncates ``awa.jobs`` and times one call of each, the order
alternating; prints the best and the median of each, and their ratios (issue
11 asks for ``insert_many_copy`` at 0.5x of ``enqueue_many_copy`` or better).
A fresh scratch database on the server of ``--admin-url`` is used and dropped.

    .venv/bin/python benches/size/copy_vs_insert_copy.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import asyncpg
from pydantic import BaseModel

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database


class Payload(BaseModel):
    i: int
    name: str
    tags: list[str]


async def measure(url: str, jobs: int, rounds: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"enqueue_many_copy": [], "insert_many_copy": []}
    async with awa.AsyncClient(url) as client:
        await client.migrate()

        @client.task(Payload, kind="payload", queue="q")
        async def handle(job: awa.Job[Payload]) -> None:
            return None

        models = [Payload(i=i, name=f"item-{i}", tags=["a", "b"]) for i in range(jobs)]
        conn = await asyncpg.connect(url)
        try:
            for index in range(rounds):
                order = list(rates) if index % 2 else list(reversed(rates))
                for name in order:
                    await conn.execute("TRUNCATE awa.jobs")
                    started = time.perf_counter()
                    if name == "enqueue_many_copy":
                        await client.enqueue_many_copy(models)
                    else:
                        await client.insert_many_copy(models)
                    rates[name].append(jobs / (time.perf_counter() - started))
        finally:
            await conn.close()
    return rates


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    name = scratch_name("awa_copy_bench")
    await create_database(args.admin_url, name)
    try:
        rates = await measure(with_database(args.admin_url, name), args.jobs, args.rounds)
    finally:
        await drop_database(args.admin_url, name)
    enqueue, insert = rates["enqueue_many_copy"], rates["insert_many_copy"]
    print(
        f"enqueue_many_copy best {max(enqueue):,.0f} median {statistics.median(enqueue):,.0f} "
        f"jobs/s; insert_many_copy best {max(insert):,.0f} median "
        f"{statistics.median(insert):,.0f}; ratio of bests {max(insert) / max(enqueue):.2f}, "
        f"of medians {statistics.median(insert) / statistics.median(enqueue):.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
