#!/usr/bin/env python3
"""Side-by-side benchmark of awa-queue against its peers and a plain-SQL floor.

Each system runs from its own virtualenv through one driver script
(drivers/<system>.py) that performs one measurement in a fresh database and prints
one JSON object. This script creates the databases and virtualenvs, runs every
measurement --runs times (interleaving the systems), takes medians, prints one
markdown table and writes results/<timestamp>.json.

    python3 benches/peers/run.py --quick            # smoke test, about a minute
    python3 benches/peers/run.py                    # full run (3 runs, medians)
    python3 benches/peers/run.py --only pgqueuer,floor,drain50

Only the standard library is needed here; database administration goes through psql.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"
VENVS = HERE / ".venvs"
RESULTS = HERE / "results"
DEFAULT_AWA_PYTHON = "/work/main/.venv/bin/python"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

# Column order of the table. The first is ours, the second the floor, the rest are peers.
SYSTEMS = [
    "awa_queue",
    "awa_queue_baseline",
    "awa_queue_reference",
    "awa_queue_uvloop",
    "awa_queue_follow_up",
    "awa_queue_noop_hook",
    "awa_queue_slow_hook",
    "awa_queue_flow",
    "awa_queue_metrics",
    "floor",
    "awa_pg",
    "pgqueuer",
    "procrastinate",
]
# Run with the awa interpreter (--awa-python) rather than a venv of their own.
AWA_SYSTEMS = {
    "awa_queue",
    "awa_queue_baseline",
    "awa_queue_reference",
    "awa_queue_uvloop",
    "awa_queue_follow_up",
    "awa_queue_noop_hook",
    "awa_queue_slow_hook",
    "awa_queue_flow",
    "awa_queue_metrics",
}
PEERS = ["awa_pg", "pgqueuer", "procrastinate"]
# awa-queue as an earlier commit built it (--baseline-python), driven by the
# same driver: a change's cost, measured in the same run as the change.
BASELINE = "awa_queue_baseline"
# A fixed older awa-queue (--reference-python), the same in every run: a
# loss spread over several changes, each within the noise of "÷ baseline",
# shows against it.
REFERENCE = "awa_queue_reference"
# Both run awa-queue's driver on an interpreter of their own, named by
# --<name>-python, and add a column "awa-queue ÷ <name>".
OLDER_TREES = {BASELINE: "baseline", REFERENCE: "reference"}
LABELS = {
    "awa_queue": "awa-queue",
    "awa_queue_baseline": "awa-queue (baseline)",
    "awa_queue_reference": "awa-queue (reference)",
    "awa_queue_uvloop": "awa-queue (uvloop)",
    "awa_queue_follow_up": "awa-queue + 1 follow-up spec",
    "awa_queue_noop_hook": "awa-queue + no-op hook",
    "awa_queue_slow_hook": "awa-queue + 50 ms hook",
    "awa_queue_flow": "awa-queue + aging + fairness + rate class",
    "awa_queue_metrics": "awa-queue + metrics exported",
    "floor": "SQL floor",
    "awa_pg": "awa-pg 0.6.9",
    "pgqueuer": "pgqueuer 1.6.0",
    "procrastinate": "procrastinate 3.10.0",
}
# How to check that an interpreter can run a system's driver.
IMPORT_CHECKS = {
    "awa_queue": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_baseline": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_reference": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_uvloop": "import asyncpg, awa, uvloop; awa.AsyncClient",
    "awa_queue_follow_up": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_noop_hook": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_slow_hook": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_flow": "import asyncpg, awa; awa.AsyncClient",
    "awa_queue_metrics": "import asyncpg, awa, prometheus_client; awa.AsyncClient",
    "floor": "import asyncpg",
    "awa_pg": "import asyncpg, awa; awa.AsyncClient",
    "pgqueuer": "import asyncpg, uvloop, pgqueuer",
    "procrastinate": "import asyncpg, procrastinate, psycopg",
}


@dataclass
class Workload:
    name: str
    args: list[str]  # driver command-line arguments
    only_for: list[str] | None = None  # None: every system


def workloads(quick: bool, timeout_s: int) -> list[Workload]:
    bulk_n, drain_n, sleep_n, pickups = (2000, 2000, 500, 30) if quick else (20000, 20000, 5000, 200)
    drain = ["--workload", "drain", "--timeout", str(timeout_s)]
    return [
        Workload("bulk", ["--workload", "bulk", "--n", str(bulk_n)]),
        Workload("bulk_unnest", ["--workload", "bulk_unnest", "--n", str(bulk_n)], only_for=["awa_queue", *OLDER_TREES]),
        Workload("drain10", drain + ["--n", str(drain_n), "--concurrency", "10"]),
        Workload("drain50", drain + ["--n", str(drain_n), "--concurrency", "50"]),
        Workload("sleep100", drain + ["--n", str(sleep_n), "--concurrency", "100", "--mode", "sleep"]),
        Workload("pickup", ["--workload", "pickup", "--count", str(pickups), "--interval-ms", "20"]),
    ]


def table_rows(quick: bool) -> list[tuple[str, str, str, str]]:
    """(label, workload, result key, which way is better)."""
    n = "2 000" if quick else "20 000"
    sleep_n = "500" if quick else "5 000"
    return [
        (f"bulk enqueue {n} (jobs/s)", "bulk", "jobs_per_s", "higher"),
        (f"bulk enqueue {n}, awa `insert_many` unnest (jobs/s)", "bulk_unnest", "jobs_per_s", "higher"),
        (f"drain {n} no-op, c=10 (jobs/s)", "drain10", "jobs_per_s", "higher"),
        (f"drain {n} no-op, c=50 (jobs/s)", "drain50", "jobs_per_s", "higher"),
        (f"{sleep_n} × sleep 10 ms, c=100 (jobs/s, ideal 10 000)", "sleep100", "jobs_per_s", "higher"),
        ("pickup p50, idle queue (ms)", "pickup", "p50_ms", "lower"),
        ("pickup p95 (ms)", "pickup", "p95_ms", "lower"),
        ("pickup p99 (ms)", "pickup", "p99_ms", "lower"),
        ("WAL bytes / job (c=50 drain)", "drain50", "wal_bytes_per_job", "lower"),
        ("dead tuples / job (c=50 drain)", "drain50", "dead_tuples_per_job", "lower"),
        ("Postgres CPU ms / job (c=50 drain)", "drain50", "pg_cpu_ms_per_job", "lower"),
        ("worker CPU ms / job (c=50 drain)", "drain50", "worker_cpu_ms_per_job", "lower"),
    ]


# ---------------------------------------------------------------- PostgreSQL


def psql(admin_url: str, sql: str) -> str:
    result = subprocess.run(
        ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", admin_url, "-c", sql],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"psql failed: {sql}\n{result.stderr.strip()}")
    return result.stdout.strip()


def database_url(admin_url: str, dbname: str) -> str:
    parts = urllib.parse.urlparse(admin_url)
    return urllib.parse.urlunparse(parts._replace(path="/" + dbname))


def create_database(admin_url: str, dbname: str) -> None:
    psql(admin_url, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    psql(admin_url, f'CREATE DATABASE "{dbname}"')


def drop_database(admin_url: str, dbname: str) -> None:
    psql(admin_url, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def server_facts(admin_url: str) -> dict:
    return {
        setting: psql(admin_url, f"SHOW {setting}")
        for setting in ("server_version", "fsync", "synchronous_commit", "max_connections")
    }


# ---------------------------------------------------------------- interpreters


def ensure_venv(system: str) -> Path:
    """Create .venvs/<system> from requirements-<system>.txt if it is missing or stale."""
    venv = VENVS / system
    python = venv / "bin" / "python"
    requirements = HERE / f"requirements-{system}.txt"
    marker = venv / ".installed-requirements"
    wanted = requirements.read_text()
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    log(f"setting up {venv.relative_to(HERE)} from {requirements.name} ...")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    marker.write_text(wanted)
    return python


def find_interpreter(
    system: str, awa_python: str, baseline_python: str | None, reference_python: str | None = None
) -> tuple[str | None, str]:
    """Return (python, "") if the system can run here, else (None, why not)."""
    if system in OLDER_TREES:
        older = {BASELINE: baseline_python, REFERENCE: reference_python}[system]
        if not older:
            return None, f"no --{OLDER_TREES[system]}-python given"
        awa_python = older
    try:
        python = shutil.which(awa_python) if system in AWA_SYSTEMS else str(ensure_venv(system))
    except (subprocess.CalledProcessError, OSError) as exc:
        return None, f"could not create its virtualenv: {exc}"
    if python is None:
        return None, f"no interpreter at {awa_python}"
    # Drivers run from another directory, so a relative path (make passes
    # .venv/bin/python) must be made absolute; not resolved, or the venv is lost.
    python = os.path.abspath(python)
    check = subprocess.run(
        [python, "-c", IMPORT_CHECKS[system]], capture_output=True, text=True, env=clean_env()
    )
    if check.returncode != 0:
        return None, f"{python} cannot import it: {last_lines(check.stderr, 1)}"
    return python, ""


def clean_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


# ---------------------------------------------------------------- measuring


@dataclass
class Cell:
    """All runs of one workload on one system."""

    runs: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def median(self, key: str) -> float | None:
        values = [run[key] for run in self.runs if key in run]
        return statistics.median(values) if values else None


def last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_driver(python: str, system: str, url: str, workload: Workload, timeout_s: int) -> dict:
    driver = "awa_queue" if system in OLDER_TREES else system
    command = [python, str(DRIVERS / f"{driver}.py"), "--url", url, *workload.args]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, cwd=DRIVERS, env=clean_env()
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise RuntimeError(f"driver timed out after {timeout_s}s\n{last_lines(stderr, 15)}")
    json_lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not json_lines:
        raise RuntimeError(f"driver exited {result.returncode}\n{last_lines(result.stderr, 15)}")
    return json.loads(json_lines[-1])


def summary(result: dict) -> str:
    if "jobs_per_s" in result:
        return f"{result['jobs_per_s']:.0f} jobs/s in {result['seconds']:.2f} s"
    return f"p50 {result['p50_ms']:.2f} / p95 {result['p95_ms']:.2f} / p99 {result['p99_ms']:.2f} ms"


class Bench:
    def __init__(self, opts: argparse.Namespace, interpreters: dict[str, str]) -> None:
        self.opts = opts
        self.interpreters = interpreters
        self.cells: dict[tuple[str, str], Cell] = {}
        self.database_counter = 0

    def measure(self, system: str, workload: Workload, run: int) -> None:
        self.database_counter += 1
        dbname = f"awa_bench_{system}_{self.database_counter}"
        cell = self.cells.setdefault((system, workload.name), Cell())
        create_database(self.opts.admin_url, dbname)
        try:
            result = run_driver(
                self.interpreters[system],
                system,
                database_url(self.opts.admin_url, dbname),
                workload,
                self.opts.driver_timeout,
            )
            cell.runs.append(result)
            log(f"  [run {run}] {workload.name:<11} {LABELS[system]:<21} {summary(result)}")
        except RuntimeError as exc:
            cell.errors.append(str(exc))
            log(f"  [run {run}] {workload.name:<11} {LABELS[system]:<21} FAILED: {exc}")
        finally:
            drop_database(self.opts.admin_url, dbname)


# ---------------------------------------------------------------- the table


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}".replace(",", " ")
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(ours: float | None, other: float | None) -> str:
    if ours is None or other is None or other == 0:
        return "—"
    return f"{ours / other:.2f}×"


def render_table(bench: Bench, systems: list[str], workload_names: list[str], skipped: dict[str, str], quick: bool) -> str:
    """One markdown table: a row per measurement, a column per selected system, then ratios."""
    show_ratios = "awa_queue" in systems
    compared = [s for s in OLDER_TREES if show_ratios and s in bench.interpreters]
    header = ["workload", *(LABELS[s] for s in systems)]
    if show_ratios:
        header += ["awa-queue ÷ best peer", "awa-queue ÷ floor"]
    header += [f"awa-queue ÷ {OLDER_TREES[s]}" for s in compared]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, workload, key, better in table_rows(quick):
        if workload not in workload_names:
            continue
        values: dict[str, float] = {}
        cells = []
        for system in systems:
            cell = bench.cells.get((system, workload))
            if system in skipped:
                cells.append("n/a")
            elif cell is None:
                cells.append("—")  # not applicable to this system
            elif cell.median(key) is None:
                cells.append("failed")
            else:
                values[system] = cell.median(key)
                cells.append(fmt(values[system]))
        direction = "↑" if better == "higher" else "↓"
        row = [f"{label} {direction}", *cells]
        if show_ratios:
            peer_values = [values[s] for s in PEERS if s in values]
            best_peer = (max if better == "higher" else min)(peer_values) if peer_values else None
            ours = values.get("awa_queue")
            row += [ratio(ours, best_peer), ratio(ours, values.get("floor"))]
        row += [ratio(values.get("awa_queue"), values.get(s)) for s in compared]
        lines.append("| " + " | ".join(row) + " |")
    notes = [
        "",
        "↑ higher is better, ↓ lower is better: a ratio above 1 is good on ↑ rows and bad on ↓ rows.",
        "Best peer = the best of awa-pg, pgqueuer and procrastinate on that row.",
        "`n/a` = system not available here, `failed` = every run failed, `—` = not applicable.",
    ]
    for system, reason in skipped.items():
        notes.append(f"- {LABELS[system]} not available: {reason}")
    return "\n".join(lines + notes)


# ---------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--awa-python", default=DEFAULT_AWA_PYTHON, help="interpreter with awa-queue installed")
    parser.add_argument(
        "--baseline-python",
        default=os.environ.get("AWA_BASELINE_PYTHON"),
        help="interpreter with an earlier awa-queue installed, measured as awa-queue (baseline)",
    )
    parser.add_argument(
        "--reference-python",
        default=os.environ.get("AWA_REFERENCE_PYTHON"),
        help="interpreter with a fixed older awa-queue (the same in every run), measured as "
        "awa-queue (reference)",
    )
    parser.add_argument("--admin-url", default=os.environ.get("AWA_BENCH_ADMIN_URL", DEFAULT_ADMIN_URL))
    parser.add_argument("--runs", type=int, default=None, help="repeats per measurement (default 3, --quick 1)")
    parser.add_argument("--only", default="", help="comma-separated systems and/or workloads to run")
    parser.add_argument("--quick", action="store_true", help="small N and 1 run, for smoke tests")
    parser.add_argument("--driver-timeout", type=int, default=900, help="seconds before a driver is killed")
    parser.add_argument("--out", default=None, help="results file (default results/<timestamp>.json)")
    opts = parser.parse_args()
    if opts.runs is None:
        opts.runs = 1 if opts.quick else 3
    return opts


def select(only: str, all_workloads: list[Workload]) -> tuple[list[str], list[Workload]]:
    tokens = [t.strip().replace("-", "_") for t in only.split(",") if t.strip()]
    workload_names = [w.name for w in all_workloads]
    unknown = [t for t in tokens if t not in SYSTEMS and t not in workload_names]
    if unknown:
        sys.exit(f"--only: unknown {unknown}; systems: {SYSTEMS}; workloads: {workload_names}")
    systems = [s for s in SYSTEMS if s in tokens] or list(SYSTEMS)
    chosen = [w for w in all_workloads if w.name in tokens] or list(all_workloads)
    return systems, chosen


def main() -> None:
    opts = parse_args()
    if shutil.which("psql") is None:
        sys.exit("psql is needed (it creates and drops the benchmark databases)")
    all_workloads = workloads(opts.quick, timeout_s=max(60, opts.driver_timeout - 60))
    systems, chosen = select(opts.only, all_workloads)
    started = dt.datetime.now()

    interpreters: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for system in systems:
        python, reason = find_interpreter(
            system, opts.awa_python, opts.baseline_python, opts.reference_python
        )
        if python:
            interpreters[system] = python
        else:
            skipped[system] = reason
            log(f"{LABELS[system]}: not available ({reason})")

    bench = Bench(opts, interpreters)
    log(f"systems: {', '.join(interpreters)}; workloads: {', '.join(w.name for w in chosen)}; runs: {opts.runs}")
    for run in range(1, opts.runs + 1):
        for workload in chosen:
            for system in systems:
                if system in interpreters and (workload.only_for is None or system in workload.only_for):
                    bench.measure(system, workload, run)

    table = render_table(bench, systems, [w.name for w in chosen], skipped, opts.quick)
    print(table)
    write_results(opts, bench, skipped, table, started)


def write_results(opts, bench: Bench, skipped: dict[str, str], table: str, started: dt.datetime) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = Path(opts.out) if opts.out else RESULTS / f"{started:%Y%m%d-%H%M%S}.json"
    measurements: dict = {}
    for (system, workload), cell in bench.cells.items():
        keys = sorted({k for run in cell.runs for k, v in run.items() if isinstance(v, (int, float))})
        measurements.setdefault(system, {})[workload] = {
            "median": {k: cell.median(k) for k in keys},
            "runs": cell.runs,
            "errors": cell.errors,
        }
    document = {
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now().isoformat(timespec="seconds"),
        "quick": opts.quick,
        "runs": opts.runs,
        "host": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "postgres": server_facts(opts.admin_url),
        "interpreters": bench.interpreters,
        "not_available": skipped,
        "measurements": measurements,
        "table_markdown": table,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    log(f"results written to {path}")


if __name__ == "__main__":
    main()
