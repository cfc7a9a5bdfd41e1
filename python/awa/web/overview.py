"""The overview's figures: read in the background, served from memory.

Overview: the queues page needs, per queue, counts by state
(``client.list_queues``) and an hour of per-minute activity
(``client.queue_activity``). No index may name the state or the finish
time (claims and outcomes write them, and their updates must stay HOT), so
both read the whole jobs table: about half a second on a million jobs. A
page that read them on every load would cost that much each time, and as
much again of the database for each operator who keeps it open.

:class:`OverviewFigures` keeps the last figures read. A load gets them at
once when they are at most ``max_age_s`` old; an older set is served while
one refresh reads the next in the background (at most one at a time,
whoever asks), so the database pays one read per ``max_age_s`` however
many pages are open. Only a load with no figures yet, or after an action
changed what they show (:meth:`invalidate`), waits for the read, and for
at most ``wait_s``: past that it gets ``None`` (the page says the figures
are being read and reloads itself), so no load takes much longer than
``wait_s`` however big the table. ``max_age_s=0`` reads on every load,
waiting as long as the read takes.

Failure handling: a read that a load waits for raises (the page answers
503, naming the problem); a background refresh that fails leaves the last
figures in place, and the page says it could not refresh them and why.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from awa.activity import QueueActivity
from awa.queues import QueueSummary

log = logging.getLogger("awa.web")

#: How old the overview's figures may be before a load refreshes them.
DEFAULT_MAX_AGE_S: Final = 10.0
#: How long a load that needs a fresh read waits for it before the page
#: says the figures are being read (and reloads).
DEFAULT_WAIT_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class Figures:
    summaries: list[QueueSummary]
    activity: list[QueueActivity]
    #: When they were read (UTC).
    read_at: datetime.datetime


class OverviewFigures:
    def __init__(
        self,
        read: Callable[[], Awaitable[Figures]],
        max_age_s: float,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        self._read = read
        self._max_age_s = max_age_s
        self._wait_s = wait_s
        self._latest: Figures | None = None
        self._read_at = 0.0  # monotonic
        self._refresh: asyncio.Task[Figures] | None = None
        self._stale = False
        #: Why the last background refresh failed (None once one succeeded).
        self.refresh_error: BaseException | None = None

    async def get(self) -> Figures | None:
        """Figures fresh enough to show, or None while a read that took longer
        than ``wait_s`` goes on; see the module docstring."""
        latest = self._latest
        if self._max_age_s <= 0:
            return await self._read_now()
        if latest is None or self._stale:
            return await self._read_within(self._wait_s)
        if time.monotonic() - self._read_at > self._max_age_s and self._in_flight() is None:
            self._start_refresh()
        return latest

    def invalidate(self) -> None:
        """An action changed what the figures show: the next load reads them."""
        self._stale = True

    def _in_flight(self) -> asyncio.Task[Figures] | None:
        """The refresh under way on this event loop (a task of another loop,
        say a test client's earlier one, cannot be awaited here)."""
        task = self._refresh
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return None
        return task

    def _start_refresh(self) -> asyncio.Task[Figures]:
        task = self._refresh = asyncio.get_running_loop().create_task(self._read_and_keep())
        task.add_done_callback(_refresh_done)
        return task

    async def _read_now(self) -> Figures:
        task = self._in_flight() or self._start_refresh()
        # Shielded: a load that gives up (its client went away) leaves the
        # read to finish for the next one.
        return await asyncio.shield(task)

    async def _read_within(self, wait_s: float) -> Figures | None:
        """The read's figures if it ends within ``wait_s`` (its error if it
        fails), else None: it goes on for a later load."""
        task = self._in_flight() or self._start_refresh()
        done, _pending = await asyncio.wait({task}, timeout=wait_s)
        return task.result() if done else None

    async def _read_and_keep(self) -> Figures:
        started = time.monotonic()
        try:
            figures = await self._read()
        except Exception as error:
            self.refresh_error = error
            raise
        self._latest, self._read_at, self._stale = figures, started, False
        self.refresh_error = None
        return figures


def _refresh_done(task: asyncio.Task[Figures]) -> None:
    """Marks a background refresh's failure as seen (a load that waited for
    it gets the error itself); the page shows ``refresh_error``."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("reading the overview's figures failed: %s", task.exception())
