"""``awa.bridges``: jobs inserted inside a transaction of psycopg 3 or
SQLAlchemy (sync and async, each driver) commit with the caller's rows and
vanish with a rollback; results, options and errors are the client's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
import pytest
import sqlalchemy
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import awa
from awa.bridges import psycopg as psycopg_bridge
from awa.bridges import sqlalchemy as sqlalchemy_bridge

ORDERS_SQL = "CREATE TABLE IF NOT EXISTS bridge_orders (note text NOT NULL); TRUNCATE bridge_orders"
ADD_ORDER = "INSERT INTO bridge_orders (note) VALUES ('{note}')"


class SendReceipt(BaseModel):
    order: str


@pytest.fixture
async def orders(conn: asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """``conn``, with the caller's own table the jobs commit beside."""
    await conn.execute(ORDERS_SQL)
    yield conn
    await conn.execute("DROP TABLE bridge_orders")


def with_driver(url: str, driver: str) -> str:
    return url.replace("postgresql://", f"postgresql+{driver}://", 1)


# Each writes an order row and a job in one transaction of its driver, then
# commits or rolls back, and returns the job the bridge gave back.
Write = Callable[[str, str, bool], Awaitable[awa.Job[Any]]]


async def psycopg_connection(url: str, note: str, commit: bool) -> awa.Job[Any]:
    with psycopg.connect(url) as connection:
        connection.execute(ADD_ORDER.format(note=note))
        job = psycopg_bridge.insert(connection, SendReceipt(order=note))
        connection.commit() if commit else connection.rollback()
    return job


async def psycopg_async_connection(url: str, note: str, commit: bool) -> awa.Job[Any]:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        await connection.execute(ADD_ORDER.format(note=note))
        job = await psycopg_bridge.insert_async(connection, SendReceipt(order=note))
        await (connection.commit() if commit else connection.rollback())
    return job


async def sqlalchemy_connection(url: str, note: str, commit: bool) -> awa.Job[Any]:
    engine = sqlalchemy.create_engine(with_driver(url, "psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # The job first: the bridge begins the transaction itself.
            job = sqlalchemy_bridge.insert(connection, SendReceipt(order=note))
            connection.execute(sqlalchemy.text(ADD_ORDER.format(note=note)))
            connection.commit() if commit else connection.rollback()
    finally:
        engine.dispose()
    return job


async def sqlalchemy_session(url: str, note: str, commit: bool) -> awa.Job[Any]:
    engine = sqlalchemy.create_engine(with_driver(url, "psycopg"), poolclass=NullPool)
    try:
        with Session(engine) as session:
            session.execute(sqlalchemy.text(ADD_ORDER.format(note=note)))
            job = sqlalchemy_bridge.insert(session, SendReceipt(order=note))
            session.commit() if commit else session.rollback()
    finally:
        engine.dispose()
    return job


def sqlalchemy_async_connection(driver: str) -> Write:
    async def write(url: str, note: str, commit: bool) -> awa.Job[Any]:
        engine = create_async_engine(with_driver(url, driver), poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                job = await sqlalchemy_bridge.insert_async(connection, SendReceipt(order=note))
                await connection.execute(sqlalchemy.text(ADD_ORDER.format(note=note)))
                await (connection.commit() if commit else connection.rollback())
        finally:
            await engine.dispose()
        return job

    return write


def sqlalchemy_async_session(driver: str) -> Write:
    async def write(url: str, note: str, commit: bool) -> awa.Job[Any]:
        engine = create_async_engine(with_driver(url, driver), poolclass=NullPool)
        try:
            async with AsyncSession(engine) as session:
                await session.execute(sqlalchemy.text(ADD_ORDER.format(note=note)))
                job = await sqlalchemy_bridge.insert_async(session, SendReceipt(order=note))
                await (session.commit() if commit else session.rollback())
        finally:
            await engine.dispose()
        return job

    return write


WRITERS: dict[str, Write] = {
    "psycopg-connection": psycopg_connection,
    "psycopg-async-connection": psycopg_async_connection,
    "sqlalchemy-connection-psycopg": sqlalchemy_connection,
    "sqlalchemy-session-psycopg": sqlalchemy_session,
    "sqlalchemy-async-connection-asyncpg": sqlalchemy_async_connection("asyncpg"),
    "sqlalchemy-async-session-asyncpg": sqlalchemy_async_session("asyncpg"),
    "sqlalchemy-async-connection-psycopg": sqlalchemy_async_connection("psycopg"),
    "sqlalchemy-async-session-psycopg": sqlalchemy_async_session("psycopg"),
}


@pytest.mark.parametrize("write", WRITERS.values(), ids=WRITERS.keys())
async def test_a_job_commits_with_the_callers_row(write, database_url, orders, client):
    job = await write(database_url, "paid", True)
    assert isinstance(job, awa.Job) and job.args == SendReceipt(order="paid")
    assert job.kind == "send_receipt" and job.state is awa.JobState.Available
    assert await orders.fetchval("SELECT note FROM bridge_orders") == "paid"
    stored = await client.get_job(job.id, include_payload=True)
    assert stored.args == {"order": "paid"} and stored.created_at == job.created_at


@pytest.mark.parametrize("write", WRITERS.values(), ids=WRITERS.keys())
async def test_a_job_rolls_back_with_the_callers_row(write, database_url, orders, client):
    job = await write(database_url, "abandoned", False)
    assert await orders.fetchval("SELECT count(*) FROM bridge_orders") == 0
    with pytest.raises(awa.JobNotFound):
        await client.get_job(job.id)
    assert await client.count_by_state() == {}


async def test_insert_many_takes_the_clients_options_per_job(database_url, conn, client):
    with psycopg.connect(database_url) as connection:
        jobs = psycopg_bridge.insert_many(
            connection,
            [{"n": 1}, {"n": 2}],
            kind="counted",
            queue="batch",
            opts=[None, {"priority": 1, "tags": ["first"]}],
        )
    assert [(j.args, j.queue, j.priority, j.tags) for j in jobs] == [
        ({"n": 1}, "batch", 2, []),
        ({"n": 2}, "batch", 1, ["first"]),
    ]
    assert await client.count_by_state() == {awa.JobState.Available: 2}


async def many_on_psycopg_async(url: str) -> list[awa.Job[Any]]:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        return await psycopg_bridge.insert_many_async(connection, RECEIPTS, queue="many")


async def many_on_sqlalchemy_session(url: str) -> list[awa.Job[Any]]:
    engine = sqlalchemy.create_engine(with_driver(url, "psycopg"), poolclass=NullPool)
    try:
        with Session(engine) as session, session.begin():
            return sqlalchemy_bridge.insert_many(session, RECEIPTS, queue="many")
    finally:
        engine.dispose()


def many_on_sqlalchemy_async(driver: str) -> Callable[[str], Awaitable[list[awa.Job[Any]]]]:
    async def write(url: str) -> list[awa.Job[Any]]:
        engine = create_async_engine(with_driver(url, driver), poolclass=NullPool)
        try:
            async with AsyncSession(engine) as session, session.begin():
                return await sqlalchemy_bridge.insert_many_async(session, RECEIPTS, queue="many")
        finally:
            await engine.dispose()

    return write


RECEIPTS = [SendReceipt(order="a"), SendReceipt(order="b")]
MANY_WRITERS = {
    "psycopg-async-connection": many_on_psycopg_async,
    "sqlalchemy-session-psycopg": many_on_sqlalchemy_session,
    "sqlalchemy-async-session-asyncpg": many_on_sqlalchemy_async("asyncpg"),
    "sqlalchemy-async-session-psycopg": many_on_sqlalchemy_async("psycopg"),
}


@pytest.mark.parametrize("write", MANY_WRITERS.values(), ids=MANY_WRITERS.keys())
async def test_insert_many_on_each_driver_commits_every_job(write, database_url, conn, client):
    jobs = await write(database_url)
    assert [(job.args, job.queue) for job in jobs] == [(r, "many") for r in RECEIPTS]
    assert await client.count_by_state() == {awa.JobState.Available: 2}


async def test_a_clients_tasks_give_the_kind_queue_and_decoding(database_url, conn):
    tasks = awa.AsyncClient(database_url)

    @tasks.task(SendReceipt, kind="receipt", queue="email")
    async def send(job: awa.Job[SendReceipt]) -> None: ...

    async with await psycopg.AsyncConnection.connect(database_url) as connection:
        job = await psycopg_bridge.insert_async(
            connection, SendReceipt(order="o"), client=awa.Client(database_url)
        )
        by_task = await psycopg_bridge.insert_async(
            connection, SendReceipt(order="p"), client=tasks
        )
    assert (job.kind, job.queue) == ("send_receipt", "default")  # that Client has no tasks
    assert (by_task.kind, by_task.queue) == ("receipt", "email")
    assert by_task.args == SendReceipt(order="p")


async def test_a_held_unique_key_is_a_unique_conflict_and_the_transaction_goes_on(
    database_url, orders, client
):
    first = await client.insert({"n": 1}, kind="once", unique_opts={})
    with psycopg.connect(database_url) as connection:
        with pytest.raises(awa.UniqueConflict) as raised:
            psycopg_bridge.insert(connection, {"n": 1}, kind="once", unique_opts={})
        connection.execute(ADD_ORDER.format(note="still usable"))
    assert raised.value.existing_id == first.id
    assert await orders.fetchval("SELECT note FROM bridge_orders") == "still usable"


async def test_bad_options_are_refused_before_any_sql(database_url, conn):
    with psycopg.connect(database_url) as connection:
        with pytest.raises(awa.ValidationError) as raised:
            psycopg_bridge.insert(connection, {"n": 1}, kind="k", priority=0)
        assert raised.value.field == "priority"
        with pytest.raises(awa.ValidationError, match="kind: is required"):
            psycopg_bridge.insert(connection, {"n": 1})
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_an_unmigrated_database_is_schema_not_migrated(fresh_database):
    url = await fresh_database()
    with psycopg.connect(url) as connection, pytest.raises(awa.SchemaNotMigrated):
        psycopg_bridge.insert(connection, {"n": 1}, kind="k")
    engine = create_async_engine(with_driver(url, "asyncpg"), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            with pytest.raises(awa.SchemaNotMigrated):
                await sqlalchemy_bridge.insert_async(connection, {"n": 1}, kind="k")
    finally:
        await engine.dispose()


async def test_the_wrong_connection_is_refused_by_name(database_url):
    async with await psycopg.AsyncConnection.connect(database_url) as connection:
        with pytest.raises(awa.ValidationError, match="insert_async") as raised:
            psycopg_bridge.insert(connection, {"n": 1}, kind="k")  # type: ignore[arg-type]
    assert raised.value.field == "connection"
    with pytest.raises(awa.ValidationError, match="must be a sqlalchemy Connection"):
        sqlalchemy_bridge.insert(object(), {"n": 1}, kind="k")  # type: ignore[arg-type]


async def test_another_database_under_sqlalchemy_is_refused_by_name():
    engine = sqlalchemy.create_engine("sqlite://")
    try:
        with (
            engine.connect() as connection,
            pytest.raises(awa.ValidationError, match=r"this one is sqlite\+pysqlite"),
        ):
            sqlalchemy_bridge.insert(connection, {"n": 1}, kind="k")
    finally:
        engine.dispose()
