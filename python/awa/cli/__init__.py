"""The command line: ``awa`` (= ``python -m awa``) ``migrate | worker |
jobs | dlq | quarantine | queues | periodic | health | doctor | serve | demo``.
``--json`` makes a command print one JSON object; the exit statuses are
stable (docs/cli.md)."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from awa import __version__, log_format
from awa.cli import dlq, doctor, health, jobs, periodic, quarantine, queues, serve, worker
from awa.cli.common import add_database_options, add_json_option, client, event_loop_runner
from awa.cli.output import ExitCode, Reply, print_failure, print_reply, print_usage_failure
from awa.errors import ConfigurationError

log = logging.getLogger("awa.cli")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options = parser(as_json="--json" in args).parse_args(args)
    # What --processes N re-runs in each child.
    options.argv = args
    as_json = bool(getattr(options, "json", False))
    log_format.configure(logging.DEBUG if options.verbose else logging.INFO, options.log_format)
    try:
        reply = event_loop_runner(options.loop)(options.run(options))
    except BaseException as error:  # every failure is named, never a traceback
        if isinstance(error, SystemExit):
            raise
        if not isinstance(error, KeyboardInterrupt):
            log.debug("%s failed", options.command, exc_info=error)
        return print_failure(options.command, error, as_json=as_json)
    return print_reply(options.command, reply, as_json=as_json)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose complaints (exit status 2) come as an
    envelope when the command line asks for ``--json``."""

    as_json = False

    def error(self, message: str) -> NoReturn:
        if self.as_json:
            print_usage_failure(self.prog.removeprefix("awa").strip(), message)
            sys.exit(int(ExitCode.USAGE))
        super().error(message)


def parser(*, as_json: bool = False) -> argparse.ArgumentParser:
    _Parser.as_json = as_json
    root = _Parser(prog="awa", description=__doc__)
    try:
        version = importlib.metadata.version("awa-queue")
    except importlib.metadata.PackageNotFoundError:
        version = f"{__version__} (source tree: awa-queue is not installed, so awa.__version__)"
    root.add_argument("--version", action="version", version=f"%(prog)s {version}")
    root.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    root.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (docs/cli.md) instead of lines for a person",
    )
    root.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text lines, or one JSON object per line with each job's fields",
    )
    root.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: uvloop when installed (awa-queue[uvloop]), else asyncio's",
    )
    commands = root.add_subparsers(required=True, metavar="command")

    migrate = commands.add_parser("migrate", help="bring the awa schema up to date")
    migrate.add_argument(
        "--dry-run", action="store_true", help="only say which migrations it would apply"
    )
    add_database_options(migrate)
    add_json_option(migrate)
    migrate.set_defaults(run=_migrate, command="migrate")

    worker.add_commands(commands)
    jobs.add_commands(commands)
    dlq.add_commands(commands)
    quarantine.add_commands(commands)
    health.add_commands(commands)
    doctor.add_commands(commands)
    queues.add_commands(commands)
    periodic.add_commands(commands)
    serve.add_commands(commands)

    demo = commands.add_parser("demo", help="enqueue and work a few hundred real jobs")
    demo.add_argument(
        "--database-url",
        metavar="URL",
        help="a server to run on, in a database the demo creates and drops "
        "(default: AWA_DATABASE_URL's server, else a throwaway embedded one)",
    )
    demo.add_argument("--jobs", type=int, default=300, help="how many jobs to enqueue")
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo's database afterwards (and say where)"
    )
    demo.set_defaults(run=_demo, command="demo")
    return root


async def _migrate(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        if options.dry_run:
            pending = await awa.pending_migrations()
            return Reply(
                {"applied": [], "pending": [{"version": v, "name": n} for v, n in pending]},
                [f"would apply {v:04d}_{n}" for v, n in pending] or ["the schema is up to date"],
            )
        applied = await awa.migrate()
    return Reply(
        {"applied": applied, "pending": []},
        [f"applied migrations {applied}" if applied else "the schema is up to date"],
    )


async def _demo(options: argparse.Namespace) -> Reply:
    from awa import demo

    if getattr(options, "json", False):
        raise ConfigurationError("awa demo prints its progress for a person: it takes no --json")

    code = await demo.run(
        options.database_url or os.environ.get("AWA_DATABASE_URL"), options.jobs, keep=options.keep
    )
    return Reply({"exit_code": code}, [], ExitCode.OK if code == 0 else ExitCode.ERROR)
