"""Unique keys held in awa.job_unique_keys (migration 0011): the table names
exactly the jobs whose state is in their own ``unique_states``, on every path
that writes jobs (awa's statements, an operator's own SQL, COPY, TRUNCATE),
and under concurrent inserts of one key."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from awa import sql
from tests.queries.test_jobs_queries import claim, finish, register_worker
from tests.support import table_counters

Q = sql.query

#: scheduled | available | running | retryable | waiting_external.
WAITING_OR_RUNNING = 31
COMPLETED_BIT = 32


def job_input(key: bytes | None, *, states: int = WAITING_OR_RUNNING, kind: str = "k") -> dict:
    return {
        "kind": kind,
        "queue": "q",
        "args": {},
        "priority": 2,
        "max_attempts": 25,
        "unique_key": None if key is None else "\\x" + key.hex(),
        "unique_states": None if key is None else states,
    }


async def insert(conn: asyncpg.Connection, *jobs: dict) -> list[int]:
    return [row["id"] for row in await conn.fetch(Q("jobs_insert"), json.dumps(list(jobs)))]


async def held(conn: asyncpg.Connection) -> dict[bytes, int]:
    rows = await conn.fetch("SELECT unique_key, job_id FROM awa.job_unique_keys")
    return {bytes(row["unique_key"]): row["job_id"] for row in rows}


async def holders_by_state(conn: asyncpg.Connection) -> dict[bytes, int]:
    """What the table must hold: each job whose state is in its own set."""
    rows = await conn.fetch(
        "SELECT unique_key, id FROM awa.jobs WHERE unique_key IS NOT NULL "
        "AND (unique_states & awa.job_state_bit(state)) <> 0"
    )
    return {bytes(row["unique_key"]): row["id"] for row in rows}


async def assert_table_true_to_jobs(conn: asyncpg.Connection) -> dict[bytes, int]:
    keys = await held(conn)
    assert keys == await holders_by_state(conn)
    return keys


async def test_an_insert_takes_its_key_and_a_duplicate_is_skipped(conn):
    first, plain = await insert(conn, job_input(b"a"), job_input(None), job_input(b"a"))
    assert await assert_table_true_to_jobs(conn) == {b"a": first}
    assert await insert(conn, job_input(b"a")) == []
    assert await conn.fetchval(Q("jobs_unique_holder"), b"a") == first
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 2
    assert plain == first + 1  # ids follow the input; the skipped job's id is a gap


async def test_finishing_frees_the_key_unless_the_finished_state_holds_it(conn):
    worker = await register_worker(conn)
    freed, kept = await insert(
        conn, job_input(b"free"), job_input(b"kept", states=WAITING_OR_RUNNING | COMPLETED_BIT)
    )
    claimed = {row["id"]: row["run_lease"] for row in await claim(conn, ["q"], [10], worker)}
    assert await assert_table_true_to_jobs(conn) == {b"free": freed, b"kept": kept}
    await finish(conn, list(claimed), list(claimed.values()), ["completed", "completed"])
    assert await assert_table_true_to_jobs(conn) == {b"kept": kept}
    [again] = await insert(conn, job_input(b"free"))
    assert await insert(conn, job_input(b"kept")) == []
    assert await held(conn) == {b"free": again, b"kept": kept}


async def test_a_retry_keeps_the_key_and_a_failure_frees_it(conn):
    worker = await register_worker(conn)
    [job] = await insert(conn, job_input(b"r"))
    [row] = await claim(conn, ["q"], [1], worker)
    await finish(conn, [job], [row["run_lease"]], ["retryable"], delays=[0.0])
    assert await assert_table_true_to_jobs(conn) == {b"r": job}
    await conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = $1", job)
    [row] = await claim(conn, ["q"], [1], worker)
    await finish(conn, [job], [row["run_lease"]], ["failed"])
    assert await assert_table_true_to_jobs(conn) == {}


async def test_cancel_delete_and_truncate_free_keys(conn):
    cancelled, deleted, other = await insert(
        conn,
        job_input(b"c"),
        job_input(b"d", states=WAITING_OR_RUNNING | COMPLETED_BIT),
        job_input(b"t"),
    )
    await conn.fetch(Q("jobs_cancel"), [cancelled], "no longer wanted")
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", deleted)
    assert await assert_table_true_to_jobs(conn) == {b"d": deleted, b"t": other}
    await conn.execute("DELETE FROM awa.jobs WHERE id = $1", deleted)
    assert await assert_table_true_to_jobs(conn) == {b"t": other}
    await conn.execute("TRUNCATE awa.jobs")
    assert await held(conn) == {}


async def test_redrive_takes_the_key_back(conn):
    [job] = await insert(conn, job_input(b"dl"))
    await conn.execute(
        "UPDATE awa.jobs SET state = 'failed', failure_reason = 'terminal_error', "
        "finalized_at = now() WHERE id = $1",
        job,
    )
    assert await held(conn) == {}
    row = await conn.fetchrow(Q("jobs_redrive"), None, None, None, None, 10, 0)
    assert row["ids"] == [job]
    assert await assert_table_true_to_jobs(conn) == {b"dl": job}


async def test_sql_of_its_own_that_would_let_a_duplicate_in_fails_on_the_key_table(conn):
    [holder] = await insert(conn, job_input(b"own"))
    with pytest.raises(asyncpg.UniqueViolationError) as raised:
        await conn.execute(
            "INSERT INTO awa.jobs (kind, unique_key, unique_states) VALUES ('k', 'own', 31)"
        )
    assert raised.value.constraint_name == "job_unique_keys_pkey"
    # Two jobs in one statement: the second finds the key held by the first.
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(
            "INSERT INTO awa.jobs (kind, unique_key, unique_states) "
            "VALUES ('k', 'pair', 31), ('k', 'pair', 31)"
        )
    # Moving a job back into its states while another holds its key fails too.
    [done] = await insert(conn, job_input(b"back"))
    await conn.execute("UPDATE awa.jobs SET state = 'completed' WHERE id = $1", done)
    [taker] = await insert(conn, job_input(b"back"))
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = $1", done)
    assert await assert_table_true_to_jobs(conn) == {b"own": holder, b"back": taker}


async def key_table_writes(conn: asyncpg.Connection) -> tuple[int, int]:
    """Rows inserted into and deleted from awa.job_unique_keys so far."""
    counters = await table_counters(conn, "job_unique_keys")
    return counters["n_tup_ins"], counters["n_tup_del"]


async def test_jobs_without_a_key_write_nothing_to_the_key_table(conn):
    worker = await register_worker(conn)
    start = await key_table_writes(conn)
    await insert(conn, *(job_input(None) for _ in range(5)))
    claimed = await claim(conn, ["q"], [5], worker)
    ids, leases = [r["id"] for r in claimed], [r["run_lease"] for r in claimed]
    await finish(conn, ids, leases, ["completed"] * 5)
    assert len(ids) == 5
    assert await key_table_writes(conn) == start
    # The same life for one keyed job: one key taken, one freed.
    await insert(conn, job_input(b"one"))
    [row] = await claim(conn, ["q"], [1], worker)
    await finish(conn, [row["id"]], [row["run_lease"]], ["completed"])
    assert await key_table_writes(conn) == (start[0] + 1, start[1] + 1)


@pytest.mark.parametrize("first_commits", [True, False])
async def test_concurrent_inserts_of_one_key_write_one_job(database_url, conn, first_commits):
    first = await asyncpg.connect(database_url)
    second = await asyncpg.connect(database_url)
    try:
        transaction = first.transaction()
        await transaction.start()
        [mine] = await insert(first, job_input(b"race"))
        # The second insert waits for the first transaction's key.
        racing = asyncio.create_task(insert(second, job_input(b"race")))
        await asyncio.sleep(0.2)
        assert not racing.done()
        await (transaction.commit() if first_commits else transaction.rollback())
        theirs = await asyncio.wait_for(racing, timeout=10)
    finally:
        await first.close()
        await second.close()
    keys = await assert_table_true_to_jobs(conn)
    if first_commits:
        assert (theirs, keys) == ([], {b"race": mine})
    else:
        assert len(theirs) == 1 and keys == {b"race": theirs[0]}


async def test_no_trigger_on_jobs_runs_before_its_row(conn):
    # A BEFORE row trigger would make COPY insert row by row and lock every
    # claimed and finished row before its update (a WAL record each).
    before = await conn.fetch(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'awa.jobs'::regclass "
        "AND NOT tgisinternal AND (tgtype & 2) <> 0"  # TRIGGER_TYPE_BEFORE
    )
    every = await conn.fetchval(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'awa.jobs'::regclass AND NOT tgisinternal"
    )
    # 5 for unique keys, 2 for failure reasons, 4 for due jobs, 2 for lane
    # lowerings and running jobs recorded outside a claim, 2 opening the
    # partition lane of a partitioned job
    assert (before, every) == ([], 15)
