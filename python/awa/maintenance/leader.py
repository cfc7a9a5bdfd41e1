"""Leader election: one worker per database runs maintenance.

Overview: leadership is a lease row (``awa.leaders``, role
``maintenance``), not a session lock, so it works through a pooler in
transaction mode and lapses when its holder stops acting, not only when its
connection drops. Every worker tries to take the role every
``leader_election_interval``; the one that holds it renews its lease every
third of ``leader_lease`` and runs the scheduler, the rescuer and the
pruner, each supervised (restarted with backoff when it raises).
Stepping down asks the services to stop between passes and gives a pass
under way ``PASS_FINISH_GRACE_S`` to end before cancelling it: a cancelled
statement costs a cancel request, which PgBouncer 1.18 could die of
(maintenance.passes), and redoes the pass's work at the next leader.

State model: follower → (claim returned a term) → leader → (a renewal found
another holder, or no renewal succeeded within the lease, or stop) →
follower. A leader that dies, hangs, or whose event loop is blocked stops
renewing; its lease runs out and another worker takes over within
``leader_lease`` plus one election interval. A leader that stops cleanly
gives the role up at once.

Failure handling: election and renewal errors are retried at the next
interval (and reported to the worker's health); a leader whose renewals
fail keeps leading until its lease would have run out, measured on its own
clock from before the last successful renewal was sent, then stops its
services. Two leaders at once for a moment (a former leader that has not
noticed yet) is harmless: every maintenance write is guarded and uses
``SKIP LOCKED``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final

from awa._events import wait_for_event
from awa.config import MAINTENANCE_ROLE
from awa.db import Database
from awa.worker.supervisor import Supervisor

if TYPE_CHECKING:
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.leader")

ROLE: Final = MAINTENANCE_ROLE
SERVICE: Final = "leader"

#: How long a stepping-down leader lets maintenance passes under way finish
#: before cancelling them (passes take milliseconds; a prune of a large
#: backlog can take longer, and is cut short).
PASS_FINISH_GRACE_S: Final = 2.0

#: A maintenance task: runs its passes until the event it is given is set.
MaintenanceService = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class Leader:
    def __init__(
        self,
        db: Database,
        worker_id: int,
        services: Sequence[tuple[str, MaintenanceService]],
        health: Health,
        *,
        election_interval_s: float,
        lease_s: float,
    ) -> None:
        self._db = db
        self._worker_id = worker_id
        self._services = list(services)
        self._health = health
        self._election_interval_s = election_interval_s
        self._lease_s = lease_s
        self._renew_interval_s = lease_s / 3
        self._stop = asyncio.Event()
        self._supervisor = Supervisor(health)
        self._services_stop = asyncio.Event()
        self._term: int | None = None
        self._lease_until = 0.0
        self.is_leader = False
        self.became_leader = asyncio.Event()
        self.terms = 0

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        try:
            while not self._stop.is_set():
                await self._elect_or_renew()
                interval = self._renew_interval_s if self.is_leader else self._election_interval_s
                await wait_for_event(self._stop, interval)
        finally:
            await self._step_down(resign=True)

    async def _elect_or_renew(self) -> None:
        sent_at = time.monotonic()
        try:
            term = await self._db.fetchval("leaders_claim", ROLE, self._worker_id, self._lease_s)
        except Exception as error:  # noqa: BLE001 - try again at the next interval
            self._health.failed(SERVICE, error)
            log.warning("leader election failed (%s: %s)", type(error).__name__, error)
            if self.is_leader and time.monotonic() >= self._lease_until:
                log.warning("could not renew the maintenance lease in time; stepping down")
                await self._step_down(resign=False)
            return
        self._health.ok(SERVICE)
        if term is None:
            if self.is_leader:
                log.warning("another worker took over maintenance; stepping down")
                await self._step_down(resign=False)
            return
        self._lease_until = sent_at + self._lease_s
        if self.is_leader and term == self._term:
            return
        if self.is_leader:
            # Our lease lapsed and we took the role again: the services never stopped.
            self._term = term
            return
        self._term = term
        self.terms += 1
        self.is_leader = True
        self.became_leader.set()
        log.info("this worker is now the maintenance leader (term %d)", term)
        self._services_stop = stop = asyncio.Event()
        for name, service in self._services:
            self._supervisor.spawn(name, functools.partial(service, stop))

    async def _step_down(self, *, resign: bool) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        self.became_leader.clear()
        self._services_stop.set()
        cut_short = await self._supervisor.stop_all(PASS_FINISH_GRACE_S)
        if cut_short:
            log.info(
                "maintenance passes still running after %.0fs were cancelled: %s",
                PASS_FINISH_GRACE_S, ", ".join(cut_short),
            )  # fmt: skip
        for name, _service in self._services:
            self._health.forget(name)
        term, self._term = self._term, None
        if resign and term is not None:
            try:
                await asyncio.wait_for(
                    self._db.execute("leaders_resign", ROLE, self._worker_id, term), 5.0
                )
            except Exception as error:  # noqa: BLE001 - the lease runs out on its own
                log.warning("could not give up the maintenance lease (%s)", error)
