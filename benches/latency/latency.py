#!/usr/bin/env python3
"""Latency under load: insert commit to handler start, at a steady offered rate.

For each offered rate of the sweep, in a fresh database:

1. a **worker process** (``AsyncClient.start([(queue, C)])``, one event loop)
   whose no-op handler records when it started each job;
2. once that worker runs, a **producer process** offers ``rate`` jobs/s for
   ``--duration`` seconds: every ``--tick-ms`` it inserts the jobs that are
   due by then as one batch (``enqueue_many_copy``, or ``insert_many`` with
   ``--insert unnest``) and records when the call returned, i.e. when the
   batch's transaction had committed;
3. after the producer's last batch, the worker gets ``--grace`` seconds to
   start the rest, then shuts down and hands its records over.

A job's latency is its handler's start minus its batch's commit, both read
from ``CLOCK_MONOTONIC``, which all processes on one Linux machine share.
Every job of the run counts, the first second included. Reported per rate:
p50 / p90 / p99 / max latency, the rate the producer achieved (jobs ÷ time
to its last commit), the rate the worker started jobs at (jobs started ÷ time
to the last start, both from the producer's start), and how many jobs never
started. A rate is *kept up* when the producer reached 95 % of it, the worker
started jobs at 95 % of it, and every job started before the grace ran out.
The sweep stops after the first rate that is not kept up (that rate is the
curve's last point; ``--all-rates`` goes on). Each point also has a
per-second timeline (p50 and p99 of the jobs committed in that second), which
tells a worker falling behind (latency climbing) from a pause (one spike).

    .venv/bin/python benches/latency/latency.py                          # 60 s per rate
    .venv/bin/python benches/latency/latency.py --duration 5             # smoke
    .venv/bin/python benches/latency/latency.py --rates 5000 --duration 60

Results go to ``benches/latency/results/latency-<time>.json``;
``plot.py`` draws the curve from that file (``make bench-latency`` does both).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_RATES = [1000, 2500, 5000, 7500, 10000, 12500, 15000, 20000, 25000, 30000]
KIND = "latency_probe"
QUEUE = "latency"
WARMUP_I = -1  # the producer's first job, before the clock starts: opens its connection
KEPT_UP_FRACTION = 0.95
POLL_INTERVAL_S = 0.25
TARGET_RATE = 5000  # the target: p99 ≤ 10 ms at 5 000 jobs/s
TARGET_P99_MS = 10.0


def now_ns() -> int:
    """The clock both the producer and the worker read (shared across processes)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# ---------------------------------------------------------------- worker process


async def run_worker(opts: argparse.Namespace) -> dict[str, list[int]]:
    """Works the queue until a line arrives on stdin; returns when each job started."""
    starts_i: list[int] = []
    starts_ns: list[int] = []
    client = awa.AsyncClient(opts.url)

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def probe(job: awa.Job[dict[str, Any]]) -> None:
        starts_ns.append(now_ns())
        starts_i.append(job.args["i"])

    await client.migrate()
    await client.start([(QUEUE, opts.concurrency)])
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await client.shutdown(timeout=30.0)
    await client.close()
    return {"i": starts_i, "t_ns": starts_ns}


# ---------------------------------------------------------------- producer process


async def run_producer(opts: argparse.Namespace) -> dict[str, Any]:
    """Offers ``rate`` jobs/s for ``duration`` s in batches, one per tick; returns
    when each batch committed."""
    client = awa.AsyncClient(opts.url)
    insert = insert_function(client, opts.insert)
    await insert([{"i": WARMUP_I}])
    total = int(opts.rate * opts.duration)
    tick_s = opts.tick_ms / 1000.0
    batches: list[tuple[int, int, int]] = []  # (first i, end i, commit ns)
    behind_max_s = 0.0
    sent = 0
    started_ns = now_ns()
    tick = 0
    while sent < total:
        tick += 1
        wake_s = started_ns / 1e9 + tick * tick_s
        delay = wake_s - now_ns() / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            behind_max_s = max(behind_max_s, -delay)
        due = min(total, int((now_ns() - started_ns) / 1e9 * opts.rate))
        if due <= sent:
            continue
        await insert([{"i": i} for i in range(sent, due)])
        batches.append((sent, due, now_ns()))
        sent = due
    await client.close()
    return {"started_ns": started_ns, "batches": batches, "behind_max_s": behind_max_s}


def insert_function(client: awa.AsyncClient, how: str) -> Any:
    async def copy(jobs: list[dict[str, int]]) -> None:
        await client.enqueue_many_copy(jobs, kind=KIND, queue=QUEUE)

    async def unnest(jobs: list[dict[str, int]]) -> None:
        await client.insert_many(jobs, kind=KIND, queue=QUEUE)

    return copy if how == "copy" else unnest


# ---------------------------------------------------------------- one offered rate


async def measure_rate(opts: argparse.Namespace, rate: float, workdir: Path) -> dict[str, Any]:
    dbname = scratch_name("awa_latency")
    await create_database(opts.admin_url, dbname)
    url = with_database(opts.admin_url, dbname)
    worker_out, producer_out = workdir / f"worker-{rate}.json", workdir / f"producer-{rate}.json"
    common = [sys.executable, __file__]
    worker = await asyncio.create_subprocess_exec(
        *common, "worker", "--url", url, "--out", str(worker_out),
        "--concurrency", str(opts.concurrency),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert worker.stdout is not None and worker.stdin is not None
        ready = await asyncio.wait_for(worker.stdout.readline(), timeout=60)
        if ready.strip() != b"ready":
            raise RuntimeError(f"the worker did not start (it said {ready!r})")
        producer = await asyncio.create_subprocess_exec(
            *common, "producer", "--url", url, "--out", str(producer_out),
            "--rate", str(rate), "--duration", str(opts.duration),
            "--tick-ms", str(opts.tick_ms), "--insert", opts.insert,
        )  # fmt: skip
        if await producer.wait() != 0:
            raise RuntimeError(f"the producer exited {producer.returncode}")
        total = int(rate * opts.duration) + 1  # the warm-up job too
        await wait_all_completed(url, total, opts.grace)
        worker.stdin.write(b"stop\n")
        await worker.stdin.drain()
        if await asyncio.wait_for(worker.wait(), timeout=90) != 0:
            raise RuntimeError(f"the worker exited {worker.returncode}")
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        await drop_database(opts.admin_url, dbname)
    produced = json.loads(await asyncio.to_thread(producer_out.read_text))
    started = json.loads(await asyncio.to_thread(worker_out.read_text))
    return summarise(rate, opts.duration, produced, started)


async def wait_all_completed(url: str, total: int, grace_s: float) -> None:
    """Returns once ``total`` jobs are completed, or ``grace_s`` has passed."""
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + grace_s
        completed = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
        while time.monotonic() < deadline:
            if await conn.fetchval(completed) >= total:
                return
            await asyncio.sleep(POLL_INTERVAL_S)
    finally:
        await conn.close()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile (as benches/peers/drivers/common.py takes them)."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarise(
    rate: float, duration_s: float, produced: dict[str, Any], started: dict[str, Any]
) -> dict[str, Any]:
    """One point of the curve from the producer's and the worker's records."""
    batches = produced["batches"]
    total = batches[-1][1] if batches else 0
    commit_ns = [0] * total
    for first, end, t_ns in batches:
        commit_ns[first:end] = [t_ns] * (end - first)
    first_start: dict[int, int] = {}
    for i, t_ns in zip(started["i"], started["t_ns"], strict=True):
        if i >= 0:
            first_start.setdefault(i, t_ns)
    by_job_ms = {i: (t - commit_ns[i]) / 1e6 for i, t in first_start.items()}
    latencies_ms = sorted(by_job_ms.values())
    t0, last_commit = produced["started_ns"], batches[-1][2] if batches else produced["started_ns"]
    window_s = max((last_commit - t0) / 1e9, 1e-9)
    # Started ÷ time to the last start: the offered rate while the worker keeps
    # up, its own capacity once a backlog builds and drains after the producer.
    last_start = max(first_start.values(), default=t0)
    handled_s = max((last_start - t0) / 1e9, 1e-9)
    point: dict[str, Any] = {
        "offered_jobs_s": rate,
        "duration_s": duration_s,
        "jobs": total,
        "batches": len(batches),
        "inserted_jobs_s": total / window_s,
        "handled_jobs_s": len(first_start) / handled_s,
        "unstarted": total - len(first_start),
        "handler_starts_per_job": len(started["i"]) / max(total + 1, 1),
        "producer_behind_max_ms": produced["behind_max_s"] * 1000.0,
    }
    if latencies_ms:
        point.update(
            {
                "p50_ms": percentile(latencies_ms, 50),
                "p90_ms": percentile(latencies_ms, 90),
                "p99_ms": percentile(latencies_ms, 99),
                "max_ms": latencies_ms[-1],
                "min_ms": latencies_ms[0],
            }
        )
    point["timeline"] = timeline(batches, by_job_ms, produced["started_ns"])
    point["producer_kept_up"] = point["inserted_jobs_s"] >= KEPT_UP_FRACTION * rate
    point["kept_up"] = (
        point["producer_kept_up"]
        and point["handled_jobs_s"] >= KEPT_UP_FRACTION * rate
        and point["unstarted"] == 0
    )
    return point


def timeline(
    batches: list[list[int]], by_job_ms: dict[int, float], started_ns: int
) -> list[dict[str, Any]]:
    """p50 and p99 latency of the jobs committed in each second of the run: a
    latency that climbs through the run is a worker falling behind, one
    spike a pause (a checkpoint, another process on the machine)."""
    seconds: dict[int, list[float]] = {}
    for first, end, t_ns in batches:
        second = int((t_ns - started_ns) // 1_000_000_000)
        seconds.setdefault(second, []).extend(
            by_job_ms[i] for i in range(first, end) if i in by_job_ms
        )
    rows = []
    for second in sorted(seconds):
        values = sorted(seconds[second])
        if values:
            rows.append(
                {
                    "second": second,
                    "jobs": len(values),
                    "p50_ms": percentile(values, 50),
                    "p99_ms": percentile(values, 99),
                }
            )
    return rows


# ---------------------------------------------------------------- the sweep


async def sweep(opts: argparse.Namespace) -> dict[str, Any]:
    started = dt.datetime.now()
    points = []
    with tempfile.TemporaryDirectory(prefix="awa-latency-") as tmp:
        for rate in opts.rates:
            point = await measure_rate(opts, rate, Path(tmp))
            points.append(point)
            log(describe(point))
            if not point["kept_up"] and not opts.all_rates:
                log(f"stopping the sweep: not kept up at {rate:g} jobs/s")
                break
    return {
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now().isoformat(timespec="seconds"),
        "smoke": opts.duration < 60,
        "options": {
            "duration_s": opts.duration,
            "tick_ms": opts.tick_ms,
            "insert": opts.insert,
            "concurrency": opts.concurrency,
            "grace_s": opts.grace,
        },
        "host": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "postgres": await server_facts(opts.admin_url),
        "target": {"rate_jobs_s": TARGET_RATE, "p99_ms": TARGET_P99_MS, **target_verdict(points)},
        "points": points,
    }


def target_verdict(points: list[dict[str, Any]]) -> dict[str, Any]:
    at_target = [p for p in points if p["offered_jobs_s"] == TARGET_RATE]
    if not at_target:
        return {"measured": False}
    p99 = at_target[0].get("p99_ms")
    met = at_target[0]["kept_up"] and p99 is not None and p99 <= TARGET_P99_MS
    return {"measured": True, "p99_ms_measured": p99, "met": met}


async def server_facts(admin_url: str) -> dict[str, str]:
    conn = await asyncpg.connect(admin_url)
    try:
        names = ("server_version", "fsync", "synchronous_commit", "max_connections")
        return {name: await conn.fetchval(f"SHOW {name}") for name in names}
    finally:
        await conn.close()


def describe(point: dict[str, Any]) -> str:
    latency = (
        f"p50 {point['p50_ms']:.2f} / p90 {point['p90_ms']:.2f} / p99 {point['p99_ms']:.2f} / "
        f"max {point['max_ms']:.1f} ms"
        if "p50_ms" in point
        else "no job started"
    )
    return (
        f"offered {point['offered_jobs_s']:>7g}/s  inserted {point['inserted_jobs_s']:>7.0f}/s  "
        f"handled {point['handled_jobs_s']:>7.0f}/s  {latency}  unstarted {point['unstarted']}"
        f"{'' if point['kept_up'] else '  NOT KEPT UP'}"
    )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    roles = parser.add_subparsers(dest="role")
    worker = roles.add_parser("worker", help="(internal) the worker process")
    worker.add_argument("--url", required=True)
    worker.add_argument("--out", required=True)
    worker.add_argument("--concurrency", type=int, required=True)
    producer = roles.add_parser("producer", help="(internal) the producer process")
    producer.add_argument("--url", required=True)
    producer.add_argument("--out", required=True)
    producer.add_argument("--rate", type=float, required=True)
    producer.add_argument("--duration", type=float, required=True)
    producer.add_argument("--tick-ms", type=float, required=True)
    producer.add_argument("--insert", choices=["copy", "unnest"], required=True)

    parser.add_argument(
        "--admin-url", default=os.environ.get("AWA_BENCH_ADMIN_URL", DEFAULT_ADMIN_URL)
    )
    parser.add_argument(
        "--rates",
        type=lambda text: [float(r) for r in text.split(",")],
        default=DEFAULT_RATES,
        help="offered rates in jobs/s, comma-separated, in order (default: %(default)s)",
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per rate (60)")
    parser.add_argument("--tick-ms", type=float, default=10.0, help="producer batch interval (10)")
    parser.add_argument("--insert", choices=["copy", "unnest"], default="copy")
    parser.add_argument("--concurrency", type=int, default=50, help="worker max_workers (50)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds to start the rest")
    parser.add_argument(
        "--all-rates", action="store_true", help="go on past the first rate not kept up"
    )
    parser.add_argument(
        "--out", default=None, help="results file (default results/latency-<time>.json)"
    )
    return parser.parse_args(argv)


def main() -> None:
    opts = parse_args()
    if opts.role in ("worker", "producer"):
        role = run_worker if opts.role == "worker" else run_producer
        Path(opts.out).write_text(json.dumps(asyncio.run(role(opts))))
        return
    document = asyncio.run(sweep(opts))
    RESULTS.mkdir(exist_ok=True)
    path = (
        Path(opts.out)
        if opts.out
        else RESULTS / f"latency-{document['started'].replace(':', '')}.json"
    )
    path.write_text(json.dumps(document, indent=2) + "\n")
    log(f"results written to {path}")
    print(path)


if __name__ == "__main__":
    main()
