"""A worker process's services, started and stopped together.

Overview: :class:`Worker` registers the process (its id marks the jobs it
claims), then runs the producer (claims), executor (handlers), completer
(batched outcomes), notifier (LISTEN), heartbeat (liveness) and the leader
election that runs maintenance (scheduler, rescuer, pruner) on one worker
per database, and keeps the quarantined fingerprints it must hold.

Shutdown: stop claiming; let running handlers finish within the timeout;
cancel the rest and give their jobs back (available again, the interrupted
attempt not counted); flush every outcome; resign leadership; remove the
worker row. A job whose release fails stays claimed by a worker that no
longer exists, so the rescuer returns it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Coroutine
from typing import Any

from awa import _core
from awa.completer import Completer
from awa.config import WorkerConfig
from awa.control import JobControl
from awa.db import Database
from awa.executor import Executor
from awa.heartbeat import Heartbeat
from awa.lifecycle import Lifecycle, Pending
from awa.maintenance.leader import Leader
from awa.maintenance.pruner import Pruner
from awa.maintenance.rescuer import Rescuer
from awa.maintenance.scheduler import Scheduler
from awa.notifier import Notifier
from awa.producer import Producer

log = logging.getLogger("awa.worker")

MAX_SYNC_THREADS = 64
# Flushing outcomes and releasing jobs at shutdown get this long at least,
# on top of the handlers' timeout.
FINAL_WRITE_TIMEOUT_S = 10.0


class Worker:
    def __init__(self, db: Database, lifecycle: Lifecycle, config: WorkerConfig) -> None:
        self.db = db
        self.lifecycle = lifecycle
        self.registry = lifecycle.registry
        self.config = config
        self.worker_id: int | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    async def start(self) -> None:
        config = self.config
        queue_names = [name for name, _ in config.queues]
        hostname, pid = socket.gethostname(), os.getpid()
        self.worker_id = await self.db.fetchval("workers_register", hostname, pid, queue_names)
        self.dispatcher = _core.Dispatcher(
            list(config.queues), config.claim_batch_size, config.global_max_workers
        )
        self.batch = _core.CompletionBatch(
            config.flush_batch_size, config.flush_interval, random.getrandbits(64)
        )
        threads = config.sync_handler_threads or min(config.total_slots, MAX_SYNC_THREADS)
        # Outcomes someone observes, by job id, until their flush commits.
        pending: dict[int, Pending] = {}
        self.control = JobControl()
        self.executor = Executor(
            self.lifecycle,
            self.dispatcher,
            self.batch,
            pending,
            threads,
            db=self.db,
            control=self.control,
        )
        self.producer = Producer(
            self.db,
            self.dispatcher,
            self.executor.start,
            self.worker_id,
            config.poll_interval,
            config.claim_concurrency,
            kind_timeouts={
                kind: task.timeout_s
                for kind, task in self.registry.by_kind.items()
                if task.timeout_s is not None
            },
            queue_timeouts=config.queue_timeouts,
        )
        self.completer = Completer(self.db, self.batch, self.lifecycle, pending)
        self.executor.on_slot_freed = self.producer.slot_freed
        self.executor.on_outcome = self.completer.notify
        self.notifier = Notifier(self.db, self.producer.wake, self.control.deliver)
        self.heartbeat = Heartbeat(
            self.db, self.worker_id, hostname, pid, queue_names, config.heartbeat_interval
        )
        self.scheduler = Scheduler(self.db, config.promote_interval, config.promote_batch_size)
        self.rescuer = Rescuer(
            self.db,
            self.lifecycle,
            config.rescue_interval,
            config.heartbeat_staleness,
            config.quarantine_threshold,
            config.quarantine_window,
        )
        self.pruner = Pruner(
            self.db,
            config.prune_interval,
            config.prune_batch_size,
            config.completed_retention,
            config.cancelled_retention,
            config.dead_letter_retention,
            config.dead_letter_retention_by_queue,
        )
        self.leader = Leader(
            self.db,
            [self.scheduler.run, self.rescuer.run, self.pruner.run],
            config.leader_election_interval,
        )
        self._spawn("completer", self.completer.run())
        self._spawn("notifier", self.notifier.run())
        self._spawn("quarantine", self.control.watch_quarantine(self.db))
        self._spawn("heartbeat", self.heartbeat.run())
        self._spawn("leader", self.leader.run())
        self._spawn("producer", self.producer.run())
        log.info(
            "worker %d started on %s pid %d: %s",
            self.worker_id,
            hostname,
            pid,
            ", ".join(f"{name}×{slots}" for name, slots in config.queues),
        )

    def _spawn(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine, name=f"awa-{name}")
        task.add_done_callback(self._service_ended)
        self._tasks[name] = task

    def _service_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopped:
            return
        error = task.exception()
        if error is not None:
            log.error("worker service %s failed", task.get_name(), exc_info=error)

    async def shutdown(self, timeout_s: float) -> None:
        """Stops gracefully; see the module docstring for the order of steps."""
        if self._stopped:
            return
        started = time.monotonic()
        self.producer.stop()
        self.notifier.stop()
        await self._await_service("producer", timeout_s)
        handlers_left = max(timeout_s - (time.monotonic() - started), 0.0)
        await self.executor.stop(handlers_left)
        self.completer.stop()
        await self._await_service("completer", FINAL_WRITE_TIMEOUT_S)
        await self._release_held_jobs()
        self._stopped = True
        self.leader.stop()
        self.heartbeat.stop()
        watcher = self._tasks.get("quarantine")
        if watcher is not None:
            watcher.cancel()  # it only reads; nothing to finish
            await asyncio.gather(watcher, return_exceptions=True)
        for name in ("notifier", "leader", "heartbeat"):
            await self._await_service(name, FINAL_WRITE_TIMEOUT_S)
        try:
            await self.db.execute("workers_deregister", self.worker_id)
        except Exception as error:  # noqa: BLE001 - the rescuer cleans up after us
            log.warning("could not remove worker row %s (%s)", self.worker_id, error)
        log.info(
            "worker %d stopped: %d jobs run, %d outcomes written, %d stale",
            self.worker_id,
            self.executor.finished,
            self.completer.applied,
            self.completer.stale,
        )

    async def _await_service(self, name: str, timeout_s: float) -> None:
        task = self._tasks.get(name)
        if task is None or task.done():
            return
        _done, pending = await asyncio.wait({task}, timeout=timeout_s)
        if pending:
            log.warning("%s did not stop within %.1fs; cancelling it", name, timeout_s)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _release_held_jobs(self) -> None:
        ids, leases = self.dispatcher.held()
        if not ids:
            return
        try:
            row = await asyncio.wait_for(
                self.db.fetchrow("jobs_release", ids, leases), FINAL_WRITE_TIMEOUT_S
            )
        except Exception as error:  # noqa: BLE001 - the rescuer returns them instead
            log.warning(
                "could not release %d jobs at shutdown (%s); they will be rescued", len(ids), error
            )
            return
        released = row["released"] if row is not None else 0
        log.info("released %d interrupted jobs at shutdown", released)
        for job_id in ids:
            self.dispatcher.finish(job_id)

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._stopped
