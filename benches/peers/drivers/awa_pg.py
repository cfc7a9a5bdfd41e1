"""awa-pg (PyPI awa-pg 0.6.9), driven through its public AsyncClient.

Bulk path: ``enqueue_many_copy`` (COPY into its queue storage). Worker:
``start([{"name": queue, "max_workers": C}])``. ``install_queue_storage()`` runs
after ``migrate()``: without it the COPY path can refuse.

Completed count: the ``awa.jobs`` view and ``queue_stats()`` are too slow to poll
during a drain on a fresh schema (seconds per call), so we sum the per-batch
completion counts its queue storage writes (``awa.receipt_completion_batches``).
"""

from __future__ import annotations

import awa

import common

KIND = "bench_job"
QUEUE = "bench"


class AwaPgAdapter:
    completed_sql = "SELECT coalesce(sum(completed_count), 0) FROM awa.receipt_completion_batches"

    def __init__(self, url: str, handle) -> None:
        self.handle = handle
        self.client = awa.AsyncClient(url)
        self.running = False

    async def setup(self) -> None:
        await self.client.migrate()
        await self.client.install_queue_storage()

        @self.client.task(dict, kind=KIND, queue=QUEUE)
        async def bench_job(job):
            await self.handle(job.args["i"])

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        return await self.client.enqueue_many_copy(payloads, kind=KIND, queue=QUEUE)

    async def insert_one(self, payload: dict) -> None:
        await self.client.insert(payload, kind=KIND, queue=QUEUE)

    async def start_worker(self, concurrency: int) -> None:
        await self.client.start([{"name": QUEUE, "max_workers": concurrency}])
        self.running = True

    def check_worker(self) -> None:
        pass  # the runtime lives in Rust; a stuck drain ends by timeout

    async def stop_worker(self) -> None:
        await self.client.shutdown(timeout_ms=30_000)
        self.running = False

    async def close(self) -> None:
        if self.running:
            await self.stop_worker()
        await self.client.close()


if __name__ == "__main__":
    common.main(AwaPgAdapter)
