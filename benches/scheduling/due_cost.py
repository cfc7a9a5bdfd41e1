"""What scheduling costs the server: inserting scheduled jobs, and promoting
them once due, through the installed awa's own queries (so two virtualenvs
compare two versions on one server; `--url` names a superuser, it creates
and drops a database).

    python benches/scheduling/due_cost.py --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import awa
from awa import sql

ROUNDS = 20
BATCH = 1000


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def rows(run_at: str, count: int) -> str:
    job = {"kind": "k", "queue": "q", "args": {}, "priority": 2, "max_attempts": 25}
    return json.dumps([job | {"run_at": run_at}] * count)


async def timed(conn: asyncpg.Connection, query: str, *args: object) -> float:
    t0 = time.perf_counter()
    await conn.fetch(sql.query(query), *args)
    return 1000 * (time.perf_counter() - t0)


async def measure(url: str) -> dict:
    client = awa.AsyncClient(url)
    await client.migrate()
    await client.close()
    conn = await asyncpg.connect(url)
    try:
        soon = await conn.fetchval("SELECT (now() + interval '3 seconds')::text")
        now = await conn.fetchval("SELECT (now() - interval '1 second')::text")
        scheduled, available = [], []
        for _ in range(ROUNDS):  # interleaved, so noise falls on both
            scheduled.append(await timed(conn, "jobs_insert", rows(soon, BATCH)))
            available.append(await timed(conn, "jobs_insert", rows(now, BATCH)))
        await conn.execute("ANALYZE awa.jobs")
        await asyncio.sleep(3.5)  # all of them due
        promote = []
        while True:
            t0 = time.perf_counter()
            row = await conn.fetchrow(sql.query("jobs_promote_due"), BATCH)
            promote.append(1000 * (time.perf_counter() - t0))
            if row["promoted"] < BATCH:
                break
        next_due = await timed(conn, "jobs_next_due")
        return {
            "insert_1000_scheduled_ms": statistics.median(scheduled),
            "insert_1000_available_ms": statistics.median(available),
            "promote_1000_ms": statistics.median(promote[:-1]),
            "promote_passes": len(promote),
            "next_due_ms": next_due,
        }
    finally:
        await conn.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    args = p.parse_args()
    name = f"awa_due_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        print(json.dumps(await measure(with_database(args.url, name)), indent=1))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
