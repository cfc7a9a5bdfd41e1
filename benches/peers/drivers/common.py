"""Workload runners shared by every driver.

A driver module defines one adapter class for its system (see ``Adapter`` below) and
calls ``main(AdapterClass)``. Everything that is measured is measured here, the same
way for every system. Needs only the standard library and asyncpg (the measuring
connection), so it runs in each system's own virtualenv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import sys
import time
import urllib.parse

import asyncpg

# The completed count is read POLL_INTERVAL_S after the start, then again
# after half the time the last interval's rate says is left (at most
# MAX_POLL_S, at least FINAL_POLL_S, and never more than a quarter of the
# time since the start): a run's end is known to within about FINAL_POLL_S
# and a count's own time, with a dozen counts instead of one every 50 ms. A
# count reads the whole table (awa's 60 000-job table: 13-38 ms of a server
# backend's CPU), and the system under test shares the cores. Without the
# quarter, a first interval spent mostly starting the worker set the next
# count a whole MAX_POLL_S later: a drain that ended at 0.7 s was timed at
# 1.03 s in about half the runs.
POLL_INTERVAL_S = 0.05
MAX_POLL_S = 1.0
FINAL_POLL_S = 0.005
STATS_FLUSH_S = 1.5  # PG15 backends flush table statistics at most once a second
SLEEP_HANDLER_S = 0.01
PICKUP_CONCURRENCY = 10
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class Adapter:
    """What each driver implements (documentation only; drivers don't subclass it).

    ``completed_sql`` is a query returning one integer: jobs this system's own tables
    record as completed. The adapter's handler must call ``await self.handle(i)``
    with the job's ``i`` argument; ``handle`` is given to the constructor.
    """

    completed_sql: str

    def __init__(self, url: str, handle) -> None: ...
    async def setup(self) -> None: ...  # install/migrate the schema, register the handler
    async def bulk_enqueue(self, payloads: list[dict]) -> int: ...
    async def insert_one(self, payload: dict) -> None: ...  # committed when it returns
    async def start_worker(self, concurrency: int) -> None: ...
    def check_worker(self) -> None: ...  # raise if the worker has died
    async def stop_worker(self) -> None: ...
    async def close(self) -> None: ...


class Recorder:
    """Records when each handler started, by job argument ``i``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.starts: dict[int, float] = {}
        self.first_start: float | None = None
        self.calls = 0

    async def handle(self, i: int) -> None:
        now = time.perf_counter()
        if self.first_start is None:
            self.first_start = now
        self.starts.setdefault(i, now)
        self.calls += 1
        if self.mode == "sleep":
            await asyncio.sleep(SLEEP_HANDLER_S)


def make_payloads(n: int) -> list[dict]:
    return [{"i": i} for i in range(n)]


def database_name(url: str) -> str:
    return urllib.parse.urlparse(url).path.lstrip("/")


def postgres_cpu_ticks(dbname: str, exclude_pid: int) -> dict[int, int]:
    """utime+stime of every postgres process serving ``dbname`` (backends and
    autovacuum workers show the database name in their process title)."""
    ticks: dict[int, int] = {}
    marker = f" {dbname} "
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude_pid:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not title.startswith("postgres") or marker not in title + " ":
                continue
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        ticks[int(entry)] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Monitor:
    """The measuring connection: completed counts, WAL position, dead tuples, CPU."""

    def __init__(self, url: str, conn: asyncpg.Connection, backend_pid: int) -> None:
        self.dbname = database_name(url)
        self.conn = conn
        self.backend_pid = backend_pid

    @classmethod
    async def connect(cls, url: str) -> "Monitor":
        conn = await asyncpg.connect(url)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        return cls(url, conn, pid)

    async def analyze_and_checkpoint(self) -> None:
        # A fresh database holds only this system's tables: plain ANALYZE covers them
        # (partitioned parents included, which autovacuum never analyzes).
        await self.conn.execute("ANALYZE")
        # After a checkpoint, the first change to each page logs a full-page image.
        # Checkpointing here makes every system pay that the same way, instead of
        # depending on where the server's last timed checkpoint happened to fall.
        try:
            await self.conn.execute("CHECKPOINT")
        except asyncpg.InsufficientPrivilegeError:
            pass  # needs superuser or pg_checkpoint; WAL figures are then noisier

    async def wal_position(self) -> int:
        """The current WAL insert position, in bytes from the start of WAL."""
        return int(
            await self.conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
        )

    async def dead_tuples(self) -> int:
        """Row versions left for vacuum so far: every update that was not HOT
        and every delete. Counted from cumulative counters, so a vacuum
        mid-drain does not lower it (n_dead_tup, which it resets, did); the
        old version of a HOT update is pruned within its page, so it is not
        counted."""
        return int(
            await self.conn.fetchval(
                "SELECT coalesce(sum(n_tup_upd - n_tup_hot_upd + n_tup_del), 0) "
                "FROM pg_stat_user_tables"
            )
        )

    async def wait_other_backends_gone(self, timeout_s: float) -> None:
        deadline = time.perf_counter() + timeout_s
        others = """SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        while await self.conn.fetchval(others) > 0 and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)

    def postgres_cpu(self) -> dict[int, int]:
        return postgres_cpu_ticks(self.dbname, exclude_pid=self.backend_pid)

    async def wait_completed(self, adapter, n: int, timeout_s: float) -> float:
        """Poll until the system's tables show ``n`` completed; return perf_counter then."""
        deadline = time.perf_counter() + timeout_s
        started = last_at = time.perf_counter()
        last_done = 0
        while True:
            adapter.check_worker()
            done = await self.conn.fetchval(adapter.completed_sql)
            now = time.perf_counter()
            if done >= n:
                return now
            if now > deadline:
                raise TimeoutError(f"only {done} of {n} jobs completed after {timeout_s}s")
            wait_s = next_poll_s(n - done, done - last_done, now - last_at, now - started)
            await asyncio.sleep(wait_s)
            last_done, last_at = done, now

    async def close(self) -> None:
        await self.conn.close()


def next_poll_s(
    remaining: int, done_since_last: int, seconds_since_last: float, seconds_since_start: float
) -> float:
    """Half the time the last interval's rate leaves for the ``remaining``
    jobs, within [FINAL_POLL_S, MAX_POLL_S] and at most a quarter of the
    time since the start (but POLL_INTERVAL_S); POLL_INTERVAL_S while no
    rate is known."""
    if done_since_last <= 0:
        return POLL_INTERVAL_S
    expected_s = remaining * seconds_since_last / done_since_last
    ceiling = min(MAX_POLL_S, max(POLL_INTERVAL_S, seconds_since_start / 4))
    return min(ceiling, max(FINAL_POLL_S, expected_s / 2))


def cpu_ms_between(before: dict[int, int], after: dict[int, int]) -> float:
    ticks = sum(t - before.get(pid, 0) for pid, t in after.items())
    return ticks * 1000.0 / CLOCK_TICKS_PER_S


def raise_if_finished(task: asyncio.Task) -> None:
    """A worker task that ended on its own has failed: surface why."""
    if task is not None and task.done():
        task.result()  # raises the worker's exception, if any
        raise RuntimeError("the worker stopped by itself")


async def wait_started(recorder: Recorder, keys, timeout_s: float, adapter) -> None:
    deadline = time.perf_counter() + timeout_s
    while not all(k in recorder.starts for k in keys):
        adapter.check_worker()
        if time.perf_counter() > deadline:
            missing = [k for k in keys if k not in recorder.starts]
            raise TimeoutError(f"{len(missing)} jobs never started, e.g. {missing[:5]}")
        await asyncio.sleep(0.001)


# ---------------------------------------------------------------- workloads


async def run_bulk(adapter, opts) -> dict:
    await adapter.setup()
    payloads = make_payloads(opts.n)
    enqueue = adapter.bulk_enqueue_unnest if opts.workload == "bulk_unnest" else adapter.bulk_enqueue
    started = time.perf_counter()
    count = await enqueue(payloads)
    seconds = time.perf_counter() - started
    if count != opts.n:
        raise RuntimeError(f"bulk enqueue reported {count} jobs, expected {opts.n}")
    return {"n": opts.n, "seconds": seconds, "jobs_per_s": opts.n / seconds}


async def run_drain(adapter, recorder, opts) -> dict:
    await adapter.setup()
    count = await adapter.bulk_enqueue(make_payloads(opts.n))
    if count != opts.n:
        raise RuntimeError(f"bulk enqueue reported {count} jobs, expected {opts.n}")
    monitor = await Monitor.connect(opts.url)
    await monitor.analyze_and_checkpoint()
    await asyncio.sleep(STATS_FLUSH_S)
    dead_before = await monitor.dead_tuples()
    wal_before = await monitor.wal_position()
    pg_cpu_before = monitor.postgres_cpu()
    own_cpu_before = own_cpu_seconds()

    await adapter.start_worker(opts.concurrency)
    finished = await monitor.wait_completed(adapter, opts.n, opts.timeout)

    wal_bytes = await monitor.wal_position() - wal_before
    pg_cpu_ms = cpu_ms_between(pg_cpu_before, monitor.postgres_cpu())
    own_cpu_ms = (own_cpu_seconds() - own_cpu_before) * 1000.0
    # A backend that goes idle less than a second after its last statistics flush
    # holds its counts for up to 10 s; one that exits flushes them at once. So
    # close the system's connections before reading the dead tuple counts.
    await adapter.stop_worker()
    await close_adapter(adapter)
    await monitor.wait_other_backends_gone(timeout_s=30)
    await asyncio.sleep(STATS_FLUSH_S)
    dead = await monitor.dead_tuples() - dead_before
    await monitor.close()

    # A completed count the handlers cannot account for would be a measuring bug.
    if len(recorder.starts) < opts.n:
        raise RuntimeError(f"{opts.n} completed but only {len(recorder.starts)} handlers ran")
    seconds = finished - recorder.first_start
    return {
        "n": opts.n,
        "concurrency": opts.concurrency,
        "mode": opts.mode,
        "seconds": seconds,
        "jobs_per_s": opts.n / seconds,
        "wal_bytes_per_job": wal_bytes / opts.n,
        "dead_tuples_per_job": dead / opts.n,
        "pg_cpu_ms_per_job": pg_cpu_ms / opts.n,
        "worker_cpu_ms_per_job": own_cpu_ms / opts.n,
        "handler_calls_per_job": recorder.calls / opts.n,  # above 1: some jobs ran twice
    }


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


async def run_pickup(adapter, recorder, opts) -> dict:
    await adapter.setup()
    await adapter.start_worker(PICKUP_CONCURRENCY)
    warmup = -1
    await adapter.insert_one({"i": warmup})
    await wait_started(recorder, [warmup], 30, adapter)

    returned: dict[int, float] = {}
    for i in range(opts.count):
        await adapter.insert_one({"i": i})
        returned[i] = time.perf_counter()
        await asyncio.sleep(opts.interval_ms / 1000.0)
    await wait_started(recorder, list(returned), 30, adapter)
    await adapter.stop_worker()

    latencies = sorted((recorder.starts[i] - returned[i]) * 1000.0 for i in returned)
    return {
        "count": opts.count,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies),
        "max_ms": latencies[-1],
    }


# ---------------------------------------------------------------- entry point


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--workload", required=True, choices=["bulk", "bulk_unnest", "drain", "pickup"])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--mode", choices=["noop", "sleep"], default="noop")
    parser.add_argument("--count", type=int, default=200, help="pickup: number of single inserts")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="pickup: gap between inserts")
    parser.add_argument("--timeout", type=float, default=600.0, help="drain: give up after this")
    return parser.parse_args(argv)


async def close_adapter(adapter) -> None:
    """Close the adapter once (the drain closes it early; ``run`` closes it always)."""
    if not getattr(adapter, "bench_closed", False):
        adapter.bench_closed = True
        await adapter.close()


async def run(adapter_class, opts) -> dict:
    recorder = Recorder(opts.mode)
    adapter = adapter_class(opts.url, recorder.handle)
    try:
        if opts.workload in ("bulk", "bulk_unnest"):
            return await run_bulk(adapter, opts)
        if opts.workload == "drain":
            return await run_drain(adapter, recorder, opts)
        return await run_pickup(adapter, recorder, opts)
    finally:
        await close_adapter(adapter)


def main(adapter_class, loop_runner=asyncio.run) -> None:
    """Run one measurement and print one JSON object on the real stdout.

    While the workload runs, ``sys.stdout`` points at stderr so that nothing a
    library prints can be mistaken for the result.
    """
    opts = parse_args(sys.argv[1:])
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        result = loop_runner(run(adapter_class, opts))
    finally:
        sys.stdout = real_stdout
    print(json.dumps(result), flush=True)
