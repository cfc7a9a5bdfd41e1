"""Messages about running jobs from other processes.

Overview: a resolution or a maintenance step that changes a job a handler
is still waiting on sends ``pg_notify('awa_control', '<verb>:<job id>')``;
the worker's notifier hands each message to its :class:`JobControl`, which
wakes whoever watches that job in this process. Verbs: ``resume`` (a
callback resumed a handler waiting in place), ``lost`` (the job left the
attempt: its callback expired), ``cancel`` (``client.cancel``: the job is
cancelled; ``job.is_cancelled()`` turns true, and the executor interrupts
handlers that opted in), ``quarantine`` (a fingerprint was quarantined or
released: reload the set of fingerprints whose claimed jobs are held).

Failure handling: notifications are a shortcut, never the only path. A
waiter also re-reads the job's row every ``WAIT_POLL_INTERVAL_S`` seconds, so a
message lost with a dropped connection delays it, never strands it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from awa.errors import AttemptLost

if TYPE_CHECKING:
    import uuid

    from awa.db import Database
    from awa.job import Job
    from awa.worker.supervisor import Health

log = logging.getLogger("awa.control")

CHANNEL: Final = "awa_control"
#: How often a waiter re-reads its job when no message arrives.
WAIT_POLL_INTERVAL_S: Final = 2.0
#: How often a worker reloads the quarantined fingerprints without being told.
QUARANTINE_RELOAD_S: Final = 30.0
QUARANTINE_SERVICE: Final = "quarantine"


def fingerprint(kind: str, args_json: str) -> bytes:
    """A job's fingerprint, as ``awa.job_fingerprint`` computes it in SQL:
    the first 16 bytes of SHA-256 over the kind, a unit separator and the
    arguments as PostgreSQL prints jsonb (which is what claims return)."""
    return hashlib.sha256(f"{kind}\x1f{args_json}".encode()).digest()[:16]


class JobControl:
    """Who in this process watches which job, and waking them."""

    def __init__(
        self,
        on_cancel: Callable[[int], None] | None = None,
        on_resumed: Callable[[Any], None] | None = None,
    ) -> None:
        self._watchers: dict[int, asyncio.Event] = {}
        self._cancelled: set[int] = set()
        #: Quarantined fingerprints: claimed jobs with one are held, not run.
        self.held: frozenset[bytes] = frozenset()
        self.reload_held = asyncio.Event()
        #: Called with the job id when a cancellation of a job arrives.
        self.on_cancel = on_cancel
        #: Called with the job's row when a handler waiting in place resumes
        #: (the worker emits ``Started``: the job re-entered execution).
        self.on_resumed = on_resumed
        self.received = 0

    def watch(self, job_id: int) -> asyncio.Event:
        """An event set when a message about ``job_id`` arrives."""
        return self._watchers.setdefault(job_id, asyncio.Event())

    def unwatch(self, job_id: int) -> None:
        self._watchers.pop(job_id, None)

    def deliver(self, payload: str) -> None:
        """One ``awa_control`` message (``<verb>:<job id>``)."""
        self.received += 1
        verb, _, ident = payload.partition(":")
        if verb == "quarantine":
            self.reload_held.set()
            return
        try:
            job_id = int(ident)
        except ValueError:
            log.warning("ignoring a malformed %s message %r", CHANNEL, payload)
            return
        if verb == "cancel" and self.on_cancel is not None:
            # Every worker hears every cancellation; the executor keeps only
            # those of jobs it runs (mark_cancelled), so nothing piles up.
            self.on_cancel(job_id)
        watcher = self._watchers.get(job_id)
        if watcher is not None:
            watcher.set()

    def holds(self, kind: str, args_json: str) -> bool:
        """Whether a claimed job's fingerprint is quarantined."""
        return bool(self.held) and fingerprint(kind, args_json) in self.held

    async def watch_quarantine(self, db: Database, health: Health | None = None) -> None:
        """Keeps :attr:`held` current: at start, when told, and every
        ``QUARANTINE_RELOAD_S`` in case a message was lost."""
        while True:
            try:
                rows = await db.fetch("quarantine_held")
                self.held = frozenset(bytes(row["fingerprint"]) for row in rows)
                if health is not None:
                    health.ok(QUARANTINE_SERVICE)
            except Exception as error:  # noqa: BLE001 - keep the last known set
                log.warning("reloading quarantined fingerprints failed (%s)", error)
                if health is not None:
                    health.failed(QUARANTINE_SERVICE, error)
            await _wait(self.reload_held, QUARANTINE_RELOAD_S)
            self.reload_held.clear()

    def mark_cancelled(self, job_id: int) -> None:
        self._cancelled.add(job_id)

    def is_cancelled(self, job_id: int) -> bool:
        return job_id in self._cancelled

    def forget(self, job_id: int) -> None:
        """The job's attempt in this process ended."""
        if self._cancelled:
            self._cancelled.discard(job_id)


async def wait_for_resume(
    db: Database, control: JobControl | None, job: Job[Any], callback_id: uuid.UUID
) -> Any:
    """Parks ``job`` in place and waits until its callback resumes it; returns
    the job's row (with ``callback_result``). See ``Job.wait_for_callback``."""
    woken = control.watch(job.id) if control is not None else asyncio.Event()
    try:
        parked = await db.fetchval("jobs_park_in_place", job.id, job.run_lease, callback_id)
        if parked is None:
            early = await db.fetchrow("jobs_take_early_resume", job.id, job.run_lease, callback_id)
            if early is not None:
                return early  # resumed before the handler waited: nothing parked
        while True:
            row = await db.fetchrow("jobs_callback_wait_state", job.id)
            if _resumed(row, job, callback_id):
                if control is not None and control.on_resumed is not None:
                    control.on_resumed(row)
                return row
            await _wait(woken, WAIT_POLL_INTERVAL_S)
            woken.clear()
    except asyncio.CancelledError:
        # Shutdown: running again, so the worker releases the job as usual.
        await asyncio.shield(db.fetchval("jobs_unpark", job.id, job.run_lease))
        raise
    finally:
        if control is not None:
            control.unwatch(job.id)


def _resumed(row: Any, job: Job[Any], callback_id: uuid.UUID) -> bool:
    """Whether the wait is over with a payload; raises if the attempt lost
    its job; false while it is still parked on ``callback_id``."""
    if row is None or row["run_lease"] != job.run_lease:
        raise AttemptLost(job.id, "it was rescued and runs under another attempt")
    state = row["state"]
    if state == "waiting_external" and row["callback_id"] == callback_id:
        return False
    if state == "running" and row["callback_id"] is None:
        return True
    if state == "running":
        raise AttemptLost(job.id, "its callback was registered again")
    raise AttemptLost(job.id, f"it is {state} now")


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
