#!/usr/bin/env python3
"""Samples the jobs table of the newest ``awa_latency_*`` database while
``latency.py`` runs: live and dead tuples, autovacuum runs (finished and
active), the claim index's size and the available backlog, every
``--every`` seconds until the database goes away.

    .venv/bin/python benches/latency/sample_jobs_table.py --admin-url URL &
    .venv/bin/python benches/latency/latency.py --admin-url URL --rates 20000 --duration 45
"""

from __future__ import annotations

import argparse
import asyncio
import time

import asyncpg

from awa.databases import with_database

SAMPLE_SQL = """
SELECT s.n_live_tup, s.n_dead_tup, s.autovacuum_count,
       pg_relation_size('awa.jobs_claim_idx') AS claim_index_bytes,
       (SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'autovacuum:%') AS vacuuming,
       (SELECT count(*) FROM awa.jobs WHERE state = 'available') AS available
FROM pg_stat_user_tables AS s WHERE s.relid = 'awa.jobs'::regclass"""


async def newest_latency_database(admin_url: str) -> str:
    admin = await asyncpg.connect(admin_url)
    try:
        while True:
            name = await admin.fetchval(
                "SELECT datname FROM pg_database WHERE datname LIKE 'awa_latency%' "
                "ORDER BY oid DESC LIMIT 1"
            )
            if name is not None:
                return str(name)
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--every", type=float, default=3.0)
    args = parser.parse_args()
    name = await newest_latency_database(args.admin_url)
    conn = await asyncpg.connect(with_database(args.admin_url, name))
    started = time.monotonic()
    try:
        while True:
            try:
                row = await conn.fetchrow(SAMPLE_SQL)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                return  # the run dropped its database
            if row is not None:
                print(
                    f"{time.monotonic() - started:5.0f} s  live {row['n_live_tup']}  "
                    f"dead {row['n_dead_tup']}  autovacuum runs {row['autovacuum_count']} "
                    f"(active {row['vacuuming']})  claim index "
                    f"{row['claim_index_bytes'] // 1024} KiB  available {row['available']}",
                    flush=True,
                )
            await asyncio.sleep(args.every)
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
