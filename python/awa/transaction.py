"""``client.transaction()``: inserts bound to one transaction of the
client's own pool, for callers who have no connection of their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import asyncpg

if TYPE_CHECKING:
    from awa.job import Job


class Transaction:
    """The inserts of :class:`awa.AsyncClient`, on one connection inside one
    transaction: everything commits when the ``async with`` block ends and
    rolls back if it raises. ``connection`` is that asyncpg connection, for
    your own SQL in the same transaction. Each method takes the keyword
    arguments of the client's method of the same name but ``connection``."""

    def __init__(self, client: Any, connection: asyncpg.Connection) -> None:
        # The AsyncClient that opened it (not imported: awa.client imports this).
        self._client = client
        self.connection = connection

    # The client's overloads cannot be told apart through **options, so each
    # result is typed here as the client's general case.
    async def insert(self, args: Any, **options: Any) -> Job[Any]:
        job: Job[Any] = await self._client.insert(args, connection=self.connection, **options)
        return job

    async def insert_many(self, jobs: Sequence[Any], **options: Any) -> list[Job[Any]]:
        inserted: list[Job[Any]] = await self._client.insert_many(
            jobs, connection=self.connection, **options
        )
        return inserted

    async def insert_many_copy(self, jobs: Sequence[Any], **options: Any) -> list[Job[Any]]:
        inserted: list[Job[Any]] = await self._client.insert_many_copy(
            jobs, connection=self.connection, **options
        )
        return inserted

    async def enqueue_many_copy(self, jobs: Sequence[Any], **options: Any) -> int:
        count: int = await self._client.enqueue_many_copy(
            jobs, connection=self.connection, **options
        )
        return count
