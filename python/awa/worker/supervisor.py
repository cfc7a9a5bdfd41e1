"""Supervision of a worker's long-lived services, and the worker's health.

Overview: every service of a worker (claimers, completer, notifier, the
quarantine watcher, the leader election and each maintenance task) runs
under :class:`Supervisor`: if it raises, the error is logged and the service
started again after a backoff, on fresh connections (services acquire their
own). Services that retry inside themselves (the completer retries a write
until it commits) report each failure and each success to :class:`Health`
instead of raising.

State model: a service is failing from its first unanswered failure until
its next success. One that has been failing for ``unhealthy_after`` seconds
makes the whole worker unhealthy, for good: the worker stops claiming and
heartbeating (so its jobs are rescued elsewhere) and says why
(``Worker.unhealthy_reason``); the CLI worker exits non-zero. A worker never
lives on as a zombie whose services died quietly.

Failure handling: nothing here fails; a service that ends without an error
is not restarted (it was asked to stop).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

log = logging.getLogger("awa.worker")

RESTART_DELAY_S: Final = 0.1
MAX_RESTART_DELAY_S: Final = 5.0
#: A service that ran this long before failing starts again at the first delay.
STABLE_AFTER_S: Final = 30.0

ServiceFactory = Callable[[], Coroutine[Any, Any, None]]


class Health:
    """Which services are failing, since when, and whether that has lasted
    too long. Safe to use from any thread (the heartbeat's checks it)."""

    def __init__(self, unhealthy_after_s: float) -> None:
        self._unhealthy_after_s = unhealthy_after_s
        self._lock = threading.Lock()
        self._failing: dict[str, tuple[float, BaseException]] = {}
        self._reason: str | None = None
        self._listeners: list[Callable[[str], None]] = []

    def ok(self, service: str) -> None:
        """``service`` just succeeded at what it does."""
        if service in self._failing:  # read without the lock: the common case is fast
            with self._lock:
                self._failing.pop(service, None)

    def failed(self, service: str, error: BaseException) -> None:
        """``service`` just failed; it stays failing until :meth:`ok`."""
        with self._lock:
            since = self._failing.get(service, (time.monotonic(), error))[0]
            self._failing[service] = (since, error)

    def forget(self, service: str) -> None:
        """``service`` stopped on purpose (a leader's maintenance task)."""
        self.ok(service)

    def on_unhealthy(self, listener: Callable[[str], None]) -> None:
        """Calls ``listener(reason)`` once, when the worker becomes unhealthy
        (from whichever thread noticed it)."""
        self._listeners.append(listener)

    def make_unhealthy(self, reason: str) -> None:
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
        for listener in self._listeners:
            listener(reason)

    def check(self) -> bool:
        """Whether the worker is healthy now; turns it unhealthy when a
        service has failed for longer than allowed."""
        if self._reason is not None:
            return False
        if not self._failing:
            return True
        now = time.monotonic()
        with self._lock:
            overdue = [
                (service, since, error)
                for service, (since, error) in self._failing.items()
                if now - since >= self._unhealthy_after_s
            ]
        if not overdue:
            return True
        service, since, error = min(overdue, key=lambda entry: entry[1])
        self.make_unhealthy(
            f"{service} has failed for {now - since:.1f}s ({type(error).__name__}: {error})"
        )
        return False

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def failing(self) -> dict[str, BaseException]:
        with self._lock:
            return {service: error for service, (_since, error) in self._failing.items()}


class Supervisor:
    """Runs services as tasks and starts them again when they raise."""

    def __init__(self, health: Health) -> None:
        self._health = health
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.restarts = 0

    def spawn(self, name: str, service: ServiceFactory) -> asyncio.Task[None]:
        task = asyncio.create_task(self._supervise(name, service), name=f"awa-{name}")
        self._tasks[name] = task
        return task

    def task(self, name: str) -> asyncio.Task[None] | None:
        return self._tasks.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tasks)

    async def _supervise(self, name: str, service: ServiceFactory) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await service()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if time.monotonic() - started >= STABLE_AFTER_S:
                    failures = 0
                failures += 1
                self.restarts += 1
                self._health.failed(name, error)
                delay = min(MAX_RESTART_DELAY_S, RESTART_DELAY_S * 2 ** min(failures - 1, 16))
                log.error(
                    "worker service %s failed (%s: %s); restarting it in %.1fs",
                    name, type(error).__name__, error, delay, exc_info=error,
                )  # fmt: skip
                await asyncio.sleep(delay)

    async def stop(self, name: str, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for the service to end on its own, then
        cancels it; returns whether it ended on its own."""
        task = self._tasks.get(name)
        if task is None or task.done():
            return True
        _done, pending = await asyncio.wait({task}, timeout=max(timeout_s, 0.0))
        if pending:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False
        return True

    async def cancel(self, name: str) -> None:
        task = self._tasks.get(name)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def stop_all(self, timeout_s: float) -> list[str]:
        """Waits up to ``timeout_s`` for every service (each asked to stop by
        its own means) to end, then cancels those still running and returns
        their names. Cancelled while waiting, it cancels them all first."""
        running = {task: name for name, task in self._tasks.items() if not task.done()}
        if not running:
            return []
        try:
            await asyncio.wait(running, timeout=max(timeout_s, 0.0))
        finally:
            cut_short = [name for task, name in running.items() if not task.done()]
            await self.cancel_all()
        return cut_short

    async def cancel_all(self) -> None:
        tasks = [task for task in self._tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
