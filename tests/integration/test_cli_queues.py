"""``awa queues pause|resume|show|configure|drain`` and ``awa jobs explain`` on a real
database: what they print, and named errors for bad input."""

from __future__ import annotations

from tests.integration.test_cli import run_awa


async def test_pause_show_and_resume_a_queue(database_url, conn):
    code, out, _ = await run_awa(
        "queues", "pause", "emails", "--by", "ops", "--database-url", database_url
    )
    assert code == 0
    assert out.startswith("queue emails: paused since ") and " by ops; " in out
    assert "`awa queues resume emails`" in out
    code, out, _ = await run_awa("queues", "show", "emails", "--database-url", database_url)
    assert (code, " by ops; " in out) == (0, True)
    assert await conn.fetchval("SELECT paused FROM awa.queue_settings WHERE queue = 'emails'")
    code, out, _ = await run_awa("queues", "resume", "emails", "--database-url", database_url)
    assert (code, out.strip()) == (0, "queue emails: not paused")


async def test_configure_sets_keeps_and_removes_flow_control(database_url, conn):
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--rate-limit", "50,5", "--global-max-running", "3",
        "--priority-aging-interval", "30", "--database-url", database_url,
    )  # fmt: skip
    assert code == 0
    assert out.strip() == (
        "queue emails: not paused; priority aging every 30s; at most 3 running across the "
        "fleet; rate limit 50/s, burst 5"
    )
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--rate-limit", "none", "--database-url", database_url
    )
    assert code == 0 and "rate limit" not in out and "at most 3 running" in out


async def test_configure_turns_fairness_on_and_off(database_url, conn):
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--fair", "--database-url", database_url
    )
    assert (code, out.strip()) == (0, "queue emails: not paused; fair across partitions")
    assert await conn.fetchval("SELECT fair FROM awa.queue_settings WHERE queue = 'emails'")
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--no-fair", "--database-url", database_url
    )
    assert (code, out.strip()) == (0, "queue emails: not paused")


async def test_configure_sets_and_removes_a_cap_per_partition(database_url, conn):
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--max-workers-per-partition", "2",
        "--database-url", database_url,
    )  # fmt: skip
    assert (code, out.strip()) == (0, "queue emails: not paused; at most 2 running per partition")
    code, out, _ = await run_awa(
        "queues", "configure", "emails", "--max-workers-per-partition", "none",
        "--database-url", database_url,
    )  # fmt: skip
    assert (code, out.strip()) == (0, "queue emails: not paused")
    code, _, err = await run_awa(
        "queues", "configure", "emails", "--max-workers-per-partition", "0",
        "--database-url", database_url,
    )  # fmt: skip
    assert code == 2  # usage: a value awa refuses
    assert err.strip().startswith("awa: max_workers_per_partition: must be an integer from 1")


async def test_configure_refuses_bad_values_by_name(database_url, conn):
    code, _, err = await run_awa(
        "queues", "configure", "emails", "--rate-limit", "50", "--database-url", database_url
    )
    assert code == 2 and "expected RATE,BURST" in err
    code, _, err = await run_awa(
        "queues", "configure", "emails", "--global-max-running", "0",
        "--database-url", database_url,
    )  # fmt: skip
    assert code == 2  # usage: a value awa refuses
    assert err.strip().startswith("awa: global_max_running: must be an integer from 1")


async def test_drain_of_an_empty_queue_returns_at_once(database_url, conn):
    code, out, _ = await run_awa("queues", "drain", "empty", "--database-url", database_url)
    assert (code, out.strip()) == (0, "queue empty is drained (it waited for 0 jobs)")


async def test_drain_that_times_out_says_why_and_exits_5(database_url, conn):
    await conn.execute("INSERT INTO awa.jobs (kind, queue, args) VALUES ('k', 'stuck', '{}')")
    await run_awa("queues", "pause", "stuck", "--database-url", database_url)
    code, _, err = await run_awa(
        "queues", "drain", "stuck", "--timeout", "0.3", "--database-url", database_url
    )
    assert code == 5  # gave up waiting
    assert "1 jobs still outstanding (the queue is paused" in err
    assert "Traceback" not in err


async def test_a_bad_queue_name_is_a_named_error(database_url, conn):
    code, _, err = await run_awa("queues", "pause", "a b", "--database-url", database_url)
    assert code == 2  # usage: a value awa refuses
    assert err.strip().startswith('awa: queue: "a b" is not a queue name')


async def test_explain_prints_the_reason_and_the_sentence(database_url, conn):
    job_id = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, args) VALUES ('k', 'nobody', '{}') RETURNING id"
    )
    code, out, _ = await run_awa("jobs", "explain", str(job_id), "--database-url", database_url)
    assert code == 0
    assert out.startswith("no_worker: no live worker serves queue nobody")
    code, _, err = await run_awa("jobs", "explain", "999999", "--database-url", database_url)
    assert (code, err.strip()) == (3, "awa: there is no job with id 999999")


async def test_jobs_show_prints_a_jobs_rate_class_partition_and_schema_version(database_url, conn):
    keyed = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, args, rate_class, partition_key, schema_version)"
        " VALUES ('k', 'q', '{}', 'mail', 'tenant 7', 3) RETURNING id"
    )
    plain = await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, args) VALUES ('k', 'q', '{}') RETURNING id"
    )
    code, out, _ = await run_awa("jobs", "show", str(keyed), "--database-url", database_url)
    assert code == 0
    assert "  rate_class mail  partition_key tenant 7  schema_version 3\n" in out
    code, out, _ = await run_awa("jobs", "show", str(plain), "--database-url", database_url)
    assert (code, "rate_class" in out, "partition_key" in out) == (0, False, False)


async def _a_schedule(conn, name: str) -> None:
    await conn.execute(
        "INSERT INTO awa.periodic (name, cron, timezone, kind, args, options, "
        """missed_fire_policy, next_fire_at) VALUES ($1, '0 3 * * *', 'UTC', 'nightly', """
        """'{"n": 1}', '{"queue": "ops"}', 'coalesce', now() + interval '1 hour')""",
        name,
    )


async def test_periodic_list_pause_resume_and_trigger(database_url, conn):
    code, out, _ = await run_awa("periodic", "list", "--database-url", database_url)
    assert (code, out.strip()) == (0, "no periodic jobs")
    await _a_schedule(conn, "nightly")
    code, out, _ = await run_awa("periodic", "list", "--database-url", database_url)
    assert code == 0
    assert out.startswith("nightly  '0 3 * * *' UTC  kind nightly  queue ops  next ")
    code, out, _ = await run_awa("periodic", "pause", "nightly", "--database-url", database_url)
    assert (code, "  paused  " in out) == (0, True)
    code, out, _ = await run_awa("periodic", "resume", "nightly", "--database-url", database_url)
    assert (code, "  next " in out) == (0, True)
    code, out, _ = await run_awa("periodic", "trigger", "nightly", "--database-url", database_url)
    assert code == 0
    assert out.startswith("periodic job nightly: enqueued job ") and "queue ops" in out
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE metadata ->> 'cron_name' = 'nightly'"
        )
        == 1
    )


async def test_an_unknown_periodic_job_is_a_named_error(database_url, conn):
    code, _, err = await run_awa("periodic", "pause", "nope", "--database-url", database_url)
    assert (code, err.strip()) == (3, "awa: name: no periodic job is named 'nope'")
