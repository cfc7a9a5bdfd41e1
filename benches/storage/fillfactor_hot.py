"""How many claims and outcomes stay HOT at a given fillfactor of awa.jobs,
with and without a long transaction holding back the horizon.

For each fillfactor (``--fillfactors``, default 30,50,70) and each case (no
long transaction; a ``REPEATABLE READ`` transaction that has taken a
snapshot and an id, held through the drain): 20 000 jobs are COPYed, then
one connection claims 25 at a time and another writes their outcomes; the
updates and HOT updates of ``awa.jobs`` (``pg_stat_user_tables``) and the
table's pages are printed. Restores fillfactor 30 at the end.

    python benches/storage/fillfactor_hot.py --url postgresql://.../a_migrated_db
"""

from __future__ import annotations

import argparse
import asyncio

import asyncpg

import awa
from awa import sql
from claim_cost import finish_args  # benches/storage/claim_cost.py

Q = sql.query


async def counters(connection: asyncpg.Connection) -> asyncpg.Record:
    await connection.execute("SELECT pg_stat_force_next_flush()")
    await connection.execute("SELECT 1")
    await connection.execute("SELECT pg_stat_clear_snapshot()")
    return await connection.fetchrow(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE relid = 'awa.jobs'::regclass"
    )


async def drain(url: str, fillfactor: int, pinned: bool, jobs: int) -> str:
    claimer, writer = await asyncpg.connect(url), await asyncpg.connect(url)
    pin = None
    try:
        await claimer.execute(
            "TRUNCATE awa.jobs, awa.workers, awa.lanes, awa.lane_moves, awa.lane_lowerings, "
            "awa.claims"
        )
        await claimer.execute(f"ALTER TABLE awa.jobs SET (fillfactor = {int(fillfactor)})")
        if pinned:
            pin = await asyncpg.connect(url)
            await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await pin.fetchval("SELECT txid_current()")
        async with awa.AsyncClient(url) as client:
            client.task(dict, kind="k", queue="q")(lambda job: None)
            await client.enqueue_many_copy([{"i": i} for i in range(jobs)], kind="k", queue="q")
        await claimer.fetchval(Q("lanes_open"), ["q"])
        before = await counters(claimer)
        claim = await claimer.prepare(Q("jobs_claim"))
        finish = await writer.prepare(Q("jobs_finish_batch"))
        while rows := await claim.fetch(["q"], [25], 1, [], [], [None]):
            await finish.fetch(*finish_args(Q("jobs_finish_batch"), rows))
        after = await counters(claimer)
        updates = after["n_tup_upd"] - before["n_tup_upd"]
        hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
        pages = await claimer.fetchval("SELECT pg_relation_size('awa.jobs') / 8192")
        return (
            f"fillfactor {fillfactor}, {'held snapshot' if pinned else 'no long transaction'}: "
            f"{hot / max(updates, 1):.0%} HOT, {(updates - hot) / jobs:.3f} non-HOT updates "
            f"per job, {pages} pages"
        )
    finally:
        if pin is not None:
            await pin.execute("ROLLBACK")
            await pin.close()
        await claimer.execute("ALTER TABLE awa.jobs SET (fillfactor = 30)")
        await claimer.close()
        await writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a database migrated by this tree")
    parser.add_argument("--fillfactors", default="30,50,70")
    parser.add_argument("--jobs", type=int, default=20_000)
    opts = parser.parse_args()
    for fillfactor in (int(f) for f in opts.fillfactors.split(",")):
        for pinned in (False, True):
            print(await drain(opts.url, fillfactor, pinned, opts.jobs), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
