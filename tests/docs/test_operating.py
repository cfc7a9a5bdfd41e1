"""Every command docs/operating.md shows is one the command line accepts.

The guide's outputs were printed by real runs; what can drift without
anyone noticing is the command lines themselves (an option renamed, a
subcommand moved). Each is parsed here by ``awa``'s own parser, which
exits with status 2 on a command line it refuses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from awa.cli import parser

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operating.md"

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
