"""pytest fixtures for code that uses awa; enable them in your top-level ``conftest.py``::

    pytest_plugins = ["awa.testing_plugin"]

(A ``conftest.py`` below the top level cannot use ``pytest_plugins``; import
the three fixtures into it instead.) The fixtures are kept apart from
:mod:`awa.testing` so that module works without pytest. They need pytest and
pytest-asyncio, and work in its strict mode (the default: mark async tests
``@pytest.mark.asyncio``) and its auto mode (``asyncio_mode = "auto"``) alike.
An async test that uses them without the marker in strict mode fails at
setup, saying so; pytest's own message for it ("async def functions are not
natively supported", suggesting to install pytest-asyncio) misleads.

- ``awa_database_url`` (session): a fresh, migrated database, dropped at the
  end of the session. It is created on the server ``AWA_DATABASE_URL`` points
  at (the role needs ``CREATEDB``; the database named in the URL is never
  touched), or without it on a throwaway server (:mod:`awa.embedded`, needs
  the ``embedded`` extra or ``AWA_PG_BINDIR``).
- ``awa_client`` (function): an :class:`awa.AsyncClient` on that database,
  which is emptied first (``awa.jobs`` and ``awa.workers``); register your
  tasks and hooks on it in the test. It connects on first use and is closed
  after the test (its worker shut down, if started). It runs on the event
  loop pytest-asyncio gives function-scoped fixtures, which must be the
  loop your tests run on: keep ``asyncio_default_fixture_loop_scope`` and
  ``asyncio_default_test_loop_scope`` the same (both ``function``, the
  default, or both ``session``). To test an app-wide client instead,
  override ``awa_client`` to build it on ``awa_database_url``.
- ``awa_test_client`` (function): an :class:`awa.testing.AwaTestClient` over
  ``awa_client``.

No pytest entry point is registered: installing awa never adds fixtures to a
project that did not ask for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, TypeVar

import asyncpg
import pytest
import pytest_asyncio

from awa.client import AsyncClient
from awa.databases import create_database, drop_database, scratch_name, with_database
from awa.testing import AwaTestClient

__all__ = ["awa_client", "awa_database_url", "awa_test_client"]

R = TypeVar("R")

_EMPTY_TABLES: Final = (
    "TRUNCATE awa.jobs, awa.workers, awa.quarantine, awa.leaders RESTART IDENTITY"
)


@pytest.fixture(scope="session")
def awa_database_url() -> Iterator[str]:
    """The URL of a fresh, migrated database for this test session."""
    server_url = os.environ.get("AWA_DATABASE_URL")
    server: Any = None
    if not server_url:
        from awa.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(durable=False)
        server_url = str(server.start())
    name = scratch_name("awa_test")
    try:
        _run_in_thread(_create_migrated_database, server_url, name)
        yield with_database(server_url, name)
    finally:
        try:
            _run_in_thread(drop_database, server_url, name)
        finally:
            if server is not None:
                server.stop()


@pytest_asyncio.fixture
async def awa_client(
    request: pytest.FixtureRequest, awa_database_url: str
) -> AsyncIterator[AsyncClient]:
    """A client on the session's database, emptied for this test."""
    _require_asyncio_marker(request)
    connection = await asyncpg.connect(awa_database_url)
    try:
        await connection.execute(_EMPTY_TABLES)
    finally:
        await connection.close()
    async with AsyncClient(awa_database_url) as client:
        yield client


@pytest.fixture
def awa_test_client(awa_client: AsyncClient) -> AwaTestClient:
    """An :class:`awa.testing.AwaTestClient` over ``awa_client``."""
    return AwaTestClient(awa_client)


def _require_asyncio_marker(request: pytest.FixtureRequest) -> None:
    """Fails the test's setup if it is an async test pytest-asyncio will not
    run (strict mode, no ``asyncio`` marker; auto mode adds the marker)."""
    test = request.node
    if inspect.iscoroutinefunction(getattr(test, "obj", None)) and (
        test.get_closest_marker("asyncio") is None
    ):
        pytest.fail(
            f"{test.nodeid} is an async test that pytest-asyncio does not run: in its "
            "strict mode (the default) mark it @pytest.mark.asyncio (a whole module: "
            'pytestmark = pytest.mark.asyncio), or set asyncio_mode = "auto" in your '
            "pytest configuration",
            pytrace=False,
        )


async def _create_migrated_database(server_url: str, name: str) -> None:
    await create_database(server_url, name)
    async with AsyncClient(with_database(server_url, name)) as client:
        await client.migrate()


def _run_in_thread(function: Callable[..., Awaitable[R]], *args: Any) -> R:
    """Runs ``function(*args)`` on an event loop of its own, in a thread of its
    own: session setup must not borrow (or disturb) the loops pytest-asyncio
    manages, and its connections must not outlive the loop they were made on."""

    def run() -> R:
        async def main() -> R:
            return await function(*args)

        return asyncio.run(main())

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="awa-testing") as pool:
        return pool.submit(run).result()
