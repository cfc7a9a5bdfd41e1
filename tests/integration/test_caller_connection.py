"""``connection=``: an asyncpg connection joins the caller's transaction;
anything else is refused by name before SQL, a pool above all."""

from __future__ import annotations

import logging
import sqlite3

import asyncpg
import pytest

import awa
from awa import connecting

METHODS = ["insert", "insert_many", "insert_many_copy", "enqueue_many_copy"]


async def call(client: awa.AsyncClient, method: str, connection: object) -> object:
    args: object = {"n": 1} if method == "insert" else [{"n": 1}]
    return await getattr(client, method)(args, kind="k", connection=connection)


@pytest.mark.parametrize("method", METHODS)
async def test_a_pool_is_refused_because_the_insert_would_leave_the_transaction(
    client, database_url, method
):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        with pytest.raises(awa.ValidationError, match="an asyncpg Pool is not a connection"):
            await call(client, method, pool)
    finally:
        await pool.close()
    assert await client.count_by_state() == {}


@pytest.mark.parametrize("method", METHODS)
async def test_another_drivers_connection_is_refused_by_name(client, method):
    other = sqlite3.connect(":memory:")  # as a psycopg, SQLAlchemy or Django one would be
    try:
        with pytest.raises(awa.ValidationError, match="must be an asyncpg connection") as raised:
            await call(client, method, other)
    finally:
        other.close()
    assert raised.value.field == "connection"
    assert "sqlite3.Connection" in str(raised.value)


async def test_a_pooled_connection_in_a_transaction_rolls_back_with_it(client, database_url):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as connection:
            transaction = connection.transaction()
            await transaction.start()
            await client.insert({"n": 1}, kind="k", connection=connection)
            await transaction.rollback()
    finally:
        await pool.close()
    assert await client.count_by_state() == {}


async def test_a_connection_outside_a_transaction_is_said_once(client, conn, caplog, monkeypatch):
    monkeypatch.setattr(connecting, "_warned_outside_transaction", False)
    caplog.set_level(logging.WARNING, logger="awa.client")
    await client.insert({"n": 1}, kind="k", connection=conn)
    await client.insert({"n": 2}, kind="k", connection=conn)
    said = [r for r in caplog.records if "is not in a transaction" in r.getMessage()]
    assert len(said) == 1
    assert await client.count_by_state() == {awa.JobState.Available: 2}
