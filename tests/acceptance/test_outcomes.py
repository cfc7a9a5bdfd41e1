"""Every handler outcome, end to end: insert → worker → final state."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from typing import Any

from pydantic import BaseModel

import awa
from tests.support import FAST_WORKER, wait_for_state


class Work(BaseModel):
    n: int = 0


async def run_one(client, conn, handler, *, max_attempts: int = 25, state: str, **insert):
    client.task(Work)(handler)
    job = await client.insert(Work(), max_attempts=max_attempts, **insert)
    await client.start([("default", 4)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, state)
    await client.shutdown()
    return row


async def test_returning_none_completes_the_job(client, conn):
    async def handler(job):
        return None

    row = await run_one(client, conn, handler, state="completed")
    assert row["attempt"] == 1
    assert row["finalized_at"] is not None
    assert row["errors"] is None
    job = await client.get_job(row["id"])
    assert job.state is awa.JobState.Completed
    assert job.finalized_at >= job.created_at


async def test_retry_after_reschedules_and_uses_an_attempt(client, conn):
    seen: list[int] = []

    async def handler(job):
        seen.append(job.attempt)
        return awa.RetryAfter(0.05) if job.attempt < 3 else None

    row = await run_one(client, conn, handler, state="completed")
    assert seen == [1, 2, 3]
    assert row["attempt"] == 3


async def test_retry_after_with_no_attempts_left_fails(client, conn):
    async def handler(job):
        return awa.RetryAfter(0.01)

    row = await run_one(client, conn, handler, max_attempts=2, state="failed")
    assert row["attempt"] == 2
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "RetryAfter"


async def test_retry_after_sets_run_at_to_that_delay(client, conn):
    async def handler(job):
        return awa.RetryAfter(3600)

    row = await run_one(client, conn, handler, state="retryable")
    delay = (row["run_at"] - row["attempted_at"]).total_seconds()
    assert 3590 < delay < 3610
    assert row["errors"] is None


async def test_snooze_defers_without_consuming_an_attempt(client, conn):
    seen: list[int] = []

    async def handler(job):
        seen.append(job.attempt)
        return awa.Snooze(0.05) if len(seen) < 3 else None

    row = await run_one(client, conn, handler, max_attempts=1, state="completed")
    assert seen == [1, 1, 1]
    assert row["attempt"] == 1


async def test_snooze_goes_through_scheduled(client, conn):
    async def handler(job):
        return awa.Snooze(3600)

    row = await run_one(client, conn, handler, state="scheduled")
    assert row["attempt"] == 0


async def test_cancel_records_the_reason(client, conn):
    async def handler(job):
        return awa.Cancel("customer left")

    row = await run_one(client, conn, handler, state="cancelled")
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "Cancel"
    assert entry["message"] == "customer left"
    assert row["finalized_at"] is not None


async def test_terminal_error_fails_at_once(client, conn):
    class Unrecoverable(awa.TerminalError):
        pass

    async def handler(job):
        raise Unrecoverable("bad address")

    row = await run_one(client, conn, handler, state="failed")
    assert row["attempt"] == 1
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "Unrecoverable"
    assert entry["message"] == "bad address"
    assert entry["outcome"] == "failed"
    assert "raise Unrecoverable" in entry["traceback"]


async def test_an_exception_retries_with_backoff(client, conn):
    async def handler(job):
        raise ValueError("flaky")

    row = await run_one(client, conn, handler, state="retryable")
    backoff = (row["run_at"] - row["attempted_at"]).total_seconds()
    assert 1.9 < backoff < 2.6  # 2^1 s plus up to 25 % jitter
    [entry] = json.loads(row["errors"])
    assert (entry["attempt"], entry["type"], entry["message"]) == (1, "ValueError", "flaky")
    assert entry["outcome"] == "retryable"
    datetime.datetime.fromisoformat(entry["at"])


async def test_exceptions_fail_the_job_after_max_attempts(client, conn):
    attempts: list[int] = []

    async def handler(job):
        attempts.append(job.attempt)
        raise RuntimeError(f"attempt {job.attempt}")

    client.task(Work)(handler)
    job = await client.insert(Work(), max_attempts=3)
    await client.start([("default", 2)], **FAST_WORKER)
    for _ in range(2):
        await wait_for_state(conn, job.id, "retryable")
        # Skip the backoff instead of waiting seconds for it.
        await conn.execute(
            "UPDATE awa.jobs SET run_at = now() WHERE id = $1 AND state = 'retryable'", job.id
        )
    row = await wait_for_state(conn, job.id, "failed")
    await client.shutdown()
    assert attempts == [1, 2, 3]
    entries = json.loads(row["errors"])
    assert [e["attempt"] for e in entries] == [1, 2, 3]
    assert [e["outcome"] for e in entries] == ["retryable", "retryable", "failed"]


async def test_sync_handlers_run_in_a_thread(client, conn):
    threads: list[str] = []

    def handler(job):
        threads.append(threading.current_thread().name)

    row = await run_one(client, conn, handler, state="completed")
    assert row["attempt"] == 1
    assert threads and threads[0] != threading.main_thread().name


async def test_sync_handler_exceptions_are_recorded(client, conn):
    def handler(job):
        raise KeyError("missing")

    row = await run_one(client, conn, handler, state="retryable")
    assert json.loads(row["errors"])[0]["type"] == "KeyError"


async def insert_unchecked(database_url: str, args: dict[str, Any], kind: str) -> int:
    """A job as another release's producer inserts it: a client that
    registers no tasks checks no arguments against this release's models."""
    async with awa.AsyncClient(database_url) as producer:
        return (await producer.insert(args, kind=kind)).id


async def test_arguments_that_no_longer_validate_are_parked_undecodable_and_can_be_retried(
    client, conn, database_url
):
    seen: list[int] = []
    client.task(Work)(lambda job: seen.append(job.args.n))
    job_id = await insert_unchecked(database_url, {"n": "not a number"}, "work")
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job_id, "undecodable")
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "ArgsNotDecodable" and entry["reason"] == "args_invalid"
    assert "do not validate as Work" in entry["message"] and row["attempt"] == 0
    await conn.execute("UPDATE awa.jobs SET args = '{\"n\": 3}' WHERE id = $1", job_id)
    assert await client.retry_undecodable([job_id]) == 1
    await wait_for_state(conn, job_id, "completed")
    await client.shutdown()
    assert seen == [3]


async def test_an_unknown_kind_is_parked_undecodable_and_retried_once_a_worker_knows_it(
    client, conn, database_url
):
    client.task(Work)(lambda job: None)
    job_id = await insert_unchecked(database_url, {}, "from_a_newer_release")
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job_id, "undecodable")
    await client.shutdown()
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "UnknownJobKind" and entry["reason"] == "unknown_kind"
    async with awa.AsyncClient(database_url) as newer:
        newer.task(dict, kind="from_a_newer_release")(lambda job: None)
        assert await newer.retry_undecodable(kind="from_a_newer_release") == 1
        await newer.start([("default", 1)], **FAST_WORKER)
        await wait_for_state(conn, job_id, "completed")


async def test_a_handler_sees_its_typed_args_and_attempt(client, conn):
    got: list[tuple[Work, int, str]] = []

    async def handler(job: awa.Job[Work]) -> None:
        got.append((job.args, job.attempt, job.state.value))

    client.task(Work)(handler)
    job = await client.insert(Work(n=7))
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    await client.shutdown()
    assert got == [(Work(n=7), 1, "running")]


async def test_returning_something_else_completes_with_it_as_the_result(client, conn):
    async def handler(job):
        return {"result": 1}

    row = await run_one(client, conn, handler, state="completed")
    assert (await client.get_job(row["id"], include_payload=True)).result == {"result": 1}


async def test_a_handler_cancelling_itself_is_a_failure_not_a_shutdown(client, conn):
    async def handler(job):
        raise asyncio.CancelledError

    row = await run_one(client, conn, handler, state="retryable")
    assert json.loads(row["errors"])[0]["type"] == "CancelledError"
