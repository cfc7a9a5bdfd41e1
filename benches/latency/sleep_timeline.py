"""Where a sleep-bound drain's time goes: 5 000 jobs of ``await
asyncio.sleep(0.01)`` at c=100 (the peer harness's sleep workload), with
each handler's start and end taken inside the handler.

Splits the drain's slot-time (slots × the time from the first start to the
last end) into the handlers' 10 ms, what they ran past it (the event loop
woke them late), and idle slots (a slot free with no handler started in
it), per job. Prints one JSON object.

    python benches/latency/sleep_timeline.py --admin-url postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import awa
from awa.databases import create_database, drop_database, with_database

DATABASE = "awa_sleep_timeline"
SLEEP_S = 0.01


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=100)
    opts = parser.parse_args()
    await drop_database(opts.admin_url, DATABASE)
    await create_database(opts.admin_url, DATABASE)
    client = awa.AsyncClient(with_database(opts.admin_url, DATABASE))
    spans: list[tuple[float, float]] = []
    done = asyncio.Event()

    @client.task(dict, kind="sleep_job", queue="sleep")
    async def sleep_job(job: object) -> None:
        started = time.perf_counter()
        await asyncio.sleep(SLEEP_S)
        spans.append((started, time.perf_counter()))
        if len(spans) == opts.jobs:
            done.set()

    try:
        await client.migrate()
        await client.enqueue_many_copy([{} for _ in range(opts.jobs)], kind="sleep_job")
        await client.start([("sleep", opts.concurrency)])
        await asyncio.wait_for(done.wait(), timeout=120)
        await client.shutdown(timeout=10)
    finally:
        await client.close()
    print(json.dumps(split(spans, opts.concurrency)))


def split(spans: list[tuple[float, float]], slots: int) -> dict[str, float]:
    first = min(start for start, _ in spans)
    last = max(end for _, end in spans)
    wall = last - first
    ran = [end - start for start, end in spans]
    slot_ms = slots * wall * 1000 / len(spans)
    handler_ms = statistics.fmean(ran) * 1000
    return {
        "jobs": len(spans),
        "jobs_per_s": len(spans) / wall,
        "slot_ms_per_job": slot_ms,
        "sleep_ms": SLEEP_S * 1000,
        "late_wake_ms_per_job": handler_ms - SLEEP_S * 1000,
        "handler_p50_ms": statistics.median(ran) * 1000,
        "handler_p99_ms": sorted(ran)[int(0.99 * len(ran))] * 1000,
        "idle_slot_ms_per_job": slot_ms - handler_ms,
    }


if __name__ == "__main__":
    asyncio.run(main())
