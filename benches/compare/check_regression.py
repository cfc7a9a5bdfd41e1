#!/usr/bin/env python3
"""Fails when awa-queue is more than 10 % slower than its own baseline.

``make bench-compare`` runs this after ``bench_compare.py``:

    python benches/compare/check_regression.py BASELINE.json CURRENT.json

Both files are pytest-benchmark JSON reports (``--benchmark-json``).
pytest-benchmark's own ``--benchmark-compare-fail`` applies to every benchmark
of the run, the peers' too, and cannot be limited to one system; this check
reads the two reports and looks at one system's benchmarks only (awa-queue by
default). Every timed figure there is a duration or a latency, so a larger
value is worse. A benchmark regresses when its median grew by more than
``--max-regression`` percent of the baseline's magnitude. It also fails when a
benchmark of that system is missing from either report, or when the two
reports ran different sizes (a quick run against a full baseline).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SYSTEM = "awa_queue"
DEFAULT_MAX_REGRESSION_PCT = 10.0


@dataclass
class Verdict:
    """The outcome of comparing one system's benchmarks with its baseline."""

    lines: list[str]  # one per workload, for people
    problems: list[str]  # empty: no regression

    @property
    def failed(self) -> bool:
        return bool(self.problems)


def benchmarks_of(report: dict[str, Any], system: str) -> dict[str, dict[str, Any]]:
    """A report's benchmarks of ``system``, by workload."""
    found = {}
    for bench in report.get("benchmarks", []):
        info = bench.get("extra_info", {})
        if info.get("system") == system:
            found[info["workload"]] = bench
    return found


def compare(
    baseline: dict[str, Any],
    current: dict[str, Any],
    system: str = DEFAULT_SYSTEM,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    stat: str = "median",
) -> Verdict:
    """Compares ``system``'s benchmarks of two pytest-benchmark reports."""
    before = benchmarks_of(baseline, system)
    now = benchmarks_of(current, system)
    lines: list[str] = []
    problems: list[str] = []
    if not now:
        problems.append(f"the current report has no {system} benchmark")
    for workload in sorted(set(before) | set(now)):
        if workload not in before:
            problems.append(f"{system} {workload}: not in the baseline (make bench-baseline)")
            continue
        if workload not in now:
            problems.append(f"{system} {workload}: in the baseline but not measured now")
            continue
        old, new = before[workload], now[workload]
        if old["extra_info"].get("driver_args") != new["extra_info"].get("driver_args"):
            problems.append(
                f"{system} {workload}: measured with other sizes than the baseline "
                f"({new['extra_info'].get('driver_args')} against "
                f"{old['extra_info'].get('driver_args')})"
            )
            continue
        old_s, new_s = float(old["stats"][stat]), float(new["stats"][stat])
        if old_s == 0:
            problems.append(f"{system} {workload}: the baseline's {stat} is 0, nothing to compare")
            continue
        change_pct = (new_s - old_s) / abs(old_s) * 100.0
        regressed = change_pct > max_regression_pct
        lines.append(
            f"{workload:<10} baseline {old_s * 1000:10.3f} ms  now {new_s * 1000:10.3f} ms  "
            f"{change_pct:+7.1f} %  {'REGRESSION' if regressed else 'ok'}"
        )
        if regressed:
            problems.append(
                f"{system} {workload}: {stat} {change_pct:+.1f} % against the baseline "
                f"(more than {max_regression_pct:g} % slower)"
            )
    return Verdict(lines, problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("current", type=Path)
    parser.add_argument("--system", default=DEFAULT_SYSTEM)
    parser.add_argument("--max-regression", type=float, default=DEFAULT_MAX_REGRESSION_PCT)
    parser.add_argument("--stat", default="median", choices=["min", "median", "mean", "max"])
    opts = parser.parse_args(argv)
    verdict = compare(
        json.loads(opts.baseline.read_text()),
        json.loads(opts.current.read_text()),
        opts.system,
        opts.max_regression,
        opts.stat,
    )
    print(f"{opts.system} against {opts.baseline} ({opts.stat}, lower is better):")
    for line in verdict.lines:
        print("  " + line)
    for problem in verdict.problems:
        print("FAIL: " + problem, file=sys.stderr)
    if not verdict.failed:
        print(f"no {opts.system} benchmark regressed by more than {opts.max_regression:g} %")
    return 1 if verdict.failed else 0


if __name__ == "__main__":
    sys.exit(main())
