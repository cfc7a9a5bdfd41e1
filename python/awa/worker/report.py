"""What a worker says about the jobs it runs: the log lines a user reads.

Every attempt that fails gets a line with its kind, id, attempt count and
exception; the traceback comes with the first failure of a kind in each
window, and a kind failing in a storm is cut to a few lines per window with
a count of the rest, so a retry storm cannot flood the log. Starts and
successes are DEBUG lines. Every line carries ``job_id``, ``kind``,
``queue`` and ``attempt`` as ``extra`` fields (``--log-format json`` prints
them). :meth:`Reporter.summary` is the periodic INFO line: jobs per second,
failures, and how long jobs waited past their ``run_at`` before they
started (queue lag), per queue.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from awa.metrics import WorkerTally

if TYPE_CHECKING:
    from awa.envelope import Undecodable
    from awa.worker.attempt import RunningJob
    from awa.worker.outcome import Outcome

log = logging.getLogger("awa.worker")

#: Failure lines per kind per window before the rest are only counted.
FAILURE_LINES_PER_WINDOW: Final = 10
FAILURE_WINDOW_S: Final = 60.0
_FAILED_CODES: Final = frozenset({"failed", "failed_terminal"})


def job_fields(job: RunningJob[Any]) -> dict[str, Any]:
    """The ``extra`` fields every line about one job carries."""
    return {"job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempt}


@dataclass(slots=True)
class _KindWindow:
    """One kind's failure lines in the current window."""

    opened_at: float
    logged: int = 0
    suppressed: int = 0


class _QueueTally:
    """Jobs a queue started since the last summary, and how long they
    waited past their ``run_at``."""

    __slots__ = ("lag_max_s", "lag_total_s", "started")

    def __init__(self) -> None:
        self.started = 0
        self.lag_total_s = 0.0
        self.lag_max_s = 0.0


@dataclass(slots=True)
class _Tally:
    """What happened since the last summary."""

    finished: int = 0
    failed: int = 0
    queues: dict[str, _QueueTally] = field(default_factory=dict)


class Reporter:
    def __init__(self, clock: Any = time.monotonic, tally: WorkerTally | None = None) -> None:
        self._clock = clock
        #: The worker's counts for the metrics (awa.metrics).
        self.tally = tally if tally is not None else WorkerTally()
        self._windows: dict[str, _KindWindow] = {}
        self._tally = _Tally()
        self._tally_since = clock()

    def started(self, job: RunningJob[Any]) -> None:
        self.tally.started(job.queue, job.kind)
        queues = self._tally.queues
        tally = queues.get(job.queue)
        if tally is None:
            tally = queues[job.queue] = _QueueTally()
        tally.started += 1
        attempted_at = job.attempted_at
        if attempted_at is not None:
            lag_s = (attempted_at - job.run_at).total_seconds()
            if lag_s > 0.0:
                tally.lag_total_s += lag_s
                if lag_s > tally.lag_max_s:
                    tally.lag_max_s = lag_s
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %d (%s) started, attempt %d/%d",
                job.id, job.kind, job.attempt, job.max_attempts,
                extra=job_fields(job),
            )  # fmt: skip

    def finished(
        self, job: RunningJob[Any], outcome: Outcome, handler_s: float | None = None
    ) -> None:
        """One attempt's outcome; ``handler_s`` how long its handler ran."""
        self.tally.finished(
            job.queue, job.kind, outcome.code, job.attempt < job.max_attempts, handler_s
        )
        self._tally.finished += 1
        if outcome.code in _FAILED_CODES:
            self._tally.failed += 1
            self._failed(job, outcome)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %d (%s) finished: %s in %.3fs",
                job.id, job.kind, outcome.code, outcome.duration_s,
                extra=job_fields(job),
            )  # fmt: skip

    def undecodable(self, job: RunningJob[Any], verdict: Undecodable) -> None:
        """A claimed job was parked undecodable (a failure line: it counts
        against its kind's window, so a release mismatch over many jobs
        cannot flood the log)."""
        note = self._window_note(job.kind)
        if note is None:
            return
        log.warning(
            "job %d (%s) is undecodable (%s), parked until retry_undecodable: %s%s",
            job.id, job.kind, verdict.reason.value, verdict.text, note,
            extra={**job_fields(job), "error_type": verdict.error_type},
        )  # fmt: skip

    def _window_note(self, kind: str) -> str | None:
        """Counts a failure line of ``kind`` in its window: ``None`` when the
        window's lines are spent (the line is only counted), else the note
        the line carries (empty, or saying what is or was suppressed)."""
        now = self._clock()
        window = self._windows.get(kind)
        earlier = 0
        if window is None or now - window.opened_at >= FAILURE_WINDOW_S:
            earlier = window.suppressed if window is not None else 0
            window = self._windows[kind] = _KindWindow(now)
        if window.logged >= FAILURE_LINES_PER_WINDOW:
            window.suppressed += 1
            return None
        window.logged += 1
        note = ""
        if window.logged == FAILURE_LINES_PER_WINDOW:
            note = f" (further {kind} failures in the next {FAILURE_WINDOW_S:g}s only counted)"
        if earlier:
            note += f" ({earlier} more {kind} failures were not logged)"
        return note

    def _failed(self, job: RunningJob[Any], outcome: Outcome) -> None:
        note = self._window_note(job.kind)
        if note is None:
            return
        final = outcome.code == "failed_terminal" or job.attempt >= job.max_attempts
        then = "no retries left" if final else "will retry"
        if outcome.code == "failed_terminal":
            then = "failed for good"
        first = self._windows[job.kind].logged == 1 and outcome.traceback
        log.log(
            logging.ERROR if final else logging.WARNING,
            "job %d (%s) attempt %d/%d failed, %s: %s%s%s",
            job.id, job.kind, job.attempt, job.max_attempts, then, outcome.error_text, note,
            f"\n{outcome.traceback.rstrip()}" if first and outcome.traceback else "",
            extra={**job_fields(job), "error_type": outcome.error_type},
        )  # fmt: skip

    def summary(self, running: int, slots: int) -> str:
        """The periodic line; starts a new tally."""
        now = self._clock()
        tally, self._tally = self._tally, _Tally()
        elapsed = max(now - self._tally_since, 1e-9)
        self._tally_since = now
        lags = ", ".join(
            f"{name} {queue.lag_total_s / queue.started:.2f}s avg, {queue.lag_max_s:.2f}s max"
            for name, queue in sorted(tally.queues.items())
        )
        return (
            f"{tally.finished} jobs in the last {elapsed:.0f}s ({tally.finished / elapsed:.1f}/s), "
            f"{tally.failed} failed, {running}/{slots} running"
            + (f"; waited past run_at: {lags}" if lags else "")
        )
