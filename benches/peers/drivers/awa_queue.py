"""awa-queue (this repository), driven through its public AsyncClient.

Bulk path: ``enqueue_many_copy`` (COPY); ``insert_many`` (an unnest INSERT) is
measured as a second bulk row. Worker: ``start([(queue, C)])``.
"""

from __future__ import annotations

import awa

import common

KIND = "bench_job"
QUEUE = "bench"


class AwaQueueAdapter:
    completed_sql = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"

    def __init__(self, url: str, handle) -> None:
        self.handle = handle
        self.client = awa.AsyncClient(url)
        self.running = False

    async def setup(self) -> None:
        await self.client.migrate()

        @self.client.task(dict, kind=KIND, queue=QUEUE)
        async def bench_job(job):
            await self.handle(job.args["i"])
            return None

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        return await self.client.enqueue_many_copy(payloads, kind=KIND, queue=QUEUE)

    async def bulk_enqueue_unnest(self, payloads: list[dict]) -> int:
        jobs = await self.client.insert_many(payloads, kind=KIND, queue=QUEUE)
        return len(jobs)

    async def insert_one(self, payload: dict) -> None:
        await self.client.insert(payload, kind=KIND, queue=QUEUE)

    async def start_worker(self, concurrency: int) -> None:
        await self.client.start([(QUEUE, concurrency)])
        self.running = True

    def check_worker(self) -> None:
        pass  # a stuck drain ends by timeout

    async def stop_worker(self) -> None:
        await self.client.shutdown(timeout=30.0)
        self.running = False

    async def close(self) -> None:
        if self.running:
            await self.stop_worker()
        await self.client.close()


if __name__ == "__main__":
    common.main(AwaQueueAdapter)
