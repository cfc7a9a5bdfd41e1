"""A worker process for crash and liveness tests:
``python -m tests.acceptance.worker_process URL NAME MODE QUEUE``.

Each handler run is recorded in ``test_runs`` (job id, run lease, process
name) before the handler sleeps briefly, so a test can kill the process
while it holds jobs. MODE ``crash`` makes every handler kill its own
process (a job that takes its worker down every time); MODE ``block:S``
makes every handler block the event loop for S seconds (``time.sleep`` in
an ``async def``) and then record ``test_blocks_ended``; MODE ``sleep:S``
makes it await ``asyncio.sleep(S)``. Worker settings
beyond ``FAST_WORKER`` come as JSON in ``AWA_TEST_WORKER_SETTINGS``; a
periodic job (``{"name", "cron", "policy"}`` of ``crashy`` jobs) in
``AWA_TEST_PERIODIC``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import asyncpg

import awa
from tests.support import FAST_WORKER


async def main(url: str, name: str, mode: str, queue: str) -> None:
    recorder = await asyncpg.create_pool(url, min_size=1, max_size=4)
    client = awa.AsyncClient(url)

    @client.task(dict, kind="crashy")
    async def crashy(job: awa.Job[dict]) -> None:
        await recorder.execute(
            "INSERT INTO test_runs (job_id, run_lease, worker) VALUES ($1, $2, $3)",
            job.id,
            job.run_lease,
            name,
        )
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        verb, _, seconds = mode.partition(":")
        if verb == "block":
            time.sleep(float(seconds))  # noqa: ASYNC251 - blocking the loop is the point
            await recorder.execute("INSERT INTO test_blocks_ended VALUES ($1, $2)", job.id, name)
        await asyncio.sleep(float(seconds) if verb == "sleep" else 0.05)

    periodic = json.loads(os.environ.get("AWA_TEST_PERIODIC", "null"))
    if periodic is not None:
        client.periodic(
            periodic["name"], periodic["cron"], dict, {"n": 1}, kind="crashy", queue=queue,
            missed_fire_policy=periodic["policy"],
        )  # fmt: skip
    settings = {**FAST_WORKER, **json.loads(os.environ.get("AWA_TEST_WORKER_SETTINGS", "{}"))}
    slots = int(os.environ.get("AWA_TEST_SLOTS", "8"))
    await serve_until_sigterm(client, queue, slots, settings)
    await recorder.close()


async def serve_until_sigterm(
    client: awa.AsyncClient, queue: str, slots: int, settings: dict[str, float] | None = None
) -> None:
    """Works ``queue`` with fast maintenance, says ``started``, and shuts
    down gracefully on SIGTERM."""
    await client.start([(queue, slots)], **(settings or FAST_WORKER))
    print("started", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await client.shutdown(timeout=5)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
