"""A worker process's services, started and stopped together.

Overview: :class:`Worker` registers the process (its id marks the jobs it
claims), builds the :class:`~awa.worker.pipeline.Pipeline` (producer →
executor → completer), and runs it with the services around it: the
notifier (LISTEN), the heartbeat (a thread of its own), the quarantine
watcher, the pause watcher (queues paused fleet-wide), and the leader
election that runs maintenance (scheduler, rescuer, pruner) on one worker
per database. Every service is supervised (:mod:`awa.worker.supervisor`):
restarted with backoff when it raises, and reported to the worker's
health; a service that cannot recover within
``unhealthy_after`` makes the worker unhealthy, and it stops claiming and
heartbeating instead of living on as a zombie.

Shutdown: stop claiming; let running handlers finish within the timeout;
cancel the rest and give their jobs back (available again, the interrupted
attempt not counted); write every outcome (or say how many could not be
written, and why); resign leadership (maintenance passes under way finish
first, for up to two seconds: no statement is cancelled mid-way); stop the
heartbeat; remove the worker row. A job whose release or outcome write
fails stays claimed by a worker that no longer exists, so the rescuer
returns it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Final

from awa import metrics, otel
from awa.config import WorkerConfig
from awa.db import Database
from awa.lifecycle import Lifecycle
from awa.maintenance.leader import Leader, MaintenanceService
from awa.maintenance.periodic import Enqueue, PeriodicEnqueuer
from awa.maintenance.pruner import Pruner
from awa.maintenance.rescuer import Rescuer
from awa.maintenance.scheduler import Scheduler
from awa.maintenance.sweeper import Sweeper
from awa.periodic import PeriodicJob
from awa.worker.executor import JOB_TASK_PREFIX
from awa.worker.heartbeat import Heartbeat, LoopWatch
from awa.worker.notifier import Notifier
from awa.worker.pipeline import Pipeline
from awa.worker.queue_gauges import SERVICE as QUEUE_GAUGES
from awa.worker.queue_gauges import QueueGaugeReader
from awa.worker.queue_settings import VERB as QUEUE_SETTINGS_VERB
from awa.worker.queue_settings import QueueSettingsWatcher
from awa.worker.supervisor import Health, Supervisor

log = logging.getLogger("awa.worker")

#: How often the worker looks at its services' health.
HEALTH_CHECK_S: Final = 0.5
LEADER_STOP_TIMEOUT_S: Final = 5.0


class Worker:
    def __init__(
        self,
        db: Database,
        lifecycle: Lifecycle,
        config: WorkerConfig,
        *,
        periodic: tuple[Mapping[str, PeriodicJob], Enqueue] | None = None,
    ) -> None:
        self.db = db
        #: Fires the client's periodic jobs (and how to insert a fire's
        #: jobs) while this worker leads; None when it registers none.
        self.periodic = (
            PeriodicEnqueuer(db, periodic[0], periodic[1]) if periodic and periodic[0] else None
        )
        self.lifecycle = lifecycle
        self.registry = lifecycle.registry
        self.config = config
        self.worker_id: int | None = None
        self.health = Health(config.unhealthy_after)
        self._supervisor = Supervisor(self.health)
        self._unhealthy = asyncio.Event()
        self._started = False
        self._stopped = False

    async def start(self) -> None:
        config = self.config
        queue_names = [name for name, _ in config.queues]
        hostname, pid = socket.gethostname(), os.getpid()
        worker_id = await self.db.fetchval("workers_register", hostname, pid, queue_names)
        self.worker_id = worker_id
        # In a transaction of its own: a claim that opened them would hold
        # the new lanes, and every other claimer of the queue, until it commits.
        await self.db.fetchval("lanes_open", queue_names)
        loop = asyncio.get_running_loop()

        def on_unhealthy(reason: str) -> None:  # from whichever thread noticed
            loop.call_soon_threadsafe(self._became_unhealthy, reason)

        self.health.on_unhealthy(on_unhealthy)
        pipeline = self.pipeline = Pipeline.build(
            self.db, self.lifecycle, config, worker_id, self.health
        )
        self.dispatcher = pipeline.dispatcher
        #: This worker's counts for the metrics (awa.metrics).
        self.tally = pipeline.reporter.tally
        otel.instrument()  # no-op without OpenTelemetry, once per process
        self.completer = pipeline.completer
        self.executor = pipeline.executor
        self.producer = pipeline.producer
        self.control = pipeline.executor.control
        self.queue_settings = QueueSettingsWatcher(
            self.db, self.dispatcher, pipeline.claims, self.health, queue_names,
            config.poll_interval,
        )  # fmt: skip
        # Before any claim: a queue paused fleet-wide is never claimed from.
        await self.queue_settings.load()
        self.producer.queue_settings = self.queue_settings
        self.notifier = Notifier(self.db, pipeline.claims.ready, self._on_control, self.health)
        self.loop_watch = LoopWatch(self._describe_task)
        self.heartbeat = Heartbeat(
            self.db, worker_id, (hostname, pid, queue_names), config.heartbeat_interval,
            config.max_loop_block, self.health, self.loop_watch, pipeline.progress,
        )  # fmt: skip
        self.leader = self._leader(worker_id)

        spawn = self._supervisor.spawn
        spawn("loop-watch", self.loop_watch.run)
        spawn("completer", self.completer.run)
        if self.db.poll_only:
            log.info(
                "behind a pooler without listen_url: no LISTEN, claimers poll every %gs",
                config.poll_interval,
            )
        else:
            spawn("notifier", self.notifier.run)
        spawn("quarantine", lambda: self.control.watch_quarantine(self.db, self.health))
        spawn("queue-settings", self.queue_settings.run)
        spawn("leader", self.leader.run)
        spawn("health", self._watch_health)
        spawn("report", self._report)
        for index in range(config.claim_concurrency):
            spawn(f"claimer-{index}", self.producer.claimer(index))
        spawn("reconciler", self.producer.reconciler)
        if config.queue_metrics_interval is not None:
            gauges = QueueGaugeReader(
                self.db, self.tally, queue_names, config.queue_metrics_interval
            )
            spawn(QUEUE_GAUGES, gauges.run)
        self.heartbeat.start()
        self._started = True
        await self._say_where(worker_id, hostname, pid)

    async def abort_start(self) -> None:
        """Undoes a :meth:`start` that raised: its services are cancelled and
        its heartbeat thread stopped, so none outlives the pool it uses (the
        rescuer returns anything it claimed)."""
        self._stopped = True
        await self._supervisor.cancel_all()
        heartbeat = getattr(self, "heartbeat", None)
        if heartbeat is not None:
            await asyncio.to_thread(heartbeat.stop)

    async def _say_where(self, worker_id: int, hostname: str, pid: int) -> None:
        """The start-up lines: where this worker is connected, what it
        serves, and queues no registered task uses (a typo serves nothing).
        Best effort: the worker runs already, and a database that refuses
        these reads (privileges taken away, the server going down) is the
        services' to report and survive, not a reason to fail the start."""
        try:
            server = await self.db.fetchrow("workers_server")
            version = await self.db.schema_version()
        except Exception as error:  # noqa: BLE001 - reported; the services carry on
            log.warning(
                "worker %d started on %s pid %d, but could not read where it is connected "
                "(%s: %s)",
                worker_id, hostname, pid, type(error).__name__, error,
            )  # fmt: skip
            self._warn_unused_queues()
            return
        assert server is not None  # the query returns one row
        config = self.config
        log.info(
            "worker %d started on %s pid %d, connected to %s:%s database %s as %s "
            "(schema version %s); queues %s; at most %d jobs at once",
            worker_id, hostname, pid, server["host"], server["port"], server["database"],
            server["role"], version,
            ", ".join(f"{name}={slots}" for name, slots in config.queues), config.total_slots,
        )  # fmt: skip
        self._warn_unused_queues()

    def _warn_unused_queues(self) -> None:
        used = {task.queue for task in self.registry.by_kind.values()}
        for name, _ in self.config.queues:
            if name not in used:
                log.warning(
                    "queue %r is served, but no registered task uses it (tasks use %s); "
                    "jobs reach it only when inserted with queue=%r",
                    name, ", ".join(sorted(used)), name,
                )  # fmt: skip

    async def _report(self) -> None:
        """The periodic summary line."""
        interval = self.config.report_interval
        reporter = self.pipeline.reporter
        while True:
            await asyncio.sleep(interval)
            running = len(self.executor.running_ids)
            log.info("%s", reporter.summary(running, self.config.total_slots))

    def _leader(self, worker_id: int) -> Leader:
        config, db, health = self.config, self.db, self.health
        self.scheduler = Scheduler(db, config.promote_interval, config.promote_batch_size)
        self.rescuer = Rescuer(
            db,
            self.lifecycle,
            config.rescue_interval,
            config.heartbeat_staleness,
            config.quarantine_threshold,
            config.quarantine_window,
        )
        self.pruner = Pruner(
            db,
            config.prune_interval,
            config.prune_batch_size,
            config.completed_retention,
            config.cancelled_retention,
            config.dead_letter_retention,
            config.dead_letter_retention_by_queue,
        )
        self.sweeper = Sweeper(db, config.sweep_interval, config.full_sweep_interval)
        return Leader(
            db,
            worker_id,
            [
                ("scheduler", lambda stop: self.scheduler.run(stop, health)),
                ("rescuer", lambda stop: self.rescuer.run(stop, health)),
                ("pruner", lambda stop: self.pruner.run(stop, health)),
                ("sweeper", lambda stop: self.sweeper.run(stop, health)),
                *self._periodic_task(health),
            ],
            health,
            election_interval_s=config.leader_election_interval,
            lease_s=config.leader_lease,
        )

    def _periodic_task(self, health: Health) -> list[tuple[str, MaintenanceService]]:
        periodic = self.periodic
        if periodic is None:
            return []
        return [("periodic", lambda stop: periodic.run(stop, health))]

    def _describe_task(self, task_name: str) -> str | None:
        if task_name.startswith(JOB_TASK_PREFIX):
            return self.executor.describe(int(task_name.removeprefix(JOB_TASK_PREFIX)))
        return None

    async def _watch_health(self) -> None:
        # Polls: failures are reported from other threads too, and what
        # matters is how long they have lasted.
        while self.health.check():  # noqa: ASYNC110
            await asyncio.sleep(HEALTH_CHECK_S)

    def _on_control(self, payload: str) -> None:
        """One ``awa_control`` message: queue settings, or about a job."""
        if payload.partition(":")[0] == QUEUE_SETTINGS_VERB:
            self.queue_settings.told()
        else:
            self.control.deliver(payload)

    def _became_unhealthy(self, reason: str) -> None:
        if self._unhealthy.is_set():
            return
        self._unhealthy.set()
        log.error(
            "worker %s is unhealthy: %s; it stops claiming, heartbeating and leading, so "
            "other workers rescue its jobs and take over maintenance",
            self.worker_id,
            reason,
        )
        if self._started:
            self.producer.stop()
            self.leader.stop()

    @property
    def healthy(self) -> bool:
        """False once a service failed for longer than ``unhealthy_after``."""
        return self.health.reason is None

    @property
    def unhealthy_reason(self) -> str | None:
        """Which service failed, for how long, and why (``None`` while healthy)."""
        return self.health.reason

    @property
    def failing_services(self) -> tuple[str, ...]:
        """Services failing right now (retried with backoff meanwhile)."""
        return tuple(sorted(self.health.failing))

    def queue_load(self) -> list[tuple[str, int, int]]:
        """``(queue, jobs running here, slots)`` for each of its queues."""
        return [(name, self.dispatcher.running(name), slots) for name, slots in self.config.queues]

    async def wait_until_unhealthy(self) -> str:
        """Returns (the reason) once the worker has become unhealthy."""
        await self._unhealthy.wait()
        return self.health.reason or "unhealthy"

    async def shutdown(self, timeout_s: float) -> None:
        """Stops gracefully; see the module docstring for the order of steps."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        started = time.monotonic()
        config = self.config
        self.producer.stop()
        self.notifier.stop()
        try:
            await asyncio.wait_for(self.producer.wait_idle(), timeout_s)
        except TimeoutError:
            log.warning("a claim was still in flight after %.1fs", timeout_s)
        for index in range(config.claim_concurrency):
            await self._supervisor.stop(f"claimer-{index}", 0.0)
        handlers_left = max(timeout_s - (time.monotonic() - started), 0.0)
        await self.executor.stop(handlers_left)
        self.completer.stop()
        if not await self._supervisor.stop("completer", config.final_write_timeout):
            self._report_unwritten()
        await self._release_held_jobs()
        self.leader.stop()
        await self._supervisor.stop("leader", LEADER_STOP_TIMEOUT_S)
        await self._supervisor.stop("notifier", LEADER_STOP_TIMEOUT_S)
        await asyncio.to_thread(self.heartbeat.stop)
        await self._supervisor.cancel_all()
        try:
            await self.db.execute("workers_deregister", self.worker_id)
        except Exception as error:  # noqa: BLE001 - the rescuer cleans up after us
            log.warning("could not remove worker row %s (%s)", self.worker_id, error)
        metrics.retire(self.tally)
        log.info(
            "worker %d stopped: %d jobs run in %d claims, %d outcomes written in %d writes, "
            "%d stale",
            self.worker_id,
            self.executor.finished,
            self.producer.claims,
            self.completer.applied,
            self.completer.flushes,
            self.completer.stale,
        )

    def _report_unwritten(self) -> None:
        unwritten = self.completer.unwritten
        if not unwritten:
            return
        error = self.completer.last_error
        why = "no write finished in time" if error is None else f"{type(error).__name__}: {error}"
        log.warning(
            "could not write %d outcomes within %.1fs (%s); their jobs stay running until "
            "the rescuer returns them",
            unwritten,
            self.config.final_write_timeout,
            why,
        )

    async def _release_held_jobs(self) -> None:
        ids, leases = self.dispatcher.held()
        if not ids:
            return
        try:
            row = await asyncio.wait_for(
                self.db.fetchrow("jobs_release", ids, leases), self.config.final_write_timeout
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
        return self._started and not self._stopped
