"""What eases a switch from awa-pg: callback tokens with ``.id``,
``client.transaction()``, module-level ``awa.migrate`` and
``resolve_callback`` ignoring what no policy rule recognises."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from pydantic import BaseModel

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database
from tests.support import FAST_WORKER, wait_for_state


class Order(BaseModel):
    number: int


async def park(client, conn, *, wait_with) -> tuple[int, awa.CallbackToken]:
    tokens: asyncio.Queue[awa.CallbackToken] = asyncio.Queue()

    @client.task(Order)
    async def order(job):
        token = await job.register_callback(timeout_seconds=600)
        await tokens.put(token)
        return awa.WaitForCallback(wait_with(token))

    job = await client.insert(Order(number=1), max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    token = await asyncio.wait_for(tokens.get(), 15)
    await wait_for_state(conn, job.id, "waiting_external")
    return job.id, token


@pytest.mark.parametrize(
    "wait_with", [lambda t: t, lambda t: t.id, str], ids=["token", "id", "string"]
)
async def test_a_callback_token_has_an_id_and_every_form_parks_the_job(client, conn, wait_with):
    job_id, token = await park(client, conn, wait_with=wait_with)
    assert isinstance(token, awa.CallbackToken) and isinstance(token, uuid.UUID)
    assert type(token.id) is uuid.UUID and token.id == token and str(token) == str(token.id)
    assert await conn.fetchval("SELECT callback_id FROM awa.jobs WHERE id = $1", job_id) == token
    await client.complete_external(token, {"ok": True})  # the token itself is an id
    await wait_for_state(conn, job_id, "completed")
    await client.shutdown()


async def test_wait_for_callback_in_place_takes_the_token(client, conn):
    seen: list[object] = []

    @client.task(Order)
    async def order(job):
        token = await job.register_callback(timeout_seconds=600)
        seen.append(await job.wait_for_callback(token))

    job = await client.insert(Order(number=2))
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "waiting_external")
    callback_id = await conn.fetchval("SELECT callback_id FROM awa.jobs WHERE id = $1", job.id)
    await client.resume_external(callback_id, {"step": 2})
    await wait_for_state(conn, job.id, "completed")
    await client.shutdown()
    assert seen == [{"step": 2}]


def test_wait_for_callback_refuses_what_is_not_an_id():
    with pytest.raises(awa.ValidationError, match="callback_id"):
        awa.WaitForCallback("not-a-uuid")  # type: ignore[arg-type]


async def test_resolve_callback_without_a_matching_rule_leaves_the_job_parked(client, conn):
    job_id, token = await park(client, conn, wait_with=lambda t: t)
    outcome = await client.resolve_callback(token, {"anything": 1})
    assert outcome.resolution == "ignored"
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job_id) == (
        "waiting_external"
    )
    completed = await client.resolve_callback(token, {}, default_action="complete")
    assert completed.resolution == "completed"
    await client.shutdown()


async def test_a_client_transaction_commits_its_inserts_together(client, conn):
    async with client.transaction() as tx:
        await tx.insert({"n": 1}, kind="k")
        await tx.insert_many([{"n": 2}, {"n": 3}], kind="k")
        assert await tx.enqueue_many_copy([{"n": 4}], kind="k") == 1
        await tx.insert_many_copy([{"n": 5}], kind="k")
        await tx.connection.execute("SELECT 1")
        assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0  # not yet visible
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 5


async def test_a_client_transaction_rolls_back_when_the_block_raises(client, conn):
    with pytest.raises(RuntimeError, match="the signup failed"):
        async with client.transaction() as tx:
            await tx.insert({"n": 1}, kind="k")
            raise RuntimeError("the signup failed")
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_module_level_migrate_brings_a_database_up_to_date(server_url):
    name = scratch_name("awa_migrate")
    await create_database(server_url, name)
    try:
        url = with_database(server_url, name)
        applied = await awa.migrate(url)
        assert applied and applied == sorted(applied)
        assert await awa.migrate(url) == []
    finally:
        await drop_database(server_url, name)
