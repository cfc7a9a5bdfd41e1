"""The SQL floor: the least a queue can do on this Postgres from one Python process.

One table, bulk insert by COPY, and one asyncpg connection that loops: claim 100
queued rows with FOR UPDATE SKIP LOCKED, run their handlers, mark the batch
completed with one UPDATE. It LISTENs when the queue is empty. No retries, leases,
rescue or priorities: it is a reference point, not a job queue.
"""

from __future__ import annotations

import asyncio
import json

import asyncpg

import common

CLAIM_BATCH = 100
IDLE_POLL_S = 1.0  # fallback poll if a notification is missed
CHANNEL = "floor_jobs"

SCHEMA = f"""
CREATE TABLE floor_jobs (
    id bigserial PRIMARY KEY,
    args jsonb NOT NULL,
    status text NOT NULL DEFAULT 'queued',
    completed_at timestamptz
);
CREATE INDEX floor_jobs_queued ON floor_jobs (id) WHERE status = 'queued';
CREATE FUNCTION floor_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END $$;
CREATE TRIGGER floor_jobs_inserted AFTER INSERT ON floor_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION floor_jobs_notify();
"""

CLAIM = f"""
UPDATE floor_jobs SET status = 'running'
WHERE id IN (
    SELECT id FROM floor_jobs WHERE status = 'queued'
    ORDER BY id FOR UPDATE SKIP LOCKED LIMIT {CLAIM_BATCH}
)
RETURNING id, args
"""

COMPLETE = """
UPDATE floor_jobs SET status = 'completed', completed_at = now()
FROM unnest($1::bigint[]) AS done(id)
WHERE floor_jobs.id = done.id
"""


class FloorAdapter:
    completed_sql = "SELECT count(*) FROM floor_jobs WHERE status = 'completed'"

    def __init__(self, url: str, handle) -> None:
        self.url = url
        self.handle = handle
        self.producer: asyncpg.Connection | None = None
        self.worker_conn: asyncpg.Connection | None = None
        self.worker_task: asyncio.Task | None = None
        self.stopping = False
        self.wakeup = asyncio.Event()

    async def setup(self) -> None:
        self.producer = await asyncpg.connect(self.url)
        await self.producer.execute(SCHEMA)

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        records = [(json.dumps(p),) for p in payloads]
        status = await self.producer.copy_records_to_table(
            "floor_jobs", records=records, columns=["args"]
        )
        return int(status.split()[-1])  # "COPY 20000"

    async def insert_one(self, payload: dict) -> None:
        await self.producer.execute(
            "INSERT INTO floor_jobs (args) VALUES ($1::jsonb)", json.dumps(payload)
        )

    async def start_worker(self, concurrency: int) -> None:
        self.worker_conn = await asyncpg.connect(self.url)
        await self.worker_conn.add_listener(CHANNEL, self._on_notify)
        self.worker_task = asyncio.create_task(self._work_loop(concurrency))

    def _on_notify(self, *_args) -> None:
        self.wakeup.set()

    async def _run_one(self, limit: asyncio.Semaphore, args: str) -> None:
        async with limit:
            await self.handle(json.loads(args)["i"])

    async def _work_loop(self, concurrency: int) -> None:
        limit = asyncio.Semaphore(concurrency)
        while not self.stopping:
            self.wakeup.clear()
            rows = await self.worker_conn.fetch(CLAIM)
            if not rows:
                try:
                    await asyncio.wait_for(self.wakeup.wait(), IDLE_POLL_S)
                except asyncio.TimeoutError:
                    pass
                continue
            await asyncio.gather(*(self._run_one(limit, row["args"]) for row in rows))
            await self.worker_conn.execute(COMPLETE, [row["id"] for row in rows])

    def check_worker(self) -> None:
        common.raise_if_finished(self.worker_task)

    async def stop_worker(self) -> None:
        self.stopping = True
        self.wakeup.set()
        await self.worker_task
        await self.worker_conn.close()
        self.worker_conn = None

    async def close(self) -> None:
        if self.worker_conn is not None:
            self.worker_task.cancel()
            await self.worker_conn.close()
        if self.producer is not None:
            await self.producer.close()


if __name__ == "__main__":
    common.main(FloorAdapter)
