#!/usr/bin/env python3
"""One worker drains ``--jobs`` no-op jobs in this process: jobs/s, and the
CPU a job costs this process and Postgres.

The jobs are enqueued with COPY, the table analyzed and checkpointed; the
clock runs from ``client.start`` to the last handler. Worker CPU is this
process's (``getrusage``), Postgres CPU the database's backends
(``/proc``, as the peer bench reads them). ``--flow`` turns on issue 12's
flow control for the queue, any of ``aging`` (priority aging every minute),
``fair`` (fairness, the jobs spread over eight partition keys) and
``class`` (a rate class far above the drain rate on every job).
``--statements`` also prints the statements that took the server longest
during the drain (``pg_stat_statements``, which the server must preload).

Which awa runs is the one Python imports: to compare two trees, put each
tree's ``python/`` (with its built ``_core``) first on ``PYTHONPATH`` in
turn, and alternate them. A fresh scratch database on the server of
``--admin-url`` is used and dropped.

    .venv/bin/python benches/scale/one_process_drain.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres --concurrency 10 --flow fair
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

import asyncpg

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers" / "drivers"))
import common  # the peer drivers' measuring helpers (benches/peers/drivers)

QUEUE, KIND = "bench", "bench_job"
RATE_CLASS = "bench-class"
TENANTS = [f"tenant-{n}" for n in range(8)]
FLOW_PARTS = ("aging", "fair", "class")
INSERT_BATCH = 20_000
SLOWEST_STATEMENTS = """
    SELECT calls, total_exec_time / calls * 1000 AS us_each,
           regexp_replace(left(query, 100), '\\s+', ' ', 'g') AS query
    FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
    WHERE d.datname = current_database()
    ORDER BY total_exec_time DESC LIMIT 12"""


async def configure_flow(client: awa.AsyncClient, flow: set[str]) -> None:
    if "aging" in flow:
        await client.configure_queue(QUEUE, priority_aging_interval=60)
    if "fair" in flow:
        await client.configure_queue(QUEUE, fair=True)
    if "class" in flow:
        await client.configure_rate_class(RATE_CLASS, rate=1_000_000, burst=100_000)


def insert_options(flow: set[str], count: int) -> list[dict[str, str]] | None:
    if not flow & {"fair", "class"}:
        return None
    return [
        {
            **({"rate_class": RATE_CLASS} if "class" in flow else {}),
            **({"partition_key": TENANTS[n % len(TENANTS)]} if "fair" in flow else {}),
        }
        for n in range(count)
    ]


async def drain(url: str, dbname: str, jobs: int, concurrency: int, flow: set[str],
                statements: bool) -> dict[str, float]:  # fmt: skip
    client = awa.AsyncClient(url)
    await client.migrate()
    await configure_flow(client, flow)
    done = asyncio.Event()
    handled = 0

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def bench_job(job: awa.Job[dict]) -> None:
        nonlocal handled
        handled += 1
        if handled == jobs:
            done.set()

    for start in range(0, jobs, INSERT_BATCH):
        count = min(jobs - start, INSERT_BATCH)
        await client.enqueue_many_copy(
            [{"i": i} for i in range(start, start + count)], kind=KIND, queue=QUEUE,
            opts=insert_options(flow, count),
        )  # fmt: skip
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ANALYZE awa.jobs")
        await conn.execute("CHECKPOINT")
        if statements:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")
        pg_before = sum(common.postgres_cpu_ticks(dbname, 0).values())
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        await client.start([(QUEUE, concurrency)])
        await done.wait()
        elapsed = time.perf_counter() - started
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        pg_after = sum(common.postgres_cpu_ticks(dbname, 0).values())
        if statements:
            for row in await conn.fetch(SLOWEST_STATEMENTS):
                print(f"  {row['calls']:7d} x {row['us_each']:8.0f} µs  {row['query']}")
    finally:
        await conn.close()
        await client.shutdown(timeout=30)
        await client.close()
    worker_s = (own_after.ru_utime + own_after.ru_stime) - (
        own_before.ru_utime + own_before.ru_stime
    )
    return {
        "jobs_per_s": jobs / elapsed,
        "worker_cpu_ms_per_job": worker_s * 1000 / jobs,
        "pg_cpu_ms_per_job": (pg_after - pg_before) / common.CLOCK_TICKS_PER_S * 1000 / jobs,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True, help="a superuser URL on this machine")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--flow", default="", help=f"comma-separated: {', '.join(FLOW_PARTS)}")
    parser.add_argument("--statements", action="store_true")
    opts = parser.parse_args()
    flow = set(filter(None, opts.flow.split(",")))
    if not flow <= set(FLOW_PARTS):
        parser.error(f"--flow: unknown {sorted(flow - set(FLOW_PARTS))}")
    dbname = scratch_name("awa_drain")
    await create_database(opts.admin_url, dbname)
    try:
        url = with_database(opts.admin_url, dbname)
        result = await drain(url, dbname, opts.jobs, opts.concurrency, flow, opts.statements)
    finally:
        await drop_database(opts.admin_url, dbname)
    print(
        f"{opts.jobs} jobs, c={opts.concurrency}, flow={','.join(sorted(flow)) or 'none'}: "
        f"{result['jobs_per_s']:.0f} jobs/s, worker {result['worker_cpu_ms_per_job']:.4f} "
        f"and Postgres {result['pg_cpu_ms_per_job']:.4f} CPU ms a job"
    )


if __name__ == "__main__":
    asyncio.run(main())
