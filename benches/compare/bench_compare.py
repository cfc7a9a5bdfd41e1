"""awa-queue and its peers as pytest-benchmark groups; ``make bench-compare`` runs it.

One group per workload (bulk enqueue, drain at c=10 and c=50, sleep, pickup),
one benchmark per system (awa-queue, the SQL floor, awa-pg, pgqueuer,
procrastinate). A round is one run of that system's driver from
``benches/peers/drivers`` in the system's own interpreter and a fresh
database, exactly as ``benches/peers/run.py`` runs it (its functions do the
work here). awa-queue runs from the interpreter that runs pytest; each peer
from ``benches/peers/.venvs/<system>``, created on first use.

What a round counts is the driver's own measurement (``compare_workloads.
measured_seconds``): bulk, the bulk call; drains and sleep, first handler start
to the last completion seen; pickup, the median insert-to-handler-start
latency of the run. The module's ``benchmark`` mark makes pytest-benchmark
read ``driver_clock``, which moves only by that figure, so subprocess
start-up, imports, migrations and database creation are never in the
numbers.

The file is not named ``test_*.py``: the normal suite does not collect it
(it needs the peers' virtualenvs and a PostgreSQL on the admin URL). Run it
through ``make bench-compare`` or ``make bench-baseline``; by hand::

    .venv/bin/python -m pytest benches/compare/bench_compare.py --benchmark-enable --benchmark-only
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from typing import Any

import driver_clock
import pytest
from compare_workloads import (
    SYSTEMS,
    WORKLOADS,
    group_label,
    load_peers_run,
    measured_seconds,
    quick_mode,
    rounds,
)
from pytest_benchmark.fixture import BenchmarkFixture

peers_run = load_peers_run()

QUICK = quick_mode()
ROUNDS = rounds()
ADMIN_URL = os.environ.get("AWA_BENCH_ADMIN_URL", peers_run.DEFAULT_ADMIN_URL)
DRIVER_TIMEOUT_S = 900
_DATABASE_NUMBERS = itertools.count(1)
# Workloads in the order of the groups; within a group, systems take turns.
CASES = [(workload, system) for workload in WORKLOADS for system in SYSTEMS]

pytestmark = [
    # Any other timer would count the driver subprocess's whole life.
    pytest.mark.benchmark(timer=driver_clock.read),
    # Every round may take a driver's whole timeout; a peer's virtualenv is built on first use.
    pytest.mark.timeout(DRIVER_TIMEOUT_S * ROUNDS + 300),
]


@pytest.fixture(scope="session")
def workloads() -> dict[str, Any]:
    """run.py's workloads at this run's sizes, by name."""
    if shutil.which("psql") is None:
        pytest.fail("psql is needed: it creates and drops the benchmark databases")
    every = peers_run.workloads(QUICK, timeout_s=DRIVER_TIMEOUT_S - 60)
    return {w.name: w for w in every}


@pytest.fixture(scope="session")
def interpreters() -> dict[str, tuple[str | None, str]]:
    """Each system's interpreter, found (and its virtualenv built) on first use."""
    return {}


def interpreter_for(system: str, cache: dict[str, tuple[str | None, str]]) -> str:
    if system not in cache:
        cache[system] = peers_run.find_interpreter(system, sys.executable, None)
    python, why_not = cache[system]
    if python is None:
        pytest.skip(f"{peers_run.LABELS[system]} not available: {why_not}")
    return python


@pytest.mark.parametrize(("workload", "system"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_workload(
    benchmark: BenchmarkFixture,
    workloads: dict[str, Any],
    interpreters: dict[str, tuple[str | None, str]],
    workload: str,
    system: str,
) -> None:
    python = interpreter_for(system, interpreters)
    spec = workloads[workload]
    benchmark.group = group_label(workload, QUICK)
    results: list[dict[str, Any]] = []

    def fresh_database() -> tuple[tuple[str], dict[str, Any]]:
        dbname = f"awa_compare_{system}_{os.getpid()}_{next(_DATABASE_NUMBERS)}"
        peers_run.create_database(ADMIN_URL, dbname)
        return (dbname,), {}

    def one_run(dbname: str) -> None:
        try:
            url = peers_run.database_url(ADMIN_URL, dbname)
            result = peers_run.run_driver(python, system, url, spec, DRIVER_TIMEOUT_S)
        finally:
            peers_run.drop_database(ADMIN_URL, dbname)
        driver_clock.advance(measured_seconds(workload, result))
        results.append(result)

    benchmark.pedantic(one_run, setup=fresh_database, rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(
        {
            "system": system,
            "label": peers_run.LABELS[system],
            "workload": workload,
            "quick": QUICK,
            "driver_args": spec.args,
            "interpreter": python,
            "driver_results": results,
        }
    )
