"""``client.explain(job_id)``: why a job is not running now.

One read (``jobs_explain``) gathers what decides it: the job's state and
``run_at``, whether its queue is paused, whether its fingerprint is
quarantined, how many live workers serve its queue, and how many due jobs
of its queue a claim takes first. The first reason that applies, in the
order below, is the answer.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from awa.config import DEFAULT_HEARTBEAT_STALENESS_S
from awa.db import Database
from awa.errors import JobNotFound

#: Workers whose heartbeat is older than this count as gone (the workers'
#: own default; each worker's setting is known only to it).
LIVE_WORKER_S: Final = DEFAULT_HEARTBEAT_STALENESS_S


class ExplainReason(StrEnum):
    """Why a job is where it is (the ``.reason`` of :class:`Explanation`)."""

    #: Finished (completed, failed or cancelled): it never runs again on its own.
    FINISHED = "finished"
    #: It runs now.
    RUNNING = "running"
    #: Parked until its callback is resolved or times out.
    WAITING_FOR_CALLBACK = "waiting_for_callback"
    #: A worker could not decode its arguments: parked until ``retry_undecodable``.
    UNDECODABLE = "undecodable"
    #: Its ``run_at`` is in the future (a delay, a retry's backoff, a snooze).
    SCHEDULED = "scheduled"
    #: Its queue is paused (``pause_queue``).
    QUEUE_PAUSED = "queue_paused"
    #: Its fingerprint is quarantined: claims hold it.
    QUARANTINED = "quarantined"
    #: No live worker serves its queue.
    NO_WORKER = "no_worker"
    #: Its queue's fleet-wide ceiling (``global_max_running``) is reached.
    CEILING_REACHED = "ceiling_reached"
    #: Its partition runs as many jobs as its queue's cap per partition
    #: (``max_workers_per_partition``) lets it.
    PARTITION_CAP_REACHED = "partition_cap_reached"
    #: Its queue's rate limit has no token left until ``until``.
    RATE_LIMITED = "rate_limited"
    #: Due jobs of its queue with a higher priority (or older) go first.
    BEHIND_OTHER_JOBS = "behind_other_jobs"
    #: Nothing holds it back: the next claim of its queue takes it.
    NEXT = "next"


@dataclass(frozen=True)
class Explanation:
    job_id: int
    reason: ExplainReason
    #: One sentence for a person.
    message: str
    #: When it becomes due (``SCHEDULED``) or its callback times out.
    until: datetime.datetime | None = None
    #: Due jobs ahead of it (``BEHIND_OTHER_JOBS``; counted up to 10 000).
    ahead: int | None = None
    #: The running jobs holding its queue's ceiling (``CEILING_REACHED``) or
    #: its partition's cap (``PARTITION_CAP_REACHED``).
    holders: tuple[int, ...] = ()


async def explain(db: Database, job_id: int) -> Explanation:
    await db.require_schema()
    row = await db.fetchrow("jobs_explain", job_id, LIVE_WORKER_S)
    if row is None:
        raise JobNotFound(job_id)
    return _explain(row)


def _explain(row: Any) -> Explanation:
    job_id, state, queue = row["id"], row["state"], row["queue"]

    def because(reason: ExplainReason, message: str, **extra: Any) -> Explanation:
        return Explanation(job_id, reason, message, **extra)

    if state in ("completed", "failed", "cancelled"):
        return because(ExplainReason.FINISHED, f"job {job_id} is {state}: it will not run again")
    if state == "running":
        return because(ExplainReason.RUNNING, f"job {job_id} is running (attempt {row['attempt']})")
    if state == "waiting_external":
        return because(
            ExplainReason.WAITING_FOR_CALLBACK,
            f"job {job_id} waits for its callback (times out at {row['callback_timeout_at']})",
            until=row["callback_timeout_at"],
        )
    if state == "undecodable":
        return because(
            ExplainReason.UNDECODABLE,
            f"a worker could not decode job {job_id} ({row['failure_reason']}); it waits for "
            "retry_undecodable, once workers that can read it run",
        )
    if row["run_at"] > row["now"]:
        return because(
            ExplainReason.SCHEDULED,
            f"job {job_id} is {state} until {row['run_at'].isoformat()}",
            until=row["run_at"],
        )
    if row["paused"]:
        by = f" by {row['paused_by']}" if row["paused_by"] else ""
        return because(
            ExplainReason.QUEUE_PAUSED,
            f"queue {queue} is paused{by}: no worker claims from it until resume_queue",
        )
    if row["quarantined"]:
        return because(
            ExplainReason.QUARANTINED,
            f"job {job_id}'s kind and arguments are quarantined (they kept killing workers); "
            "release_quarantine lets it run",
        )
    if not row["live_workers"]:
        return because(
            ExplainReason.NO_WORKER,
            f"no live worker serves queue {queue} (none heartbeat in the last {LIVE_WORKER_S:g} s)",
        )
    held_back = _held_back_by_limits(row, because)
    if held_back is not None:
        return held_back
    ahead = row["ahead"] or 0
    if ahead:
        more = "+" if ahead >= 10_000 else ""
        return because(
            ExplainReason.BEHIND_OTHER_JOBS,
            f"{ahead}{more} due jobs of queue {queue} go first (higher priority, or older)",
            ahead=ahead,
        )
    return because(
        ExplainReason.NEXT, f"job {job_id} is next in queue {queue}: the next claim takes it"
    )


def _held_back_by_limits(row: Any, because: Callable[..., Explanation]) -> Explanation | None:
    """The queue's ceiling, its cap per partition or a rate limit, when one
    holds the job back now."""
    queue, holders = row["queue"], tuple(row["ceiling_holders"] or ())
    ceiling = row["global_max_running"]
    if ceiling is not None and len(holders) >= ceiling:
        return because(
            ExplainReason.CEILING_REACHED,
            f"queue {queue} runs {len(holders)} jobs, its ceiling (global_max_running="
            f"{ceiling}): jobs {_listed(holders)} hold the slots",
            holders=holders,
        )
    cap, key = row["max_workers_per_partition"], row["partition_key"]
    partition_holders = tuple(row["partition_holders"] or ())
    if cap is not None and key is not None and len(partition_holders) >= cap:
        return because(
            ExplainReason.PARTITION_CAP_REACHED,
            f"partition {key} of queue {queue} runs {len(partition_holders)} jobs, its cap "
            f"(max_workers_per_partition={cap}): jobs {_listed(partition_holders)} hold the slots",
            holders=partition_holders,
        )
    for tokens, rate, burst, what in (
        (row["rate_tokens"], row["rate_per_s"], row["rate_burst"], f"queue {queue}"),
        (row["class_tokens"], row["class_rate_per_s"], row["class_burst"],
         f"its rate class {row['rate_class']}"),
    ):  # fmt: skip
        if tokens is not None and tokens < 1:
            wait_s = (1 - tokens) / rate
            return because(
                ExplainReason.RATE_LIMITED,
                f"{what} is rate limited ({rate:g}/s, burst {burst}): the next token comes in "
                f"{wait_s:.3g} s",
                until=row["now"] + datetime.timedelta(seconds=wait_s),
            )
    return None


def _listed(ids: tuple[int, ...]) -> str:
    """The first ten ids, and an ellipsis for the rest."""
    return ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
