"""Liveness that does not hang on the event loop: a worker whose loop a
handler blocks keeps its jobs (and logs who blocked it), a process that
truly hangs loses them, and a leader that cannot act hands maintenance over.

The workers under test are real processes (tests/acceptance/worker_process.py);
an observer worker in this process, serving another queue, takes part in
maintenance only.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

import awa
from tests.processes import spawn_worker, stop_worker
from tests.support import FAST_WORKER, eventually, wait_for_state

#: Leadership lapses quickly here, so a takeover is seen within a test.
QUICK_LEASE = {"leader_lease": 1.0}


@pytest.fixture
async def observer(database_url, ledger):
    """A worker of this process serving only queue ``elsewhere``."""
    async with awa.AsyncClient(database_url) as client:

        @client.task(dict, kind="note")
        async def note(job):
            return None

        await client.start([("elsewhere", 2)], **{**FAST_WORKER, **QUICK_LEASE})
        yield client


async def _runs(ledger, job_id: int) -> int:
    return int(await ledger.fetchval("SELECT count(*) FROM test_runs WHERE job_id = $1", job_id))


@pytest.mark.slow
async def test_a_loop_blocked_past_the_staleness_keeps_its_jobs_and_names_the_handler(
    database_url, ledger, observer
):
    blocker = await spawn_worker(
        database_url, "blocker", mode="block:2.5", settings=QUICK_LEASE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        job = await observer.insert({}, kind="crashy")
        # Blocked 2.5 s against a staleness of 1 s: rescued, were liveness on the loop.
        await wait_for_state(ledger, job.id, "completed", timeout=30)
    finally:
        await stop_worker(blocker)
    assert blocker.stderr is not None
    logged = (await blocker.stderr.read()).decode()
    assert await _runs(ledger, job.id) == 1
    row = await ledger.fetchrow("SELECT attempt, crashes FROM awa.jobs WHERE id = $1", job.id)
    assert (row["attempt"], row["crashes"]) == (1, 0)
    assert "blocked" in logged and "crashy" in logged, logged


@pytest.mark.slow
async def test_a_process_that_truly_hangs_loses_its_jobs(database_url, ledger, observer):
    sleeper = await spawn_worker(database_url, "sleeper", mode="sleep:60", settings=QUICK_LEASE)
    try:
        job = await observer.insert({}, kind="crashy")
        await eventually(lambda: _runs(ledger, job.id))
        sleeper.send_signal(signal.SIGSTOP)
        row = await wait_for_state(ledger, job.id, "retryable", timeout=30)
    finally:
        sleeper.kill()
        await sleeper.wait()
    assert row["crashes"] == 1


@pytest.mark.slow
async def test_a_loop_blocked_past_its_limit_counts_as_hung(database_url, ledger, observer):
    blocker = await spawn_worker(
        database_url, "blocker", mode="block:60", settings={**QUICK_LEASE, "max_loop_block": 1.5}
    )
    try:
        job = await observer.insert({}, kind="crashy")
        row = await wait_for_state(ledger, job.id, "retryable", timeout=30)
    finally:
        blocker.kill()
        await blocker.wait()
    assert row["crashes"] == 1


async def _has_leader(ledger) -> bool:
    advisory = await ledger.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    )
    leased = await ledger.fetchval("SELECT count(*) FROM awa.leaders WHERE expires_at > now()")
    return bool(advisory or leased)


@pytest.mark.slow
async def test_a_leader_whose_loop_is_blocked_hands_maintenance_over(database_url, ledger):
    blocker = await spawn_worker(database_url, "leader", mode="block:8", settings=QUICK_LEASE)
    try:
        await eventually(lambda: _has_leader(ledger))
        async with awa.AsyncClient(database_url) as observer:

            @observer.task(dict, kind="note")
            async def note(job):
                return None

            await observer.start([("elsewhere", 2)], **{**FAST_WORKER, **QUICK_LEASE})
            blocking = await observer.insert({}, kind="crashy")
            await eventually(lambda: _runs(ledger, blocking.id))
            # Due work only a maintenance leader can promote.
            due = await ledger.fetchval(
                """INSERT INTO awa.jobs (kind, queue, args, state, run_at)
                   VALUES ('note', 'elsewhere', '{}', 'scheduled',
                           now() + interval '100 milliseconds')
                   RETURNING id"""
            )
            await wait_for_state(ledger, due, "completed", timeout=30)
            ended = await ledger.fetchval("SELECT count(*) FROM test_blocks_ended")
            await observer.shutdown()
    finally:
        await stop_worker(blocker)
    assert ended == 0, "maintenance waited for the blocked leader"
