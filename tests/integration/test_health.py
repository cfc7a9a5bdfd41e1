"""``client.health_check()`` and ``awa health``: the database, the schema,
the fleet's workers and its leader, and this client's own worker."""

from __future__ import annotations

import awa
from tests.integration.test_cli_json import awa_json
from tests.support import FAST_WORKER, eventually


async def test_a_migrated_database_without_workers_is_healthy(client):
    report = await client.health_check()
    assert (report.healthy, report.problems) == (True, ())
    assert report.schema_version == report.latest_schema_version
    assert (report.workers, report.leader, report.this_worker_healthy) == ((), None, None)
    assert report.round_trip_ms > 0


async def test_a_running_worker_is_seen_alive_and_leads(client, conn):
    @client.task(dict, kind="noop", queue="health")
    async def noop(job):
        return None

    await client.start([("health", 1)], **FAST_WORKER)
    worker_id = client.worker.worker_id

    async def led() -> awa.HealthReport | None:
        report = await client.health_check()
        return report if report.leader is not None else None

    report = await eventually(led)
    assert report.this_worker_healthy is True
    [seen] = report.workers
    assert (seen.id, seen.alive, seen.queues) == (worker_id, True, ("health",))
    assert (report.leader.worker_id, report.leader.live) == (worker_id, True)
    # A worker that went silent (stopped here first: a running leader
    # would remove the row once it finds it stale).
    await client.shutdown()
    silent = await conn.fetchval(
        "INSERT INTO awa.workers (hostname, pid, queues, heartbeat_at)"
        " VALUES ('gone', 1, '{health}', now() - interval '1 hour') RETURNING id"
    )
    report = await client.health_check()
    assert {w.id: w.alive for w in report.workers} == {silent: False}
    assert report.this_worker_healthy is None


async def test_an_unmigrated_database_is_unhealthy_and_says_to_migrate(fresh_database):
    url = await fresh_database()
    async with awa.AsyncClient(url) as fresh:
        report = await fresh.health_check()
    assert (report.healthy, report.schema_version) == (False, None)
    [problem] = report.problems
    assert "run awa migrate" in problem
    code, envelope = await awa_json(url, "health")
    assert (code, envelope["ok"], envelope["data"]["healthy"]) == (1, True, False)


async def test_awa_health_answers_in_json_and_in_lines(database_url):
    code, envelope = await awa_json(database_url, "health")
    assert (code, envelope["data"]["healthy"]) == (0, True)
    _, out, _ = await run_awa_lines(database_url)
    assert out.splitlines()[0].startswith("healthy: the database answered in ")


async def run_awa_lines(database_url: str) -> tuple[int, str, str]:
    from tests.integration.test_cli import run_awa

    return await run_awa("health", "--database-url", database_url)
