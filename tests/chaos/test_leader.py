"""(d) The maintenance leader killed (SIGKILL) or frozen (SIGSTOP, its
connections left open): another worker takes over, and maintenance
(promoting due scheduled jobs, rescuing the lost leader's jobs) resumes
within two leader leases."""

from __future__ import annotations

import asyncio

import pytest

from tests.chaos.harness import (
    Fault,
    Report,
    Workload,
    chaos_marks,
    chaos_run,
    conclude,
    leader_lease_s,
    long_form,
    worker_settings,
)

pytestmark = chaos_marks()

if long_form():
    JOBS, INSERT_S, FAULTS_AT_S = 10_000, 30.0, (5.0, 15.0, 25.0)
else:
    JOBS, INSERT_S, FAULTS_AT_S = 1_500, 8.0, (3.0,)
#: Scheduled jobs inserted just before each fault, due just after it.
PROBES, PROBES_DUE_IN_S = 20, 0.5
#: A write the leader had in flight as it was stopped may still commit this soon.
IN_FLIGHT_GRACE_S = 0.5


@pytest.mark.parametrize("fault", ["kill", "freeze"])
async def test_maintenance_resumes_within_two_leader_leases_when_the_leader_is_lost(
    own_server, chaos_report, fault
):
    settings = worker_settings()
    bound_s = 2 * leader_lease_s(settings)
    workload = Workload(jobs=JOBS, insert_s=INSERT_S)
    lost: list[tuple[Fault, list[int]]] = []
    async with chaos_run(own_server, f"d: leader {fault}", workload, settings=settings) as run:
        for offset in FAULTS_AT_S:
            await run.sleep_until(offset)
            leader = await run.wait_for_leader(holding_jobs=True)
            probes = await run.insert_probes(PROBES, due_in_s=PROBES_DUE_IN_S)
            if fault == "kill":
                lost.append((await run.kill_worker(leader, what="kill -9 of the leader"), probes))
            else:
                record = await run.freeze_worker(leader, what="SIGSTOP of the leader")
                lost.append((record, probes))
                # Frozen well past the bound, then let go: its late outcomes
                # must not be applied over the attempts that replaced them.
                await asyncio.sleep(2 * bound_s)
                await run.thaw_worker(leader)

        async def maintenance_resumed(_report: Report) -> list[str]:
            problems = []
            for record, probes in lost:
                promoted = await run.seconds_until_all(
                    probes, record.at, "t.old_state = 'scheduled'"
                )
                # Jobs the leader finished itself as it was stopped need no rescue.
                left = await run.left_alone(record.held_ids, record.at, IN_FLIGHT_GRACE_S)
                rescued = (
                    await run.seconds_until_all(
                        left,
                        record.at,
                        "t.old_state = 'running' AND t.new_state = 'retryable' AND t.crashes > 0",
                    )
                    if left
                    else 0.0
                )
                record.extra["due jobs promoted"] = promoted
                record.extra["its jobs rescued"] = rescued
                record.extra["held and left to rescue"] = len(left)
                for what, seconds in (
                    ("due scheduled jobs were promoted", promoted),
                    ("the leader's jobs were rescued", rescued),
                ):
                    if seconds is None or seconds > bound_s:
                        when = "never" if seconds is None else f"only after {seconds:.2f}s"
                        problems.append(
                            f"after the {record.what} at +{record.offset_s:.1f}s, {what} {when} "
                            f"(bound: two leader leases, {bound_s:.1f}s)"
                        )
            return problems

        await conclude(run, chaos_report, maintenance_resumed)
