"""Long run with retention: do dead tuples and the table stay bounded?

A producer inserts jobs at a steady rate while one awa worker drains them
with a short retention, so the pruner deletes finished jobs all along and
autovacuum has to keep up. Every sample prints the live and dead tuples of
awa.jobs (pg_stat_user_tables), its total size, and what the worker and the
pruner did so far. The run is bounded when dead tuples and size level off
instead of growing with the number of jobs processed.

Usage:
    python benches/retention/long_run.py --minutes 5 --rate 2000 --retention 10 [--json out.json]

Without ``--url`` it runs on a throwaway embedded server with PostgreSQL's
default settings (autovacuum on, naptime one minute), which is what this
measures: give ``--url`` only for a server whose autovacuum is on (this
machine's shared server runs with it off, so dead tuples there only ever grow).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import awa

SAMPLE_EVERY_S = 10.0
INSERT_BATCH = 200


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def sample(conn: asyncpg.Connection) -> dict[str, int]:
    row = await conn.fetchrow(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count, "
        "pg_total_relation_size('awa.jobs') AS bytes "
        "FROM pg_stat_user_tables WHERE relid = 'awa.jobs'::regclass"
    )
    return dict(row)


async def produce(client: awa.AsyncClient, rate: float, stop: asyncio.Event) -> int:
    inserted = 0
    started = time.monotonic()
    while not stop.is_set():
        payloads = [{"i": inserted + k} for k in range(INSERT_BATCH)]
        await client.enqueue_many_copy(payloads, kind="tick", queue="long_run")
        inserted += INSERT_BATCH
        ahead = inserted / rate - (time.monotonic() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)
    return inserted


async def run(opts: argparse.Namespace) -> list[dict[str, float]]:
    name = f"awa_long_run_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(opts.url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(opts.url, name)
    samples: list[dict[str, float]] = []
    try:
        client = awa.AsyncClient(url)
        await client.migrate()

        @client.task(dict, kind="tick", queue="long_run")
        async def tick(job: awa.Job[dict]) -> None:
            return None

        await client.start(
            [("long_run", 50)],
            completed_retention=opts.retention,
            prune_interval=1.0,
        )
        monitor = await asyncpg.connect(url)
        stop = asyncio.Event()
        producer = asyncio.create_task(produce(client, opts.rate, stop))
        started = time.monotonic()
        print("   t(s)   processed   live tuples   dead tuples   size (MiB)   pruned   autovacuums")
        while time.monotonic() - started < opts.minutes * 60:
            await asyncio.sleep(SAMPLE_EVERY_S)
            stats = await sample(monitor)
            worker = client.worker
            assert worker is not None
            point = {
                "t_s": round(time.monotonic() - started, 1),
                "processed": worker.completer.applied,
                "live_tuples": stats["n_live_tup"],
                "dead_tuples": stats["n_dead_tup"],
                "mib": round(stats["bytes"] / 2**20, 1),
                "pruned": worker.pruner.pruned,
                "autovacuums": stats["autovacuum_count"],
            }
            samples.append(point)
            print(
                f"{point['t_s']:7.0f} {point['processed']:11d} {point['live_tuples']:13d} "
                f"{point['dead_tuples']:13d} {point['mib']:12.1f} {point['pruned']:8d} "
                f"{point['autovacuums']:13d}",
                flush=True,
            )
        stop.set()
        inserted = await producer
        await client.shutdown()
        await client.close()
        await monitor.close()
        print(f"inserted {inserted} jobs in {opts.minutes} min")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a superuser URL (default: an embedded server)")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs inserted per second")
    parser.add_argument("--retention", type=float, default=10.0, help="completed_retention (s)")
    parser.add_argument("--json")
    opts = parser.parse_args()
    if opts.url is None:
        from awa.embedded import EmbeddedPostgres

        with EmbeddedPostgres(durable=True) as server:
            opts.url = server.url
            samples = asyncio.run(run(opts))
        opts.url = "embedded (defaults)"
    else:
        samples = asyncio.run(run(opts))
    if opts.json:
        with open(opts.json, "w") as out:
            json.dump({"options": vars(opts), "samples": samples}, out, indent=1)


if __name__ == "__main__":
    main()
