"""Queues sharing ``global_max_workers`` by weight: every queue with work
gets its share (a backlog in one no longer starves the queues listed after
it), and the slots follow the weights."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.support import FAST_WORKER, wait_for_state


async def _run_two_queues(client, conn, queues, global_max):
    running: Counter[str] = Counter()
    samples: list[tuple[int, int]] = []
    first_start: dict[str, int] = {}
    finished: Counter[str] = Counter()

    for queue in ("a", "b"):

        @client.task(dict, kind=f"work_{queue}", queue=queue)
        async def work(job, queue=queue):
            first_start.setdefault(queue, finished["a"] + finished["b"])
            running[queue] += 1
            samples.append((running["a"], running["b"]))
            await asyncio.sleep(0.1)
            running[queue] -= 1
            finished[queue] += 1

    jobs = []
    for queue in ("a", "b"):
        jobs += await client.insert_many([{"n": n} for n in range(24)], kind=f"work_{queue}")
    await client.start(queues, global_max_workers=global_max, **FAST_WORKER)
    for job in jobs:
        await wait_for_state(conn, job.id, "completed", timeout=60)
    return samples, first_start


async def test_a_backlog_in_one_queue_does_not_starve_the_next(client, conn):
    samples, first_start = await _run_two_queues(client, conn, [("a", 4), ("b", 4)], 4)
    # b started long before a's 24 jobs were done (it used to wait for all of them).
    assert first_start["b"] < 8
    assert max(b for _, b in samples) >= 2


async def test_the_slots_follow_the_weights(client, conn):
    queues = [{"name": "a", "max_workers": 4, "weight": 3}, {"name": "b", "max_workers": 4}]
    samples, _ = await _run_two_queues(client, conn, queues, 4)
    busy = [(a, b) for a, b in samples if a + b == 4]
    assert busy, "the cap was never reached"
    # With both queues busy, a holds three slots for b's one.
    assert Counter(busy).most_common(1)[0][0] == (3, 1)
