"""Indexes on awa.jobs and the columns claims and outcomes write (migrations
0012 and 0014): an update is HOT only if it changes no column some index
reads, in its key or its predicate."""

from __future__ import annotations

import datetime

from awa import sql
from tests.support import finish_params, table_counters

Q = sql.query

# What a claim and a plain outcome write (see jobs_claim, jobs_finish_batch).
HOT_PATH_COLUMNS = {
    "state", "attempt", "run_lease", "attempted_at", "worker_id",
    "attempt_deadline_at", "finalized_at",
}  # fmt: skip

INDEX_COLUMNS_SQL = """
SELECT c.relname AS index, a.attname AS column
FROM pg_depend d
JOIN pg_class c ON c.oid = d.objid AND c.relkind = 'i'
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.classid = 'pg_class'::regclass AND d.refobjid = 'awa.jobs'::regclass
  AND d.refobjsubid > 0"""


async def test_no_index_reads_a_column_the_hot_path_writes(conn):
    read: dict[str, set[str]] = {}
    for row in await conn.fetch(INDEX_COLUMNS_SQL):
        read.setdefault(row["index"], set()).add(row["column"])
    # The query sees key and predicate columns alike.
    assert read["jobs_unique_key_idx"] == {"unique_key"}
    assert read["jobs_dead_letter_idx"] == {"id", "failure_reason"}
    assert read["jobs_lane_idx"] == {"queue", "priority", "run_at", "id", "partition_key"}
    hot = {index: columns & HOT_PATH_COLUMNS for index, columns in read.items()}
    assert {index: columns for index, columns in hot.items() if columns} == {}


async def test_claims_and_outcomes_are_hot_updates(conn):
    await conn.execute(
        "INSERT INTO awa.jobs (kind, queue) SELECT 'k', 'q' FROM generate_series(1, 200)"
    )
    before = await table_counters(conn, "jobs")
    finished = 0
    while finished < 200:
        claimed = await conn.fetch(Q("jobs_claim"), ["q"], [50], 1, [], [], [None])
        assert claimed
        await conn.execute(
            Q("jobs_finish_batch"),
            *finish_params(
                [row["id"] for row in claimed],
                [row["run_lease"] for row in claimed],
                ["completed"] * len(claimed),
            ),
        )
        finished += len(claimed)
    after = await table_counters(conn, "jobs")
    assert after["n_tup_upd"] - before["n_tup_upd"] == 400  # a claim and an outcome per job
    assert after["n_tup_hot_upd"] - before["n_tup_hot_upd"] == 400


async def test_a_job_failed_by_other_sql_gets_the_reason_its_failure_implies(conn):
    """The dead-letter index finds failed jobs by failure_reason."""
    insert = "INSERT INTO awa.jobs (kind, attempt, max_attempts) VALUES ('k', $1, 3) RETURNING id"
    used_up = await conn.fetchval(insert, 3)
    stopped = await conn.fetchval(insert, 1)
    await conn.execute(
        "UPDATE awa.jobs SET state = 'failed' WHERE id = ANY ($1)", [used_up, stopped]
    )
    inserted = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, state) VALUES ('k', 'failed') RETURNING id"
    )
    kept = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, state, failure_reason) VALUES ('k', 'failed', 'crash_loop') "
        "RETURNING id"
    )
    reasons = dict(await conn.fetch("SELECT id, failure_reason FROM awa.jobs"))
    assert reasons == {
        used_up: "max_attempts_exhausted",
        stopped: "terminal_error",
        inserted: "terminal_error",
        kept: "crash_loop",
    }
    letters = await conn.fetch(Q("jobs_dead_letters"), None, None, None, None, 10, False)
    assert sorted(row["id"] for row in letters) == sorted(reasons)


async def insert_with_deadline(conn, seconds_from_now: float, state: str = "available") -> int:
    failure = "'deadline_exceeded'" if state == "failed" else "NULL"
    return await conn.fetchval(
        "INSERT INTO awa.jobs (kind, state, deadline_at, failure_reason) "
        f"VALUES ('k', $1, now() + $2 * interval '1 second', {failure}) RETURNING id",
        state,
        seconds_from_now,
    )


async def test_the_deadline_floor_passes_finished_jobs_and_stops_at_unfinished_ones(conn):
    earliest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    await insert_with_deadline(conn, -60, "completed")
    running = await insert_with_deadline(conn, -30, "running")
    await insert_with_deadline(conn, -10, "failed")
    assert await conn.fetchval(Q("jobs_deadline_floor"), earliest) == await conn.fetchval(
        "SELECT deadline_at FROM awa.jobs WHERE id = $1", running
    )
    await conn.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = $1", running
    )
    floor = await conn.fetchval(Q("jobs_deadline_floor"), earliest)
    # All finished: the floor is the statement's now, past every deadline.
    assert await conn.fetchval("SELECT max(deadline_at) FROM awa.jobs") < floor
    assert floor <= await conn.fetchval("SELECT now()")


async def test_the_deadline_pass_fails_only_jobs_at_or_after_its_floor(conn):
    below = await insert_with_deadline(conn, -60)
    above = await insert_with_deadline(conn, -5)
    floor = await conn.fetchval("SELECT now() - interval '30 seconds'")
    failed = await conn.fetch(Q("jobs_deadlines_passed"), 100, floor)
    assert [row["id"] for row in failed] == [above]
    earliest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    failed = await conn.fetch(Q("jobs_deadlines_passed"), 100, earliest)
    assert [row["id"] for row in failed] == [below]


async def prune(conn, first_page: int, pages: int, limit: int = 1000):
    """Completed and cancelled after 1 h, failed after 1 day ('noisy': at once)."""
    return await conn.fetchrow(
        Q("jobs_prune"), 3600.0, 3600.0, 86_400.0, limit, first_page, pages, ["noisy"], [0.0]
    )


async def finished(conn, count: int, state: str, age_s: float, queue: str = "q") -> list[int]:
    failure = "'terminal_error'" if state == "failed" else "NULL"
    return [
        row["id"]
        for row in await conn.fetch(
            "INSERT INTO awa.jobs (kind, queue, state, finalized_at, failure_reason) "
            f"SELECT 'k', $1, $2, now() - $3 * interval '1 second', {failure} "
            "FROM generate_series(1, $4) RETURNING id",
            queue,
            state,
            age_s,
            count,
        )
    ]


async def test_retention_walks_the_table_by_pages_and_deletes_by_state_and_queue(conn):
    old = await finished(conn, 300, "completed", 7200)
    kept = await finished(conn, 5, "completed", 60)
    kept += await finished(conn, 5, "failed", 7200)
    noisy = await finished(conn, 5, "failed", 60, queue="noisy")
    kept += [await conn.fetchval("INSERT INTO awa.jobs (kind) VALUES ('k') RETURNING id")]
    pages = await conn.fetchval("SELECT pg_relation_size('awa.jobs') / 8192")
    assert pages > 2
    first = await prune(conn, 0, 1)
    assert first["next_page"] == 1 and 0 < first["pruned"] < len(old)
    assert not first["wrapped"]
    walked, page, wrapped = first["pruned"], 1, False
    while not wrapped:
        step = await prune(conn, page, 1)
        walked, page, wrapped = walked + step["pruned"], step["next_page"], step["wrapped"]
    assert page == 0
    assert walked == len(old) + len(noisy)
    assert sorted(r["id"] for r in await conn.fetch("SELECT id FROM awa.jobs")) == sorted(kept)


async def test_retention_cut_short_by_its_limit_stays_on_the_same_pages(conn):
    await finished(conn, 10, "completed", 7200)
    step = await prune(conn, 0, 1000, limit=4)
    assert (step["pruned"], step["next_page"], step["wrapped"]) == (4, 0, False)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 6
    step = await prune(conn, 0, 1000)
    assert (step["pruned"], step["next_page"], step["wrapped"]) == (6, 0, True)


async def test_retention_reads_only_the_pages_it_is_given(conn):
    await finished(conn, 5000, "completed", 7200)
    await conn.execute("ANALYZE awa.jobs")
    plan = "\n".join(
        row[0]
        for row in await conn.fetch(
            "EXPLAIN " + Q("jobs_prune"), 3600.0, 3600.0, 86_400.0, 100, 0, 256, [], []
        )
    )
    # Those pages, then each row it deletes by its address.
    assert "Tid Range Scan on jobs" in plan and "Tid Scan on jobs" in plan
    assert "Seq Scan" not in plan
