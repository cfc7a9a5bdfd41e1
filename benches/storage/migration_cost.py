"""How long one migration takes on a large ``awa.jobs``: a scratch database
migrated up to the one before it, filled, then ``awa migrate`` timed.

The jobs are spread over ``--queues`` queues and the four priorities;
``--available`` of them are available, the rest completed (history). A
fraction of them (``--keyed``) have a partition key, one of 8, and a rate
class, one of 4.

    .venv/bin/python benches/storage/migration_cost.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres --migration 23

Writes to ``awa.jobs`` wait for the whole migration (it runs in one
transaction); the time printed is how long they would wait.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import asyncpg

import awa
from awa import sql
from awa.databases import create_database, drop_database, scratch_name, with_database

FILL = """
INSERT INTO awa.jobs (kind, queue, priority, state, run_at, finalized_at, attempt,
                      partition_key, rate_class)
SELECT 'bench_job', 'q' || (g % $2), 1 + (g / $2) % 4,
       CASE WHEN g <= $3 THEN 'available' ELSE 'completed' END::awa.job_state,
       now() - interval '1 hour' + g * interval '1 millisecond',
       CASE WHEN g > $3 THEN now() END,
       CASE WHEN g > $3 THEN 1 ELSE 0 END,
       keyed.partition_key, CASE WHEN keyed.partition_key IS NOT NULL THEN 'c' || (g % 4) END
FROM generate_series(1, $1) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN random() < $4 THEN 't' || (g % 8) END AS partition_key)
     AS keyed
"""


async def migrate_before(conn: asyncpg.Connection, version: int) -> None:
    """Applies every migration older than ``version``, as ``awa migrate`` would."""
    await conn.execute(sql.query("schema_migrations_bootstrap"))
    for migration in sql.MIGRATIONS:
        if migration.version >= version:
            break
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute(
                sql.query("schema_migrations_record"), migration.version, migration.name
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--migration", type=int, default=sql.LATEST_VERSION)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--available", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--keyed", type=float, default=0.0, help="fraction with a partition key")
    opts = parser.parse_args()
    if opts.migration != sql.LATEST_VERSION:
        parser.error(f"only the latest migration ({sql.LATEST_VERSION}) can be timed")
    database = scratch_name("awa_migration_cost")
    await create_database(opts.admin_url, database)
    url = with_database(opts.admin_url, database)
    try:
        conn = await asyncpg.connect(url)
        try:
            await migrate_before(conn, opts.migration)
            await conn.execute(FILL, opts.jobs, opts.queues, opts.available, opts.keyed)
            await conn.execute("VACUUM ANALYZE awa.jobs")
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()
        async with awa.AsyncClient(url) as client:
            started = time.perf_counter()
            applied = await client.migrate()
            elapsed = time.perf_counter() - started
        print(
            f"migration {applied} on {opts.jobs} jobs ({opts.available} available, "
            f"{opts.queues} queues, {opts.keyed:.0%} keyed): {elapsed:.1f} s"
        )
    finally:
        await drop_database(opts.admin_url, database)


if __name__ == "__main__":
    asyncio.run(main())
