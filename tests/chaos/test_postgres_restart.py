"""(b) PostgreSQL restarted mid-run, ``-m fast`` and ``-m immediate``: the
workers reconnect by themselves and finish every job once."""

from __future__ import annotations

import pytest

from tests.chaos.harness import Workload, chaos_marks, chaos_run, conclude, long_form

pytestmark = chaos_marks()

if long_form():
    JOBS, INSERT_S, RESTARTS_AT_S = 20_000, 30.0, (10.0, 20.0)
else:
    JOBS, INSERT_S, RESTARTS_AT_S = 2_000, 8.0, (3.0,)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_workers_finish_every_job_once_across_a_postgres_restart(
    own_server, chaos_report, mode
):
    workload = Workload(jobs=JOBS, insert_s=INSERT_S)
    async with chaos_run(own_server, f"b: restart -m {mode}", workload) as run:
        for offset in RESTARTS_AT_S:
            await run.sleep_until(offset)
            await run.restart_server(mode)
        await conclude(run, chaos_report)
