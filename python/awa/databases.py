"""Databases of their own on a server: the demo's and the test fixtures'.

Each is created under a name made here (never user input) and dropped when
its user is done, so nothing is left in a database someone else owns.
"""

from __future__ import annotations

import uuid
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awa.errors import ConfigurationError

# Administrative statements, not awa's runtime queries: they take no input
# but names made by scratch_name().
_CREATE_DATABASE: Final = 'CREATE DATABASE "{name}"'
_DROP_DATABASE: Final = 'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'


def scratch_name(prefix: str) -> str:
    """A database name no one else uses: ``prefix`` and 12 random hex digits."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def describe_server(url: str) -> str:
    """``host:port`` of a URL, for messages (never its password)."""
    parts = urlsplit(url)
    host = parts.hostname or "the local socket"
    return f"{host}:{parts.port or 5432}"


async def create_database(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(_CREATE_DATABASE.format(name=name))
    except asyncpg.InsufficientPrivilegeError:
        raise ConfigurationError(
            f"cannot create database {name!r} on {describe_server(server_url)}: "
            "the role lacks CREATEDB (grant it, or use another server)"
        ) from None
    finally:
        await admin.close()


async def drop_database(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(_DROP_DATABASE.format(name=name))
    finally:
        await admin.close()
