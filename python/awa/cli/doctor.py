"""``awa doctor``: whether the database can serve awa well (schema,
autovacuum, dead tuples, a pinned MVCC horizon, long transactions, LISTEN,
a pooler, clock skew; docs/operations.md). Exits 1 when a check fails
(warnings allowed); the answer is printed all the same."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from awa.cli.common import add_database_options, add_json_option, required_url
from awa.cli.output import ExitCode, Reply
from awa.client import AsyncClient
from awa.db import POOLER_MODES
from awa.doctor import DoctorCheck, DoctorReport, Status

#: How each status opens its line for a person.
_MARKS: dict[str, str] = {status: status.upper() for status in get_args(Status)}


def add_commands(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="whether the database can serve awa well: vacuum, horizon, LISTEN, …"
    )
    add_database_options(doctor)
    doctor.add_argument(
        "--pooler",
        choices=POOLER_MODES,
        help="check as a client behind a pooler in this mode (as your workers connect)",
    )
    doctor.add_argument(
        "--listen-url",
        metavar="URL",
        help="with --pooler: the direct URL your workers LISTEN on",
    )
    add_json_option(doctor)
    doctor.set_defaults(run=_doctor, command="doctor")


async def _doctor(options: argparse.Namespace) -> Reply:
    async with AsyncClient(
        required_url(options),
        connect_timeout=options.connect_timeout,
        pooler=options.pooler,
        listen_url=options.listen_url,
    ) as awa:
        report = await awa.doctor()
    return Reply(
        doctor_data(report), describe_doctor(report),
        ExitCode.OK if report.ok else ExitCode.ERROR,
    )  # fmt: skip


def doctor_data(report: DoctorReport) -> dict[str, Any]:
    """``awa doctor --json``'s data (docs/cli.md, ``doctor``)."""
    return {"ok": report.ok, "checks": [check_data(check) for check in report.checks]}


def check_data(check: DoctorCheck) -> dict[str, Any]:
    return {
        "name": check.name,
        "status": check.status,
        "message": check.message,
        "details": check.details,
    }


def describe_doctor(report: DoctorReport) -> list[str]:
    failed = sum(check.status == "fail" for check in report.checks)
    warned = sum(check.status == "warn" for check in report.checks)
    lines = [f"{_MARKS[check.status]:4}  {check.name}: {check.message}" for check in report.checks]
    verdict = "ok" if report.ok else "NOT OK"
    lines.append(f"{verdict}: {failed} failed, {warned} warned of {len(report.checks)} checks")
    return lines
