#!/usr/bin/env python3
"""What each page of the dashboard costs on a big table: ``--jobs`` jobs (a
million by default) in a fresh scratch database, filled as
``list_cost.py`` fills it but as a table at steady state under the default
retention looks: completed jobs finished over the last day
(``completed_retention``, 1 day), dead letters over the last 14 days
(``dead_letter_retention``), so about 1/24 of the completed jobs, 37 500,
finished in the hour the sparklines draw,
then each page's answer timed end to end through the application
(``awa.web.create_app``, called in this process over ASGI: the handler,
its queries and the template; no socket), ``--rounds`` times each; medians
in milliseconds.

    .venv/bin/python benches/operator/dashboard_cost.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

import awa
from awa.web import create_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scratch

FILL = """
INSERT INTO awa.jobs (kind, queue, args, state, run_at, finalized_at, failure_reason, tags,
                      errors, attempt, max_attempts)
SELECT 'kind-' || (g % 20),
       CASE WHEN g % 1000 = 7 THEN 'rare' ELSE 'queue-' || (g % 9) END,
       jsonb_build_object('n', g),
       s.state::awa.job_state,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour'
            ELSE now() - (($1::bigint - g) * interval '1 millisecond') END,
       CASE WHEN s.state = 'completed' THEN now() - ((g % 86400) * interval '1 second')
            WHEN s.state = 'failed' THEN now() - ((g * 7 % 1209600) * interval '1 second') END,
       CASE WHEN s.state = 'failed' THEN 'max_attempts_exhausted' END,
       CASE WHEN g % 1000 = 3 THEN ARRAY['audit'] ELSE '{}'::text[] END,
       CASE WHEN s.state = 'failed' THEN jsonb_build_array(jsonb_build_object(
            'attempt', 1, 'type', 'ValueError', 'message', 'broken', 'outcome', 'failed',
            'at', now(), 'traceback', 'Traceback (most recent call last): ...')) END,
       CASE WHEN s.state IN ('completed', 'failed') THEN 1 ELSE 0 END,
       1
FROM generate_series(1, $1::bigint) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN g % 100 < 90 THEN 'completed'
                                WHEN g % 100 < 95 THEN 'failed'
                                WHEN g % 100 < 99 THEN 'available'
                                ELSE 'scheduled' END AS state) AS s
"""


#: The overview timed with its figures read on the load.
COLD_OVERVIEW = "/ (figures read on the load)"


def pages(jobs: int) -> list[str]:
    """The pages timed: each view, filtered as an operator would, and a
    job deep in the table."""
    middle = jobs // 2
    failed = middle - middle % 100 + 92  # g % 100 in 90..94: failed
    return [
        "/",
        "/jobs",
        "/jobs?state=failed",
        "/jobs?state=available",
        "/jobs?queue=rare",
        "/jobs?tag=audit",
        f"/jobs?before={middle}",
        f"/jobs/{failed}",
        f"/jobs/{failed}?payload=1",
        "/dlq",
        "/dlq?queue=rare",
        "/periodic",
        "/quarantine",
        "/doctor",
    ]


async def run(admin_url: str, jobs: int, rounds: int) -> dict[str, float]:
    async with scratch.filled(admin_url, "awa_dashboard_cost", FILL, jobs) as client:
        timings = await time_pages(client, pages(jobs), rounds)
        # The overview with its figures read on every load (as the first
        # load, and the first after an action, reads them).
        [cold] = (await time_pages(client, ["/"], rounds, overview_max_age=0)).values()
        timings[COLD_OVERVIEW] = cold
        # The overview's two whole-table reads alone, for comparison.
        for label, ask in (
            ("client.list_queues()", client.list_queues),
            ("client.queue_activity()", client.queue_activity),
        ):
            timings[label] = await median_ms(ask, rounds)
        return timings


median_ms = scratch.median_ms


async def time_pages(
    client: awa.AsyncClient, paths: list[str], rounds: int, **app_options: Any
) -> dict[str, float]:
    transport = httpx.ASGITransport(app=create_app(client, **app_options))
    timings: dict[str, float] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as browser:
        for path in paths:
            first = await browser.get(path)  # warm: plans, cache, templates
            if first.status_code != 200:
                raise SystemExit(f"{path} answered {first.status_code}: {first.text[:500]}")

            async def answer(path: str = path) -> object:
                return (await browser.get(path)).raise_for_status()

            timings[path] = await median_ms(answer, rounds)
    return timings


if __name__ == "__main__":
    scratch.main(run, __doc__)
