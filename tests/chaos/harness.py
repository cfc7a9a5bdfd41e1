"""The chaos harness: a fleet of real CLI workers on a server of the
scenario's own, a steady stream of jobs, faults, and an audit of what the
database applied.

Overview
--------
A scenario opens a :class:`ChaosRun` on a migrated, durable server
(``own_server``), which

* installs the ledger (:data:`LEDGER_SQL`): a trigger on ``awa.jobs``
  records every state change except a claim (``available → running``) in
  ``chaos_transitions`` (job id, run lease, old and new state, server time);
* starts worker processes (``python -m awa worker --app tests.chaos.app:client``),
  each ready once its ``awa.workers`` row exists; each handler run is recorded
  by the app in a file (job id, run lease, pid, time), loaded into
  ``chaos_runs`` at the end;
* inserts :attr:`Workload.jobs` jobs at a steady rate over
  :attr:`Workload.insert_s` seconds (a mix: plain, retried once, failing for
  good, scheduled a little ahead, and triggers of a follow-up each, half by
  an ``on_completed_enqueue`` spec, half staged by the handler), on a
  connection of its own that it re-opens after a fault, checking whether a
  batch whose reply was lost committed before sending it again;

and offers the faults (:meth:`ChaosRun.kill_worker`,
:meth:`ChaosRun.restart_server`, :meth:`ChaosRun.terminate_connections`),
each recorded with the jobs running when it struck. The test drives the
faults; :meth:`ChaosRun.finish` then waits until every job is settled, stops
the workers, audits, prints and returns the :class:`Report`.

What the audit holds (:meth:`Report.problems`)
----------------------------------------------
* every job inserted exists once and ended in its expected state
  (``failed`` for ``terminal`` work, else ``completed``): none lost;
* every job reached a final state exactly once, and no attempt (job, run
  lease) left ``running`` twice: no outcome applied twice;
* each handler outcome that finished a job came from its last attempt and
  from a run that really happened (its lease is in ``chaos_runs``);
* every completed trigger has exactly one follow-up, made the way its kind
  says, and every follow-up belongs to a completed trigger.

Jobs may run more than once (at-least-once delivery): the report counts them.

Recovery, per fault: seconds from the fault to the next outcome applied,
to the first completion of each worker that was running before it (every
worker resumed), and until every job running at the fault left that state
(released or finished). A fault's recovery is the larger of the last two.

Failure handling
----------------
If the jobs do not settle, the run fails after :attr:`Workload.settle_s`, or
sooner when nothing has happened for :attr:`Workload.stall_s` while no job
waits for a future ``run_at`` (a stall), with what was stuck where: jobs
running under live or dead workers, their heartbeat age, and each worker's
log tail. Workers are always stopped (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

import awa
from awa.embedded import EmbeddedPostgres
from tests.chaos.app import (
    MAX_CRASHES,
    QUEUE,
    ChaosSpecTrigger,
    ChaosStagedTrigger,
    ChaosWork,
)
from tests.support import FAST_WORKER

T = TypeVar("T")

try:  # the session advisory lock of leadership before the lease row
    from awa.maintenance.leader import LEADER_LOCK_KEY
except ImportError:
    LEADER_LOCK_KEY = 0x61_77_61_6C_65_61_64

ROOT = Path(__file__).resolve().parents[2]
FINAL_STATES = ("completed", "failed", "cancelled")
WORK, SPEC_TRIGGER, STAGED_TRIGGER, FOLLOW_UP = (
    "chaos_work",
    "chaos_spec_trigger",
    "chaos_staged_trigger",
    "chaos_follow_up",
)
#: The lease a scenario gives leadership, where the worker has the setting.
LEADER_LEASE_S = 2.0
#: Handlers each worker process runs at once.
SLOTS = 32
#: A worker gets this long to register, and to stop after SIGTERM.
WORKER_START_TIMEOUT_S = 30.0
WORKER_STOP_TIMEOUT_S = 15.0
#: How long the scenario's own connections keep trying to reconnect.
RECONNECT_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 15
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: pytest-timeout of one scenario, by form.
SHORT_TIMEOUT_S, LONG_TIMEOUT_S = 150, 900

#: Errors of a connection the fault broke, or of a server not back yet.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
    # A connection whose server went away in the middle of a COPY or a
    # statement can be left in a protocol state it cannot leave.
    asyncpg.exceptions.InternalClientError,
)

LEDGER_SQL = """
CREATE TABLE chaos_transitions (
    job_id     bigint      NOT NULL,
    run_lease  bigint      NOT NULL,
    old_state  text        NOT NULL,
    new_state  text        NOT NULL,
    crashes    integer     NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_transitions (job_id);
CREATE TABLE chaos_runs (
    job_id     bigint           NOT NULL,
    run_lease  bigint           NOT NULL,
    pid        integer          NOT NULL,
    started_at double precision NOT NULL
);
CREATE TABLE chaos_expected (kind text NOT NULL, seq integer NOT NULL, state text NOT NULL);
CREATE FUNCTION chaos_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_transitions (job_id, run_lease, old_state, new_state, crashes)
    VALUES (NEW.id, NEW.run_lease, OLD.state, NEW.state, NEW.crashes);
    RETURN NEW;
END $$;
-- Every change of state but a claim: outcomes, rescues, promotions.
CREATE TRIGGER chaos_transition_ledger
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND NOT (OLD.state = 'available' AND NEW.state = 'running'))
    EXECUTE FUNCTION chaos_record_transition();
"""


def long_form() -> bool:
    """``AWA_CHAOS=long`` (``make chaos``) asks for the long form."""
    return os.environ.get("AWA_CHAOS", "short").lower() == "long"


def chaos_marks() -> list[pytest.MarkDecorator]:
    """The marks of every scenario module: ``chaos`` and a timeout for its form."""
    return [
        pytest.mark.chaos,
        pytest.mark.timeout(LONG_TIMEOUT_S if long_form() else SHORT_TIMEOUT_S),
    ]


def worker_settings(**overrides: Any) -> dict[str, Any]:
    """Quick maintenance, and a leader lease where the worker has one."""
    settings: dict[str, Any] = {**FAST_WORKER}
    if "leader_lease" in {f.name for f in fields(awa.WorkerConfig)}:
        settings["leader_lease"] = LEADER_LEASE_S
    settings.update(overrides)
    return settings


def leader_lease_s(settings: dict[str, Any]) -> float:
    """The lease the scenario's leadership bound is based on (the spec's
    value where this worker does not know the setting yet)."""
    return float(settings.get("leader_lease", LEADER_LEASE_S))


# ── the scenario's own connections ──────────────────────────────────────


class Observer:
    """A connection for arranging and auditing that re-opens itself after a
    fault (a restart, a termination) and retries the statement. Callers
    take turns (one statement at a time on one connection)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: asyncpg.Connection | None = None
        self._turn = asyncio.Lock()

    async def connect(self) -> None:
        """Opens the connection now (so its pid is known)."""
        async with self._turn:
            await self._connection()

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await _connect(self.url)
        return self._conn

    @property
    def pid(self) -> int | None:
        conn = self._conn
        return conn.get_server_pid() if conn is not None and not conn.is_closed() else None

    async def run(self, use: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        async with self._turn:
            while True:
                try:
                    return await use(await self._connection())
                except CONNECTION_ERRORS:
                    if time.monotonic() > deadline:
                        raise
                    self._drop()
                    await asyncio.sleep(0.05)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        return await self.run(lambda conn: conn.fetch(query, *args))

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.run(lambda conn: conn.fetchval(query, *args))

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.run(lambda conn: conn.execute(query, *args))

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await conn.close(timeout=2)


def _die_with_parent() -> None:
    """In a worker before exec: SIGKILL when the test process dies (Linux),
    so no worker outlives an interrupted run."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _local_tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets process ``pid`` holds (Linux /proc)."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return set()
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                columns = line.split()
                if columns[9] in inodes:
                    ports.add(int(columns[1].rsplit(":", 1)[1], 16))
    return ports


async def _connect(url: str) -> asyncpg.Connection:
    deadline = time.monotonic() + RECONNECT_TIMEOUT_S
    while True:
        try:
            return await asyncpg.connect(url, timeout=5)
        except CONNECTION_ERRORS:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# ── the fleet ────────────────────────────────────────────────────────────


@dataclass
class WorkerProcess:
    """One ``awa worker`` CLI process."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    worker_id: int | None = None
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def log_tail(self) -> str:
        """The first error the worker logged, if any, and its last lines."""
        try:
            lines = self.log_path.read_text(errors="replace").rstrip().splitlines()
        except OSError as error:
            return f"(no log: {error})"
        errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
        first = f"first error: {errors[0]}\n" if errors else ""
        return first + ("\n".join(lines[-LOG_TAIL_LINES:]) or "(empty)")


class Fleet:
    """Worker processes of one scenario, started and stopped by it alone."""

    def __init__(self, observer: Observer, environment: dict[str, str], work_dir: Path) -> None:
        self._observer = observer
        self._environment = environment
        self._work_dir = work_dir
        self.workers: list[WorkerProcess] = []
        self._count = 0

    def live(self) -> list[WorkerProcess]:
        """Workers running and registered."""
        return [w for w in self.workers if w.alive and w.worker_id is not None]

    async def spawn(self) -> WorkerProcess:
        """Starts one worker; returns once it has registered."""
        self._count += 1
        name = f"worker-{self._count}"
        log_path = self._work_dir / f"{name}.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "awa",
                "worker",
                "--app",
                "tests.chaos.app:client",
                "--queue",
                f"{QUEUE}={SLOTS}",
                "--shutdown-timeout",
                "5",
                cwd=ROOT,
                env=self._environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                preexec_fn=_die_with_parent,
            )
        worker = WorkerProcess(name, process, log_path)
        self.workers.append(worker)
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while worker.worker_id is None:
            if not worker.alive:
                raise AssertionError(
                    f"{name} exited with status {process.returncode} before it registered; "
                    f"its log ends:\n{worker.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{name} did not register within {WORKER_START_TIMEOUT_S:.0f} s; "
                    f"its log ends:\n{worker.log_tail()}"
                )
            worker.worker_id = await self._observer.fetchval(
                "SELECT max(id) FROM awa.workers WHERE pid = $1 AND hostname = $2",
                worker.pid,
                socket.gethostname(),
            )
            if worker.worker_id is None:
                await asyncio.sleep(0.05)
        return worker

    async def stop_all(self) -> dict[str, int | None]:
        """SIGTERM to every live worker, SIGKILL after the timeout; exit codes."""
        for worker in self.workers:
            if worker.alive:
                worker.process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for worker in self.workers:
            try:
                await asyncio.wait_for(worker.process.wait(), WORKER_STOP_TIMEOUT_S)
            except TimeoutError:
                worker.process.kill()
                await worker.process.wait()
                codes[worker.name] = None  # did not stop on SIGTERM
                continue
            codes[worker.name] = worker.process.returncode
        return codes


# ── the workload ─────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Workload:
    """What a scenario inserts, and how long it waits for it to settle."""

    jobs: int
    insert_s: float
    workers: int = 3
    #: Shares of the jobs (the rest is plain work that completes).
    retry_once: float = 0.05
    terminal: float = 0.03
    scheduled: float = 0.03
    triggers: float = 0.10
    #: Handlers running at once across the fleet, on average: each job
    #: sleeps up to twice the time that takes at the insert rate.
    in_flight: float = 30.0
    batches_per_s: float = 10.0
    settle_s: float = 90.0
    stall_s: float = 15.0
    seed: int = 9

    def expected(self) -> list[tuple[str, int, str, Any, float | None]]:
        """(kind, seq, expected final state, args, seconds ahead to run) per job."""
        rng = random.Random(self.seed)
        max_sleep_ms = 2000 * self.in_flight * self.insert_s / max(1, self.jobs)
        plan: list[tuple[str, int, str, Any, float | None]] = []
        for seq in range(self.jobs):
            draw = rng.random()
            sleep_ms = round(rng.uniform(0, max_sleep_ms), 2)
            ahead = rng.uniform(0.3, 3.0) if rng.random() < self.scheduled else None
            bounds = (self.triggers / 2, self.triggers, self.triggers + self.retry_once)
            if draw < bounds[0]:
                plan.append(
                    (
                        SPEC_TRIGGER,
                        seq,
                        "completed",
                        ChaosSpecTrigger(seq=seq, sleep_ms=sleep_ms),
                        ahead,
                    )
                )
            elif draw < bounds[1]:
                args: Any = ChaosStagedTrigger(seq=seq, sleep_ms=sleep_ms)
                plan.append((STAGED_TRIGGER, seq, "completed", args, ahead))
            elif draw < bounds[2]:
                args = ChaosWork(seq=seq, sleep_ms=sleep_ms, outcome="retry_once")
                plan.append((WORK, seq, "completed", args, ahead))
            elif draw < bounds[2] + self.terminal:
                args = ChaosWork(seq=seq, sleep_ms=sleep_ms, outcome="terminal")
                plan.append((WORK, seq, "failed", args, ahead))
            else:
                args = ChaosWork(seq=seq, sleep_ms=sleep_ms)
                plan.append((WORK, seq, "completed", args, ahead))
        return plan


class Inserter:
    """Inserts the plan in batches at a steady rate, through awa's
    ``insert_many`` on a connection of its own; a batch whose outcome a
    fault hid is looked up before it is sent again, so each job is inserted
    exactly once."""

    def __init__(self, url: str, workload: Workload) -> None:
        self._url = url
        self._workload = workload
        self.client = awa.AsyncClient(url)
        self._conn: asyncpg.Connection | None = None
        self.inserted = 0
        self.retried_batches = 0

    @property
    def pid(self) -> int | None:
        conn = self._conn
        return conn.get_server_pid() if conn is not None and not conn.is_closed() else None

    async def run(self) -> None:
        plan = self._workload.expected()
        batches = max(1, round(self._workload.insert_s * self._workload.batches_per_s))
        size = -(-len(plan) // batches)
        started = time.monotonic()
        for number, first in enumerate(range(0, len(plan), size)):
            due = started + number / self._workload.batches_per_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self._insert(plan[first : first + size])

    async def _insert(self, batch: Sequence[tuple[str, int, str, Any, float | None]]) -> None:
        jobs = [args for _, _, _, args, _ in batch]
        opts = [
            {"run_at": datetime.timedelta(seconds=ahead)} if ahead is not None else None
            for *_, ahead in batch
        ]
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        while True:
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await _connect(self._url)
                    if await self._committed(batch):
                        break
                await self.client.insert_many(
                    jobs, queue=QUEUE, max_crashes=MAX_CRASHES, opts=opts, connection=self._conn
                )
                break
            except CONNECTION_ERRORS:
                if time.monotonic() > deadline:
                    raise
                self.retried_batches += 1
                if self._conn is not None:
                    self._conn.terminate()
                    self._conn = None
                await asyncio.sleep(0.05)
        self.inserted += len(batch)

    async def _committed(self, batch: Sequence[tuple[str, int, str, Any, float | None]]) -> bool:
        assert self._conn is not None
        seqs = [seq for _, seq, *_ in batch]
        found = await self._conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE kind <> $1 AND (args->>'seq')::int = ANY($2)",
            FOLLOW_UP,
            seqs,
        )
        if found not in (0, len(seqs)):
            raise AssertionError(f"a batch was inserted in part: {found} of {len(seqs)} jobs")
        return bool(found)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self._conn.close(timeout=2)
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.client.close()


# ── faults and the report ────────────────────────────────────────────────


@dataclass
class Fault:
    """One fault, when it struck (unix time), the attempts running then (job
    id, run lease), and the workers expected to carry on after it."""

    what: str
    at: float
    held: list[tuple[int, int]]
    resuming_pids: list[int]
    offset_s: float = 0.0
    next_outcome_s: float | None = None
    workers_resumed_s: float | None = None
    held_released_s: float | None = None
    held_finished_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def held_ids(self) -> list[int]:
        return [job_id for job_id, _ in self.held]

    @property
    def recovery_s(self) -> float | None:
        """Seconds until every worker resumed and every held job was released."""
        parts = [self.workers_resumed_s if self.resuming_pids else 0.0]
        parts.append(self.held_released_s if self.held else 0.0)
        return None if any(part is None for part in parts) else max(p or 0.0 for p in parts)

    def describe(self) -> str:
        def seconds(value: float | None) -> str:
            return "never" if value is None else f"{value:.2f}s"

        text = (
            f"{self.what} at +{self.offset_s:.1f}s: held {len(self.held)}, "
            f"next outcome {seconds(self.next_outcome_s)}, "
            f"workers resumed {seconds(self.workers_resumed_s) if self.resuming_pids else '-'}, "
            f"held released {seconds(self.held_released_s) if self.held else '-'}, "
            f"held finished {seconds(self.held_finished_s) if self.held else '-'}"
        )
        for key, value in self.extra.items():
            text += f", {key} {seconds(value) if isinstance(value, float | None) else value}"
        return text


@dataclass
class Report:
    """What a scenario found; :meth:`problems` lists what breaks the rules."""

    scenario: str
    form: str
    jobs: int = 0
    follow_ups: int = 0
    lost: int = 0
    applied_twice: int = 0
    wrong_state: int = 0
    follow_up_errors: int = 0
    stale_outcomes: int = 0
    leases_reused: int = 0
    runs: int = 0
    jobs_run_more_than_once: int = 0
    rescued: int = 0
    elapsed_s: float = 0.0
    stop_s: float = 0.0
    audit_s: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    worker_exit_codes: dict[str, int | None] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)
    settle_failure: str | None = None
    #: What a scenario's own checks found (e.g. maintenance resumed too late).
    scenario_problems: list[str] = field(default_factory=list)

    @property
    def max_recovery_s(self) -> float | None:
        values = [fault.recovery_s for fault in self.faults]
        return None if not values or None in values else max(v or 0.0 for v in values)

    def problems(self) -> list[str]:
        found = []
        if self.settle_failure:
            found.append(self.settle_failure)
        if self.lost:
            found.append(f"{self.lost} jobs lost (missing, or never finished)")
        if self.applied_twice:
            found.append(f"{self.applied_twice} jobs had an outcome applied twice")
        if self.wrong_state:
            found.append(f"{self.wrong_state} jobs ended in a state other than expected")
        if self.stale_outcomes:
            found.append(f"{self.stale_outcomes} outcomes came from a stale or unknown attempt")
        if self.leases_reused:
            found.append(f"{self.leases_reused} run leases were handed out twice for one job")
        if self.follow_up_errors:
            found.append(f"{self.follow_up_errors} triggers without exactly one follow-up")
        return found + self.scenario_problems

    def summary(self) -> str:
        recovery = self.max_recovery_s
        lines = [
            f"{self.scenario} [{self.form}]: {self.jobs} jobs + {self.follow_ups} follow-ups in "
            f"{self.elapsed_s:.1f}s (then {self.stop_s:.1f}s to stop the workers, "
            f"{self.audit_s:.1f}s to audit); lost {self.lost}, applied twice {self.applied_twice}, "
            f"wrong state {self.wrong_state}, stale outcomes {self.stale_outcomes}, leases reused "
            f"{self.leases_reused}, follow-up "
            f"errors {self.follow_up_errors}; {self.runs} runs ({self.jobs_run_more_than_once} "
            f"jobs ran more than once, {self.rescued} rescues); max recovery "
            + ("never" if recovery is None else f"{recovery:.2f}s"),
        ]
        lines += [f"    {fault.describe()}" for fault in self.faults]
        if self.worker_exit_codes:
            codes = ", ".join(f"{k}={v}" for k, v in self.worker_exit_codes.items())
            lines.append(f"    worker exit codes (-9: killed; None: ignored SIGTERM): {codes}")
        lines += [f"    PROBLEM: {problem}" for problem in self.scenario_problems]
        if self.settle_failure:
            lines.append(f"    NOT SETTLED: {self.settle_failure}")
        lines += [f"    {detail}" for detail in self.details]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["max_recovery_s"] = self.max_recovery_s
        data["passed"] = not self.problems()
        data["faults"] = [{**asdict(f), "recovery_s": f.recovery_s} for f in self.faults]
        return data


# ── the run ──────────────────────────────────────────────────────────────


class ChaosRun:
    """One scenario's run; see the module docstring. Use :func:`chaos_run`."""

    def __init__(
        self,
        server: EmbeddedPostgres,
        scenario: str,
        workload: Workload,
        *,
        worker_url: str | None = None,
        worker_env: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
        work_dir: Path,
    ) -> None:
        self.server = server
        self.url = server.url
        self.workload = workload
        self.settings = settings if settings is not None else worker_settings()
        self.observer = Observer(self.url)
        self.inserter = Inserter(self.url, workload)
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "AWA_CHAOS_DATABASE_URL": worker_url or self.url,
            "AWA_CHAOS_WORKER": json.dumps(self.settings),
            "AWA_CHAOS_RUNS_DIR": str(work_dir),
            **(worker_env or {}),
        }
        environment.pop("AWA_DATABASE_URL", None)
        self.work_dir = work_dir
        self.fleet = Fleet(self.observer, environment, work_dir)
        self.report = Report(scenario, "long" if long_form() else "short")
        self.started_at = 0.0
        self._insert_task: asyncio.Task[None] | None = None
        self._spawns: list[asyncio.Task[WorkerProcess]] = []
        self._probes: list[tuple[str, int, str]] = []

    async def open(self) -> None:
        await self.observer.execute(LEDGER_SQL)
        await asyncio.gather(*(self.fleet.spawn() for _ in range(self.workload.workers)))
        self.started_at = time.time()
        self._insert_task = asyncio.create_task(self.inserter.run())

    @property
    def elapsed_s(self) -> float:
        return time.time() - self.started_at

    async def sleep_until(self, offset_s: float) -> None:
        """Sleeps until ``offset_s`` seconds after the workload started."""
        await asyncio.sleep(max(0.0, offset_s - self.elapsed_s))
        self._check_inserter()

    def _check_inserter(self) -> None:
        task = self._insert_task
        if task is not None and task.done() and task.exception() is not None:
            raise AssertionError("the inserter failed") from task.exception()

    async def running_jobs(self, worker: WorkerProcess | None = None) -> list[tuple[int, int]]:
        """(job id, run lease) of the attempts running now (under ``worker``)."""
        rows = await self.observer.fetch(
            "SELECT id, run_lease FROM awa.jobs WHERE state = 'running' "
            "AND ($1::bigint IS NULL OR worker_id = $1)",
            None if worker is None else worker.worker_id,
        )
        return [(row["id"], row["run_lease"]) for row in rows]

    def _record(self, fault: Fault) -> Fault:
        fault.offset_s = fault.at - self.started_at
        self.report.faults.append(fault)
        return fault

    # ── faults ──

    async def kill_worker(
        self, victim: WorkerProcess, *, replace: bool = True, what: str = "kill -9 of a worker"
    ) -> Fault:
        """SIGKILL; the fault's held jobs are those the victim was running.
        With ``replace``, a new worker is started at once."""
        at = time.time()
        victim.process.kill()
        victim.killed = True
        await victim.process.wait()
        fault = self._record(Fault(what, at, await self.running_jobs(victim), []))
        if replace:
            self._spawns.append(asyncio.create_task(self.fleet.spawn()))
        return fault

    async def restart_server(self, mode: str) -> Fault:
        """``pg_ctl restart -m fast|immediate`` of the scenario's server."""
        # Stamped before the jobs running are read, so none finishes between.
        at = time.time()
        held = await self.running_jobs()
        resuming = [worker.pid for worker in self.fleet.live()]
        await asyncio.to_thread(self.server.restart, mode)
        fault = self._record(Fault(f"restart -m {mode}", at, held, resuming))
        fault.extra["server down"] = time.time() - at
        return fault

    async def terminate_connections(self) -> Fault:
        """``pg_terminate_backend`` of every backend of the database but the
        scenario's own connections."""
        await self.observer.connect()
        own = [pid for pid in (self.observer.pid, self.inserter.pid) if pid is not None]
        resuming = [worker.pid for worker in self.fleet.live()]
        at = time.time()  # before the jobs running are read, so none finishes between
        held = await self.running_jobs()
        terminated = await self.observer.fetchval(
            """SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> ALL($1::int[])
                 AND backend_type = 'client backend'""",
            own,
        )
        fault = self._record(Fault("all connections terminated", at, held, resuming))
        fault.extra["backends"] = terminated
        return fault

    async def freeze_worker(self, victim: WorkerProcess, *, what: str) -> Fault:
        """SIGSTOP: the process keeps its connections (and any session lock)
        but does nothing; :meth:`thaw_worker` lets it go on."""
        at = time.time()
        os.kill(victim.pid, signal.SIGSTOP)
        return self._record(Fault(what, at, await self.running_jobs(victim), []))

    async def thaw_worker(self, victim: WorkerProcess) -> None:
        os.kill(victim.pid, signal.SIGCONT)

    # ── maintenance ──

    async def leader(self) -> WorkerProcess | None:
        """The live worker that holds maintenance leadership now: the holder
        of an unexpired ``awa.leaders`` row, else of the leader's session
        advisory lock (found through its connection's client port)."""
        live = {worker.worker_id: worker for worker in self.fleet.live()}
        rows = await self.observer.fetch(
            """SELECT worker_id FROM awa.leaders WHERE expires_at > now()"""
            if await self.observer.fetchval("SELECT to_regclass('awa.leaders') IS NOT NULL")
            else "SELECT NULL::bigint AS worker_id WHERE false"
        )
        for row in rows:
            if row["worker_id"] in live:
                return live[row["worker_id"]]
        ports = await self.observer.fetch(
            """SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                 AND a.datname = current_database()
                 AND ((l.classid::bigint << 32) | l.objid::bigint) = $1""",
            LEADER_LOCK_KEY,
        )
        for row in ports:
            for worker in live.values():
                if row["client_port"] in _local_tcp_ports(worker.pid):
                    return worker
        return None

    async def wait_for_leader(self, *, holding_jobs: bool, timeout: float = 15.0) -> WorkerProcess:
        """The leader, once there is one (running jobs, with ``holding_jobs``)."""
        deadline = time.monotonic() + timeout
        while True:
            leader = await self.leader()
            if leader is not None and (not holding_jobs or await self.running_jobs(leader)):
                return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader{' holding jobs' if holding_jobs else ''} found")
            await asyncio.sleep(0.02)

    async def insert_probes(self, count: int, due_in_s: float) -> list[int]:
        """Scheduled jobs due ``due_in_s`` from now: only a maintenance
        leader makes them available. Audited like the workload."""
        first = self.workload.jobs + len(self._probes)
        args = [ChaosWork(seq=seq) for seq in range(first, first + count)]
        self._probes.extend((WORK, job.seq, "completed") for job in args)
        jobs = await self.observer.run(
            lambda conn: self.inserter.client.insert_many(
                args,
                queue=QUEUE,
                max_crashes=MAX_CRASHES,
                run_at=datetime.timedelta(seconds=due_in_s),
                connection=conn,
            )
        )
        return [job.id for job in jobs]

    async def seconds_until_all(
        self, ids: Sequence[int], after: float, condition: str
    ) -> float | None:
        """Seconds from ``after`` (unix time) until each job in ``ids`` had its
        first transition matching ``condition`` (SQL on chaos_transitions
        ``t``), 0 for one before; None if one never had such a transition."""
        return await self.observer.fetchval(
            f"""SELECT CASE WHEN bool_and(first IS NOT NULL)
                            THEN greatest(0, extract(epoch FROM max(first))::float8 - $1) END
                FROM (SELECT h.id, min(t.at) AS first FROM unnest($2::bigint[]) AS h(id)
                      LEFT JOIN chaos_transitions t ON t.job_id = h.id AND ({condition})
                      GROUP BY h.id) AS firsts""",
            after,
            list(ids),
        )

    async def left_alone(self, ids: Sequence[int], after: float, grace_s: float) -> list[int]:
        """Of ``ids`` (jobs a worker held at ``after``), those it did not
        finish itself in the ``grace_s`` after: a write it had in flight as
        it was stopped can still commit, and such a job needs no rescue."""
        rows = await self.observer.fetch(
            """SELECT h.id FROM unnest($1::bigint[]) AS h(id)
               WHERE NOT EXISTS (
                   SELECT 1 FROM chaos_transitions t
                   WHERE t.job_id = h.id AND t.old_state = 'running'
                     AND NOT (t.new_state = 'retryable' AND t.crashes > 0)
                     AND extract(epoch FROM t.at)::float8 < $2::float8 + $3::float8)""",
            list(ids),
            after,
            grace_s,
        )
        return [row["id"] for row in rows]

    # ── the end ──

    async def finish(self) -> Report:
        """Waits for the inserts, replacements and settling; stops the
        workers; audits. Returns the report (see :meth:`Report.problems`)."""
        assert self._insert_task is not None
        await self._insert_task
        for spawn in self._spawns:
            await spawn
        try:
            await self._settle()
        except AssertionError as failure:
            self.report.settle_failure = str(failure)
        self.report.elapsed_s = self.elapsed_s
        mark = time.monotonic()
        self.report.worker_exit_codes = await self.fleet.stop_all()
        self.report.stop_s = time.monotonic() - mark
        mark = time.monotonic()
        await self._load_ledgers()
        await self._audit()
        await self._measure()
        self.report.audit_s = time.monotonic() - mark
        return self.report

    async def _settle(self) -> None:
        deadline = time.monotonic() + self.workload.settle_s
        last_change, last_seen = time.monotonic(), None
        while True:
            row = await self.observer.run(
                lambda conn: conn.fetchrow(
                    """SELECT count(*) FILTER (WHERE state::text <> ALL($1)) AS open,
                              count(*) FILTER (WHERE state IN ('scheduled', 'retryable')
                                   AND run_at > now() - interval '2 seconds') AS waiting,
                              count(*) FILTER (WHERE kind <> $2) AS inserted,
                              (SELECT count(*) FROM chaos_transitions) AS transitions
                       FROM awa.jobs""",
                    list(FINAL_STATES),
                    FOLLOW_UP,
                )
            )
            if row["open"] == 0 and row["inserted"] >= self.workload.jobs:
                return
            now = time.monotonic()
            if row["transitions"] != last_seen:
                last_change, last_seen = now, row["transitions"]
            stalled = now - last_change > self.workload.stall_s and row["waiting"] == 0
            if stalled or now > deadline:
                why = (
                    f"nothing happened for {self.workload.stall_s:.0f}s"
                    if stalled
                    else f"not settled within {self.workload.settle_s:.0f}s"
                )
                raise AssertionError(f"{why}: {await self._diagnose()}")
            await asyncio.sleep(0.25)

    async def _diagnose(self) -> str:
        states = await self.observer.fetch(
            "SELECT state::text, count(*) FROM awa.jobs GROUP BY 1 ORDER BY 1"
        )
        running = await self.observer.fetch(
            """SELECT j.worker_id, count(*) AS jobs, w.pid,
                      extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age
               FROM awa.jobs j LEFT JOIN awa.workers w ON w.id = j.worker_id
               WHERE j.state = 'running' GROUP BY j.worker_id, w.pid, w.heartbeat_at"""
        )
        by_pid = {worker.pid: worker for worker in self.fleet.workers}
        lines = [", ".join(f"{row['state']} {row['count']}" for row in states)]
        for row in running:
            worker = by_pid.get(row["pid"])
            status = "unknown process"
            if worker is not None:
                status = f"{worker.name}, " + ("alive" if worker.alive else "dead")
            age = row["heartbeat_age"]
            heartbeat = "no worker row" if age is None else f"heartbeat {age:.1f}s ago"
            lines.append(
                f"{row['jobs']} running under worker {row['worker_id']} ({status}, {heartbeat})"
            )
        for worker in self.fleet.workers:
            if worker.alive:
                lines.append(f"log of {worker.name} (pid {worker.pid}) ends:\n{worker.log_tail()}")
        return "\n".join(lines)

    async def _load_ledgers(self) -> None:
        records = []
        for path in sorted(self.work_dir.glob("runs-*.txt")):
            for line in path.read_text().splitlines():
                job_id, lease, pid, started = line.split()
                records.append((int(job_id), int(lease), int(pid), float(started)))
        await self.observer.run(
            lambda conn: conn.copy_records_to_table("chaos_runs", records=records)
        )
        expected = [(kind, seq, state) for kind, seq, state, _, _ in self.workload.expected()]
        expected += self._probes
        await self.observer.run(
            lambda conn: conn.copy_records_to_table("chaos_expected", records=expected)
        )

    async def _audit(self) -> None:
        report, fetchval = self.report, self.observer.fetchval
        report.jobs = await fetchval("SELECT count(*) FROM awa.jobs WHERE kind <> $1", FOLLOW_UP)
        report.follow_ups = await fetchval(
            "SELECT count(*) FROM awa.jobs WHERE kind = $1", FOLLOW_UP
        )
        report.runs = await fetchval("SELECT count(*) FROM chaos_runs")
        report.jobs_run_more_than_once = await fetchval(
            "SELECT count(*) FROM (SELECT job_id FROM chaos_runs GROUP BY 1 HAVING count(*) > 1) r"
        )
        report.rescued = await fetchval(
            "SELECT count(*) FROM chaos_transitions WHERE old_state = 'running' AND "
            "new_state = 'retryable' AND crashes > 0"
        )
        await self._count(
            "lost",
            # Inserted jobs that are missing, inserted twice, or never finished.
            """SELECT e.kind, e.seq, count(j.id) AS rows, array_agg(j.state::text) AS states
               FROM chaos_expected e
               LEFT JOIN awa.jobs j ON j.kind = e.kind AND (j.args->>'seq')::int = e.seq
               GROUP BY e.kind, e.seq
               HAVING count(j.id) <> 1 OR bool_or(j.state::text <> ALL($1))
            UNION ALL
               SELECT kind, NULL, 1, ARRAY[state::text] FROM awa.jobs
               WHERE kind = $2 AND state::text <> ALL($1)""",
            list(FINAL_STATES),
            FOLLOW_UP,
        )
        await self._count(
            "wrong_state",
            """SELECT j.id, j.kind, j.state::text AS state, e.state AS expected, j.errors
               FROM awa.jobs j
               LEFT JOIN chaos_expected e ON e.kind = j.kind AND e.seq = (j.args->>'seq')::int
               WHERE j.state::text = ANY($1)
                 AND j.state::text <> coalesce(e.state, 'completed')""",
            list(FINAL_STATES),
        )
        await self._count(
            "applied_twice",
            # A job that reached a final state more than once, or an attempt
            # that left 'running' more than once.
            """SELECT job_id, array_agg(old_state || '→' || new_state || '@' || run_lease
                                      ORDER BY at) AS transitions
               FROM chaos_transitions GROUP BY job_id
               HAVING count(*) FILTER (WHERE new_state = ANY($1)) > 1
                   OR EXISTS (SELECT 1 FROM chaos_transitions t
                              WHERE t.job_id = chaos_transitions.job_id AND t.old_state = 'running'
                              GROUP BY t.run_lease HAVING count(*) > 1)""",
            list(FINAL_STATES),
        )
        await self._count(
            "stale_outcomes",
            # An outcome that finished a job must be its last attempt's, and
            # of a run a handler really began.
            """SELECT t.job_id, t.run_lease, j.run_lease AS last_lease, t.new_state
               FROM chaos_transitions t JOIN awa.jobs j ON j.id = t.job_id
               WHERE t.old_state = 'running' AND t.new_state = ANY($1)
                 AND (t.run_lease <> j.run_lease OR NOT EXISTS (
                      SELECT 1 FROM chaos_runs r
                      WHERE r.job_id = t.job_id AND r.run_lease = t.run_lease))""",
            list(FINAL_STATES),
        )
        await self._count(
            "leases_reused",
            # Two runs of one job under one lease: a claim handed it out twice.
            """SELECT job_id, run_lease, array_agg(pid) AS pids FROM chaos_runs
               GROUP BY job_id, run_lease HAVING count(*) > 1""",
        )
        await self._count(
            "follow_up_errors",
            """SELECT t.id, t.kind, t.state::text AS state, count(f.id) AS follow_ups,
                      array_agg(f.args->>'via') AS via
               FROM awa.jobs t
               LEFT JOIN awa.jobs f ON f.kind = $1 AND (f.args->>'trigger_id')::bigint = t.id
               WHERE t.kind IN ($2, $3)
               GROUP BY t.id
               HAVING count(f.id) <> CASE WHEN t.state = 'completed' THEN 1 ELSE 0 END
                   OR bool_or(f.args->>'via' <> CASE t.kind WHEN $2 THEN 'spec' ELSE 'staged' END)
            UNION ALL
               SELECT f.id, f.kind, f.state::text, 0, ARRAY[f.args->>'via'] FROM awa.jobs f
               WHERE f.kind = $1 AND NOT EXISTS (
                   SELECT 1 FROM awa.jobs t WHERE t.id = (f.args->>'trigger_id')::bigint
                     AND t.kind IN ($2, $3) AND t.state = 'completed')""",
            FOLLOW_UP,
            SPEC_TRIGGER,
            STAGED_TRIGGER,
        )

    async def _count(self, name: str, query: str, *args: Any) -> None:
        rows = await self.observer.fetch(query, *args)
        setattr(self.report, name, len(rows))
        if rows:
            sample = "; ".join(str(dict(row)) for row in rows[:5])
            self.report.details.append(f"{name}: {len(rows)}, e.g. {sample}")

    async def _measure(self) -> None:
        for fault in self.report.faults:
            fault.next_outcome_s = await self.observer.fetchval(
                """SELECT extract(epoch FROM min(at))::float8 - $1 FROM chaos_transitions
                   WHERE at > to_timestamp($1) AND old_state = 'running'""",
                fault.at,
            )
            if fault.resuming_pids:
                # Each worker's first completion of a run it began after the fault.
                firsts = await self.observer.fetch(
                    """SELECT r.pid, extract(epoch FROM min(t.at))::float8 - $1 AS seconds
                       FROM chaos_runs r JOIN chaos_transitions t
                         ON t.job_id = r.job_id AND t.run_lease = r.run_lease
                       WHERE r.started_at > $1 AND r.pid = ANY($2::int[])
                         AND t.old_state = 'running' AND t.new_state = 'completed'
                       GROUP BY r.pid""",
                    fault.at,
                    fault.resuming_pids,
                )
                resumed = {row["pid"]: row["seconds"] for row in firsts}
                fault.workers_resumed_s = (
                    max(resumed.values()) if set(resumed) >= set(fault.resuming_pids) else None
                )
            if fault.held:
                # The first transition of each held attempt, or of a later one
                # (an outcome written at the fault may carry a time just
                # before it: the trigger's clock runs before the commit).
                row = await self.observer.run(
                    lambda conn, fault=fault: conn.fetchrow(
                        """WITH firsts AS (
                               SELECT h.id,
                                      min(t.at) FILTER (WHERE t.old_state = 'running') AS released,
                                      min(t.at) FILTER (WHERE t.new_state = ANY($4)) AS finished
                               FROM unnest($2::bigint[], $3::bigint[]) AS h(id, lease)
                               LEFT JOIN chaos_transitions t
                                 ON t.job_id = h.id AND t.run_lease >= h.lease
                               GROUP BY h.id)
                           SELECT CASE WHEN bool_and(released IS NOT NULL) THEN greatest(0,
                                       extract(epoch FROM max(released))::float8 - $1) END
                                      AS released,
                                  CASE WHEN bool_and(finished IS NOT NULL) THEN greatest(0,
                                       extract(epoch FROM max(finished))::float8 - $1) END
                                      AS finished
                           FROM firsts""",
                        fault.at,
                        fault.held_ids,
                        [lease for _, lease in fault.held],
                        list(FINAL_STATES),
                    )
                )
                fault.held_released_s, fault.held_finished_s = row["released"], row["finished"]
                if fault.held_released_s is None:
                    stuck = await self.observer.fetch(
                        """SELECT j.id, j.state::text, j.run_lease, j.crashes,
                                  (SELECT array_agg(t.old_state || '→' || t.new_state || ' @' ||
                                          round((extract(epoch FROM t.at) - $1)::numeric, 2))
                                   FROM chaos_transitions t WHERE t.job_id = j.id) AS transitions
                           FROM awa.jobs j WHERE j.id = ANY($2::bigint[]) AND NOT EXISTS (
                               SELECT 1 FROM chaos_transitions t WHERE t.job_id = j.id
                                 AND t.at > to_timestamp($1) AND t.old_state = 'running')
                           LIMIT 5""",
                        fault.at,
                        fault.held_ids,
                    )
                    sample = "; ".join(str(dict(job)) for job in stuck)
                    self.report.details.append(f"never released after {fault.what}: {sample}")

    async def close(self) -> None:
        for spawn in self._spawns:
            spawn.cancel()
        if self._insert_task is not None and not self._insert_task.done():
            self._insert_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._insert_task
        for worker in self.fleet.workers:
            if worker.alive:
                worker.process.kill()
                await worker.process.wait()
        await self.inserter.close()
        await self.observer.close()


@contextlib.asynccontextmanager
async def chaos_run(
    server: EmbeddedPostgres, scenario: str, workload: Workload, **options: Any
) -> AsyncIterator[ChaosRun]:
    """A started :class:`ChaosRun`, cleaned up afterwards (workers killed if
    still running, the scenario's directory removed)."""
    work_dir = Path(tempfile.mkdtemp(prefix="awa-chaos-"))
    run = ChaosRun(server, scenario, workload, work_dir=work_dir, **options)
    try:
        await run.open()
        yield run
    finally:
        await run.close()
        shutil.rmtree(work_dir, ignore_errors=True)


async def conclude(
    run: ChaosRun,
    publish: Callable[[Report], None],
    measure: Callable[[Report], Awaitable[list[str]]] | None = None,
) -> Report:
    """Finishes the run, adds what ``measure`` finds to its problems,
    publishes the report, and fails on any problem."""
    report = await run.finish()
    if measure is not None:
        report.scenario_problems.extend(await measure(report))
    publish(report)
    problems = report.problems()
    assert not problems, "\n".join([*problems, report.summary()])
    return report
