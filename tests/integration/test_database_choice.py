"""Which database a client, a command or the demo uses: never a throwaway
one unless asked for, never someone else's for the demo."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

import awa
from awa.databases import drop_database

ROOT = Path(__file__).resolve().parents[2]


def _without_database_url() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "AWA_DATABASE_URL"}


async def run_awa(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", *args,
        cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def test_a_client_without_a_url_says_how_to_give_one(monkeypatch):
    monkeypatch.delenv("AWA_DATABASE_URL", raising=False)
    client = awa.AsyncClient()
    with pytest.raises(awa.ConfigurationError, match=r"AWA_DATABASE_URL.*embedded=True"):
        await client.migrate()
    assert client.database_url is None and not client.embedded
    await client.close()


async def test_embedded_true_starts_a_throwaway_server_of_its_own(monkeypatch, server_url):
    monkeypatch.setenv("AWA_DATABASE_URL", server_url)  # asked for: ignored
    async with awa.AsyncClient(embedded=True) as client:
        assert await client.migrate()  # a new server: every migration applies
        assert client.database_url is not None and client.database_url != server_url


def test_embedded_refuses_a_url_or_a_pool():
    with pytest.raises(awa.ConfigurationError, match="no url or pool"):
        awa.AsyncClient("postgresql://localhost/x", embedded=True)
    with pytest.raises(awa.ConfigurationError, match="True or False"):
        awa.AsyncClient(embedded="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [["migrate"], ["jobs", "show", "1"]])
async def test_commands_without_a_url_refuse_instead_of_a_throwaway_database(command):
    code, out, err = await run_awa(*command, env=_without_database_url())
    assert code == 2  # usage: no database named
    assert "no database given: use --database-url" in err
    assert "Traceback" not in err and out == ""


async def test_the_worker_command_refuses_an_embedded_client(tmp_path):
    (tmp_path / "embedded_app.py").write_text(
        "import awa\nclient = awa.AsyncClient(embedded=True)\n"
        "@client.task(dict, kind='k')\nasync def k(job):\n    return None\n"
    )
    env = {**_without_database_url(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    code, _, err = await run_awa("worker", "--app", "embedded_app:client", env=env)
    assert code == 2  # usage: an --app awa worker cannot run
    assert "throwaway embedded server" in err


async def _databases(server_url: str) -> set[str]:
    connection = await asyncpg.connect(server_url)
    try:
        return {row[0] for row in await connection.fetch("SELECT datname FROM pg_database")}
    finally:
        await connection.close()


async def _has_awa_schema(url: str) -> bool:
    connection = await asyncpg.connect(url)
    try:
        return bool(await connection.fetchval("SELECT to_regnamespace('awa') IS NOT NULL"))
    finally:
        await connection.close()


async def test_the_demo_works_in_a_database_it_creates_and_drops(server_url):
    before = await _databases(server_url)
    env = {**os.environ, "AWA_DATABASE_URL": server_url}
    code, out, err = await run_awa("demo", "--jobs", "30", env=env)
    assert code == 0, err
    assert "awa demo in database awa_demo_" in out
    assert "dropped database awa_demo_" in out
    assert await _databases(server_url) == before
    assert not await _has_awa_schema(server_url)  # the server's own database untouched


async def test_the_demo_keeps_its_database_when_asked_and_says_which(server_url):
    before = await _databases(server_url)
    code, out, err = await run_awa(
        "demo", "--jobs", "30", "--keep", "--database-url", server_url, env=_without_database_url()
    )
    assert code == 0, err
    (kept,) = await _databases(server_url) - before
    assert f"kept database {kept}" in out
    await drop_database(server_url, kept)
