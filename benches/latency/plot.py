#!/usr/bin/env python3
"""Draws the latency curve of one ``latency.py`` results file as a PNG.

    benches/latency/.venv/bin/python benches/latency/plot.py RESULTS.json OUT.png

Needs matplotlib (``requirements-plot.txt``; ``make bench-latency`` builds
``benches/latency/.venv`` for it, so the project's own install stays lean).
Top: insert-commit to handler-start latency (p50, p90, p99, max; log scale)
against the offered rate, with the target (p99 ≤ 10 ms at 5 000 jobs/s).
Bottom: the rates the producer and the worker achieved. Rates the worker did
not keep up with are marked. A run shorter than 60 s per rate is titled a
smoke run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(results_path: str, png_path: str) -> None:
    document = json.loads(Path(results_path).read_text())
    points = [p for p in document["points"] if "p50_ms" in p]
    target = document["target"]
    options = document["options"]
    rates = [p["offered_jobs_s"] for p in points]

    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    for key, style in (("p50_ms", "o-"), ("p90_ms", "s-"), ("p99_ms", "^-"), ("max_ms", "v:")):
        top.plot(rates, [p[key] for p in points], style, label=key.removesuffix("_ms"))
    lagging = [p for p in points if not p["kept_up"]]
    if lagging:
        top.scatter(
            [p["offered_jobs_s"] for p in lagging],
            [p["p99_ms"] for p in lagging],
            s=160,
            facecolors="none",
            edgecolors="red",
            label="not kept up",
            zorder=5,
        )
    top.axhline(target["p99_ms"], color="grey", linestyle="--", linewidth=1)
    top.axvline(target["rate_jobs_s"], color="grey", linestyle="--", linewidth=1)
    top.annotate(
        f"target: p99 ≤ {target['p99_ms']:g} ms at {target['rate_jobs_s']:,} jobs/s",
        (target["rate_jobs_s"], target["p99_ms"]),
        textcoords="offset points",
        xytext=(6, 6),
        fontsize=8,
        color="grey",
    )
    top.set_yscale("log")
    top.set_ylabel("insert commit → handler start (ms)")
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8)

    bottom.plot(rates, rates, color="grey", linestyle="--", linewidth=1, label="offered")
    bottom.plot(rates, [p["inserted_jobs_s"] for p in points], "o-", label="inserted (producer)")
    bottom.plot(rates, [p["handled_jobs_s"] for p in points], "s-", label="started (worker)")
    bottom.set_xlabel("offered rate (jobs/s)")
    bottom.set_ylabel("jobs/s")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=8)

    smoke = " — SMOKE RUN, not a result" if document.get("smoke") else ""
    pg = document["postgres"]
    figure.suptitle(
        f"awa-queue latency under load{smoke}\n"
        f"{options['duration_s']:g} s per rate, one worker (max_workers "
        f"{options['concurrency']}), {options['insert']} batches every {options['tick_ms']:g} ms; "
        f"PostgreSQL {pg['server_version'].split()[0]}, {document['host']['cpus']} CPUs, "
        f"{document['started'][:10]}",
        fontsize=9,
    )
    figure.tight_layout()
    Path(png_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, dpi=110)
    print(f"curve written to {png_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT.png")
    main(sys.argv[1], sys.argv[2])
