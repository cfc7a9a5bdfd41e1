"""(c) Every connection of the workers terminated (``pg_terminate_backend``),
three times: the workers reconnect by themselves and finish every job once."""

from __future__ import annotations

from tests.chaos.harness import Workload, chaos_marks, chaos_run, conclude, long_form

pytestmark = chaos_marks()

if long_form():
    JOBS, INSERT_S, ROUNDS_AT_S = 20_000, 30.0, (8.0, 16.0, 24.0)
else:
    JOBS, INSERT_S, ROUNDS_AT_S = 2_000, 8.0, (2.0, 4.0, 6.0)


async def test_workers_finish_every_job_once_when_all_their_connections_are_terminated_thrice(
    own_server, chaos_report
):
    workload = Workload(jobs=JOBS, insert_s=INSERT_S)
    async with chaos_run(own_server, "c: all connections terminated x3", workload) as run:
        for offset in ROUNDS_AT_S:
            await run.sleep_until(offset)
            await run.terminate_connections()
        await conclude(run, chaos_report)
