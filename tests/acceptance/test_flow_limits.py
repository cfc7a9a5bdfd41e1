"""Flow control the claim applies for the whole fleet (configure_queue):
priority aging, a ceiling on running jobs, and a rate limit, each across
worker processes; and their settings' validation."""

from __future__ import annotations

import asyncio
import datetime
import re
import time

import pytest

import awa
from tests.processes import spawn_worker, stop_worker
from tests.support import FAST_WORKER, eventually

QUEUE = "limited"


async def test_configure_queue_sets_keeps_and_removes_each_setting(client):
    config = await client.configure_queue(QUEUE, priority_aging_interval=30)
    assert config.priority_aging_interval == 30.0
    assert config.global_max_running is None and config.rate_limit is None

    config = await client.configure_queue(QUEUE, global_max_running=3, rate_limit=(50, 5))
    assert config.priority_aging_interval == 30.0  # not given: kept
    assert config.global_max_running == 3
    assert config.rate_limit == (50.0, 5)

    config = await client.configure_queue(
        QUEUE, priority_aging_interval=datetime.timedelta(minutes=2), rate_limit=None
    )
    assert config.priority_aging_interval == 120.0
    assert config.rate_limit is None and config.global_max_running == 3
    assert await client.get_queue_config(QUEUE) == config

    paused = await client.pause_queue(QUEUE)
    assert paused.paused and paused.global_max_running == 3  # one row, both kinds


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("priority_aging_interval", 0, "positive number of seconds"),
        ("priority_aging_interval", "1m", "positive number of seconds"),
        ("global_max_running", 0, "integer from 1"),
        ("global_max_running", 2.5, "integer from 1"),
        ("global_max_running", True, "integer from 1"),
        ("rate_limit", 50, "(max_rate_per_s, burst)"),
        ("rate_limit", (0, 5), "(max_rate_per_s, burst)"),
        ("rate_limit", (50, 0), "(max_rate_per_s, burst)"),
        ("rate_limit", (50, 1.5), "(max_rate_per_s, burst)"),
    ],
)
async def test_a_bad_setting_is_refused_by_name(client, setting, value, says):
    with pytest.raises(awa.ValidationError, match=f"^{setting}: .*{re.escape(says)}"):
        await client.configure_queue(QUEUE, **{setting: value})


async def test_configure_queue_refuses_a_bad_queue_name(client):
    with pytest.raises(awa.ValidationError, match=r"^queue: "):
        await client.configure_queue("no spaces", global_max_running=1)


# ── priority aging ─────────────────────────────────────────────────────


async def _run_order(client, conn, slots: int = 1) -> list[int]:
    """Starts a one-slot worker on QUEUE and returns the ids in the order
    their handlers ran, once every job inserted so far has run."""
    order: list[int] = []

    @client.task(dict, kind="ordered", queue=QUEUE)
    async def ordered(job):
        order.append(job.id)

    total = int(await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE queue = $1", QUEUE))
    await client.start([(QUEUE, slots)], **FAST_WORKER)

    async def all_ran() -> bool:
        return len(order) >= total

    await eventually(all_ran, timeout=30)
    return order


async def _insert(client, priority: int, *, waited_s: float = 0.0, count: int = 1) -> list[int]:
    run_at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited_s)
    jobs = await client.insert_many(
        [{}] * count,
        kind="ordered",
        queue=QUEUE,
        priority=priority,
        run_at=run_at if waited_s else None,
    )
    return [job.id for job in jobs]


async def test_an_aged_job_runs_before_fresher_more_urgent_ones(client, conn):
    await client.configure_queue(QUEUE, priority_aging_interval=60)
    # Due for an hour: priority 4, aged to 1 (three levels in three minutes).
    old = await _insert(client, 4, waited_s=3600)
    urgent = await _insert(client, 1, count=5)
    assert await _run_order(client, conn) == [*old, *urgent]


async def test_without_aging_priority_alone_decides(client, conn):
    old = await _insert(client, 4, waited_s=3600)
    urgent = await _insert(client, 1, count=5)
    assert await _run_order(client, conn) == [*urgent, *old]


async def test_a_claim_takes_only_the_jobs_aged_to_the_level_at_hand(client, conn):
    """Of a lane, only its aged jobs jump ahead; its fresh ones keep their
    priority. Within a level the order is run_at, then id."""
    await client.configure_queue(QUEUE, priority_aging_interval=60)
    aged_4 = await _insert(client, 4, waited_s=600)  # level 1
    aged_3 = await _insert(client, 3, waited_s=90)  # level 2
    fresh_4 = await _insert(client, 4, count=2)  # level 4
    older_1 = await _insert(client, 1, waited_s=30)  # level 1, after aged_4
    fresh_1 = await _insert(client, 1, count=2)  # level 1
    fresh_2 = await _insert(client, 2)  # level 2, after aged_3
    order = await _run_order(client, conn)
    assert order == [*aged_4, *older_1, *fresh_1, *aged_3, *fresh_2, *fresh_4]


async def test_aging_lets_a_low_priority_job_run_under_a_steady_stream_of_urgent_ones(client, conn):
    """A stream of priority-1 jobs that keeps the worker busy, with a backlog
    all along: with aging the priority-4 job runs within a few intervals;
    the control queue's never does while the stream lasts."""
    interval_s = 0.5
    await client.configure_queue("aged", priority_aging_interval=interval_s)
    ran: dict[int, float] = {}

    @client.task(dict, kind="busy", queue="aged")
    async def busy(job):
        ran[job.id] = time.monotonic()
        await asyncio.sleep(0.02)

    async def stream(queue: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await client.insert_many([{}] * 10, kind="busy", queue=queue, priority=1)
            await asyncio.sleep(0.05)  # 200 jobs/s offered, 2 slots take at most 100/s

    stop = asyncio.Event()
    streams = [asyncio.ensure_future(stream(queue, stop)) for queue in ("aged", "plain")]
    try:
        await asyncio.sleep(0.3)  # the backlog builds up
        low = {}
        for queue in ("aged", "plain"):
            low[queue] = (await client.insert({}, kind="busy", queue=queue, priority=4)).id
        await client.start([("aged", 2), ("plain", 2)], **FAST_WORKER)

        async def aged_one_ran() -> bool:
            return low["aged"] in ran

        await eventually(aged_one_ran, timeout=30)
        backlog = await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE queue = 'aged' AND state = 'available'"
        )
        assert backlog > 0, "the stream of urgent jobs kept a backlog throughout"
        assert low["plain"] not in ran, "without aging, the stream starves priority 4"
    finally:
        stop.set()
        await asyncio.gather(*streams)


# ── a fleet-wide ceiling ───────────────────────────────────────────────


@pytest.mark.timeout(180)
async def test_a_ceiling_of_three_holds_across_two_processes_of_ten_slots(database_url, ledger):
    conn = ledger
    async with awa.AsyncClient(database_url) as client:
        await client.configure_queue(QUEUE, global_max_running=3)
        ids = [
            job.id
            for job in await client.insert_many([{"n": n} for n in range(60)], kind="crashy",
                                                queue=QUEUE)
        ]  # fmt: skip
        workers = [
            await spawn_worker(database_url, f"w{n}", mode="sleep:0.05", queue=QUEUE, slots=10)
            for n in range(2)
        ]
        peak = 0
        samples = 0
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                running, done = await conn.fetchrow(
                    """SELECT count(*) FILTER (WHERE state = 'running'),
                              count(*) FILTER (WHERE state = 'completed')
                       FROM awa.jobs WHERE id = ANY($1)""",
                    ids,
                )
                peak = max(peak, running)
                samples += 1
                if done == len(ids):
                    break
                await asyncio.sleep(0.01)
        finally:
            for worker in workers:
                await stop_worker(worker)
        assert done == len(ids)
        assert peak == 3, (peak, samples)
        # Both processes took part: the ceiling is the fleet's, not one process's.
        assert await conn.fetchval("SELECT count(DISTINCT worker) FROM test_runs") == 2


# ── a fleet-wide rate limit ────────────────────────────────────────────


@pytest.mark.timeout(180)
async def test_a_rate_limit_holds_across_two_processes(database_url, ledger):
    """50 jobs a second with a burst of 5: at most 55 start in any one
    second, and at least 400 in ten (bounds, not speed)."""
    conn = ledger
    async with awa.AsyncClient(database_url) as client:
        await client.configure_queue(QUEUE, rate_limit=(50, 5))
        await client.insert_many([{"n": n} for n in range(1000)], kind="crashy", queue=QUEUE)
        workers = [
            await spawn_worker(database_url, f"w{n}", mode="sleep:0.001", queue=QUEUE, slots=10)
            for n in range(2)
        ]
        try:
            await asyncio.sleep(11)
        finally:
            for worker in workers:
                await stop_worker(worker)
        starts = [
            row["attempted_at"]
            for row in await conn.fetch(
                "SELECT attempted_at FROM awa.jobs WHERE queue = $1 AND attempt > 0 "
                "ORDER BY attempted_at",
                QUEUE,
            )
        ]
        assert await conn.fetchval("SELECT count(DISTINCT worker) FROM test_runs") == 2
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM awa.jobs WHERE queue = $1 AND attempt > 1", QUEUE
            )
            == 0
        ), "a job held back is not charged an attempt"
    first = starts[0]
    in_ten = [start for start in starts if start < first + datetime.timedelta(seconds=10)]
    busiest = _busiest_second(starts)
    assert len(in_ten) >= 400, (len(in_ten), busiest)
    assert busiest <= 55, (len(in_ten), busiest)
    print(f"rate limit 50/s, burst 5: {len(in_ten)} started in 10 s, busiest second {busiest}")


def _busiest_second(starts: list[datetime.datetime]) -> int:
    """The most starts in any window of one second (two pointers)."""
    busiest, low = 0, 0
    for high, start in enumerate(starts):
        while start - starts[low] >= datetime.timedelta(seconds=1):
            low += 1
        busiest = max(busiest, high - low + 1)
    return busiest


# ── rate classes: one budget shared across queues ─────────────────────


async def test_rate_classes_are_set_listed_and_deleted_by_name(client):
    shared = await client.configure_rate_class("partner-api", rate=20, burst=2)
    assert (shared.name, shared.rate_per_s, shared.burst) == ("partner-api", 20.0, 2)
    again = await client.configure_rate_class("partner-api", rate=5, burst=1)
    assert await client.list_rate_classes() == [again]
    assert await client.delete_rate_class("partner-api") is True
    assert await client.delete_rate_class("partner-api") is False
    assert await client.list_rate_classes() == []


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"name": "no spaces", "rate": 1, "burst": 1}, "rate_class: "),
        ({"name": "c", "rate": 0, "burst": 1}, "rate: must be a positive number"),
        ({"name": "c", "rate": 1, "burst": 0}, "burst: must be an integer from 1"),
        ({"name": "c", "rate": 1, "burst": 2.5}, "burst: must be an integer from 1"),
    ],
)
async def test_a_bad_rate_class_is_refused_by_name(client, options, says):
    name = options.pop("name")
    with pytest.raises(awa.ValidationError, match=f"^{re.escape(says)}"):
        await client.configure_rate_class(name, **options)


@pytest.mark.timeout(120)
async def test_a_rate_class_is_one_budget_across_queues_and_processes(database_url, ledger):
    """Two queues, each worked by its own process, whose jobs share the class
    `partner-api` (20 a second, burst 2): together at most 22 start in any
    second, at least 80 in five, and both queues get their turn."""
    conn = ledger
    async with awa.AsyncClient(database_url) as client:
        await client.configure_rate_class("partner-api", rate=20, burst=2)
        for queue in ("ra", "rb"):
            await client.insert_many(
                [{"n": n} for n in range(200)], kind="crashy", queue=queue, rate_class="partner-api"
            )
        # Behind them in priority, jobs of no class: the claim passes the
        # held-back lane and takes them.
        unclassed = await client.insert_many(
            [{"n": n} for n in range(50)], kind="crashy", queue="ra", priority=3
        )
        workers = [
            await spawn_worker(database_url, queue, mode="sleep:0.001", queue=queue, slots=10)
            for queue in ("ra", "rb")
        ]
        try:
            await asyncio.sleep(6)
        finally:
            for worker in workers:
                await stop_worker(worker)
        rows = await conn.fetch(
            "SELECT queue, attempted_at FROM awa.jobs WHERE rate_class = 'partner-api' "
            "AND attempt > 0 ORDER BY attempted_at"
        )
        unclassed_done = await conn.fetchval(
            "SELECT count(*) FROM awa.jobs WHERE id = ANY($1) AND state = 'completed'",
            [job.id for job in unclassed],
        )
    starts = [row["attempted_at"] for row in rows]
    first = starts[0]
    in_five = [start for start in starts if start < first + datetime.timedelta(seconds=5)]
    busiest = _busiest_second(starts)
    assert len(in_five) >= 80, (len(in_five), busiest)
    assert busiest <= 22, (len(in_five), busiest)
    assert {row["queue"] for row in rows} == {"ra", "rb"}
    assert unclassed_done == 50


async def test_a_jobs_rate_class_comes_from_its_insert_else_its_task(client, conn):
    @client.task(dict, kind="synced", queue=QUEUE, rate_class="partner-api")
    async def synced(job):
        return None

    from_task = await client.insert({}, kind="synced")
    overridden = await client.insert({}, kind="synced", rate_class="other-api")
    copied = await client.enqueue_many_copy([{}, {}], kind="synced", rate_class="bulk-api")
    assert copied == 2
    classes = dict(await conn.fetch("SELECT id, rate_class FROM awa.jobs"))
    assert classes[from_task.id] == "partner-api"
    assert classes[overridden.id] == "other-api"
    assert sorted(classes.values()).count("bulk-api") == 2


async def test_a_bad_rate_class_name_is_refused_at_insert_and_at_registration(client):
    with pytest.raises(awa.ValidationError, match=r"^rate_class: .* is not a rate class name"):
        await client.insert({}, kind="k", queue=QUEUE, rate_class="no spaces")
    with pytest.raises(awa.ConfigurationError, match="is not a rate class name"):

        @client.task(dict, kind="bad", rate_class="no spaces")
        async def bad(job):
            return None
