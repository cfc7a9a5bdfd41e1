"""Pausing and resuming a queue for the whole fleet: a paused queue takes
inserts but no worker claims from it, in every process, within one poll
interval even when the notification is lost; resuming lets its jobs run."""

from __future__ import annotations

import asyncio

import pytest

import awa
from tests.processes import spawn_worker, stop_worker
from tests.support import FAST_WORKER, eventually, wait_for_state

QUEUE = "pausable"
POLL_S = 1.0


async def _claimed(conn, ids: list[int]) -> int:
    return int(
        await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND attempt > 0", ids)
    )


async def _insert(client: awa.AsyncClient, count: int, kind: str = "crashy") -> list[int]:
    jobs = await client.insert_many([{"n": n} for n in range(count)], kind=kind, queue=QUEUE)
    return [job.id for job in jobs]


async def test_a_pause_stops_claims_in_every_process_and_a_resume_lets_them_run(
    database_url, ledger
):
    conn = ledger
    settings = {"poll_interval": POLL_S}
    workers = [
        await spawn_worker(database_url, f"w{n}", mode="sleep:0.01", queue=QUEUE, settings=settings)
        for n in range(2)
    ]
    try:
        async with awa.AsyncClient(database_url) as client:
            before = await _insert(client, 40)
            await eventually(lambda: _all_in(conn, before, "completed"))

            paused = await client.pause_queue(QUEUE)
            assert paused.paused and paused.paused_at is not None
            await asyncio.sleep(POLL_S)
            held = await _insert(client, 40)  # inserts go on while paused
            await asyncio.sleep(2 * POLL_S)
            assert await _claimed(conn, held) == 0

            resumed = await client.resume_queue(QUEUE)
            assert not resumed.paused and resumed.paused_at is None
            await eventually(lambda: _all_in(conn, held, "completed"))
    finally:
        for worker in workers:
            await stop_worker(worker)


async def test_a_pause_whose_notification_is_lost_applies_within_one_poll_interval(
    database_url, ledger
):
    conn = ledger
    worker = await spawn_worker(
        database_url, "w0", mode="sleep:0.01", queue=QUEUE, settings={"poll_interval": POLL_S}
    )
    try:
        async with awa.AsyncClient(database_url) as client:
            # Written by hand: no message on awa_control, only the poll tells.
            await conn.execute(
                "INSERT INTO awa.queue_settings (queue, paused, paused_at) "
                "VALUES ($1, true, now())",
                QUEUE,
            )
            await asyncio.sleep(POLL_S + 0.5)
            held = await _insert(client, 20)
            await asyncio.sleep(2 * POLL_S)
            assert await _claimed(conn, held) == 0
            await client.resume_queue(QUEUE)
            await eventually(lambda: _all_in(conn, held, "completed"))
    finally:
        await stop_worker(worker)


async def test_a_worker_started_on_a_paused_queue_claims_nothing_until_it_is_resumed(client, conn):
    @client.task(dict, kind="paused_work", queue=QUEUE)
    async def paused_work(job):
        return None

    await client.pause_queue(QUEUE)
    job = await client.insert({"n": 1}, kind="paused_work")
    await client.start([(QUEUE, 2), ("default", 1)], **FAST_WORKER)
    worker = client.worker
    assert worker is not None
    assert worker.queue_settings.paused == {QUEUE}
    await asyncio.sleep(3 * FAST_WORKER["poll_interval"])
    assert await _claimed(conn, [job.id]) == 0
    await client.resume_queue(QUEUE)
    await wait_for_state(conn, job.id, "completed")


async def test_the_settings_of_a_queue_never_configured_are_the_defaults(client, conn):
    config = await client.get_queue_config("never_configured")
    assert config == awa.QueueConfig("never_configured")
    await client.pause_queue("never_configured")
    again = await client.resume_queue("never_configured")
    assert again == await client.get_queue_config("never_configured")
    assert again.updated_at is not None and not again.paused


async def test_pausing_twice_keeps_when_the_queue_was_first_paused(client, conn):
    first = await client.pause_queue(QUEUE, paused_by="ops: incident 42")
    assert first.paused_by == "ops: incident 42"
    second = await client.pause_queue(QUEUE)
    assert second.paused_at == first.paused_at
    assert second.paused_by == "ops: incident 42"
    resumed = await client.resume_queue(QUEUE)
    assert resumed.paused_by is None and resumed.paused_at is None


@pytest.mark.parametrize("paused_by", ["", "x" * 201, "a\0b", 7])
async def test_a_bad_paused_by_is_refused(client, conn, paused_by):
    with pytest.raises(awa.ValidationError) as refused:
        await client.pause_queue(QUEUE, paused_by=paused_by)
    assert refused.value.field == "paused_by"
    assert await client.get_queue_config(QUEUE) == awa.QueueConfig(QUEUE)


@pytest.mark.parametrize("name", ["", "a b", ".hidden", "-x", "é", "q" * 65, 7])
async def test_a_queue_name_outside_the_grammar_is_refused_everywhere(client, conn, name):
    for call in (client.pause_queue, client.resume_queue, client.get_queue_config):
        with pytest.raises(awa.ValidationError) as refused:
            await call(name)
        assert refused.value.field == "queue"
    with pytest.raises(awa.ValidationError) as refused:
        await client.insert({"n": 1}, kind="k", queue=name)
    assert refused.value.field == "queue"
    with pytest.raises(awa.ConfigurationError):
        await client.start([(name, 1)], **FAST_WORKER)


async def _all_in(conn, ids: list[int], state: str) -> bool:
    count = await conn.fetchval(
        "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND state = $2::awa.job_state", ids, state
    )
    return bool(count == len(ids))
