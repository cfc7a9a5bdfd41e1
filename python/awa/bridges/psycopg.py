"""Enqueue inside a psycopg 3 transaction: ``insert`` / ``insert_many`` on a
``psycopg.Connection``, ``insert_async`` / ``insert_many_async`` on a
``psycopg.AsyncConnection``.

The jobs are written by awa's own ``jobs_insert`` on your connection, so
they commit or roll back with your transaction, and come back as the
:class:`awa.Job` values :meth:`awa.AsyncClient.insert` returns. awa's
queries use ``$1`` placeholders, which psycopg's raw cursors take as they
are. Needs the ``psycopg`` extra (``pip install 'awa-queue[psycopg]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Unpack, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from awa import sql
from awa.bridges._steps import (
    Steps,
    TaskSource,
    insert_batch,
    insert_one,
    registry_of,
    run,
    run_async,
    warn_outside_transaction,
)
from awa.errors import ValidationError
from awa.inserts import InsertOptions
from awa.job import Job

T = TypeVar("T")

__all__ = ["insert", "insert_async", "insert_many", "insert_many_async"]


@overload
def insert(
    connection: psycopg.Connection[Any],
    args: dict[str, Any],
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[dict[str, Any]]: ...


@overload
def insert(
    connection: psycopg.Connection[Any],
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]: ...


def insert(
    connection: psycopg.Connection[Any],
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]:
    """Inserts one job on ``connection`` (in its transaction) and returns
    it, as :meth:`awa.AsyncClient.insert` does with ``connection=``: the
    same ``options``, checks, errors (:class:`awa.ValidationError`,
    :class:`awa.UniqueConflict`, :class:`awa.SchemaNotMigrated`) and
    result. ``client`` (an :class:`awa.AsyncClient` or :class:`awa.Client`)
    lends its tasks: the kind, queue and schema version registered for the
    argument type, and how the job's args decode; without one, a dict needs
    ``kind=``."""
    return run(_steps_one(_checked(connection, psycopg.Connection), args, client, options),
               _fetcher(connection))  # fmt: skip


@overload
def insert_many(
    connection: psycopg.Connection[Any],
    jobs: Sequence[dict[str, Any]],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[dict[str, Any]]]: ...


@overload
def insert_many(
    connection: psycopg.Connection[Any],
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]: ...


def insert_many(
    connection: psycopg.Connection[Any],
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]:
    """Inserts many jobs in one statement on ``connection`` and returns
    them, as :meth:`awa.AsyncClient.insert_many` does (``opts[i]``
    overrides ``options`` for ``jobs[i]``; jobs whose unique key is held
    are skipped); ``client`` as for :func:`insert`."""
    checked = _checked(connection, psycopg.Connection)
    steps = insert_batch(checked, registry_of(client), jobs, opts, options)
    return run(steps, _fetcher(connection))


@overload
async def insert_async(
    connection: psycopg.AsyncConnection[Any],
    args: dict[str, Any],
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[dict[str, Any]]: ...


@overload
async def insert_async(
    connection: psycopg.AsyncConnection[Any],
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]: ...


async def insert_async(
    connection: psycopg.AsyncConnection[Any],
    args: T,
    *,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]:
    """:func:`insert` on a ``psycopg.AsyncConnection``."""
    checked = _checked(connection, psycopg.AsyncConnection)
    return await run_async(_steps_one(checked, args, client, options), _async_fetcher(connection))


@overload
async def insert_many_async(
    connection: psycopg.AsyncConnection[Any],
    jobs: Sequence[dict[str, Any]],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[dict[str, Any]]]: ...


@overload
async def insert_many_async(
    connection: psycopg.AsyncConnection[Any],
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]: ...


async def insert_many_async(
    connection: psycopg.AsyncConnection[Any],
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]:
    """:func:`insert_many` on a ``psycopg.AsyncConnection``."""
    checked = _checked(connection, psycopg.AsyncConnection)
    steps = insert_batch(checked, registry_of(client), jobs, opts, options)
    return await run_async(steps, _async_fetcher(connection))


def _steps_one(
    connection: Any, args: Any, client: TaskSource, options: Mapping[str, Any]
) -> Steps[Any]:
    return insert_one(connection, registry_of(client), args, options)


def _checked(connection: Any, expected: type) -> Any:
    """``connection`` if it is the psycopg connection these functions take;
    otherwise :class:`awa.ValidationError` naming what it is."""
    if not isinstance(connection, expected):
        kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
        raise ValidationError(
            f"connection: must be a {expected.__module__}.{expected.__qualname__}, got {kind}"
            + _hint(connection, expected),
            "connection",
        )
    driver: Any = connection  # psycopg's sync or async connection: both have these
    status = driver.info.transaction_status
    warn_outside_transaction(not (driver.autocommit and status == TransactionStatus.IDLE))
    return driver


def _hint(connection: Any, expected: type) -> str:
    if isinstance(connection, psycopg.AsyncConnection):
        return " (for an AsyncConnection await insert_async / insert_many_async)"
    if isinstance(connection, psycopg.Connection) and expected is psycopg.AsyncConnection:
        return " (for a Connection call insert / insert_many)"
    return ""


def _raw_cursor(cursor_type: Any, connection: Any) -> Any:
    """A raw cursor (``$1`` placeholders, as awa's SQL is written) whose rows
    are dicts by column name and whose JSON columns stay the text the
    server sent, which awa decodes itself as on its own connections. The
    loaders are the cursor's own: the connection's are left as they are."""
    cursor = cursor_type(connection, row_factory=dict_row)
    for name in ("json", "jsonb"):
        cursor.adapters.register_loader(name, TextLoader)
    return cursor


def _fetcher(connection: psycopg.Connection[Any]) -> Any:
    def fetch(name: str, params: tuple[Any, ...]) -> list[Any]:
        with _raw_cursor(psycopg.RawCursor, connection) as cursor:
            cursor.execute(sql.query(name), params)
            return cursor.fetchall()  # type: ignore[no-any-return]

    return fetch


def _async_fetcher(connection: psycopg.AsyncConnection[Any]) -> Any:
    async def fetch(name: str, params: tuple[Any, ...]) -> list[Any]:
        async with _raw_cursor(psycopg.AsyncRawCursor, connection) as cursor:
            await cursor.execute(sql.query(name), params)
            return await cursor.fetchall()  # type: ignore[no-any-return]

    return fetch
