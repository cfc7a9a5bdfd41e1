"""What a bridge insert does, apart from the driver that does it.

Overview: an insert is a short conversation with the database: check the
schema once per connection, run ``jobs_insert`` with the rows
:mod:`awa.inserts` built (the client's own checks and encoding), and for a
single job whose unique key is held, ask who holds it. Each step here is a
generator that yields ``(query name, parameters)`` and is sent back the rows
as mappings read by column name; :func:`run` drives one with a blocking
driver, :func:`run_async` with an async one. So the psycopg, asyncpg,
SQLAlchemy and Django bridges share every decision and differ only in how
a named query reaches their connection.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from awa import metrics, sql
from awa.errors import SchemaNotMigrated, UniqueConflict, ValidationError
from awa.inserts import batch_rows, single_row
from awa.job import Job
from awa.tasks import Registry

if TYPE_CHECKING:
    from awa.client import AsyncClient
    from awa.sync_client import Client

R = TypeVar("R")

#: Where a bridge insert takes its tasks from (``None``: no tasks).
TaskSource: TypeAlias = "AsyncClient | Client | None"

#: A named query and its parameters (``$1``, ``$2``, … in order).
Query: TypeAlias = tuple[str, tuple[Any, ...]]
#: Yields queries, is sent their rows, returns the result.
Steps: TypeAlias = Generator[Query, list[Mapping[str, Any]], R]

log = logging.getLogger("awa.bridges")

#: Connections whose schema was found current (checked once per connection).
_checked: weakref.WeakSet[Any] = weakref.WeakSet()
_warned_outside_transaction = False

#: The registry of a bridge insert given no client: no tasks, so a dict
#: needs ``kind=`` and a model's kind is its class name in snake case.
_NO_TASKS = Registry()


def registry_of(client: TaskSource) -> Registry:
    """The tasks a bridge insert resolves kinds, queues and schema versions
    with: ``client``'s (an :class:`awa.AsyncClient` or :class:`awa.Client`),
    or none."""
    if client is None:
        return _NO_TASKS
    # Imported here: awa.client imports the whole package.
    from awa.client import AsyncClient
    from awa.sync_client import Client

    if isinstance(client, Client):
        client = client.async_client
    if not isinstance(client, AsyncClient):
        raise ValidationError(
            f"client: must be an awa.AsyncClient or awa.Client (got {type(client).__name__})",
            "client",
        )
    return client._registry


def warn_outside_transaction(in_transaction: bool) -> None:
    """Says once per process that a connection outside a transaction
    commits each insert at once (as ``connection=`` on the client does)."""
    global _warned_outside_transaction
    if in_transaction or _warned_outside_transaction:
        return
    _warned_outside_transaction = True
    log.warning(
        "the connection given to an awa bridge is not in a transaction, so each insert on it "
        "commits at once; open a transaction to insert jobs with your own data"
    )


def insert_one(
    connection: Any, registry: Registry, args: Any, options: Mapping[str, Any]
) -> Steps[Job[Any]]:
    """One job, as :meth:`awa.AsyncClient.insert` writes it; a held unique
    key raises :class:`awa.UniqueConflict` naming the holder."""
    rows, decode = single_row(registry, args, options)
    yield from _require_schema(connection)
    found = yield ("jobs_insert", (rows.json_rows(),))
    if not found:
        [key] = rows.unique_keys()
        holders = yield ("jobs_unique_holder", (key,))
        raise UniqueConflict(holders[0]["id"] if holders else None)
    metrics.add(metrics.JOB_INSERTED)
    return registry.committed_job(found[0], decode=decode)


def insert_batch(
    connection: Any,
    registry: Registry,
    jobs: Sequence[Any],
    opts: Sequence[Mapping[str, Any] | None] | None,
    options: Mapping[str, Any],
) -> Steps[list[Job[Any]]]:
    """Many jobs in one statement, as :meth:`awa.AsyncClient.insert_many`
    writes them (jobs whose unique key is held are skipped)."""
    rows, decoders = batch_rows(registry, jobs, opts, options)
    if not len(rows):
        return []
    yield from _require_schema(connection)
    records = yield ("jobs_insert", (rows.json_rows(),))
    metrics.add(metrics.JOB_INSERTED, len(records))
    return [
        registry.committed_job(record, decode=decoders.get(record["kind"])) for record in records
    ]


def _require_schema(connection: Any) -> Steps[None]:
    """:class:`awa.SchemaNotMigrated` when the schema is older than this
    code (asked before the insert, which would abort the caller's
    transaction on a missing table)."""
    if _is_checked(connection):
        return
    [present] = yield ("schema_migrations_exists", ())
    found = None
    if present["present"]:
        [latest] = yield ("schema_migrations_latest", ())
        found = latest["version"]
    if found is None or found < sql.LATEST_VERSION:
        [database] = yield ("schema_migrations_database", ())
        raise SchemaNotMigrated(found, sql.LATEST_VERSION, database["name"])
    # A connection without weak references is checked on every insert.
    with contextlib.suppress(TypeError):
        _checked.add(connection)


def _is_checked(connection: Any) -> bool:
    try:
        return connection in _checked
    except TypeError:
        return False


def run(steps: Steps[R], fetch: Callable[[str, tuple[Any, ...]], list[Mapping[str, Any]]]) -> R:
    """Drives ``steps`` with a blocking ``fetch(query name, parameters)``."""
    try:
        query = next(steps)
        while True:
            query = steps.send(fetch(*query))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(
    steps: Steps[R],
    fetch: Callable[[str, tuple[Any, ...]], Awaitable[list[Mapping[str, Any]]]],
) -> R:
    """Drives ``steps`` with an async ``fetch(query name, parameters)``."""
    try:
        query = next(steps)
        while True:
            query = steps.send(await fetch(*query))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
