"""What a claim and the write of its outcomes cost the server, this tree's
SQL against an older tree's, interleaved.

One connection claims 25 jobs at a time (``jobs_claim``; ``--batch``) and a
second writes their outcomes (``jobs_finish_batch``) until 20 000 jobs are
done; the CPU time of each backend (``/proc/<pid>/stat``) per claim is the
figure, with the median round trip of a claim as the client sees it. The two
trees' queries run against two databases migrated by each tree (``--url``
for this one, ``--old-url`` for the other, whose query files are read from
``--old-sql``), rounds interleaved, medians printed.

    python benches/storage/claim_cost.py --url postgresql://.../new_db \\
        --old-url postgresql://.../old_db --old-sql /path/to/old/python/awa/sql/queries

``--no-session-setup`` leaves the sessions as a worker behind a pooler
leaves them (no ``jobs_claim_prepare_session``). ``--as-worker`` claims
as the worker does, with the queue settings it read
(``jobs_claim_with_settings``, where the tree has it; plain ``jobs_claim``
makes the claim read them itself). Both databases must be
migrated already (each by its own awa). The server must be on this machine
(the backends' CPU is read from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
NEW_SQL = HERE.parent.parent / "python" / "awa" / "sql" / "queries"
NAME = re.compile(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)


def load(directory: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        queries |= {m.group(1): m.group(2) for m in NAME.finditer(path.read_text())}
    return queries


def finish_args(finish_sql: str, rows: list[Any]) -> list[Any]:
    """The claimed ``rows``' outcomes (all completed) as the tree's
    ``jobs_finish_batch`` takes them: array literals where it casts text to
    each array type (this tree on), else lists."""
    n = len(rows)
    columns = [
        [r["id"] for r in rows], [r["run_lease"] for r in rows],
        ["completed"] * n, [None] * n, [0] * n, [None] * n,
    ]  # fmt: skip
    if "$1::text::bigint[]" not in finish_sql:
        return columns

    def literal(column: list[Any]) -> str:
        return "{" + ",".join("NULL" if v is None else str(v) for v in column) + "}"

    literals: list[Any] = [literal(column) for column in columns]
    if "$7::text[]" in finish_sql:
        literals += [None, None]  # no results, no progress (from migration 28 on)
    return literals


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cycle(
    url: str,
    queries: dict[str, str],
    jobs: int,
    batch: int,
    session_setup: bool,
    as_worker: bool = False,
) -> tuple[float, float, float]:
    """Server CPU per claim (µs) of the claiming and the writing backend, and
    the median claim round trip (µs)."""
    claimer, writer = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        lanes = "lanes_open" in queries
        tables = "awa.jobs, awa.workers" + (
            ", awa.lanes, awa.lane_moves, awa.lane_lowerings, awa.claims" if lanes else ""
        )
        await claimer.execute(f"TRUNCATE {tables}")
        await claimer.execute(
            "INSERT INTO awa.jobs (kind, queue, args) "
            "SELECT 'k', 'q', '{}' FROM generate_series(1, $1)",
            jobs,
        )
        await claimer.execute("ANALYZE awa.jobs")
        if session_setup:
            await claimer.execute(queries["jobs_claim_prepare_session"])
            await writer.execute(queries["jobs_write_prepare_session"])
        if lanes:
            await claimer.fetchval(queries["lanes_open"], ["q"])
        # As the worker claims (--as-worker): with the queue settings it read,
        # where the tree has that statement (migration 0021 on).
        settings = as_worker and "jobs_claim_with_settings" in queries
        claim = await claimer.prepare(
            queries["jobs_claim_with_settings" if settings else "jobs_claim"]
        )
        extra = [[None], [False], False, [False]] if settings else []
        finish = await writer.prepare(queries["jobs_finish_batch"])
        pids = [await c.fetchval("SELECT pg_backend_pid()") for c in (claimer, writer)]
        before = [cpu_s(pid) for pid in pids]
        round_trips = []
        while True:
            started = time.perf_counter()
            rows = [
                row
                for row in await claim.fetch(["q"], [batch], 1, [], [], [None], *extra)
                if row["id"] is not None
            ]
            if not rows:
                break
            round_trips.append(time.perf_counter() - started)
            await finish.fetch(*finish_args(queries["jobs_finish_batch"], rows))
        after = [cpu_s(pid) for pid in pids]
        claims = len(round_trips)
        claim_cpu, write_cpu = ((a - b) / claims * 1e6 for a, b in zip(after, before, strict=True))
        return claim_cpu, write_cpu, statistics.median(round_trips) * 1e6
    finally:
        await claimer.close()
        await writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a database this tree migrated")
    parser.add_argument("--old-url", required=True, help="a database the older tree migrated")
    parser.add_argument("--old-sql", type=Path, required=True, help="the older tree's queries")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=25, help="jobs per claim")
    parser.add_argument(
        "--no-session-setup",
        action="store_true",
        help="leave the sessions' settings alone, as a worker behind a pooler does",
    )
    parser.add_argument(
        "--as-worker",
        action="store_true",
        help="claim as the worker does, passing the queue settings it read "
        "(jobs_claim_with_settings), in a tree that has that statement",
    )
    opts = parser.parse_args()
    trees = {"old": (opts.old_url, load(opts.old_sql)), "new": (opts.url, load(NEW_SQL))}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for _ in range(opts.rounds):
        for name, (url, queries) in trees.items():
            results[name].append(
                await cycle(
                    url, queries, opts.jobs, opts.batch, not opts.no_session_setup, opts.as_worker
                )
            )
    for name, rounds in results.items():
        claim = statistics.median(r[0] for r in rounds)
        write = statistics.median(r[1] for r in rounds)
        trip = statistics.median(r[2] for r in rounds)
        print(
            f"{name}: claim {claim:.0f} µs, outcome write {write:.0f} µs of server CPU per "
            f"claim of {opts.batch} (claims by round: {[round(r[0]) for r in rounds]}); "
            f"a claim's round trip {trip:.0f} µs"
        )


if __name__ == "__main__":
    asyncio.run(main())
