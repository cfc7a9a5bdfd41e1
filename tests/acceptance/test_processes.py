"""``awa worker --processes N``: children that share the work, stop together
on SIGTERM, and are supervised: one that dies or wedges is restarted after a
backoff, one that keeps dying at start stops them all with status 1, and a
usage error with status 2."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.faults import ReplyCutter
from tests.integration.test_cli_json import VALIDATOR
from tests.processes import (
    APP_KIND,
    APP_QUEUE,
    APP_SLOTS,
    DIE_AT_START_ENV,
    ROOT,
    finish_cli,
    kill_if_running,
    write_recording_app,
)
from tests.support import at_once, eventually

#: The supervisor's timings for these tests (AWA_SUPERVISOR_TIMINGS,
#: docs/cli.md): quick restarts and a quick judgement of the children's
#: heartbeats (the recording app's children beat every 0.1 s).
QUICK_SUPERVISOR = (
    "backoff_initial_s=0.2,backoff_max_s=0.5,health_interval_s=0.2,staleness_s=2,"
    "wedged_after_s=3,start_timeout_s=30"
)


async def start_parent(
    directory: Path,
    processes: int = 2,
    *,
    timings: str = QUICK_SUPERVISOR,
    env: dict[str, str] | None = None,
    as_json: bool = False,
    extra: tuple[str, ...] = (),
) -> asyncio.subprocess.Process:
    # This tree's awa first, whichever tree the virtualenv was installed from.
    path = os.pathsep.join([str(ROOT / "python"), str(directory), str(ROOT)])
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", *(["--json"] if as_json else []),
        "worker", "--app", "procs_app:client",
        "--queue", f"{APP_QUEUE}={APP_SLOTS}", "--processes", str(processes),
        "--shutdown-timeout", "10", *extra,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path, "AWA_SUPERVISOR_TIMINGS": timings, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def finish_with_envelope(process: asyncio.subprocess.Process) -> tuple[int, str, Any]:
    """The parent's exit status, stderr and the one envelope it printed
    (checked against the schema): the children print none of their own."""
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    [line] = out.decode().splitlines()
    envelope = json.loads(line)
    VALIDATOR.validate(envelope)
    return process.returncode, err.decode(), envelope


async def read_stderr_until(process: asyncio.subprocess.Process, text: str) -> str:
    """The parent's stderr up to the first line holding ``text`` (at most 30 s)."""
    assert process.stderr is not None
    seen = []
    while True:
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        assert line, f"stderr ended before {text!r}: {''.join(seen)}"
        seen.append(line)
        if text in line:
            return "".join(seen)


async def replacement(
    conn: asyncpg.Connection, original: list[asyncpg.Record], dead_pid: int
) -> asyncpg.Record:
    """Waits until as many workers as ``original`` are registered again, the
    one of ``dead_pid`` no longer, a new one in its place; returns the new
    one's row."""
    known = {row["pid"] for row in original}

    async def new_row() -> asyncpg.Record | None:
        rows = await conn.fetch("SELECT id, pid FROM awa.workers ORDER BY id")
        fresh = [row for row in rows if row["pid"] not in known]
        pids = {row["pid"] for row in rows}
        if len(rows) == len(original) and dead_pid not in pids and len(fresh) == 1:
            return fresh[0]
        return None

    return await eventually(new_row, timeout=30)


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


async def test_a_child_killed_with_jobs_running_is_restarted_and_every_job_completes_once(
    client, ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, as_json=True)
    try:
        workers = await registered_workers(ledger, 2)
        victim, survivor = workers
        await client.insert_many([{"sleep": 1.5}] * 16, kind=APP_KIND, queue=APP_QUEUE)

        async def victim_runs_a_job() -> bool:
            # A handler of the victim started (it recorded its run) and has not finished.
            return bool(
                await ledger.fetchval(
                    """SELECT count(*) FROM awa.jobs JOIN test_runs
                         ON test_runs.job_id = jobs.id AND test_runs.run_lease = jobs.run_lease
                       WHERE jobs.state = 'running' AND jobs.worker_id = $1""",
                    victim["id"],
                )
            )

        await eventually(victim_runs_a_job, timeout=30)
        os.kill(victim["pid"], signal.SIGKILL)
        new = await replacement(ledger, workers, victim["pid"])

        async def completed() -> bool:
            return await ledger.fetchval("SELECT count(*) FROM test_completions") >= 16

        await eventually(completed, timeout=60)
        process.send_signal(signal.SIGTERM)
        code, err, envelope = await finish_with_envelope(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert f"(pid {victim['pid']}) was killed by SIGKILL before it was asked to stop" in err
    assert "restarting it in" in err
    # Each job completed exactly once; those the victim was running when it
    # died were rescued and run again, by another process, under a new lease.
    completions = await ledger.fetch("SELECT job_id, run_lease FROM test_completions")
    assert len(completions) == 16 == len({row["job_id"] for row in completions})
    runs = await ledger.fetch("SELECT job_id, run_lease, worker FROM test_runs ORDER BY run_lease")
    by_run = {(run["job_id"], run["run_lease"]): int(run["worker"]) for run in runs}
    completed_by = {row["job_id"]: by_run[row["job_id"], row["run_lease"]] for row in completions}
    run_twice = {job_id for job_id, count in Counter(run["job_id"] for run in runs).items()
                 if count > 1}  # fmt: skip
    assert run_twice, "the victim held a running job when it died"
    for job_id in run_twice:
        first, *_ = [run for run in runs if run["job_id"] == job_id]
        assert int(first["worker"]) == victim["pid"]
        assert completed_by[job_id] != victim["pid"]
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0
    assert all(gone(pid) for pid in (victim["pid"], survivor["pid"], new["pid"]))
    children = envelope["data"]["children"]
    assert [child["slot"] for child in children] == [1, 2]
    assert sorted(child["restarts"] for child in children) == [0, 1]
    [restarted] = [child for child in children if child["restarts"] == 1]
    assert restarted["pid"] == new["pid"]
    assert {child["pid"] for child in children} == {survivor["pid"], new["pid"]}
    assert all(child["last_exit"] == "exited with status 0" for child in children)
    assert envelope["data"]["exit_code"] == 0


async def test_four_processes_survive_kill_9_of_a_child_and_sigterm_stops_them_all(
    ledger, tmp_path, database_url
):
    """The acceptance line: `awa worker --processes 4` survives kill -9 of a
    child (restarted), and SIGTERM stops all children gracefully."""
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, processes=4)
    try:
        workers = await registered_workers(ledger, 4)
        victim = workers[1]
        os.kill(victim["pid"], signal.SIGKILL)
        new = await replacement(ledger, workers, victim["pid"])
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert f"restarted as pid {new['pid']}" in err
    assert err.count("stopping: running jobs get 10s to finish") == 4
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0
    assert all(gone(pid) for pid in [*(worker["pid"] for worker in workers), new["pid"]])


@pytest.mark.parametrize("status", ["3", "0"])  # even a clean exit was not asked for
async def test_a_child_that_keeps_dying_at_start_stops_the_parent_with_status_1_naming_it(
    ledger, tmp_path, database_url, status
):
    write_recording_app(tmp_path, database_url)
    timings = f"{QUICK_SUPERVISOR},backoff_initial_s=0.05,backoff_max_s=0.1,crash_loop_limit=3"
    process = await start_parent(tmp_path, timings=timings, env={DIE_AT_START_ENV: status})
    try:
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 1, err
    assert "failed 3 times in a row without becoming healthy" in err, err
    assert f"exited with status {status}" in err
    assert "restarting it in" in err
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_a_child_that_exits_with_a_usage_error_is_not_restarted_and_the_parent_exits_2(
    ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, env={DIE_AT_START_ENV: "2"})
    try:
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 2, err
    assert "exited with status 2 (a usage error)" in err, err
    assert "restarting it in" not in err


async def test_a_stopped_child_is_killed_as_wedged_and_restarted(ledger, tmp_path, database_url):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path)
    victim = None
    try:
        workers = await registered_workers(ledger, 2)
        victim = workers[0]
        os.kill(victim["pid"], signal.SIGSTOP)  # alive, but silent: wedged
        new = await replacement(ledger, workers, victim["pid"])
        await eventually(lambda: at_once(gone(victim["pid"])), timeout=30)
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        if victim is not None and not gone(victim["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim["pid"], signal.SIGCONT)
                os.kill(victim["pid"], signal.SIGKILL)
        await kill_if_running(process)
    assert code == 0, err
    assert f"(pid {victim['pid']}) is wedged" in err, err
    assert f"restarted as pid {new['pid']}" in err
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_sigterm_during_a_restart_backoff_stops_at_once_and_starts_nothing(
    ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    timings = f"{QUICK_SUPERVISOR},backoff_initial_s=120,backoff_max_s=120"
    process = await start_parent(tmp_path, timings=timings)
    try:
        workers = await registered_workers(ledger, 2)
        os.kill(workers[0]["pid"], signal.SIGKILL)
        await read_stderr_until(process, "restarting it in")
        process.send_signal(signal.SIGTERM)
        # Bounded well below the backoff: the wait is cut short, nothing starts.
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert "restarted as pid" not in err
    assert await ledger.fetchval("SELECT pid FROM awa.workers") in (None, workers[0]["pid"])
    assert gone(workers[1]["pid"])


async def test_while_the_database_does_not_answer_no_child_is_judged_or_killed(
    ledger, tmp_path, database_url
):
    cutter = ReplyCutter(database_url)
    write_recording_app(tmp_path, await cutter.start())
    # Once the database answers again, the children get wedged_after_s to
    # beat again (their heartbeats reconnect first): a generous one here,
    # as the suite's load can slow a reconnect by seconds.
    timings = f"{QUICK_SUPERVISOR},staleness_s=1,wedged_after_s=15"
    process = await start_parent(tmp_path, timings=timings)
    try:
        workers = await registered_workers(ledger, 2)
        await read_stderr_until(process, "is healthy")
        await read_stderr_until(process, "is healthy")
        # Five times the staleness: judged, both children would be found
        # unhealthy; nobody can beat (or read the beats).
        await cutter.cut(drop_after_s=5)

        async def both_beat_again() -> bool:
            rows = await ledger.fetch(
                "SELECT pid FROM awa.workers WHERE heartbeat_at > now() - interval '1 second'"
            )
            return {row["pid"] for row in rows} == {worker["pid"] for worker in workers}

        await eventually(both_beat_again, timeout=30)
        judged = await read_stderr_until(process, "the database answers again")
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
        await cutter.close()
    assert code == 0, err
    assert "cannot read the worker processes' heartbeats" in judged, judged
    # No child was killed or restarted by the parent. (The children's own
    # services may log that they restart while the database is cut off.)
    said = judged + err
    for verdict in ("is wedged", "restarted as pid", "before it was asked to stop"):
        assert verdict not in said, said
    # Nor judged at all while the database did not answer.
    assert "is unhealthy" not in judged, judged
    assert all(gone(worker["pid"]) for worker in workers)


async def test_a_bad_supervisor_timing_is_a_usage_error_before_any_child_starts(
    ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, timings="crash_loop_limit=0")
    try:
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 2, err
    assert "AWA_SUPERVISOR_TIMINGS: crash_loop_limit must be a whole number above 0" in err
    assert "started" not in err


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


def two_free_ports() -> int:
    """A port P such that P and P+1 are free now (on 127.0.0.1)."""
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535:
            with socket.socket() as first, socket.socket() as second:
                try:
                    first.bind(("127.0.0.1", port))
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return int(port)
    raise AssertionError("no two free ports in a row")


async def test_with_a_metrics_port_each_child_serves_its_own(ledger, tmp_path, database_url):
    from tests.integration.test_metrics import get_json

    write_recording_app(tmp_path, database_url)
    port = two_free_ports()
    process = await start_parent(
        tmp_path, extra=("--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    )
    try:
        workers = await registered_workers(ledger, 2)

        async def both_ready() -> set[int] | None:
            ids = set()
            for child_port in (port, port + 1):
                status, body = await get_json(f"http://127.0.0.1:{child_port}/readyz")
                if status != 200:
                    return None
                ids.add(body["worker_id"])
            return ids

        served = await eventually(both_ready, timeout=30)
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert served == {worker["id"] for worker in workers}


async def test_one_worker_process_prints_one_envelope_the_schema_accepts(
    ledger, tmp_path, database_url
):
    write_recording_app(tmp_path, database_url)
    process = await start_parent(tmp_path, processes=1, as_json=True)
    try:
        await registered_workers(ledger, 1)
        process.send_signal(signal.SIGTERM)
        code, err, envelope = await finish_with_envelope(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err
    assert envelope["command"] == "worker" and envelope["ok"] is True
    assert envelope["data"] == {"healthy": True, "reason": None}
