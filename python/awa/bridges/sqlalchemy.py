"""Enqueue inside a SQLAlchemy transaction: ``insert`` / ``insert_many`` on
a ``Connection`` or ``Session`` (the ``postgresql+psycopg`` driver),
``insert_async`` / ``insert_many_async`` on an ``AsyncConnection`` or
``AsyncSession`` (``postgresql+asyncpg`` or ``postgresql+psycopg``).

Each reaches the driver connection that the connection's (or session's)
transaction runs on, beginning that transaction if none is open yet (as
SQLAlchemy's own first statement would), and writes the jobs there through
:mod:`awa.bridges.psycopg`, or on asyncpg as :class:`awa.AsyncClient`
does: so they commit with ``commit()`` and vanish with ``rollback()``,
together with your rows. Results, options and errors are those of
:meth:`awa.AsyncClient.insert` and :meth:`~awa.AsyncClient.insert_many`;
``client`` lends its tasks (see :func:`awa.bridges.psycopg.insert`). Needs
the ``sqlalchemy`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, Unpack, overload

import asyncpg
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from awa.bridges import _asyncpg
from awa.bridges._steps import TaskSource, registry_of
from awa.errors import ValidationError
from awa.inserts import InsertOptions
from awa.job import Job

T = TypeVar("T")

__all__ = ["insert", "insert_async", "insert_many", "insert_many_async"]


@overload
def insert(
    bind: Connection | Session,
    args: dict[str, Any],
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[dict[str, Any]]: ...


@overload
def insert(
    bind: Connection | Session,
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]: ...


def insert(
    bind: Connection | Session,
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]:
    """Inserts one job in ``bind``'s transaction (a ``Connection`` or
    ``Session`` on the psycopg driver) and returns it."""
    from awa.bridges import psycopg as bridge

    return bridge.insert(_psycopg_connection(bind), args, client=client, **options)


@overload
def insert_many(
    bind: Connection | Session,
    jobs: Sequence[dict[str, Any]],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[dict[str, Any]]]: ...


@overload
def insert_many(
    bind: Connection | Session,
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]: ...


def insert_many(
    bind: Connection | Session,
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]:
    """Inserts many jobs in one statement in ``bind``'s transaction and
    returns them (``opts[i]`` overrides ``options`` for ``jobs[i]``)."""
    from awa.bridges import psycopg as bridge

    return bridge.insert_many(_psycopg_connection(bind), jobs, opts=opts, client=client, **options)


@overload
async def insert_async(
    bind: AsyncConnection | AsyncSession,
    args: dict[str, Any],
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[dict[str, Any]]: ...


@overload
async def insert_async(
    bind: AsyncConnection | AsyncSession,
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]: ...


async def insert_async(
    bind: AsyncConnection | AsyncSession,
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]:
    """:func:`insert` on an ``AsyncConnection`` or ``AsyncSession`` (asyncpg
    or psycopg driver)."""
    driver = await _async_driver_connection(bind)
    if isinstance(driver, asyncpg.Connection):
        job: Job[T] = await _asyncpg.insert(driver, registry_of(client), args, options)
        return job
    from awa.bridges import psycopg as bridge

    return await bridge.insert_async(driver, args, client=client, **options)


@overload
async def insert_many_async(
    bind: AsyncConnection | AsyncSession,
    jobs: Sequence[dict[str, Any]],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[dict[str, Any]]]: ...


@overload
async def insert_many_async(
    bind: AsyncConnection | AsyncSession,
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]: ...


async def insert_many_async(
    bind: AsyncConnection | AsyncSession,
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]:
    """:func:`insert_many` on an ``AsyncConnection`` or ``AsyncSession``."""
    driver = await _async_driver_connection(bind)
    if isinstance(driver, asyncpg.Connection):
        registry = registry_of(client)
        jobs_written: list[Job[T]] = await _asyncpg.insert_many(
            driver, registry, jobs, opts, options
        )
        return jobs_written
    from awa.bridges import psycopg as bridge

    return await bridge.insert_many_async(driver, jobs, opts=opts, client=client, **options)


def _psycopg_connection(bind: Any) -> Any:
    """The psycopg connection under ``bind``'s transaction (begun if need be)."""
    if isinstance(bind, Session):
        connection = bind.connection()
    elif isinstance(bind, Connection):
        connection = bind
        if not connection.in_transaction():
            connection.begin()
    else:
        raise ValidationError(
            "bind: must be a sqlalchemy Connection or Session"
            f"{_async_hint(bind)} (got {type(bind).__name__})",
            "bind",
        )
    driver = connection.connection.driver_connection
    _require_driver(connection.dialect, driver, ("psycopg",), "psycopg.Connection")
    return driver


async def _async_driver_connection(bind: Any) -> Any:
    """The asyncpg or psycopg connection under ``bind``'s transaction."""
    if isinstance(bind, AsyncSession):
        connection = await bind.connection()
    elif isinstance(bind, AsyncConnection):
        connection = bind
        if not connection.in_transaction():
            await connection.begin()
    else:
        hint = " (for a Connection or Session call insert / insert_many)" if isinstance(
            bind, Connection | Session
        ) else ""  # fmt: skip
        raise ValidationError(
            f"bind: must be a sqlalchemy AsyncConnection or AsyncSession{hint} "
            f"(got {type(bind).__name__})",
            "bind",
        )
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    _require_driver(connection.dialect, driver, ("asyncpg", "psycopg"), "asyncpg or psycopg")
    if isinstance(driver, asyncpg.Connection) and not driver.is_in_transaction():
        # SQLAlchemy's asyncpg dialect opens the server transaction at its
        # first statement, not at begin(): run one, so that the jobs are in it.
        await connection.exec_driver_sql("SELECT 1")
    return driver


def _require_driver(dialect: Any, driver: Any, modules: tuple[str, ...], wanted: str) -> None:
    """Refuses, by name, a dialect awa cannot write through (not PostgreSQL,
    or another driver such as psycopg2)."""
    module = type(driver).__module__.partition(".")[0]
    if dialect.name != "postgresql" or module not in modules:
        raise ValidationError(
            f"bind: awa writes through PostgreSQL on {wanted}; this one is "
            f"{dialect.name}+{dialect.driver} (use a postgresql+"
            f"{modules[0]} URL)",
            "bind",
        )


def _async_hint(bind: Any) -> str:
    if isinstance(bind, AsyncConnection | AsyncSession):
        return " (for an AsyncConnection or AsyncSession await insert_async / insert_many_async)"
    return ""
