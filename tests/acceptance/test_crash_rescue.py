"""Crash rescue: a worker killed with SIGKILL loses nothing, and a job that
kills its worker every time ends failed with crash_loop."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from tests.processes import spawn_worker, stop_worker
from tests.support import eventually, states, wait_for_state

JOBS = 400


@pytest.mark.slow
async def test_sigkill_mid_batch_loses_no_job_and_no_stale_attempt_completes(
    client, ledger, database_url
):
    await client.enqueue_many_copy([{"n": i} for i in range(JOBS)], kind="crashy")
    victim = await spawn_worker(database_url, "victim")
    survivor = await spawn_worker(database_url, "survivor")
    try:
        # Kill the victim while it holds claimed, unfinished jobs.
        async def victim_is_busy() -> bool:
            return (
                await ledger.fetchval("SELECT count(*) FROM test_runs WHERE worker = 'victim'")
                >= 20
            )

        await eventually(victim_is_busy)
        victim.kill()
        await victim.wait()
        held = await ledger.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE state = 'running' AND worker_id NOT IN "
            "(SELECT id FROM awa.workers WHERE pid = $1)",
            survivor.pid,
        )

        async def all_completed() -> bool:
            return (await states(ledger)).get("completed", 0) == JOBS

        await eventually(all_completed, timeout=60)
    finally:
        await stop_worker(survivor)

    assert await states(ledger) == {"completed": JOBS}
    # Exactly one completion was applied per job, by the attempt that owned it.
    per_job = await ledger.fetch(
        """SELECT jobs.id, jobs.run_lease, count(c.job_id) AS completions,
                  max(c.run_lease) AS completed_lease
           FROM awa.jobs LEFT JOIN test_completions c ON c.job_id = jobs.id
           GROUP BY jobs.id"""
    )
    assert all(row["completions"] == 1 for row in per_job)
    assert all(row["completed_lease"] == row["run_lease"] for row in per_job)
    # Jobs the victim held were rescued: a crash counted, not a failure.
    rescued = await ledger.fetch(
        "SELECT id, crashes, attempt, errors FROM awa.jobs WHERE crashes > 0"
    )
    assert held > 0
    assert len(rescued) >= 1
    for row in rescued:
        assert [entry["type"] for entry in json.loads(row["errors"])] == ["WorkerCrash"]
        assert row["attempt"] == 2
    # Every victim run that a later lease superseded belongs to a rescued job
    # (a claimed job whose handler had not started yet left no run at all).
    superseded = await ledger.fetch(
        """SELECT r.job_id FROM test_runs r JOIN awa.jobs j ON j.id = r.job_id
           WHERE r.worker = 'victim' AND r.run_lease < j.run_lease"""
    )
    assert {row["job_id"] for row in superseded} <= {row["id"] for row in rescued}


@pytest.mark.slow
async def test_a_job_that_kills_its_worker_every_time_fails_with_crash_loop(
    client, ledger, database_url
):
    job = await client.insert({}, kind="crashy", max_crashes=1)
    # The observer serves another queue: it only takes part in maintenance,
    # so it is the one left to rescue after each crash.
    observer = await spawn_worker(database_url, "observer", queue="elsewhere")
    try:
        for attempt in (1, 2):
            victim = await spawn_worker(database_url, f"victim-{attempt}", mode="crash")
            assert await asyncio.wait_for(victim.wait(), 30) == -signal.SIGKILL
            if attempt == 1:
                await wait_for_state(ledger, job.id, "retryable", timeout=30)
                # Skip the crash backoff instead of waiting for it.
                await ledger.execute("UPDATE awa.jobs SET run_at = now() WHERE id = $1", job.id)
        row = await wait_for_state(ledger, job.id, "failed", timeout=30)
    finally:
        await stop_worker(observer)
    assert (row["crashes"], row["attempt"]) == (2, 2)
    entries = json.loads(row["errors"])
    assert [entry["type"] for entry in entries] == ["WorkerCrash", "WorkerCrash"]
    assert [entry["outcome"] for entry in entries] == ["retryable", "failed"]
    assert "crash_loop" in entries[-1]["message"]
    runs = await ledger.fetchval("SELECT count(*) FROM test_runs WHERE job_id = $1", job.id)
    assert runs == 2
