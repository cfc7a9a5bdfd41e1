"""``client.health_check()``: whether the database answers and its schema is
this code's, which worker processes of the fleet beat lately, who leads
maintenance, and how this client's own worker is (``awa health``)."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Protocol

from awa import sql
from awa.config import MAINTENANCE_ROLE
from awa.db import Database


class RunningWorker(Protocol):
    """What a health check reads of this client's worker."""

    @property
    def running(self) -> bool: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def unhealthy_reason(self) -> str | None: ...

    @property
    def failing_services(self) -> tuple[str, ...]: ...

    def queue_load(self) -> list[tuple[str, int, int]]: ...


@dataclass(frozen=True)
class QueueLoad:
    """One queue of this client's worker: the jobs it runs of it now, and
    its slots (``max_workers``)."""

    queue: str
    running: int
    capacity: int


@dataclass(frozen=True)
class WorkerHealth:
    """A registered worker process, as its row in ``awa.workers`` says."""

    id: int
    hostname: str
    pid: int
    queues: tuple[str, ...]
    started_at: datetime.datetime
    heartbeat_at: datetime.datetime
    #: It beat within the heartbeat staleness (else its claims will be rescued).
    alive: bool


@dataclass(frozen=True)
class LeaderHealth:
    """Who leads maintenance (scheduling, rescues, sweeps, periodic jobs)."""

    worker_id: int
    term: int
    elected_at: datetime.datetime
    expires_at: datetime.datetime
    #: Its lease still runs (else the next election hands the role over).
    live: bool


@dataclass(frozen=True)
class HealthReport:
    #: The schema is this code's, and this client's worker (if it runs one)
    #: is healthy: what ``/healthz`` and ``awa health``'s status say.
    healthy: bool
    #: One sentence per check that failed (empty when healthy).
    problems: tuple[str, ...]
    #: One query's round trip, in milliseconds.
    round_trip_ms: float
    #: The newest migration applied (``None``: awa never migrated it).
    schema_version: int | None
    #: The newest migration this code has.
    latest_schema_version: int
    workers: tuple[WorkerHealth, ...]
    leader: LeaderHealth | None
    #: This client's worker: ``None`` when it runs none.
    this_worker_healthy: bool | None
    #: This client's worker's queues, in flight and capacity (empty without one).
    queues: tuple[QueueLoad, ...] = ()
    #: Services of this client's worker failing right now (each is retried
    #: with backoff; one failing past ``unhealthy_after`` makes it unhealthy).
    failing_services: tuple[str, ...] = ()


async def check(db: Database, worker: RunningWorker | None, staleness_s: float) -> HealthReport:
    started = time.perf_counter()
    version = await db.schema_version()
    round_trip_ms = (time.perf_counter() - started) * 1000
    problems = []
    if version is None or version < sql.LATEST_VERSION:
        problems.append(
            f"the schema is at migration {version or 'none'}, this code needs "
            f"{sql.LATEST_VERSION}: run awa migrate"
        )
        workers: tuple[WorkerHealth, ...] = ()
        leader = None
    else:
        workers = tuple(_worker(row) for row in await db.fetch("workers_list", staleness_s))
        row = await db.fetchrow("leaders_current", MAINTENANCE_ROLE)
        leader = None if row is None else _leader(row)
    this_worker_healthy = None
    queues: tuple[QueueLoad, ...] = ()
    failing: tuple[str, ...] = ()
    if worker is not None and worker.running:
        this_worker_healthy = worker.healthy
        if not worker.healthy:
            problems.append(f"this process's worker is unhealthy: {worker.unhealthy_reason}")
        queues = tuple(QueueLoad(*load) for load in worker.queue_load())
        failing = worker.failing_services
    return HealthReport(
        healthy=not problems,
        problems=tuple(problems),
        round_trip_ms=round_trip_ms,
        schema_version=version,
        latest_schema_version=sql.LATEST_VERSION,
        workers=workers,
        leader=leader,
        this_worker_healthy=this_worker_healthy,
        queues=queues,
        failing_services=failing,
    )


def _worker(row: Any) -> WorkerHealth:
    return WorkerHealth(
        id=row["id"],
        hostname=row["hostname"],
        pid=row["pid"],
        queues=tuple(row["queues"]),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        alive=row["alive"],
    )


def _leader(row: Any) -> LeaderHealth:
    return LeaderHealth(
        worker_id=row["worker_id"],
        term=row["term"],
        elected_at=row["elected_at"],
        expires_at=row["expires_at"],
        live=row["live"],
    )
