#!/usr/bin/env python3
"""What the operator's questions cost on a big table: ``--jobs`` jobs (a
million by default) in a fresh scratch database, then each listing the CLI
and the client answer (``jobs list`` unfiltered and by each filter, the
dead letters, ``queues list``, ``queues stats`` for every queue and for
the rare one) timed end to end from this process,
``--rounds`` times each; medians in milliseconds.

The table: 90 % completed, 5 % failed (dead letters), 4 % available, 1 %
scheduled; ten queues, one of them rare (0.1 %); twenty kinds; a tag on one
job in a thousand. Ids run in insert order, as in life.

    .venv/bin/python benches/operator/list_cost.py \\
        --admin-url postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import awa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scratch

FILL = """
INSERT INTO awa.jobs (kind, queue, args, state, run_at, finalized_at, failure_reason, tags)
SELECT 'kind-' || (g % 20),
       CASE WHEN g % 1000 = 7 THEN 'rare' ELSE 'queue-' || (g % 9) END,
       jsonb_build_object('n', g),
       s.state::awa.job_state,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour'
            ELSE now() - (($1::bigint - g) * interval '1 millisecond') END,
       CASE WHEN s.state IN ('completed', 'failed') THEN now() END,
       CASE WHEN s.state = 'failed' THEN 'terminal_error' END,
       CASE WHEN g % 1000 = 3 THEN ARRAY['audit'] ELSE '{}'::text[] END
FROM generate_series(1, $1::bigint) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN g % 100 < 90 THEN 'completed'
                                WHEN g % 100 < 95 THEN 'failed'
                                WHEN g % 100 < 99 THEN 'available'
                                ELSE 'scheduled' END AS state) AS s
"""


def questions(client: awa.AsyncClient) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "jobs list": lambda: client.list_jobs(limit=50),
        "jobs list --queue rare": lambda: client.list_jobs(queue="rare", limit=50),
        "jobs list --kind kind-7": lambda: client.list_jobs(kind="kind-7", limit=50),
        "jobs list --state failed": lambda: client.list_jobs(state="failed", limit=50),
        "jobs list --state available": lambda: client.list_jobs(state="available", limit=50),
        "jobs list --state scheduled": lambda: client.list_jobs(state="scheduled", limit=50),
        "jobs list --tag audit": lambda: client.list_jobs(tag="audit", limit=50),
        # The worst case: nothing matches, so the page reads every job.
        "jobs list --kind absent": lambda: client.list_jobs(kind="absent", limit=50),
        "dlq list": lambda: client.list_dlq(limit=50),
        "dlq list --queue rare": lambda: client.list_dlq(queue="rare", limit=50),
        "queues list": client.list_queues,
        "queues stats": client.queue_stats,
        "queues stats --queue rare": lambda: client.queue_stats(queue="rare"),
    }


async def run(admin_url: str, jobs: int, rounds: int) -> dict[str, float]:
    async with scratch.filled(admin_url, "awa_list_cost", FILL, jobs) as client:
        return {
            label: await scratch.median_ms(ask, rounds) for label, ask in questions(client).items()
        }


if __name__ == "__main__":
    scratch.main(run, __doc__)
