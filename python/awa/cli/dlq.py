"""``awa dlq list | retry | purge``: the dead-letter queue, the jobs that
failed for good (docs/lifecycle.md). The two verbs that act on many jobs
need ids, a filter or ``--all``, and ``--yes`` or a yes at the prompt."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from awa.cli.common import add_database_options, add_json_option, add_page_options, client
from awa.cli.jobs import describe_listed, job_data
from awa.cli.output import Refused, Reply
from awa.client import MAX_LIST_LIMIT
from awa.dead_letters import DeadLetter, DeadLetterReason


def add_commands(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="list, retry or purge the jobs that failed for good")
    dlq_commands = dlq.add_subparsers(required=True, metavar="dlq-command")
    listed = dlq_commands.add_parser("list", help="dead letters, newest first")
    _filters(listed)
    add_page_options(listed, MAX_LIST_LIMIT)
    listed.set_defaults(run=_list, command="dlq list")
    retry = dlq_commands.add_parser(
        "retry", help="send dead letters back to work (attempts reset, errors kept)"
    )
    purge = dlq_commands.add_parser("purge", help="delete dead letters for good")
    purge.add_argument(
        "--older-than", type=float, metavar="SECONDS",
        help="only those that failed more than this long ago (a filter by itself)",
    )  # fmt: skip
    for parser, run, verb in ((retry, _retry, "retry"), (purge, _purge, "purge")):
        parser.add_argument("ids", nargs="*", type=int, metavar="JOB_ID")
        _filters(parser)
        parser.add_argument("--all", action="store_true", help="every dead letter")
        parser.add_argument("--yes", action="store_true", help="do not ask first")
        parser.set_defaults(run=run, command=f"dlq {verb}")
    for parser in (listed, retry, purge):
        add_database_options(parser)
        add_json_option(parser)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", metavar="QUEUE")
    parser.add_argument("--kind", metavar="KIND")
    parser.add_argument(
        "--reason",
        choices=[reason.value for reason in DeadLetterReason],
        help="why they failed",
    )


async def _list(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        letters = await awa.list_dlq(
            queue=options.queue, kind=options.kind, reason=options.reason, limit=options.limit,
            include_payload=options.payload,
        )  # fmt: skip
    return Reply(
        {"dead_letters": [dead_letter_data(letter, with_payload=options.payload)
                          for letter in letters]},
        [f"{describe_listed(letter.job)}  reason {_reason(letter)}" for letter in letters]
        or ["no dead letters"],
    )  # fmt: skip


async def _retry(options: argparse.Namespace) -> Reply:
    _confirm(options, "send back to work")
    async with client(options) as awa:
        retried = await awa.retry_from_dlq(
            options.ids or None, queue=options.queue, kind=options.kind,
            reason=options.reason, everything=options.all,
        )  # fmt: skip
    return Reply({"retried": retried}, [f"retried {len(retried)} dead letters"])


async def _purge(options: argparse.Namespace) -> Reply:
    _confirm(options, "delete for good")
    older_than = None
    if options.older_than is not None:
        older_than = datetime.timedelta(seconds=options.older_than)
    async with client(options) as awa:
        purged = await awa.purge_dlq(
            options.ids or None, queue=options.queue, kind=options.kind,
            reason=options.reason, older_than=older_than, everything=options.all,
        )  # fmt: skip
    return Reply({"purged": purged}, [f"purged {purged} dead letters"])


def _confirm(options: argparse.Namespace, doing: str) -> None:
    """A bulk verb goes ahead with ids, a filter or --all, and --yes or a
    yes typed at a terminal; otherwise it is refused (exit status 4)."""
    selection = _selection(options)
    if selection is None:
        raise Refused(
            f"{options.command} acts on many jobs: give job ids, a filter (--queue, --kind, "
            "--reason" + (", --older-than" if options.command == "dlq purge" else "") + ") or --all"
        )
    if options.yes:
        return
    if getattr(options, "json", False) or not sys.stdin.isatty():
        raise Refused(f"{options.command}: add --yes to {doing} the dead letters {selection}")
    answer = input(f"{doing} the dead letters {selection}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise Refused(f"{options.command}: not confirmed")


def _selection(options: argparse.Namespace) -> str | None:
    """The dead letters a bulk verb would act on, in words (None: none given)."""
    parts = [f"{name}={value}" for name, value in (
        ("queue", options.queue), ("kind", options.kind), ("reason", options.reason),
        ("older_than", getattr(options, "older_than", None)),
    ) if value is not None]  # fmt: skip
    if options.ids:
        parts.insert(0, "ids " + ",".join(str(job_id) for job_id in options.ids))
    if parts:
        return "with " + " ".join(parts)
    return "(all of them)" if options.all else None


def dead_letter_data(letter: DeadLetter, *, with_payload: bool) -> dict[str, Any]:
    return {**job_data(letter.job, with_payload=with_payload), "reason": _reason(letter)}


def _reason(letter: DeadLetter) -> str | None:
    return None if letter.reason is None else letter.reason.value
