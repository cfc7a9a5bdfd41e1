"""awa's own pool skips asyncpg's reset round trip on release, except for
connections whose session a service changed: those must come back clean."""

from __future__ import annotations

import asyncio

import awa
from tests.support import FAST_WORKER


async def test_sessions_changed_by_the_worker_come_back_clean(database_url, conn):
    async with awa.AsyncClient(database_url, max_connections=6) as client:

        @client.task(dict, kind="k")
        async def handler(job):
            return None

        await client.start([("default", 2)], **FAST_WORKER)
        worker = client.worker
        assert worker is not None
        await asyncio.wait_for(worker.leader.became_leader.wait(), 10)
        await client.shutdown()
        pool = (await client._database()).pool
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        try:
            for connection in held:
                set_by = await connection.fetchval(
                    "SELECT source FROM pg_settings WHERE name = 'synchronous_commit'"
                )
                assert set_by != "session"
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
