"""Waiting on asyncio events with a deadline (used by every service loop)."""

from __future__ import annotations

import asyncio


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Waits until ``event`` is set or ``timeout_s`` passes; True if it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout=max(timeout_s, 0.0))
    except TimeoutError:
        return False
    return True
