"""Behind PgBouncer in transaction mode: one maintenance leader for the
fleet (a session advisory lock made every worker leader at once), and work
found without LISTEN when there is no direct URL."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
import pytest

import awa
from tests.pgbouncer import PgBouncer
from tests.support import FAST_WORKER, at_once, eventually, start_leading, wait_for_state

#: Starts and stops of a worker that has just become the maintenance leader.
STOP_CYCLES = 8


async def _leaders(clients: list[awa.AsyncClient]) -> int:
    return sum(1 for client in clients if client.worker and client.worker.leader.is_leader)


async def test_workers_behind_pgbouncer_elect_one_leader(pgbouncer_url, database_url, conn):
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                awa.AsyncClient(pgbouncer_url, pooler="transaction", listen_url=database_url)
            )
            for _ in range(3)
        ]
        for client in clients:

            @client.task(dict, kind="k")
            async def handler(job):
                return None

            await client.start([("default", 2)], **FAST_WORKER)

        async def one_leads() -> bool:
            return await _leaders(clients) == 1

        await eventually(one_leads)
        # Through many renewals and election attempts, still exactly one.
        for _ in range(10):
            await asyncio.sleep(FAST_WORKER["leader_election_interval"])
            assert await _leaders(clients) == 1
        assert await conn.fetchval("SELECT count(*) FROM awa.leaders WHERE expires_at > now()") == 1
        for client in clients:
            await client.shutdown()


async def test_without_a_direct_url_jobs_are_found_by_polling(pgbouncer_url, conn):
    async with awa.AsyncClient(pgbouncer_url, pooler="transaction") as client:

        @client.task(dict, kind="polled")
        async def polled(job):
            return None

        await client.start([("default", 2)], **FAST_WORKER)
        worker = client.worker
        assert worker is not None
        assert "notifier" not in worker._supervisor.names
        job = await client.insert({}, kind="polled")
        await wait_for_state(conn, job.id, "completed")
        await client.shutdown()


def test_a_pool_that_keeps_prepared_statements_is_refused_behind_a_pooler() -> None:
    import asyncpg
    import pytest

    pool = asyncpg.create_pool("postgresql://nowhere/none")  # never started
    with pytest.raises(awa.ConfigurationError, match="statement_cache_size=0"):
        awa.AsyncClient(pool=pool, pooler="transaction")
    with pytest.raises(awa.ConfigurationError, match="pooler"):
        awa.AsyncClient("postgresql://nowhere/none", pooler="session")  # type: ignore[arg-type]


def _cancel_requests(bouncer: PgBouncer) -> int:
    """How many cancel requests PgBouncer has passed on (its log says so)."""
    return bouncer.log_path.read_text().count("cancel request")


async def test_a_worker_stopped_mid_maintenance_sends_no_cancel_request(
    start_pgbouncer, database_url, conn
):
    """A cancel request makes PgBouncer 1.18 (Debian 12's) crash now and then
    (a cancel that races the statement's end; fixed upstream in later
    releases), and a stopping worker has no reason to send one: its
    maintenance passes are short and are let finish."""
    bouncer = start_pgbouncer(database_url)
    # The log does record a cancel request: an interrupted sleep sends one.
    direct = await asyncpg.connect(bouncer.url, statement_cache_size=0)
    try:
        with pytest.raises(TimeoutError):
            await direct.execute("SELECT pg_sleep(5)", timeout=0.2)
    finally:
        await direct.close()
    await eventually(lambda: at_once(_cancel_requests(bouncer) == 1))

    for _ in range(STOP_CYCLES):
        async with awa.AsyncClient(
            bouncer.url, pooler="transaction", listen_url=database_url
        ) as client:
            await start_leading(client)
            # The leader's first passes start now; stop in the middle of them.
            await client.shutdown()
    assert _cancel_requests(bouncer) == 1
