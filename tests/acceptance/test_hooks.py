"""Lifecycle hooks on a real worker: spec 001's outcome → event table, and the
dispatch rules (post-commit, stacked, isolated, never blocking)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pydantic import BaseModel

import awa
from awa import events
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state


class Work(BaseModel):
    n: int = 0


class Recorder:
    """Collects events; waits for a number of them."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, event_type: type) -> list[Any]:
        return [event for event in self.events if isinstance(event, event_type)]

    async def wait_for(self, event_type: type, count: int = 1) -> list[Any]:
        async def enough() -> list[Any] | None:
            found = self.of(event_type)
            return found if len(found) >= count else None

        return await eventually(enough)


async def orphan(conn, job_id: int, worker_id: int = 987654321) -> None:
    """Makes the job look held by a worker that died: running, under a
    worker id that does not exist."""
    await conn.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = run_lease + 1, "
        "worker_id = $2 WHERE id = $1",
        job_id,
        worker_id,
    )


async def run(client, handler, *, max_attempts: int = 25, **insert) -> awa.Job[Any]:
    client.task(Work)(handler)
    job = await client.insert(Work(n=7), max_attempts=max_attempts, **insert)
    await client.start([("default", 4)], **FAST_WORKER)
    return job


async def test_completed_job_emits_started_then_completed_with_typed_args(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        await asyncio.sleep(0.01)

    job = await run(client, handler)
    [completed] = await recorder.wait_for(events.Completed)
    [started] = await recorder.wait_for(events.Started)
    assert started.job.id == job.id and started.job.state is awa.JobState.Running
    assert started.args == Work(n=7)
    assert completed.job.state is awa.JobState.Completed
    assert completed.job.finalized_at is not None
    assert completed.args == Work(n=7)
    assert completed.duration.total_seconds() >= 0.01


async def test_failure_with_attempts_left_emits_retried(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        raise ValueError("flaky")

    job = await run(client, handler, max_attempts=3)
    [retried] = (await recorder.wait_for(events.Retried))[:1]
    assert retried.error == "ValueError: flaky"
    assert retried.attempt == 1
    assert retried.job.state is awa.JobState.Retryable
    assert retried.next_run_at == retried.job.run_at
    assert retried.job.id == job.id


JOB_FIELDS = (
    "id", "run_lease", "kind", "queue", "state", "priority", "attempt", "max_attempts",
    "crashes", "max_crashes", "run_at", "created_at", "attempted_at", "finalized_at",
    "args_json", "tags", "metadata", "errors", "callback_id", "callback_timeout_at",
    "schema_version",
)  # fmt: skip


async def test_event_job_is_the_row_as_committed_not_the_handlers_copy(client, conn):
    """The worker sends back only the columns an outcome changes and builds
    the event's job from its own copy: every field must still match the
    stored row, and what the handler did to its copy must not show."""
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        job.args.n = 99
        job.tags.append("changed by the handler")
        raise ValueError("flaky")

    job = await run(client, handler, max_attempts=3, tags=["t"], metadata={"m": 1})
    [retried] = (await recorder.wait_for(events.Retried))[:1]
    await client.shutdown()
    stored = await client.get_job(job.id, include_payload=True)
    assert stored.attempt == 1  # shut down before a second attempt committed
    for name in JOB_FIELDS:
        assert getattr(retried.job, name) == getattr(stored, name), name
    assert retried.args == Work(n=7) and retried.job.args == Work(n=7)
    assert [entry["message"] for entry in retried.job.errors] == ["flaky"]


async def test_final_failure_emits_exhausted(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        raise ValueError("broken")

    await run(client, handler, max_attempts=1)
    [exhausted] = await recorder.wait_for(events.Exhausted)
    assert exhausted.job.state is awa.JobState.Failed
    assert exhausted.error == "ValueError: broken"
    assert exhausted.attempt == 1
    assert not recorder.of(events.Retried)


async def test_terminal_error_emits_exhausted_with_attempts_left(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        raise awa.TerminalError("no such account")

    await run(client, handler, max_attempts=5)
    [exhausted] = await recorder.wait_for(events.Exhausted)
    assert exhausted.error == "TerminalError: no such account"
    assert exhausted.job.state is awa.JobState.Failed


async def test_retry_after_emits_retried_and_on_the_last_attempt_exhausted(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        return awa.RetryAfter(0.01)

    await run(client, handler, max_attempts=2)
    [exhausted] = await recorder.wait_for(events.Exhausted)
    [retried] = recorder.of(events.Retried)
    assert retried.attempt == 1 and exhausted.attempt == 2
    assert retried.error.startswith("RetryAfter")


async def test_cancel_emits_cancelled_with_the_reason(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)

    async def handler(job):
        return awa.Cancel("customer left")

    await run(client, handler)
    [cancelled] = await recorder.wait_for(events.Cancelled)
    assert cancelled.reason == "customer left"
    assert cancelled.job.state is awa.JobState.Cancelled


async def test_snooze_emits_no_outcome_event(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)
    runs = 0

    async def handler(job):
        nonlocal runs
        runs += 1
        return awa.Snooze(0.01) if runs == 1 else None

    await run(client, handler)
    await recorder.wait_for(events.Completed)
    await recorder.wait_for(events.Started, 2)
    assert {type(event) for event in recorder.events} == {events.Started, events.Completed}
    assert len(recorder.of(events.Completed)) == 1


async def test_untyped_hooks_get_plain_dict_args(client, conn):
    recorder = Recorder()
    client.on_event_kind("work", recorder)

    await run(client, lambda job: None)
    [completed] = await recorder.wait_for(events.Completed)
    assert completed.args == {"n": 7}


async def test_hooks_stack_in_order_and_a_raising_hook_does_not_stop_the_next(client, conn):
    calls: list[str] = []

    async def first(event):
        calls.append(f"first {type(event).__name__}")
        raise RuntimeError("hook bug")

    def second(event):  # a plain function: runs in a thread
        calls.append(f"second {type(event).__name__} {threading.current_thread().name}")

    client.on_event(Work, first)
    client.on_event_kind("work", second)
    await run(client, lambda job: None)

    async def both_ran() -> bool:
        return sum("Completed" in call for call in calls) == 2

    await eventually(both_ran)
    completed = [call for call in calls if "Completed" in call]
    assert completed[0] == "first Completed"
    assert completed[1].startswith("second Completed awa-hook")


async def test_a_stale_finalization_emits_no_event_and_no_follow_up(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)
    client.on_completed_enqueue(
        Work, lambda args, job: awa.EnqueueRequest({"trigger": job.id}, kind="noted")
    )
    release = asyncio.Event()

    async def handler(job):
        await release.wait()

    job = await run(client, handler)
    await wait_for_state(conn, job.id, "running")
    # Another process took the attempt away (a rescue): the lease moves on.
    await conn.execute(
        "UPDATE awa.jobs SET state = 'retryable', run_lease = run_lease + 1, "
        "run_at = now() + interval '1 hour' WHERE id = $1",
        job.id,
    )
    release.set()
    await recorder.wait_for(events.Started)

    async def flushed() -> bool:
        worker = client.worker
        return worker is not None and worker.completer.stale >= 1

    await eventually(flushed)
    await client.shutdown()
    assert not [e for e in recorder.events if not isinstance(e, events.Started)]
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'noted'") == 0
    assert (await job_row(conn, job.id))["state"] == "retryable"


async def test_a_slow_hook_blocks_neither_the_worker_nor_shutdown(client, conn):
    started_hooks = 0

    async def slow(event):
        nonlocal started_hooks
        started_hooks += 1
        await asyncio.sleep(3600)

    client.on_event(Work, slow)
    client.task(Work)(lambda job: None)
    jobs = await client.insert_many([Work(n=i) for i in range(20)])
    await client.start([("default", 2)], **FAST_WORKER)

    async def all_done() -> bool:
        done = await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state = 'completed'")
        return done == len(jobs)

    await eventually(all_done)
    # Shutdown returns although forty hook dispatches are still sleeping.
    await asyncio.wait_for(client.shutdown(), timeout=30)
    assert started_hooks >= 20


async def test_rescue_emits_rescued_with_the_reason_and_runs_rescue_follow_ups(client, conn):
    recorder = Recorder()
    client.on_event(Work, recorder)
    client.on_rescued_enqueue(
        Work,
        lambda args, job, reason: awa.EnqueueRequest(
            {"rescued": job.id, "why": reason}, kind="rescue_note"
        ),
    )
    client.task(Work)(lambda job: None)
    job = await client.insert(Work(n=1))
    await orphan(conn, job.id)
    await client.start([("other", 1)], **FAST_WORKER)
    [rescued] = await recorder.wait_for(events.Rescued)
    assert rescued.reason is awa.RescueReason.StaleHeartbeat
    assert rescued.job.state is awa.JobState.Retryable
    assert rescued.job.crashes == 1
    note = await eventually(
        lambda: conn.fetchval("SELECT args FROM awa.jobs WHERE kind = 'rescue_note'")
    )
    assert '"why": "stale_heartbeat"' in note


async def test_a_failing_rescue_follow_up_leaves_the_rescue_applied(client, conn):
    def broken(args, job, reason):
        raise RuntimeError("closure bug")

    client.on_rescued_enqueue(Work, broken)
    client.task(Work)(lambda job: None)
    job = await client.insert(Work(n=1))
    await orphan(conn, job.id)
    await client.start([("other", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "retryable")
    assert row["crashes"] == 1
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'rescue_note'") == 0
