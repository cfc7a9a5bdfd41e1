"""Handler-staged follow-ups (``job.enqueue_on_completion``) on a real worker:
inserted only with a completion, after the specs; every limit refused at
staging time with ``StagingError``, failing the attempt even if swallowed."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import metrics
from tests.support import FAST_WORKER, wait_for_state


class StageA(BaseModel):
    item: int


class StageB(BaseModel):
    item_id: int


def committed(result: str) -> int:
    return metrics.value(metrics.STAGED_FOLLOW_UPS_COMMITTED, **{metrics.FOLLOW_UP_RESULT: result})


def discarded() -> int:
    return metrics.value(metrics.STAGED_FOLLOW_UPS_DISCARDED)


async def stage_b_rows(conn) -> list[Any]:
    return await conn.fetch("SELECT * FROM awa.jobs WHERE kind = 'stage_b' ORDER BY id")


async def run(client, handler, *, max_attempts: int = 25) -> awa.Job[Any]:
    client.task(StageA)(handler)
    job = await client.insert(StageA(item=3), max_attempts=max_attempts)
    await client.start([("default", 2)], **FAST_WORKER)
    return job


async def test_staged_follow_ups_are_inserted_with_the_completion_after_the_specs(client, conn):
    client.on_completed_enqueue(StageA, lambda args, job: StageB(item_id=-1))
    inserted_before = committed("inserted")

    async def handler(job):
        job.enqueue_on_completion(StageB(item_id=job.args.item * 10), queue="b", priority=1)
        job.enqueue_on_completion(StageB(item_id=job.args.item * 20), queue="b")

    trigger = await run(client, handler)
    row = await wait_for_state(conn, trigger.id, "completed")
    spec_row, *staged = await stage_b_rows(conn)
    assert json.loads(spec_row["args"]) == {"item_id": -1}
    assert [json.loads(r["args"])["item_id"] for r in staged] == [30, 60]
    assert [r["priority"] for r in staged] == [1, 2]
    assert all(r["created_at"] == row["finalized_at"] for r in staged)
    assert committed("inserted") - inserted_before == 2


async def test_a_staged_duplicate_is_skipped_and_counted(client, conn):
    duplicates_before = committed("duplicate")

    async def handler(job):
        job.enqueue_on_completion(StageB(item_id=1), queue="b", unique_opts={})
        job.enqueue_on_completion(StageB(item_id=1), queue="b", unique_opts={})

    trigger = await run(client, handler)
    await wait_for_state(conn, trigger.id, "completed")
    assert len(await stage_b_rows(conn)) == 1
    assert committed("duplicate") - duplicates_before == 1


@pytest.mark.parametrize(
    ("outcome", "final_state"),
    [
        (lambda: awa.RetryAfter(3600), "retryable"),
        (lambda: awa.Snooze(3600), "scheduled"),
        (lambda: awa.Cancel("stop"), "cancelled"),
    ],
)
async def test_any_outcome_but_completed_discards_what_was_staged(
    client, conn, outcome, final_state
):
    before = discarded()

    async def handler(job):
        job.enqueue_on_completion(StageB(item_id=1), queue="b")
        return outcome()

    trigger = await run(client, handler)
    await wait_for_state(conn, trigger.id, final_state)
    assert await stage_b_rows(conn) == []
    assert discarded() - before == 1


async def test_an_error_discards_what_was_staged(client, conn):
    async def handler(job):
        job.enqueue_on_completion(StageB(item_id=1), queue="b")
        raise ValueError("later failure")

    trigger = await run(client, handler, max_attempts=1)
    await wait_for_state(conn, trigger.id, "failed")
    assert await stage_b_rows(conn) == []


TOO_FAR = datetime.timedelta(days=365 * 9000)


@pytest.mark.parametrize(
    ("stage", "field"),
    [
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), priority=0), "priority"),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), priority=5), "priority"),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), max_attempts=0), "max_attempts"),
        (
            lambda job: job.enqueue_on_completion(StageB(item_id=1), max_attempts=1001),
            "max_attempts",
        ),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), kind="k" * 201), "kind"),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), queue="q" * 201), "queue"),
        (
            lambda job: job.enqueue_on_completion(StageB(item_id=1), tags=["t"] * 21),
            "tags",
        ),
        (lambda job: job.enqueue_on_completion({"text": "a\0b"}, kind="stage_b"), "args.text"),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), run_at=TOO_FAR), "run_at"),
        (
            lambda job: [job.enqueue_on_completion(StageB(item_id=i)) for i in range(17)],
            "follow_ups",
        ),
        (
            lambda job: [
                job.enqueue_on_completion({"blob": "x" * 20_000}, kind="stage_b") for _ in range(4)
            ],
            "follow_ups",
        ),
        (lambda job: job.enqueue_on_completion(StageB(item_id=1), colour="red"), "options"),
    ],
)
async def test_each_staging_limit_raises_staging_error_and_fails_the_attempt(
    client, conn, stage, field
):
    raised: list[awa.StagingError] = []

    async def handler(job):
        try:
            stage(job)
        except awa.StagingError as error:
            raised.append(error)
            raise

    trigger = await run(client, handler)
    row = await wait_for_state(conn, trigger.id, "failed")
    [error] = raised
    assert isinstance(error, awa.TerminalError)
    assert error.field == field
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "StagingError"
    assert row["attempt"] == 1
    assert await stage_b_rows(conn) == []


async def test_a_swallowed_staging_error_still_fails_the_attempt(client, conn):
    async def handler(job):
        job.enqueue_on_completion(StageB(item_id=1), queue="b")
        with contextlib.suppress(awa.StagingError):  # ignored; the handler returns normally
            job.enqueue_on_completion(StageB(item_id=2), priority=9)

    trigger = await run(client, handler)
    row = await wait_for_state(conn, trigger.id, "failed")
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "StagingError"
    assert "priority" in entry["message"]
    assert await stage_b_rows(conn) == []


async def test_staging_after_the_handler_returned_raises_the_sealed_error(client, conn):
    late: list[BaseException] = []
    gate = asyncio.Event()

    async def stage_later(job):
        await gate.wait()
        try:
            job.enqueue_on_completion(StageB(item_id=1))
        except awa.StagingError as error:
            late.append(error)

    background: list[asyncio.Task[None]] = []

    async def handler(job):
        background.append(asyncio.create_task(stage_later(job)))

    trigger = await run(client, handler)
    await wait_for_state(conn, trigger.id, "completed")
    gate.set()
    await asyncio.gather(*background)
    [error] = late
    assert error.field is None
    assert "closed" in str(error)
    assert await stage_b_rows(conn) == []


async def test_a_committed_job_cannot_stage_and_cannot_be_changed(client, conn):
    client.task(StageA)(lambda job: None)
    job = await client.insert(StageA(item=1))
    # Only the running attempt a handler receives carries the capabilities.
    assert isinstance(job, awa.Job) and not isinstance(job, awa.RunningJob)
    assert not hasattr(job, "enqueue_on_completion")
    with pytest.raises(AttributeError, match="read-only"):
        job.priority = 1  # type: ignore[misc]
