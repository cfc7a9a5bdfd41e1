"""A real PgBouncer in front of a test's PostgreSQL server.

Overview
--------
:class:`PgBouncer` writes a configuration into a temporary directory and runs
``pgbouncer`` (the Debian package; ``/usr/sbin/pgbouncer``, or ``PGBOUNCER``)
as a child of this process, listening on a free ``127.0.0.1`` port, in
transaction pooling mode by default, trusting every client, and passing every
database through to the server::

    with PgBouncer(server_url) as bouncer:
        conn = await asyncpg.connect(bouncer.url, statement_cache_size=0)

``bouncer.url`` is ``server_url`` with the host and port of the pooler (same
user and database); :meth:`PgBouncer.url_for` does the same for any URL on
that server. ``bouncer.admin_url`` reaches the admin console (database
``pgbouncer``; it speaks the simple query protocol only).

PgBouncer refuses to run as root. As root it is started with ``-u nobody``:
it reads its configuration as root and then switches to ``nobody``, so the
directory and files are made readable (not writable) for everyone; its log
goes to standard error, which this process writes to ``pgbouncer.log``.

Failure handling
----------------
* :func:`find_pgbouncer` returns ``None`` where PgBouncer is not installed;
  :data:`NOT_INSTALLED` says why, for ``pytest.skip``. ``make test`` installs
  it where it can (``tests/install-pgbouncer.sh``).
* If PgBouncer exits or does not accept connections within
  ``STARTUP_TIMEOUT_S``, :class:`PgBouncerError` carries the tail of its log.
  One that exits later (PgBouncer 1.18 can die of a cancel request) is
  reported by :meth:`PgBouncer.exit_report`, with the same tail.
  A port taken between choosing and binding it is retried on another.
* No PgBouncer outlives this process: it is started with
  ``PR_SET_PDEATHSIG=SIGTERM`` (Linux) and stopped at interpreter exit.
  :meth:`stop` sends SIGTERM (PgBouncer's immediate shutdown), then SIGKILL
  if it does not exit in time.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Final
from urllib.parse import urlsplit, urlunsplit

BINARY_ENV: Final = "PGBOUNCER"
DEFAULT_BINARY: Final = "/usr/sbin/pgbouncer"
NOT_INSTALLED: Final = (
    "PgBouncer is not installed (Debian package `pgbouncer`, /usr/sbin/pgbouncer, or set "
    "PGBOUNCER): `make test` installs it where it can (as root, or with sudo without a password)"
)
HOST: Final = "127.0.0.1"
RUN_AS_WHEN_ROOT: Final = "nobody"
STARTUP_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 5.0
PORT_ATTEMPTS: Final = 5
LOG_TAIL_LINES: Final = 20
PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>


class PgBouncerError(RuntimeError):
    """PgBouncer could not be started."""


def find_pgbouncer() -> Path | None:
    """The ``pgbouncer`` binary: ``$PGBOUNCER``, ``/usr/sbin/pgbouncer`` or one on
    ``PATH``; ``None`` where there is none."""
    for candidate in (os.environ.get(BINARY_ENV), DEFAULT_BINARY, shutil.which("pgbouncer")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when this process dies."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class PgBouncer:
    """A PgBouncer in front of the server of ``server_url``; see the module
    docstring. ``pool_mode``: ``transaction`` (default), ``session`` or
    ``statement``; ``pool_size``: server connections per database and user."""

    def __init__(
        self,
        server_url: str,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 20,
        max_client_conn: int = 500,
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        parts = urlsplit(server_url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"the server URL needs a host and a port, got {server_url!r}")
        self._server_url = server_url
        self._server_host = parts.hostname
        self._server_port = parts.port
        self._user = parts.username or "postgres"
        self._pool_mode = pool_mode
        self._pool_size = pool_size
        self._max_client_conn = max_client_conn
        self._binary = Path(binary) if binary is not None else find_pgbouncer()
        self._directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    # ── public interface ──

    @property
    def port(self) -> int:
        if self._port is None:
            raise PgBouncerError("PgBouncer has not been started")
        return self._port

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def exit_report(self) -> str | None:
        """``None`` while PgBouncer runs (or was stopped here); once it has
        exited on its own, its status and the last lines of its log."""
        process = self._process
        if process is None or process.poll() is None:
            return None
        return self._failure(f"exited on its own with status {process.returncode}", 0)

    @property
    def url(self) -> str:
        """The server URL given, through the pooler."""
        return self.url_for(self._server_url)

    @property
    def admin_url(self) -> str:
        """The admin console (``SHOW POOLS``, ``SHOW CONFIG``; simple protocol only)."""
        return self.url_for(self._server_url, database="pgbouncer")

    @property
    def log_path(self) -> Path:
        if self._directory is None:
            raise PgBouncerError("PgBouncer has not been started")
        return self._directory / "pgbouncer.log"

    def url_for(self, url: str, *, database: str | None = None) -> str:
        """``url`` (a URL on the same server) with the pooler's host and port."""
        parts = urlsplit(url)
        user = parts.username or self._user
        path = f"/{database}" if database is not None else parts.path
        return urlunsplit(parts._replace(netloc=f"{user}@{HOST}:{self.port}", path=path))

    def start(self) -> str:
        """Starts PgBouncer and returns :attr:`url` once it accepts connections."""
        if self.pid is not None:
            return self.url
        if self._binary is None:
            raise PgBouncerError(NOT_INSTALLED)
        self._directory = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
        # Read by PgBouncer after it drops root; nothing here is secret.
        self._directory.chmod(0o755)
        (self._directory / "userlist.txt").write_text(f'"{self._user}" ""\n')
        last_failure = ""
        for _attempt in range(PORT_ATTEMPTS):
            port = _free_port()
            failure = self._launch(port)
            if failure is None:
                self._port = port
                _running.add(self)
                return self.url
            last_failure = failure
            if "Address already in use" not in failure:
                break
        self._remove_directory()
        raise PgBouncerError(last_failure)

    def stop(self) -> None:
        """Stops PgBouncer and removes its directory. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            _stop(process)
        self._port = None
        self._remove_directory()
        _running.discard(self)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{HOST}:{self._port}" if self._port is not None else "not running"
        return f"<PgBouncer {self._pool_mode} {where} → {self._server_host}:{self._server_port}>"

    # ── steps ──

    def _config(self, port: int) -> str:
        assert self._directory is not None
        return "\n".join(
            [
                "[databases]",
                f"* = host={self._server_host} port={self._server_port}",
                "[pgbouncer]",
                f"listen_addr = {HOST}",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {self._directory / 'userlist.txt'}",
                f"admin_users = {self._user}",
                f"stats_users = {self._user}",
                f"pool_mode = {self._pool_mode}",
                f"default_pool_size = {self._pool_size}",
                "min_pool_size = 0",
                "reserve_pool_size = 0",
                f"max_client_conn = {self._max_client_conn}",
                "max_db_connections = 0",
                # asyncpg and psql send these; PgBouncer would refuse the client.
                "ignore_startup_parameters = extra_float_digits,options",
                # Retry a server that restarted at once, not after 15 s.
                "server_login_retry = 1",
                "server_connect_timeout = 5",
                "log_connections = 0",
                "log_disconnections = 0",
                "",
            ]
        )

    def _launch(self, port: int) -> str | None:
        """Spawns PgBouncer on ``port``; ``None`` once it listens, else why not."""
        assert self._binary is not None and self._directory is not None
        config = self._directory / "pgbouncer.ini"
        config.write_text(self._config(port))
        command = [str(self._binary)]
        if os.geteuid() == 0:
            command += ["-u", RUN_AS_WHEN_ROOT]
        command.append(str(config))
        log_path = self._directory / "pgbouncer.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while process.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
                self._process = process
                return None
            if time.monotonic() > deadline:
                _stop(process)
                return self._failure(f"was not listening within {STARTUP_TIMEOUT_S:.0f} s", offset)
            time.sleep(0.02)
        return self._failure(f"exited at startup with status {process.returncode}", offset)

    def _failure(self, what: str, offset: int) -> str:
        log_path = self.log_path
        with log_path.open("rb") as log_file:
            log_file.seek(offset)
            lines = log_file.read().decode(errors="replace").rstrip().splitlines()
        tail = "\n".join(lines[-LOG_TAIL_LINES:]) or "(empty)"
        return f"PgBouncer {what}; last lines of {log_path}:\n{tail}"

    def _remove_directory(self) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


def _stop(process: subprocess.Popen[bytes]) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            break
        process.send_signal(signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT_S)
    process.wait()


_running: set[PgBouncer] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for bouncer in list(_running):
        with contextlib.suppress(Exception):
            bouncer.stop()
