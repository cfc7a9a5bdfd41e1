"""Worker processes for tests (tests/acceptance/worker_process.py), and the
ledger tables their handlers and the database write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Side tables: every handler run (``test_runs``), every blocked loop that
#: ended (``test_blocks_ended``), and every completion the database applied
#: (``test_completions``, written by a trigger).
LEDGER_SQL = """
CREATE TABLE IF NOT EXISTS test_runs (job_id bigint, run_lease bigint, worker text);
CREATE TABLE IF NOT EXISTS test_blocks_ended (job_id bigint, worker text);
CREATE TABLE IF NOT EXISTS test_completions (job_id bigint, run_lease bigint);
CREATE OR REPLACE FUNCTION test_record_completion() RETURNS trigger AS $$
BEGIN
    INSERT INTO test_completions VALUES (NEW.id, NEW.run_lease);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER test_completion_ledger
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW WHEN (NEW.state = 'completed' AND OLD.state IS DISTINCT FROM 'completed')
    EXECUTE FUNCTION test_record_completion();
TRUNCATE test_runs, test_blocks_ended, test_completions;
"""
LEDGER_DROP_SQL = (
    "DROP TRIGGER test_completion_ledger ON awa.jobs; "
    "DROP TABLE test_runs, test_blocks_ended, test_completions"
)


async def spawn_worker(
    database_url: str,
    name: str,
    *,
    mode: str = "normal",
    queue: str = "default",
    settings: dict[str, Any] | None = None,
    periodic: dict[str, str] | None = None,
    stderr: int | None = None,
    slots: int | None = None,
) -> asyncio.subprocess.Process:
    """Starts a worker process and waits until it says it runs (a crashing
    one may die before it says anything)."""
    # This tree's awa first, whichever tree the virtualenv was installed from.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    if settings:
        env["AWA_TEST_WORKER_SETTINGS"] = json.dumps(settings)
    if periodic:
        env["AWA_TEST_PERIODIC"] = json.dumps(periodic)
    if slots is not None:
        env["AWA_TEST_SLOTS"] = str(slots)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.acceptance.worker_process",
        database_url,
        name,
        mode,
        queue,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    if mode != "crash":
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.strip() == b"started", line
    return process


async def stop_worker(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGCONT)  # in case a test stopped it
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
