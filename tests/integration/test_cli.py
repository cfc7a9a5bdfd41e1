"""The command line: migrate, worker --app, and their errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from awa.cli import parser
from awa.cli.worker import child_command, load_client, parse_queues
from awa.errors import ConfigurationError
from tests.support import eventually, states, wait_for_state

ROOT = Path(__file__).resolve().parents[2]


async def run_awa(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awa",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_migrate_command_reports_an_up_to_date_schema(database_url):
    code, out, _ = await run_awa("migrate", "--database-url", database_url)
    assert code == 0
    assert out.strip() == "the schema is up to date"


async def test_worker_command_runs_the_apps_tasks_until_sigterm(
    client, conn, database_url, tmp_path
):
    (tmp_path / "cli_app.py").write_text(
        textwrap.dedent(f"""
        import awa
        client = awa.AsyncClient({database_url!r})

        @client.task(dict, kind="cli_job", queue="cli")
        async def cli_job(job):
            return None
    """)
    )
    await client.insert_many([{}] * 5, kind="cli_job", queue="cli")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awa",
        "worker",
        "--app",
        "cli_app:client",
        "--queue",
        "cli=2",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def done() -> bool:
            return (await states(conn)).get("completed") == 5

        await eventually(done, timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    assert "worker" in err.decode() and "stopped" in err.decode()
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_worker_command_explains_a_bad_app(database_url):
    code, _, err = await run_awa("worker", "--app", "json:dumps")
    assert code == 2  # usage: an --app that does not load
    assert "not an awa.AsyncClient" in err


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
async def test_a_bad_process_count_is_a_usage_error_naming_the_option(value):
    code, _, err = await run_awa("worker", "--app", "json:dumps", "--processes", value)
    assert code == 2, err
    assert "error: argument --processes:" in err
    assert "Traceback" not in err


async def test_several_processes_check_the_app_once_before_starting_any(database_url):
    code, _, err = await run_awa("worker", "--app", "json:dumps", "--processes", "3")
    assert code == 2  # usage: an --app that does not load
    assert err.count("not an awa.AsyncClient") == 1
    assert "started" not in err


def test_children_run_the_same_command_as_one_process_that_does_not_migrate():
    command = child_command(["-v", "worker", "--app", "m:c", "--processes", "4", "--migrate"])
    assert command[:3] == [sys.executable, "-m", "awa"]
    options = parser().parse_args(command[3:])
    assert (options.app, options.processes, options.migrate, options.verbose) == (
        "m:c", 1, False, True,
    )  # fmt: skip


def test_load_client_needs_module_and_attribute():
    with pytest.raises(ConfigurationError):
        load_client("no_colon_here")


def test_queue_options_are_parsed_and_checked():
    assert parse_queues(["email=8", "default=32,weight=3,min_workers=2"]) == [
        {"name": "email", "max_workers": 8},
        {"name": "default", "max_workers": 32, "weight": 3, "min_workers": 2},
    ]
    assert parse_queues([]) is None
    for bad in ["email", "email=many", "email=8,weight", "email=8,speed=2", "email=8,weight=x"]:
        with pytest.raises(ConfigurationError, match="--queue must look like NAME=MAX_WORKERS"):
            parse_queues([bad])


async def test_a_worker_that_cannot_recover_exits_non_zero_and_says_why(restricted, conn, tmp_path):
    from tests.faults import revoked

    role, url = restricted
    (tmp_path / "sick_app.py").write_text(
        textwrap.dedent(f"""
        import functools
        import awa
        from tests.support import FAST_WORKER

        client = awa.AsyncClient({url!r})

        @client.task(dict, kind="sick_job", queue="sick")
        async def sick_job(job):
            return None

        # What the CLI's start() uses: quick maintenance, quick to give up.
        client.start = functools.partial(client.start, **FAST_WORKER, unhealthy_after=1.0)
    """)
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "worker", "--app", "sick_app:client",
        "--shutdown-timeout", "1",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        # Not merely registered: start() runs statements after registering,
        # and one refused there is a failed start (exit 1, "the database
        # refused"), not the running worker's unhealthiness this is about.
        started = await asyncio.wait_for(read_until(process.stderr, b"started on"), 30)
        async with revoked(conn, role):
            _, rest = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    err = (started + rest).decode()
    assert process.returncode == 1, err
    assert "unhealthy" in err
    assert "InsufficientPrivilege" in err


async def read_until(stream: asyncio.StreamReader | None, marker: bytes) -> bytes:
    """The lines of ``stream`` up to and including the first holding ``marker``."""
    assert stream is not None
    lines = []
    while True:
        line = await stream.readline()
        if not line:
            raise AssertionError(f"the stream ended before {marker!r}: {b''.join(lines)!r}")
        lines.append(line)
        if marker in line:
            return b"".join(lines)


CONSOLE_SCRIPT = Path(sys.executable).with_name("awa")


async def run_console_script(*args: str, cwd: Path) -> tuple[int, str, str]:
    """The installed ``awa`` script, run as a user would from their project
    (no PYTHONPATH: only what the script itself puts on sys.path)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    process = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT), *args,
        cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


def _write_app(root: Path, body: str) -> None:
    package = root / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(body))


async def test_the_console_script_imports_the_app_from_the_current_directory(
    client, conn, database_url, tmp_path
):
    _write_app(
        tmp_path,
        f"""
        import awa
        client = awa.AsyncClient({database_url!r})

        @client.task(dict, kind="script_job", queue="script")
        async def script_job(job):
            return None
        """,
    )
    await client.insert_many([{}] * 3, kind="script_job", queue="script")
    process = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT), "worker", "--app", "myapp.jobs:client",
        cwd=tmp_path,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:

        async def done() -> bool:
            return (await states(conn)).get("completed") == 3

        await eventually(done, timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()


async def test_a_missing_app_module_says_what_was_tried(tmp_path):
    code, _, err = await run_console_script(
        "worker", "--app", "nosuchapp.jobs:client", cwd=tmp_path
    )
    assert code == 2  # usage: an --app that does not load
    assert "Traceback" not in err
    assert "no module named 'nosuchapp'" in err
    assert str(tmp_path) in err  # where it looked


async def test_an_app_that_raises_on_import_is_reported_with_its_line(tmp_path):
    _write_app(tmp_path, "import awa\nclient = awa.AsyncClient(undefined_name)\n")
    code, _, err = await run_console_script("worker", "--app", "myapp.jobs:client", cwd=tmp_path)
    assert code == 2  # usage: an --app that does not load
    assert "importing 'myapp.jobs' raised NameError" in err
    assert 'jobs.py", line 2' in err, err


async def test_log_format_json_prints_one_object_per_line_with_the_jobs_fields(
    client, conn, database_url, tmp_path
):
    (tmp_path / "json_app.py").write_text(
        textwrap.dedent(f"""
        import awa
        client = awa.AsyncClient({database_url!r})

        @client.task(dict, kind="json_job", queue="json")
        async def json_job(job):
            raise ValueError("broken on purpose")
    """)
    )
    job = await client.insert({}, kind="json_job", queue="json", max_attempts=1)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "--log-format", "json", "worker",
        "--app", "json_app:client", "--queue", "json=1",
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for_state(conn, job.id, "failed")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    entries = [json.loads(line) for line in err.decode().splitlines()]
    [failure] = [entry for entry in entries if entry.get("job_id") == job.id]
    assert failure["level"] == "ERROR" and failure["logger"] == "awa.worker"
    assert (failure["kind"], failure["queue"], failure["attempt"]) == ("json_job", "json", 1)
    assert failure["error_type"] == "ValueError"
    assert "broken on purpose" in failure["message"]
    assert any("started on" in entry["message"] for entry in entries)
