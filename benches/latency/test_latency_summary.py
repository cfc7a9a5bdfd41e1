"""How ``latency.py`` turns the producer's and the worker's records into a
point of the curve, on made-up records (the sweep itself needs a PostgreSQL
and minutes: ``make bench-latency``)."""

from __future__ import annotations

from typing import Any

from latency import summarise

MS = 1_000_000  # nanoseconds


def records(starts_after_commit_ms: list[float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ten jobs a second for one second, one job per batch, and when each started."""
    t0 = 1_000 * MS
    batches = [[i, i + 1, t0 + (i + 1) * 100 * MS] for i in range(len(starts_after_commit_ms))]
    started_i = [-1] + [b[0] for b in batches]  # the producer's warm-up job comes first
    started_ns = [t0 - MS] + [
        int(b[2] + after * MS) for b, after in zip(batches, starts_after_commit_ms, strict=True)
    ]
    produced = {"started_ns": t0, "batches": batches, "behind_max_s": 0.0}
    return produced, {"i": started_i, "t_ns": started_ns}


def test_latency_is_handler_start_minus_its_batch_commit() -> None:
    produced, started = records([1.0] * 9 + [5.0])
    point = summarise(10, 1.0, produced, started)
    assert point["p50_ms"] == 1.0
    assert point["p99_ms"] == 5.0
    assert point["unstarted"] == 0
    assert point["kept_up"]


def test_a_job_never_started_means_not_kept_up() -> None:
    produced, started = records([1.0] * 10)
    started = {"i": started["i"][:-1], "t_ns": started["t_ns"][:-1]}
    point = summarise(10, 1.0, produced, started)
    assert point["unstarted"] == 1
    assert not point["kept_up"]


def test_a_job_started_twice_counts_its_first_start() -> None:
    produced, started = records([1.0] * 10)
    started["i"].append(3)
    started["t_ns"].append(started["t_ns"][-1] + 500 * MS)
    point = summarise(10, 1.0, produced, started)
    assert point["max_ms"] == 1.0
    assert point["handler_starts_per_job"] > 1
