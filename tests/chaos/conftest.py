"""Fixtures of the chaos scenarios: each report is printed at the end of the
session ("chaos scenarios") and, with ``AWA_CHAOS_RESULTS=path``, appended
to that file as one JSON line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.harness import Report

REPORTS = pytest.StashKey[list[str]]()


@pytest.fixture
def chaos_report(request: pytest.FixtureRequest) -> Callable[[Report], None]:
    """Publishes a scenario's report."""

    def publish(report: Report) -> None:
        request.config.stash.setdefault(REPORTS, []).append(report.summary())
        print(report.summary())
        results = os.environ.get("AWA_CHAOS_RESULTS")
        if results:
            path = Path(results)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as out:
                out.write(json.dumps({"test": request.node.nodeid, **report.as_json()}) + "\n")

    return publish


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    reports = config.stash.get(REPORTS, [])
    if reports:
        terminalreporter.section("chaos scenarios")
        for summary in reports:
            terminalreporter.write_line(summary)
