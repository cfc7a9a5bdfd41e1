"""(e) The workload through PgBouncer in transaction mode
(``AsyncClient(url, pooler="transaction", listen_url=...)``), with a worker
killed and every server connection terminated on the way."""

from __future__ import annotations

import random

import pytest

from tests.chaos.harness import Workload, chaos_marks, chaos_run, conclude, long_form

pytestmark = chaos_marks()

if long_form():
    JOBS, INSERT_S = 20_000, 30.0
    FAULTS = ((6.0, "kill"), (12.0, "terminate"), (18.0, "kill"), (24.0, "terminate"))
    LISTEN = ["direct", "poll"]
else:
    JOBS, INSERT_S = 2_000, 8.0
    FAULTS = ((2.5, "kill"), (5.0, "terminate"))
    LISTEN = ["direct"]


@pytest.mark.parametrize("listen", LISTEN)
async def test_the_workload_through_pgbouncer_in_transaction_mode_finishes_every_job_once(
    own_server, start_pgbouncer, chaos_report, listen
):
    bouncer = start_pgbouncer(own_server.url)
    client_options = {
        "AWA_CHAOS_POOLER": "transaction",
        # LISTEN needs a session: on a direct connection, or none (poll only).
        "AWA_CHAOS_LISTEN_URL": own_server.url if listen == "direct" else "",
    }
    workload = Workload(jobs=JOBS, insert_s=INSERT_S)
    rng = random.Random(5)
    async with chaos_run(
        own_server,
        f"e: PgBouncer transaction mode, LISTEN {listen}",
        workload,
        worker_url=bouncer.url,
        worker_env=client_options,
    ) as run:
        for offset, fault in FAULTS:
            await run.sleep_until(offset)
            if fault == "kill":
                await run.kill_worker(rng.choice(run.fleet.live()))
            else:
                await run.terminate_connections()
        await conclude(run, chaos_report)
