"""``awa queues list | stats | pause | resume | show | configure | drain``:
the queues, what waits in each, how each is doing, and their fleet-wide
settings (docs/flow-control.md)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from awa.cli.common import add_database_options, add_json_option, client
from awa.cli.output import Reply, when
from awa.job import JobState
from awa.queues import DEFAULT_STATS_WINDOW_S, UNSET, QueueConfig, QueueStats, QueueSummary


def add_commands(commands: Any) -> None:
    queues = commands.add_parser("queues", help="pause, resume, configure, drain or show a queue")
    queue_commands = queues.add_subparsers(required=True, metavar="queues-command")
    listed = queue_commands.add_parser(
        "list", help="every queue with jobs or settings: what waits in it, and its settings"
    )
    stats = queue_commands.add_parser(
        "stats", help="per queue: jobs by state, throughput, failure rate, lag, in flight"
    )
    stats.add_argument("--queue", metavar="QUEUE", help="only this queue")
    stats.add_argument(
        "--window", type=_window, default=DEFAULT_STATS_WINDOW_S, metavar="DURATION",
        help="throughput and failures over the last DURATION: 90s, 5m, 2h, 1d or seconds "
        f"(default {DEFAULT_STATS_WINDOW_S / 60:g}m)",
    )  # fmt: skip
    pause = queue_commands.add_parser("pause", help="no worker of the fleet claims from it")
    pause.add_argument("queue", metavar="QUEUE")
    pause.add_argument("--by", metavar="WHO", help="who pauses it, and why (kept until resumed)")
    resume = queue_commands.add_parser("resume", help="let workers claim from it again")
    resume.add_argument("queue", metavar="QUEUE")
    show = queue_commands.add_parser("show", help="a queue's fleet-wide settings")
    show.add_argument("queue", metavar="QUEUE")
    configure = queue_commands.add_parser(
        "configure",
        help="set a queue's flow control for the fleet (a setting not given is kept; "
        "'none' removes it; docs/flow-control.md)",
    )
    configure.add_argument("queue", metavar="QUEUE")
    configure.add_argument(
        "--priority-aging-interval", type=_or_none(float), default=UNSET,
        metavar="SECONDS|none", help="a due job gains one priority level per this long",
    )  # fmt: skip
    configure.add_argument(
        "--global-max-running", type=_or_none(int), default=UNSET,
        metavar="N|none", help="at most N of its jobs run at once across the fleet",
    )  # fmt: skip
    configure.add_argument(
        "--rate-limit", type=_or_none(_rate_limit), default=UNSET,
        metavar="RATE,BURST|none", help="at most RATE jobs start a second across the fleet, "
        "BURST at once after a lull",
    )  # fmt: skip
    configure.add_argument(
        "--fair", action=argparse.BooleanOptionalAction, default=UNSET,
        help="claim round-robin across the partitions (partition_key=) with jobs waiting",
    )  # fmt: skip
    configure.add_argument(
        "--max-workers-per-partition", type=_or_none(int), default=UNSET,
        metavar="N|none", help="at most N jobs of each partition run at once across the fleet",
    )  # fmt: skip
    drain = queue_commands.add_parser(
        "drain", help="wait until no running, due or retrying job is left (spec 002)"
    )
    drain.add_argument("queue", metavar="QUEUE")
    drain.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="give up after this long"
    )
    for parser, run in ((listed, _list), (stats, _stats), (pause, _pause), (resume, _resume),
                        (show, _show), (configure, _configure), (drain, _drain)):  # fmt: skip
        add_database_options(parser)
        add_json_option(parser)
        parser.set_defaults(run=run, command=f"queues {parser.prog.rsplit(' ', 1)[-1]}")


async def _list(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        found = await awa.list_queues()
    return Reply(
        {"queues": [summary_data(summary) for summary in found]},
        [describe_summary(summary) for summary in found] or ["no queues"],
    )


def summary_data(summary: QueueSummary) -> dict[str, Any]:
    """A queue in ``awa queues list --json`` (docs/cli.md, ``queue_summary``)."""
    return {
        **queue_data(summary.config),
        "due": summary.due,
        "running": summary.running,
        "later": summary.later,
        "waiting_external": summary.waiting_external,
        "failed": summary.failed,
        "oldest_due_at": summary.oldest_due_at,
    }


def describe_summary(summary: QueueSummary) -> str:
    """One line of ``awa queues list``."""
    counts = (
        f"{summary.due} due, {summary.running} running, {summary.later} later, "
        f"{summary.waiting_external} waiting for a callback, {summary.failed} failed"
    )
    oldest = f"; oldest due since {when(summary.oldest_due_at)}" if summary.oldest_due_at else ""
    paused = "; PAUSED" if summary.config.paused else ""
    return f"{summary.config.queue}: {counts}{oldest}{paused}"


async def _stats(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        found = await awa.queue_stats(window=options.window, queue=options.queue)
    return Reply(
        {"window_s": options.window, "queues": [stats_data(stats) for stats in found]},
        [describe_stats(stats) for stats in found] or ["no queues"],
    )


def stats_data(stats: QueueStats) -> dict[str, Any]:
    """A queue in ``awa queues stats --json`` (docs/cli.md, ``queue_stats``)."""
    return {
        "queue": stats.queue,
        "counts": {state.value: count for state, count in stats.counts.items()},
        "completed": stats.completed,
        "failed": stats.failed,
        "throughput_per_min": stats.throughput_per_min,
        "failure_rate": stats.failure_rate,
        "lag_s": stats.lag_s,
        "in_flight": stats.in_flight,
    }


def describe_stats(stats: QueueStats) -> str:
    """One line of ``awa queues stats``."""
    window = f"{stats.window_s:g}s"
    rate = "-" if stats.failure_rate is None else f"{stats.failure_rate:.1%}"
    lag = "none due" if stats.lag_s is None else f"{stats.lag_s:.1f}s"
    waiting = ", ".join(
        f"{count} {state.value}" for state, count in stats.counts.items()
        if count and state not in (JobState.Completed, JobState.Failed, JobState.Cancelled)
    ) or "nothing waiting"  # fmt: skip
    return (
        f"{stats.queue}: {stats.in_flight} in flight, lag {lag}; last {window}: "
        f"{stats.completed} completed ({stats.throughput_per_min:.1f}/min), {stats.failed} "
        f"failed (failure rate {rate}); {waiting}"
    )


#: A window as the command line gives it: seconds, or a number and a unit.
_WINDOW: re.Pattern[str] = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhd]?)\s*$")
_UNIT_S: dict[str, float] = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def _window(text: str) -> float:
    match = _WINDOW.match(text)
    if match is None or float(match["number"]) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 5m, 2h or 1d, or seconds (got {text!r})"
        )
    return float(match["number"]) * _UNIT_S[match["unit"]]


async def _pause(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        return queue_reply(await awa.pause_queue(options.queue, paused_by=options.by))


async def _resume(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        return queue_reply(await awa.resume_queue(options.queue))


async def _show(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        return queue_reply(await awa.get_queue_config(options.queue))


async def _configure(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        config = await awa.configure_queue(
            options.queue,
            priority_aging_interval=options.priority_aging_interval,
            global_max_running=options.global_max_running,
            rate_limit=options.rate_limit,
            fair=options.fair,
            max_workers_per_partition=options.max_workers_per_partition,
        )
    return queue_reply(config)


async def _drain(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        waited_for = await awa.drain_queue(options.queue, timeout=options.timeout)
    return Reply(
        {"queue": options.queue, "waited_for": waited_for},
        [f"queue {options.queue} is drained (it waited for {waited_for} jobs)"],
    )


def queue_reply(config: QueueConfig) -> Reply:
    return Reply(queue_data(config), [describe_queue(config)])


def queue_data(config: QueueConfig) -> dict[str, Any]:
    """A queue's settings as ``--json`` gives them (docs/cli.md, ``queue``)."""
    rate_limit = config.rate_limit
    return {
        "queue": config.queue,
        "paused": config.paused,
        "paused_at": config.paused_at,
        "paused_by": config.paused_by,
        "updated_at": config.updated_at,
        "priority_aging_interval": config.priority_aging_interval,
        "global_max_running": config.global_max_running,
        "rate_limit": None if rate_limit is None
        else {"rate_per_s": rate_limit[0], "burst": rate_limit[1]},
        "fair": config.fair,
        "max_workers_per_partition": config.max_workers_per_partition,
    }  # fmt: skip


def describe_queue(config: QueueConfig) -> str:
    """The line ``awa queues pause|resume|configure|show`` prints."""
    if config.paused:
        by = f" by {config.paused_by}" if config.paused_by else ""
        line = (
            f"queue {config.queue}: paused since {when(config.paused_at)}{by}; no worker claims "
            f"from it until `awa queues resume {config.queue}`"
        )
    else:
        line = f"queue {config.queue}: not paused"
    limits = []
    if config.priority_aging_interval is not None:
        limits.append(f"priority aging every {config.priority_aging_interval:g}s")
    if config.global_max_running is not None:
        limits.append(f"at most {config.global_max_running} running across the fleet")
    if config.rate_limit is not None:
        rate, burst = config.rate_limit
        limits.append(f"rate limit {rate:g}/s, burst {burst}")
    if config.fair:
        limits.append("fair across partitions")
    if config.max_workers_per_partition is not None:
        limits.append(f"at most {config.max_workers_per_partition} running per partition")
    return "; ".join([line, *limits])


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An option's value parser that also takes ``none`` (remove the setting)."""

    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")
    return parse_or_none


def _rate_limit(text: str) -> tuple[float, int]:
    rate, comma, burst = text.partition(",")
    try:
        if not comma:
            raise ValueError(text)
        return float(rate), int(burst)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RATE,BURST (jobs a second, and an integer burst), e.g. 50,5 (got {text!r})"
        ) from None
