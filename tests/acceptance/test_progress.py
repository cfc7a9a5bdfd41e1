"""Job progress, end to end: ``job.set_progress`` is kept by the attempt,
written by the worker's heartbeat or by ``flush_progress``, guarded by the
run lease, and kept across retries."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa.errors import ProgressError
from awa.job import Progress
from awa.worker.progress import MAX_PROGRESS_BYTES
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state

#: Heartbeats too rare to write anything within a test: only flush_progress does.
NO_BEATS = {**FAST_WORKER, "heartbeat_interval": 60.0, "heartbeat_staleness": 120.0}
WAIT_S = 15.0


class Work(BaseModel):
    n: int = 0


async def stored_progress(conn: Any, job_id: int) -> dict[str, Any] | None:
    raw = (await job_row(conn, job_id))["progress"]
    return None if raw is None else json.loads(raw)


async def test_the_heartbeat_writes_the_latest_progress(client, conn):
    release = asyncio.Event()
    seen: list[Progress | None] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        job.set_progress(10, "starting")
        job.set_progress(50.5, "half way", step=2, of=4)
        seen.append(job.progress)
        await release.wait()

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    expected = {"percent": 50.5, "message": "half way", "data": {"step": 2, "of": 4}}

    async def written() -> bool:
        return await stored_progress(conn, job.id) == expected

    await eventually(written, timeout=WAIT_S)
    assert seen == [Progress(50.5, "half way", {"step": 2, "of": 4})]
    fetched = await client.get_job(job.id)
    assert fetched.progress == Progress(50.5, "half way", {"step": 2, "of": 4})
    release.set()
    await wait_for_state(conn, job.id, "completed")
    assert (await client.get_job(job.id)).progress == seen[0]


async def test_flush_progress_writes_now_and_set_progress_alone_does_not(client, conn):
    reported, flushed, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    written: list[bool] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        job.set_progress(25, rows=100)
        reported.set()
        await flushed.wait()
        written.append(await job.flush_progress())
        await release.wait()

    job = await client.insert(Work())
    await client.start([("default", 2)], **NO_BEATS)
    await asyncio.wait_for(reported.wait(), WAIT_S)
    assert await stored_progress(conn, job.id) is None
    flushed.set()
    await eventually(lambda: _true_if(written), timeout=WAIT_S)
    assert written == [True]
    assert await stored_progress(conn, job.id) == {
        "percent": 25.0,
        "message": None,
        "data": {"rows": 100},
    }
    release.set()
    await wait_for_state(conn, job.id, "completed")


async def _true_if(values: list[Any]) -> bool:
    return bool(values)


async def test_an_attempt_that_lost_its_job_writes_no_progress(client, conn):
    started, lost, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    written: list[bool] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        started.set()
        await lost.wait()
        job.set_progress(90, "too late")
        written.append(await job.flush_progress())
        job.set_progress(95, "later still")
        await release.wait()

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), WAIT_S)
    # Another attempt holds the job now (as after a rescue and a new claim).
    await conn.execute("UPDATE awa.jobs SET run_lease = run_lease + 1 WHERE id = $1", job.id)
    lost.set()
    await eventually(lambda: _true_if(written), timeout=WAIT_S)
    assert written == [False]
    worker = client.worker
    assert worker is not None
    beats = worker.heartbeat.beats

    async def beaten_twice() -> bool:  # the second beat began after the report
        return worker.heartbeat.beats >= beats + 2

    await eventually(beaten_twice, timeout=WAIT_S)
    assert await stored_progress(conn, job.id) is None
    release.set()


async def test_progress_is_kept_across_a_retry(client, conn):
    seen: list[Progress | None] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        seen.append(job.progress)
        if job.attempt == 1:
            job.set_progress(40, "first pass", done=["a", "b"])
            assert await job.flush_progress()
            raise ValueError("try again")
        job.set_progress(100, "second pass")
        assert await job.flush_progress()

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    assert seen == [None, Progress(40.0, "first pass", {"done": ["a", "b"]})]
    assert (await client.get_job(job.id)).progress == Progress(100.0, "second pass", {})


async def test_flush_progress_without_a_report_writes_nothing(client, conn):
    written: list[bool] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        written.append(await job.flush_progress())

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    assert written == [False]
    assert await stored_progress(conn, job.id) is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda job: job.set_progress(101), "percent"),
        (lambda job: job.set_progress(-0.5), "percent"),
        (lambda job: job.set_progress(float("nan")), "percent"),
        (lambda job: job.set_progress("50"), "percent"),
        (lambda job: job.set_progress(True), "percent"),
        (lambda job: job.set_progress(50, message=3), "message"),
        (lambda job: job.set_progress(50, when=object()), "progress.data.when"),
        (lambda job: job.set_progress(50, blob="x" * MAX_PROGRESS_BYTES), "progress"),
    ],
)
async def test_a_report_that_cannot_be_stored_raises_progress_error_and_keeps_nothing(
    client, conn, call, field
):
    raised: list[BaseException] = []
    kept: list[Progress | None] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        job.set_progress(5, "fine")
        try:
            call(job)
        except ProgressError as error:
            raised.append(error)
        kept.append(job.progress)

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    [error] = raised
    assert isinstance(error, awa.ValidationError)
    assert error.field == field, error
    assert kept == [Progress(5.0, "fine", {})]


async def test_the_last_report_is_written_with_the_outcome_without_a_beat(client, conn):
    seen: list[Progress | None] = []

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> str:
        seen.append(job.progress)
        if job.attempt == 1:
            job.set_progress(30, "first")
            raise ValueError("try again")
        job.set_progress(100, "done", items=3)
        return "ok"

    job = await client.insert(Work())
    await client.start([("default", 2)], **NO_BEATS)
    assert await client.result(job.id, timeout=WAIT_S) == "ok"
    assert seen == [None, Progress(30.0, "first", {})]
    assert await stored_progress(conn, job.id) == {
        "percent": 100.0,
        "message": "done",
        "data": {"items": 3},
    }


async def test_a_beat_skips_a_job_row_another_transaction_holds_and_the_outcome_writes_it(
    client, conn
):
    reported, release = asyncio.Event(), asyncio.Event()

    @client.task(Work)
    async def handler(job: awa.Job[Any]) -> None:
        job.set_progress(60, "locked out")
        reported.set()
        await release.wait()

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await asyncio.wait_for(reported.wait(), WAIT_S)
    worker = client.worker
    assert worker is not None
    async with conn.transaction():  # as the completer holds a row it writes
        await conn.execute("SELECT 1 FROM awa.jobs WHERE id = $1 FOR UPDATE", job.id)
        beats = worker.heartbeat.beats

        async def beating_on() -> bool:  # beats neither wait nor fail
            return worker.heartbeat.beats >= beats + 3

        await eventually(beating_on, timeout=WAIT_S)
        assert await stored_progress(conn, job.id) is None
    release.set()
    await wait_for_state(conn, job.id, "completed")
    assert await stored_progress(conn, job.id) == {
        "percent": 60.0,
        "message": "locked out",
        "data": {},
    }
