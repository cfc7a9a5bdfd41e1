"""Crash accounting with real worker processes that die mid-attempt.

A job whose handler kills its worker is claimed by a subprocess
(``tests/acceptance/crash_worker.py``) that dies with it; the test
process runs a worker serving another queue, so it never claims the job
but, as maintenance leader, rescues it. Crashes are counted in
``crashes`` apart from failures: the job goes back to ``retryable`` after
a backoff of ``2^crashes`` seconds (plus up to 25 % jitter) while the
crash budget lasts (``max_crashes=N`` tolerates N crashes) and fails with
``crash_loop`` at crash N + 1; ``max_crashes=None`` never fails for
crashes.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import awa
from awa import events
from tests.acceptance.test_hooks import Recorder
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state

ROOT = Path(__file__).resolve().parents[2]
KIND = "kills_its_worker"
QUEUE = "crashing"
WAIT = 30.0

pytestmark = pytest.mark.slow


async def start_maintenance(client: awa.AsyncClient, recorder: Recorder) -> None:
    """Starts the test process's worker on another queue and waits until it
    leads maintenance (it is the only live worker, so it must)."""
    client.on_event_kind(KIND, recorder)
    client.task(dict, kind="idle", queue="elsewhere")(lambda job: None)
    await client.start([("elsewhere", 1)], **FAST_WORKER)

    async def leading() -> bool:
        worker = client.worker
        return worker is not None and worker.leader.is_leader

    await eventually(leading, timeout=WAIT)


async def spawn(database_url: str, mode: str, runs: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.acceptance.crash_worker",
        database_url,
        QUEUE,
        KIND,
        mode,
        str(runs),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
    )


async def reap(processes: list[asyncio.subprocess.Process]) -> None:
    """Kills whatever is still running, and waits for every process."""
    for process in processes:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def stop_gracefully(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), WAIT)


async def rescues(recorder: Recorder, count: int) -> list[Any]:
    """Waits until ``count`` Rescued events arrived; returns them all."""

    async def enough() -> list[Any] | None:
        found = recorder.of(events.Rescued)
        return found if len(found) >= count else None

    return await eventually(enough, timeout=WAIT)


def handler_runs(runs: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in runs.read_text(encoding="utf-8").splitlines()]


def backoff_s(job: awa.Job[Any]) -> float:
    """The delay a rescue gave the job: the rescue statement stamps the
    error entry with ``now()`` and sets ``run_at = now() + delay``."""
    rescued_at = datetime.datetime.fromisoformat(job.errors[-1]["at"])
    return (job.run_at - rescued_at).total_seconds()


@pytest.mark.parametrize("max_crashes", [0, 1, 2])
async def test_a_job_that_kills_its_worker_every_time_fails_with_crash_loop(
    client, conn, database_url, tmp_path, max_crashes
):
    recorder = Recorder()
    await start_maintenance(client, recorder)
    job = await client.insert({}, kind=KIND, queue=QUEUE, max_attempts=25, max_crashes=max_crashes)
    runs = tmp_path / "runs.jsonl"
    # max_crashes=N tolerates N crashes; crash N + 1 spends the budget.
    crashes = max_crashes + 1
    processes: list[asyncio.subprocess.Process] = []
    try:
        for crash in range(1, crashes + 1):
            # Each victim waits for the job to be available again (after the
            # previous rescue's backoff), claims it and dies in its handler.
            victim = await spawn(database_url, "always", runs)
            processes.append(victim)
            assert await asyncio.wait_for(victim.wait(), WAIT) == -signal.SIGKILL
            await rescues(recorder, crash)
        row = await wait_for_state(conn, job.id, "failed", timeout=WAIT)
    finally:
        await reap(processes)

    # Crashes were counted apart from failures; every claim was one attempt.
    assert row["crashes"] == crashes
    assert row["attempt"] == crashes
    assert row["max_crashes"] == max_crashes
    assert row["finalized_at"] is not None and row["worker_id"] is None
    entries = json.loads(row["errors"])
    assert [entry["type"] for entry in entries] == ["WorkerCrash"] * crashes
    assert [entry["attempt"] for entry in entries] == list(range(1, crashes + 1))
    assert [entry["outcome"] for entry in entries] == ["retryable"] * max_crashes + ["failed"]
    assert all("crash_loop" not in entry["message"] for entry in entries[:-1])
    assert entries[-1]["message"].startswith("crash_loop"), entries[-1]
    assert f"max_crashes is {max_crashes}" in entries[-1]["message"]

    # Each attempt ran in its own process, which saw the crashes so far.
    seen = handler_runs(runs)
    assert [run["attempt"] for run in seen] == list(range(1, crashes + 1))
    assert [run["crashes"] for run in seen] == list(range(crashes))
    assert len({run["pid"] for run in seen}) == crashes
    assert {run["pid"] for run in seen} == {process.pid for process in processes}

    # One Rescued event per crash, from the maintenance leader in this process.
    rescued = recorder.of(events.Rescued)
    assert len(rescued) == crashes
    assert {type(event) for event in recorder.events} == {events.Rescued}
    for number, event in enumerate(rescued, start=1):
        assert event.reason is awa.RescueReason.StaleHeartbeat
        assert event.job.id == job.id
        assert event.args == {}
        assert event.job.crashes == number
        assert event.job.attempt == number
    for number, event in enumerate(rescued[:-1], start=1):
        assert event.job.state is awa.JobState.Retryable
        # The backoff follows the crash count: 2^crashes s plus up to 25 %.
        assert 2**number - 1e-3 <= backoff_s(event.job) <= 1.25 * 2**number + 1e-3
    assert rescued[-1].job.state is awa.JobState.Failed
    assert rescued[-1].job.errors[-1]["message"].startswith("crash_loop")


async def test_an_unbounded_job_that_crashes_once_then_succeeds_completes(
    client, conn, database_url, tmp_path
):
    recorder = Recorder()
    await start_maintenance(client, recorder)
    job = await client.insert({}, kind=KIND, queue=QUEUE, max_crashes=None)
    runs = tmp_path / "runs.jsonl"
    processes: list[asyncio.subprocess.Process] = []
    try:
        victim = await spawn(database_url, "once", runs)
        processes.append(victim)
        assert await asyncio.wait_for(victim.wait(), WAIT) == -signal.SIGKILL
        [rescued] = await rescues(recorder, 1)
        survivor = await spawn(database_url, "once", runs)
        processes.append(survivor)
        row = await wait_for_state(conn, job.id, "completed", timeout=WAIT)
        assert await stop_gracefully(survivor) == 0
    finally:
        await reap(processes)

    assert row["crashes"] == 1
    assert row["attempt"] == 2
    assert row["max_crashes"] is None
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "WorkerCrash"
    assert entry["outcome"] == "retryable"
    assert entry["attempt"] == 1
    assert "crash_loop" not in entry["message"]

    seen = handler_runs(runs)
    assert [(run["pid"], run["attempt"], run["crashes"]) for run in seen] == [
        (victim.pid, 1, 0),
        (survivor.pid, 2, 1),
    ]

    assert rescued.reason is awa.RescueReason.StaleHeartbeat
    assert rescued.job.state is awa.JobState.Retryable
    assert rescued.job.crashes == 1 and rescued.job.max_crashes is None
    assert 2 - 1e-3 <= backoff_s(rescued.job) <= 2.5 + 1e-3
    assert len(recorder.of(events.Rescued)) == 1


async def test_a_crash_does_not_spend_the_failure_budget(client, conn, database_url, tmp_path):
    """max_attempts=2 bounds handler failures only: after one crash the
    handler still gets two failing attempts (three claims in all)."""
    recorder = Recorder()
    await start_maintenance(client, recorder)
    job = await client.insert({}, kind=KIND, queue=QUEUE, max_attempts=2, max_crashes=None)
    runs = tmp_path / "runs.jsonl"
    processes: list[asyncio.subprocess.Process] = []
    try:
        victim = await spawn(database_url, "once-then-raise", runs)
        processes.append(victim)
        assert await asyncio.wait_for(victim.wait(), WAIT) == -signal.SIGKILL
        await rescues(recorder, 1)
        survivor = await spawn(database_url, "once-then-raise", runs)
        processes.append(survivor)
        row = await wait_for_state(conn, job.id, "failed", timeout=WAIT)
        assert await stop_gracefully(survivor) == 0
    finally:
        await reap(processes)

    assert (row["attempt"], row["crashes"]) == (3, 1)
    entries = json.loads(row["errors"])
    assert [(entry["type"], entry["outcome"]) for entry in entries] == [
        ("WorkerCrash", "retryable"),
        ("ValueError", "retryable"),
        ("ValueError", "failed"),
    ]
    assert all("crash_loop" not in entry["message"] for entry in entries)
    seen = handler_runs(runs)
    assert [(run["pid"], run["attempt"], run["crashes"]) for run in seen] == [
        (victim.pid, 1, 0),
        (survivor.pid, 2, 1),
        (survivor.pid, 3, 1),
    ]
    assert len(recorder.of(events.Rescued)) == 1


async def test_a_killed_worker_whose_attempt_was_past_its_deadline_is_rescued_as_timed_out(
    client, conn, database_url, tmp_path
):
    """The victim's handler ignores the cancellation its 0.3 s timeout brings
    and runs on; the victim is then killed. Its attempt was past its deadline
    before its heartbeats stopped, so maintenance rescues it as timed out
    (a failed attempt), not as a crash."""
    recorder = Recorder()
    client.on_event_kind(KIND, recorder)
    client.task(dict, kind="idle", queue="elsewhere")(lambda job: None)
    # Heartbeats count as stale after 3 s, and an attempt deadline gets the
    # same 3 s of grace.
    await client.start([("elsewhere", 1)], **{**FAST_WORKER, "heartbeat_staleness": 3.0})
    job = await client.insert({}, kind=KIND, queue=QUEUE, max_attempts=3)
    runs = tmp_path / "runs.jsonl"
    ignored = runs.with_name(runs.name + ".ignored")
    victim = await spawn(database_url, "stubborn", runs)
    try:
        await eventually(lambda: _exists(ignored), timeout=WAIT)  # past its deadline, running on
        # It keeps heartbeating (hung, not dead) until a heartbeat a second
        # past its attempt's deadline, then dies: its heartbeats go stale a
        # second after the deadline's grace ends.
        await eventually(lambda: _heartbeat_past_deadline(conn, job.id), timeout=WAIT)
        victim.kill()
        await victim.wait()
        [rescued] = await recorder.wait_for(events.Rescued)
    finally:
        await reap([victim])
    assert rescued.reason is events.RescueReason.DeadlineExceeded
    row = await job_row(conn, job.id)
    assert row["state"] == "retryable" and row["crashes"] == 0
    entry = json.loads(row["errors"])[-1]
    assert entry["type"] == "AttemptTimeout" and entry["attempt"] == 1


async def _exists(path: Path) -> bool:
    return path.exists()  # noqa: ASYNC240 - a marker file, checked while polling


async def _heartbeat_past_deadline(conn, job_id: int) -> bool:
    return await conn.fetchval(
        "SELECT w.heartbeat_at > j.attempt_deadline_at + interval '1 second' "
        "FROM awa.jobs AS j JOIN awa.workers AS w ON w.id = j.worker_id WHERE j.id = $1",
        job_id,
    )
