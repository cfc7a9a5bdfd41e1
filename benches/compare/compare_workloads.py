"""What ``bench_compare.py`` measures: the systems, the workloads, and which
figure of a driver's result is the workload's duration.

The workloads, their sizes and the drivers are those of ``benches/peers``
(``run.py`` is loaded from there, not copied), so a pytest-benchmark group and
a row of ``make bench-peers`` measure the same thing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

PEERS = Path(__file__).resolve().parent.parent / "peers"

#: One benchmark per system in every group, awa-queue first.
SYSTEMS = ["awa_queue", "floor", "awa_pg", "pgqueuer", "procrastinate"]
#: The system whose regression against its own baseline fails the run.
GUARDED_SYSTEM = "awa_queue"
#: run.py's workloads that every system runs (``bulk_unnest`` is awa-queue's alone).
WORKLOADS = ["bulk", "drain10", "drain50", "sleep100", "pickup"]


def load_peers_run() -> ModuleType:
    """``benches/peers/run.py`` as the module ``peers_run`` (it is a script, not a package)."""
    loaded = sys.modules.get("peers_run")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("peers_run", PEERS / "run.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {PEERS / 'run.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers_run"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def quick_mode() -> bool:
    """``AWA_BENCH_QUICK=1``: run.py's ``--quick`` sizes (a smoke run of a few minutes)."""
    return os.environ.get("AWA_BENCH_QUICK", "") not in ("", "0")


def rounds() -> int:
    """Driver runs per benchmark, each in a fresh database (``AWA_BENCH_ROUNDS``)."""
    default = "2" if quick_mode() else "3"
    return int(os.environ.get("AWA_BENCH_ROUNDS", default))


def group_label(workload: str, quick: bool) -> str:
    """The pytest-benchmark group of a workload: its name, size and what is timed."""
    n = "2 000" if quick else "20 000"
    sleep_n = "500" if quick else "5 000"
    pickups = 30 if quick else 200
    return {
        "bulk": f"bulk: enqueue {n} jobs, seconds for the bulk call",
        "drain10": f"drain10: {n} no-op jobs at c=10, first start to all completed",
        "drain50": f"drain50: {n} no-op jobs at c=50, first start to all completed",
        "sleep100": f"sleep100: {sleep_n} x sleep 10 ms at c=100, first start to all completed",
        "pickup": f"pickup: median of {pickups} insert-to-handler-start latencies, idle worker",
    }[workload]


def measured_seconds(workload: str, result: dict[str, Any]) -> float:
    """The workload's duration in one driver result, as the driver measured it."""
    if workload == "pickup":
        return float(result["p50_ms"]) / 1000.0
    return float(result["seconds"])
