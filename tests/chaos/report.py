"""Prints the results table of docs/reliability.md from the JSON lines that
``make chaos`` appends (``target/chaos-results.jsonl``):
``python -m tests.chaos.report [FILE]``. Several runs of one scenario make
one row: jobs of the last run, lost and applied twice summed, recovery the
worst."""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "target" / "chaos-results.jsonl"


def rows(path: Path) -> list[str]:
    runs: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = json.loads(line)
            runs.setdefault(f"{result['scenario']} [{result['form']}]", []).append(result)
    table = [
        "| scenario | runs | jobs (+ follow-ups) | lost | applied twice | max recovery (s) "
        "| passed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, results in runs.items():
        last = results[-1]
        recoveries = [r["max_recovery_s"] for r in results]
        recovery = "never" if None in recoveries else f"{max(recoveries):.2f}"
        passed = sum(1 for r in results if r.get("passed"))
        table.append(
            f"| {name} | {len(results)} | {last['jobs']} (+{last['follow_ups']}) "
            f"| {sum(r['lost'] for r in results)} | {sum(r['applied_twice'] for r in results)} "
            f"| {recovery} | {passed} of {len(results)} |"
        )
    return table


if __name__ == "__main__":
    print("\n".join(rows(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)))
