"""awa's metrics: what is counted, and the in-process store that counts it.

Overview: every instrument awa reports is listed in :data:`INSTRUMENTS`
(name, kind, unit, labels, meaning), in the OpenTelemetry naming style
(``awa.job.completed``); docs/metrics.md is the same list for people.
Exporters read the store and translate, they never count:
:mod:`awa.prometheus` (the ``/metrics`` page of ``awa worker
--metrics-port``) and :mod:`awa.otel` (observable instruments of the
OpenTelemetry API).

Cost model: a worker runs tens of thousands of jobs a second, so nothing
here takes a lock or builds a label set per job. A worker's
:class:`WorkerTally` is touched only from the worker's event loop (plain
attribute and list increments); a claim or a flush adds once per batch.
Readers (an exporter's thread) read those integers as they are: a scrape
may see a job started and not yet finished, never a count going down.
Counts that come from anywhere else (inserts, rescues, follow-ups) go
through :func:`add`, which takes a lock once per call, not per job.

Counters are per process and only ever grow: a stopped worker's tally is
folded into the process's counters (:func:`retire`).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

STAGED_FOLLOW_UPS_COMMITTED: Final = "awa.job.staged_follow_ups_committed"
STAGED_FOLLOW_UPS_DISCARDED: Final = "awa.job.staged_follow_ups_discarded"
FOLLOW_UP_RESULT: Final = "awa.follow_up.result"
FOLLOW_UPS_WRITTEN: Final = "awa.follow_up.written"

JOB_INSERTED: Final = "awa.job.inserted"
JOB_STARTED: Final = "awa.job.started"
JOB_COMPLETED: Final = "awa.job.completed"
JOB_RETRIED: Final = "awa.job.retried"
JOB_FAILED: Final = "awa.job.failed"
JOB_CANCELLED: Final = "awa.job.cancelled"
JOB_SNOOZED: Final = "awa.job.snoozed"
JOB_WAITING: Final = "awa.job.waiting_for_callback"
JOB_RESCUED: Final = "awa.job.rescued"
JOB_DURATION: Final = "awa.job.duration"
CLAIM_BATCH_SIZE: Final = "awa.claim.batch_size"
FLUSH_BATCH_SIZE: Final = "awa.flush.batch_size"
QUEUE_DEPTH: Final = "awa.queue.depth"
QUEUE_LAG: Final = "awa.queue.lag"
QUEUE_RUNNING: Final = "awa.queue.running"
QUEUE_CAPACITY: Final = "awa.queue.capacity"

Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True, slots=True)
class Instrument:
    """One thing awa reports: its name, kind, unit, labels and meaning."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    description: str


_JOB_LABELS: Final = ("queue", "kind")

INSTRUMENTS: Final[tuple[Instrument, ...]] = (
    Instrument(JOB_INSERTED, "counter", "{job}", (),
               "Jobs this process wrote with insert, insert_many and COPY (those in a "
               "caller's transaction that then rolled back included)."),
    Instrument(JOB_STARTED, "counter", "{job}", _JOB_LABELS,
               "Attempts whose handler started."),
    Instrument(JOB_COMPLETED, "counter", "{job}", _JOB_LABELS,
               "Attempts that completed their job."),
    Instrument(JOB_RETRIED, "counter", "{job}", _JOB_LABELS,
               "Attempts that failed with attempts left, or asked for a retry (RetryAfter)."),
    Instrument(JOB_FAILED, "counter", "{job}", _JOB_LABELS,
               "Attempts that failed for good: no attempts left, or a terminal error."),
    Instrument(JOB_CANCELLED, "counter", "{job}", _JOB_LABELS,
               "Attempts whose handler cancelled its job (Cancel)."),
    Instrument(JOB_SNOOZED, "counter", "{job}", _JOB_LABELS,
               "Attempts that snoozed their job (Snooze)."),
    Instrument(JOB_WAITING, "counter", "{job}", _JOB_LABELS,
               "Attempts that parked their job for an external callback."),
    Instrument(JOB_RESCUED, "counter", "{job}", ("reason",),
               "Jobs this process's maintenance leader rescued (dead worker, "
               "attempt past its deadline, callback timed out, job deadline)."),
    Instrument(JOB_DURATION, "histogram", "s", _JOB_LABELS,
               "How long handlers ran, per attempt (cancelled-by-shutdown attempts excluded)."),
    Instrument(CLAIM_BATCH_SIZE, "histogram", "{job}", (),
               "Jobs one claim statement returned."),
    Instrument(FLUSH_BATCH_SIZE, "histogram", "{job}", (),
               "Outcomes one completion write carried."),
    Instrument(QUEUE_DEPTH, "gauge", "{job}", ("queue",),
               "Jobs due and waiting to be claimed, counted up to 100 000, "
               "as a worker last read it."),
    Instrument(QUEUE_LAG, "gauge", "s", ("queue",),
               "How long the oldest due job has waited past its run_at, as a worker last read it."),
    Instrument(QUEUE_RUNNING, "gauge", "{job}", ("queue",),
               "Jobs this process is running, per queue."),
    Instrument(QUEUE_CAPACITY, "gauge", "{job}", ("queue",),
               "Slots this process has, per queue."),
    Instrument(STAGED_FOLLOW_UPS_COMMITTED, "counter", "{job}", (FOLLOW_UP_RESULT,),
               "Follow-ups a handler staged that were written with its completion."),
    Instrument(FOLLOW_UPS_WRITTEN, "counter", "{job}", (),
               "Follow-up jobs written with the transition that asked for them (specs and "
               "staged), duplicates of a held unique key excluded."),
    Instrument(STAGED_FOLLOW_UPS_DISCARDED, "counter", "{job}", (),
               "Follow-ups a handler staged that were dropped (the attempt did not complete)."),
)  # fmt: skip

BY_NAME: Final = {instrument.name: instrument for instrument in INSTRUMENTS}

#: Upper bounds of the handler-duration buckets, in seconds.
DURATION_BOUNDS_S: Final = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip
#: Upper bounds of the claim and flush batch-size buckets.
BATCH_BOUNDS: Final = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)

# ── the readings exporters translate ─────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Reading:
    """A counter's total or a gauge's value for one label set."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class HistogramReading:
    """A histogram for one label set: per-bucket counts (not cumulative;
    the last is above every bound), their sum and the bounds."""

    name: str
    labels: Mapping[str, str]
    bounds: Sequence[float]
    counts: Sequence[int]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


# ── counters from anywhere (a lock per call) ─────────────────────────────

_Key = tuple[str, tuple[tuple[str, str], ...]]

_lock = threading.Lock()
_counters: dict[_Key, float] = {}
_histograms: dict[_Key, _Histogram] = {}


def add(name: str, amount: int = 1, **labels: str) -> None:
    """Adds ``amount`` to the counter ``name`` with these labels."""
    if amount <= 0:
        return
    key = (name, tuple(sorted(labels.items())))
    with _lock:
        _counters[key] = _counters.get(key, 0) + amount


def value(name: str, **labels: str) -> int:
    """The counter's total for exactly these labels (0 if never counted),
    counting the running workers' tallies too."""
    wanted = dict(labels)
    return int(
        sum(
            reading.value
            for reading in collect()
            if isinstance(reading, Reading) and reading.name == name and reading.labels == wanted
        )
    )


def snapshot() -> list[tuple[str, Mapping[str, str], int]]:
    """Every counter as ``(name, labels, total)``, sorted by name (the
    running workers' tallies included)."""
    counters = {instrument.name for instrument in INSTRUMENTS if instrument.kind == "counter"}
    return [
        (reading.name, reading.labels, int(reading.value))
        for reading in collect()
        if isinstance(reading, Reading)
        and (reading.name in counters or reading.name not in BY_NAME)
    ]


class _Histogram:
    """Per-bucket counts and their sum, for one instrument and label set."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def add(self, counts: Sequence[int], total: float) -> None:
        """Adds another histogram's bucket counts and sum (same bounds)."""
        for index, count in enumerate(counts):
            self.counts[index] += count
        self.total += total


# ── a worker's tally (its event loop only, no lock) ──────────────────────

#: Outcome code (``awa.worker.outcome.Outcome.code``) → counter, where a
#: failed attempt is ``retried`` or ``failed`` by its attempts left.
_OUTCOME_COUNTERS: Final = {
    "completed": JOB_COMPLETED,
    "retry_after": JOB_RETRIED,
    "snooze": JOB_SNOOZED,
    "waiting_for_callback": JOB_WAITING,
    "cancelled": JOB_CANCELLED,
    "failed": JOB_RETRIED,
    "failed_terminal": JOB_FAILED,
}
_COUNTER_SLOTS: Final = {
    name: index
    for index, name in enumerate(
        (JOB_STARTED, JOB_COMPLETED, JOB_RETRIED, JOB_FAILED, JOB_CANCELLED, JOB_SNOOZED,
         JOB_WAITING)
    )
}  # fmt: skip
_SLOT_OF_CODE: Final = {code: _COUNTER_SLOTS[name] for code, name in _OUTCOME_COUNTERS.items()}
_STARTED_SLOT: Final = _COUNTER_SLOTS[JOB_STARTED]
_FAILED_SLOT: Final = _COUNTER_SLOTS[JOB_FAILED]
_RETRIED_SLOT: Final = _COUNTER_SLOTS[JOB_RETRIED]


# One (queue, kind)'s tally is one flat list (a job costs two index
# increments, not attribute lookups): the counters by slot, then the
# duration histogram's buckets, then the durations' sum.
_DURATIONS_AT: Final = len(_COUNTER_SLOTS)
_DURATIONS_SUM: Final = _DURATIONS_AT + len(DURATION_BOUNDS_S) + 1
_TALLY_SIZE: Final = _DURATIONS_SUM + 1


@dataclass(slots=True)
class QueueGauges:
    """What a worker last read of one queue (depth and lag), and its own
    running count and capacity (read live)."""

    depth: int | None = None
    lag_s: float | None = None


class WorkerTally:
    """The counts one worker keeps while it runs; see the module docstring
    for why nothing here locks."""

    def __init__(self, capacity: Mapping[str, int] | None = None) -> None:
        self._kinds: dict[tuple[str, str], list[float]] = {}
        self.claims = _Histogram(BATCH_BOUNDS)
        self.flushes = _Histogram(BATCH_BOUNDS)
        self.capacity: dict[str, int] = dict(capacity or {})
        self.queues: dict[str, QueueGauges] = {}
        #: Jobs running per queue, read when exported (the dispatcher's count).
        self.running_of: Callable[[str], int] | None = None
        _live.add(self)

    def _tally_of(self, queue: str, kind: str) -> list[float]:
        tally = self._kinds[(queue, kind)] = [0] * _TALLY_SIZE
        return tally

    def started(self, queue: str, kind: str) -> None:
        tally = self._kinds.get((queue, kind)) or self._tally_of(queue, kind)
        tally[_STARTED_SLOT] += 1

    def finished(
        self, queue: str, kind: str, code: str, attempts_left: bool, duration_s: float | None
    ) -> None:
        """One attempt's outcome; ``duration_s`` None when it has none."""
        tally = self._kinds.get((queue, kind)) or self._tally_of(queue, kind)
        slot = _SLOT_OF_CODE[code]
        if slot == _RETRIED_SLOT and not attempts_left and code == "failed":
            slot = _FAILED_SLOT
        tally[slot] += 1
        if duration_s is not None:
            tally[_DURATIONS_AT + bisect.bisect_left(DURATION_BOUNDS_S, duration_s)] += 1
            tally[_DURATIONS_SUM] += duration_s
            if _histogram_observers:
                _tell(JOB_DURATION, duration_s, {"queue": queue, "kind": kind})

    def claimed(self, jobs: int) -> None:
        """One claim statement returned ``jobs`` jobs."""
        self.claims.observe(jobs)
        if _histogram_observers:
            _tell(CLAIM_BATCH_SIZE, jobs, {})

    def flushed(self, outcomes: int) -> None:
        """One completion write carried ``outcomes`` outcomes."""
        self.flushes.observe(outcomes)
        if _histogram_observers:
            _tell(FLUSH_BATCH_SIZE, outcomes, {})

    def readings(self) -> Iterable[Reading | HistogramReading]:
        for (queue, kind), tally in list(self._kinds.items()):
            labels = {"queue": queue, "kind": kind}
            for name, slot in _COUNTER_SLOTS.items():
                yield Reading(name, labels, tally[slot])
            yield HistogramReading(
                JOB_DURATION, labels, DURATION_BOUNDS_S,
                [int(count) for count in tally[_DURATIONS_AT:_DURATIONS_SUM]],
                tally[_DURATIONS_SUM],
            )  # fmt: skip
        yield HistogramReading(
            CLAIM_BATCH_SIZE, {}, BATCH_BOUNDS, list(self.claims.counts), self.claims.total
        )
        yield HistogramReading(
            FLUSH_BATCH_SIZE, {}, BATCH_BOUNDS, list(self.flushes.counts), self.flushes.total
        )

    def gauges(self) -> Iterable[Reading]:
        running_of = self.running_of
        for queue, slots in self.capacity.items():
            labels = {"queue": queue}
            yield Reading(QUEUE_CAPACITY, labels, slots)
            if running_of is not None:
                yield Reading(QUEUE_RUNNING, labels, running_of(queue))
        for queue, gauges in list(self.queues.items()):
            labels = {"queue": queue}
            if gauges.depth is not None:
                yield Reading(QUEUE_DEPTH, labels, gauges.depth)
            if gauges.lag_s is not None:
                yield Reading(QUEUE_LAG, labels, gauges.lag_s)


_live: weakref.WeakSet[WorkerTally] = weakref.WeakSet()

#: Told of every histogram observation as it happens, ``(name, value,
#: labels)``: an OpenTelemetry histogram (``awa.otel.instrument(...,
#: histograms=True)``). Empty by default, so an observation costs one check.
_histogram_observers: list[Callable[[str, float, Mapping[str, str]], None]] = []


def observe_histograms(observer: Callable[[str, float, Mapping[str, str]], None]) -> None:
    """Calls ``observer(name, value, labels)`` for every histogram
    observation from now on (a job's duration: once a job, so it must be
    cheap; it runs on the worker's event loop)."""
    with _lock:
        _histogram_observers.append(observer)


def _tell(name: str, value: float, labels: Mapping[str, str]) -> None:
    for observer in _histogram_observers:
        observer(name, value, labels)


def retire(tally: WorkerTally) -> None:
    """Folds a stopped worker's counts into the process's, so that its
    counters keep their totals after it is gone."""
    _live.discard(tally)
    with _lock:
        _fold(tally.readings(), _counters, _histograms)


def _fold(
    readings: Iterable[Reading | HistogramReading],
    counters: dict[_Key, float],
    histograms: dict[_Key, _Histogram],
) -> None:
    """Adds a tally's readings to these counters and histograms."""
    for reading in readings:
        key = (reading.name, tuple(sorted(reading.labels.items())))
        if isinstance(reading, Reading):
            counters[key] = counters.get(key, 0) + reading.value
            continue
        kept = histograms.get(key)
        if kept is None:
            kept = histograms[key] = _Histogram(reading.bounds)
        kept.add(reading.counts, reading.total)


def collect() -> list[Reading | HistogramReading]:
    """Every reading of this process: counters (running workers' tallies
    added to what :func:`add` and stopped workers left), histograms the
    same way, then gauges (per worker, not summed)."""
    with _lock:
        counters = dict(_counters)
        histograms = {key: _as_copy(histogram) for key, histogram in _histograms.items()}
    gauges: dict[_Key, float] = {}
    for tally in list(_live):
        _fold(tally.readings(), counters, histograms)
        for gauge in tally.gauges():
            key = (gauge.name, tuple(sorted(gauge.labels.items())))
            gauges[key] = _combine_gauge(gauge.name, gauges.get(key), gauge.value)
    readings: list[Reading | HistogramReading] = [
        Reading(name, dict(labels), total) for (name, labels), total in sorted(counters.items())
    ]
    readings.extend(
        HistogramReading(name, dict(labels), kept.bounds, kept.counts, kept.total)
        for (name, labels), kept in sorted(histograms.items())
    )
    readings.extend(
        Reading(name, dict(labels), gauge) for (name, labels), gauge in sorted(gauges.items())
    )
    return readings


def _combine_gauge(name: str, kept: float | None, value: float) -> float:
    """Two workers of one process report the same queue: their running
    jobs and slots add up; depth and lag are the database's, the latest
    reading (the larger) stands."""
    if kept is None:
        return value
    if name in (QUEUE_RUNNING, QUEUE_CAPACITY):
        return kept + value
    return max(kept, value)


def _as_copy(histogram: _Histogram) -> _Histogram:
    copy = _Histogram(histogram.bounds)
    copy.add(histogram.counts, histogram.total)
    return copy
