"""Fault injection for tests, on real PostgreSQL and loopback only.

- :func:`terminate_backends`: what a server restart, a failover, an idle
  timeout or a pooler does to a worker's connections.
- :class:`RestrictedRole` and :func:`revoked`: a login role for awa's own
  connections whose privileges the test can take away, so every statement
  awa runs fails with a non-transient error until they are given back.
- :class:`ReplyCutter`: a TCP proxy between awa and the server that can
  swallow the server's replies (a statement that committed, whose answer
  never arrived) and then drop the connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

#: Functions of pg_catalog awa's leadership and claims may call.
CATALOG_FUNCTIONS = (
    "pg_try_advisory_lock(bigint)",
    "pg_advisory_unlock(bigint)",
)


async def terminate_backends(conn: asyncpg.Connection) -> int:
    """Terminates every other backend of ``conn``'s database; returns how many."""
    return int(
        await conn.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND backend_type = 'client backend'"""
        )
    )


def with_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}@{host}{port}"))


class RestrictedRole:
    """A login role that may do everything awa does in ``awa``, and nothing more."""

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    async def create(cls, conn: asyncpg.Connection) -> RestrictedRole:
        role = cls(f"awa_app_{uuid.uuid4().hex[:8]}")
        await conn.execute(f'CREATE ROLE "{role.name}" LOGIN')
        await role.grant(conn)
        return role

    async def grant(self, conn: asyncpg.Connection) -> None:
        name = self.name
        await conn.execute(
            f"""GRANT USAGE ON SCHEMA awa TO "{name}";
                GRANT ALL ON ALL TABLES IN SCHEMA awa TO "{name}";
                GRANT ALL ON ALL SEQUENCES IN SCHEMA awa TO "{name}";
                GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA awa TO "{name}";"""
        )
        for function in CATALOG_FUNCTIONS:
            await conn.execute(f"GRANT EXECUTE ON FUNCTION {function} TO PUBLIC")

    async def revoke(self, conn: asyncpg.Connection) -> None:
        name = self.name
        await conn.execute(
            f"""REVOKE ALL ON ALL TABLES IN SCHEMA awa FROM "{name}";
                REVOKE ALL ON ALL SEQUENCES IN SCHEMA awa FROM "{name}";
                REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA awa FROM "{name}";"""
        )
        for function in CATALOG_FUNCTIONS:
            await conn.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC")

    async def drop(self, conn: asyncpg.Connection) -> None:
        await self.grant(conn)  # gives the catalog functions back to PUBLIC
        await conn.execute(
            f"""SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE usename = '{self.name}'"""
        )
        await conn.execute(f'DROP OWNED BY "{self.name}"; DROP ROLE "{self.name}"')


@contextlib.asynccontextmanager
async def revoked(conn: asyncpg.Connection, role: RestrictedRole) -> AsyncIterator[None]:
    """Every statement ``role`` runs on awa's tables fails while inside."""
    await role.revoke(conn)
    try:
        yield
    finally:
        await role.grant(conn)


class ReplyCutter:
    """A TCP proxy to a PostgreSQL server, on loopback unless ``listen_host``
    names another local address (a :class:`tests.hosts.Host`'s gateway).

    :meth:`cut` swallows whatever the server sends from now on (statements
    still reach it and commit; their replies never arrive), then, after
    ``drop_after_s``, closes every proxied connection and passes traffic
    normally again.
    """

    def __init__(self, target_url: str, *, listen_host: str = "127.0.0.1") -> None:
        parts = urlsplit(target_url)
        self._listen_host = listen_host
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._target_url = target_url
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._swallowing = False
        self.swallowed_bytes = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, self._listen_host, 0)
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self._target_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}{self._listen_host}:{port}"))

    async def close(self) -> None:
        self._drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def cut(self, drop_after_s: float = 0.5) -> None:
        self._swallowing = True
        await asyncio.sleep(drop_after_s)
        self._drop_all()
        self._swallowing = False

    def _drop_all(self) -> None:
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        self._links.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._links.add(link)
        pumps = {
            asyncio.ensure_future(self._pump(reader, up_writer, replies=False)),
            asyncio.ensure_future(self._pump(up_reader, writer, replies=True)),
        }
        # Either side closing closes both, as a TCP connection through a
        # router would: a client waiting for the server to hang up (a cancel
        # request) must see it.
        _done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        self._links.discard(link)
        writer.transport.abort()
        up_writer.transport.abort()
        for pump in pending:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                if replies and self._swallowing:
                    self.swallowed_bytes += len(data)
                    continue
                sink.write(data)
                await sink.drain()
