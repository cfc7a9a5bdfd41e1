"""Unique inserts: the key, the blocking states, and how each insert path
reports a duplicate."""

from __future__ import annotations

import datetime

import pytest
from pydantic import BaseModel

import awa


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
    only_queued = {"states": ["available", "scheduled"]}
    third = await client.insert(Report(account=3), unique_opts=only_queued)
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", third.id)
    await client.insert(Report(account=3), unique_opts=only_queued)


async def test_insert_many_skips_duplicates_and_returns_what_it_inserted(client, conn):
    await client.insert(Report(account=1), unique_opts={})
    jobs = await client.insert_many(
        [Report(account=1), Report(account=2), Report(account=2), Report(account=3)],
        unique_opts={},
    )
    assert sorted(job.args["account"] for job in jobs) == [2, 3]
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
