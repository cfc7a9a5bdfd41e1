"""Job progress: what a running handler reports with ``job.set_progress``,
kept until it is written.

Overview: ``set_progress`` checks a report and keeps it in the attempt and
in its worker's :class:`ProgressBuffer`; nothing is written then. The
heartbeat, which already sends one statement per interval for the whole
process, takes every report buffered since its last beat and writes them
in that same statement (``jobs_heartbeat_with_progress``);
``await job.flush_progress()`` writes one job's report at once
(``jobs_set_progress``). Either write is guarded by the attempt's run lease:
an attempt that lost its job (rescued, cancelled, finished) writes nothing.

The buffer is shared between the worker's event loop (which fills it) and
the heartbeat's thread (which drains it), hence its lock. A beat that fails
puts its reports back, unless a newer one for the same job came meanwhile.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Final

from awa import _core
from awa.errors import ProgressError, ValidationError

#: The largest progress report, as JSON (percent, message and data).
MAX_PROGRESS_BYTES: Final = 8 * 1024

#: A report waiting to be written: the attempt's run lease and its JSON text.
Pending = tuple[int, str]


def progress_json(percent: Any, message: Any, data: dict[str, Any]) -> str:
    """The report as stored, ``{"percent": …, "message": …, "data": {…}}``;
    :class:`awa.errors.ProgressError` naming the value for anything else."""
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise ProgressError(
            f"percent: must be a number from 0 to 100 (got {type(percent).__name__})", "percent"
        )
    if not (math.isfinite(percent) and 0 <= percent <= 100):
        raise ProgressError(f"percent: must be from 0 to 100 (got {percent!r})", "percent")
    if message is not None and not isinstance(message, str):
        raise ProgressError(
            f"message: must be a string or None (got {type(message).__name__})", "message"
        )
    report = {"percent": float(percent), "message": message, "data": data}
    try:
        text = _core.encode_json(report, "progress")
    except ValidationError as error:
        raise ProgressError(str(error), error.field) from None
    size = len(text.encode())
    if size > MAX_PROGRESS_BYTES:
        raise ProgressError(
            f"progress: {size} bytes of JSON, more than the {MAX_PROGRESS_BYTES} a report may "
            "hold (keep bulky data in your own tables and report a reference)",
            "progress",
        )
    return text


class ProgressBuffer:
    """Reports not yet written, by job id (the latest one per job)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, Pending] = {}

    def put(self, job_id: int, run_lease: int, text: str) -> None:
        with self._lock:
            self._pending[job_id] = (run_lease, text)

    def take(self, job_id: int) -> Pending | None:
        """One job's report, no longer pending."""
        with self._lock:
            return self._pending.pop(job_id, None)

    def take_all(self) -> dict[int, Pending]:
        """Every pending report; the buffer is empty afterwards."""
        with self._lock:
            pending, self._pending = self._pending, {}
            return pending

    def put_back(self, reports: dict[int, Pending]) -> None:
        """Reports a write failed to apply, pending again unless a newer
        report for the same job arrived meanwhile."""
        with self._lock:
            for job_id, report in reports.items():
                self._pending.setdefault(job_id, report)

    def __len__(self) -> int:
        return len(self._pending)
