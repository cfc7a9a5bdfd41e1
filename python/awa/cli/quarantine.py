"""``awa quarantine list | release``: the fingerprints (kind and arguments)
whose jobs kept killing their workers; claims hold their jobs until
released (docs/reliability.md)."""

from __future__ import annotations

import argparse
from typing import Any

from awa.cli.common import add_database_options, add_json_option, client
from awa.cli.output import NotFound, Reply, when
from awa.quarantine import QuarantinedFingerprint


def add_commands(commands: Any) -> None:
    quarantine = commands.add_parser(
        "quarantine", help="list or release the fingerprints whose jobs kept crashing workers"
    )
    quarantine_commands = quarantine.add_subparsers(required=True, metavar="quarantine-command")
    listed = quarantine_commands.add_parser("list", help="quarantined fingerprints, newest first")
    listed.add_argument(
        "--watched", action="store_true",
        help="also those that crashed workers but are below the threshold",
    )  # fmt: skip
    listed.set_defaults(run=_list, command="quarantine list")
    release = quarantine_commands.add_parser(
        "release", help="let its jobs be claimed again and forget its crashes"
    )
    release.add_argument("fingerprint", metavar="FINGERPRINT", help="as `quarantine list` gives it")
    release.set_defaults(run=_release, command="quarantine release")
    for parser in (listed, release):
        add_database_options(parser)
        add_json_option(parser)


async def _list(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        held = await awa.list_quarantine(include_watched=options.watched)
    return Reply(
        {"fingerprints": [fingerprint_data(entry) for entry in held]},
        [describe_fingerprint(entry) for entry in held] or ["nothing is quarantined"],
    )


async def _release(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        released = await awa.release_quarantine(options.fingerprint)
    if not released:
        raise NotFound(f"no fingerprint {options.fingerprint} is quarantined or watched")
    return Reply(
        {"fingerprint": options.fingerprint, "released": True},
        [f"released {options.fingerprint}: its jobs may be claimed again"],
    )


def fingerprint_data(entry: QuarantinedFingerprint) -> dict[str, Any]:
    return {
        "fingerprint": entry.fingerprint,
        "kind": entry.kind,
        "crashes": entry.crashes,
        "window_started_at": entry.window_started_at,
        "last_crash_at": entry.last_crash_at,
        "last_job_id": entry.last_job_id,
        "quarantined_at": entry.quarantined_at,
        "reason": entry.reason,
    }


def describe_fingerprint(entry: QuarantinedFingerprint) -> str:
    status = "quarantined " + when(entry.quarantined_at) if entry.quarantined_at else "watched"
    return (
        f"{entry.fingerprint}  kind {entry.kind}  {entry.crashes} crashes  {status}  "
        f"last job {entry.last_job_id}  {entry.reason or ''}"
    ).rstrip()
