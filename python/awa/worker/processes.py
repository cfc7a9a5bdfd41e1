"""Several worker processes from one command: ``awa worker --processes N``.

Overview: one worker process runs one asyncio loop, so a box with several
cores runs several processes. :func:`run_children` starts ``N`` child
processes, each running the same ``awa worker`` command with
``--processes 1`` (an ordinary worker, with its own connections, its own
capacity and its own row in ``awa.workers``), forwards SIGINT and SIGTERM
to them, waits for them all and returns the exit status of the whole. The
children share nothing but the database: they claim with ``SKIP LOCKED``
like workers on separate hosts, and one of them at a time wins the
maintenance lease.

State model: ``running`` → (SIGINT/SIGTERM to the parent, or any child
exits on its own) → ``stopping``: every child still running gets SIGTERM
and ``stop_timeout_s`` to shut down gracefully, after which it is killed
(its jobs are then rescued like any dead worker's). The parent exits 0 when
every child exited 0 (or, asked to stop before it served, died of that
signal), else 1 and names each child that did not, with its exit status or
the signal that killed it.

Failure handling: a child that dies takes the others down with it, loudly
(nothing here restarts children yet, and a parent serving with one process
fewer than asked must not look healthy). Children run in a session of
their own, so a Ctrl-C at a terminal reaches the parent once and is
forwarded once; on Linux each child also gets SIGTERM should the parent
die without forwarding anything (``PR_SET_PDEATHSIG``).

The pieces are small on purpose (start one child, describe one exit, stop
the rest), so that restarting a dead child with backoff and reporting each
child's health can be added without changing the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger("awa.processes")

#: Signals the parent passes on to its children.
FORWARDED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: Exit status of the parent when a child exited non-zero (or was killed).
EXIT_CHILD_FAILED: Final = 1
_PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>
#: How a child ends that gets SIGINT or SIGTERM before it handles them:
#: killed by SIGTERM, or status 130 (the CLI's KeyboardInterrupt).
_DIED_OF_STOP_SIGNAL: Final = frozenset({-signal.SIGTERM, -signal.SIGINT, 130})


@dataclass(slots=True)
class Child:
    """One child worker process: its number (1..N), for messages, and the process."""

    number: int
    process: asyncio.subprocess.Process
    #: Whether the parent asked it to stop (SIGTERM) before it exited.
    asked_to_stop: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None


async def run_children(command: Sequence[str], count: int, *, stop_timeout_s: float) -> int:
    """Runs ``count`` copies of ``command`` until a signal or a child's exit
    stops them; returns 0 when every child exited 0, else 1 (see the module
    docstring)."""
    stop = asyncio.Event()
    children: list[Child] = []
    remove_handlers = _forward_signals(children, stop)
    try:
        for number in range(1, count + 1):
            if stop.is_set():
                break
            children.append(await start_child(command, number))
        if not children:
            return 0
        log.info(
            "started %d worker processes (pids %s); SIGINT or SIGTERM stops them all",
            len(children), ", ".join(str(child.pid) for child in children),
        )  # fmt: skip
        first_exit = asyncio.ensure_future(wait_for_first_exit(children))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({first_exit, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if first_exit.done() and not first_exit.result().asked_to_stop:
            report_unexpected_exit(first_exit.result())
        else:
            first_exit.cancel()
        await stop_children(children, stop_timeout_s)
    finally:
        remove_handlers()
        await _kill_all(children)
    return exit_status(children)


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


def _forward_signals(children: list[Child], stop: asyncio.Event) -> Callable[[], None]:
    """Passes SIGINT and SIGTERM on to every running child (those started
    later get SIGTERM at once: ``stop`` is set); returns what undoes it."""
    loop = asyncio.get_running_loop()

    def forward(signum: signal.Signals) -> None:
        log.info("received %s: stopping %d worker processes", signum.name, len(children))
        stop.set()
        for child in children:
            send(child, signum)

    installed = []
    for signum in FORWARDED_SIGNALS:
        with contextlib.suppress(NotImplementedError):  # Windows
            loop.add_signal_handler(signum, forward, signum)
            installed.append(signum)

    def remove() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return remove


def send(child: Child, signum: signal.Signals) -> None:
    """Sends ``signum`` to ``child`` if it still runs; SIGINT and SIGTERM
    count as asking it to stop."""
    if not child.running:
        return
    if signum in FORWARDED_SIGNALS:
        child.asked_to_stop = True
    with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
        child.process.send_signal(signum)


async def wait_for_first_exit(children: Sequence[Child]) -> Child:
    """Returns the first child to exit."""
    waits = {asyncio.ensure_future(child.process.wait()): child for child in children}
    try:
        done, _pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return waits[next(iter(done))]


def report_unexpected_exit(child: Child) -> None:
    log.error(
        "worker process %d (pid %d) %s before it was asked to stop; stopping the others",
        child.number, child.pid, describe_exit(child.process.returncode),
    )  # fmt: skip


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
