"""``awa worker --processes N``: children that share the work, stop together
on SIGTERM, and take the parent down loudly when one of them dies."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg

from tests.processes import (
    APP_KIND,
    APP_QUEUE,
    APP_SLOTS,
    ROOT,
    finish_cli,
    kill_if_running,
    write_recording_app,
)
from tests.support import eventually


async def start_parent(directory: Path, processes: int = 2) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "worker", "--app", "procs_app:client",
        "--queue", f"{APP_QUEUE}={APP_SLOTS}", "--processes", str(processes),
        "--shutdown-timeout", "10",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{ROOT}"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def registered_workers(conn: asyncpg.Connection, count: int) -> list[asyncpg.Record]:
    """Waits until ``count`` workers are registered; returns their rows."""

    async def rows() -> list[asyncpg.Record]:
        found = await conn.fetch("SELECT id, pid FROM awa.workers ORDER BY id")
        return found if len(found) == count else []

    return await eventually(rows, timeout=30)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_two_processes_share_the_jobs_and_run_each_exactly_once(
    client, ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path)
    try:
        workers = await registered_workers(ledger, 2)
        await client.insert_many([{"sleep": 0.02}] * 200, kind=APP_KIND, queue=APP_QUEUE)

        async def completed() -> bool:
            return await ledger.fetchval("SELECT count(*) FROM test_completions") >= 200

        await eventually(completed, timeout=60)
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    runs = await ledger.fetch("SELECT job_id, worker FROM test_runs")
    assert len(runs) == 200
    assert len({run["job_id"] for run in runs}) == 200  # none ran twice
    assert await ledger.fetchval("SELECT count(DISTINCT job_id) FROM test_completions") == 200
    assert await ledger.fetchval("SELECT count(*) FROM test_completions") == 200
    assert len({worker["id"] for worker in workers}) == 2
    assert {int(run["worker"]) for run in runs} == {worker["pid"] for worker in workers}
    assert process.pid not in {worker["pid"] for worker in workers}
    # --queue is each process's own capacity.
    assert err.count(f"queues {APP_QUEUE}={APP_SLOTS}; at most {APP_SLOTS} jobs at once") == 2


async def test_sigterm_to_the_parent_stops_every_child_gracefully(
    client, ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path)
    try:
        workers = await registered_workers(ledger, 2)
        await client.insert_many([{"sleep": 0.5}] * 40, kind=APP_KIND, queue=APP_QUEUE)

        async def both_running() -> bool:
            pids = await ledger.fetchval("SELECT count(DISTINCT worker) FROM test_runs")
            return pids == 2

        await eventually(both_running, timeout=30)
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert err.count("stopping: running jobs get 10s to finish") == 2
    states = dict(await ledger.fetch("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1"))
    assert "running" not in states, states
    assert states.get("completed", 0) >= 2
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0
    assert all(gone(worker["pid"]) for worker in workers)


async def test_a_child_that_dies_makes_the_parent_exit_non_zero_and_name_it(
    ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path)
    try:
        victim, survivor = await registered_workers(ledger, 2)
        os.kill(victim["pid"], signal.SIGKILL)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 1, err
    assert f"(pid {victim['pid']}) was killed by SIGKILL" in err
    assert "before it was asked to stop; stopping the others" in err
    # The survivor was stopped gracefully: it removed its own row.
    remaining = await ledger.fetch("SELECT id FROM awa.workers")
    assert [row["id"] for row in remaining] == [victim["id"]]
    assert gone(survivor["pid"])


async def test_sigterm_while_the_children_start_still_stops_cleanly(ledger, tmp_path, database_url):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, processes=3)
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        assert b"started 3 worker processes" in line, line
        process.send_signal(signal.SIGTERM)  # the children are still importing, or just serving
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0
