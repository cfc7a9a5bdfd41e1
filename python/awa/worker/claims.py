"""The signal between whoever learns there may be work and the idle claimers.

The notifier (a queue received jobs), the executor (a slot was freed) and
the poll timer set it; claimers wait on it. It is made first and handed to
each of them in their constructors.
"""

from __future__ import annotations

import asyncio

from awa import _core
from awa._events import wait_for_event


class ClaimSignal:
    """Tells idle claimers there may be work: a queue may have jobs
    (notifications, poll ticks), or a slot was freed."""

    def __init__(self, dispatcher: _core.Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._event = asyncio.Event()

    def ready(self, queue: str | None = None) -> None:
        """``queue`` (or, with ``None``, every queue) may have jobs."""
        if queue is None:
            self._dispatcher.mark_all_ready()
        elif not self._dispatcher.mark_ready(queue):
            return
        self._event.set()

    def slot_freed(self, can_claim: bool) -> None:
        if can_claim:
            self._event.set()

    def poke(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, timeout_s: float) -> bool:
        return await wait_for_event(self._event, timeout_s)
