#!/usr/bin/env python3
"""Does awa's cost stay flat as the jobs table grows?

Three phases, each in a fresh database on the server ``--admin-url`` names:

1. **small**: ``--probe`` no-op jobs queued; drain rate at ``--concurrency``,
   bulk insert rate (``insert_many`` of 1 000) and single insert rate.
2. **queued**: ``--queued`` jobs waiting (written with one INSERT … SELECT);
   the drain rate over the first ``--window`` completions, while the rest
   stay queued.
3. **history**: ``--history`` finished jobs (completed and a few failed);
   the same figures as phase 1, and the plans of ``get_job`` and
   ``list_jobs`` (with and without filters), with their execution times.

Completions are counted in the handler (a count over the table would cost
more than the drain with ten million rows). Prints a markdown table and
writes JSON to ``benches/size/results/``.

    python benches/size/flat_cost.py --admin-url postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

import awa
from awa import sql

HERE = Path(__file__).resolve().parent
QUEUE = "bench"
KIND = "bench_job"


class Drain:
    """A client whose handler counts completions, and a way to wait for N."""

    def __init__(self, url: str) -> None:
        self.client = awa.AsyncClient(url)
        self.done = 0
        self.target = 0
        self.reached = asyncio.Event()

        @self.client.task(dict, kind=KIND, queue=QUEUE)
        async def bench_job(job: Any) -> None:
            self.done += 1
            if self.done >= self.target:
                self.reached.set()

    async def rate(self, count: int, concurrency: int) -> float:
        """Jobs/s from the worker's start until ``count`` handlers ran."""
        self.target = count
        started = time.perf_counter()
        await self.client.start([(QUEUE, concurrency)])
        await asyncio.wait_for(self.reached.wait(), timeout=600)
        elapsed = time.perf_counter() - started
        await self.client.shutdown(timeout=30)
        await self.client.close()
        return count / elapsed


async def fresh_database(admin_url: str) -> tuple[str, str]:
    name = f"awa_size_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    await awa.migrate(url)
    return name, url


async def drop_database(admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def insert_rates(url: str) -> dict[str, float]:
    client = awa.AsyncClient(url)
    try:
        batch = [{"i": i} for i in range(1000)]
        started = time.perf_counter()
        for _ in range(10):
            await client.insert_many(batch, kind=KIND, queue="elsewhere")
        many = 10_000 / (time.perf_counter() - started)
        started = time.perf_counter()
        for i in range(1000):
            await client.insert({"i": i}, kind=KIND, queue="elsewhere")
        single = 1000 / (time.perf_counter() - started)
    finally:
        await client.close()
    return {"insert_many_jobs_per_s": many, "insert_jobs_per_s": single}


async def queue_jobs(url: str, count: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args, state) "
            "SELECT $1, $2, jsonb_build_object('i', n), 'available' "
            "FROM generate_series(1, $3::integer) AS n",
            KIND,
            QUEUE,
            count,
        )
        await conn.execute("ANALYZE awa.jobs")
    finally:
        await conn.close()


async def write_history(url: str, count: int) -> None:
    """``count`` finished jobs, one in a thousand failed, finished over the
    last week, written in slices so no transaction grows without bound."""
    conn = await asyncpg.connect(url)
    try:
        step = 1_000_000
        for start in range(0, count, step):
            await conn.execute(
                "INSERT INTO awa.jobs (kind, queue, args, state, attempt, attempted_at, "
                "finalized_at, failure_reason) "
                "SELECT $1, 'history', jsonb_build_object('i', n), "
                "CASE WHEN n % 1000 = 0 THEN 'failed' ELSE 'completed' END::awa.job_state, 1, "
                "now() - (n % 604800) * interval '1 second', "
                "now() - (n % 604800) * interval '1 second', "
                "CASE WHEN n % 1000 = 0 THEN 'terminal_error' END "
                "FROM generate_series($2::integer, $3::integer) AS n",
                KIND,
                start + 1,
                min(start + step, count),
            )
        await conn.execute("VACUUM ANALYZE awa.jobs")
        # The history's gigabytes of dirty pages are written back now, not
        # by the checkpointer while the rates are measured.
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def sizes(url: str) -> dict[str, float]:
    """The jobs table and its indexes, MiB (what the history costs on disk)."""
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT pg_relation_size('awa.jobs') AS heap, "
            "pg_indexes_size('awa.jobs') AS indexes, "
            "pg_total_relation_size('awa.jobs') AS total"
        )
        return {name: value / 2**20 for name, value in row.items()}
    finally:
        await conn.close()


async def plans(url: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the inspection queries, as the client runs them."""
    conn = await asyncpg.connect(url)
    try:
        top = await conn.fetchval("SELECT max(id) FROM awa.jobs")
        cases = {
            "get_job": ("jobs_get", (random.randint(1, top), False)),
            "list_jobs": ("jobs_list", (None, None, None, 50, False)),
            "list_jobs state=failed": ("jobs_list", ("failed", None, None, 50, False)),
            "list_jobs state=available": ("jobs_list", ("available", None, None, 50, False)),
            "list_jobs kind": ("jobs_list", (None, None, KIND, 50, False)),
            "list_jobs queue=bench": ("jobs_list", (None, QUEUE, None, 50, False)),
            "list_dlq": ("jobs_dead_letters", (None, None, None, None, 50, False)),
        }
        found: dict[str, Any] = {}
        for label, (query, args) in cases.items():
            if query not in sql.QUERIES or args is None:
                continue
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.query(query), *args
            )
            plan = json.loads(rows[0][0])[0]
            found[label] = {
                "execution_ms": plan["Execution Time"],
                "scans": scans(plan["Plan"]),
                "plan": plan["Plan"],
            }
        return found
    finally:
        await conn.close()


def scans(node: dict[str, Any]) -> str:
    """The plan's scan nodes, each with the index or table it reads."""
    found = []
    if "Scan" in node["Node Type"]:
        target = node.get("Index Name") or node.get("Relation Name", "")
        found.append(f"{node['Node Type']} {target}".strip())
    for child in node.get("Plans", []):
        found.append(scans(child))
    return ", ".join(part for part in found if part)


async def phase(admin_url: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    database, url = await fresh_database(admin_url)
    try:
        result: dict[str, Any] = {"phase": name}
        if name == "history":
            started = time.perf_counter()
            await write_history(url, args.history)
            result["setup_s"] = time.perf_counter() - started
            result["history_sizes_mib"] = await sizes(url)
        if name in ("small", "history"):
            result.update(await insert_rates(url))
            await queue_jobs(url, args.probe)
            result["drain_jobs_per_s"] = await Drain(url).rate(args.probe, args.concurrency)
            result["plans"] = await plans(url)
        else:
            await queue_jobs(url, args.queued)
            drain = Drain(url)
            result["drain_jobs_per_s"] = await drain.rate(args.window, args.concurrency)
        return result
    finally:
        await drop_database(admin_url, database)


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    small = next((r for r in results if r["phase"] == "small"), {})
    lines = [
        "| figure | small | with the larger table | ratio |",
        "|---|---|---|---|",
    ]
    for result in results:
        if result["phase"] == "small":
            continue
        label = (
            f"{args.queued:,} queued"
            if result["phase"] == "queued"
            else f"{args.history:,} in history"
        )
        for key in ("drain_jobs_per_s", "insert_many_jobs_per_s", "insert_jobs_per_s"):
            if key in result and key in small:
                ratio = result[key] / small[key]
                lines.append(
                    f"| {key} ({label}) | {small[key]:,.0f} | {result[key]:,.0f} | {ratio:.2f}× |"
                )
            elif key in result:
                lines.append(f"| {key} ({label}) | | {result[key]:,.0f} | |")
    for result in results:
        for label, plan in result.get("plans", {}).items():
            lines.append(
                f"| {label} ({result['phase']}) | | {plan['scans']}, "
                f"{plan['execution_ms']:.2f} ms | |"
            )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--probe", type=int, default=20_000)
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--phases", default="small,queued,history")
    args = parser.parse_args()
    results = []
    for name in args.phases.split(","):
        results.append(await phase(args.admin_url, name, args))
        print(f"{name}: done", flush=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    path = out / f"{stamp}.json"
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    print(f"wrote {path}")
    print(table(results, args))


if __name__ == "__main__":
    asyncio.run(main())
