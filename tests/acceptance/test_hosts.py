"""Workers on hosts of their own (a network namespace and a hostname each,
tests/hosts.py) against one PostgreSQL: they share a queue's jobs and run
each exactly once, and a host cut off from the network has its jobs rescued
by the other."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from asyncio.subprocess import Process
from pathlib import Path

import asyncpg
import pytest

from tests.hosts import Host, hosts, unavailable
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

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")


async def start_on(host: Host, directory: Path, server_url: str) -> Process:
    """``awa worker`` on ``host``, its app connecting through the host's gateway."""
    write_recording_app(directory, await host.database_url(server_url))
    argv = [
        sys.executable, "-m", "awa", "worker", "--app", "procs_app:client",
        "--queue", f"{APP_QUEUE}={APP_SLOTS}", "--shutdown-timeout", "10",
    ]  # fmt: skip
    return await asyncio.create_subprocess_exec(
        *host.command(argv),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{ROOT}"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def workers_by_host(conn: asyncpg.Connection, count: int) -> dict[str, int]:
    """Waits until ``count`` workers are registered; their pids by hostname."""

    async def rows() -> dict[str, int]:
        found = await conn.fetch("SELECT hostname, pid FROM awa.workers")
        return {row["hostname"]: row["pid"] for row in found} if len(found) == count else {}

    return await eventually(rows, timeout=30)


async def completed(ledger: asyncpg.Connection, count: int) -> None:
    async def enough() -> bool:
        return await ledger.fetchval("SELECT count(*) FROM test_completions") >= count

    await eventually(enough, timeout=60)


async def start_workers(hosts_: list[Host], tmp_path: Path, server_url: str) -> list[Process]:
    processes = []
    for host in hosts_:
        directory = tmp_path / host.name
        directory.mkdir()
        processes.append(await start_on(host, directory, server_url))
    return processes


async def stop_workers(processes: list[Process]) -> list[tuple[int, str]]:
    """SIGTERM to each; their exit statuses and stderr."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    return [await finish_cli(process) for process in processes]


async def test_workers_on_two_hosts_share_the_jobs_and_run_each_exactly_once(
    client, ledger, tmp_path, database_url
):
    async with hosts("awa-host-a", "awa-host-b") as pair:
        processes = await start_workers(pair, tmp_path, database_url)
        try:
            pids = await workers_by_host(ledger, 2)
            await client.insert_many([{"sleep": 0.02}] * 200, kind=APP_KIND, queue=APP_QUEUE)
            await completed(ledger, 200)
            outcomes = await stop_workers(processes)
        finally:
            for process in processes:
                await kill_if_running(process)
    assert [code for code, _err in outcomes] == [0, 0], outcomes
    assert set(pids) == {"awa-host-a", "awa-host-b"}
    for (_code, err), host in zip(outcomes, pair, strict=True):
        assert f"started on {host.name} pid {pids[host.name]}," in err, err
    runs = await ledger.fetch("SELECT job_id, worker FROM test_runs")
    assert len(runs) == 200
    assert len({run["job_id"] for run in runs}) == 200  # none ran twice
    assert {int(run["worker"]) for run in runs} == set(pids.values())  # both hosts worked
    assert await ledger.fetchval("SELECT count(*) FROM test_completions") == 200
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_a_host_cut_off_has_its_jobs_rescued_by_the_other_and_each_completes_once(
    client, ledger, tmp_path, database_url
):
    async with hosts("awa-host-a", "awa-host-b") as pair:
        cut = pair[0]
        processes = await start_workers(pair, tmp_path, database_url)
        try:
            pids = await workers_by_host(ledger, 2)
            jobs = await client.insert_many([{"sleep": 0.5}] * 40, kind=APP_KIND, queue=APP_QUEUE)

            async def cut_host_runs_jobs() -> bool:
                return bool(
                    await ledger.fetchval(
                        "SELECT count(*) FROM test_runs WHERE worker = $1", str(pids[cut.name])
                    )
                )

            await eventually(cut_host_runs_jobs, timeout=30)
            held = await ledger.fetchval(
                "SELECT count(*) FROM awa.jobs AS j JOIN awa.workers AS w ON w.id = j.worker_id "
                "WHERE j.state = 'running' AND w.hostname = $1",
                cut.name,
            )
            await asyncio.to_thread(cut.unplug)
            await completed(ledger, len(jobs))
            await asyncio.to_thread(cut.plug)
            outcomes = await stop_workers(processes)
        finally:
            for process in processes:
                await kill_if_running(process)
    assert held > 0
    completions = await ledger.fetch("SELECT job_id FROM test_completions")
    assert sorted(row["job_id"] for row in completions) == sorted(job.id for job in jobs)
    states = dict(await ledger.fetch("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1"))
    assert states == {"completed": len(jobs)}, states
    rerun = await ledger.fetchval(
        "SELECT count(*) FROM (SELECT job_id FROM test_runs GROUP BY job_id "
        "HAVING count(DISTINCT worker) = 2) AS twice"
    )
    assert rerun > 0  # the cut host's jobs ran again on the other
    # Back on the network, the cut worker stops as cleanly as the other.
    assert [code for code, _err in outcomes] == [0, 0], outcomes
    assert await ledger.fetchval("SELECT count(*) FROM awa.workers") == 0
