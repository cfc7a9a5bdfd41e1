"""pgqueuer 1.6.0 on asyncpg, with the uvloop event loop.

Bulk path: ``Queries.enqueue`` given lists (one multi-row INSERT). Worker:
``QueueManager.run(batch_size=min(10, C // 2), max_concurrent_tasks=C)``; it
insists on ``max_concurrent_tasks >= 2 * batch_size``. Finished jobs are deleted
from the queue table and logged to ``pgqueuer_log``; those log writes are
buffered (a batch, or 100 ms), so completions appear in the database a little
after the handlers return.
"""

from __future__ import annotations

import asyncio
import json
import sys

# This file has the same name as the package it drives: look in site-packages
# before this directory (where common.py still is found).
sys.path.append(sys.path.pop(0))

import asyncpg
import uvloop
from pgqueuer import Queries, QueueManager

import common

ENTRYPOINT = "bench_job"


class PgQueuerAdapter:
    completed_sql = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"

    def __init__(self, url: str, handle) -> None:
        self.url = url
        self.handle = handle
        self.producer_conn: asyncpg.Connection | None = None
        self.worker_conn: asyncpg.Connection | None = None
        self.queries: Queries | None = None
        self.manager: QueueManager | None = None
        self.worker_task: asyncio.Task | None = None

    async def setup(self) -> None:
        self.producer_conn = await asyncpg.connect(self.url)
        self.queries = Queries.from_asyncpg_connection(self.producer_conn)
        await self.queries.install()

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        ids = await self.queries.enqueue(
            [ENTRYPOINT] * len(payloads),
            [json.dumps(p).encode() for p in payloads],
            [0] * len(payloads),
        )
        return len(ids)

    async def insert_one(self, payload: dict) -> None:
        await self.queries.enqueue(ENTRYPOINT, json.dumps(payload).encode())

    async def start_worker(self, concurrency: int) -> None:
        self.worker_conn = await asyncpg.connect(self.url)
        self.manager = QueueManager(Queries.from_asyncpg_connection(self.worker_conn))

        @self.manager.entrypoint(ENTRYPOINT)
        async def bench_job(job) -> None:
            await self.handle(json.loads(job.payload)["i"])

        batch_size = max(1, min(10, concurrency // 2))
        self.worker_task = asyncio.create_task(
            self.manager.run(batch_size=batch_size, max_concurrent_tasks=concurrency)
        )

    def check_worker(self) -> None:
        common.raise_if_finished(self.worker_task)

    async def stop_worker(self) -> None:
        self.manager.shutdown.set()
        await self.worker_task
        await self.worker_conn.close()
        self.worker_conn = None

    async def close(self) -> None:
        if self.worker_conn is not None:
            await self.stop_worker()
        if self.producer_conn is not None:
            await self.producer_conn.close()


if __name__ == "__main__":
    common.main(PgQueuerAdapter, loop_runner=uvloop.run)
