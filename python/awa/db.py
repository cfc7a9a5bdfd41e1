"""The connection pool and the one place queries run.

Everything that talks to PostgreSQL goes through :class:`Database` (pool
checkouts) or a :class:`Statement` (a named query run on a connection a
service holds). Queries are named; their SQL lives in ``awa/sql/queries``.

Behind a pooler in transaction mode (``pooler="transaction"``: PgBouncer),
a server connection belongs to a client only for the length of a
transaction. So the pool keeps no server-side prepared statements
(``statement_cache_size=0``), every statement outside a transaction runs in
one of its own (asyncpg prepares an unnamed statement and executes it in two
steps, which must reach the same server connection), awa keeps no session
state (no ``SET``, no session advisory lock: leadership is a lease row), and
LISTEN goes to ``listen_url`` (a direct connection) or not at all (poll
only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import asyncpg

from awa import sql
from awa.errors import SchemaNotMigrated

# asyncpg is untyped: its connections and records are plain `Any` to mypy.
Connection: TypeAlias = Any
Record: TypeAlias = Any

# Errors after which retrying on a fresh connection can succeed.
TRANSIENT_ERRORS: Final = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
)


POOLER_MODES: Final = ("transaction",)

#: How long closing awa's own pool waits for connections still checked out.
POOL_CLOSE_TIMEOUT_S: Final = 30.0

log = logging.getLogger("awa.db")


class Statement:
    """A named query, run on whatever connection the caller holds.

    ``pinned``: behind a pooler in transaction mode, a statement run outside
    a transaction gets one of its own, so its steps reach one server
    connection."""

    __slots__ = ("name", "pinned", "sql")

    def __init__(self, name: str, pinned: bool = False) -> None:
        self.name = name
        self.sql = sql.query(name)
        self.pinned = pinned

    async def fetch(self, connection: Any, *args: Any) -> list[Record]:
        return await self._run(connection, connection.fetch, args)  # type: ignore[no-any-return]

    async def fetchrow(self, connection: Any, *args: Any) -> Record | None:
        return await self._run(connection, connection.fetchrow, args)

    async def fetchval(self, connection: Any, *args: Any) -> Any:
        return await self._run(connection, connection.fetchval, args)

    async def execute(self, connection: Any, *args: Any) -> str:
        return await self._run(connection, connection.execute, args)  # type: ignore[no-any-return]

    async def _run(self, connection: Any, method: Any, args: tuple[Any, ...]) -> Any:
        if self.pinned and not connection.is_in_transaction():
            async with connection.transaction():
                return await method(self.sql, *args)
        return await method(self.sql, *args)


# Backend pids of pooled connections whose session state (settings, LISTENs,
# advisory locks) a service changed: only those pay for the full reset query
# when they go back to the pool.
_changed_sessions: set[int] = set()


def session_changed(connection: Any) -> None:
    """Marks a pooled connection whose session must be reset before reuse."""
    _changed_sessions.add(connection.get_server_pid())


async def reset_if_changed(connection: Any) -> None:
    """The pool's reset hook. asyncpg's default runs ``RESET ALL``, ``UNLISTEN
    *`` and friends on every release, one more round trip per checkout; awa's
    own pool runs it only for connections marked by :func:`session_changed`
    (open transactions are rolled back by the pool either way)."""
    pid = connection.get_server_pid()
    if pid in _changed_sessions:
        _changed_sessions.discard(pid)
        await connection.execute(connection.get_reset_query())


async def release_quietly(pool: Any, connection: Any) -> None:
    """Gives a service's connection back to the pool whatever state it is in.

    A connection the server dropped may already have been taken back by the
    pool (asyncpg then refuses every call on it, ``is_closed()`` included);
    a broken one is replaced by the pool on the next acquire. One the pool
    refuses to take back (asyncpg raises before freeing its slot, e.g. for
    LISTEN callbacks left on a connection a protocol error closed) is
    terminated: a slot held by nobody would make closing the pool wait for
    ever."""
    if connection is None:
        return
    try:
        await pool.release(connection)
    except Exception:  # noqa: BLE001 - whatever the reason, the slot must be freed
        terminate_quietly(connection)


def terminate_quietly(connection: Any) -> None:
    """Closes ``connection`` at once, without a goodbye to the server; a pooled
    one frees its slot. A no-op on one the pool has already taken back."""
    if connection is None:
        return
    with contextlib.suppress(Exception):
        connection.terminate()


def affected_rows(status: str) -> int:
    """The row count of a command status such as ``UPDATE 42``."""
    tail = status.rpartition(" ")[2]
    return int(tail) if tail.isdigit() else 0


# What a query meets on a database whose awa schema is missing or older.
_MISSING_SCHEMA_OBJECT = (
    asyncpg.UndefinedTableError,
    asyncpg.InvalidSchemaNameError,
    asyncpg.UndefinedFunctionError,
    asyncpg.UndefinedColumnError,
)


class Database:
    """An asyncpg pool plus named-query helpers and the schema version check."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        owns_pool: bool,
        connect_args: tuple[Any, ...] | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        pooler: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        self.pool = pool
        self.owns_pool = owns_pool
        #: ``"transaction"`` behind a pooler in transaction mode, else None.
        self.pooler = pooler
        #: A direct URL for LISTEN (None: the pool's, or poll only behind a pooler).
        self.listen_url = listen_url
        # How to open a connection of one's own, outside the pool (the
        # heartbeat's thread runs its own event loop). For a caller's pool,
        # what the pool itself connects with, unless it connects through a
        # function of its own (then nobody can tell where to).
        self.can_connect = True
        if connect_args is None:
            connect_args = tuple(getattr(pool, "_connect_args", ()) or ())
            connect_kwargs = dict(getattr(pool, "_connect_kwargs", {}) or {})
            self.can_connect = getattr(pool, "_connect", asyncpg.connect) is asyncpg.connect
        self.connect_args = connect_args
        self.connect_kwargs = connect_kwargs or {}
        self._statements: dict[str, Statement] = {}
        self._schema_checked = False

    def statement(self, name: str) -> Statement:
        found = self._statements.get(name)
        if found is None:
            found = self._statements[name] = Statement(name, pinned=self.pooler is not None)
        return found

    @property
    def poll_only(self) -> bool:
        """Behind a pooler without a direct URL: no LISTEN, the poll timer finds work."""
        return self.pooler is not None and self.listen_url is None

    async def acquire_session(self, prepare: Statement) -> Any:
        """A pooled connection a service keeps. On a session of its own (no
        pooler), ``prepare`` sets the session up first; the pool resets it
        when the connection goes back. Behind a pooler the session is not
        the service's, so it is left alone."""
        connection = await self.pool.acquire()
        if self.pooler is None:
            try:
                session_changed(connection)
                await prepare.execute(connection)
            except BaseException:
                await release_quietly(self.pool, connection)
                raise
        return connection

    async def listen_connection(self) -> tuple[Any, bool]:
        """A connection to LISTEN on, and whether it came from the pool (to
        give back) rather than ``listen_url`` (to close)."""
        if self.listen_url is not None:
            return await asyncpg.connect(self.listen_url), False
        return await self.pool.acquire(), True

    async def fetch(self, name: str, *args: Any, connection: Any = None) -> list[Record]:
        return await self._run("fetch", name, args, connection)  # type: ignore[no-any-return]

    async def fetchrow(self, name: str, *args: Any, connection: Any = None) -> Record | None:
        return await self._run("fetchrow", name, args, connection)

    async def fetchval(self, name: str, *args: Any, connection: Any = None) -> Any:
        return await self._run("fetchval", name, args, connection)

    async def execute(self, name: str, *args: Any, connection: Any = None) -> str:
        return await self._run("execute", name, args, connection)  # type: ignore[no-any-return]

    async def _run(self, method: str, name: str, args: tuple[Any, ...], connection: Any) -> Any:
        """Runs a named query on ``connection``, or on a pooled one when none is given."""
        run = getattr(self.statement(name), method)
        try:
            if connection is not None:
                return await run(connection, *args)
            async with self.pool.acquire() as pooled:
                return await run(pooled, *args)
        except _MISSING_SCHEMA_OBJECT as error:
            problem = await self._schema_problem()
            if problem is None:
                raise
            raise problem from error

    async def _schema_problem(self) -> SchemaNotMigrated | None:
        """Why a query met a missing table or function: an unmigrated (or
        older) schema, or ``None`` if the schema is current after all. Asked
        on a pooled connection: the caller's may be in a failed transaction."""
        async with self.pool.acquire() as connection:
            found = await self.schema_version(connection)
            if found is not None and found >= sql.LATEST_VERSION:
                return None
            database = await self.statement("schema_migrations_database").fetchval(connection)
        return SchemaNotMigrated(found, sql.LATEST_VERSION, database)

    async def connect(self) -> Any:
        """A connection outside the pool, on the running event loop."""
        return await asyncpg.connect(*self.connect_args, **self.connect_kwargs)

    async def copy_jobs(self, connection: Any, columns: Sequence[str], rows_text: bytes) -> None:
        """COPY rows (PostgreSQL text format) into ``awa.jobs``."""
        await connection.copy_to_table(
            "jobs", schema_name="awa", columns=list(columns), source=_Chunks(rows_text)
        )

    async def schema_version(self, connection: Any = None) -> int | None:
        """The newest migration applied, or ``None`` for a database awa never touched."""
        if not await self.fetchval("schema_migrations_exists", connection=connection):
            return None
        version = await self.fetchval("schema_migrations_latest", connection=connection)
        return None if version is None else int(version)

    async def require_schema(self, connection: Any = None) -> None:
        """Raises :class:`SchemaNotMigrated` when the schema is older than this code."""
        if self._schema_checked:
            return
        found = await self.schema_version(connection)
        if found is None or found < sql.LATEST_VERSION:
            database = await self.fetchval("schema_migrations_database", connection=connection)
            raise SchemaNotMigrated(found, sql.LATEST_VERSION, database)
        self._schema_checked = True

    def schema_changed(self) -> None:
        """Forget the cached schema check (after a migration)."""
        self._schema_checked = False

    async def close(self) -> None:
        """Closes awa's own pool (a caller's is left to the caller). Waits for
        checked-out connections up to ``POOL_CLOSE_TIMEOUT_S``, then
        terminates them: by then the worker has stopped, so one still out
        is held by nobody who will give it back, and waiting would hang the
        caller's shutdown for ever."""
        if not self.owns_pool:
            return
        closing = asyncio.ensure_future(self.pool.close())
        try:
            done, _ = await asyncio.wait({closing}, timeout=POOL_CLOSE_TIMEOUT_S)
        except BaseException:
            closing.cancel()  # asyncpg terminates the pool when its close() is cancelled
            raise
        if done:
            closing.result()
            return
        log.warning(
            "closing the connection pool: %d connections still in use after %gs; terminating them",
            self.pool.get_size() - self.pool.get_idle_size(),
            POOL_CLOSE_TIMEOUT_S,
        )
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing


class _Chunks:
    """Feeds COPY in 1 MiB pieces (asyncpg accepts an async iterable of bytes)."""

    CHUNK_BYTES: Final = 1 << 20

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)

    def __aiter__(self) -> _Chunks:
        self._offset = 0
        return self

    async def __anext__(self) -> bytes:
        if self._offset >= len(self._view):
            raise StopAsyncIteration
        end = self._offset + self.CHUNK_BYTES
        chunk = bytes(self._view[self._offset : end])
        self._offset = end
        return chunk
