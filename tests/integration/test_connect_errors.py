"""Connection and schema problems reach the user as one line naming the
cause and the fix: never a driver traceback, never a silent wait."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import awa
from awa.databases import create_database, drop_database, scratch_name, with_database

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP server on loopback that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def first_use(url: str, **options: object) -> awa.AwaError:
    client = awa.AsyncClient(url, **options)  # type: ignore[arg-type]
    try:
        with pytest.raises(awa.AwaError) as raised:
            await client.count_by_state()
        return raised.value
    finally:
        await client.close()


async def test_a_server_that_never_answers_is_named_when_the_timeout_expires():
    async with silent_server() as port:
        error = await first_use(f"postgresql://app@127.0.0.1:{port}/shop", connect_timeout=0.3)
    assert isinstance(error, awa.ConnectionFailed)
    assert str(error).startswith(f'cannot connect to 127.0.0.1:{port} as "app" (database "shop")')
    assert "no answer within 0.3 s" in str(error)
    assert (error.host, error.port, error.user, error.database) == (
        "127.0.0.1",
        port,
        "app",
        "shop",
    )


async def test_a_closed_port_is_a_refused_connection():
    port = free_port()
    error = await first_use(f"postgresql://app@127.0.0.1:{port}/shop")
    assert isinstance(error, awa.ConnectionFailed)
    assert "connection refused" in str(error)


async def test_a_missing_database_is_named(server_url):
    error = await first_use(with_database(server_url, "no_such_database"))
    assert isinstance(error, awa.ConnectionFailed)
    assert 'database "no_such_database" does not exist' in str(error)


async def test_a_missing_role_is_named_and_its_password_never_shown(server_url):
    parts = server_url.split("://", 1)[1].split("@")[-1]
    error = await first_use(f"postgresql://ghost:s3cret-pw@{parts}")
    assert isinstance(error, awa.ConnectionFailed)
    assert 'as "ghost"' in str(error)
    assert "ghost" in str(error) and "s3cret-pw" not in str(error)


@pytest.mark.parametrize(
    "url",
    ["mysql://localhost/db", "postgresql://localhost:notaport/db", "postgresql://h/d?sslmode=x"],
)
async def test_a_url_that_is_not_one_is_a_configuration_error(url):
    error = await first_use(url)
    assert isinstance(error, awa.ConfigurationError)
    assert str(error).startswith("not a usable PostgreSQL URL")


@pytest.mark.parametrize("value", [0, -1, float("nan"), "10"])
def test_connect_timeout_is_a_positive_number_of_seconds(value):
    with pytest.raises(awa.ConfigurationError, match="connect_timeout"):
        awa.AsyncClient("postgresql://localhost/db", connect_timeout=value)


@pytest.fixture
async def unmigrated_url(server_url: str) -> AsyncIterator[str]:
    name = scratch_name("awa_unmigrated")
    await create_database(server_url, name)
    try:
        yield with_database(server_url, name)
    finally:
        await drop_database(server_url, name)


async def test_a_database_awa_never_migrated_says_run_migrate(unmigrated_url):
    async with awa.AsyncClient(unmigrated_url) as client:
        with pytest.raises(awa.SchemaNotMigrated) as raised:
            await client.get_job(1)
    database = unmigrated_url.rsplit("/", 1)[1]
    assert str(raised.value).startswith(f'database "{database}" has no awa schema')
    assert "awa migrate" in str(raised.value)


async def run_awa(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", *args,
        cwd=ROOT, env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, err.decode()


async def test_the_cli_shows_a_missing_schema_as_one_line(unmigrated_url):
    code, err = await run_awa("jobs", "show", "1", "--database-url", unmigrated_url)
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith("awa: database ") and "has no awa schema" in err


async def test_the_cli_names_a_silent_server_after_its_connect_timeout():
    async with silent_server() as port:
        url = f"postgresql://app@127.0.0.1:{port}/shop"
        code, err = await run_awa("migrate", "--database-url", url, "--connect-timeout", "0.5")
    assert code == 1
    assert f"awa: cannot connect to 127.0.0.1:{port}" in err
    assert "no answer within 0.5 s" in err
