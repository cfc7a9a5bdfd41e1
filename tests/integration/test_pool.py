"""awa's own pool skips asyncpg's reset round trip on release, except for
connections whose session a service changed: those must come back clean."""

from __future__ import annotations

import asyncio
import warnings

import asyncpg

import awa
import awa.db
from awa.db import release_quietly
from tests.support import FAST_WORKER, eventually, start_leading


async def test_sessions_changed_by_the_worker_come_back_clean(database_url, conn):
    async with awa.AsyncClient(database_url, max_connections=6) as client:
        await start_leading(client)
        await client.shutdown()
        pool = (await client._database()).pool
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        try:
            for connection in held:
                # Not jit, which the claimer also turns off (and the same reset
                # restores): asyncpg itself sets it off and back around its type
                # introspection, and leaves it off when that is interrupted.
                set_by = await connection.fetch(
                    "SELECT name FROM pg_settings WHERE source = 'session' "
                    "AND name IN ('synchronous_commit', 'plan_cache_mode')"
                )
                assert set_by == [], "a claimer's session settings came back with it"
                assert (
                    await connection.fetchval("SELECT count(*) FROM pg_listening_channels()") == 0
                )
        finally:
            for connection in held:
                await pool.release(connection)
    # Only this database's locks: other suites may share the server.
    held_locks = await conn.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert held_locks == 0


async def test_a_pool_that_says_nothing_of_how_it_connects_still_gets_heartbeats(
    database_url, conn, caplog
):
    async def connect(*_args, **_kwargs):
        return await asyncpg.connect(database_url)

    pool = await asyncpg.create_pool(connect=connect, min_size=1, max_size=6)
    try:
        async with awa.AsyncClient(pool=pool) as client:

            @client.task(dict, kind="k")
            async def handler(job):
                return None

            with caplog.at_level("WARNING", logger="awa.heartbeat"):
                await client.start([("default", 1)], **FAST_WORKER)
            worker = client.worker
            assert worker is not None

            async def beating() -> bool:
                return worker.heartbeat.beats >= 3

            await eventually(beating)
            await client.shutdown()
    finally:
        await pool.close()
    assert any("says nothing of how it connects" in r.getMessage() for r in caplog.records)


async def test_a_connection_that_cannot_go_back_to_the_pool_still_frees_its_slot(database_url):
    # The notifier once handed back a connection that a protocol error had
    # closed with its LISTEN callbacks still registered: asyncpg refused the
    # release (its warning is an error here, as in any app run with -W error),
    # the slot stayed taken, and closing the pool waited for it for ever.
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        connection = await pool.acquire()
        await connection.add_listener("awa_test_leftover", lambda *_args: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            await release_quietly(pool, connection)
        again = await asyncio.wait_for(pool.acquire(), 10)
        assert await again.fetchval("SELECT 1") == 1
        await pool.release(again)
    finally:
        await asyncio.wait_for(pool.close(), 10)


async def test_closing_a_client_terminates_connections_nobody_gave_back(
    database_url, conn, monkeypatch, caplog
):
    monkeypatch.setattr(awa.db, "POOL_CLOSE_TIMEOUT_S", 0.5)
    client = awa.AsyncClient(database_url)
    pool = (await client._database()).pool
    leaked = await pool.acquire()
    pid = leaked.get_server_pid()
    await asyncio.wait_for(client.close(), 30)
    assert "1 connections still in use after 0.5s; terminating them" in caplog.text

    async def backend_gone() -> bool:
        return not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)

    await eventually(backend_gone)
