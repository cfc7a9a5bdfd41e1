"""The bridge steps on a raw asyncpg connection: what SQLAlchemy's asyncpg
dialect holds under an ``AsyncConnection`` (awa's own client takes asyncpg
connections directly, as ``connection=``).

SQLAlchemy registers JSON codecs on its asyncpg connections, so their jsonb
columns come back parsed; a job's JSON columns are turned back into text
(:func:`awa._core.encode_json`) for the job to decode as it does everywhere
else. A ``json_deserializer`` of the engine's that returns values JSON
cannot hold makes that fail with :class:`awa.ValidationError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from awa import _core
from awa.bridges._steps import insert_batch, insert_one, run_async, warn_outside_transaction
from awa.db import Statement
from awa.job import Job
from awa.tasks import Registry


async def insert(
    connection: Any, registry: Registry, args: Any, options: Mapping[str, Any]
) -> Job[Any]:
    warn_outside_transaction(connection.is_in_transaction())
    steps = insert_one(connection, registry, args, options)
    return await run_async(steps, _fetcher(connection))


async def insert_many(
    connection: Any,
    registry: Registry,
    jobs: Sequence[Any],
    opts: Sequence[Mapping[str, Any] | None] | None,
    options: Mapping[str, Any],
) -> list[Job[Any]]:
    warn_outside_transaction(connection.is_in_transaction())
    steps = insert_batch(connection, registry, jobs, opts, options)
    return await run_async(steps, _fetcher(connection))


#: The jsonb columns of a job row.
_JSON_COLUMNS = ("args", "metadata", "errors")


def _fetcher(connection: Any) -> Any:
    async def fetch(name: str, params: tuple[Any, ...]) -> list[Any]:
        return [
            _json_as_text(record) for record in await Statement(name).fetch(connection, *params)
        ]

    return fetch


def _json_as_text(record: Any) -> dict[str, Any]:
    row = dict(record.items())
    for column in _JSON_COLUMNS:
        value = row.get(column)
        if value is not None and not isinstance(value, str):
            row[column] = _core.encode_json(value, column)
    return row
