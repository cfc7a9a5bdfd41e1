"""The loop every maintenance task shares: one pass, then a pause.

A pass that fails is logged and reported to the worker's health, and the
next one runs after the usual interval; the loop itself never ends on an
error (the leader's supervisor restarts it if something outside a pass
does). It ends when its ``stop`` event is set, between passes: a pass under
way is let finish, so stopping sends no cancel request to the server (a
cancel that races its statement's end made PgBouncer 1.18 exit; the leader
cancels only a pass that outlasts its grace, see leader.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from awa._events import wait_for_event

if TYPE_CHECKING:
    from awa.worker.supervisor import Health


async def run_passes(
    name: str,
    one_pass: Callable[[], Awaitable[float | None]],
    interval_s: float,
    health: Health | None,
    log: logging.Logger,
    stop: asyncio.Event,
) -> None:
    """Runs ``one_pass`` until ``stop`` is set; it returns how long to wait
    before the next pass (``None``: ``interval_s``)."""
    while not stop.is_set():
        try:
            delay = await one_pass()
        except Exception as error:  # noqa: BLE001 - the next pass runs after the interval
            log.warning("%s: a pass failed (%s: %s)", name, type(error).__name__, error)
            if health is not None:
                health.failed(name, error)
            delay = None
        else:
            if health is not None:
                health.ok(name)
        await wait_for_event(stop, interval_s if delay is None else delay)
