"""Unique keys across every transition awa makes itself.

Jobs inserted now always hold their key in every state they wait or run in
(``unique_opts.states`` must include them), so no move between those states
can collide. Older versions of awa accepted any set, and their rows are
still in users' databases: a row that left its states, let a duplicate in,
and then moves back into them used to fail the whole statement moving it,
and with it every other job in the batch (promotion, claims, releases,
rescues, finishing outcomes, callbacks). Each test below writes such rows
into a database at schema version 8, as an older awa left them, upgrades it
the way users do (``client.migrate()``), and checks that the transition
goes through for every job. Redrive is the one move out of a terminal
state: it is checked on rows written by this version.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from pydantic import BaseModel

import awa
from awa import dead_letters, sql
from tests.support import FAST_WORKER, eventually, job_row, wait_for_state

#: The last schema version before awa refused unsafe ``unique_opts.states``.
LEGACY_VERSION = 8

KEY = b"legacy-unique-key"
FAR_FUTURE = "now() + interval '1 day'"
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Legacy:
    """A database as an older awa left it, and a direct connection to it."""

    url: str
    conn: asyncpg.Connection

    async def job(
        self,
        state: str,
        *,
        states: Sequence[str] = (),
        key: bytes = KEY,
        queue: str = "q",
        args: dict[str, Any] | None = None,
        run_at: str = "now()",
        worker_id: int | None = None,
        callback: uuid.UUID | None = None,
        deadline: str = "NULL",
    ) -> int:
        """Writes one job row; with ``states``, it carries ``key`` and holds
        it in those states (the mask an older awa stored)."""
        started = state in {"running", "waiting_external"} or state in TERMINAL
        return await self.conn.fetchval(  # type: ignore[no-any-return]
            f"""
            INSERT INTO awa.jobs (kind, queue, args, state, run_at, attempt, run_lease,
                                  attempted_at, finalized_at, worker_id, unique_key,
                                  unique_states, callback_id, callback_timeout_at,
                                  deadline_at, failure_reason)
            VALUES ('sync', $1, $2::jsonb, $3::text::awa.job_state, {run_at},
                    $4::integer, $4::integer, CASE WHEN $4::integer > 0 THEN now() END,
                    CASE WHEN $3::text IN ('completed', 'failed', 'cancelled') THEN now() END,
                    $5, $6,
                    (SELECT sum(awa.job_state_bit(s::awa.job_state))::smallint
                     FROM unnest($7::text[]) AS s),
                    $8::uuid, CASE WHEN $8::uuid IS NOT NULL THEN now() + interval '1 hour' END,
                    {deadline},
                    CASE WHEN $3::text = 'failed' THEN 'terminal_error' END)
            RETURNING id""",
            queue,
            json.dumps(args or {}),
            state,
            1 if started else 0,
            worker_id,
            key if states else None,
            list(states),
            callback,
        )

    async def live_worker(self) -> int:
        """A worker row that stays fresh: the rescuer leaves its jobs alone."""
        return await self.conn.fetchval(  # type: ignore[no-any-return]
            "INSERT INTO awa.workers (heartbeat_at, hostname, pid, queues) "
            f"VALUES ({FAR_FUTURE}, 'elsewhere', 1, '{{elsewhere}}') RETURNING id"
        )

    async def upgrade(self) -> awa.AsyncClient:
        """Migrates to this version of awa and returns a client on it."""
        client = awa.AsyncClient(self.url)
        await client.migrate()
        return client


@pytest.fixture
async def legacy(server_url: str) -> AsyncIterator[Legacy]:
    name = f"awa_legacy_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql.query("schema_migrations_bootstrap"))
        for migration in sql.MIGRATIONS:
            if migration.version > LEGACY_VERSION:
                break
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    sql.query("schema_migrations_record"), migration.version, migration.name
                )
        yield Legacy(url, conn)
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def upgraded(legacy: Legacy) -> AsyncIterator[list[awa.AsyncClient]]:
    """Clients made by ``legacy.upgrade()`` in a test are closed after it."""
    made: list[awa.AsyncClient] = []
    original = legacy.upgrade

    async def upgrade() -> awa.AsyncClient:
        client = await original()
        made.append(client)
        return client

    legacy.upgrade = upgrade  # type: ignore[method-assign]
    yield made
    for client in made:
        await client.shutdown(timeout=1)
        await client.close()


def serve(client: awa.AsyncClient, handler: Any = None) -> None:
    async def default(job: awa.Job[Any]) -> Any:
        return None

    client.task(dict, kind="sync", queue="q")(handler or default)


async def state_of(conn: asyncpg.Connection, job_id: int) -> str:
    return (await job_row(conn, job_id))["state"]  # type: ignore[no-any-return]


# ── transitions among waiting and running states, on rows older awa wrote ──


async def test_promotion_goes_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    # Held only while queued: B queued, so A, back from a failed attempt,
    # cannot queue again, and used to fail every promotion in the database.
    await legacy.job("available", states=["available", "scheduled"], queue="elsewhere")
    retried = await legacy.job("retryable", states=["available", "scheduled"])
    due = await legacy.job("scheduled")
    client = await legacy.upgrade()
    serve(client)
    await client.start([("q", 2)], **FAST_WORKER)
    await wait_for_state(legacy.conn, due, "completed")
    await wait_for_state(legacy.conn, retried, "completed")


async def test_claims_go_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    # Held only while running: one runs elsewhere, a duplicate waits here.
    worker = await legacy.live_worker()
    await legacy.job("running", states=["running"], queue="elsewhere", worker_id=worker)
    duplicate = await legacy.job("available", states=["running"])
    other = await legacy.job("available")
    client = await legacy.upgrade()
    serve(client)
    await client.start([("q", 4)], **FAST_WORKER)
    await wait_for_state(legacy.conn, other, "completed")
    await wait_for_state(legacy.conn, duplicate, "completed")


async def test_release_at_shutdown_goes_on_when_a_legacy_row_would_take_a_held_key(
    legacy, upgraded
):
    # Held only while available: A is claimed (and lets go), B becomes
    # available and takes the key, then A is given back at shutdown.
    held = await legacy.job("available", states=["available"])
    other = await legacy.job("available")
    later = await legacy.job(
        "scheduled", states=["available"], queue="elsewhere", run_at=FAR_FUTURE
    )
    client = await legacy.upgrade()

    async def block(job: awa.Job[Any]) -> None:
        await asyncio.Event().wait()

    serve(client, block)
    await client.start([("q", 2)], **FAST_WORKER)
    await wait_for_state(legacy.conn, held, "running")
    await wait_for_state(legacy.conn, other, "running")
    await legacy.conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = $1", later)
    await wait_for_state(legacy.conn, later, "available")
    await client.shutdown(timeout=0.05)
    for job_id in (held, other):
        row = await job_row(legacy.conn, job_id)
        assert (row["state"], row["attempt"]) == ("available", 0)


@pytest.mark.parametrize(
    ("outcome", "holds_in", "ends_in"),
    [
        ("complete", "completed", "completed"),
        ("snooze", "scheduled", "scheduled"),
        ("retry", "retryable", "retryable"),
    ],
)
async def test_outcomes_are_written_when_a_legacy_row_would_take_a_held_key(
    legacy, upgraded, outcome, holds_in, ends_in
):
    # Held only in the state the outcome moves A to, where B already is.
    finalized = holds_in in TERMINAL
    await legacy.job(
        holds_in,
        states=[holds_in],
        queue="elsewhere",
        run_at="now()" if finalized else FAR_FUTURE,
    )
    keyed = await legacy.job("available", states=[holds_in], args={"outcome": outcome})
    other = await legacy.job("available", args={"outcome": outcome})
    client = await legacy.upgrade()

    async def handler(job: awa.Job[Any]) -> Any:
        return {"complete": None, "snooze": awa.Snooze(3600), "retry": awa.RetryAfter(3600)}[
            job.args["outcome"]
        ]

    serve(client, handler)
    await client.start([("q", 4)], **FAST_WORKER)
    await wait_for_state(legacy.conn, other, ends_in)
    await wait_for_state(legacy.conn, keyed, ends_in)


async def test_quarantine_hold_goes_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    # Held only while scheduled: B waits far ahead; A's fingerprint is
    # quarantined, so the claim gives A back as scheduled.
    await legacy.job("scheduled", states=["scheduled"], queue="elsewhere", run_at=FAR_FUTURE)
    poison = await legacy.job("available", states=["scheduled"], args={"doc": 13})
    await legacy.conn.execute(
        "INSERT INTO awa.quarantine (fingerprint, kind, crashes, window_started_at, "
        "last_crash_at, last_job_id, quarantined_at, reason) "
        "VALUES (awa.job_fingerprint('sync', '{\"doc\": 13}'), 'sync', 3, now(), now(), $1, "
        "now(), 'test')",
        poison,
    )
    client = await legacy.upgrade()
    serve(client)
    await client.start([("q", 1)], **FAST_WORKER)

    await eventually(
        lambda: legacy.conn.fetchval(
            "SELECT state = 'scheduled' AND run_at = 'infinity' FROM awa.jobs WHERE id = $1",
            poison,
        )
    )
    assert (await job_row(legacy.conn, poison))["attempt"] == 0


async def test_crash_rescue_goes_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    # Held only while retryable: B retries later; A and C belong to a worker
    # that died, and rescuing A back to retryable used to fail both rescues.
    await legacy.job("retryable", states=["retryable"], queue="elsewhere", run_at=FAR_FUTURE)
    keyed = await legacy.job("running", states=["retryable"], worker_id=987654321)
    other = await legacy.job("running", worker_id=987654321)
    client = await legacy.upgrade()
    serve(client)
    await client.start([("elsewhere", 1)], **FAST_WORKER)

    async def rescued() -> bool:
        rows = [await job_row(legacy.conn, job_id) for job_id in (keyed, other)]
        return all(row["crashes"] == 1 for row in rows)

    await eventually(rescued)


async def test_deadline_failures_go_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    # Held only while failed: B failed; A and C are queued past their deadline.
    await legacy.job("failed", states=["failed"], queue="elsewhere")
    past = "now() - interval '1 second'"
    keyed = await legacy.job("available", states=["failed"], queue="elsewhere", deadline=past)
    other = await legacy.job("available", queue="elsewhere", deadline=past)
    client = await legacy.upgrade()
    serve(client)
    await client.start([("q", 1)], **FAST_WORKER)
    for job_id in (keyed, other):
        row = await wait_for_state(legacy.conn, job_id, "failed")
        assert row["failure_reason"] == "deadline_exceeded"


async def test_cancel_goes_on_when_a_legacy_row_would_take_a_held_key(legacy, upgraded):
    await legacy.job("cancelled", states=["cancelled"], queue="elsewhere")
    keyed = await legacy.job("available", states=["cancelled"])
    client = await legacy.upgrade()
    cancelled = await client.cancel(keyed)
    assert cancelled is not None and cancelled.state == awa.JobState.Cancelled


@pytest.mark.parametrize(
    ("verb", "holds_in", "ends_in"),
    [
        ("complete_external", "completed", "completed"),
        ("fail_external", "failed", "failed"),
        ("retry_external", "available", "available"),
        ("resume_external", "running", "running"),
    ],
)
async def test_callback_resolution_goes_on_when_a_legacy_row_would_take_a_held_key(
    legacy, upgraded, verb, holds_in, ends_in
):
    worker = await legacy.live_worker()
    await legacy.job(
        holds_in,
        states=[holds_in],
        queue="elsewhere",
        worker_id=worker if holds_in == "running" else None,
    )
    callback = uuid.uuid4()
    parked = await legacy.job(
        "waiting_external",
        states=[holds_in],
        callback=callback,
        # resume_external needs a handler waiting in place (its worker holds it).
        worker_id=worker if verb == "resume_external" else None,
    )
    client = await legacy.upgrade()
    extra = ("declined",) if verb == "fail_external" else ()
    job = await getattr(client, verb)(callback, *extra)
    assert job.id == parked and job.state == ends_in
    assert await state_of(legacy.conn, parked) == ends_in


# ── the upgrade itself ─────────────────────────────────────────────────────


async def test_the_upgrade_keeps_one_holder_per_key_and_frees_the_duplicates(legacy, upgraded):
    queued = ["available", "scheduled"]
    holder = await legacy.job("available", states=queued, queue="elsewhere")
    duplicate = await legacy.job("retryable", states=queued)
    finished = await legacy.job("completed", states=queued)
    # A key no row holds yet: the oldest unfinished row takes it.
    first = await legacy.job("running", states=["available"], key=b"second")
    second = await legacy.job("scheduled", states=["available"], key=b"second")
    default = [state.value for state in awa.DEFAULT_UNIQUE_STATES]
    safe = await legacy.job("available", states=default, key=b"third")
    plain = await legacy.job("available")
    before = {row["id"]: row["state"] for row in await legacy.conn.fetch("SELECT * FROM awa.jobs")}
    await legacy.upgrade()

    rows = {row["id"]: row for row in await legacy.conn.fetch("SELECT * FROM awa.jobs")}
    assert {job_id: row["state"] for job_id, row in rows.items()} == before  # no job moved
    waiting_or_running = 0b11111  # scheduled, available, running, retryable, waiting_external
    assert rows[holder]["unique_states"] == waiting_or_running
    assert rows[finished]["unique_states"] == waiting_or_running
    assert rows[first]["unique_states"] == waiting_or_running
    assert rows[safe]["unique_states"] == 0b111111  # untouched
    # Duplicates let in by their narrow states keep their key (so
    # cancel_by_unique_key still finds them) but hold it in no state.
    assert rows[duplicate]["unique_states"] == 0
    assert rows[second]["unique_states"] == 0
    assert rows[duplicate]["unique_key"] == KEY
    assert rows[plain]["unique_key"] is None and rows[plain]["unique_states"] is None

    # An older awa still running during the upgrade cannot write a narrow set again.
    with pytest.raises(asyncpg.CheckViolationError, match="jobs_unique_states_valid"):
        await legacy.job("available", states=["available"], key=b"fresh")


# ── redrive: the one move out of a terminal state ─────────────────────────


class Report(BaseModel):
    account: int


async def dead(client: awa.AsyncClient, conn: asyncpg.Connection, account: int) -> int:
    """A dead letter inserted with the default unique options."""
    job = await client.insert(Report(account=account), unique_opts={}, queue="reports")
    await conn.execute(
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now(), attempt = 1, "
        "failure_reason = 'terminal_error' WHERE id = $1",
        job.id,
    )
    return job.id


async def test_redrive_skips_a_dead_letter_whose_key_is_held_and_redrives_the_rest(client, conn):
    first = await dead(client, conn, 1)
    blocked = await dead(client, conn, 2)
    last = await dead(client, conn, 3)
    # The default states leave out `failed`: a new job took account 2's key.
    holder = await client.insert(Report(account=2), unique_opts={}, queue="reports")
    with pytest.raises(awa.UniqueConflict) as raised:
        await client.retry_from_dlq(everything=True)
    conflict = raised.value
    assert conflict.existing_id == holder.id
    assert conflict.job_id == blocked
    assert conflict.conflicts == [(blocked, holder.id)]
    assert conflict.redriven == [first, last]
    assert f"dead letter {blocked}" in str(conflict) and f"job {holder.id}" in str(conflict)
    assert await state_of(conn, blocked) == "failed"
    assert await state_of(conn, first) == await state_of(conn, last) == "available"
    assert await state_of(conn, holder.id) == "available"


async def test_two_dead_letters_with_one_key_redrive_the_first_only(client, conn):
    older = await dead(client, conn, 5)
    newer = await dead(client, conn, 5)  # inserted after the first had failed
    with pytest.raises(awa.UniqueConflict) as raised:
        await client.retry_from_dlq([older, newer])
    assert raised.value.conflicts == [(newer, older)]
    assert raised.value.redriven == [older]
    assert await state_of(conn, older) == "available"
    assert await state_of(conn, newer) == "failed"


async def test_redrive_goes_past_conflicts_from_one_batch_to_the_next(client, conn, monkeypatch):
    monkeypatch.setattr(dead_letters, "BATCH_SIZE", 2)
    letters = [await dead(client, conn, account) for account in range(6)]
    holders = {
        letters[0]: (await client.insert(Report(account=0), unique_opts={}, queue="x")).id,
        letters[1]: (await client.insert(Report(account=1), unique_opts={}, queue="x")).id,
        letters[4]: (await client.insert(Report(account=4), unique_opts={}, queue="x")).id,
    }
    with pytest.raises(awa.UniqueConflict) as raised:
        await client.retry_from_dlq(queue="reports")
    assert raised.value.conflicts == sorted(holders.items())
    assert raised.value.redriven == [letters[2], letters[3], letters[5]]
    assert [letter.job.id for letter in await client.list_dlq()] == sorted(holders, reverse=True)


async def test_redrive_after_a_concurrent_insert_takes_the_key_reports_it(
    client, conn, database_url
):
    letter = await dead(client, conn, 7)
    other = await dead(client, conn, 8)
    racer = await asyncpg.connect(database_url)
    try:
        transaction = racer.transaction()
        await transaction.start()
        # Not committed yet: the redrive cannot see it, and waits on its key.
        holder = await client.insert(
            Report(account=7), unique_opts={}, queue="reports", connection=racer
        )
        redrive = asyncio.ensure_future(client.retry_from_dlq(everything=True))
        await eventually(
            lambda: conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%redriven%'"
            )
        )
        await transaction.commit()
        with pytest.raises(awa.UniqueConflict) as raised:
            await redrive
    finally:
        await racer.close()
    assert raised.value.conflicts == [(letter, holder.id)]
    assert raised.value.redriven == [other]
    assert await state_of(conn, letter) == "failed"


async def test_redrive_without_conflicts_returns_the_ids(client, conn):
    letters = [await dead(client, conn, account) for account in (1, 2)]
    assert await client.retry_from_dlq(everything=True) == letters


def test_unique_conflict_keeps_its_one_argument_form():
    conflict = awa.UniqueConflict(42)
    assert conflict.existing_id == 42
    assert conflict.job_id is None and conflict.conflicts == [] and conflict.redriven == []
    assert str(conflict) == "a job with the same unique key already exists (job 42)"
