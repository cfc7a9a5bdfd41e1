"""What retention costs on a large table: the pruner's passes over N finished
jobs, with nothing to delete (a pass's fixed cost) and with half of them
past their retention (how fast it deletes).

Runs the installed awa's own Pruner, so two virtualenvs compare two versions
of it on one server (`--url`, a superuser: it creates and drops a database).

Usage:
    python benches/retention/prune_cost.py --url postgresql://postgres@127.0.0.1:5432/postgres \
        --jobs 1000000 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import awa
from awa.maintenance.pruner import Pruner

RETENTION_S = 3600.0


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def fill(conn: asyncpg.Connection, jobs: int) -> None:
    """Finished jobs in insert order: the first half finished two hours ago
    (past retention), the second half a minute ago."""
    await conn.execute(
        "INSERT INTO awa.jobs (kind, queue, state, attempt, args, finalized_at) "
        "SELECT 'k', 'q', 'completed', 1, jsonb_build_object('i', i), "
        "       now() - CASE WHEN i <= $1 / 2 THEN interval '2 hours' ELSE interval '1 minute' END "
        "FROM generate_series(1, $1) AS i",
        jobs,
    )
    await conn.execute("VACUUM ANALYZE awa.jobs")


async def passes(pruner: Pruner, until_pruned: int | None, max_passes: int) -> dict:
    t0 = time.perf_counter()
    pruned = done = 0
    while done < max_passes and (until_pruned is None or pruned < until_pruned):
        pruned += await pruner.prune_once()
        done += 1
    return {"passes": done, "pruned": pruned, "seconds": time.perf_counter() - t0}


async def measure(args: argparse.Namespace) -> dict:
    name = f"awa_prune_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(args.url, name)
    try:
        client = awa.AsyncClient(url)
        await client.migrate()
        conn = await asyncpg.connect(url)
        await fill(conn, args.jobs)
        db = await client._database()
        pruner = Pruner(db, args.interval, 1000, RETENTION_S, RETENTION_S, RETENTION_S, None)
        size = await conn.fetchval("SELECT pg_total_relation_size('awa.jobs')")
        cpu0 = time.process_time()
        # Deleting: pass after pass until the old half is gone (bounded).
        deleting = await passes(pruner, args.jobs // 2, 2000)
        left = await conn.fetchval("SELECT count(*) FROM awa.jobs")
        # Then passes with nothing left to delete: what each costs anyway.
        idle = await passes(pruner, None, 5)
        result = {
            "awa": awa.__version__ if hasattr(awa, "__version__") else "?",
            "jobs": args.jobs,
            "table_bytes": size,
            "idle_pass_ms": 1000 * idle["seconds"] / idle["passes"],
            "idle_pruned": idle["pruned"],
            "delete": deleting,
            "delete_jobs_s": deleting["pruned"] / deleting["seconds"] if deleting["seconds"] else 0,
            "left": left,
            "client_cpu_s": time.process_time() - cpu0,
        }
        await conn.close()
        await client.close()
        return result
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--interval", type=float, default=60.0, help="the pruner's prune_interval")
    p.add_argument("--json")
    args = p.parse_args()
    result = asyncio.run(measure(args))
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
