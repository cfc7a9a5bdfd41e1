"""Job results, end to end: a handler's return value is stored with its
completion, ``client.result`` waits for it, and ``Completed`` carries it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import awa
import awa.results
from awa import events
from awa.errors import JobNotCompleted, ResultError, ResultTimeout
from awa.worker.outcome import MAX_RESULT_BYTES
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state

#: Bounds every wait for a result in these tests.
WAIT_S = 15.0


@pytest.fixture
def only_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiters read their job again only when notified (no periodic check
    within a test's time): a waiter that returns was woken by LISTEN."""
    monkeypatch.setattr(awa.results, "RECHECK_INTERVAL_S", 3600.0)


class Work(BaseModel):
    n: int = 0


class Summary(BaseModel):
    total: int
    names: list[str]


async def test_a_returned_value_is_stored_and_returned_by_result(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> Any:
        return {"n": job.args.n, "items": [1, 2.5, "three", None, True]}

    job = await client.insert(Work(n=7))
    await client.start([("default", 2)], **FAST_WORKER)
    expected = {"n": 7, "items": [1, 2.5, "three", None, True]}
    assert await client.result(job.id, timeout=WAIT_S) == expected
    assert json.loads((await job_row(conn, job.id))["result"]) == expected
    assert (await client.get_job(job.id, include_payload=True)).result == expected
    with pytest.raises(awa.PayloadOmitted):
        _ = (await client.get_job(job.id)).result


async def test_result_started_before_the_job_runs_returns_once_it_completes(
    client, conn, only_notifications
):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> int:
        return job.args.n * 2

    job = await client.insert(Work(n=21))
    waiting = asyncio.create_task(client.result(job.id, timeout=WAIT_S))
    for _ in range(20):  # let the waiter LISTEN and find the job still queued
        await asyncio.sleep(0)
    assert not waiting.done()
    assert (await job_row(conn, job.id))["state"] == "available"
    await client.start([("default", 2)], **FAST_WORKER)
    assert await waiting == 42


async def test_result_of_a_job_that_already_completed_returns_it(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> str:
        return "done"

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    await client.shutdown()  # nothing will notify any more
    assert await client.result(job.id, timeout=WAIT_S) == "done"


async def test_a_handler_returning_none_has_no_result(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> None:
        return None

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    assert await client.result(job.id, timeout=WAIT_S) is None
    assert (await job_row(conn, job.id))["result"] is None


async def test_a_pydantic_model_is_stored_as_its_json(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> Summary:
        return Summary(total=3, names=["a", "b"])

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    assert await client.result(job.id, timeout=WAIT_S) == {"total": 3, "names": ["a", "b"]}


async def test_each_job_of_a_batch_gets_its_own_result_or_none(client, conn, only_notifications):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> Any:
        return None if job.args.n % 3 == 0 else {"n": job.args.n}

    jobs = await client.insert_many([Work(n=n) for n in range(30)])
    await client.start([("default", 8)], **FAST_WORKER)
    for n, job in enumerate(jobs):
        expected = None if n % 3 == 0 else {"n": n}
        assert await client.result(job.id, timeout=WAIT_S) == expected


async def test_a_sync_handler_returns_a_result_too(client, conn):
    @client.task(Work)
    def handler(job: awa.Job[Work]) -> list[int]:
        return [job.args.n]

    job = await client.insert(Work(n=5))
    await client.start([("default", 2)], **FAST_WORKER)
    assert await client.result(job.id, timeout=WAIT_S) == [5]


async def test_a_result_that_is_not_json_fails_the_job_for_good(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> Any:
        return {"when": object()}

    job = await client.insert(Work(), max_attempts=5)
    await client.start([("default", 2)], **FAST_WORKER)
    with pytest.raises(JobNotCompleted) as raised:
        await client.result(job.id, timeout=WAIT_S)
    assert raised.value.state == "failed"
    assert raised.value.reason == "terminal_error"
    assert raised.value.error.startswith("ResultError: ")
    assert "result.when" in raised.value.error
    row = await job_row(conn, job.id)
    assert row["attempt"] == 1 and row["result"] is None
    assert json.loads(row["errors"])[-1]["type"] == ResultError.__name__


async def test_a_result_larger_than_the_limit_fails_the_job_for_good(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> str:
        return "x" * MAX_RESULT_BYTES  # with its quotes, two bytes too many

    job = await client.insert(Work(), max_attempts=5)
    await client.start([("default", 2)], **FAST_WORKER)
    with pytest.raises(JobNotCompleted) as raised:
        await client.result(job.id, timeout=WAIT_S)
    assert raised.value.error.startswith("ResultError: ")
    assert f"{MAX_RESULT_BYTES + 2} bytes" in raised.value.error
    row = await job_row(conn, job.id)
    assert row["state"] == "failed" and row["attempt"] == 1


async def test_a_result_of_exactly_the_limit_is_stored(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> str:
        return "x" * (MAX_RESULT_BYTES - 2)

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    assert await client.result(job.id, timeout=WAIT_S) == "x" * (MAX_RESULT_BYTES - 2)


async def test_result_times_out_with_a_named_timeout_error(client, conn):
    job = await client.insert(Work())  # no worker runs it
    with pytest.raises(ResultTimeout) as raised:
        await client.result(job.id, timeout=0.2)
    assert isinstance(raised.value, TimeoutError)
    assert raised.value.job_id == job.id and raised.value.state == "available"
    assert (await job_row(conn, job.id))["state"] == "available"


async def test_result_of_a_job_that_failed_names_why(client, conn, only_notifications):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> None:
        raise awa.TerminalError("the input is wrong")

    job = await client.insert(Work())
    await client.start([("default", 2)], **FAST_WORKER)
    with pytest.raises(JobNotCompleted) as raised:
        await client.result(job.id, timeout=WAIT_S)
    assert raised.value.state == "failed" and raised.value.reason == "terminal_error"
    assert raised.value.error == "TerminalError: the input is wrong"
    assert raised.value.job_id == job.id


async def test_result_of_a_job_whose_attempts_ran_out_says_so(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> None:
        raise ValueError("flaky")

    job = await client.insert(Work(), max_attempts=1)
    await client.start([("default", 2)], **FAST_WORKER)
    with pytest.raises(JobNotCompleted) as raised:
        await client.result(job.id, timeout=WAIT_S)
    assert raised.value.reason == "max_attempts_exhausted"
    assert raised.value.error == "ValueError: flaky"


async def test_a_waiter_learns_at_once_that_its_job_was_cancelled(client, conn, only_notifications):
    job = await client.insert(Work())
    waiting = asyncio.create_task(client.result(job.id, timeout=WAIT_S))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done()
    await client.cancel(job.id, reason="not needed")
    with pytest.raises(JobNotCompleted) as raised:
        await waiting
    assert raised.value.state == "cancelled" and raised.value.error == "not needed"


async def test_result_of_an_unknown_job_is_job_not_found(client):
    with pytest.raises(awa.JobNotFound):
        await client.result(999_999_999, timeout=1)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
async def test_result_refuses_a_timeout_that_is_not_a_positive_duration(client, timeout):
    job = await client.insert(Work())
    with pytest.raises(awa.ValidationError) as raised:
        await client.result(job.id, timeout=timeout)
    assert raised.value.field == "timeout"


async def test_result_refuses_an_id_that_is_not_an_integer(client):
    with pytest.raises(awa.ValidationError) as raised:
        await client.result("12")  # type: ignore[arg-type]
    assert raised.value.field == "job_id"


async def test_the_completed_event_carries_the_result(client, conn):
    seen: list[events.Completed[Work]] = []
    client.on_event(Work, seen.append)

    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> dict[str, int]:
        return {"doubled": job.args.n * 2}

    job = await client.insert(Work(n=4))
    await client.start([("default", 2)], **FAST_WORKER)
    assert await client.result(job.id, timeout=WAIT_S) == {"doubled": 8}

    async def completed() -> list[Any]:
        return [event for event in seen if isinstance(event, events.Completed)]

    [event] = await eventually(completed)
    assert event.result == {"doubled": 8}
    assert event.job.result == {"doubled": 8}


async def test_behind_a_pooler_without_listen_url_result_reads_the_job_until_it_ends(
    client, conn, database_url, start_pgbouncer, only_notifications
):
    """No LISTEN through PgBouncer in transaction mode: the waiter reads its
    job every POLL_INTERVAL_S instead (the notifications are not heard)."""
    bouncer = start_pgbouncer(database_url)

    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> int:
        return job.args.n + 1

    job = await client.insert(Work(n=1))
    async with awa.AsyncClient(bouncer.url, pooler="transaction") as polling:
        waiting = asyncio.create_task(polling.result(job.id, timeout=WAIT_S))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        await client.start([("default", 2)], **FAST_WORKER)
        assert await waiting == 2


async def test_a_waiter_registers_while_it_waits_and_leaves_no_row_behind(client, conn):
    @client.task(Work)
    async def handler(job: awa.Job[Work]) -> int:
        return 1

    job = await client.insert(Work())
    waiting = asyncio.create_task(client.result(job.id, timeout=WAIT_S))

    async def registered() -> bool:
        return bool(await conn.fetchval("SELECT count(*) FROM awa.result_waiters"))

    await eventually(registered, timeout=WAIT_S)
    await client.start([("default", 2)], **FAST_WORKER)
    assert await waiting == 1
    other = await client.insert(Work(), run_at=None, queue="nobody_works_here")
    with pytest.raises(ResultTimeout):
        await client.result(other.id, timeout=0.2)
    assert await conn.fetchval("SELECT count(*) FROM awa.result_waiters") == 0
