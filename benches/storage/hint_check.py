"""Does a claim hint ever leave a job behind? Checks for layouts FX and FY of
experiment.py against a real server (see docs/storage.md, "A claim hint that
is safe by xids").

A lane hint says "every job of this lane keyed before (run_at, id) has been
claimed". Claims scan from it. It is wrong whenever a job becomes visible
behind it; this script makes each way that can happen happen, then runs
producers and claimers together and counts the jobs never claimed:

  read-first   a transaction that reads, then inserts with the default run_at
  write-first  a transaction that inserts, then stays open
  aborted      a claim that locks jobs and rolls back while another claim
               raises the hint past them
  stress       producers (some read first, some hold their transaction open)
               and claimers (some of whose claims roll back) at once

Usage:
    python benches/storage/hint_check.py --url postgresql://postgres@127.0.0.1:5432/postgres \
        [--layouts FX,FY] [--seconds 10] [--producers 4] [--claimers 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time

import asyncpg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiment as ex

CLAIM_SQL = ex.E_CLAIM_SQL
INSERT_SQL = ("INSERT INTO awa.jobs (kind, queue, args) SELECT $1, $2, '{}'"
              " FROM generate_series(1, $3) RETURNING id")
SWEEP_SQL = "SELECT awa.sweep_lane($1, 2::smallint)"


class Db:
    def __init__(self, admin_url: str, layout_name: str):
        self.admin_url = admin_url
        self.layout = ex.LAYOUTS[layout_name]()
        self.name = ""
        self.url = ""

    async def __aenter__(self) -> Db:
        self.name = await ex.create_database(self.admin_url)
        self.url = ex.url_for_db(self.admin_url, self.name)
        ctl = await asyncpg.connect(self.url)
        try:
            await ex.create_schema(ctl, self.layout)
        finally:
            await ctl.close()
        return self

    async def __aexit__(self, *exc) -> None:
        await ex.drop_database(self.admin_url, self.name)

    async def connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.url)

    @property
    def sweeps(self) -> bool:
        return self.layout.name == "FY"

    async def complete(self, conn: asyncpg.Connection, rows) -> None:
        await conn.execute(self.layout.complete_sql, [r["id"] for r in rows],
                           [r["run_lease"] for r in rows])


def report(layout: str, check: str, ok: bool, detail: str) -> bool:
    print(f"{layout:<3} {'ok  ' if ok else 'FAIL'} {check:<12} {detail}", flush=True)
    return ok


async def insert(conn: asyncpg.Connection, n: int = 1) -> list[int]:
    return [r["id"] for r in await conn.fetch(INSERT_SQL, ex.KIND, ex.QUEUE, n)]


async def claim_ids(conn: asyncpg.Connection, db: Db, n: int = 10) -> list[int]:
    rows = await conn.fetch(CLAIM_SQL, ex.QUEUE, n, 1)
    await db.complete(conn, rows)
    return [r["id"] for r in rows]


async def check_late_commit(db: Db, read_first: bool) -> bool:
    """A transaction begins, then a later job is inserted and claimed, then
    the transaction commits a job. read_first: it reads at the start (no xid
    yet) and inserts with the default run_at only after the claim; otherwise
    it inserts at the start and stays open."""
    ctl, slow = await db.connect(), await db.connect()
    try:
        await slow.execute("BEGIN")
        if read_first:
            await slow.fetchval("SELECT count(*) FROM awa.lanes")
        else:
            slow_ids = await insert(slow)
        await asyncio.sleep(0.2)
        fast = await insert(ctl)
        first = await claim_ids(ctl, db)
        if read_first:
            slow_ids = await insert(slow)
        await slow.execute("COMMIT")
        second = await claim_ids(ctl, db)
        check = "read-first" if read_first else "write-first"
        return report(db.layout.name, check, first == fast and second == slow_ids,
                      f"claimed {first} then {second}; the late job {slow_ids} "
                      f"{'was' if second == slow_ids else 'was NOT'} claimed next")
    finally:
        await ctl.close()
        await slow.close()


async def check_read_first(db: Db) -> bool:
    return await check_late_commit(db, read_first=True)


async def check_write_first(db: Db) -> bool:
    return await check_late_commit(db, read_first=False)


async def check_aborted_claim(db: Db) -> bool:
    """Claim A locks jobs while another session holds the lane row (so A does
    not move the hint); claim B skips A's jobs and raises the hint past them;
    A rolls back."""
    ctl, a, b, holder = [await db.connect() for _ in range(4)]
    try:
        ids = await insert(ctl, 10)
        await holder.execute("BEGIN")
        await holder.execute("SELECT 1 FROM awa.lanes WHERE queue = $1 AND priority = 2 FOR UPDATE",
                             ex.QUEUE)
        await a.execute("BEGIN")
        a_rows = await a.fetch(CLAIM_SQL, ex.QUEUE, 5, 1)
        await holder.execute("COMMIT")
        b_ids = await claim_ids(b, db, 5)
        await a.execute("ROLLBACK")
        after = await claim_ids(ctl, db)
        swept = None
        if db.sweeps:
            swept = await ctl.fetchval(SWEEP_SQL, ex.QUEUE)
            after += await claim_ids(ctl, db)
        a_ids = [r["id"] for r in a_rows]
        ok = sorted(after) == sorted(a_ids) and sorted(a_ids + b_ids) == ids
        sweep = "" if swept is None else f", sweep lowered the hint: {swept}"
        return report(db.layout.name, "aborted", ok,
                      f"A locked {a_ids} and rolled back, B claimed {b_ids}; "
                      f"claimed afterwards: {sorted(after)}{sweep}")
    finally:
        for c in (ctl, a, b, holder):
            await c.close()


class Stress:
    """Producers and claimers at once. Returns whether every committed job was
    claimed exactly once (by a claim that committed)."""

    def __init__(self, db: Db, seconds: float, producers: int, claimers: int, seed: int):
        self.db = db
        self.seconds = seconds
        self.n_producers = producers
        self.n_claimers = claimers
        self.rng = random.Random(seed)
        self.committed: dict[int, float] = {}   # job id -> commit time
        self.claimed: dict[int, list[float]] = {}
        self.producing = True
        self.aborted_claims = 0
        self.sweep_finds = 0

    async def producer(self) -> None:
        conn = await self.db.connect()
        try:
            while self.producing:
                style = self.rng.random()
                n = self.rng.randint(1, 5)
                if style < 0.5:
                    ids = await insert(conn, n)
                else:
                    await conn.execute("BEGIN")
                    if style < 0.75:  # read first: no xid until the insert
                        await conn.fetchval("SELECT count(*) FROM awa.lanes")
                        await asyncio.sleep(self.rng.uniform(0, 0.005))
                    ids = await insert(conn, n)
                    await asyncio.sleep(self.rng.uniform(0, 0.005))
                    await conn.execute("COMMIT")
                now = time.monotonic()
                for i in ids:
                    self.committed[i] = now
                await asyncio.sleep(self.rng.uniform(0, 0.002))
        finally:
            await conn.close()

    async def claimer(self, worker: int) -> None:
        conn = await self.db.connect()
        try:
            while self.producing or self.pending():
                if self.rng.random() < 0.02:
                    await conn.execute("BEGIN")
                    await conn.fetch(CLAIM_SQL, ex.QUEUE, 10, worker)
                    await asyncio.sleep(self.rng.uniform(0, 0.003))
                    await conn.execute("ROLLBACK")
                    self.aborted_claims += 1
                    continue
                rows = await conn.fetch(CLAIM_SQL, ex.QUEUE, 10, worker)
                now = time.monotonic()
                for r in rows:
                    self.claimed.setdefault(r["id"], []).append(now)
                if rows:
                    await self.db.complete(conn, rows)
                else:
                    await asyncio.sleep(0.005)
        finally:
            await conn.close()

    async def sweeper(self) -> None:
        conn = await self.db.connect()
        try:
            while self.producing or self.pending():
                if await conn.fetchval(SWEEP_SQL, ex.QUEUE):
                    self.sweep_finds += 1
                await asyncio.sleep(0.5)
        finally:
            await conn.close()

    def pending(self) -> bool:
        return len(self.claimed) < len(self.committed) and time.monotonic() < self.deadline

    async def run(self) -> bool:
        self.deadline = time.monotonic() + self.seconds + 10
        tasks = [asyncio.create_task(self.producer()) for _ in range(self.n_producers)]
        tasks += [asyncio.create_task(self.claimer(w + 1)) for w in range(self.n_claimers)]
        if self.db.sweeps:
            tasks.append(asyncio.create_task(self.sweeper()))
        await asyncio.sleep(self.seconds)
        self.producing = False
        await asyncio.gather(*tasks)
        never = sorted(set(self.committed) - set(self.claimed))
        twice = [i for i, ts in self.claimed.items() if len(ts) > 1]
        lags = sorted(1000 * (ts[0] - self.committed[i]) for i, ts in self.claimed.items()
                      if i in self.committed)
        q = statistics.quantiles(lags, n=100) if len(lags) > 100 else [float("nan")] * 99
        detail = (f"{len(self.committed)} jobs committed, {len(self.claimed)} claimed, "
                  f"{len(never)} never claimed, {len(twice)} claimed twice; "
                  f"{self.aborted_claims} claims rolled back, sweep found {self.sweep_finds}; "
                  f"commit->claim p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, max {lags[-1]:.0f} ms")
        return report(self.db.layout.name, "stress", not never and not twice, detail)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--layouts", default="FX,FY")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--claimers", type=int, default=6)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    results = []
    for name in [s.strip().upper() for s in args.layouts.split(",")]:
        for check in (check_read_first, check_write_first, check_aborted_claim):
            async with Db(args.url, name) as db:
                results.append(await check(db))
        async with Db(args.url, name) as db:
            results.append(await Stress(db, args.seconds, args.producers, args.claimers,
                                        args.seed).run())
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    asyncio.run(main())
