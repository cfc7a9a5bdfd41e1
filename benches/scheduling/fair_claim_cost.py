"""What tenant fairness costs a claim: server CPU per claim and per outcome
write, for one queue drained by one claiming and one writing connection,
with the queue's jobs spread over N partitions and fairness on or off
(``VARIANTS``), variants interleaved, medians printed.

The queries are this tree's (``python/awa/sql/queries``); ``--url`` names a
database this tree migrated, on this machine (the backends' CPU is read
from /proc). Every cycle empties the awa tables of that database.

    python benches/scheduling/fair_claim_cost.py --url postgresql://postgres@127.0.0.1:55432/fair \\
        --variants plain,fair8,fair64,fair512 --batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from claim_cost import NEW_SQL, cpu_s, finish_args, load  # benches/storage/claim_cost.py

#: fair: claims take the partitions round-robin; aging: the aging interval
#: (s); rate_class: every job in one class far above any drain rate;
#: partitions: how many partition keys the jobs name in turn (0: none);
#: blocks: the jobs inserted one partition after another instead;
#: cap: max_workers_per_partition (a claim's jobs are finished before the
#: next claim, so a cap of 100 never binds: it measures the bookkeeping).
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {"fair": False, "aging": None, "rate_class": False, "partitions": 0},
    "plain8": {"fair": False, "aging": None, "rate_class": False, "partitions": 8},
    "plain512": {"fair": False, "aging": None, "rate_class": False, "partitions": 512},
    "fair2": {"fair": True, "aging": None, "rate_class": False, "partitions": 2},
    "fair8": {"fair": True, "aging": None, "rate_class": False, "partitions": 8},
    # The same jobs inserted tenant by tenant, not in turn: each partition's
    # jobs side by side in the table, so a claim's rows share pages.
    "fair8-blocks": {
        "fair": True,
        "aging": None,
        "rate_class": False,
        "partitions": 8,
        "blocks": True,
    },
    "flow8": {"fair": True, "aging": 60.0, "rate_class": True, "partitions": 8},
    "fair8-aging": {"fair": True, "aging": 60.0, "rate_class": False, "partitions": 8},
    "fair8-class": {"fair": True, "aging": None, "rate_class": True, "partitions": 8},
    "capped8": {"fair": False, "aging": None, "rate_class": False, "partitions": 8, "cap": 100},
    "fair64": {"fair": True, "aging": None, "rate_class": False, "partitions": 64},
    "fair512": {"fair": True, "aging": None, "rate_class": False, "partitions": 512},
}

TABLES = (
    "awa.jobs, awa.workers, awa.lanes, awa.lane_moves, awa.lane_lowerings, awa.claims, "
    "awa.queue_settings, awa.rate_classes"
)


async def cycle(
    url: str, queries: dict[str, str], variant: dict[str, Any], jobs: int, batch: int
) -> tuple[float, float]:
    """Server CPU (µs) per claim of the claiming and the writing backend."""
    claimer, writer = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        await claimer.execute(f"TRUNCATE {TABLES}")
        if variant["rate_class"]:
            await claimer.execute(
                "INSERT INTO awa.rate_classes (name, rate_per_s, burst) VALUES ('c', 1e6, 100000)"
            )
        cap = variant.get("cap")
        if cap is not None:
            await claimer.execute(
                "INSERT INTO awa.queue_settings (queue, max_workers_per_partition)"
                " VALUES ('q', $1)",
                cap,
            )
        await claimer.execute(
            "INSERT INTO awa.jobs (kind, queue, args, rate_class, partition_key)"
            " SELECT 'k', 'q', '{}', $2, CASE WHEN $3 > 0 THEN 't' || (g % $3) END"
            " FROM generate_series(1, $1) AS g"
            " ORDER BY CASE WHEN $4 THEN g % greatest($3, 1) END, g",
            jobs, "c" if variant["rate_class"] else None, variant["partitions"],
            variant.get("blocks", False),
        )  # fmt: skip
        await claimer.execute("ANALYZE awa.jobs")
        await claimer.execute(queries["jobs_claim_prepare_session"])
        await writer.execute(queries["jobs_write_prepare_session"])
        await claimer.fetchval(queries["lanes_open"], ["q"])
        claim = await claimer.prepare(queries["jobs_claim_with_settings"])
        finish = await writer.prepare(queries["jobs_finish_batch"])
        pids = [await c.fetchval("SELECT pg_backend_pid()") for c in (claimer, writer)]
        before = [cpu_s(pid) for pid in pids]
        claims = claimed = 0
        while True:
            rows = await claim.fetch(
                ["q"], [batch], 1, [], [], [None], [variant["aging"]], [cap is not None],
                variant["rate_class"], [variant["fair"] or cap is not None],
            )  # fmt: skip
            rows = [row for row in rows if row["id"] is not None]
            if not rows:
                break
            claims += 1
            claimed += len(rows)
            await finish.fetch(*finish_args(queries["jobs_finish_batch"], rows))
        if claimed != jobs:
            raise RuntimeError(f"claimed {claimed} of {jobs} jobs")
        after = [cpu_s(pid) for pid in pids]
        claim_us, write_us = ((a - b) / claims * 1e6 for a, b in zip(after, before, strict=True))
        return claim_us, write_us
    finally:
        await claimer.close()
        await writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a database this tree migrated")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="jobs per claim")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="plain,fair8,flow8,capped8,fair64,fair512,plain512")
    opts = parser.parse_args()
    queries = load(NEW_SQL)
    names = opts.variants.split(",")
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for _ in range(opts.rounds):
        for name in names:
            results[name].append(
                await cycle(opts.url, queries, VARIANTS[name], opts.jobs, opts.batch)
            )
    for name, rounds in results.items():
        claim = statistics.median(r[0] for r in rounds)
        write = statistics.median(r[1] for r in rounds)
        print(
            f"{name}: claim {claim:.0f} µs, outcome write {write:.0f} µs of server CPU per "
            f"claim of {opts.batch} (claims by round: {[round(r[0]) for r in rounds]})"
        )


if __name__ == "__main__":
    asyncio.run(main())
