#!/usr/bin/env python3
"""The operator surface's figures in one run: on one scratch database of
``--jobs`` jobs (a million by default; filled as ``dashboard_cost.py``
fills it), the CLI's listings (``list_cost.py``'s questions) and the
dashboard's pages (``dashboard_cost.py``'s, the overview both from memory
and with its figures read on the load), medians of ``--rounds``; then the
drain benchmark's awa rows, plain and with the metrics exported
(``benches/peers/run.py --only awa_queue,awa_queue_metrics,drain10,drain50
--runs N`` on the same server), and their ratio. One table, one JSON file.

    .venv/bin/python benches/operator/side_by_side.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres \\
        --awa-python /path/to/an/install/bin/python --drain-runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dashboard_cost  # noqa: E402 - a sibling script, found through HERE
import list_cost  # noqa: E402
import scratch  # noqa: E402

PEERS = HERE.parent / "peers" / "run.py"
DRAINS = ("drain10", "drain50")


async def listings(admin_url: str, jobs: int, rounds: int) -> dict[str, float]:
    """The CLI's listings and the dashboard's pages on one table, in ms."""
    async with scratch.filled(admin_url, "awa_side_by_side", dashboard_cost.FILL, jobs) as client:
        timings = {
            f"awa {label}": await scratch.median_ms(ask, rounds)
            for label, ask in list_cost.questions(client).items()
        }
        pages = await dashboard_cost.time_pages(client, dashboard_cost.pages(jobs), rounds)
        timings |= {f"dashboard {path}": ms for path, ms in pages.items()}
        cold_pages = await dashboard_cost.time_pages(client, ["/"], rounds, overview_max_age=0)
        timings[f"dashboard {dashboard_cost.COLD_OVERVIEW}"] = cold_pages["/"]
        return timings


def drains(admin_url: str, awa_python: str, runs: int) -> dict[str, Any]:
    """The peer benchmark's drains, awa plain and with metrics exported."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "drains.json"
        subprocess.run(
            [sys.executable, str(PEERS), "--admin-url", admin_url, "--awa-python", awa_python,
             "--only", ",".join(("awa_queue", "awa_queue_metrics", *DRAINS)),
             "--runs", str(runs), "--out", str(out)],
            check=True,
        )  # fmt: skip
        measured = json.loads(out.read_text())["measurements"]
    figures: dict[str, Any] = {}
    for drain in DRAINS:
        plain = measured["awa_queue"][drain]
        with_metrics = measured["awa_queue_metrics"][drain]
        figures[drain] = {
            "plain_jobs_per_s": plain["median"]["jobs_per_s"],
            "metrics_jobs_per_s": with_metrics["median"]["jobs_per_s"],
            "ratio": with_metrics["median"]["jobs_per_s"] / plain["median"]["jobs_per_s"],
            "plain_runs": [run["jobs_per_s"] for run in plain["runs"]],
            "metrics_runs": [run["jobs_per_s"] for run in with_metrics["runs"]],
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True, help="a superuser URL on this machine")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--awa-python", default=sys.executable, help="awa's interpreter for the drains"
    )
    parser.add_argument("--drain-runs", type=int, default=5)
    parser.add_argument("--out", default=None, help="where the JSON goes (default: none)")
    options = parser.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    timings = asyncio.run(listings(options.admin_url, options.jobs, options.rounds))
    drained = drains(options.admin_url, options.awa_python, options.drain_runs)
    print(f"\n{options.jobs} jobs, median of {options.rounds} (ms):")
    for label, ms in timings.items():
        print(f"  {ms:8.1f}  {label}")
    print(f"\ndrains, median of {options.drain_runs} runs (jobs/s):")
    for drain, figures in drained.items():
        print(f"  {drain}: plain {figures['plain_jobs_per_s']:.0f}, metrics exported "
              f"{figures['metrics_jobs_per_s']:.0f}, ratio {figures['ratio']:.3f}")  # fmt: skip
    if options.out:
        document = {"started": started, "jobs": options.jobs, "rounds": options.rounds,
                    "listings_ms": timings, "drains": drained}  # fmt: skip
        Path(options.out).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
