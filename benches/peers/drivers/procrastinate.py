"""procrastinate 3.10.0 on psycopg 3 (binary).

Bulk path: ``Task.batch_defer_async``. Worker: ``App.run_worker_async(
concurrency=C, listen_notify=True, delete_jobs="never")`` in a task, stopped by
cancelling it (procrastinate turns that into a graceful stop). The connector's
pool keeps its default size. It fetches one job per query, and that fetch query
needs planner statistics: the harness ANALYZEs after the bulk insert.
"""

from __future__ import annotations

import asyncio
import sys

# This file has the same name as the package it drives: look in site-packages
# before this directory (where common.py still is found).
sys.path.append(sys.path.pop(0))

from procrastinate import App, PsycopgConnector

import common

QUEUE = "bench"


class ProcrastinateAdapter:
    completed_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"

    def __init__(self, url: str, handle) -> None:
        self.handle = handle
        self.app = App(connector=PsycopgConnector(conninfo=url))
        self.opened = False
        self.worker_task: asyncio.Task | None = None

        @self.app.task(name="bench_job", queue=QUEUE)
        async def bench_job(i: int) -> None:
            await self.handle(i)

        self.task = bench_job

    async def setup(self) -> None:
        await self.app.open_async()
        self.opened = True
        await self.app.schema_manager.apply_schema_async()

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        ids = await self.task.batch_defer_async(*payloads)
        return len(ids)

    async def insert_one(self, payload: dict) -> None:
        await self.task.defer_async(**payload)

    async def start_worker(self, concurrency: int) -> None:
        self.worker_task = asyncio.create_task(
            self.app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                listen_notify=True,
                delete_jobs="never",
                install_signal_handlers=False,
            )
        )

    def check_worker(self) -> None:
        common.raise_if_finished(self.worker_task)

    async def stop_worker(self) -> None:
        self.worker_task.cancel()
        try:
            await self.worker_task
        except asyncio.CancelledError:
            pass
        self.worker_task = None

    async def close(self) -> None:
        if self.worker_task is not None:
            await self.stop_worker()
        if self.opened:
            await self.app.close_async()


if __name__ == "__main__":
    common.main(ProcrastinateAdapter)
