"""What a worker tells its user: failed attempts with their tracebacks (cut
short in a storm), DEBUG starts and finishes, the start-up lines, a queue
no task uses, the periodic summary; each line with the job's fields."""

from __future__ import annotations

import logging
import re

import pytest

import awa
from awa.worker.report import FAILURE_LINES_PER_WINDOW
from tests.support import FAST_WORKER, at_once, eventually, wait_for_state, wait_until_settled

WORKER_LOG = "awa.worker"


def lines(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == WORKER_LOG and needle in r.getMessage()]


async def logged(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return lines(caplog, needle)


async def test_a_failed_attempt_is_logged_with_its_traceback_and_job_fields(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="flaky_mail", queue="mail")
    async def flaky_mail(job):
        raise ConnectionError("SMTP server closed the connection")

    job = await client.insert({}, kind="flaky_mail", queue="mail", max_attempts=3)
    await client.start([("mail", 2)], **FAST_WORKER)
    await eventually(lambda: logged(caplog, f"job {job.id} (flaky_mail) attempt 1/3"))
    await client.shutdown()
    [record] = lines(caplog, f"job {job.id} (flaky_mail) attempt 1/3")
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "failed, will retry: ConnectionError: SMTP server closed the connection" in message
    assert 'raise ConnectionError("SMTP server closed the connection")' in message  # traceback
    assert (record.job_id, record.kind, record.queue, record.attempt) == (  # type: ignore[attr-defined]
        job.id, "flaky_mail", "mail", 1,
    )  # fmt: skip


async def test_the_last_attempt_and_a_terminal_error_are_errors(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="doomed")
    async def doomed(job):
        if job.args.get("terminal"):
            raise awa.TerminalError("card declined")
        raise ValueError("still broken")

    last = await client.insert({}, kind="doomed", max_attempts=1)
    terminal = await client.insert({"terminal": True}, kind="doomed", max_attempts=5)
    await client.start([("default", 2)], **FAST_WORKER)
    await wait_for_state(conn, last.id, "failed")
    await wait_for_state(conn, terminal.id, "failed")
    await client.shutdown()
    [exhausted] = lines(caplog, f"job {last.id} (doomed)")
    [declined] = lines(caplog, f"job {terminal.id} (doomed)")
    assert exhausted.levelno == declined.levelno == logging.ERROR
    assert "attempt 1/1 failed, no retries left: ValueError: still broken" in exhausted.getMessage()
    assert "failed for good: TerminalError: card declined" in declined.getMessage()


async def test_a_failure_storm_is_cut_short_per_kind(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="storm")
    async def storm(job):
        raise RuntimeError("the upstream API is down")

    await client.insert_many([{}] * 30, kind="storm", max_attempts=1)
    await client.start([("default", 8)], **FAST_WORKER)
    await wait_until_settled(conn, 30)
    await client.shutdown()
    failures = lines(caplog, "(storm) attempt")
    assert len(failures) == FAILURE_LINES_PER_WINDOW
    with_traceback = [r for r in failures if "Traceback" in r.getMessage()]
    assert len(with_traceback) == 1
    assert "further storm failures in the next 60s only counted" in failures[-1].getMessage()


async def test_an_unknown_kind_is_a_logged_undecodable_job(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="known")
    async def known(job):
        return None

    job = await client.insert({}, kind="nobody_handles_this", max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "undecodable")
    await client.shutdown()
    [record] = lines(caplog, f"job {job.id} (nobody_handles_this)")
    assert "is undecodable (unknown_kind)" in record.getMessage()
    assert "UnknownJobKind: no task handles kind 'nobody_handles_this'" in record.getMessage()


async def test_starts_and_finishes_are_debug_lines(client, conn, caplog):
    caplog.set_level(logging.DEBUG, logger="awa")

    @client.task(dict, kind="quiet")
    async def quiet(job):
        return None

    job = await client.insert({}, kind="quiet")
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")
    await client.shutdown()
    [started] = lines(caplog, f"job {job.id} (quiet) started, attempt 1/25")
    [finished] = lines(caplog, f"job {job.id} (quiet) finished: completed in ")
    assert started.levelno == finished.levelno == logging.DEBUG
    assert finished.job_id == job.id  # type: ignore[attr-defined]


async def test_the_start_up_lines_say_where_and_warn_of_a_queue_no_task_uses(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="mailer", queue="email")
    async def mailer(job):
        return None

    await client.start([("email", 4), ("emial", 2)], **FAST_WORKER)
    await client.shutdown()
    database = await conn.fetchval("SELECT current_database()")
    [started] = lines(caplog, "started on")
    message = started.getMessage()
    assert f"database {database} as " in message
    assert "schema version " in message and "queues email=4, emial=2" in message
    [typo] = lines(caplog, "queue 'emial' is served, but no registered task uses it")
    assert typo.levelno == logging.WARNING and "tasks use email" in typo.getMessage()
    assert not lines(caplog, "queue 'email' is served")


async def test_a_summary_line_counts_jobs_failures_and_lag(client, conn, caplog):
    caplog.set_level(logging.INFO, logger="awa")

    @client.task(dict, kind="counted")
    async def counted(job):
        if job.args["fail"]:
            raise ValueError("no")

    await client.insert_many([{"fail": i < 2} for i in range(6)], kind="counted", max_attempts=1)
    await client.start([("default", 4)], **FAST_WORKER, report_interval=0.3)
    await wait_until_settled(conn, 6)

    def summaries() -> list[str]:
        return [r.getMessage() for r in lines(caplog, " jobs in the last ")]

    def totals() -> tuple[int, int]:
        found = [SUMMARY.match(line) for line in summaries()]
        return (
            sum(int(m["jobs"]) for m in found if m),
            sum(int(m["failed"]) for m in found if m),
        )

    await eventually(lambda: at_once(totals() == (6, 2)))
    await client.shutdown()
    busy = [line for line in summaries() if not line.startswith("0 jobs")]
    assert all("/4 running" in line for line in busy)
    assert any("waited past run_at: default " in line for line in busy)


SUMMARY = re.compile(r"(?P<jobs>\d+) jobs in the last \d+s \([\d.]+/s\), (?P<failed>\d+) failed")
