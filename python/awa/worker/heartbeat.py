"""The heartbeat: proves this worker process is alive, so its claims stand,
whatever its event loop is doing.

Overview: liveness is kept per process, not per job: one small UPDATE every
``heartbeat_interval`` however many jobs run. It is sent from a thread of
its own, with its own event loop and its own connection, so a handler that
blocks the worker's loop (a ``time.sleep`` in an ``async def``) does not get
its jobs, and every other job this worker holds, rescued and run twice
while the process lives. The rescuer treats running jobs of a process
silent for ``heartbeat_staleness`` as orphaned.

A :class:`LoopWatch` on the worker's loop ticks every ``TICK_S``; the thread
reads how long ago it last ticked. A loop blocked for ``BLOCKED_WARNING_S``
is logged as a warning naming the job and handler it is stuck in; one
blocked for ``max_loop_block`` counts as hung: the beats stop, and its jobs
are rescued. A process that hangs as a whole (stopped, deadlocked) stops
beating with it. An unhealthy worker (a service failed for too long) stops
beating too.

Progress rides on the beat: the reports handlers made with
``job.set_progress`` since the last beat (:mod:`awa.worker.progress`) are
written by the same statement (``jobs_heartbeat_with_progress``), each
guarded by its attempt's run lease; a beat with none to write is the plain
``workers_heartbeat``.

Failure handling: a missed beat is logged and retried at the next tick on a
fresh connection. If the rescuer already removed this worker's row (it was
silent too long), the row is put back; the jobs it lost were rescued, and
their late outcomes are rejected by the run-lease guard. The progress a
failed beat carried is buffered again for the next one (unless a newer
report replaced it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from awa.db import Database, Statement
from awa.worker.progress import ProgressBuffer

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.heartbeat")

SERVICE: Final = "heartbeat"
#: How often the worker's loop proves it is not blocked.
TICK_S: Final = 0.1
#: A loop blocked this long is worth a warning.
BLOCKED_WARNING_S: Final = 1.0
#: How long the thread waits for one beat before giving up on it.
BEAT_TIMEOUT_S: Final = 10.0
JOIN_TIMEOUT_S: Final = 5.0


class LoopWatch:
    """Ticks on the worker's event loop; other threads read how long the loop
    has been unable to run, and what it was running meanwhile."""

    def __init__(self, describe: Callable[[str], str | None]) -> None:
        self._describe = describe
        self._last_tick = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        while True:
            self._last_tick = time.monotonic()
            await asyncio.sleep(TICK_S)

    def blocked_s(self) -> float:
        """How long the loop has not ticked, beyond its tick interval."""
        return max(0.0, time.monotonic() - self._last_tick - TICK_S)

    def culprit(self) -> str:
        """What the loop is running now: a job's handler, if it is one."""
        loop = self._loop
        task = asyncio.current_task(loop) if loop is not None else None
        if task is None:
            return "code outside any task"
        return self._describe(task.get_name()) or f"task {task.get_name()!r}"


class Heartbeat:
    def __init__(
        self,
        db: Database,
        worker_id: int,
        identity: tuple[str, int, list[str]],
        interval_s: float,
        max_loop_block_s: float,
        health: Health,
        watch: LoopWatch,
        progress: ProgressBuffer,
    ) -> None:
        self._db = db
        pinned = db.pooler is not None
        self._heartbeat = Statement("workers_heartbeat", pinned)
        self._heartbeat_with_progress = Statement("jobs_heartbeat_with_progress", pinned)
        self._progress = progress
        self._reregister = Statement("workers_reregister", pinned)
        self._worker_id = worker_id
        self._identity = identity
        self._interval_s = interval_s
        self._max_loop_block_s = max_loop_block_s
        self._health = health
        self._watch = watch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._blocked_since: float | None = None
        self._culprit = ""
        self._hung = False
        self.beats = 0

    def start(self) -> None:
        self._worker_loop = asyncio.get_running_loop()
        if not self._db.can_connect:
            log.warning(
                "the connection pool given to awa says nothing of how it connects: heartbeats "
                "go through the worker's event loop, so a handler that blocks the loop past "
                "heartbeat_staleness gets this worker's jobs rescued (pass a URL, or a pool "
                "made with asyncpg.create_pool(dsn, ...))"
            )
        self._thread = threading.Thread(
            target=self._run, name=f"awa-heartbeat-{self._worker_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops beating and waits (briefly) for the thread to end."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        connection: Any = None
        try:
            while not self._stop.wait(self._interval_s):
                connection = loop.run_until_complete(self._tick(connection))
        finally:
            if connection is not None:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.wait_for(connection.close(), 1.0))
            loop.close()

    async def _tick(self, connection: Any) -> Any:
        """One beat, unless the worker's loop is hung or the worker unhealthy;
        returns the connection to use next time."""
        if not self._loop_alive() or not self._health.check():
            return connection
        try:
            if not self._db.can_connect:
                beat = asyncio.run_coroutine_threadsafe(self._beat_pooled(), self._worker_loop)
                await asyncio.wait_for(asyncio.wrap_future(beat), BEAT_TIMEOUT_S)
            else:
                if connection is None:
                    connection = await asyncio.wait_for(self._db.connect(), BEAT_TIMEOUT_S)
                await asyncio.wait_for(self._beat(connection), BEAT_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - a missed beat must not end the thread
            self._health.failed(SERVICE, error)
            log.warning("heartbeat failed (%s: %s)", type(error).__name__, error)
            if connection is not None:
                with contextlib.suppress(Exception):
                    connection.terminate()
            return None
        self._health.ok(SERVICE)
        self.beats += 1
        return connection

    async def _beat(self, connection: Any) -> None:
        reports = self._progress.take_all()
        if not reports:
            found = await self._heartbeat.fetchval(connection, self._worker_id)
        else:
            try:
                found = await self._heartbeat_with_progress.fetchval(
                    connection, self._worker_id, list(reports),
                    [lease for lease, _text in reports.values()],
                    [text for _lease, text in reports.values()],
                )  # fmt: skip
            except BaseException:
                self._progress.put_back(reports)
                raise
        if found is None:
            log.warning(
                "worker %d was presumed dead (silent too long); registering again",
                self._worker_id,
            )
            await self._reregister.execute(connection, self._worker_id, *self._identity)

    async def _beat_pooled(self) -> None:
        """A beat on the worker's own loop, through its pool."""
        async with self._db.pool.acquire() as connection:
            await self._beat(connection)

    def _loop_alive(self) -> bool:
        """Logs a blocked loop (once as it starts, once as it ends); false once
        it has been blocked for ``max_loop_block``."""
        blocked_s = self._watch.blocked_s()
        if blocked_s < BLOCKED_WARNING_S:
            if self._blocked_since is not None:
                log.warning(
                    "the event loop was blocked for %.1fs by %s; handlers must not block it "
                    "(use a def handler, or await asyncio.to_thread)",
                    time.monotonic() - self._blocked_since, self._culprit,
                )  # fmt: skip
                self._blocked_since = None
                self._hung = False
            return True
        if self._blocked_since is None:
            self._blocked_since = time.monotonic() - blocked_s
            self._culprit = self._watch.culprit()
            log.warning(
                "the event loop has been blocked for %.1fs by %s; heartbeats go on from "
                "their own thread for up to %gs (max_loop_block)",
                blocked_s, self._culprit, self._max_loop_block_s,
            )  # fmt: skip
        if blocked_s < self._max_loop_block_s:
            return True
        if not self._hung:
            self._hung = True
            log.error(
                "the event loop has been blocked for %.1fs by %s: this worker counts as hung "
                "and stops heartbeating, so its jobs are rescued",
                blocked_s, self._culprit,
            )  # fmt: skip
        return False
