"""Worker processes for tests (tests/acceptance/worker_process.py), and the
ledger tables their handlers and the database write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
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


# `awa worker` processes of a recording app (tests/acceptance/test_processes.py,
# test_hosts.py).

APP_SLOTS = 4
APP_QUEUE = "procs"
APP_KIND = "proc_job"


#: Set in a worker process's environment, the recording app's ``start``
#: exits at once with this status (a child that dies at start, every time).
DIE_AT_START_ENV = "AWA_TEST_DIE_AT_START"


def write_recording_app(directory: Path, url: str) -> None:
    """An app whose handler records each run (job, lease, the process's pid)
    in ``test_runs`` and then sleeps for the job's ``sleep`` argument; its
    worker dies at start when :data:`DIE_AT_START_ENV` is set."""
    (directory / "procs_app.py").write_text(
        textwrap.dedent(f"""
        import asyncio
        import functools
        import os

        import asyncpg
        import awa
        from tests.support import FAST_WORKER

        URL = {url!r}
        client = awa.AsyncClient(URL)
        # What the CLI's start() uses: quick maintenance.
        _start = functools.partial(client.start, **FAST_WORKER)

        async def start(*args, **kwargs):
            status = os.environ.get({DIE_AT_START_ENV!r})
            if status:
                os._exit(int(status))
            return await _start(*args, **kwargs)

        client.start = start
        _recorder = []
        _lock = asyncio.Lock()

        async def recorder():
            async with _lock:
                if not _recorder:
                    _recorder.append(await asyncpg.create_pool(URL, min_size=1, max_size=2))
            return _recorder[0]

        @client.task(dict, kind={APP_KIND!r}, queue={APP_QUEUE!r})
        async def proc_job(job):
            pool = await recorder()
            await pool.execute(
                "INSERT INTO test_runs VALUES ($1, $2, $3)",
                job.id, job.run_lease, str(os.getpid()),
            )
            await asyncio.sleep(job.args["sleep"])
    """)
    )


async def finish_cli(process: asyncio.subprocess.Process) -> tuple[int, str]:
    """The parent's exit status and stderr, waiting at most 60 s."""
    _out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def kill_if_running(process: asyncio.subprocess.Process) -> None:
    """Whatever happened in the test: the parent is gone (its children get
    SIGTERM from the kernel when it dies)."""
    if process.returncode is None:
        process.kill()
        await process.wait()
