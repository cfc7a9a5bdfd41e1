"""``--json``: every command that answers prints one object on stdout that
the documented schema (python/awa/cli/schema.json, docs/cli.md) accepts,
and fails with the documented exit status and a named error."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import asyncpg
import jsonschema
import pytest

import awa
from tests.integration.test_cli import run_awa
from tests.queries.test_jobs_queries import claim, register_worker
from tests.support import FAST_WORKER, eventually

SCHEMA = json.loads((Path(awa.__file__).parent / "cli" / "schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)


async def awa_json(database_url: str, *args: str) -> tuple[int, dict[str, Any]]:
    """Runs ``awa ARGS --json``; its exit status and the envelope, checked
    against the schema (and nothing else on stdout)."""
    code, out, _ = await run_awa(*args, "--json", "--database-url", database_url)
    [line] = out.splitlines()
    envelope = json.loads(line)
    VALIDATOR.validate(envelope)
    return code, envelope


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


async def test_every_answering_command_prints_an_envelope_the_schema_accepts(
    client, conn, database_url
):
    @client.task(dict, kind="cli_json_job", queue="cli")
    async def cli_json_job(job):
        return None

    client.periodic("nightly", "0 3 * * *", dict, {"n": 1}, kind="cli_json_job", queue="cli")

    # The leader stores the schedules the code registers.
    await client.start([("cli", 1)], **FAST_WORKER)
    await eventually(client.list_periodic)
    await client.shutdown()
    job = await client.insert({"n": 1}, kind="cli_json_job", queue="cli", tags=["a"],
                              partition_key="tenant-1")  # fmt: skip
    answers = {
        ("migrate",): "migrate",
        ("jobs", "list"): "jobs list",
        ("jobs", "list", "--queue", "cli", "--tag", "a", "--payload"): "jobs list",
        ("jobs", "show", str(job.id)): "jobs show",
        ("jobs", "show", str(job.id), "--payload"): "jobs show",
        ("jobs", "explain", str(job.id)): "jobs explain",
        ("queues", "pause", "cli", "--by", "tests"): "queues pause",
        ("queues", "show", "cli"): "queues show",
        ("queues", "resume", "cli"): "queues resume",
        ("queues", "configure", "cli", "--rate-limit", "50,5", "--fair"): "queues configure",
        ("queues", "drain", "empty-queue"): "queues drain",
        ("periodic", "list"): "periodic list",
        ("periodic", "list", "--payload"): "periodic list",
        ("periodic", "pause", "nightly"): "periodic pause",
        ("periodic", "resume", "nightly"): "periodic resume",
        ("periodic", "trigger", "nightly"): "periodic trigger",
    }
    for args, command in answers.items():
        code, envelope = await awa_json(database_url, *args)
        assert (code, envelope["ok"], envelope["command"]) == (0, True, command), args
    _, shown = await awa_json(database_url, "jobs", "show", str(job.id))
    assert shown["data"]["id"] == job.id and "args" not in shown["data"]
    _, with_payload = await awa_json(database_url, "jobs", "show", str(job.id), "--payload")
    assert with_payload["data"]["args"] == {"n": 1}
    _, configured = await awa_json(database_url, "queues", "show", "cli")
    assert configured["data"]["rate_limit"] == {"rate_per_s": 50.0, "burst": 5}


async def test_a_missing_job_is_exit_status_3_and_a_named_error(database_url):
    code, envelope = await awa_json(database_url, "jobs", "show", "987654321")
    assert code == 3
    assert envelope["ok"] is False
    assert envelope["error"]["type"] == "JobNotFound"
    assert envelope["error"]["exit_code"] == 3
    code, envelope = await awa_json(database_url, "periodic", "pause", "no-such-schedule")
    assert (code, envelope["error"]["type"]) == (3, "PeriodicNotFound")


async def test_a_bad_command_line_is_exit_status_2_and_an_envelope(database_url):
    code, envelope = await awa_json(database_url, "jobs", "show", "not-a-number")
    assert (code, envelope["ok"], envelope["error"]["type"]) == (2, False, "UsageError")
    assert "invalid int value" in envelope["error"]["message"]


async def test_a_refused_value_is_exit_status_2_with_the_libraries_error(database_url):
    code, envelope = await awa_json(database_url, "queues", "show", "no spaces allowed")
    assert (code, envelope["error"]["type"]) == (2, "ValidationError")


async def test_no_database_is_a_usage_error_in_either_output(monkeypatch):
    monkeypatch.delenv("AWA_DATABASE_URL", raising=False)
    code, out, err = await run_awa("jobs", "show", "1", "--json", env={"AWA_DATABASE_URL": ""})
    assert code == 2
    assert json.loads(out)["error"]["type"] == "ConfigurationError"
    code, out, err = await run_awa("jobs", "show", "1", env={"AWA_DATABASE_URL": ""})
    assert (code, out) == (2, "")
    assert err.startswith("awa: no database given")


async def test_a_drain_that_gives_up_is_exit_status_5(conn, database_url):
    worker = await register_worker(conn)
    await conn.execute("INSERT INTO awa.jobs (kind, queue, args) VALUES ('k', 'held', '{}')")
    assert len(await claim(conn, ["held"], [1], worker)) == 1
    code, envelope = await awa_json(database_url, "queues", "drain", "held", "--timeout", "0.2")
    assert (code, envelope["error"]["type"], envelope["error"]["exit_code"]) == (
        5, "TimeoutError", 5,
    )  # fmt: skip


@pytest.mark.parametrize("where", ["before", "after"])
async def test_json_may_come_before_or_after_the_command(database_url, where):
    args = ["queues", "show", "cli"]
    full = ["--json", *args] if where == "before" else [*args, "--json"]
    code, out, _ = await run_awa(*full, "--database-url", database_url)
    assert code == 0
    VALIDATOR.validate(json.loads(out))


async def test_jobs_list_filters_and_pages(client, database_url):
    ids = [
        (await client.insert({"n": n}, kind="listed", queue="pages", tags=[f"t{n % 2}"])).id
        for n in range(3)
    ]
    code, page = await awa_json(database_url, "jobs", "list", "--queue", "pages", "--limit", "2")
    assert code == 0
    assert [job["id"] for job in page["data"]["jobs"]] == [ids[2], ids[1]]
    assert page["data"]["next_before"] == ids[1]
    _, rest = await awa_json(
        database_url, "jobs", "list", "--queue", "pages", "--limit", "2",
        "--before", str(ids[1]),
    )  # fmt: skip
    assert [job["id"] for job in rest["data"]["jobs"]] == [ids[0]]
    assert rest["data"]["next_before"] is None
    _, tagged = await awa_json(database_url, "jobs", "list", "--tag", "t0")
    assert [job["id"] for job in tagged["data"]["jobs"]] == [ids[2], ids[0]]
    code, out, _ = await run_awa("jobs", "list", "--queue", "pages", "--database-url",
                                 database_url)  # fmt: skip
    assert code == 0
    assert out.splitlines()[0].startswith(f"{ids[2]}  available")
    code, envelope = await awa_json(database_url, "jobs", "list", "--state", "done")
    assert (code, envelope["error"]["type"]) == (2, "ValidationError")


async def dead_letter(conn, queue: str = "dq") -> int:
    return await conn.fetchval(
        "INSERT INTO awa.jobs (kind, queue, args, state, failure_reason, finalized_at)"
        " VALUES ('k', $1, '{}', 'failed', 'terminal_error', now()) RETURNING id",
        queue,
    )


async def test_dlq_lists_and_its_bulk_verbs_need_a_selection_and_a_yes(conn, database_url):
    first, second = await dead_letter(conn), await dead_letter(conn)
    other = await dead_letter(conn, "elsewhere")
    code, listed = await awa_json(database_url, "dlq", "list", "--queue", "dq")
    assert code == 0
    assert [(row["id"], row["reason"]) for row in listed["data"]["dead_letters"]] == [
        (second, "terminal_error"), (first, "terminal_error"),
    ]  # fmt: skip
    code, refused = await awa_json(database_url, "dlq", "retry")
    assert (code, refused["error"]["type"], refused["error"]["exit_code"]) == (4, "Refused", 4)
    assert "--all" in refused["error"]["message"]
    code, unconfirmed = await awa_json(database_url, "dlq", "retry", "--queue", "dq")
    assert (code, unconfirmed["error"]["type"]) == (4, "Refused")
    assert "--yes" in unconfirmed["error"]["message"]
    code, out, err = await run_awa("dlq", "purge", "--database-url", database_url)
    assert (code, out) == (4, "")
    assert err.startswith("awa: dlq purge acts on many jobs")
    code, retried = await awa_json(database_url, "dlq", "retry", "--queue", "dq", "--yes")
    assert code == 0
    assert sorted(retried["data"]["retried"]) == [first, second]
    states = dict(await conn.fetch("SELECT id, state::text FROM awa.jobs"))
    assert (states[first], states[second], states[other]) == ("available", "available", "failed")
    code, purged = await awa_json(database_url, "dlq", "purge", "--all", "--yes")
    assert (code, purged["data"]["purged"]) == (0, 1)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE id = $1", other) == 0


async def test_quarantine_lists_and_releases_a_fingerprint(client, conn, database_url):
    job = await client.insert({"n": 1}, kind="crashy", queue="q")
    await conn.execute(
        "INSERT INTO awa.quarantine (fingerprint, kind, crashes, window_started_at, "
        "last_crash_at, last_job_id, quarantined_at, reason) "
        "SELECT awa.job_fingerprint(kind, args), kind, 3, now(), now(), id, now(), 'crash loop' "
        "FROM awa.jobs WHERE id = $1",
        job.id,
    )
    code, listed = await awa_json(database_url, "quarantine", "list")
    assert code == 0
    [held] = listed["data"]["fingerprints"]
    assert (held["kind"], held["last_job_id"], held["reason"]) == ("crashy", job.id, "crash loop")
    code, released = await awa_json(database_url, "quarantine", "release", held["fingerprint"])
    assert (code, released["data"]["released"]) == (0, True)
    code, again = await awa_json(database_url, "quarantine", "release", held["fingerprint"])
    assert (code, again["error"]["type"]) == (3, "NotFound")
    code, bad = await awa_json(database_url, "quarantine", "release", "not-hex")
    assert (code, bad["error"]["type"]) == (2, "ValidationError")


async def test_explain_at_the_top_is_jobs_explain(client, database_url):
    job = await client.insert({"n": 1}, kind="k", queue="nobody-serves")
    _, top = await awa_json(database_url, "explain", str(job.id))
    _, nested = await awa_json(database_url, "jobs", "explain", str(job.id))
    assert top["command"] == nested["command"] == "jobs explain"
    assert top["data"]["reason"] == nested["data"]["reason"]


async def test_queues_list_counts_what_waits_in_each_queue(client, conn, database_url):
    await client.insert({"n": 1}, kind="k", queue="busy")
    await client.insert({"n": 2}, kind="k", queue="busy")
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    await client.insert({"n": 3}, kind="k", queue="busy", run_at=later)
    await dead_letter(conn, "busy")
    await client.pause_queue("quiet", paused_by="tests")
    code, listed = await awa_json(database_url, "queues", "list")
    assert code == 0
    by_name = {row["queue"]: row for row in listed["data"]["queues"]}
    busy = by_name["busy"]
    assert (busy["due"], busy["running"], busy["later"], busy["failed"]) == (2, 0, 1, 1)
    assert busy["oldest_due_at"] is not None and not busy["paused"]
    quiet = by_name["quiet"]
    assert (quiet["paused"], quiet["due"], quiet["oldest_due_at"]) == (True, 0, None)
    code, out, _ = await run_awa("queues", "list", "--database-url", database_url)
    assert "busy: 2 due, 0 running, 1 later, 0 waiting for a callback, 1 failed" in out
    assert "quiet: 0 due" in out and "PAUSED" in out


async def test_migrate_dry_run_says_what_it_would_apply_and_applies_nothing(fresh_database):
    url = await fresh_database()
    code, envelope = await awa_json(url, "migrate", "--dry-run")
    assert code == 0
    pending = envelope["data"]["pending"]
    assert [row["version"] for row in pending] == list(range(1, len(pending) + 1))
    assert envelope["data"]["applied"] == []
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT to_regclass('awa.schema_migrations')") is None
    finally:
        await conn.close()
    code, out, _ = await run_awa("migrate", "--dry-run", "--database-url", url)
    assert out.splitlines()[0] == "would apply 0001_initial"
    code, migrated = await awa_json(url, "migrate")
    assert migrated["data"]["applied"] == [row["version"] for row in pending]
    code, again = await awa_json(url, "migrate", "--dry-run")
    assert again["data"]["pending"] == []


async def test_jobs_cancel_and_retry(client, conn, database_url):
    job = await client.insert({"n": 1}, kind="k", queue="ops")
    code, cancelled = await awa_json(database_url, "jobs", "cancel", str(job.id), "--reason", "ops")
    assert (code, cancelled["data"]["cancelled"]) == (0, True)
    assert cancelled["data"]["job"]["state"] == "cancelled"
    code, again = await awa_json(database_url, "jobs", "cancel", str(job.id))
    assert (code, again["data"]["cancelled"]) == (0, False)
    code, missing = await awa_json(database_url, "jobs", "cancel", "987654321")
    assert (code, missing["error"]["type"]) == (3, "JobNotFound")
    failed = await dead_letter(conn, "ops")
    code, refused = await awa_json(database_url, "jobs", "retry", str(failed), str(job.id))
    assert (code, refused["error"]["type"]) == (4, "Refused")
    assert f"job {job.id} is cancelled" in refused["error"]["message"]
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", failed) == "failed"
    code, retried = await awa_json(database_url, "jobs", "retry", str(failed))
    assert (code, retried["data"]["retried"]) == (0, [failed])
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", failed) == (
        "available"
    )


async def test_doctor_and_queues_stats_print_envelopes_the_schema_accepts(client, database_url):
    await client.insert({"n": 1}, kind="k", queue="stats-json")
    code, doctor = await awa_json(database_url, "doctor")
    assert (code, doctor["command"], doctor["data"]["ok"]) == (0, "doctor", True)
    assert {check["status"] for check in doctor["data"]["checks"]} == {"ok"}
    code, stats = await awa_json(database_url, "queues", "stats", "--queue", "stats-json")
    assert (code, stats["command"]) == (0, "queues stats")
    [queue] = stats["data"]["queues"]
    assert (queue["queue"], queue["counts"]["available"], queue["in_flight"]) == (
        "stats-json", 1, 0,
    )  # fmt: skip


async def test_jobs_show_gives_progress_and_the_result_only_with_payload(
    client, conn, database_url
):
    @client.task(dict, kind="cli_result_job", queue="cli_result")
    async def cli_result_job(job):
        job.set_progress(100, "all done", rows=3)
        return {"rows": 3}

    job = await client.insert({"n": 1}, kind="cli_result_job")
    await client.start([("cli_result", 1)], **FAST_WORKER)
    assert await client.result(job.id, timeout=30) == {"rows": 3}
    await client.shutdown()
    code, shown = await awa_json(database_url, "jobs", "show", str(job.id))
    assert code == 0
    assert shown["data"]["progress"] == {"percent": 100, "message": "all done"}
    assert "result" not in shown["data"]
    code, full = await awa_json(database_url, "jobs", "show", str(job.id), "--payload")
    assert full["data"]["progress"] == {"percent": 100, "message": "all done", "data": {"rows": 3}}
    assert full["data"]["result"] == {"rows": 3}
    _, out, _ = await run_awa(
        "jobs", "show", str(job.id), "--payload", "--database-url", database_url
    )
    assert "  progress 100%  all done" in out and '  result {"rows": 3}' in out
