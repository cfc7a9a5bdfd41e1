"""The PgBouncer test fixture: a real pooler in transaction mode."""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlsplit

import asyncpg

from awa.embedded import find_bindir
from tests.support import at_once, eventually


async def test_a_plain_connection_runs_queries_through_the_pooler(pgbouncer_url):
    conn = await asyncpg.connect(pgbouncer_url, statement_cache_size=0)
    try:
        assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE id = $1", -1) == 0
    finally:
        await conn.close()


async def test_the_pooler_shares_one_server_connection_between_clients_per_transaction(
    database_url, start_pgbouncer
):
    bouncer = start_pgbouncer(database_url, pool_size=1)
    first = await asyncpg.connect(bouncer.url, statement_cache_size=0)
    second = await asyncpg.connect(bouncer.url, statement_cache_size=0)
    try:
        # Both clients are connected at once, yet each statement runs on the
        # one server connection: session state set by one is seen by the other.
        await first.execute("SELECT set_config('awa.probe', 'set by the first client', false)")
        assert await second.fetchval("SELECT current_setting('awa.probe', true)") == (
            "set by the first client"
        )
        assert await first.fetchval("SELECT pg_backend_pid()") == await second.fetchval(
            "SELECT pg_backend_pid()"
        )
    finally:
        await first.close()
        await second.close()


async def test_the_admin_console_shows_a_transaction_pool(database_url, start_pgbouncer):
    bouncer = start_pgbouncer(database_url)
    client = await asyncpg.connect(bouncer.url, statement_cache_size=0)
    try:
        await client.fetchval("SELECT 1")
        # The admin console speaks only the simple query protocol: ask psql.
        psql = await asyncio.create_subprocess_exec(
            str(find_bindir() / "psql"),
            "--no-psqlrc",
            "--no-align",
            "--field-separator=|",
            "--pset=footer=off",
            "--command=SHOW POOLS",
            bouncer.admin_url,
            stdout=asyncio.subprocess.PIPE,
        )
        output, _ = await psql.communicate()
    finally:
        await client.close()
    assert psql.returncode == 0
    header, *rows = output.decode().splitlines()
    pools = [dict(zip(header.split("|"), row.split("|"), strict=True)) for row in rows]
    database = urlsplit(database_url).path.lstrip("/")
    assert [pool["pool_mode"] for pool in pools if pool["database"] == database] == ["transaction"]


async def test_a_pooler_that_dies_is_reported_with_its_status_and_log(
    database_url, start_pgbouncer
):
    bouncer = start_pgbouncer(database_url)
    assert bouncer.exit_report() is None
    pid = bouncer.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    report = await eventually(lambda: at_once(bouncer.exit_report()), timeout=5)
    assert f"exited on its own with status {-signal.SIGKILL}" in report
    assert "process up: PgBouncer" in report  # the log's last lines
