"""Per-minute activity of each queue: the jobs completed and failed for
good in each of the last minutes, as the dashboard's sparklines draw them
(``client.queue_activity()``).

Nothing extra is written for it: the counts come from ``finalized_at`` of
the jobs still in the table (the pruner's retention bounds how far back
they reach). The read scans the whole jobs table once, as
``client.queue_stats()`` does: an index on ``finalized_at`` would make every
outcome's update non-HOT (docs/development.md).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

from awa.db import Database
from awa.errors import ValidationError

#: The minutes a sparkline covers when not told.
DEFAULT_ACTIVITY_MINUTES: Final = 60
#: The most minutes one read may cover (a day).
MAX_ACTIVITY_MINUTES: Final = 24 * 60

_MINUTE: Final = datetime.timedelta(minutes=1)


@dataclass(frozen=True)
class QueueActivity:
    """One queue's finished jobs per minute, oldest minute first; the last
    minute is the current one (still filling)."""

    queue: str
    #: The start of each minute (UTC).
    minutes: tuple[datetime.datetime, ...]
    #: Jobs completed in each minute.
    completed: tuple[int, ...]
    #: Jobs failed for good (dead letters) in each minute.
    failed: tuple[int, ...]

    def totals(self, last_minutes: int) -> tuple[int, int]:
        """Completed and failed jobs over the last ``last_minutes`` minutes."""
        return sum(self.completed[-last_minutes:]), sum(self.failed[-last_minutes:])


def check_minutes(minutes: object) -> int:
    """``minutes`` as a whole number from 1 to :data:`MAX_ACTIVITY_MINUTES`,
    else a :class:`awa.ValidationError` naming the field."""
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int)
        or not 1 <= minutes <= MAX_ACTIVITY_MINUTES
    ):
        raise ValidationError(
            f"minutes: must be a whole number from 1 to {MAX_ACTIVITY_MINUTES} (got {minutes!r})",
            "minutes",
        )
    return minutes


def minute_starts(minutes: int, now: datetime.datetime) -> tuple[datetime.datetime, ...]:
    """The starts of the ``minutes`` minutes ending with the one ``now`` is in."""
    current = now.astimezone(datetime.UTC).replace(second=0, microsecond=0)
    return tuple(current - _MINUTE * back for back in range(minutes - 1, -1, -1))


async def per_minute(
    db: Database, minutes: int, now: datetime.datetime | None = None
) -> list[QueueActivity]:
    """Every queue that finished a job in the last ``minutes`` minutes (up to
    ``now``, default the present), by name; minutes without jobs count 0."""
    starts = minute_starts(minutes, now or datetime.datetime.now(datetime.UTC))
    slot = {start: index for index, start in enumerate(starts)}
    completed: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    for row in await db.fetch("jobs_activity_by_minute", starts[0]):
        index = slot.get(row["minute"].astimezone(datetime.UTC))
        if index is None:  # finished after ``now`` (a ``now`` in the past)
            continue
        queue = row["queue"]
        completed.setdefault(queue, [0] * minutes)[index] = row["completed"]
        failed.setdefault(queue, [0] * minutes)[index] = row["failed"]
    return [
        QueueActivity(queue, starts, tuple(completed[queue]), tuple(failed[queue]))
        for queue in sorted(completed)
    ]
