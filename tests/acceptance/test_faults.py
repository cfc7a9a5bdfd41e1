"""Faults other than kill -9, against a worker in this process: dropped
connections, non-transient errors in every service, a claim whose reply was
lost, serialization failures and deadlocks on the hot statements. Through
each, every job completes, once, and the worker stays healthy."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter

import pytest

import awa
from tests.faults import ReplyCutter, revoked, terminate_backends
from tests.support import FAST_WORKER, eventually, wait_for_state

ROUNDS = 3
JOBS_PER_ROUND = 50
#: Long enough that only a notification or a retry can explain a prompt claim.
SLOW_POLL = {**FAST_WORKER, "poll_interval": 60.0}


async def _claimed(conn, job_id: int) -> bool:
    return bool(await conn.fetchval("SELECT attempt >= 1 FROM awa.jobs WHERE id = $1", job_id))


async def _all_completed(conn, ids: list[int]) -> bool:
    count = await conn.fetchval(
        "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND state = 'completed'", ids
    )
    return bool(count == len(ids))


async def test_connection_kills_lose_no_outcome_and_run_no_job_twice(client, conn):
    runs: Counter[int] = Counter()
    gate = asyncio.Event()

    @client.task(dict, kind="held")
    async def held(job):
        runs[job.id] += 1
        await gate.wait()

    await client.start([("default", JOBS_PER_ROUND)], **FAST_WORKER)
    every: list[int] = []
    for _ in range(ROUNDS):
        gate.clear()
        ids = [job.id for job in await client.insert_many([{}] * JOBS_PER_ROUND, kind="held")]
        every += ids

        async def all_running(ids: list[int] = ids) -> bool:
            return all(runs[job_id] for job_id in ids)

        await eventually(all_running)
        assert await terminate_backends(conn) > 0
        gate.set()  # their outcomes meet dead connections
        await eventually(lambda ids=ids: _all_completed(conn, ids), timeout=30)

    assert set(runs) == set(every)
    assert set(runs.values()) == {1}, "a job ran twice"
    rows = await conn.fetch(
        "SELECT attempt, crashes, errors FROM awa.jobs WHERE id = ANY($1)", every
    )
    assert {(row["attempt"], row["crashes"], row["errors"]) for row in rows} == {(1, 0, None)}
    worker = client.worker
    assert worker is not None and worker.healthy


async def test_every_service_recovers_from_a_non_transient_error(restricted, conn):
    """Every statement awa runs fails with a permission error for a while,
    and its connections are dropped: the leader, the completer, the claimers,
    the notifier and the heartbeat all come back once the cause clears."""
    role, url = restricted
    runs: Counter[int] = Counter()
    gate = asyncio.Event()
    async with awa.AsyncClient(url) as client:

        @client.task(dict, kind="work")
        async def work(job):
            runs[job.id] += 1
            await gate.wait()

        # Staleness above the fault's length: the worker stays alive throughout.
        await client.start([("default", 5)], **{**FAST_WORKER, "heartbeat_staleness": 10.0})
        during = [job.id for job in await client.insert_many([{}] * 5, kind="work")]
        await eventually(lambda: _all_started(runs, during))
        async with revoked(conn, role):
            await terminate_backends(conn)
            gate.set()  # outcomes can be neither written nor claimed meanwhile
            await asyncio.sleep(1.5)  # the fault lasts this long
        # Due work the maintenance leader must promote, and new work to claim.
        scheduled = await conn.fetchval(
            """INSERT INTO awa.jobs (kind, args, state, run_at)
               VALUES ('work', '{}', 'scheduled', now() + interval '200 milliseconds')
               RETURNING id"""
        )
        await eventually(lambda: _all_completed(conn, [*during, scheduled]), timeout=30)
        worker = client.worker
        assert worker is not None and worker.healthy
    assert runs[scheduled] == 1
    assert all(runs[job_id] == 1 for job_id in during)


def _all_started(runs: Counter[int], ids: list[int]) -> asyncio.Future[bool]:
    future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    future.set_result(all(runs[job_id] for job_id in ids))
    return future


async def test_a_job_inserted_right_after_a_connection_kill_is_claimed_without_waiting_for_the_poll(
    client, conn
):
    @client.task(dict, kind="quick")
    async def quick(job):
        return None

    await client.start([("default", 5)], **SLOW_POLL)
    warm = await client.insert({}, kind="quick")
    await wait_for_state(conn, warm.id, "completed")
    await terminate_backends(conn)
    # Inserted at once: its notification goes out while the worker is not listening.
    job_id = await conn.fetchval(
        "WITH j AS (INSERT INTO awa.jobs (kind, args) VALUES ('quick', '{}') RETURNING id) "
        "SELECT j.id FROM j, pg_notify('awa_available', 'default')"
    )
    await eventually(lambda: _claimed(conn, job_id), timeout=15)


async def test_the_notifier_reconnects_at_once_after_each_lost_connection(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa.notifier")

    @client.task(dict, kind="quick")
    async def quick(job):
        return None

    await client.start([("default", 5)], **SLOW_POLL)
    worker = client.worker
    assert worker is not None
    for _ in range(4):
        await eventually(_async(worker.notifier.listening.is_set))
        await terminate_backends(conn)
        job_id = await conn.fetchval(
            "INSERT INTO awa.jobs (kind, args) VALUES ('quick', '{}') RETURNING id"
        )
        await eventually(lambda job_id=job_id: _claimed(conn, job_id), timeout=15)
    delays = [
        float(match[1])
        for record in caplog.records
        if record.name == "awa.notifier"
        for match in [re.search(r" in (\d+(?:\.\d+)?)s", record.getMessage())]
        if match
    ]
    assert delays, "each lost connection is logged with its reconnect delay"
    assert max(delays) <= min(delays), f"the reconnect delay grew: {delays}"


def _async(predicate):
    async def check() -> bool:
        return bool(predicate())

    return check


async def test_a_claim_whose_reply_was_lost_is_released_and_run_once(database_url, conn):
    cutter = ReplyCutter(database_url)
    proxy_url = await cutter.start()
    runs: Counter[int] = Counter()
    try:
        async with awa.AsyncClient(proxy_url) as client:

            @client.task(dict, kind="quick")
            async def quick(job):
                runs[job.id] += 1

            settings = {**FAST_WORKER, "heartbeat_staleness": 10.0}
            await client.start([("default", 5)], **settings)
            warm = await client.insert({}, kind="quick")
            await wait_for_state(conn, warm.id, "completed")

            cut = asyncio.create_task(cutter.cut(drop_after_s=1.0))
            await asyncio.sleep(0)  # the cut starts swallowing replies
            job_id = await conn.fetchval(
                "INSERT INTO awa.jobs (kind, args) VALUES ('quick', '{}') RETURNING id"
            )
            # The claim commits on the server; its reply never reaches the worker.
            await eventually(lambda: _claimed(conn, job_id), timeout=15)
            await cut
            assert cutter.swallowed_bytes > 0
            await wait_for_state(conn, job_id, "completed", timeout=30)
    finally:
        await cutter.close()
    assert runs[job_id] == 1
    row = await conn.fetchrow("SELECT attempt, crashes FROM awa.jobs WHERE id = $1", job_id)
    assert (row["attempt"], row["crashes"]) == (1, 0), "the lost claim's attempt is refunded"


FAIL_ONCE = """
CREATE SEQUENCE IF NOT EXISTS test_fault_fired;
CREATE OR REPLACE FUNCTION test_fail_once() RETURNS trigger AS $$
BEGIN
    -- A sequence is not rolled back with the failed statement: it fires once.
    IF nextval('test_fault_fired') = 1 THEN
        RAISE EXCEPTION 'injected fault' USING ERRCODE = TG_ARGV[0];
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""


@pytest.mark.parametrize("errcode", ["40001", "40P01"])
@pytest.mark.parametrize("statement", ["claim", "finish"])
async def test_a_one_shot_serialization_failure_or_deadlock_is_retried(
    client, conn, errcode, statement
):
    state = "running" if statement == "claim" else "completed"
    await conn.execute(FAIL_ONCE)
    await conn.execute(
        f"""CREATE TRIGGER test_fail_{statement} BEFORE UPDATE OF state ON awa.jobs
            FOR EACH ROW WHEN (NEW.state = '{state}')
            EXECUTE FUNCTION test_fail_once('{errcode}')"""
    )
    try:

        @client.task(dict, kind="quick")
        async def quick(job):
            return None

        job = await client.insert({}, kind="quick")
        await client.start([("default", 1)], **FAST_WORKER)
        row = await wait_for_state(conn, job.id, "completed")
        assert await conn.fetchval("SELECT last_value FROM test_fault_fired") >= 1
        assert (row["attempt"], row["crashes"], row["errors"]) == (1, 0, None)
    finally:
        await client.shutdown()
        await conn.execute(
            f"DROP TRIGGER test_fail_{statement} ON awa.jobs; DROP SEQUENCE test_fault_fired"
        )


async def test_shutdown_says_how_many_outcomes_it_could_not_write(restricted, conn, caplog):
    role, url = restricted
    gate = asyncio.Event()
    started: set[int] = set()
    async with awa.AsyncClient(url) as client:

        @client.task(dict, kind="work")
        async def work(job):
            started.add(job.id)
            await gate.wait()

        await client.start([("default", 3)], **{**FAST_WORKER, "final_write_timeout": 1.0})
        ids = [job.id for job in await client.insert_many([{}] * 3, kind="work")]
        await eventually(_async(lambda: started >= set(ids)))
        async with revoked(conn, role):
            gate.set()
            with caplog.at_level(logging.WARNING, logger="awa"):
                await client.shutdown(timeout=5)
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        re.search(r"could not write 3 outcomes .*InsufficientPrivilege", message)
        for message in messages
    ), messages
    # They were not lost silently: their jobs are still running, to be rescued.
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND state = 'running'", ids
        )
        == 3
    )


async def test_a_service_that_cannot_recover_makes_the_worker_unhealthy(restricted, conn):
    role, url = restricted
    async with awa.AsyncClient(url) as client:

        @client.task(dict, kind="work")
        async def work(job):
            return None

        await client.start([("default", 3)], **{**FAST_WORKER, "unhealthy_after": 1.0})
        worker = client.worker
        assert worker is not None and worker.healthy
        async with revoked(conn, role):
            await terminate_backends(conn)
            await eventually(_async(lambda: not worker.healthy), timeout=30)
            assert worker.unhealthy_reason
            # It stops leading, and stops proving it is alive: its claims get rescued.
            await eventually(_async(lambda: not worker.leader.is_leader))
            beats = worker.heartbeat.beats
            await asyncio.sleep(0.5)
            assert worker.heartbeat.beats == beats


async def test_a_worker_whose_start_up_reads_are_refused_starts_and_stops_cleanly(
    restricted, conn, caplog
):
    # The start-up lines read the schema version after the services run: a
    # refusal there once failed start() and left them running, so closing
    # the client waited for ever on the connection the notifier held.
    role, url = restricted
    client = awa.AsyncClient(url)

    @client.task(dict, kind="noted", queue="noted")
    async def noted(job):
        return None

    await (await client._database()).require_schema()
    await conn.execute(f'REVOKE ALL ON awa.schema_migrations FROM "{role.name}"')
    try:
        await client.start([("noted", 1)], **FAST_WORKER)
        assert "could not read where it is connected (InsufficientPrivilegeError" in caplog.text
        job = await client.insert({"n": 1}, kind="noted")
        await wait_for_state(conn, job.id, "completed")
    finally:
        await conn.execute(f'GRANT ALL ON awa.schema_migrations TO "{role.name}"')
        await asyncio.wait_for(client.close(), 30)
