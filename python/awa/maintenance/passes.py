"""The loop every maintenance task shares: one pass, then a pause.

A pass that fails is logged and reported to the worker's health, and the
next one runs after the usual interval; the loop itself never ends on an
error (the leader's supervisor restarts it if something outside a pass
does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from awa.worker.supervisor import Health


async def run_passes(
    name: str,
    one_pass: Callable[[], Awaitable[float | None]],
    interval_s: float,
    health: Health | None,
    log: logging.Logger,
) -> None:
    """Runs ``one_pass`` forever; it returns how long to wait before the next
    pass (``None``: ``interval_s``)."""
    while True:
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
        await asyncio.sleep(interval_s if delay is None else delay)
