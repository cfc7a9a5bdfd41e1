"""Opening the client's connections: where to, how long to wait, and what
to tell the user when it fails (one line with the cause and the fix, never
a driver traceback)."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from awa.errors import ConfigurationError, ConnectionFailed, ValidationError

log = logging.getLogger("awa.client")

#: How long a connection attempt may take before awa gives up, naming the host.
DEFAULT_CONNECT_TIMEOUT_S = 10.0

# The server's answers that mean "the address is right, the login is not".
_LOGIN_REFUSED = (
    asyncpg.InvalidCatalogNameError,
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidPasswordError,
    asyncpg.InsufficientPrivilegeError,
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
)


def target(url: str) -> tuple[str, int, str, str]:
    """Host, port, role and database a URL names (libpq's defaults filled
    in), for messages: never its password."""
    parts = urlsplit(url)
    user = unquote(parts.username or "") or os.environ.get("PGUSER") or getpass.getuser()
    database = unquote(parts.path.lstrip("/")) or os.environ.get("PGDATABASE") or user
    try:
        port = parts.port or int(os.environ.get("PGPORT", 5432))
    except ValueError:
        port = 0
    host = parts.hostname or os.environ.get("PGHOST") or "localhost"
    return host, port, user, database


async def open_pool(url: str, *, connect_timeout: float, **options: Any) -> asyncpg.Pool:
    """``asyncpg.create_pool`` whose failures are :class:`ConnectionFailed`
    (or :class:`ConfigurationError` for a URL that is not one)."""
    try:
        return await asyncpg.create_pool(url, timeout=connect_timeout, **options)
    except (ValueError, asyncpg.ClientConfigurationError) as error:
        raise ConfigurationError(f"not a usable PostgreSQL URL: {error}") from None
    except BaseException as error:
        failure = connect_failure(url, error, connect_timeout)
        if failure is None:
            raise
        raise failure from error


def connect_failure(url: str, error: BaseException, timeout: float) -> ConnectionFailed | None:
    """What a failed connection attempt means for the user, or ``None`` for
    an error that is not about connecting."""
    host, port, user, database = target(url)
    where = f"{host}:{port}"
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        cause = (
            f"no answer within {timeout:g} s (is a PostgreSQL server listening there? "
            "raise connect_timeout for a slow network)"
        )
    elif isinstance(error, ConnectionRefusedError):
        cause = "connection refused (is the server running, on this port?)"
    elif isinstance(error, _LOGIN_REFUSED):
        cause = str(error)
    elif isinstance(error, OSError):
        cause = error.strerror or str(error) or type(error).__name__
    elif isinstance(error, asyncpg.PostgresError | asyncpg.InterfaceError):
        cause = str(error) or type(error).__name__
    else:
        return None
    return ConnectionFailed(
        f'cannot connect to {where} as "{user}" (database "{database}"): {cause}',
        host=host,
        port=port,
        user=user,
        database=database,
    )


_warned_outside_transaction = False


def check_caller_connection(connection: Any) -> None:
    """Refuses, by name, what is not an asyncpg connection for ``connection=``
    (a pool above all: the insert would not be in the caller's
    transaction), and says once per process when the connection is not in a
    transaction (each insert then commits at once)."""
    global _warned_outside_transaction
    if connection is None:
        return
    if isinstance(connection, asyncpg.Pool):
        raise ValidationError(
            "connection: an asyncpg Pool is not a connection, so the insert would not be "
            "in your transaction; pass the connection you acquired "
            "(async with pool.acquire() as connection, connection.transaction(): ...)",
            "connection",
        )
    if not isinstance(connection, asyncpg.Connection | PoolConnectionProxy):
        kind = f"{type(connection).__module__}.{type(connection).__qualname__}"
        raise ValidationError(
            f"connection: must be an asyncpg connection (asyncpg.Connection, or one from "
            f"pool.acquire()), got {kind}; awa talks to PostgreSQL through asyncpg only",
            "connection",
        )
    if not _warned_outside_transaction and not connection.is_in_transaction():
        _warned_outside_transaction = True
        log.warning(
            "connection= is not in a transaction, so each insert on it commits at once; "
            "wrap the inserts in `async with connection.transaction():` to enqueue "
            "atomically with your own writes (said once per process)"
        )
