"""Several worker processes from one command: ``awa worker --processes N``.

Overview: one worker process runs one asyncio loop, so a box with several
cores runs several processes. :func:`run_children` supervises ``N`` slots,
each holding one child process that runs the same ``awa worker`` command
with ``--processes 1`` (an ordinary worker, with its own connections, its
own capacity and its own row in ``awa.workers``). The parent forwards
SIGINT and SIGTERM to the children, restarts a child that dies, kills and
restarts one that is wedged, and reports each child's health. The children
share nothing but the database: they claim with ``SKIP LOCKED`` like
workers on separate hosts, and one of them at a time wins the maintenance
lease.

State model, per slot: ``starting`` (its child runs but has not been seen
healthy) → ``serving`` (its row in ``awa.workers`` beat within the
staleness) → the child exits without being asked (a signal, any status,
even 0) → ``backing off`` (a wait of :data:`RESTART_BACKOFF_INITIAL_S`
doubling up to :data:`RESTART_BACKOFF_MAX_S`, less up to
:data:`RESTART_BACKOFF_JITTER` of it at random; it starts from the first
delay again once a child ran :data:`STABLE_AFTER_S`) → ``starting`` with a
new child. SIGINT or SIGTERM to the parent moves every slot to
``stopped``: each running child gets the signal and ``stop_timeout_s`` to
shut down gracefully, after which it is killed (its jobs are then rescued
like any dead worker's); a slot backing off starts nothing more.

Health: every :data:`HEALTH_INTERVAL_S` the parent reads ``awa.workers`` on
one connection of its own and matches each child's row by pid and host. A
child is healthy when its row beat within :data:`HEARTBEAT_STALENESS_S`. A
child whose process runs but that stays unhealthy for
:data:`WEDGED_AFTER_S` (or is not healthy :data:`START_TIMEOUT_S` after it
started) is wedged: it is killed with SIGKILL and restarted like a child
that died. When the database does not answer the parent says so and judges
nobody (the children cannot beat either); the judgement starts afresh when
it answers again. Every change of a slot's state is one log line.

Failure handling and the parent's exit status:

- 0: stopped by a signal, and every child running then stopped cleanly
  (exited 0, or died of the stop signal before it served). Children
  restarted earlier do not make it fail.
- 1 (:data:`EXIT_CHILD_FAILED`): a crash loop, a slot whose child failed
  :data:`CRASH_LOOP_LIMIT` times in a row without ever being seen healthy
  (where health is not judged, for want of a database URL: without running
  :data:`STABLE_AFTER_S`); the others are stopped gracefully, the slot and
  its last exit are named. Or a child that did not stop cleanly when
  asked. Or the supervisor's own tasks (a slot's restarts, the health
  watch) failed: nothing here dies quietly.
- 2 (``ExitCode.USAGE``): a child exited with status 2, a usage error that
  no restart can mend; the others are stopped gracefully.

The timings above are constants; :data:`TIMINGS_ENV` overrides them (for
tests, and for an operator who must), see :meth:`Timings.from_environment`.
Children run in a session of their own, so a Ctrl-C at a terminal reaches
the parent once and is forwarded once; on Linux each child also gets
SIGTERM should the parent die without forwarding anything
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import enum
import logging
import math
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg

from awa.config import DEFAULT_HEARTBEAT_STALENESS_S
from awa.connecting import connect_failure
from awa.db import Statement, terminate_quietly
from awa.errors import ConfigurationError

log = logging.getLogger("awa.processes")

#: Signals the parent passes on to its children.
FORWARDED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: Exit status of the parent after a crash loop, or when a child did not
#: stop cleanly when asked.
EXIT_CHILD_FAILED: Final = 1
#: A child's exit status that no restart can mend (the parent exits with
#: it): the CLI's ``ExitCode.USAGE``, written out so that the worker does
#: not import the command line above it (tests/unit/test_processes.py
#: checks the two agree).
EXIT_USAGE: Final = 2

#: The first wait before a dead child's slot starts a new one…
RESTART_BACKOFF_INITIAL_S: Final = 1.0
#: …doubling with each further death, up to this…
RESTART_BACKOFF_MAX_S: Final = 30.0
#: …less up to this fraction of it at random, so that children that died
#: together (a database restart) do not come back in step.
RESTART_BACKOFF_JITTER: Final = 0.25
#: A child that ran this long before it died restarts after the first wait.
STABLE_AFTER_S: Final = 60.0
#: Deaths in a row of a slot's children, none of them ever seen healthy,
#: that make a crash loop (the parent stops everything and exits 1).
CRASH_LOOP_LIMIT: Final = 5
#: How often the parent reads the children's heartbeats (each read,
#: connecting included, gets this long).
HEALTH_INTERVAL_S: Final = 5.0
#: A child is healthy while its row beat within this long (the workers'
#: default ``heartbeat_staleness``).
HEARTBEAT_STALENESS_S: Final = DEFAULT_HEARTBEAT_STALENESS_S
#: A child seen healthy that is then unhealthy this long, its process
#: running, is wedged: killed and restarted.
WEDGED_AFTER_S: Final = 30.0
#: A child not seen healthy this long after it started is wedged too.
START_TIMEOUT_S: Final = 60.0
#: Overrides the timings above: ``name=value,…`` (docs/cli.md).
TIMINGS_ENV: Final = "AWA_SUPERVISOR_TIMINGS"

_PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>
#: How a child ends that gets SIGINT or SIGTERM before it handles them:
#: killed by SIGTERM, or status 130 (the CLI's KeyboardInterrupt).
_DIED_OF_STOP_SIGNAL: Final = frozenset({-signal.SIGTERM, -signal.SIGINT, 130})


@dataclass(frozen=True, slots=True)
class Timings:
    """The supervisor's waits and limits (seconds, but for the count)."""

    backoff_initial_s: float = RESTART_BACKOFF_INITIAL_S
    backoff_max_s: float = RESTART_BACKOFF_MAX_S
    stable_after_s: float = STABLE_AFTER_S
    crash_loop_limit: int = CRASH_LOOP_LIMIT
    health_interval_s: float = HEALTH_INTERVAL_S
    staleness_s: float = HEARTBEAT_STALENESS_S
    wedged_after_s: float = WEDGED_AFTER_S
    start_timeout_s: float = START_TIMEOUT_S

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Timings:
        """The defaults, overridden by :data:`TIMINGS_ENV`
        (``backoff_initial_s=0.1,crash_loop_limit=3``); a name it does not
        know or a value that is not a positive number is a
        :class:`ConfigurationError` (a usage error, status 2)."""
        text = environ.get(TIMINGS_ENV, "").strip()
        if not text:
            return cls()
        known = {spec.name: spec for spec in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for item in text.split(","):
            name, sep, value = (part.strip() for part in item.partition("="))
            if name not in known or not sep:
                raise ConfigurationError(
                    f"{TIMINGS_ENV}: {item.strip()!r} is not name=value with a name of "
                    f"{', '.join(known)}"
                )
            values[name] = _timing(name, value, whole=known[name].type == "int")
        return cls(**values)


def _timing(name: str, text: str, *, whole: bool) -> float | int:
    try:
        value: float | int = int(text) if whole else float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        kind = "a whole number" if whole else "a number of seconds"
        raise ConfigurationError(f"{TIMINGS_ENV}: {name} must be {kind} above 0, got {text!r}")
    return value


class SlotState(enum.Enum):
    STARTING = "starting"
    SERVING = "serving"
    BACKING_OFF = "backing off"
    STOPPED = "stopped"


@dataclass(slots=True)
class Child:
    """One child worker process: its slot (1..N), for messages, and the process."""

    number: int
    process: asyncio.subprocess.Process
    started_at: float = field(default_factory=time.monotonic)
    #: Whether the parent asked it to stop (SIGINT or SIGTERM) before it exited.
    asked_to_stop: bool = False
    #: Whether the parent ever saw its row beat within the staleness.
    seen_healthy: bool = False
    #: Since when (monotonic) the parent, reading the database, has seen it unhealthy.
    unhealthy_since: float | None = None
    #: Whether the parent killed it as wedged.
    killed_as_wedged: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None


@dataclass(slots=True)
class Slot:
    """One of the ``N`` places a child runs in, and its history."""

    number: int
    child: Child
    state: SlotState = SlotState.STARTING
    restarts: int = 0
    #: The last judgement of its child (``None``: not judged, or the
    #: database did not answer).
    healthy: bool | None = None
    #: The last exit of one of its children, as :func:`describe_exit` says it.
    last_exit: str | None = None
    #: Deaths since a child last ran :data:`STABLE_AFTER_S`: the backoff's exponent.
    quick_deaths: int = 0
    #: Deaths in a row of children never seen healthy: the crash-loop count.
    unproven_deaths: int = 0


@dataclass(frozen=True, slots=True)
class ChildReport:
    """A slot as the parent leaves it (``awa --json worker``'s ``children``)."""

    slot: int
    pid: int
    restarts: int
    last_exit: str | None
    healthy: bool | None


@dataclass(frozen=True, slots=True)
class SupervisorResult:
    exit_code: int
    children: tuple[ChildReport, ...]


class HeartbeatReader:
    """Reads, on one connection of its own, which worker processes of this
    host beat within the staleness: what "healthy" means for a child."""

    def __init__(self, url: str, timings: Timings) -> None:
        self._url = url
        self._timings = timings
        self._hostname = socket.gethostname()
        # The URL may lead to a pooler in transaction mode: no prepared
        # statements, and the query in a transaction of its own (awa/db.py).
        self._workers_list = Statement("workers_list", pinned=True)
        self._connection: Any = None

    async def alive_pids(self) -> set[int]:
        """The pids of this host's workers that beat lately; raises whatever
        keeps the database from answering within one health interval (a
        :class:`ConnectionFailed` naming the server, where it is about
        connecting). After a failure the connection is dropped without a
        goodbye (a server that does not answer would not hear it) and the
        next read opens another."""
        connecting = self._connection is None
        try:
            async with asyncio.timeout(self._timings.health_interval_s):
                return await self._read()
        except Exception as error:
            terminate_quietly(self._connection)
            self._connection = None
            failure = connect_failure(self._url, error, self._timings.health_interval_s)
            if failure is None or not connecting:
                raise
            raise failure from error

    async def _read(self) -> set[int]:
        if self._connection is None:
            self._connection = await asyncpg.connect(
                self._url, timeout=self._timings.health_interval_s, statement_cache_size=0
            )
        rows = await self._workers_list.fetch(self._connection, self._timings.staleness_s)
        return {row["pid"] for row in rows if row["alive"] and row["hostname"] == self._hostname}

    async def close(self) -> None:
        if self._connection is None:
            return
        try:
            await asyncio.wait_for(self._connection.close(), self._timings.health_interval_s)
        except Exception:  # noqa: BLE001 - a goodbye that fails changes nothing
            terminate_quietly(self._connection)
        self._connection = None


async def run_children(
    command: Sequence[str],
    count: int,
    *,
    stop_timeout_s: float,
    timings: Timings | None = None,
    database_url: str | None = None,
    slot_arguments: Callable[[int], Sequence[str]] | None = None,
) -> SupervisorResult:
    """Runs ``count`` copies of ``command`` under supervision until a signal,
    a crash loop or a usage error stops them (see the module docstring).
    ``database_url`` is where the children's rows are read; without one
    their health is not judged. ``slot_arguments(slot)`` are arguments
    added for the child of one slot (1..count), e.g. its own port."""
    timings = Timings() if timings is None else timings
    reader = None if database_url is None else HeartbeatReader(database_url, timings)
    supervisor = Supervisor(command, count, stop_timeout_s, timings, reader, slot_arguments)
    try:
        return await supervisor.run()
    finally:
        if reader is not None:
            await reader.close()


class Supervisor:
    """Keeps ``count`` slots each running a child of ``command``."""

    def _command_of(self, number: int) -> list[str]:
        extra = () if self._slot_arguments is None else self._slot_arguments(number)
        return [*self._command, *extra]

    def __init__(
        self,
        command: Sequence[str],
        count: int,
        stop_timeout_s: float,
        timings: Timings,
        reader: HeartbeatReader | None,
        slot_arguments: Callable[[int], Sequence[str]] | None = None,
    ) -> None:
        self._command = command
        self._slot_arguments = slot_arguments
        self._count = count
        self._stop_timeout_s = stop_timeout_s
        self._timings = timings
        self._reader = reader
        self._slots: list[Slot] = []
        self._stop = asyncio.Event()
        #: Set by a crash loop or a usage error: the parent's exit status and why.
        self._fatal: tuple[int, str] | None = None
        self._database_answers = True

    async def run(self) -> SupervisorResult:
        remove_handlers = self._forward_signals()
        slot_tasks: list[asyncio.Task[None]] = []
        health_task: asyncio.Task[None] | None = None
        try:
            await self._start_all()
            slot_tasks = [
                self._loud(self._keep(slot), f"worker process {slot.number}'s restarts")
                for slot in self._slots
            ]
            if self._slots:
                health_task = self._start_health_watch()
                await self._stop.wait()
                # The health watch kills nothing more, and the slots, seeing
                # the stop, start nothing more (one starting a child returns
                # once it has started: it is stopped below with the others).
                if health_task is not None:
                    health_task.cancel()
                await asyncio.gather(*slot_tasks, return_exceptions=True)  # _loud said them
                await stop_children(self._running_children(), self._stop_timeout_s)
        finally:
            remove_handlers()
            tasks = [*slot_tasks, *([] if health_task is None else [health_task])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _kill_all([slot.child for slot in self._slots])
        return self._result()

    def _start_health_watch(self) -> asyncio.Task[None] | None:
        if self._reader is None:
            log.warning(
                "the app's client has no database URL: the worker processes' health is not "
                "judged (a wedged one is not restarted)"
            )
            return None
        return self._loud(self._watch_health(), "the worker processes' health watch")

    def _loud(self, work: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """``work`` as a task that, should it fail, stops everything with
        status 1 and says why: nothing here may die quietly."""

        def check(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                error = task.exception()
                log.error("%s failed", what, exc_info=error)
                self._give_up(
                    EXIT_CHILD_FAILED,
                    f"{what} failed ({type(error).__name__}: {error}); stopping them all",
                )

        task = asyncio.create_task(work)
        task.add_done_callback(check)
        return task

    async def _start_all(self) -> None:
        for number in range(1, self._count + 1):
            if self._stop.is_set():
                break
            self._slots.append(Slot(number, await start_child(self._command_of(number), number)))
        if self._slots:
            log.info(
                "started %d worker processes (pids %s); SIGINT or SIGTERM stops them all",
                len(self._slots), ", ".join(str(slot.child.pid) for slot in self._slots),
            )  # fmt: skip

    def _running_children(self) -> list[Child]:
        return [slot.child for slot in self._slots if slot.child.running]

    # ── one slot ───────────────────────────────────────────────────────

    async def _keep(self, slot: Slot) -> None:
        """Restarts ``slot``'s child each time it exits without being asked,
        until the parent stops or gives up."""
        while True:
            if not await self._exited_before_stop(slot.child):
                return
            child = slot.child
            slot.last_exit = describe_exit(child.process.returncode)
            if child.asked_to_stop:
                return
            slot.healthy = False
            delay = self._after_unasked_exit(slot, child)
            if delay is None:
                return
            slot.state = SlotState.BACKING_OFF
            if await self._stopped_within(delay):
                return
            slot.child = await start_child(self._command_of(slot.number), slot.number)
            slot.state, slot.healthy = SlotState.STARTING, None
            slot.restarts += 1
            log.info(
                "worker process %d restarted as pid %d after %.1fs backoff, because pid %d %s",
                slot.number, slot.child.pid, delay, child.pid, slot.last_exit,
            )  # fmt: skip
            if self._stop.is_set():  # a signal came while it started: stop_children stops it
                return

    async def _exited_before_stop(self, child: Child) -> bool:
        """Waits until ``child`` exits (True) or the parent stops (False)."""
        exited = asyncio.ensure_future(child.process.wait())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
            stopping.cancel()
        return not self._stop.is_set()

    async def _stopped_within(self, delay_s: float) -> bool:
        """Waits ``delay_s``, cut short by a stop; returns whether it was."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay_s)
        return self._stop.is_set()

    def _after_unasked_exit(self, slot: Slot, child: Child) -> float | None:
        """Counts the exit against ``slot`` and returns the backoff before its
        next child; ``None`` when the parent must give up (and stops it)."""
        ran_s = time.monotonic() - child.started_at
        code = child.process.returncode
        why = " (as wedged)" if child.killed_as_wedged else ""
        if code == EXIT_USAGE:
            self._give_up(
                EXIT_USAGE,
                f"worker process {slot.number} (pid {child.pid}) {slot.last_exit} (a usage "
                "error): restarting cannot mend it; stopping the others",
            )
            return None
        proven = child.seen_healthy or (
            self._reader is None and ran_s >= self._timings.stable_after_s
        )
        slot.unproven_deaths = 0 if proven else slot.unproven_deaths + 1
        if slot.unproven_deaths >= self._timings.crash_loop_limit:
            self._give_up(
                EXIT_CHILD_FAILED,
                f"worker process {slot.number} failed {slot.unproven_deaths} times in a row "
                f"without becoming healthy (last: pid {child.pid} {slot.last_exit}{why}): "
                "a crash loop; stopping the others",
            )
            return None
        if ran_s >= self._timings.stable_after_s:
            slot.quick_deaths = 0
        delay = backoff_s(slot.quick_deaths, self._timings)
        slot.quick_deaths += 1
        log.error(
            "worker process %d (pid %d) %s%s before it was asked to stop; restarting it in %.1fs",
            slot.number, child.pid, slot.last_exit, why, delay,
        )  # fmt: skip
        return delay

    def _give_up(self, exit_code: int, reason: str) -> None:
        log.error("%s", reason)
        if self._fatal is None:
            self._fatal = (exit_code, reason)
        self._stop.set()

    # ── health ─────────────────────────────────────────────────────────

    async def _watch_health(self) -> None:
        """Every health interval, judges each running child by its heartbeat."""
        assert self._reader is not None
        while not self._stop.is_set():
            await self._stopped_within(self._timings.health_interval_s)
            if self._stop.is_set():
                return
            try:
                alive = await self._reader.alive_pids()
            except Exception as error:  # noqa: BLE001 - whatever it is, nobody is judged
                self._database_silent(error)
                continue
            if not self._database_answers:
                log.info("the database answers again: judging the worker processes' health")
                self._database_answers = True
            now = time.monotonic()
            for slot in self._slots:
                child = slot.child
                if child.running and not (child.asked_to_stop or child.killed_as_wedged):
                    self._judge(slot, child.pid in alive, now)

    def _database_silent(self, error: BaseException) -> None:
        if self._database_answers:
            log.warning(
                "cannot read the worker processes' heartbeats (%s: %s): their health is not "
                "judged, and none is killed for it, until the database answers",
                type(error).__name__,
                str(error) or f"no answer within {self._timings.health_interval_s:g}s",
            )  # fmt: skip
            self._database_answers = False
        for slot in self._slots:
            slot.healthy = None
            slot.child.unhealthy_since = None

    def _judge(self, slot: Slot, alive: bool, now: float) -> None:
        child = slot.child
        if alive:
            if slot.healthy is not True and (slot.healthy is False or not child.seen_healthy):
                log.info("worker process %d (pid %d) is healthy", slot.number, child.pid)
            child.seen_healthy, child.unhealthy_since = True, None
            slot.state, slot.healthy, slot.unproven_deaths = SlotState.SERVING, True, 0
            return
        if slot.healthy is True:
            log.warning(
                "worker process %d (pid %d) is unhealthy: no heartbeat within %.0fs",
                slot.number, child.pid, self._timings.staleness_s,
            )  # fmt: skip
        slot.healthy = False
        if child.unhealthy_since is None:
            child.unhealthy_since = now
        unhealthy_s = now - child.unhealthy_since
        if child.seen_healthy and unhealthy_s >= self._timings.wedged_after_s:
            self._kill_wedged(slot, f"has been unhealthy for {unhealthy_s:.0f}s")
        elif not child.seen_healthy and unhealthy_s >= self._timings.start_timeout_s:
            self._kill_wedged(slot, f"has not been healthy since it started {unhealthy_s:.0f}s ago")

    def _kill_wedged(self, slot: Slot, how: str) -> None:
        log.error(
            "worker process %d (pid %d) is wedged: it runs, but %s; killing it (SIGKILL) and "
            "restarting it (its jobs are rescued)",
            slot.number, slot.child.pid, how,
        )  # fmt: skip
        slot.child.killed_as_wedged = True
        send(slot.child, signal.SIGKILL)

    # ── signals and the end ────────────────────────────────────────────

    def _forward_signals(self) -> Callable[[], None]:
        """Passes SIGINT and SIGTERM on to every running child and stops the
        slots (a child that starts meanwhile is stopped once started);
        returns what undoes it."""
        loop = asyncio.get_running_loop()

        def forward(signum: signal.Signals) -> None:
            log.info("received %s: stopping %d worker processes", signum.name, len(self._slots))
            self._stop.set()
            for slot in self._slots:
                send(slot.child, signum)

        installed = []
        for signum in FORWARDED_SIGNALS:
            with contextlib.suppress(NotImplementedError):  # Windows
                loop.add_signal_handler(signum, forward, signum)
                installed.append(signum)

        def remove() -> None:
            for signum in installed:
                loop.remove_signal_handler(signum)

        return remove

    def _result(self) -> SupervisorResult:
        # A slot backing off when the parent stopped had its death reported
        # then; only the children running at the end are judged.
        judged = [slot.child for slot in self._slots if slot.state != SlotState.BACKING_OFF]
        for slot in self._slots:
            slot.last_exit = describe_exit(slot.child.process.returncode)
            slot.state = SlotState.STOPPED
        children = tuple(
            ChildReport(slot.number, slot.child.pid, slot.restarts, slot.last_exit, slot.healthy)
            for slot in self._slots
        )
        if self._fatal is not None:
            code, reason = self._fatal
            print(f"awa: {reason}", file=sys.stderr, flush=True)
            return SupervisorResult(code, children)
        return SupervisorResult(exit_status(judged), children)


def backoff_s(deaths: int, timings: Timings) -> float:
    """The wait before the next child of a slot whose children died
    ``deaths`` times since one was stable: the initial wait doubled each
    time, capped, less up to :data:`RESTART_BACKOFF_JITTER` at random."""
    full = min(timings.backoff_max_s, timings.backoff_initial_s * 2.0 ** min(deaths, 32))
    return float(full * (1 - RESTART_BACKOFF_JITTER * random.random()))


async def start_child(command: Sequence[str], number: int) -> Child:
    """Starts child ``number`` running ``command``, with the parent's
    stdout and stderr, in a session of its own."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent(),
    )
    return Child(number, process)


def _die_with_parent() -> Callable[[], None] | None:
    """What a child runs before exec to get SIGTERM when the parent dies
    (Linux only). ``prctl`` is looked up here, in the parent: between fork
    and exec the child must not load anything."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None).prctl

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_death_signal


def send(child: Child, signum: signal.Signals) -> None:
    """Sends ``signum`` to ``child`` if it still runs; SIGINT and SIGTERM
    count as asking it to stop."""
    if not child.running:
        return
    if signum in FORWARDED_SIGNALS:
        child.asked_to_stop = True
    with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
        child.process.send_signal(signum)


async def stop_children(children: Sequence[Child], timeout_s: float) -> None:
    """SIGTERM to every child still running, then waits up to ``timeout_s``
    for them and kills those still running."""
    for child in children:
        if child.running and not child.asked_to_stop:
            send(child, signal.SIGTERM)
    running = [child for child in children if child.running]
    if not running:
        return
    _done, pending = await asyncio.wait(
        {asyncio.ensure_future(child.process.wait()) for child in running}, timeout=timeout_s
    )
    for wait in pending:
        wait.cancel()
    for child in children:
        if child.running:
            log.error(
                "worker process %d (pid %d) did not stop within %.0fs; killing it "
                "(its jobs are rescued)",
                child.number, child.pid, timeout_s,
            )  # fmt: skip
    await _kill_all(children)


async def _kill_all(children: Sequence[Child]) -> None:
    for child in children:
        if child.running:
            send(child, signal.SIGKILL)
            await child.process.wait()


def describe_exit(returncode: int | None) -> str:
    """``exited with status 3``, ``was killed by SIGKILL`` or ``is still running``."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


def stopped_cleanly(child: Child) -> bool:
    """Exited 0; or was asked to stop and died of that signal, which only a
    child not yet serving (no handlers installed, so no jobs) can."""
    code = child.process.returncode
    return code == 0 or (child.asked_to_stop and code in _DIED_OF_STOP_SIGNAL)


def exit_status(children: Sequence[Child]) -> int:
    """0 when every child stopped cleanly; else 1, having named each that did not."""
    failed = [child for child in children if not stopped_cleanly(child)]
    for child in failed:
        message = (
            f"awa: worker process {child.number} (pid {child.pid}) "
            f"{describe_exit(child.process.returncode)}"
        )
        print(message, file=sys.stderr, flush=True)
    return EXIT_CHILD_FAILED if failed else 0
