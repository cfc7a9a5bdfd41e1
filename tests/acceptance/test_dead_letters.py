"""The dead-letter queue and retention: failed jobs keep why they failed,
can be listed, redriven and purged; finished jobs are pruned after their
retention, in bounded batches."""

from __future__ import annotations

import datetime
import json

import pytest
from pydantic import BaseModel

import awa
from tests.support import FAST_WORKER, eventually, wait_for_state


class Sync(BaseModel):
    account: int


async def fail_two_ways(client, conn) -> tuple[awa.Job, awa.Job]:
    @client.task(Sync)
    async def sync(job):
        if job.args.account == 1:
            raise awa.TerminalError("account closed")
        raise ValueError("upstream down")

    terminal = await client.insert(Sync(account=1))
    exhausted = await client.insert(Sync(account=2), max_attempts=1)
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, terminal.id, "failed")
    await wait_for_state(conn, exhausted.id, "failed")
    return terminal, exhausted


async def test_failed_jobs_carry_their_reason_into_the_dead_letter_queue(client, conn):
    terminal, exhausted = await fail_two_ways(client, conn)
    letters = {letter.job.id: letter for letter in await client.list_dlq()}
    assert letters[terminal.id].reason is awa.DeadLetterReason.TerminalError
    assert letters[exhausted.id].reason is awa.DeadLetterReason.MaxAttemptsExhausted
    with pytest.raises(awa.PayloadOmitted):
        letters[terminal.id].job.args  # noqa: B018
    [only] = await client.list_dlq(reason="terminal_error", include_payload=True)
    assert only.job.args == Sync(account=1)
    entry = only.job.errors[-1]
    assert entry["reason"] == "terminal_error" and entry["message"] == "account closed"
    with pytest.raises(awa.ValidationError, match="reason"):
        await client.list_dlq(reason="bored")


async def test_redrive_resets_attempts_and_keeps_the_history(client, conn):
    terminal, exhausted = await fail_two_ways(client, conn)
    await client.shutdown()
    with pytest.raises(awa.ValidationError, match="everything=True"):
        await client.retry_from_dlq()
    assert await client.retry_from_dlq(reason="max_attempts_exhausted") == [exhausted.id]
    row = await conn.fetchrow("SELECT * FROM awa.jobs WHERE id = $1", exhausted.id)
    assert (row["state"], row["attempt"], row["crashes"]) == ("available", 0, 0)
    assert row["failure_reason"] is None and row["finalized_at"] is None
    assert len(json.loads(row["errors"])) == 1
    assert [letter.job.id for letter in await client.list_dlq()] == [terminal.id]


async def test_purge_deletes_only_what_it_is_told_to(client, conn):
    terminal, exhausted = await fail_two_ways(client, conn)
    assert await client.purge_dlq(older_than=datetime.timedelta(days=1)) == 0
    assert await client.purge_dlq([terminal.id]) == 1
    assert [letter.job.id for letter in await client.list_dlq()] == [exhausted.id]
    assert await client.purge_dlq(everything=True) == 1
    assert await client.list_dlq() == []


async def test_retention_prunes_finished_jobs_by_state_and_queue(client, conn):
    @client.task(Sync)
    async def sync(job):
        return None

    ids = {}
    for name, state, queue in [
        ("old_completed", "completed", "default"),
        ("new_completed", "completed", "default"),
        ("old_cancelled", "cancelled", "default"),
        ("old_failed", "failed", "default"),
        ("old_failed_noisy", "failed", "noisy"),
        ("running", "running", "default"),
    ]:
        job = await client.insert(Sync(account=len(ids)), queue=queue)
        fresh = name.startswith("new") or name == "running"
        age = datetime.timedelta(0) if fresh else datetime.timedelta(hours=2)
        await conn.execute(
            "UPDATE awa.jobs SET state = $2::awa.job_state, finalized_at = CASE WHEN $2 IN "
            "('completed', 'failed', 'cancelled') THEN now() - $3::interval END WHERE id = $1",
            job.id,
            state,
            age,
        )
        ids[name] = job.id
    await client.start(
        [("default", 1)],
        completed_retention=3600,
        cancelled_retention=3600,
        dead_letter_retention=86_400,
        dead_letter_retention_by_queue={"noisy": 0},
        prune_interval=0.05,
        prune_batch_size=1,  # several bounded statements per pass
        **FAST_WORKER,
    )

    async def remaining() -> set[str] | None:
        rows = await conn.fetch("SELECT id FROM awa.jobs")
        left = {name for name, job_id in ids.items() if job_id in {r["id"] for r in rows}}
        return left if len(left) == 3 else None

    assert await eventually(remaining) == {"new_completed", "old_failed", "running"}


async def test_one_retention_pass_deletes_more_than_a_statement_holds(client, conn):
    """Statements stay on the same pages while each fills its batch; the pass
    goes on until its share of the table is walked."""
    from awa.maintenance.pruner import Pruner

    await conn.execute(
        "INSERT INTO awa.jobs (kind, state, finalized_at) "
        "SELECT 'k', 'completed', now() - interval '2 hours' FROM generate_series(1, 2500)"
    )
    pruner = Pruner(await client._database(), 60.0, 100, 3600.0, 3600.0, 86_400.0, None)
    assert await pruner.prune_once() == 2500
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0
