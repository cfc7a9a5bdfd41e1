"""Soak: a long run at 70 % of the measured maximum throughput, with the MVCC
horizon pinned for part of it. Do dead tuples, table size and pickup
latency stay bounded, and come back once the pin is released?

Usage (from the repository root, awa installed in .venv)::

    .venv/bin/python benches/soak/soak.py                 # 30 minutes
    .venv/bin/python benches/soak/soak.py --duration 2m   # a quick try
    .venv/bin/python benches/soak/soak.py --duration 60m --pin 10m  # issue 11's run

Phases
------
1. **Calibration.** ``--workers`` CLI worker processes (``python -m awa
   worker --app benches.soak.app:client``) work no-op jobs while the
   producer keeps 5 000 of them available for ``--calibrate-for`` seconds;
   the maximum throughput is the completion rate after the first quarter.
   The producer runs on the same machine as in the soak, so this is what
   the machine sustains, inserting included. The pruner removes the
   calibration's jobs during the first part of the baseline, which the
   checks leave out as warm-up. ``--rate`` skips this.
2. **Soak** of ``--duration`` at ``--load`` (0.7) times that rate, inserted
   in batches of COPY every 100 ms, with a retention of ``--retention``
   seconds (the pruner deletes finished jobs all along, as a production
   fleet at this rate would): a *baseline*, a *pinned* middle of ``--pin``
   (default: a third of the run) during which one connection holds a
   ``REPEATABLE READ`` transaction open (vacuum can remove no dead tuple
   newer than it), and a *recovery* after it commits, as long as the
   baseline.
3. **Drain.** The producer stops; the backlog must be gone within 60 s.

Every ``--sample-every`` seconds it records ``awa.jobs``'s live and dead
tuples (``pg_stat_user_tables``), its total size with indexes, autovacuum
runs, jobs completed, the backlog, and the pickup latency (claim time minus
due time, p50 and p99, of jobs claimed since the last sample).

Checks (all must hold; the JSON result has each with its figures):

* ``kept_up``: completions kept pace with inserts in every phase, and the
  backlog drained at the end;
* ``dead_tuples_return``: in the second half of the recovery phase, the
  median dead tuple count is at most 1.5 times the baseline's peak plus
  1 000;
* ``live_tuples_return``: likewise for live tuples (the pruner catches up);
* ``size_bounded``: the table stops growing once the pin is released (its
  size in the second half of the recovery phase is at most 10 % above its
  peak until then); PostgreSQL does not give the space back, so bounded,
  not back to the baseline;
* ``pickup_p99_returns``: the median p99 pickup latency in the second half
  of the recovery phase is at most twice the baseline's plus 50 ms;
* ``recovered_within``: from the release of the pin, the first sample at
  which dead tuples and the p99 pickup latency are both within the limits
  above comes at most ``--recover-within`` (5 minutes) later;
* ``size_flat_baseline``: before the pin, the table's size at the end of
  the baseline is at most 10 % above its size once warmed up (the first
  fifth of the baseline).

Without ``--database-url`` it runs on a throwaway durable embedded server
with PostgreSQL's default settings (autovacuum on). The result goes to
``--output`` (default ``benches/soak/results/soak-<time>.json``); the exit
status is 0 when every check holds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import awa
from awa.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]
QUEUE, KIND = "soak", "soak_tick"
INSERT_EVERY_S = 0.1
DRAIN_TIMEOUT_S = 60.0
WORKER_START_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: Jobs kept available while calibrating, so no worker ever waits for one.
CALIBRATION_BACKLOG = 5000


def seconds(text: str) -> float:
    """``90``, ``90s``, ``2m`` or ``1h`` as seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 90s, 2m, 1h)")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=seconds, default=seconds("30m"), help="soak length")
    parser.add_argument(
        "--pin", type=seconds, help="how long the horizon is pinned (default: duration / 3)"
    )
    parser.add_argument(
        "--recover-within",
        type=seconds,
        default=seconds("5m"),
        help="the pin's effects must be gone this long after its release",
    )
    parser.add_argument("--load", type=float, default=0.7, help="fraction of the maximum rate")
    parser.add_argument("--rate", type=float, help="jobs/s to soak at (skips calibration)")
    parser.add_argument(
        "--calibrate-for",
        type=seconds,
        help="calibration length (default: duration / 10, 15-180 s)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--slots", type=int, default=50, help="handlers per worker")
    parser.add_argument("--retention", type=float, default=30.0, help="completed_retention, s")
    parser.add_argument("--sample-every", type=seconds, help="default: duration / 180, 5-10 s")
    parser.add_argument("--database-url", help="a superuser URL (default: an embedded server)")
    parser.add_argument("--output", type=Path, help="the JSON result")
    opts = parser.parse_args(argv)
    if opts.pin is None:
        opts.pin = opts.duration / 3
    if not 0 < opts.pin < opts.duration:
        parser.error("--pin must be shorter than --duration")
    if opts.calibrate_for is None:
        opts.calibrate_for = min(180.0, max(15.0, opts.duration / 10))
    if opts.sample_every is None:
        opts.sample_every = min(10.0, max(5.0, opts.duration / 180))
    if opts.output is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        opts.output = ROOT / "benches" / "soak" / "results" / f"soak-{stamp}.json"
    return opts


# ── the fleet ────────────────────────────────────────────────────────────


def _die_with_parent() -> None:
    """In a worker before exec: SIGTERM when the soak dies (Linux)."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Fleet:
    """CLI worker processes of the soak."""

    def __init__(self, url: str, opts: argparse.Namespace, log_dir: Path) -> None:
        self._url, self._opts, self._log_dir = url, opts, log_dir
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self, monitor: asyncpg.Connection) -> None:
        settings = {
            "completed_retention": self._opts.retention,
            # Up to 20 000 deletions a second: pruning must keep up with
            # completions, or the table grows with the jobs run.
            "prune_interval": 0.5,
            "prune_batch_size": 10_000,
        }
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "AWA_SOAK_DATABASE_URL": self._url,
            "AWA_SOAK_WORKER": json.dumps(settings),
        }
        for number in range(self._opts.workers):
            log_file = (self._log_dir / f"worker-{number + 1}.log").open("wb")
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "awa",
                "worker",
                "--app",
                "benches.soak.app:client",
                "--queue",
                f"{QUEUE}={self._opts.slots}",
                cwd=ROOT,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                preexec_fn=_die_with_parent,
            )
            log_file.close()
            self.processes.append(process)
        pids = [process.pid for process in self.processes]
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while await monitor.fetchval(
            "SELECT count(*) FROM awa.workers WHERE pid = ANY($1::int[])", pids
        ) < len(pids):
            if any(process.returncode is not None for process in self.processes):
                raise SystemExit(f"a worker exited at startup; see {self._log_dir}")
            if time.monotonic() > deadline:
                raise SystemExit(f"workers did not register in time; see {self._log_dir}")
            await asyncio.sleep(0.1)

    async def stop(self) -> list[int | None]:
        for process in self.processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = []
        for process in self.processes:
            try:
                codes.append(await asyncio.wait_for(process.wait(), 60))
            except TimeoutError:
                process.kill()
                await process.wait()
                codes.append(None)
        return codes


# ── measuring ────────────────────────────────────────────────────────────


async def completed(monitor: asyncpg.Connection) -> int:
    """A running count of completions: the completed jobs still there plus
    every job deleted so far (the pruner's deletes; n_tup_del)."""
    row = await monitor.fetchrow(
        """SELECT (SELECT count(*) FROM awa.jobs WHERE state = 'completed') AS present,
                  (SELECT n_tup_del FROM pg_stat_user_tables
                   WHERE relid = 'awa.jobs'::regclass) AS deleted"""
    )
    return int(row["present"]) + int(row["deleted"] or 0)


async def calibrate(client: awa.AsyncClient, monitor: asyncpg.Connection, seconds_: float) -> float:
    """The fleet's sustained maximum, in jobs/s, with the producer on the
    same machine: the backlog is topped up to ``CALIBRATION_BACKLOG`` every
    few milliseconds for ``seconds_``, and the completion rate measured
    after the first quarter (the warm-up)."""
    started = time.monotonic()
    first: tuple[float, int] | None = None
    backlog_sql = "SELECT count(*) FROM awa.jobs WHERE state = 'available'"
    while (now := time.monotonic()) - started < seconds_:
        missing = CALIBRATION_BACKLOG - await monitor.fetchval(backlog_sql)
        if missing > 0:
            await client.enqueue_many_copy([{}] * missing, kind=KIND, queue=QUEUE)
        if first is None and now - started >= seconds_ / 4:
            first = (now, await completed(monitor))
        await asyncio.sleep(0.02)
    assert first is not None
    rate = (await completed(monitor) - first[1]) / (time.monotonic() - first[0])
    # Let the backlog drain; the pruner removes these jobs like any others.
    # (Emptying and vacuuming the table here would leave the planner
    # statistics of an empty table, and the workers' plans with them.)
    left = "SELECT count(*) FROM awa.jobs WHERE state <> 'completed'"
    while await monitor.fetchval(left):  # noqa: ASYNC110 - polling the database
        await asyncio.sleep(0.1)
    return rate


async def sample(monitor: asyncpg.Connection, since: datetime.datetime) -> dict[str, Any]:
    """One sample; ``completed`` is the running count of :func:`completed`.
    One scan of the table, so that measuring costs the run little."""
    row = await monitor.fetchrow(
        """WITH scan AS (
               SELECT count(*) FILTER (WHERE state = 'available') AS backlog,
                      count(*) FILTER (WHERE state = 'completed') AS completed_present,
                      percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP
                          (ORDER BY extract(epoch FROM attempted_at - run_at))
                          FILTER (WHERE attempted_at > $1) AS pickup,
                      max(attempted_at) AS last_claim
               FROM awa.jobs)
           SELECT s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
                  s.autovacuum_count AS autovacuums, s.n_tup_del AS deleted,
                  pg_total_relation_size('awa.jobs') AS bytes, scan.*,
                  (SELECT max(age(backend_xmin)) FROM pg_stat_activity) AS horizon_age
           FROM pg_stat_user_tables s, scan WHERE s.relid = 'awa.jobs'::regclass""",
        since,
    )
    pickup = row["pickup"] or [None, None]
    return {
        "live_tuples": row["live_tuples"],
        "dead_tuples": row["dead_tuples"],
        "mib": round(row["bytes"] / 2**20, 2),
        "autovacuums": row["autovacuums"],
        "completed": int(row["completed_present"]) + int(row["deleted"] or 0),
        "backlog": row["backlog"],
        "pickup_p50_ms": None if pickup[0] is None else round(pickup[0] * 1000, 2),
        "pickup_p99_ms": None if pickup[1] is None else round(pickup[1] * 1000, 2),
        "horizon_age_xids": row["horizon_age"],
        "_last_claim": row["last_claim"],
    }


async def produce(client: awa.AsyncClient, rate: float, stop: asyncio.Event) -> int:
    inserted, started = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate) - inserted
        if due > 0:
            await client.enqueue_many_copy([{}] * due, kind=KIND, queue=QUEUE)
            inserted += due
        await asyncio.sleep(INSERT_EVERY_S)
    return inserted


# ── the run ──────────────────────────────────────────────────────────────


async def soak(url: str, opts: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    client = awa.AsyncClient(url)
    await client.migrate()
    monitor = await asyncpg.connect(url)
    fleet = Fleet(url, opts, log_dir)
    pin: asyncpg.Connection | None = None
    released_at: float | None = None
    try:
        await fleet.start(monitor)
        if opts.rate is not None:
            max_rate = None
            rate = opts.rate
        else:
            print(f"calibrating for {opts.calibrate_for:.0f}s", flush=True)
            max_rate = await calibrate(client, monitor, opts.calibrate_for)
            rate = opts.load * max_rate
            print(f"maximum {max_rate:.0f} jobs/s; soaking at {rate:.0f} jobs/s", flush=True)
        pin_from = (opts.duration - opts.pin) / 2
        pin_until = pin_from + opts.pin
        stop = asyncio.Event()
        producer = asyncio.create_task(produce(client, rate, stop))
        started = time.monotonic()
        since = await monitor.fetchval("SELECT now()")
        samples: list[dict[str, Any]] = []
        header = "   t(s) phase     completed  backlog  live   dead   MiB    p99 ms  autovac"
        print(header, flush=True)
        while (elapsed := time.monotonic() - started) < opts.duration:
            phase = (
                "baseline"
                if elapsed < pin_from
                else "pinned"
                if elapsed < pin_until
                else "recovery"
            )
            if phase == "pinned" and pin is None:
                pin = await asyncpg.connect(url)
                await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                await pin.fetchval("SELECT count(*) FROM awa.workers")  # takes the snapshot
            if phase == "recovery" and pin is not None:
                await pin.execute("COMMIT")
                await pin.close()
                pin = None
                released_at = round(time.monotonic() - started, 1)
            await asyncio.sleep(min(opts.sample_every, max(0.0, opts.duration - elapsed)))
            point = await sample(monitor, since)
            since = point.pop("_last_claim") or since
            point = {"t_s": round(time.monotonic() - started, 1), "phase": phase, **point}
            samples.append(point)
            print(
                f"{point['t_s']:7.0f} {phase:9} {point['completed']:9d} {point['backlog']:8d} "
                f"{point['live_tuples']:6d} {point['dead_tuples']:6d} {point['mib']:6.1f} "
                f"{point['pickup_p99_ms'] or 0:8.1f} {point['autovacuums']:7d}",
                flush=True,
            )
        stop.set()
        inserted = await producer
        drained_at = time.monotonic()
        while await monitor.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE state IN ('available', 'running')"
        ):
            if time.monotonic() - drained_at > DRAIN_TIMEOUT_S:
                break
            await asyncio.sleep(0.1)
        drain_s = time.monotonic() - drained_at
        left = await monitor.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE state IN ('available', 'running')"
        )
        exit_codes = await fleet.stop()
    finally:
        if pin is not None:
            pin.terminate()
        await fleet.stop()
        await monitor.close()
        await client.close()
    return {
        "max_rate_jobs_s": None if max_rate is None else round(max_rate, 1),
        "rate_jobs_s": round(rate, 1),
        "inserted": inserted,
        "left_after_drain": left,
        "drain_s": round(drain_s, 2),
        "worker_exit_codes": exit_codes,
        "pin_released_at_s": released_at,
        "recover_within_s": opts.recover_within,
        "samples": samples,
    }


def evaluate(result: dict[str, Any], rate: float) -> dict[str, dict[str, Any]]:
    samples = result["samples"]
    by_phase = {
        p: [s for s in samples if s["phase"] == p] for p in ("baseline", "pinned", "recovery")
    }
    # The first fifth of the baseline warms up; the second half of the
    # recovery is where "back to baseline" is judged.
    baseline = by_phase["baseline"][len(by_phase["baseline"]) // 5 :] or by_phase["baseline"]
    recovery = by_phase["recovery"]
    tail = recovery[len(recovery) // 2 :] or recovery
    until_tail = [s for s in samples if s not in tail]

    def values(points: list[dict[str, Any]], key: str) -> list[float]:
        return [p[key] for p in points if p[key] is not None]

    def median(points: list[dict[str, Any]], key: str) -> float:
        found = values(points, key)
        return statistics.median(found) if found else 0.0

    checks: dict[str, dict[str, Any]] = {}
    rates = {}
    for phase, points in by_phase.items():
        if len(points) >= 2:
            span = points[-1]["t_s"] - points[0]["t_s"]
            rates[phase] = round((points[-1]["completed"] - points[0]["completed"]) / span, 1)
    checks["kept_up"] = {
        "passed": all(r >= 0.9 * rate for r in rates.values()) and result["left_after_drain"] == 0,
        "completed_jobs_s_by_phase": rates,
        "target_jobs_s": round(rate, 1),
        "left_after_drain": result["left_after_drain"],
    }
    limits = {}
    for key, check in (
        ("dead_tuples", "dead_tuples_return"),
        ("live_tuples", "live_tuples_return"),
    ):
        peak = max(values(baseline, key), default=0)
        limit = 1.5 * peak + 1000
        limits[key] = limit
        checks[check] = {
            "passed": median(tail, key) <= limit,
            "baseline_peak": peak,
            "pinned_peak": max(values(by_phase["pinned"], key), default=0),
            "recovery_tail_median": median(tail, key),
            "limit": limit,
        }
    size_peak = max(values(until_tail, "mib"), default=0)
    checks["size_bounded"] = {
        "passed": max(values(tail, "mib"), default=0) <= 1.1 * size_peak,
        "baseline_mib": max(values(baseline, "mib"), default=0),
        "peak_mib_until_recovery_tail": size_peak,
        "recovery_tail_max_mib": max(values(tail, "mib"), default=0),
    }
    p99_baseline = median(baseline, "pickup_p99_ms")
    checks["pickup_p99_returns"] = {
        "passed": median(tail, "pickup_p99_ms") <= 2 * p99_baseline + 50,
        "baseline_median_ms": p99_baseline,
        "pinned_max_ms": max(values(by_phase["pinned"], "pickup_p99_ms"), default=0),
        "recovery_tail_median_ms": median(tail, "pickup_p99_ms"),
        "limit_ms": 2 * p99_baseline + 50,
    }
    checks["recovered_within"] = _recovered_within(
        recovery, result, limits["dead_tuples"], 2 * p99_baseline + 50
    )
    warm, end = baseline[0]["mib"] if baseline else 0, max(values(baseline[-3:], "mib"), default=0)
    checks["size_flat_baseline"] = {
        "passed": end <= 1.1 * warm,
        "warmed_up_mib": warm,
        "baseline_end_mib": end,
    }
    return checks


def _recovered_within(
    recovery: list[dict[str, Any]], result: dict[str, Any], dead_limit: float, p99_limit_ms: float
) -> dict[str, Any]:
    """How long after the pin's release dead tuples and the p99 pickup
    latency were first both back within their limits."""
    released = result.get("pin_released_at_s")
    allowed = result.get("recover_within_s")
    back = next(
        (
            point["t_s"]
            for point in recovery
            if point["dead_tuples"] <= dead_limit
            and (point["pickup_p99_ms"] is None or point["pickup_p99_ms"] <= p99_limit_ms)
        ),
        None,
    )
    after = None if back is None or released is None else round(back - released, 1)
    return {
        "passed": after is not None and allowed is not None and after <= allowed,
        "recovered_after_s": after,
        "allowed_s": allowed,
        "dead_tuples_limit": dead_limit,
        "p99_limit_ms": p99_limit_ms,
    }


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the workers and server on the way out
    log_dir = Path(tempfile.mkdtemp(prefix="awa-soak-"))
    server: EmbeddedPostgres | None = None
    url = opts.database_url
    database = None
    try:
        if url is None:
            server = EmbeddedPostgres(durable=True)
            url = server.start()
        else:
            database = f"awa_soak_{uuid.uuid4().hex[:8]}"
            asyncio.run(_admin(url, f'CREATE DATABASE "{database}"'))
            url = urlunsplit(urlsplit(url)._replace(path=f"/{database}"))
        started = datetime.datetime.now(datetime.UTC)
        result = asyncio.run(soak(url, opts, log_dir))
    finally:
        if database is not None and opts.database_url is not None:
            asyncio.run(
                _admin(opts.database_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            )
        if server is not None:
            server.stop()
    checks = evaluate(result, result["rate_jobs_s"])
    passed = all(check["passed"] for check in checks.values())
    report = {
        "started_at": started.isoformat(timespec="seconds"),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(opts).items()},
        "server": "embedded, PostgreSQL defaults" if opts.database_url is None else "given URL",
        **{k: v for k, v in result.items() if k != "samples"},
        "checks": checks,
        "passed": passed,
        "samples": result["samples"],
    }
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    opts.output.write_text(json.dumps(report, indent=1, default=str) + "\n")
    for name, check in checks.items():
        figures = ", ".join(f"{k} {v}" for k, v in check.items() if k != "passed")
        print(f"{'PASS' if check['passed'] else 'FAIL'} {name}: {figures}")
    print(f"result: {opts.output}")
    if passed:
        shutil.rmtree(log_dir, ignore_errors=True)
    else:
        print(f"worker logs: {log_dir}")
    return 0 if passed else 1


async def _admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        with contextlib.suppress(Exception):
            await conn.close()


if __name__ == "__main__":
    sys.exit(main())
