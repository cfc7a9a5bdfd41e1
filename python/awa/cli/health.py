"""``awa health``: whether the database answers with this code's schema,
which workers of the fleet beat lately, and who leads maintenance. Exits 1
when unhealthy (its answer is printed all the same)."""

from __future__ import annotations

import argparse
from typing import Any

from awa.cli.common import add_database_options, add_json_option, client
from awa.cli.output import ExitCode, Reply, when
from awa.health import HealthReport


def add_commands(commands: Any) -> None:
    health = commands.add_parser(
        "health", help="the database, the schema, the fleet's workers and its leader"
    )
    add_database_options(health)
    add_json_option(health)
    health.set_defaults(run=_health, command="health")


async def _health(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        report = await awa.health_check()
    return Reply(
        health_data(report), describe_health(report),
        ExitCode.OK if report.healthy else ExitCode.ERROR,
    )  # fmt: skip


def health_data(report: HealthReport) -> dict[str, Any]:
    """``awa health --json``'s data (docs/cli.md, ``health``)."""
    leader = report.leader
    return {
        "healthy": report.healthy,
        "problems": list(report.problems),
        "round_trip_ms": report.round_trip_ms,
        "schema_version": report.schema_version,
        "latest_schema_version": report.latest_schema_version,
        "workers": [
            {
                "id": worker.id,
                "hostname": worker.hostname,
                "pid": worker.pid,
                "queues": list(worker.queues),
                "started_at": worker.started_at,
                "heartbeat_at": worker.heartbeat_at,
                "alive": worker.alive,
            }
            for worker in report.workers
        ],
        "leader": None if leader is None else {
            "worker_id": leader.worker_id, "term": leader.term,
            "elected_at": leader.elected_at, "expires_at": leader.expires_at,
            "live": leader.live,
        },
    }  # fmt: skip


def describe_health(report: HealthReport) -> list[str]:
    lines = [
        ("healthy" if report.healthy else "UNHEALTHY")
        + f": the database answered in {report.round_trip_ms:.1f} ms, schema "
        f"{report.schema_version or 'none'} of {report.latest_schema_version}",
        *(f"  problem: {problem}" for problem in report.problems),
    ]
    alive = [worker for worker in report.workers if worker.alive]
    lines.append(f"workers: {len(alive)} alive of {len(report.workers)} registered")
    for worker in report.workers:
        state = "alive" if worker.alive else "silent"
        lines.append(
            f"  {worker.id}  {worker.hostname} pid {worker.pid}  {state}, last beat "
            f"{when(worker.heartbeat_at)}  queues {', '.join(worker.queues)}"
        )
    leader = report.leader
    if leader is None:
        lines.append("leader: none (no worker has led maintenance yet)")
    else:
        state = "lease runs" if leader.live else "lease ran out"
        lines.append(
            f"leader: worker {leader.worker_id}, term {leader.term}, {state} until "
            f"{when(leader.expires_at)}"
        )
    return lines
