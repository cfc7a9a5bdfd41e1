"""(a) kill -9 of a random worker every few seconds, with replacements."""

from __future__ import annotations

import random

from tests.chaos.harness import Workload, chaos_marks, chaos_run, conclude, long_form

pytestmark = chaos_marks()

if long_form():
    JOBS, KILL_EVERY_S, KILLING_FOR_S = 20_000, 3.0, 30.0
else:
    JOBS, KILL_EVERY_S, KILLING_FOR_S = 2_000, 2.0, 8.0


async def test_random_workers_killed_every_few_seconds_lose_no_job_and_apply_each_outcome_once(
    own_server, chaos_report
):
    workload = Workload(jobs=JOBS, insert_s=KILLING_FOR_S + 2)
    rng = random.Random(1)
    async with chaos_run(own_server, "a: kill -9 of random workers", workload) as run:
        offset = KILL_EVERY_S
        while offset <= KILLING_FOR_S:
            await run.sleep_until(offset)
            await run.kill_worker(rng.choice(run.fleet.live()))
            offset += KILL_EVERY_S
        await conclude(run, chaos_report)
