"""Scale-out: drain throughput of ``awa worker --processes P --queue q=S``
for several P × S, with the CPU each job costs Postgres and the workers.

Usage (from the repository root, awa installed in .venv)::

    .venv/bin/python benches/scale/processes.py --database-url postgresql://postgres@host/postgres
    .venv/bin/python benches/scale/processes.py --jobs 3000 --configs 1x50,4x13   # a quick try

For each configuration (default ``1x50,2x50,4x50,4x13``: processes × slots
per process), in a fresh database on the given server (a superuser URL: it
creates and drops ``awa_scale_*`` databases and runs ``CHECKPOINT``):

1. ``--jobs`` no-op jobs (default 60 000) are enqueued with COPY, the table
   analyzed and checkpointed (``benches/peers/drivers/common.py``'s
   ``Monitor``, as the peer drain does);
2. a connection takes ``LOCK TABLE awa.jobs IN EXCLUSIVE MODE`` and the
   fleet starts (``python -m awa worker --app benches.soak.app:client
   --queue soak=S --processes P``: the soak's no-op app, which takes
   ``--worker-settings`` through ``AWA_SOAK_WORKER``). Every claimer
   blocks on the lock, so no process starts early: the gate opens once all
   P workers are registered and each one's claim is waiting;
3. CPU is read (utime + stime from ``/proc/<pid>/stat``: the postgres
   backends of the database, as the peer bench reads them, and the parent
   and child worker processes), the gate commits, and the clock runs until
   every job is completed; then CPU is read again and the fleet stopped
   with SIGTERM.

Reported per configuration: jobs/s; Postgres and worker CPU ms per job;
the box limit they imply, ``--cores`` (default: this machine's) ÷ their sum,
in jobs/s; commits per job (``pg_stat_database``, the whole database, the
measuring connection's polls included); and from the workers' stop lines,
jobs per claim statement and outcomes per write. A JSON result goes to
``--output`` (default ``benches/scale/results/processes-<time>.json``).

On a machine the bench shares with Postgres, the workers and Postgres take
CPU from each other: read the throughput next to the box limit, and run it
on a quiet machine for figures worth quoting.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import asyncpg

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches" / "peers" / "drivers"))
import common  # noqa: E402, I001 - the peer drivers' measuring helpers


#: The soak's no-op app (benches/soak/app.py), which the fleet runs.
APP, QUEUE, KIND = "benches.soak.app:client", "soak", "soak_tick"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 120.0
COMPLETED_SQL = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
#: Claimers waiting on the gate: their statement is jobs_claim (it alone
#: calls awa.claim_v1).
WAITING_CLAIMS_SQL = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'
      AND query LIKE '%awa.claim_v%'"""
COMMITS_SQL = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
STOP_LINE = re.compile(
    r"stopped: (\d+) jobs run in (\d+) claims, (\d+) outcomes written in (\d+) writes"
)


@dataclass(frozen=True)
class Config:
    processes: int
    slots: int

    @property
    def label(self) -> str:
        return f"{self.processes}x{self.slots}"


def configs(text: str) -> list[Config]:
    """``1x50,4x13`` as configurations."""
    found = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*[x×]\s*(\d+)\s*", part)
        if match is None or 0 in (int(match[1]), int(match[2])):
            raise argparse.ArgumentTypeError(f"not PROCESSESxSLOTS: {part!r} (try 4x13)")
        found.append(Config(int(match[1]), int(match[2])))
    return found


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("AWA_BENCH_ADMIN_URL"),
        help="a superuser URL of the server (default: AWA_BENCH_ADMIN_URL)",
    )
    parser.add_argument("--jobs", type=int, default=60_000, help="no-op jobs per configuration")
    parser.add_argument(
        "--configs",
        type=configs,
        default=configs("1x50,2x50,4x50,4x13"),
        help="processes x slots, comma-separated",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs of each configuration")
    parser.add_argument(
        "--cores",
        type=float,
        default=float(os.cpu_count() or 1),
        help="cores of the box, for the limit (default: this machine's)",
    )
    parser.add_argument(
        "--worker-settings",
        type=json.loads,
        default={},
        metavar="JSON",
        help="worker settings for every process, e.g. '{\"claim_batch_size\": 13}'",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up a drain after this")
    parser.add_argument("--output", type=Path, help="the JSON result")
    opts = parser.parse_args(argv)
    if not opts.database_url:
        parser.error("give --database-url (a superuser URL) or set AWA_BENCH_ADMIN_URL")
    if opts.output is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        opts.output = ROOT / "benches" / "scale" / "results" / f"processes-{stamp}.json"
    return opts


# ── the fleet ────────────────────────────────────────────────────────────


class Fleet:
    """One ``awa worker --processes P`` command; what ``Monitor.wait_completed`` polls."""

    completed_sql = COMPLETED_SQL

    def __init__(self, process: asyncio.subprocess.Process, log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    @classmethod
    async def start(
        cls, url: str, config: Config, settings: dict[str, Any], log_path: Path
    ) -> Fleet:
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "AWA_SOAK_DATABASE_URL": url,
            "AWA_SOAK_WORKER": json.dumps(settings),
        }
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "awa", "worker", "--app", APP,
                "--queue", f"{QUEUE}={config.slots}", "--processes", str(config.processes),
                cwd=ROOT, env=environment,
                stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            )  # fmt: skip
        return cls(process, log_path)

    def check_worker(self) -> None:
        if self.process.returncode is not None:
            raise RuntimeError(
                f"the workers exited ({self.process.returncode}); see {self.log_path}"
            )

    async def wait_ready(self, monitor: asyncpg.Connection, config: Config) -> list[int]:
        """Waits until every worker is registered and its claim waits on the
        gate; returns the children's pids."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self.check_worker()
            pids = [row["pid"] for row in await monitor.fetch("SELECT pid FROM awa.workers")]
            waiting = await monitor.fetchval(WAITING_CLAIMS_SQL)
            if len(pids) == config.processes and waiting >= config.processes:
                return pids
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(pids)} of {config.processes} workers registered and {waiting} "
                    f"claims waiting after {READY_TIMEOUT_S:.0f}s; see {self.log_path}"
                )
            await asyncio.sleep(0.05)

    async def stop(self) -> int | None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            return None

    def claims_and_writes(self) -> dict[str, float | None]:
        """Jobs per claim statement and outcomes per write, from the
        children's stop lines."""
        totals = [0, 0, 0, 0]
        for match in STOP_LINE.finditer(self.log_path.read_text(errors="replace")):
            totals = [
                total + int(value) for total, value in zip(totals, match.groups(), strict=True)
            ]
        jobs, claims, outcomes, writes = totals
        return {
            "jobs_per_claim": round(jobs / claims, 2) if claims else None,
            "outcomes_per_write": round(outcomes / writes, 2) if writes else None,
        }


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of these processes (all their threads), in clock ticks."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


# ── one measurement ──────────────────────────────────────────────────────


async def measure(
    server_url: str, config: Config, opts: argparse.Namespace, log_dir: Path
) -> dict[str, Any]:
    name = scratch_name("awa_scale")
    await create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        return await _measure(url, config, opts, log_dir / f"{config.label}-{name}.log")
    finally:
        await drop_database(server_url, name)


async def _measure(
    url: str, config: Config, opts: argparse.Namespace, log_path: Path
) -> dict[str, Any]:
    async with awa.AsyncClient(url) as client:
        await client.migrate()
        await client.enqueue_many_copy([{}] * opts.jobs, kind=KIND, queue=QUEUE)
    monitor = await common.Monitor.connect(url)
    gate = await asyncpg.connect(url)
    fleet: Fleet | None = None
    try:
        await monitor.analyze_and_checkpoint()
        await asyncio.sleep(common.STATS_FLUSH_S)
        await gate.execute("BEGIN; LOCK TABLE awa.jobs IN EXCLUSIVE MODE")
        fleet = await Fleet.start(url, config, opts.worker_settings, log_path)
        # With --processes 1 the command itself is the worker: count it once.
        pids = list(
            dict.fromkeys([fleet.process.pid, *await fleet.wait_ready(monitor.conn, config)])
        )
        commits_before = await monitor.conn.fetchval(COMMITS_SQL)
        pg_before, workers_before = monitor.postgres_cpu(), cpu_ticks(pids)
        started = time.perf_counter()
        await gate.execute("COMMIT")
        finished = await monitor.wait_completed(fleet, opts.jobs, opts.timeout)
        pg_after, workers_after = monitor.postgres_cpu(), cpu_ticks(pids)
        exit_code = await fleet.stop()
        await monitor.wait_other_backends_gone(timeout_s=30)
        await asyncio.sleep(common.STATS_FLUSH_S)
        commits = await monitor.conn.fetchval(COMMITS_SQL) - commits_before
    finally:
        if fleet is not None:
            await fleet.stop()
        await gate.close()
        await monitor.close()
    seconds = finished - started
    pg_ms = common.cpu_ms_between(pg_before, pg_after) / opts.jobs
    worker_ms = (workers_after - workers_before) * 1000.0 / common.CLOCK_TICKS_PER_S / opts.jobs
    return {
        "config": config.label,
        **asdict(config),
        "jobs": opts.jobs,
        "worker_settings": opts.worker_settings,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(opts.jobs / seconds, 1),
        "pg_cpu_ms_per_job": round(pg_ms, 4),
        "worker_cpu_ms_per_job": round(worker_ms, 4),
        "box_limit_jobs_per_s": round(opts.cores * 1000.0 / (pg_ms + worker_ms), 1),
        "commits_per_job": round(commits / opts.jobs, 3),
        **fleet.claims_and_writes(),
        "exit_code": exit_code,
    }


# ── the run ──────────────────────────────────────────────────────────────


def median_by_config(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration: the run with the median throughput."""
    rows = []
    for label in dict.fromkeys(result["config"] for result in results):
        runs = sorted((r for r in results if r["config"] == label), key=lambda r: r["jobs_per_s"])
        rows.append(runs[len(runs) // 2])
    return rows


def table(rows: list[dict[str, Any]], cores: float) -> list[str]:
    first = rows[0]["jobs_per_s"]
    lines = [
        f"| processes × slots | jobs/s | vs {rows[0]['config']} | PG CPU ms/job | "
        f"worker CPU ms/job | box limit ({cores:g} cores ÷ sum), jobs/s | commits/job | "
        "jobs/claim | outcomes/write |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['config']} | {row['jobs_per_s']:.0f} | {row['jobs_per_s'] / first:.2f}× | "
            f"{row['pg_cpu_ms_per_job']:.3f} | {row['worker_cpu_ms_per_job']:.3f} | "
            f"{row['box_limit_jobs_per_s']:.0f} | {row['commits_per_job']:.3f} | "
            f"{row['jobs_per_claim']} | {row['outcomes_per_write']} |"
        )
    return lines


async def run(opts: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    results = []
    for run_number in range(opts.runs):
        for config in opts.configs:  # interleaved, so drift hits every configuration
            result = await measure(opts.database_url, config, opts, log_dir)
            result["run"] = run_number + 1
            print(json.dumps(result), flush=True)
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="awa-scale-"))
    results = asyncio.run(run(opts, log_dir))
    rows = median_by_config(results)
    report = {
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "options": {
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(opts).items()
            if k not in {"configs", "database_url"}
        },
        "configs": [config.label for config in opts.configs],
        "medians": rows,
        "runs": results,
    }
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    opts.output.write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(table(rows, opts.cores)))
    print(f"result: {opts.output}; worker logs: {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
