"""docs/operating.md: every command it shows is one the command line
accepts, and its worker script runs.

The guide's outputs were printed by real runs; what can drift without
anyone noticing is the command lines themselves (an option renamed, a
subcommand moved). Each is parsed here by ``awa``'s own parser, which
exits with status 2 on a command line it refuses."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import sys
import textwrap
from pathlib import Path

import asyncpg
import pytest
import yaml

import awa
from awa.cli import parser
from tests.support import eventually

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operating.md"

#: The guide's app, ``shop.jobs``, with the parts the guide leaves out.
SHOP_JOBS = textwrap.dedent(
    """
    from pydantic import BaseModel

    import awa

    client = awa.AsyncClient()


    class SendEmail(BaseModel):
        to: str
        subject: str


    @client.task(SendEmail, queue="email")
    async def send_email(job: awa.Job[SendEmail]) -> None:
        pass
    """
)

#: The groups of commands the guide promises to show, each at least once.
DAILY_COMMANDS = {
    "migrate",
    "worker",
    "jobs",
    "dlq",
    "quarantine",
    "queues",
    "periodic",
    "health",
    "doctor",
    "serve",
}


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def command_lines(text: str) -> list[str]:
    """The ``awa …`` command lines of the guide's code blocks: those typed
    at a prompt (``$ awa …``), those of shell blocks and a unit's
    ``ExecStart``, with backslash continuations joined."""
    commands = []
    for block in code_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            line = line.removeprefix("$ ").removeprefix("ExecStart=")
            line = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", line)  # the environment it sets
            line = re.sub(r"^\S*/bin/awa ", "awa ", line)
            if line.startswith("awa ") and not line.startswith("awa ."):
                commands.append(line.split("  #", 1)[0])
    return commands


def container_commands(text: str) -> list[str]:
    """The ``awa …`` commands of the Kubernetes manifests' containers."""
    commands = []
    for block in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        manifest = yaml.safe_load(block)
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            if container["command"][0] == "awa":
                commands.append(shlex.join(container["command"]))
    return commands


TEXT = GUIDE.read_text(encoding="utf-8")
COMMANDS = command_lines(TEXT) + container_commands(TEXT)


def test_the_guide_shows_every_daily_command() -> None:
    shown = set()
    for command in COMMANDS:
        words = [word for word in shlex.split(command)[1:] if not word.startswith("-")]
        shown.add(words[0])
    assert sorted(DAILY_COMMANDS - shown) == [], "the guide does not show these commands"


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_line_is_accepted(command: str) -> None:
    args = shlex.split(command)[1:]
    try:
        options = parser(as_json="--json" in args).parse_args(args)
    except SystemExit as refused:
        pytest.fail(f"awa refuses {command!r} (exit status {refused.code})")
    assert options.command


def worker_script(text: str) -> str:
    """The guide's ``shop/worker.py``."""
    [script] = [block for block in code_blocks(text) if block.startswith("# shop/worker.py")]
    return script


async def test_the_worker_script_works_jobs_and_stops_on_sigterm(
    database_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "shop" / "jobs.py").write_text(SHOP_JOBS, encoding="utf-8")
    (tmp_path / "shop" / "worker.py").write_text(worker_script(TEXT), encoding="utf-8")
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "shop.worker",
        cwd=tmp_path,
        env={
            **os.environ,
            "AWA_DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "python")]),
        },
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with awa.AsyncClient(database_url) as producer:
            job = await producer.insert(
                {"to": "ada@example.com", "subject": "Welcome"}, kind="send_email", queue="email"
            )

        async def completed() -> bool:
            if worker.returncode is not None:
                assert worker.stderr is not None
                err = await worker.stderr.read()
                pytest.fail(f"the script exited with status {worker.returncode}: {err.decode()}")
            state = await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job.id)
            return bool(state == "completed")

        await eventually(completed, timeout=30)
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), 60)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    assert worker.returncode == 0, err.decode()
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 0
