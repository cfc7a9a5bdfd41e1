"""The regression check of ``make bench-compare`` and its glue to run.py, on
made-up reports (no database: the timed run needs the peers' virtualenvs)."""

from __future__ import annotations

from typing import Any

from check_regression import compare
from compare_workloads import SYSTEMS, WORKLOADS, load_peers_run, measured_seconds

ARGS = ["--workload", "drain", "--n", "2000"]


def report(*rows: tuple[str, str, float]) -> dict[str, Any]:
    """A pytest-benchmark report holding one benchmark per (system, workload, median)."""
    return {
        "benchmarks": [
            {
                "name": f"test_workload[{workload}-{system}]",
                "stats": {"median": median},
                "extra_info": {"system": system, "workload": workload, "driver_args": ARGS},
            }
            for system, workload, median in rows
        ]
    }


def test_awa_queue_slower_by_more_than_ten_percent_fails() -> None:
    verdict = compare(report(("awa_queue", "drain50", 1.0)), report(("awa_queue", "drain50", 1.11)))
    assert verdict.failed
    assert "drain50" in verdict.problems[0]


def test_awa_queue_within_ten_percent_passes() -> None:
    verdict = compare(report(("awa_queue", "drain50", 1.0)), report(("awa_queue", "drain50", 1.09)))
    assert not verdict.failed


def test_a_peer_regression_does_not_fail() -> None:
    baseline = report(("awa_queue", "bulk", 1.0), ("pgqueuer", "bulk", 1.0))
    current = report(("awa_queue", "bulk", 1.0), ("pgqueuer", "bulk", 3.0))
    assert not compare(baseline, current).failed


def test_a_negative_latency_baseline_is_compared_by_magnitude() -> None:
    verdict = compare(
        report(("awa_queue", "pickup", -0.0001)), report(("awa_queue", "pickup", 0.0005))
    )
    assert verdict.failed


def test_awa_queue_missing_from_the_run_fails() -> None:
    assert compare(report(("awa_queue", "bulk", 1.0)), report(("floor", "bulk", 1.0))).failed


def test_other_sizes_than_the_baseline_fail() -> None:
    baseline = report(("awa_queue", "bulk", 1.0))
    current = report(("awa_queue", "bulk", 1.0))
    current["benchmarks"][0]["extra_info"]["driver_args"] = ["--workload", "bulk", "--n", "20000"]
    assert compare(baseline, current).failed


def test_every_compared_system_and_workload_is_one_of_run_py() -> None:
    peers_run = load_peers_run()
    assert set(SYSTEMS) <= set(peers_run.SYSTEMS)
    assert set(WORKLOADS) <= {w.name for w in peers_run.workloads(True, timeout_s=60)}


def test_pickup_is_timed_by_its_median_latency_and_drains_by_their_duration() -> None:
    assert measured_seconds("pickup", {"p50_ms": 1.5, "seconds": 9.0}) == 0.0015
    assert measured_seconds("drain50", {"p50_ms": 1.5, "seconds": 9.0}) == 9.0
