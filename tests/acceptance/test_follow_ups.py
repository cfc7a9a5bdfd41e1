"""Durable follow-ups (``on_*_enqueue``) on a real worker: spec 001's builders,
their closure arguments, atomicity with the trigger, and deduplication."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel

import awa
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state


class Signup(BaseModel):
    user_id: int


class WelcomeEmail(BaseModel):
    user_id: int
    signup_job_id: int = 0


async def follow_ups(conn: asyncpg.Connection, kind: str = "welcome_email") -> list[Any]:
    return await conn.fetch("SELECT * FROM awa.jobs WHERE kind = $1 ORDER BY id", kind)


async def run_signup(client, handler, *, max_attempts: int = 25, user_id: int = 7) -> awa.Job[Any]:
    client.task(Signup)(handler)
    job = await client.insert(Signup(user_id=user_id), max_attempts=max_attempts)
    await client.start([("default", 4)], **FAST_WORKER)
    return job


async def settled(conn, job_id: int, state: str) -> Any:
    row = await wait_for_state(conn, job_id, state)
    return row


async def test_completed_follow_up_gets_the_trigger_args_and_committed_row(client, conn):
    client.on_completed_enqueue(
        Signup, lambda args, job: WelcomeEmail(user_id=args.user_id, signup_job_id=job.id)
    )
    trigger = await run_signup(client, lambda job: None)
    await settled(conn, trigger.id, "completed")
    [email] = await follow_ups(conn)
    assert json.loads(email["args"]) == {"user_id": 7, "signup_job_id": trigger.id}
    assert email["queue"] == "default"
    # One transaction: the follow-up's now() is the completion's now().
    assert email["created_at"] == (await job_row(conn, trigger.id))["finalized_at"]


async def test_with_variant_sets_insert_options(client, conn):
    client.on_completed_enqueue_with(
        Signup,
        lambda args, job: (
            awa.EnqueueRequest(WelcomeEmail(user_id=args.user_id))
            .queue("email")
            .priority(1)
            .metadata({"source": "signup"})
        ),
    )
    trigger = await run_signup(client, lambda job: None)
    await settled(conn, trigger.id, "completed")
    [email] = await follow_ups(conn)
    assert (email["queue"], email["priority"]) == ("email", 1)
    assert json.loads(email["metadata"]) == {"source": "signup"}


async def test_with_opts_replaces_every_earlier_option(client, conn):
    client.on_completed_enqueue_with(
        Signup,
        lambda args, job: (
            awa.EnqueueRequest(WelcomeEmail(user_id=1)).queue("email").with_opts(priority=3)
        ),
    )
    trigger = await run_signup(client, lambda job: None)
    await settled(conn, trigger.id, "completed")
    [email] = await follow_ups(conn)
    assert (email["queue"], email["priority"]) == ("default", 3)


async def test_a_closure_returning_none_enqueues_nothing_and_the_trigger_commits(client, conn):
    client.on_completed_enqueue_with(
        Signup, lambda args, job: None if args.user_id < 100 else WelcomeEmail(user_id=1)
    )
    trigger = await run_signup(client, lambda job: None)
    await settled(conn, trigger.id, "completed")
    assert await follow_ups(conn) == []


async def test_a_raising_closure_rolls_back_the_completion(client, conn):
    def broken(args, job):
        raise RuntimeError("closure bug")

    client.on_completed_enqueue(Signup, broken)
    trigger = await run_signup(client, lambda job: None, max_attempts=1)
    row = await settled(conn, trigger.id, "failed")
    [entry] = json.loads(row["errors"])
    assert entry["type"] == "RuntimeError"
    assert "on_completed_enqueue" in entry["message"] and "closure bug" in entry["message"]
    assert row["finalized_at"] is not None
    assert await follow_ups(conn) == []


async def test_a_raising_closure_with_attempts_left_retries_and_runs_retried_specs(client, conn):
    runs: list[int] = []

    def completed_once_broken(args, job):
        raise RuntimeError("closure bug")

    def note_retry(args, job, error, attempt, next_run_at):
        return awa.EnqueueRequest({"attempt": attempt, "error": error}, kind="retry_note")

    client.on_completed_enqueue(Signup, completed_once_broken)
    client.on_retried_enqueue(Signup, note_retry)

    async def handler(job):
        runs.append(job.attempt)
        if job.attempt == 1:
            return None
        return awa.Cancel("stop here")

    trigger = await run_signup(client, handler, max_attempts=3)
    await settled(conn, trigger.id, "cancelled")
    [note] = await follow_ups(conn, "retry_note")
    args = json.loads(note["args"])
    assert args["attempt"] == 1
    assert "closure bug" in args["error"]
    assert runs == [1, 2]


async def test_a_follow_up_insert_that_fails_rolls_back_its_trigger_until_it_can_commit(
    client, conn
):
    # The database refuses the follow-up (a constraint this test adds):
    # the trigger's completion must not commit without it.
    await conn.execute(
        "ALTER TABLE awa.jobs ADD CONSTRAINT test_refuse_email CHECK (kind <> 'welcome_email')"
    )
    client.on_completed_enqueue(Signup, lambda args, job: WelcomeEmail(user_id=args.user_id))
    try:
        trigger = await run_signup(client, lambda job: None)

        async def flush_failed() -> bool:
            worker = client.worker
            return (
                worker is not None
                and worker.completer.flushes == 0
                and worker.executor.finished >= 1
            )

        await eventually(flush_failed)
        row = await job_row(conn, trigger.id)
        assert row["state"] == "running"
        assert await follow_ups(conn) == []
    finally:
        await conn.execute("ALTER TABLE awa.jobs DROP CONSTRAINT test_refuse_email")
    await settled(conn, trigger.id, "completed")
    assert len(await follow_ups(conn)) == 1


@pytest.mark.parametrize(
    ("outcome", "handler", "expected_state"),
    [
        ("cancelled", lambda job: awa.Cancel("no longer wanted"), "cancelled"),
        ("exhausted", lambda job: (_ for _ in ()).throw(awa.TerminalError("bad input")), "failed"),
    ],
)
async def test_outcome_specs_receive_their_context(client, conn, outcome, handler, expected_state):
    seen: list[tuple[Any, ...]] = []

    def closure(args, job, *context):
        seen.append((args, job.state, *context))
        return awa.EnqueueRequest({"outcome": outcome}, kind="note")

    getattr(client, f"on_{outcome}_enqueue")(Signup, closure)
    trigger = await run_signup(client, handler)
    await settled(conn, trigger.id, expected_state)
    await eventually(lambda: follow_ups(conn, "note"))
    [(args, state, *context)] = seen
    assert args == Signup(user_id=7)
    assert state == expected_state
    if outcome == "cancelled":
        assert context == ["no longer wanted"]
    else:
        assert context == ["TerminalError: bad input", 1]


async def test_retried_spec_receives_error_attempt_and_next_run_at(client, conn):
    seen: list[tuple[Any, ...]] = []

    def closure(args, job, error, attempt, next_run_at):
        seen.append((error, attempt, next_run_at, job.run_at, job.state))
        return awa.EnqueueRequest({"attempt": attempt}, kind="note")

    client.on_retried_enqueue(Signup, closure)

    async def handler(job):
        raise ValueError("try again")

    trigger = await run_signup(client, handler, max_attempts=2)
    await settled(conn, trigger.id, "failed")
    [(error, attempt, next_run_at, run_at, state)] = seen
    assert (error, attempt, state) == ("ValueError: try again", 1, awa.JobState.Retryable)
    assert next_run_at == run_at
    assert len(await follow_ups(conn, "note")) == 1


async def test_exhausted_spec_fires_when_retries_run_out(client, conn):
    client.on_exhausted_enqueue(
        Signup, lambda args, job, error, attempt: awa.EnqueueRequest({"n": attempt}, kind="note")
    )

    async def handler(job):
        return awa.RetryAfter(0.01)

    trigger = await run_signup(client, handler, max_attempts=2)
    await settled(conn, trigger.id, "failed")
    [note] = await eventually(lambda: follow_ups(conn, "note"))
    assert json.loads(note["args"]) == {"n": 2}


async def test_duplicate_follow_ups_collapse_to_one_and_every_trigger_commits(client, conn):
    client.on_completed_enqueue_with(
        Signup,
        # On a queue this worker does not serve: a worker with no task for
        # the kind would fail the follow-up for good, freeing its key.
        lambda args, job: awa.EnqueueRequest(
            WelcomeEmail(user_id=args.user_id), queue="email"
        ).unique(),
    )
    client.task(Signup)(lambda job: None)
    triggers = await client.insert_many([Signup(user_id=5) for _ in range(6)])
    await client.start([("default", 3)], **FAST_WORKER)
    for trigger in triggers:
        await settled(conn, trigger.id, "completed")
    assert len(await follow_ups(conn)) == 1


async def test_unique_follow_up_blocks_only_while_in_its_states(client, conn):
    states = {"available", "scheduled", "running", "retryable", "waiting_external"}
    client.on_completed_enqueue_with(
        Signup,
        lambda args, job: awa.EnqueueRequest(WelcomeEmail(user_id=1)).unique({"states": states}),
    )
    client.task(Signup)(lambda job: None)
    first = await client.insert(Signup(user_id=1))
    await client.start([("default", 1)], **FAST_WORKER)
    await settled(conn, first.id, "completed")
    # The follow-up finished: without `completed` in its states it no longer blocks.
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE kind = 'welcome_email'")
    second = await client.insert(Signup(user_id=2))
    await settled(conn, second.id, "completed")
    assert len(await follow_ups(conn)) == 2


async def test_async_closures_are_refused_at_registration(client):
    async def closure(args, job):
        return None

    with pytest.raises(awa.ConfigurationError, match="plain functions"):
        client.on_completed_enqueue(Signup, closure)


async def test_a_jobs_follow_ups_name_it_as_their_parent(client, conn):
    client.on_completed_enqueue(
        Signup, lambda args, job: WelcomeEmail(user_id=args.user_id, signup_job_id=job.id)
    )

    def stage_one(job: Any) -> None:
        job.enqueue_on_completion(WelcomeEmail(user_id=99))

    trigger = await run_signup(client, stage_one)
    other = await client.insert(Signup(user_id=8))
    await settled(conn, trigger.id, "completed")
    await settled(conn, other.id, "completed")
    listed = await client.list_follow_ups(trigger.id)
    # The spec's follow-up first, then the staged one; the other trigger's are not here.
    assert [json.loads(job.args_json) for job in await with_args(client, listed)] == [
        {"user_id": 7, "signup_job_id": trigger.id},
        {"user_id": 99, "signup_job_id": 0},
    ]
    assert {job.parent_id for job in listed} == {trigger.id}
    assert (await client.get_job(listed[0].id)).parent_id == trigger.id
    assert (await client.get_job(trigger.id)).parent_id is None
    assert len(await client.list_follow_ups(other.id)) == 2
    assert await client.list_follow_ups(987_654_321) == []
    with pytest.raises(awa.ValidationError, match="job_id"):
        await client.list_follow_ups("7")  # type: ignore[arg-type]


async def with_args(client, jobs: list[awa.Job[Any]]) -> list[awa.Job[Any]]:
    """The same jobs read again with their payload."""
    return [await client.get_job(job.id, include_payload=True) for job in jobs]
