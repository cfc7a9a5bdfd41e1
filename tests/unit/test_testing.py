"""awa.testing.HandlerJob: a handler's job in memory, with staging as in a worker."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading

import pytest
from pydantic import BaseModel

import awa
from awa.testing import HandlerJob, StagedFollowUp


class StageA(BaseModel):
    item: int


class StageB(BaseModel):
    item_id: int


def test_a_handler_job_is_a_running_job_with_args_decoded_as_a_worker_would():
    args = StageA(item=3)
    job = HandlerJob(args, tags=["t"], metadata={"trace": "x"}, attempt=2, max_attempts=5)

    assert isinstance(job, awa.Job)
    assert job.state is awa.JobState.Running
    assert (job.kind, job.queue, job.priority) == ("stage_a", "default", awa.DEFAULT_PRIORITY)
    assert (job.attempt, job.max_attempts, job.run_lease) == (2, 5, 2)
    assert job.args == args and job.args is not args  # decoded from the stored JSON
    assert job.args_json == '{"item":3}'
    assert (job.tags, job.metadata, job.errors) == (["t"], {"trace": "x"}, [])
    assert job.staged == []
    assert (job.rate_class, job.partition_key) == (None, None)


def test_a_handler_job_carries_its_rate_class_and_partition_key_checked_as_on_insert():
    job = HandlerJob(StageA(item=1), rate_class="mail", partition_key="tenant 7")
    assert (job.rate_class, job.partition_key) == ("mail", "tenant 7")
    with pytest.raises(awa.ValidationError, match=r"^partition_key: must not contain"):
        HandlerJob(StageA(item=1), partition_key="a\nb")


def test_a_handler_job_takes_its_kind_queue_and_args_type_from_the_clients_task():
    client = awa.AsyncClient("postgresql://never-connected")

    @client.task(StageA, kind="resolve", queue="resolving")
    async def resolve(job: awa.Job[StageA]) -> None:
        return None

    job = HandlerJob({"item": 1}, kind="resolve", client=client)

    assert (job.kind, job.queue) == ("resolve", "resolving")
    assert job.args == StageA(item=1)


def test_a_handler_job_refuses_what_an_insert_refuses():
    with pytest.raises(awa.ValidationError, match="kind"):
        HandlerJob({"item": 1})  # a dict needs a kind
    with pytest.raises(awa.ValidationError, match="priority"):
        HandlerJob(StageA(item=1), priority=7)


async def test_staged_follow_ups_are_listed_with_their_options():
    run_at = datetime.datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)

    async def handler(job: awa.Job[StageA]) -> None:
        job.enqueue_on_completion(
            StageB(item_id=job.args.item),
            queue="b",
            priority=1,
            max_attempts=3,
            run_at=run_at,
            tags=["x"],
            metadata={"from": job.id},
            unique_opts={},
        )
        job.enqueue_on_completion({"n": 1}, kind="plain")

    job = HandlerJob(StageA(item=5), id=42)
    assert await job.run(handler) is None

    assert job.staged == [
        StagedFollowUp(
            kind="stage_b",
            queue="b",
            args={"item_id": 5},
            priority=1,
            max_attempts=3,
            run_at=run_at,
            tags=("x",),
            metadata={"from": 42},
            unique=True,
        ),
        StagedFollowUp(
            kind="plain",
            queue="default",
            args={"n": 1},
            priority=awa.DEFAULT_PRIORITY,
            max_attempts=awa.DEFAULT_MAX_ATTEMPTS,
            run_at=None,
            tags=(),
            metadata={},
            unique=False,
        ),
    ]


async def test_a_seventeenth_follow_up_is_refused_and_fails_the_attempt():
    refused: list[awa.StagingError] = []

    async def handler(job: awa.Job[StageA]) -> None:
        for item_id in range(16):
            job.enqueue_on_completion(StageB(item_id=item_id))
        try:
            job.enqueue_on_completion(StageB(item_id=16))
        except awa.StagingError as error:
            refused.append(error)
            raise

    job = HandlerJob(StageA(item=1))
    with pytest.raises(awa.StagingError) as raised:
        await job.run(handler)

    assert raised.value is refused[0]
    assert raised.value.field == "follow_ups"
    assert len(job.staged) == 16


async def test_run_seals_staging_when_the_handler_returns():
    may_stage = asyncio.Event()
    late: asyncio.Task[None] | None = None

    async def stage_later(job: awa.Job[StageA]) -> None:
        await may_stage.wait()
        job.enqueue_on_completion(StageB(item_id=1))

    async def handler(job: awa.Job[StageA]) -> None:
        nonlocal late
        late = asyncio.create_task(stage_later(job))  # spawned, not awaited

    job = HandlerJob(StageA(item=1))
    await job.run(handler)
    may_stage.set()

    assert late is not None
    with pytest.raises(awa.StagingError) as raised:
        await late
    assert raised.value.field is None
    assert job.staged == []


async def test_run_reports_a_staging_error_the_handler_swallowed():
    async def handler(job: awa.Job[StageA]) -> None:
        with contextlib.suppress(awa.StagingError):
            job.enqueue_on_completion(StageB(item_id=1), max_attempts=0)

    job = HandlerJob(StageA(item=1))
    with pytest.raises(awa.StagingError) as raised:
        await job.run(handler)
    assert raised.value.field == "max_attempts"


async def test_a_swallowed_staging_error_does_not_matter_when_the_attempt_retries():
    # A worker fails such an attempt only when it would complete.
    async def handler(job: awa.Job[StageA]) -> awa.RetryAfter:
        with contextlib.suppress(awa.StagingError):
            job.enqueue_on_completion(StageB(item_id=1), priority=0)
        return awa.RetryAfter(5)

    assert await HandlerJob(StageA(item=1)).run(handler) == awa.RetryAfter(5)


async def test_run_calls_a_plain_handler_in_a_thread_and_returns_its_result():
    threads: list[int] = []

    def handler(job: awa.Job[StageA]) -> awa.Snooze:
        threads.append(threading.get_ident())
        job.enqueue_on_completion(StageB(item_id=job.args.item))
        return awa.Snooze(30)

    job = HandlerJob(StageA(item=9))

    assert await job.run(handler) == awa.Snooze(30)
    assert threads != [threading.get_ident()]
    assert [staged.args for staged in job.staged] == [{"item_id": 9}]


async def test_run_without_a_handler_runs_the_clients_task_once():
    client = awa.AsyncClient("postgresql://never-connected")
    calls: list[int] = []

    @client.task(StageA)
    async def stage_a(job: awa.Job[StageA]) -> None:
        calls.append(job.args.item)

    job = HandlerJob(StageA(item=2), client=client)
    await job.run()

    assert calls == [2]
    with pytest.raises(RuntimeError, match="already run"):
        await job.run()


async def test_a_handlers_exception_propagates_and_staging_is_sealed():
    async def handler(job: awa.Job[StageA]) -> None:
        raise ValueError("boom")

    job = HandlerJob(StageA(item=1))
    with pytest.raises(ValueError, match="boom"):
        await job.run(handler)
    with pytest.raises(awa.StagingError):
        job.enqueue_on_completion(StageB(item_id=1))


def test_metrics_snapshot_lists_counters_with_their_labels():
    from awa import metrics

    metrics.add("awa.test.snapshot_probe", 2, result="ok")
    assert ("awa.test.snapshot_probe", {"result": "ok"}, 2) in metrics.snapshot()
