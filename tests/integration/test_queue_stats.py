"""``client.queue_stats()`` and ``awa queues stats``: per queue, jobs by
state, what finished in the window (throughput, failure rate), the lag of
the oldest due job and what runs now, against jobs a real worker ran."""

from __future__ import annotations

import datetime

import pytest

import awa
from awa import JobState
from tests.integration.test_cli import run_awa
from tests.integration.test_cli_json import awa_json
from tests.queries.test_jobs_queries import claim, register_worker
from tests.support import FAST_WORKER, eventually, states


async def test_counts_match_the_jobs_a_worker_completed_and_failed(client, conn):
    @client.task(dict, kind="stats_job", queue="stats")
    async def stats_job(job):
        if job.args["n"] % 3 == 0:
            raise awa.TerminalError("every third fails")

    for n in range(1, 7):  # 2 of them (3, 6) fail for good, 4 complete
        await client.insert({"n": n}, kind="stats_job", queue="stats")
    await client.start([("stats", 2)], **FAST_WORKER)
    await eventually(lambda: _settled(conn))
    await client.shutdown()
    # One completion from long ago is outside any short window.
    await conn.execute(
        "UPDATE awa.jobs SET finalized_at = now() - interval '2 hours' WHERE id = "
        "(SELECT min(id) FROM awa.jobs WHERE state = 'completed')"
    )
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    await client.insert({"n": 99}, kind="stats_job", queue="stats", run_at=later)

    [stats] = await client.queue_stats(window=datetime.timedelta(minutes=10))
    assert stats.queue == "stats"
    assert stats.counts[JobState.Completed] == 4
    assert stats.counts[JobState.Failed] == 2
    assert stats.counts[JobState.Scheduled] + stats.counts[JobState.Available] == 1
    assert sum(stats.counts.values()) == 7
    assert (stats.completed, stats.failed) == (3, 2)
    assert stats.throughput_per_min == pytest.approx(3 / 10)
    assert stats.failure_rate == pytest.approx(2 / 5)
    assert (stats.lag_s, stats.in_flight) == (None, 0)
    [wide] = await client.queue_stats(window=3 * 3600, queue="stats")
    assert (wide.completed, wide.window_s) == (4, 3 * 3600.0)


async def _settled(conn) -> bool:
    found = await states(conn)
    return found.get("completed", 0) == 4 and found.get("failed", 0) == 2


async def test_lag_is_the_oldest_due_job_and_in_flight_the_running_ones(client, conn):
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10)
    await client.insert({"n": 1}, kind="k", queue="behind", run_at=long_ago)
    await client.insert({"n": 2}, kind="k", queue="behind")
    await client.insert({"n": 3}, kind="k", queue="busy")
    await client.insert({"n": 4}, kind="k", queue="busy")
    assert len(await claim(conn, ["busy"], [2], await register_worker(conn))) == 2

    by_queue = {stats.queue: stats for stats in await client.queue_stats()}
    assert list(by_queue) == ["behind", "busy"]
    behind, busy = by_queue["behind"], by_queue["busy"]
    assert behind.lag_s is not None and behind.lag_s >= 600
    assert (behind.counts[JobState.Available], behind.in_flight) == (2, 0)
    assert (busy.in_flight, busy.lag_s, busy.failure_rate) == (2, None, None)
    assert busy.window_s == awa.queues.DEFAULT_STATS_WINDOW_S


async def test_a_named_queue_without_jobs_has_zeros(client):
    await client.insert({"n": 1}, kind="k", queue="elsewhere")
    [empty] = await client.queue_stats(queue="nothing-here")
    assert (empty.queue, sum(empty.counts.values()), empty.completed) == ("nothing-here", 0, 0)
    assert (empty.throughput_per_min, empty.failure_rate, empty.lag_s) == (0.0, None, None)


@pytest.mark.parametrize("window", [0, -5, "5m", True, datetime.timedelta(0), 10**9])
async def test_a_bad_window_is_a_validation_error(client, window):
    with pytest.raises(awa.ValidationError) as raised:
        await client.queue_stats(window=window)
    assert raised.value.field == "window"


async def test_a_bad_queue_name_is_a_validation_error(client):
    with pytest.raises(awa.ValidationError):
        await client.queue_stats(queue="no spaces")


async def test_awa_queues_stats_answers_in_json_and_in_lines(client, conn, database_url):
    await client.insert({"n": 1}, kind="k", queue="shown")
    await conn.execute(
        "INSERT INTO awa.jobs (kind, queue, args, state, failure_reason, finalized_at)"
        " VALUES ('k', 'shown', '{}', 'failed', 'terminal_error', now())"
    )
    code, envelope = await awa_json(database_url, "queues", "stats", "--window", "90s")
    assert (code, envelope["data"]["window_s"]) == (0, 90.0)
    [shown] = envelope["data"]["queues"]
    assert (shown["queue"], shown["failed"], shown["failure_rate"]) == ("shown", 1, 1.0)
    assert shown["counts"]["available"] == 1 and shown["counts"]["failed"] == 1
    code, out, _ = await run_awa(
        "queues", "stats", "--queue", "shown", "--window", "1h", "--database-url", database_url
    )
    assert code == 0
    assert out.startswith("shown: 0 in flight, lag ")
    assert "last 3600s: 0 completed (0.0/min), 1 failed (failure rate 100.0%)" in out
    code, refused = await awa_json(database_url, "queues", "stats", "--window", "soon")
    assert (code, refused["error"]["type"]) == (2, "UsageError")
