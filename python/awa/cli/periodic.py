"""``awa periodic list | pause | resume | trigger``: the cron schedules the
database knows (docs/flow-control.md)."""

from __future__ import annotations

import argparse
from typing import Any

from awa.cli.common import add_database_options, add_json_option, client
from awa.cli.output import Reply, when
from awa.periodic import PeriodicInfo


def add_commands(commands: Any) -> None:
    periodic = commands.add_parser("periodic", help="list, pause, resume or trigger periodic jobs")
    periodic_commands = periodic.add_subparsers(required=True, metavar="periodic-command")
    listed = periodic_commands.add_parser("list", help="every periodic job the database knows")
    listed.add_argument(
        "--payload", action="store_true", help="also print each one's args and insert options"
    )
    listed.set_defaults(run=_list, command="periodic list")
    parsers = [listed]
    for verb, run, about in (
        ("pause", _pause, "stop it firing, fleet-wide"),
        ("resume", _resume, "let it fire again from its next time after now"),
        ("trigger", _trigger, "enqueue its job now, outside its schedule"),
    ):
        command = periodic_commands.add_parser(verb, help=about)
        command.add_argument("name", metavar="NAME")
        command.set_defaults(run=run, command=f"periodic {verb}")
        parsers.append(command)
    for parser in parsers:
        add_database_options(parser)
        add_json_option(parser)


async def _list(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        schedules = await awa.list_periodic()
    return Reply(
        {"periodic": [periodic_data(info, with_payload=options.payload) for info in schedules]},
        [describe_periodic(info) for info in schedules] or ["no periodic jobs"],
    )


async def _pause(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        return periodic_reply(await awa.pause_periodic(options.name))


async def _resume(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        return periodic_reply(await awa.resume_periodic(options.name))


async def _trigger(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        job = await awa.trigger_periodic(options.name)
    return Reply(
        {"name": options.name, "job": {"id": job.id, "kind": job.kind, "queue": job.queue}},
        [f"periodic job {options.name}: enqueued job {job.id} (kind {job.kind}, "
         f"queue {job.queue})"],
    )  # fmt: skip


def periodic_reply(info: PeriodicInfo) -> Reply:
    return Reply(periodic_data(info, with_payload=False), [describe_periodic(info)])


def periodic_data(info: PeriodicInfo, *, with_payload: bool) -> dict[str, Any]:
    """A schedule as ``--json`` gives it (docs/cli.md, ``periodic``)."""
    data: dict[str, Any] = {
        "name": info.name,
        "cron": info.cron,
        "timezone": info.timezone,
        "kind": info.kind,
        "queue": info.queue,
        "missed_fire_policy": info.missed_fire_policy,
        "paused": info.paused,
        "retired_at": info.retired_at,
        "last_fire_at": info.last_fire_at,
        "next_fire_at": info.next_fire_at,
    }
    if with_payload:
        data["args"] = info.args
        data["options"] = dict(info.options)
    return data


def describe_periodic(info: PeriodicInfo) -> str:
    """One line of ``awa periodic list``."""
    if info.retired_at is not None:
        status = f"retired {when(info.retired_at)}"
    elif info.paused:
        status = "paused"
    else:
        status = f"next {when(info.next_fire_at)}"
    return (
        f"{info.name}  {info.cron!r} {info.timezone}  kind {info.kind}  queue {info.queue}  "
        f"{status}  last {when(info.last_fire_at)}"
    )
