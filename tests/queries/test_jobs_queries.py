"""Each named job query on a real PostgreSQL, guards included."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from awa import _core, sql
from awa.worker.notifier import CHANNEL
from tests.support import finish_params
from tests.unit.core_rows import add

Q = sql.query


async def insert_available(
    conn: asyncpg.Connection,
    count: int,
    *,
    queue: str = "q",
    priority: int = 2,
    run_at_offset_s: float = 0.0,
) -> list[int]:
    return [
        row["id"]
        for row in await conn.fetch(
            """INSERT INTO awa.jobs (kind, queue, priority, run_at, state)
               SELECT 'k', $1, $2, now() + $3 * interval '1 second', 'available'
               FROM generate_series(1, $4) RETURNING id""",
            queue,
            priority,
            run_at_offset_s,
            count,
        )
    ]


async def register_worker(conn: asyncpg.Connection) -> int:
    return await conn.fetchval(Q("workers_register"), "host", 1, ["q"])


async def claim(conn, queues, counts, worker_id, kind_timeouts=None, queue_timeouts=None):
    kind_timeouts = kind_timeouts or {}
    return await conn.fetch(
        Q("jobs_claim"),
        queues,
        counts,
        worker_id,
        list(kind_timeouts),
        list(kind_timeouts.values()),
        queue_timeouts or [None] * len(queues),
    )


async def finish(conn, ids, leases, states, delays=None, refunds=None, errors=None):
    """The rows the batch applied."""
    return await conn.fetchval(
        Q("jobs_finish_batch"), *finish_params(ids, leases, states, delays, refunds, errors)
    )


async def test_claim_takes_most_urgent_first_then_oldest_then_lowest_id(conn):
    worker = await register_worker(conn)
    low = await insert_available(conn, 1, priority=4)
    normal = await insert_available(conn, 2, priority=2)
    old_normal = await insert_available(conn, 1, priority=2, run_at_offset_s=-60)
    urgent = await insert_available(conn, 1, priority=1)
    order = [(await claim(conn, ["q"], [1], worker))[0]["id"] for _ in range(5)]
    assert order == urgent + old_normal + normal + low


async def test_claim_starts_an_attempt_and_bumps_the_lease(conn):
    worker = await register_worker(conn)
    [job_id] = await insert_available(conn, 1)
    [row] = await claim(conn, ["q"], [5], worker)
    assert row["state"] == "running"
    assert row["attempt"] == 1
    # Above any lease handed out before the server started (awa.run_lease_floor).
    assert row["run_lease"] == await conn.fetchval("SELECT awa.run_lease_floor()") + 1
    stored = await conn.fetchrow(
        "SELECT worker_id, attempted_at FROM awa.jobs WHERE id = $1", job_id
    )
    assert stored["worker_id"] == worker
    assert stored["attempted_at"] is not None


async def test_claim_respects_per_queue_counts_and_ignores_other_queues(conn):
    worker = await register_worker(conn)
    await insert_available(conn, 5, queue="a")
    await insert_available(conn, 5, queue="b")
    await insert_available(conn, 5, queue="c")
    rows = await claim(conn, ["a", "b"], [2, 3], worker)
    by_queue: dict[str, int] = {}
    for row in rows:
        by_queue[row["queue"]] = by_queue.get(row["queue"], 0) + 1
    assert by_queue == {"a": 2, "b": 3}


async def test_concurrent_claims_never_take_the_same_job(conn, database_url):
    worker = await register_worker(conn)
    await insert_available(conn, 200)
    others = [await asyncpg.connect(database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(claim(other, ["q"], [60], worker) for other in others))
    finally:
        for other in others:
            await other.close()
    ids = [row["id"] for rows in results for row in rows]
    assert len(ids) == len(set(ids)) == 200


async def test_claim_skips_jobs_that_are_not_available(conn):
    worker = await register_worker(conn)
    await conn.execute(
        """INSERT INTO awa.jobs (kind, queue, state) VALUES
           ('k', 'q', 'scheduled'), ('k', 'q', 'retryable'), ('k', 'q', 'completed'),
           ('k', 'q', 'running')"""
    )
    assert await claim(conn, ["q"], [10], worker) == []


async def test_finish_batch_applies_each_outcome(conn):
    worker = await register_worker(conn)
    await insert_available(conn, 4)
    rows = sorted(await claim(conn, ["q"], [4], worker), key=lambda r: r["id"])
    ids = [row["id"] for row in rows]
    leases = [row["run_lease"] for row in rows]
    status = await finish(
        conn,
        ids,
        leases,
        ["completed", "retryable", "scheduled", "failed"],
        delays=[None, 30.0, 5.0, None],
        refunds=[0, 0, 1, 0],
        errors=[
            None,
            '{"type": "E", "message": "m", "attempt": 1}',
            None,
            '{"type": "T", "message": "t", "attempt": 1}',
        ],
    )
    assert status == 4
    stored = {
        row["id"]: row
        for row in await conn.fetch(
            """SELECT id, state::text, attempt, finalized_at, worker_id, errors,
                      extract(epoch FROM run_at - now()) AS due_in
               FROM awa.jobs"""
        )
    }
    done, retry, snoozed, failed = (stored[i] for i in ids)
    assert done["state"] == "completed" and done["finalized_at"] is not None
    assert done["worker_id"] is None and done["errors"] is None
    assert retry["state"] == "retryable" and 25 < retry["due_in"] <= 30
    assert retry["finalized_at"] is None and '"at"' in retry["errors"]
    assert snoozed["state"] == "scheduled" and snoozed["attempt"] == 0
    assert failed["state"] == "failed" and failed["finalized_at"] is not None


async def test_the_outcome_columns_reach_the_server_exactly_as_the_core_holds_them(conn):
    """jobs_finish_batch takes each column as an array literal the core
    writes (Flush.array_literals); the server must read back every value of
    Flush.params(), whatever an error message holds."""
    batch = _core.CompletionBatch(100, 0.5, 7)
    awkward = "say \"hi\", {braces} \\ back\\slash\nNULL \u00e9\u4e2d \U0001f600 'quote'"
    batch.record(1, 11, 1, 25, 0, "completed", 0.0)
    batch.record(2, 12, 1, 25, 0, "failed", 0.0, None, "ValueError", awkward, 'line 1\n  "x"')
    batch.record(3, 13, 1, 25, 0, "snooze", 0.0, 0.125)
    batch.record(4, 14, 1, 1, 0, "cancelled", 0.0, None, "", "NULL")
    batch.record(5, 15, 2, 3, 0, "retry_after", 0.0, 1e-7)
    flush = batch.take()
    read = await conn.fetch(
        """SELECT * FROM unnest($1::text::bigint[], $2::text::bigint[], $3::text::text[],
                                $4::text::float8[], $5::text::integer[], $6::text::jsonb[])""",
        *flush.array_literals(),
    )
    ids, leases, states, delays, refunds, errors = flush.params()
    assert [tuple(row)[:5] for row in read] == list(
        zip(ids, leases, states, delays, refunds, strict=True)
    )
    assert [None if row[5] is None else json.loads(row[5]) for row in read] == [
        None if error is None else json.loads(error) for error in errors
    ]
    assert json.loads(read[1][5])["message"] == awkward


async def test_finish_batch_ignores_outcomes_of_stale_attempts(conn):
    worker = await register_worker(conn)
    [job_id] = await insert_available(conn, 1)
    [first] = await claim(conn, ["q"], [1], worker)
    # The attempt is rescued and claimed again: lease 2 owns the job now.
    await conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = $1", job_id)
    [second] = await claim(conn, ["q"], [1], worker)
    assert second["run_lease"] == first["run_lease"] + 1
    assert await finish(conn, [job_id], [first["run_lease"]], ["completed"]) == 0
    assert (
        await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job_id) == "running"
    )
    assert await finish(conn, [job_id], [second["run_lease"]], ["completed"]) == 1


async def test_finish_batch_ignores_jobs_no_longer_running(conn):
    worker = await register_worker(conn)
    [job_id] = await insert_available(conn, 1)
    [row] = await claim(conn, ["q"], [1], worker)
    await conn.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = $1", job_id)
    assert await finish(conn, [job_id], [row["run_lease"]], ["completed"]) == 0


async def test_release_returns_running_jobs_without_counting_the_attempt(conn):
    worker = await register_worker(conn)
    await insert_available(conn, 2)
    rows = await claim(conn, ["q"], [2], worker)
    ids = [row["id"] for row in rows]
    leases = [row["run_lease"] for row in rows]
    stale = [lease - 1 for lease in leases]
    result = await conn.fetchrow(Q("jobs_release"), ids[:1] + ids[1:], stale[:1] + leases[1:])
    assert result["released"] == 1
    rows = {
        r["id"]: r
        for r in await conn.fetch("SELECT id, state::text, attempt, worker_id FROM awa.jobs")
    }
    assert rows[ids[0]]["state"] == "running"
    assert rows[ids[1]]["state"] == "available"
    assert rows[ids[1]]["attempt"] == 0
    assert rows[ids[1]]["worker_id"] is None


async def test_promote_due_makes_due_jobs_available_and_notifies(conn, database_url):
    await conn.execute(
        """INSERT INTO awa.jobs (kind, queue, state, run_at) VALUES
           ('k', 'due', 'scheduled', now() - interval '1 second'),
           ('k', 'due', 'retryable', now() - interval '1 second'),
           ('k', 'later', 'scheduled', now() + interval '1 hour')"""
    )
    listener = await asyncpg.connect(database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        row = await conn.fetchrow(Q("jobs_promote_due"), 100)
        assert row["promoted"] == 2
        assert await asyncio.wait_for(heard.get(), 5) == "due"
    finally:
        await listener.close()
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE state = 'available' AND queue = 'due'"
        )
        == 2
    )
    seconds = await conn.fetchval(Q("jobs_next_due"))
    assert 3500 < seconds <= 3600


async def test_promote_due_is_bounded(conn):
    await conn.execute(
        """INSERT INTO awa.jobs (kind, state, run_at)
           SELECT 'k', 'scheduled', now() - interval '1 second' FROM generate_series(1, 5)"""
    )
    assert (await conn.fetchrow(Q("jobs_promote_due"), 3))["promoted"] == 3
    assert (await conn.fetchrow(Q("jobs_promote_due"), 3))["promoted"] == 2


async def test_next_due_is_null_without_scheduled_jobs(conn):
    assert await conn.fetchval(Q("jobs_next_due")) is None


async def test_orphaned_finds_running_jobs_of_silent_or_missing_workers(conn):
    alive = await register_worker(conn)
    silent = await register_worker(conn)
    await conn.execute(
        "UPDATE awa.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", silent
    )
    await insert_available(conn, 3)
    [a] = await claim(conn, ["q"], [1], alive)
    [s] = await claim(conn, ["q"], [1], silent)
    [gone] = await claim(conn, ["q"], [1], 999_999)
    orphans = await conn.fetch(Q("jobs_orphaned"), 60.0, 100)
    assert sorted(row["id"] for row in orphans) == sorted([s["id"], gone["id"]])
    assert a["id"] not in {row["id"] for row in orphans}


async def test_orphaned_leaves_attempts_past_their_deadline_to_the_deadline_step(conn):
    # A pass expires attempts first, then looks for orphans: an attempt that
    # went past its deadline between the two must not be rescued as a crash.
    await insert_available(conn, 2)
    [timed_out] = await claim(conn, ["q"], [1], 999_999)
    [crashed] = await claim(conn, ["q"], [1], 999_999)
    await conn.execute(
        "UPDATE awa.jobs SET attempt_deadline_at = now() - interval '2 minutes' WHERE id = $1",
        timed_out["id"],
    )
    orphans = await conn.fetch(Q("jobs_orphaned"), 60.0, 100)
    assert [row["id"] for row in orphans] == [crashed["id"]]
    expired = await conn.fetch(Q("jobs_attempts_expired"), 60.0, 100)
    assert [row["id"] for row in expired] == [timed_out["id"]]


async def test_rescue_counts_a_crash_and_is_guarded(conn):
    worker = await register_worker(conn)
    await insert_available(conn, 2)
    rows = sorted(await claim(conn, ["q"], [2], worker), key=lambda r: r["id"])
    ids = [row["id"] for row in rows]
    leases = [rows[0]["run_lease"], rows[1]["run_lease"] - 1]  # second is stale
    rescued = await conn.fetch(
        Q("jobs_rescue"),
        ids,
        leases,
        ["retryable", "retryable"],
        [0.0, 0.0],
        ['{"type": "WorkerCrash", "message": "m", "attempt": 1}'] * 2,
        "crash",
    )
    assert [row["id"] for row in rescued] == [ids[0]]
    first = await conn.fetchrow(
        "SELECT state::text, crashes, errors, worker_id FROM awa.jobs WHERE id = $1", ids[0]
    )
    assert first["state"] == "retryable"
    assert first["crashes"] == 1
    assert first["worker_id"] is None
    assert "WorkerCrash" in first["errors"]


async def test_stale_workers_are_deleted_only_once_they_hold_nothing(conn):
    silent = await register_worker(conn)
    await conn.execute(
        "UPDATE awa.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", silent
    )
    await insert_available(conn, 1)
    [row] = await claim(conn, ["q"], [1], silent)
    await conn.execute(Q("workers_delete_stale"), 60.0)
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 1
    await finish(conn, [row["id"]], [row["run_lease"]], ["completed"])
    await conn.execute(Q("workers_delete_stale"), 60.0)
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_heartbeat_and_reregister(conn):
    worker = await register_worker(conn)
    assert await conn.fetchval(Q("workers_heartbeat"), worker) == worker
    await conn.execute(Q("workers_deregister"), worker)
    assert await conn.fetchval(Q("workers_heartbeat"), worker) is None
    await conn.execute(Q("workers_reregister"), worker, "host", 1, ["q"])
    assert await conn.fetchval(Q("workers_heartbeat"), worker) == worker


async def test_a_role_has_one_holder_whose_renewals_keep_their_term(conn):
    first, second = await register_worker(conn), await register_worker(conn)
    term = await conn.fetchval(Q("leaders_claim"), "r", first, 60.0)
    assert term == 1
    assert await conn.fetchval(Q("leaders_claim"), "r", second, 60.0) is None
    assert await conn.fetchval(Q("leaders_claim"), "r", first, 60.0) == term, "a renewal"
    held = await conn.fetchrow(Q("leaders_current"), "r")
    assert (held["worker_id"], held["term"], held["live"]) == (first, 1, True)


async def test_a_lapsed_lease_changes_hands_and_the_former_holder_cannot_renew(conn):
    first, second = await register_worker(conn), await register_worker(conn)
    await conn.fetchval(Q("leaders_claim"), "r", first, 60.0)
    await conn.execute("UPDATE awa.leaders SET expires_at = now() - interval '1 second'")
    assert await conn.fetchval(Q("leaders_claim"), "r", second, 60.0) == 2
    assert await conn.fetchval(Q("leaders_claim"), "r", first, 60.0) is None
    # A holder whose own lease lapsed, with nobody taking over, starts a new term.
    await conn.execute("UPDATE awa.leaders SET expires_at = now() - interval '1 second'")
    assert await conn.fetchval(Q("leaders_claim"), "r", second, 60.0) == 3


async def test_resigning_frees_the_role_at_once_but_only_for_its_own_term(conn):
    first, second = await register_worker(conn), await register_worker(conn)
    term = await conn.fetchval(Q("leaders_claim"), "r", first, 60.0)
    assert await conn.execute(Q("leaders_resign"), "r", first, term + 1) == "DELETE 0"
    assert await conn.execute(Q("leaders_resign"), "r", first, term) == "DELETE 1"
    assert await conn.fetchval(Q("leaders_claim"), "r", second, 60.0) is not None


async def test_running_on_worker_lists_only_that_workers_running_jobs(conn):
    mine, other = await register_worker(conn), await register_worker(conn)
    await insert_available(conn, 3)
    claimed = await claim(conn, ["q"], [2], mine)
    await claim(conn, ["q"], [1], other)
    rows = await conn.fetch(Q("jobs_running_on_worker"), mine)
    assert sorted((row["id"], row["run_lease"]) for row in rows) == sorted(
        (row["id"], row["run_lease"]) for row in claimed
    )


def test_observed_finish_applies_exactly_the_same_update_as_the_plain_one():
    def update_of(name: str) -> str:
        text = sql.query(name)
        body = text[text.index("UPDATE awa.jobs AS jobs") :]
        return body.split("RETURNING")[0].strip().rstrip(";").strip()

    assert update_of("jobs_finish_batch_observed") == update_of("jobs_finish_batch")


async def test_insert_follow_ups_reports_which_rows_it_wrote(conn):
    rows = _core.InsertRows(4)
    unique = (True, False, None, 63)
    add(rows, {}, "a", "q", 2, 25, None, None, None, None)
    add(rows, {}, "b", "q", 2, 25, None, None, None, None, unique=unique)
    add(rows, {}, "b", "q", 2, 25, None, None, None, None, unique=unique)
    add(rows, {"x": [1]}, "c", "q", 3, 7, 2, 0, ["t1", "t2"], {"m": True})
    parents = [11, 12, 13, 14]
    inserted = await conn.fetchval(sql.query("jobs_insert_follow_ups"), rows.json_rows(), parents)
    # The second keyed row duplicates the first and is skipped.
    assert rows.written(inserted) == [0, 1, 3]
    written = await conn.fetch("SELECT kind, parent_id FROM awa.jobs ORDER BY id")
    assert [(row["kind"], row["parent_id"]) for row in written] == [("a", 11), ("b", 12), ("c", 14)]
    again = await conn.fetchval(sql.query("jobs_insert_follow_ups"), rows.json_rows(), parents)
    assert again is None and rows.written(again) == [0, 3]
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 5
    row = await conn.fetchrow("SELECT * FROM awa.jobs WHERE kind = 'c' ORDER BY id LIMIT 1")
    assert (row["priority"], row["max_attempts"], row["max_crashes"]) == (3, 7, 2)
    assert row["tags"] == ["t1", "t2"]
    assert row["metadata"] == '{"m": true}' and row["args"] == '{"x": [1]}'
    assert row["run_at"].timestamp() == 0 and row["state"] == "available"
    plain = await conn.fetchrow("SELECT * FROM awa.jobs WHERE kind = 'a' ORDER BY id LIMIT 1")
    assert plain["tags"] is None and plain["metadata"] is None and plain["unique_key"] is None


async def test_claim_sets_the_deadline_from_the_kind_else_the_queue_timeout(conn):
    worker = await register_worker(conn)
    for kind in ("timed", "plain"):
        await conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args, state) VALUES ($1, 'q', '{}', 'available')",
            kind,
        )
    rows = await claim(
        conn, ["q"], [2], worker, kind_timeouts={"timed": 5.0}, queue_timeouts=[60.0]
    )
    budgets = {
        row["kind"]: (row["attempt_deadline_at"] - row["attempted_at"]).total_seconds()
        for row in rows
    }
    assert budgets == {"timed": 5.0, "plain": 60.0}
    await conn.execute("UPDATE awa.jobs SET state = 'available'")
    again = await claim(conn, ["q"], [2], worker)
    assert [row["attempt_deadline_at"] for row in again] == [None, None]


async def test_insert_follow_ups_keeps_each_rows_timeout_and_deadline(conn):
    rows = _core.InsertRows(1)
    add(rows, {}, "t", "q", 2, 25, None, None, None, None, timeout_ms=750, deadline_us=10**15)
    await conn.fetchval(sql.query("jobs_insert_follow_ups"), rows.json_rows(), [1])
    row = await conn.fetchrow("SELECT timeout_ms, deadline_at FROM awa.jobs WHERE kind = 't'")
    assert row["timeout_ms"] == 750
    assert row["deadline_at"].timestamp() == 10**9


async def test_deadline_rescues_count_no_crash_and_need_the_deadline_passed(conn):
    worker = await register_worker(conn)
    await insert_available(conn, 2)
    rows = sorted(await claim(conn, ["q"], [2], worker), key=lambda r: r["id"])
    ids = [row["id"] for row in rows]
    await conn.execute(
        "UPDATE awa.jobs SET attempt_deadline_at = now() - interval '1 second' WHERE id = $1",
        ids[0],
    )  # the second has no deadline: nothing to rescue it for
    rescued = await conn.fetch(
        Q("jobs_rescue"),
        ids,
        [row["run_lease"] for row in rows],
        ["retryable", "retryable"],
        [0.0, 0.0],
        ['{"type": "AttemptTimeout", "message": "m", "attempt": 1}'] * 2,
        "attempt_deadline",
    )
    assert [row["id"] for row in rescued] == [ids[0]]
    first = await conn.fetchrow("SELECT crashes, state::text FROM awa.jobs WHERE id = $1", ids[0])
    assert (first["crashes"], first["state"]) == (0, "retryable")


async def dead_letter(conn, key: bytes | None, states: int | None = 0b111111) -> int:
    return await conn.fetchval(
        "INSERT INTO awa.jobs (kind, state, finalized_at, failure_reason, unique_key, "
        "unique_states) VALUES ('k', 'failed', now(), 'terminal_error', $1, $2) RETURNING id",
        key,
        None if key is None else states,
    )


async def redrive(conn, limit: int = 1000, after: int = 0):
    return await conn.fetchrow(Q("jobs_redrive"), None, None, None, None, limit, after)


async def test_redrive_leaves_dead_letters_whose_key_is_held_and_reports_the_holder(conn):
    held = await dead_letter(conn, b"a")
    holder = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, unique_key, unique_states) VALUES ('k', 'a', 63) RETURNING id"
    )
    first, second = await dead_letter(conn, b"b"), await dead_letter(conn, b"b")
    plain = await dead_letter(conn, None)
    # `failed` in its states: it holds its key now and keeps holding it.
    holds = await dead_letter(conn, b"c", states=0b1011111)
    row = await redrive(conn)
    assert row["ids"] == [first, plain, holds]
    assert list(zip(row["conflicted_ids"], row["holder_ids"], strict=True)) == [
        (held, holder),
        (second, first),  # the oldest of a batch that needs one free key takes it
    ]
    assert (row["examined"], row["last_id"]) == (5, holds)
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", held) == "failed"


async def test_redrive_continues_after_the_last_id_it_examined(conn):
    letters = [await dead_letter(conn, None) for _ in range(3)]
    row = await redrive(conn, limit=2)
    assert (row["ids"], row["examined"], row["last_id"]) == (letters[:2], 2, letters[1])
    row = await redrive(conn, limit=2, after=letters[1])
    assert (row["ids"], row["examined"], row["last_id"]) == (letters[2:], 1, letters[2])
    row = await redrive(conn, limit=2, after=letters[2])
    assert (row["ids"], row["examined"], row["last_id"]) == ([], 0, None)


async def test_a_claimer_session_plans_once_and_never_compiles(database_url):
    """A generic claim plan cannot see how many rows a claim wants, so on a
    large table its cost passes jit_above_cost; with JIT on, every claim of
    a 3 M-job backlog compiled for ~60 ms (1 200 jobs/s instead of 12 000)."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(Q("jobs_claim_prepare_session"))
        assert await connection.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
        assert await connection.fetchval("SHOW jit") == "off"
    finally:
        await connection.close()


async def plan_after_growth(database_url: str, prepare: str | None, query: str, args: str) -> str:
    """The plan a session's cached statement uses once the table it was first
    planned on (empty) holds 20 000 rows that no ANALYZE has seen yet."""
    connection = await asyncpg.connect(database_url)
    try:
        if prepare is not None:
            await connection.execute(Q(prepare))
        await connection.execute(f"PREPARE hot AS {Q(query)}")
        for _ in range(8):  # past the custom plans: the cached plan is the one in use
            await connection.execute(f"EXECUTE hot({args})")
        await connection.execute(
            "INSERT INTO awa.jobs (kind, queue, args, state) "
            "SELECT 'k', 'q', '{}', 'running' FROM generate_series(1, 20000)"
        )
        rows = await connection.fetch(f"EXPLAIN (COSTS OFF) EXECUTE hot({args})")
        return "\n".join(row[0] for row in rows)
    finally:
        await connection.close()


async def test_a_claim_planned_on_an_empty_table_still_reads_jobs_by_index(database_url, conn):
    # A worker started on an empty queue planned its claim once, for an empty
    # table: the claimed rows were then found by scanning the whole table,
    # 40 ms a claim at 200 000 rows, until an ANALYZE replanned it.
    plan = await plan_after_growth(
        database_url, "jobs_claim_prepare_session", "jobs_claim",
        "'{q}', '{50}', 1, '{}', '{}', '{NULL}'",
    )  # fmt: skip
    assert "Seq Scan on jobs" not in plan, plan


async def test_an_outcome_write_planned_on_an_empty_table_still_reads_jobs_by_index(
    database_url, conn
):
    # The same for the completer's batch: 2.1 s a flush at 200 000 rows.
    plan = await plan_after_growth(
        database_url, "jobs_write_prepare_session", "jobs_finish_batch",
        "'{1}', '{1}', '{completed}', '{NULL}', '{0}', '{NULL}', NULL, NULL",
    )  # fmt: skip
    assert "Seq Scan on jobs" not in plan, plan
