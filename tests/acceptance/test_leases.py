"""Run leases: an outcome from a stale attempt is discarded, never applied."""

from __future__ import annotations

import asyncio

import awa
from tests.support import FAST_WORKER, wait_for_state


async def test_the_outcome_of_a_rescued_attempt_is_ignored(client, conn, database_url):
    release_first = asyncio.Event()
    first_started = asyncio.Event()
    runs: list[tuple[int, int]] = []

    @client.task(dict, kind="contested")
    async def contested(job):
        runs.append((job.attempt, job.run_lease))
        first_started.set()
        await release_first.wait()
        return None

    job = await client.insert({}, kind="contested")
    await client.start([("default", 1)], **FAST_WORKER)
    await asyncio.wait_for(first_started.wait(), 10)

    # Meanwhile the job is rescued and finished by another worker (attempt 2).
    async with awa.AsyncClient(database_url) as second:

        @second.task(dict, kind="contested")
        async def quick(job):
            return awa.Cancel("second attempt decided") if job.attempt == 2 else None

        await conn.execute(
            "UPDATE awa.jobs SET state = 'available', worker_id = NULL WHERE id = $1", job.id
        )
        await second.start([("default", 1)], **FAST_WORKER)
        await wait_for_state(conn, job.id, "cancelled")
        await second.shutdown()

    # The first attempt now returns: its completion must not overwrite anything.
    worker = client.worker
    assert worker is not None
    release_first.set()
    await _wait(lambda: worker.completer.stale >= 1)
    await client.shutdown()
    row = await conn.fetchrow(
        "SELECT state::text, attempt, run_lease FROM awa.jobs WHERE id = $1", job.id
    )
    assert (row["state"], row["attempt"]) == ("cancelled", 2)
    assert row["run_lease"] == runs[0][1] + 1
    assert [attempt for attempt, _lease in runs] == [1]


async def _wait(predicate, timeout: float = 10.0) -> None:
    async def check() -> bool:
        return bool(predicate())

    from tests.support import eventually

    await eventually(check, timeout=timeout)
