"""The worker pipeline, built in one place: claim → attempt → handler →
outcome → completer → flush → lifecycle.

:class:`Pipeline` wires the Rust dispatcher, the completer, the executor and
the producer through their constructors; values flow one way (the producer
hands claimed rows to the executor, the executor hands each attempt's
outcome to the completer, the completer hands committed transitions to the
lifecycle). A worker process runs one with its services around it
(:mod:`awa.worker.worker`); ``awa.testing`` builds the same pipeline with one
slot, so the test path is the production path.
"""

from __future__ import annotations

from dataclasses import dataclass

from awa import _core
from awa.config import WorkerConfig
from awa.db import Database
from awa.lifecycle import Lifecycle
from awa.metrics import WorkerTally
from awa.worker.claims import ClaimSignal
from awa.worker.completer import Completer
from awa.worker.executor import Executor
from awa.worker.producer import Producer
from awa.worker.progress import ProgressBuffer
from awa.worker.report import Reporter
from awa.worker.supervisor import Health

MAX_SYNC_THREADS = 64


@dataclass(frozen=True, slots=True)
class Pipeline:
    dispatcher: _core.Dispatcher
    claims: ClaimSignal
    completer: Completer
    executor: Executor
    producer: Producer
    reporter: Reporter
    #: What handlers report with set_progress: the executor's jobs fill it,
    #: the completer takes a job's last report with its outcome, and the
    #: worker's heartbeat writes the rest.
    progress: ProgressBuffer

    @classmethod
    def build(
        cls,
        db: Database,
        lifecycle: Lifecycle,
        config: WorkerConfig,
        worker_id: int,
        health: Health,
    ) -> Pipeline:
        dispatcher = _core.Dispatcher(
            list(config.queues),
            config.claim_batch_size,
            config.global_max_workers,
            prefetch=config.prefetch,
            prefetch_wait_s=config.prefetch_wait,
        )
        for queue, weight, min_workers in config.queue_shares:
            dispatcher.set_share(queue, weight, min_workers)
        claims = ClaimSignal(dispatcher)
        tally = WorkerTally(dict(config.queues))
        tally.running_of = dispatcher.running
        reporter = Reporter(tally=tally)
        progress = ProgressBuffer()
        completer = Completer(
            db,
            lifecycle,
            health,
            progress,
            tally,
            batch_size=config.flush_batch_size,
            flush_interval_s=config.flush_interval,
        )
        threads = config.sync_handler_threads or min(config.total_slots, MAX_SYNC_THREADS)
        executor = Executor(
            lifecycle, dispatcher, completer, claims, db, threads, reporter, progress
        )
        registry = lifecycle.registry
        producer = Producer(
            db,
            dispatcher,
            executor,
            completer,
            claims,
            health,
            worker_id,
            poll_interval_s=config.poll_interval,
            reconcile_interval_s=config.reconcile_interval,
            total_slots=config.total_slots,
            flush_batch_size=config.flush_batch_size,
            kind_timeouts={
                kind: task.timeout_s
                for kind, task in registry.by_kind.items()
                if task.timeout_s is not None
            },
            queue_timeouts=config.queue_timeouts,
            tally=tally,
        )
        return cls(dispatcher, claims, completer, executor, producer, reporter, progress)
