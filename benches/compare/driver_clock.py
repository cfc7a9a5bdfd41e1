"""The clock pytest-benchmark reads during ``make bench-compare``.

It does not follow the wall: it moves forward only by what a driver measured
(``advance``), so a benchmark round's duration is the workload's own time as
the driver reported it, never the subprocess's start-up, its imports, its
schema migration or the database's creation. ``bench_compare.py`` selects
it with ``pytest.mark.benchmark(timer=driver_clock.read)``.
"""

from __future__ import annotations

_elapsed_s = 0.0


def read() -> float:
    """Seconds the drivers have measured so far in this session."""
    return _elapsed_s


def advance(seconds: float) -> None:
    """Adds one driver's measured figure, in seconds.

    It may be negative: the pickup driver's latency runs from the insert call
    returning to the handler starting, in one process, and on an idle worker
    the handler can start before the inserting coroutine resumes. The clock
    then steps back, and the round's figure is that negative latency.
    """
    global _elapsed_s
    _elapsed_s += seconds
