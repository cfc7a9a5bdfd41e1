"""Periodic jobs: ``client.periodic(...)`` schedules, their fire times, and
the admin calls (``list_periodic``, ``pause_periodic``, ``resume_periodic``,
``trigger_periodic``, ``delete_periodic``).

Overview: a schedule is registered in code on a client; the maintenance
leader of a worker started from that client keeps ``awa.periodic`` in step
with its schedules (:mod:`awa.maintenance.periodic`) and enqueues each fire
time once across the fleet: the row's ``next_fire_at`` is moved by a
compare-and-set in the transaction that inserts the fire's jobs, so a
leader that lost its lease mid-pass, or a restarted one, cannot enqueue a
fire time twice. Jobs carry ``metadata["cron_name"]`` and
``metadata["cron_fire_at"]`` (ISO 8601, UTC).

Cron expressions have 5 fields (minute hour day-of-month month
day-of-week) or 6 (seconds first), parsed by croniter; fire times are
computed in the schedule's IANA time zone, so a daily 02:30 in
Europe/Berlin follows DST (a time the clocks skip fires once, right after;
a time they repeat fires once).
"""

from __future__ import annotations

import datetime
import json
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from croniter import croniter

from awa import _core
from awa.db import Database
from awa.errors import PeriodicNotFound, ValidationError, check_text

MissedFirePolicy = Literal["coalesce", "catch_up", "skip"]
MISSED_FIRE_POLICIES: Final = ("coalesce", "catch_up", "skip")
#: A fire time more than this late was missed (no leader ran then): the
#: ``skip`` policy drops it; ``coalesce`` folds all missed ones into one job.
MISSED_AFTER_S: Final = 60.0
#: The most fire times one pass enqueues for one schedule (``catch_up``
#: after a long outage); the rest follow on the next passes.
MAX_FIRES_PER_PASS: Final = 1000
#: The insert options a schedule keeps for its jobs.
JOB_OPTIONS: Final = ("queue", "priority", "max_attempts", "tags", "metadata", "schema_version")


@dataclass(frozen=True)
class Schedule:
    """How a periodic job fires (stored in ``awa.periodic``)."""

    name: str
    cron: str
    timezone: str
    missed_fire_policy: MissedFirePolicy

    def next_after(self, moment: datetime.datetime) -> datetime.datetime:
        """The first fire time strictly after ``moment``, in UTC."""
        start = moment.astimezone(zoneinfo.ZoneInfo(self.timezone))
        times = croniter(self.cron, start, second_at_beginning=True)
        while True:
            found: datetime.datetime = times.get_next(datetime.datetime)
            # When the clocks go back, a wall-clock time comes twice; it fires
            # once (the first time), as cron does.
            if found.replace(tzinfo=None) > start.replace(tzinfo=None):
                return found.astimezone(datetime.UTC)

    def due(
        self, first: datetime.datetime, now: datetime.datetime
    ) -> tuple[list[datetime.datetime], datetime.datetime]:
        """The fire times to enqueue now, given the first one not yet
        enqueued (``first`` ≤ ``now``), by the missed-fire policy; and the
        next fire time after them."""
        times: list[datetime.datetime] = []
        moment = first
        while moment <= now and len(times) < MAX_FIRES_PER_PASS:
            times.append(moment)
            moment = self.next_after(moment)
        if self.missed_fire_policy == "catch_up":
            return times, moment
        late = now - datetime.timedelta(seconds=MISSED_AFTER_S)
        on_time = [time for time in times if time >= late]
        if self.missed_fire_policy == "skip" or on_time:
            return on_time, moment
        return times[-1:], moment  # coalesce: the missed fires become one job, the latest


@dataclass(frozen=True)
class PeriodicJob:
    """A schedule registered in code, with the job each fire enqueues."""

    schedule: Schedule
    kind: str
    args: Any
    #: Insert options of its jobs (queue, priority, max_attempts, tags, metadata,
    #: schema_version).
    options: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.schedule.name


@dataclass(frozen=True)
class PeriodicInfo:
    """A schedule as ``awa.periodic`` holds it (``list_periodic``)."""

    name: str
    cron: str
    timezone: str
    kind: str
    queue: str | None
    #: The arguments of its jobs, as stored (JSON).
    args: Any
    #: The insert options of its jobs (queue, priority, max_attempts, tags, metadata,
    #: schema_version).
    options: Mapping[str, Any]
    missed_fire_policy: str
    paused: bool
    #: Set when the leader's code no longer registers it: it never fires.
    retired_at: datetime.datetime | None
    last_fire_at: datetime.datetime | None
    next_fire_at: datetime.datetime


def schedule_of(name: Any, cron: Any, timezone: Any, missed_fire_policy: Any) -> Schedule:
    """A :class:`Schedule`, or :class:`ValidationError` naming what is wrong."""
    check_name(name)
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise ValidationError(
            f"cron_expr: must be a cron expression of 5 fields, or 6 with seconds first "
            f"(got {cron!r})",
            "cron_expr",
        )
    if not croniter.is_valid(cron, second_at_beginning=True):
        raise ValidationError(f"cron_expr: {cron!r} is not a valid cron expression", "cron_expr")
    if not isinstance(timezone, str):
        raise ValidationError(f"timezone: must be an IANA zone name (got {timezone!r})", "timezone")
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"timezone: {timezone!r} is not an IANA time zone (e.g. 'UTC', 'Europe/Berlin')",
            "timezone",
        ) from None
    if missed_fire_policy not in MISSED_FIRE_POLICIES:
        raise ValidationError(
            f"missed_fire_policy: must be one of {', '.join(MISSED_FIRE_POLICIES)} "
            f"(got {missed_fire_policy!r})",
            "missed_fire_policy",
        )
    return Schedule(name, cron, timezone, missed_fire_policy)


def check_name(name: Any) -> str:
    return check_text(name, "name", _core.MAX_NAME_CHARS)


def fire_options(
    options: Mapping[str, Any], name: str, fire_at: datetime.datetime, **metadata: Any
) -> dict[str, Any]:
    """The insert options of a fire's job: the schedule's, with its name and
    fire time (and ``metadata``) added to the schedule's metadata."""
    return {
        **options,
        "metadata": {
            **(options.get("metadata") or {}),
            "cron_name": name,
            "cron_fire_at": fire_at.isoformat(),
            **metadata,
        },
    }


# ── admin ───────────────────────────────────────────────────────────────


async def list_periodic(db: Database) -> list[PeriodicInfo]:
    await db.require_schema()
    return [_info(row) for row in await db.fetch("periodic_list")]


async def get(db: Database, name: str) -> PeriodicInfo:
    check_name(name)
    await db.require_schema()
    row = await db.fetchrow("periodic_get", name)
    if row is None:
        raise _unknown(name)
    return _info(row)


async def set_paused(db: Database, name: str, paused: bool) -> PeriodicInfo:
    """Pauses or resumes a schedule; a resumed one fires from now on (what
    it would have fired while paused is not made up)."""
    check_name(name)
    await db.require_schema()
    row = await db.fetchrow("periodic_get", name)
    if row is None:
        raise _unknown(name)
    schedule = Schedule(row["name"], row["cron"], row["timezone"], row["missed_fire_policy"])
    now = await db.fetchval("periodic_now")
    changed = await db.fetchrow("periodic_set_paused", name, paused, schedule.next_after(now))
    if changed is None:
        raise _unknown(name)
    return _info(changed)


async def delete(db: Database, name: str) -> bool:
    """Removes a schedule's row; returns whether there was one. One still
    registered in the leader's code comes back on its next pass."""
    check_name(name)
    await db.require_schema()
    return await db.fetchval("periodic_delete", name) is not None


def _unknown(name: str) -> PeriodicNotFound:
    return PeriodicNotFound(name)


def _info(row: Any) -> PeriodicInfo:
    options = json.loads(row["options"])
    return PeriodicInfo(
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        kind=row["kind"],
        queue=options.get("queue"),
        args=json.loads(row["args"]),
        options=options,
        missed_fire_policy=row["missed_fire_policy"],
        paused=row["paused"],
        retired_at=row["retired_at"],
        last_fire_at=row["last_fire_at"],
        next_fire_at=row["next_fire_at"],
    )
