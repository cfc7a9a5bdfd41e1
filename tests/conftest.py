"""Shared fixtures: one real PostgreSQL per test session, a clean schema per test.

With ``AWA_DATABASE_URL`` set, the suite creates (and finally drops) a fresh
database on that server; without it, it starts a throwaway server of its
own (``awa.embedded``) and stops it at the end. Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping

import asyncpg
import pytest

import awa
from awa.connecting import target
from awa.databases import create_database, drop_database, scratch_name, with_database
from awa.embedded import EmbeddedPostgres, EmbeddedPostgresError, find_bindir
from tests.faults import RestrictedRole, with_user
from tests.pgbouncer import NOT_INSTALLED, PgBouncer, find_pgbouncer
from tests.processes import LEDGER_DROP_SQL, LEDGER_SQL

#: Servers of a test's own flush asynchronous commits late (their WAL writer
#: sleeps long), so an immediate restart reliably forgets recent claims.
OWN_SERVER_SETTINGS = ("wal_writer_delay=10000ms", "wal_writer_flush_after=1GB")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """A PostgreSQL server the suite may create databases on."""
    configured = os.environ.get("AWA_DATABASE_URL")
    if configured:
        yield configured
        return
    server = EmbeddedPostgres(durable=False)
    try:
        yield server.start()
    finally:
        server.stop()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The header line of every run (``make test`` too) saying which database it uses."""
    return [f"database: {describe_test_database(os.environ)}"]


def describe_test_database(environ: Mapping[str, str]) -> str:
    """Which PostgreSQL ``server_url`` gives the suite, never with a password."""
    configured = environ.get("AWA_DATABASE_URL")
    pooler = environ.get("AWA_TEST_POOLER")
    through = f"; clients through PgBouncer ({pooler} pooling)" if pooler else ""
    if configured:
        host, port, user, database = target(configured)
        return (
            f"the AWA_DATABASE_URL server, {user}@{host}:{port}/{database} "
            f"(the suite creates and drops an awa_test_* database there){through}"
        )
    try:
        bindir = find_bindir()
    except EmbeddedPostgresError as error:
        return f"embedded throwaway PostgreSQL, unavailable: {error}"
    try:
        reported = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        reported = f"version unknown ({error})"
    version = reported.removeprefix("postgres (PostgreSQL) ")
    return f"embedded throwaway PostgreSQL {version} from {bindir}{through}"


@pytest.fixture(scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database for this session, dropped afterwards."""
    name = scratch_name("awa_test")
    await create_database(server_url, name)
    url = with_database(server_url, name)
    async with awa.AsyncClient(url) as client:
        await client.migrate()
    try:
        yield url
    finally:
        await drop_database(server_url, name)


@pytest.fixture
async def fresh_database(server_url: str) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """Makes empty (unmigrated) databases on the test server; drops them
    afterwards."""
    made: list[str] = []

    async def make() -> str:
        name = scratch_name("awa_empty")
        await create_database(server_url, name)
        made.append(name)
        return with_database(server_url, name)

    try:
        yield make
    finally:
        for name in made:
            await drop_database(server_url, name)


@pytest.fixture
async def own_server() -> AsyncIterator[EmbeddedPostgres]:
    """A durable PostgreSQL server of the test's own, migrated, to restart or
    break (``own_server.restart("immediate")``) without touching the suite's."""
    server = EmbeddedPostgres(durable=True, settings=OWN_SERVER_SETTINGS)
    server.start()
    try:
        async with awa.AsyncClient(server.url) as client:
            await client.migrate()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def restricted(database_url: str) -> AsyncIterator[tuple[RestrictedRole, str]]:
    """A login role for awa's own connections whose privileges a test can take
    away (:func:`tests.faults.revoked`), and the database URL that uses it."""
    admin = await asyncpg.connect(database_url)
    try:
        role = await RestrictedRole.create(admin)
    finally:
        await admin.close()
    try:
        yield role, with_user(database_url, role.name)
    finally:
        # A fresh connection: the test may have terminated every other one.
        admin = await asyncpg.connect(database_url)
        try:
            await role.drop(admin)
        finally:
            await admin.close()


@pytest.fixture
async def ledger(conn: asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """``conn``, with the side tables worker processes write (tests/processes.py)."""
    await conn.execute(LEDGER_SQL)
    yield conn
    await conn.execute(LEDGER_DROP_SQL)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection for arranging and asserting, on a clean schema."""
    connection = await asyncpg.connect(database_url)
    await connection.execute(
        "TRUNCATE awa.jobs, awa.workers, awa.quarantine, awa.leaders, awa.lanes, awa.lane_moves, "
        "awa.lane_lowerings, awa.claims, awa.queue_settings, awa.periodic, awa.rate_classes, "
        "awa.result_waiters RESTART IDENTITY"
    )
    try:
        yield connection
    finally:
        await connection.close()


#: ``AWA_TEST_POOLER=transaction`` runs the tests' clients through a real
#: PgBouncer in transaction mode (``make test`` does, for tests/acceptance).
POOLER = os.environ.get("AWA_TEST_POOLER") or None


@pytest.fixture
async def client(
    request: pytest.FixtureRequest, database_url: str, conn: asyncpg.Connection
) -> AsyncIterator[awa.AsyncClient]:
    """A client on the clean test database; its worker is shut down afterwards.
    With ``AWA_TEST_POOLER=transaction``, through PgBouncer, listening directly."""
    if POOLER is None:
        async with awa.AsyncClient(database_url) as made:
            yield made
        return
    bouncer: PgBouncer = request.getfixturevalue("session_pgbouncer")
    _fail_if_exited(bouncer, "before this test")
    async with awa.AsyncClient(
        bouncer.url,
        pooler=POOLER,  # type: ignore[arg-type]
        listen_url=database_url,
    ) as made:
        yield made
    _fail_if_exited(bouncer, "during this test")


def _fail_if_exited(bouncer: PgBouncer, when: str) -> None:
    """Names the test in which the session's PgBouncer died, with its log,
    rather than leaving every later test a "connection refused"."""
    report = bouncer.exit_report()
    if report is not None:
        pytest.fail(f"the session's PgBouncer died {when}: {report}", pytrace=False)


@pytest.fixture
def start_pgbouncer() -> Iterator[Callable[..., PgBouncer]]:
    """Starts a real PgBouncer (transaction pooling, a free loopback port) in
    front of the server of a given URL: ``start_pgbouncer(url, pool_size=…)``;
    ``.url`` is that URL through the pooler. Stopped after the test. Skips
    the test where PgBouncer is not installed."""
    if find_pgbouncer() is None:
        pytest.skip(NOT_INSTALLED)
    started: list[PgBouncer] = []

    def start(url: str, **options: object) -> PgBouncer:
        bouncer = PgBouncer(url, **options)  # type: ignore[arg-type]
        started.append(bouncer)
        bouncer.start()
        return bouncer

    try:
        yield start
    finally:
        for bouncer in reversed(started):
            bouncer.stop()


@pytest.fixture(scope="session")
def session_pgbouncer(database_url: str) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of the session's test
    database (one for the session). Skips where PgBouncer is not installed."""
    if find_pgbouncer() is None:
        pytest.skip(NOT_INSTALLED)
    with PgBouncer(database_url) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_url(session_pgbouncer: PgBouncer) -> str:
    """The session's test database through :func:`session_pgbouncer`."""
    return session_pgbouncer.url
