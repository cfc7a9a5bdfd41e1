"""Test tools: run one job through the real worker path, or a handler with no database.

- :class:`AwaTestClient` claims one available job and works it with the
  worker's own executor and completer, so hooks fire and follow-ups (the
  client's ``on_*_enqueue`` specs and the handler's staged ones) are inserted
  in the completion's transaction, exactly as in production. No worker is
  started: nothing runs in the background between two calls.
- :class:`HandlerJob` is a running :class:`awa.Job` built in memory, for unit
  tests of a handler: ``await job.run(handler)`` calls it as the worker would
  and ``job.staged`` lists what it staged with ``enqueue_on_completion``.
- pytest fixtures (``awa_database_url``, ``awa_client``, ``awa_test_client``)
  live in :mod:`awa.testing_plugin`, so that this module does not need pytest.

See ``docs/testing.md`` for an example of each.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from awa import _core
from awa.config import DEFAULT_MAX_CRASHES, WorkerConfig
from awa.db import Database
from awa.errors import ConfigurationError
from awa.followups import FollowUpStage
from awa.inserts import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, add_job
from awa.job import Job, JobState
from awa.outcomes import Cancel, RetryAfter, Snooze
from awa.tasks import Registry, decoder_for
from awa.worker.attempt import RunningJob
from awa.worker.executor import Executor
from awa.worker.pipeline import Pipeline
from awa.worker.supervisor import Health

if TYPE_CHECKING:
    from awa.client import AsyncClient

T = TypeVar("T")

log = logging.getLogger("awa.testing")

__all__ = ["AwaTestClient", "HandlerJob", "StagedFollowUp", "WorkResult"]

#: How long writing a worked job's outcome (and its follow-ups) may take.
FLUSH_TIMEOUT_S: Final = 10.0

#: Outcome names by the state the committed row is in after the attempt.
_OUTCOME_BY_STATE: Final[Mapping[JobState, str]] = {
    JobState.Completed: "completed",
    JobState.Retryable: "retried",
    JobState.Failed: "exhausted",
    JobState.Cancelled: "cancelled",
    JobState.Scheduled: "snoozed",
}
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class WorkResult:
    """What :meth:`AwaTestClient.work_one` did to one job.

    ``job`` is the row as committed, read back after the outcome's write.
    ``outcome`` is ``"completed"``, ``"retried"`` (retryable: an exception
    with attempts left, or ``RetryAfter``), ``"exhausted"`` (failed: a
    ``TerminalError``, a swallowed ``StagingError`` or no attempts left),
    ``"cancelled"`` or ``"snoozed"``; for anything else (a job parked for a
    callback, one whose arguments could not be decoded, ``"undecodable"``, or
    an outcome a rescue made stale) it is the name of the job's state.
    ``error`` is ``"<Type>: <message>"`` from the error entry this attempt
    recorded, or ``None``.
    """

    job: Job[Any]
    outcome: str
    error: str | None


class AwaTestClient:
    """Works jobs of ``client`` one at a time, in the test's own event loop.

    Uses the client's tasks, hooks and follow-up specs; needs a migrated
    schema but no running worker (``client.start``). Each call registers a
    worker row for its own duration and removes it, so it can also run beside
    real workers: its claim skips their jobs, and their rescuer leaves its job
    alone.
    """

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def work_one(
        self,
        kind_or_type: str | type[Any] | None = None,
        *,
        queue: str | None = None,
        timeout: float = 10.0,
    ) -> WorkResult | None:
        """Claims one available job and works it; ``None`` when there is none.

        ``kind_or_type`` (a kind, or an args type registered with
        ``@client.task``) and ``queue`` narrow which job is claimed; jobs of
        other kinds and queues are left untouched. The most urgent matching
        job goes first (priority, then ``run_at``, then id). The handler runs
        through the worker's executor; its outcome is written by the worker's
        completer, with follow-ups in the same transaction, and the hooks it
        triggered have finished when this returns.

        ``timeout`` (seconds) bounds the handler and then its hooks. A handler
        still running then is cancelled and its job made available again (the
        attempt not counted), and :class:`TimeoutError` is raised; so is it
        when hooks are still running.
        """
        kind = self._kind(kind_or_type)
        if queue is not None and not isinstance(queue, str):
            raise ConfigurationError(f"queue must be a string (got {queue!r})")
        db = await self.client._database()
        await db.require_schema()
        # A worker row for the call, so a rescuer running elsewhere sees the
        # claim as alive (a job without a live worker is orphaned at once).
        worker_id = await db.fetchval(
            "workers_register", socket.gethostname(), os.getpid(), [queue] if queue else []
        )
        try:
            return await self._work(db, worker_id, kind, queue, timeout)
        finally:
            try:
                await db.execute("workers_deregister", worker_id)
            except Exception as error:  # noqa: BLE001 - the maintenance cleans it up
                log.warning("could not remove the test worker row %d (%s)", worker_id, error)

    async def _work(
        self, db: Database, worker_id: int, kind: str | None, queue: str | None, timeout: float
    ) -> WorkResult | None:
        client = self.client
        row = await db.fetchrow("jobs_claim_one", kind, queue, worker_id)
        if row is None:
            return None
        job_id, run_lease, attempt = row["id"], row["run_lease"], row["attempt"]

        lifecycle = client._lifecycle
        # The worker's own pipeline, sized for one job (see awa/worker/pipeline.py).
        config = WorkerConfig(
            queues=((row["queue"], 1),), claim_batch_size=1, prefetch=0, flush_interval=0.0
        )
        pipeline = Pipeline.build(db, lifecycle, config, worker_id, Health(config.unhealthy_after))
        dispatcher, executor, completer = pipeline.dispatcher, pipeline.executor, pipeline.completer
        dispatcher.mark_all_ready()
        plan = dispatcher.plan_claim()
        assert plan is not None, "a fresh one-slot dispatcher always plans a claim"
        written = False
        try:
            try:
                executor.start(row, plan[0])
            finally:
                dispatcher.settle_claim(plan[0])
            # Waits for the handler; one still running after `timeout` is cancelled.
            await executor.stop(timeout)
            if dispatcher.held()[0]:
                raise TimeoutError(
                    f"the handler of job {job_id} ({row['kind']}) did not finish within "
                    f"{timeout}s; it was cancelled and the job made available again"
                )
            completer.stop()
            try:
                await asyncio.wait_for(completer.run(), FLUSH_TIMEOUT_S)
            except TimeoutError:
                raise TimeoutError(
                    f"writing the outcome of job {job_id} took over {FLUSH_TIMEOUT_S}s"
                ) from None
            written = True
        finally:
            if not written:
                await self._give_back(db, executor, job_id, run_lease)
        if not await lifecycle.hooks.wait_idle(timeout):
            raise TimeoutError(f"hooks for job {job_id} were still running after {timeout}s")

        job = await client.get_job(job_id, include_payload=True)
        if completer.applied:
            outcome = _OUTCOME_BY_STATE.get(job.state, job.state.value)
        else:
            outcome = job.state.value  # the attempt went stale (a rescue took it)
        return WorkResult(job, outcome, _attempt_error(job, attempt, outcome))

    async def drain(
        self,
        kind_or_type: str | type[Any] | None = None,
        *,
        queue: str | None = None,
        timeout: float = 10.0,
        max_jobs: int = 100,
    ) -> list[WorkResult]:
        """Works available jobs with :meth:`work_one` until none is left, follow-ups
        included; returns their results in order. Jobs that are retried wait for
        their backoff and are not worked again. Raises :class:`RuntimeError`
        after ``max_jobs`` (a job that keeps enqueueing more)."""
        results: list[WorkResult] = []
        while len(results) < max_jobs:
            result = await self.work_one(kind_or_type, queue=queue, timeout=timeout)
            if result is None:
                return results
            results.append(result)
        raise RuntimeError(f"drain: jobs were still available after working {max_jobs}")

    def _kind(self, kind_or_type: str | type[Any] | None) -> str | None:
        if kind_or_type is None or isinstance(kind_or_type, str):
            return kind_or_type
        return self.client._registry.kind_of_type(kind_or_type, None)

    async def _give_back(
        self, db: Database, executor: Executor, job_id: int, run_lease: int
    ) -> None:
        """After a timeout or an error: stops the handler if it still runs (it then
        records nothing) and makes the job available again, as a worker does at
        shutdown. The release is guarded by the run lease, so it changes nothing
        when the attempt's outcome was written after all."""
        await executor.stop(0.0)
        try:
            await db.fetchrow("jobs_release", [job_id], [run_lease])
        except Exception as error:  # noqa: BLE001 - the caller's error matters more
            log.warning("could not give job %d back (%s); it stays running", job_id, error)


def _attempt_error(job: Job[Any], attempt: int, outcome: str) -> str | None:
    if outcome in ("completed", "snoozed"):
        return None
    for entry in reversed(job.errors):
        if entry.get("attempt") == attempt:
            return f"{entry.get('type')}: {entry.get('message')}"
    return None


# ── handlers without a database ─────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class StagedFollowUp:
    """One follow-up a handler staged with ``job.enqueue_on_completion``.

    ``args`` and ``metadata`` are the JSON the insert would write, decoded to
    dicts; ``run_at`` is ``None`` for "as soon as the job completes";
    ``unique`` says whether it carries a unique key.
    """

    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    max_attempts: int
    run_at: datetime.datetime | None
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    unique: bool


class HandlerJob(RunningJob[T]):
    """A running job (:class:`awa.RunningJob`) made in memory, to unit-test a handler.

    ``args`` is checked and encoded as an insert would, then decoded the way
    the worker decodes it: with the task's argument type when ``client`` has a
    task for the kind, else back into the type of ``args``. ``kind`` and
    ``queue`` default as for ``client.insert``. With ``client``, follow-ups
    resolve their kinds and queues against its tasks.

    ``job.enqueue_on_completion`` checks exactly as in a worker (limits, 16
    per attempt, 64 KiB) and raises :class:`awa.StagingError`; ``staged``
    lists what was accepted. :meth:`run` calls the handler once::

        job = HandlerJob(StageA(item=1))
        assert await job.run(resolve) is None
        assert job.staged[0].kind == "stage_b"
    """

    __slots__ = ()

    def __new__(
        cls,
        args: T,
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        attempt: int = 1,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        id: int = 0,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        rate_class: str | None = None,
        partition_key: str | None = None,
        client: AsyncClient | None = None,
    ) -> HandlerJob[T]:
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ConfigurationError(f"attempt must be an integer >= 1 (got {attempt!r})")
        registry = client._registry if client is not None else Registry()
        rows = _core.InsertRows(1)
        add_job(
            rows,
            registry,
            args,
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            tags=tags,
            metadata=metadata,
            rate_class=rate_class,
            partition_key=partition_key,
        )
        [encoded] = rows.rows()
        task = registry.by_kind.get(encoded["kind"])
        if task is not None:
            decode = task.decode_args
        elif isinstance(args, Mapping):
            decode = _core.decode_json
        else:
            decode = decoder_for(type(args))
        now = datetime.datetime.now(datetime.UTC)
        # The columns every job query returns (see awa/job.py), as a claim
        # would return them for this attempt.
        row = {
            "id": id, "run_lease": attempt, "kind": encoded["kind"],
            "queue": encoded["queue"], "state": JobState.Running.value,
            "priority": encoded["priority"], "attempt": attempt,
            "max_attempts": encoded["max_attempts"], "crashes": 0,
            "max_crashes": DEFAULT_MAX_CRASHES, "run_at": now, "created_at": now,
            "attempted_at": now, "finalized_at": None, "args": encoded["args"],
            "tags": encoded["tags"], "metadata": encoded["metadata"], "errors": None,
            "callback_id": None, "callback_timeout_at": None,
            "schema_version": encoded["schema_version"],
            "rate_class": encoded["rate_class"], "partition_key": encoded["partition_key"],
        }  # fmt: skip
        return cls.claimed(row, decode, FollowUpStage(registry), None, None)  # type: ignore[return-value]

    @property
    def staged(self) -> list[StagedFollowUp]:
        """The follow-ups staged so far, in order."""
        stage = self._stage
        if stage is None or stage.rows is None:
            return []
        return [_staged(row) for row in stage.rows.rows()]

    async def run(self, handler: Callable[[Any], Any] | None = None) -> Any:
        """Calls ``handler(job)`` as the worker does and returns what it returned.

        ``async def`` handlers are awaited, plain ones run in a thread. Without
        ``handler``, the client's registered handler for the kind runs. The
        args are decoded first (a bad payload raises here, as it fails the
        attempt in a worker). When the handler returns, staging is sealed: a
        task it left running gets :class:`awa.StagingError` from
        ``enqueue_on_completion``. Whatever the handler raises propagates.

        If a staging call failed and the handler caught the error and went on
        to complete (returned ``None`` or a value that is not ``RetryAfter``,
        ``Snooze`` or ``Cancel``), that :class:`awa.StagingError` is raised:
        a worker fails such an attempt for good instead of completing it
        without its follow-up. A job runs once; make a new one per attempt.
        """
        stage = self._stage
        assert stage is not None
        if stage.sealed:
            raise RuntimeError("this HandlerJob has already run; make a new one per attempt")
        if handler is None:
            task = stage.registry.by_kind.get(self.kind)
            if task is None:
                stage.seal()
                raise ConfigurationError(
                    f"no handler given and no task registered for kind {self.kind!r}"
                )
            handler = task.handler
        try:
            self.args  # noqa: B018 - decode now, as the worker does
            if inspect.iscoroutinefunction(handler):
                result = await handler(self)
            else:
                result = await asyncio.to_thread(handler, self)
        finally:
            stage.seal()
        if stage.error is not None and not isinstance(result, RetryAfter | Snooze | Cancel):
            raise stage.error
        return result


def _staged(row: Mapping[str, Any]) -> StagedFollowUp:
    run_at_us = row["run_at_us"]
    metadata = row["metadata"]
    return StagedFollowUp(
        kind=row["kind"],
        queue=row["queue"],
        args=_core.decode_json(row["args"]),
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        run_at=None if run_at_us is None else _EPOCH + datetime.timedelta(microseconds=run_at_us),
        tags=tuple(row["tags"] or ()),
        metadata={} if metadata is None else _core.decode_json(metadata),
        unique=row["unique_key"] is not None,
    )
