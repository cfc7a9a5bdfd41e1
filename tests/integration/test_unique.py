"""Unique inserts: the key, the blocking states, and how each insert path
reports a duplicate."""

from __future__ import annotations

import datetime
import json

import pytest
from pydantic import BaseModel

import awa
from tests.support import FAST_WORKER, wait_for_state


class Report(BaseModel):
    account: int
    month: str = "2026-11"


async def test_a_duplicate_insert_raises_unique_conflict_naming_the_holder(client, conn):
    first = await client.insert(Report(account=1), unique_opts={})
    with pytest.raises(awa.UniqueConflict) as raised:
        await client.insert(Report(account=1), unique_opts=awa.UniqueOpts())
    assert raised.value.existing_id == first.id
    # Other args, or no unique options, insert as usual.
    await client.insert(Report(account=2), unique_opts={})
    await client.insert(Report(account=1))
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 3


async def test_dict_key_order_does_not_matter(client, conn):
    await client.insert({"a": 1, "b": 2}, kind="sync", unique_opts={})
    with pytest.raises(awa.UniqueConflict):
        await client.insert({"b": 2, "a": 1}, kind="sync", unique_opts={})


async def test_a_conflict_leaves_the_callers_transaction_usable(client, conn):
    await client.insert(Report(account=1), unique_opts={})
    async with conn.transaction():
        with pytest.raises(awa.UniqueConflict):
            await client.insert(Report(account=1), unique_opts={}, connection=conn)
        await conn.execute("SELECT 1")
        await client.insert(Report(account=9), unique_opts={}, connection=conn)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 2


async def test_by_args_false_collapses_every_job_of_the_kind(client, conn):
    await client.insert(Report(account=1), unique_opts={"by_args": False})
    with pytest.raises(awa.UniqueConflict):
        await client.insert(Report(account=2), unique_opts={"by_args": False})


async def test_by_queue_keeps_queues_apart(client, conn):
    await client.insert(Report(account=1), queue="a", unique_opts={"by_queue": True})
    await client.insert(Report(account=1), queue="b", unique_opts={"by_queue": True})
    with pytest.raises(awa.UniqueConflict):
        await client.insert(Report(account=1), queue="a", unique_opts={"by_queue": True})


async def test_by_period_keeps_one_job_per_window(client, conn):
    opts = {"by_period": datetime.timedelta(days=3650)}
    await client.insert(Report(account=1), unique_opts=opts)
    with pytest.raises(awa.UniqueConflict):
        await client.insert(Report(account=1), unique_opts=opts)
    # A one-second window: a later window is a different key.
    await client.insert(Report(account=5), unique_opts={"by_period": 1})
    await conn.execute("SELECT pg_sleep(1.1)")
    await client.insert(Report(account=5), unique_opts={"by_period": 1})


async def test_a_job_outside_its_blocking_states_no_longer_blocks(client, conn):
    first = await client.insert(Report(account=1), unique_opts={})
    await conn.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = $1", first.id)
    second = await client.insert(Report(account=1), unique_opts={})
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", second.id)
    with pytest.raises(awa.UniqueConflict):
        await client.insert(Report(account=1), unique_opts={})
    until_finished = {"states": awa.DEFAULT_UNIQUE_STATES - {awa.JobState.Completed}}
    third = await client.insert(Report(account=3), unique_opts=until_finished)
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", third.id)
    await client.insert(Report(account=3), unique_opts=until_finished)


async def test_insert_many_skips_duplicates_and_returns_what_it_inserted(client, conn):
    await client.insert(Report(account=1), unique_opts={})
    jobs = await client.insert_many(
        [Report(account=1), Report(account=2), Report(account=2), Report(account=3)],
        unique_opts={},
    )
    assert sorted(job.args.account for job in jobs) == [2, 3]
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 3


async def test_copy_paths_refuse_unique_options(client):
    with pytest.raises(awa.ValidationError, match="COPY cannot skip duplicates"):
        await client.enqueue_many_copy([Report(account=1)], opts=[{"unique_opts": {}}])


@pytest.mark.parametrize(
    ("unique_opts", "field"),
    [
        ({"states": []}, "unique_opts.states"),
        ({"states": ["sleeping"]}, "unique_opts.states"),
        ({"by_period": 0}, "unique_opts.by_period"),
        ({"by_args": "yes"}, "unique_opts.by_args"),
        ({"by_day": True}, "unique_opts"),
        ("all", "unique_opts"),
    ],
)
async def test_bad_unique_options_are_refused_before_any_sql(client, unique_opts, field):
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert(Report(account=1), unique_opts=unique_opts)
    assert raised.value.field == field


# ── states: a job holds its key in every state it waits or runs in ────────

WAITING_OR_RUNNING = ["scheduled", "available", "running", "retryable", "waiting_external"]


@pytest.mark.parametrize(
    ("states", "missing"),
    [
        (["available", "scheduled"], "running, retryable, waiting_external"),
        (["running"], "scheduled, available, retryable, waiting_external"),
        (["completed"], "scheduled, available, running, retryable, waiting_external"),
        (sorted(awa.DEFAULT_UNIQUE_STATES - {awa.JobState.WaitingExternal}), "waiting_external"),
    ],
)
async def test_states_that_leave_out_a_waiting_or_running_state_are_refused(
    client, conn, states, missing
):
    for unique_opts in ({"states": states}, awa.UniqueOpts(states=frozenset(states))):
        with pytest.raises(awa.ValidationError) as raised:
            await client.insert(Report(account=1), unique_opts=unique_opts)
        assert raised.value.field == "unique_opts.states"
        assert f"must include {missing}" in str(raised.value)
        with pytest.raises(awa.ValidationError) as raised:
            await client.insert_many([Report(account=2)], unique_opts=unique_opts)
        assert raised.value.field == "unique_opts.states"
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


@pytest.mark.parametrize(
    "states",
    [
        WAITING_OR_RUNNING,
        [*WAITING_OR_RUNNING, "failed"],
        [*WAITING_OR_RUNNING, "completed", "failed", "cancelled"],
        sorted(awa.DEFAULT_UNIQUE_STATES),
    ],
)
async def test_states_with_every_waiting_and_running_state_are_accepted(client, conn, states):
    first = await client.insert(Report(account=1), unique_opts={"states": states})
    with pytest.raises(awa.UniqueConflict) as raised:
        await client.insert(Report(account=1), unique_opts={"states": states})
    assert raised.value.existing_id == first.id


def test_the_default_states_hold_the_key_while_a_job_waits_or_runs():
    assert {state.value for state in awa.DEFAULT_UNIQUE_STATES} >= set(WAITING_OR_RUNNING)
    awa.UniqueOpts().core()


class Signup(BaseModel):
    user_id: int


async def test_a_durable_follow_up_with_unsafe_states_fails_its_trigger(client, conn):
    client.on_completed_enqueue_with(
        Signup,
        lambda args, job: awa.EnqueueRequest(Report(account=args.user_id), kind="report").unique(
            {"states": ["available", "scheduled"]}
        ),
    )
    client.task(Signup)(lambda job: None)
    trigger = await client.insert(Signup(user_id=1), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, trigger.id, "failed")
    assert "unique_opts.states" in json.dumps(json.loads(row["errors"]))
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'report'") == 0


async def test_a_staged_follow_up_with_unsafe_states_is_a_staging_error(client, conn):
    refused: list[awa.StagingError] = []

    @client.task(Signup)
    async def signup(job):
        try:
            job.enqueue_on_completion(
                Report(account=1), kind="report", unique_opts={"states": ["available"]}
            )
        except awa.StagingError as error:
            refused.append(error)
            raise

    trigger = await client.insert(Signup(user_id=1))
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, trigger.id, "failed")
    [error] = refused
    assert error.field == "unique_opts.states"
    assert "must include scheduled, running, retryable, waiting_external" in str(error)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'report'") == 0
