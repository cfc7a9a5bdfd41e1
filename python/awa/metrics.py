"""In-process counters, readable with :func:`value` and :func:`snapshot`.

Names follow the OpenTelemetry style the rest of awa's metrics will use
(``awa.job.staged_follow_ups_committed``); labels are keyword arguments.
Counters are per process and only ever grow.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Final

STAGED_FOLLOW_UPS_COMMITTED: Final = "awa.job.staged_follow_ups_committed"
STAGED_FOLLOW_UPS_DISCARDED: Final = "awa.job.staged_follow_ups_discarded"
FOLLOW_UP_RESULT: Final = "awa.follow_up.result"

_Key = tuple[str, tuple[tuple[str, str], ...]]

_lock = threading.Lock()
_counters: dict[_Key, int] = {}


def add(name: str, amount: int = 1, **labels: str) -> None:
    """Adds ``amount`` to the counter ``name`` with these labels."""
    if amount <= 0:
        return
    key = (name, tuple(sorted(labels.items())))
    with _lock:
        _counters[key] = _counters.get(key, 0) + amount


def value(name: str, **labels: str) -> int:
    """The counter's total for exactly these labels (0 if never counted)."""
    with _lock:
        return _counters.get((name, tuple(sorted(labels.items()))), 0)


def snapshot() -> list[tuple[str, Mapping[str, str], int]]:
    """Every counter as ``(name, labels, total)``, sorted by name."""
    with _lock:
        items = sorted(_counters.items())
    return [(name, dict(labels), total) for (name, labels), total in items]
