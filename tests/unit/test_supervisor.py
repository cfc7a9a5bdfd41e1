"""awa.worker.supervisor: services restarted with backoff and logged; a
service failing for too long makes the worker unhealthy, once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from awa.worker import supervisor
from awa.worker.supervisor import Health, Supervisor


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "RESTART_DELAY_S", 0.001)


async def test_a_service_that_raises_is_started_again_and_each_restart_is_logged(caplog):
    runs = 0
    done = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError(f"failure {runs}")
        done.set()

    health = Health(unhealthy_after_s=60.0)
    supervised = Supervisor(health)
    with caplog.at_level(logging.ERROR, logger="awa.worker"):
        task = supervised.spawn("flaky", flaky)
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.wait_for(task, 5)
    assert runs == 3
    assert supervised.restarts == 2
    restarts = [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]
    assert len(restarts) == 2 and "failure 1" in restarts[0] and "failure 2" in restarts[1]
    assert health.failing == {"flaky": health.failing["flaky"]}, "failing until it says ok"
    health.ok("flaky")
    assert health.failing == {} and health.check()


async def test_a_service_that_ends_on_its_own_is_not_restarted():
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1

    supervised = Supervisor(Health(60.0))
    await asyncio.wait_for(supervised.spawn("once", once), 5)
    assert (runs, supervised.restarts) == (1, 0)


def test_failing_past_the_bound_makes_the_worker_unhealthy_once() -> None:
    told: list[str] = []
    health = Health(unhealthy_after_s=0.0)
    health.on_unhealthy(told.append)
    assert health.check() and health.reason is None
    health.failed("completer", PermissionError("denied"))
    assert health.check() is False
    assert health.check() is False
    assert len(told) == 1 and told[0] == health.reason
    assert "completer" in told[0] and "PermissionError: denied" in told[0]
    health.ok("completer")
    assert health.check() is False, "unhealthy is for good"


def test_a_failure_answered_in_time_keeps_the_worker_healthy() -> None:
    health = Health(unhealthy_after_s=3600.0)
    health.failed("notifier", OSError("reset"))
    assert health.check()
    health.ok("notifier")
    health.failed("notifier", OSError("reset again"))
    assert health.check() and health.reason is None


async def test_stop_all_lets_services_finish_and_cancels_only_those_past_the_grace():
    stop = asyncio.Event()
    finished: list[str] = []

    async def between_passes() -> None:
        await stop.wait()
        await asyncio.sleep(0.01)  # the pass under way ends
        finished.append("quick")

    async def past_the_grace() -> None:
        await stop.wait()
        await asyncio.sleep(60)
        finished.append("slow")

    supervised = Supervisor(Health(unhealthy_after_s=60.0))
    quick = supervised.spawn("quick", between_passes)
    slow = supervised.spawn("slow", past_the_grace)
    stop.set()
    assert await supervised.stop_all(0.5) == ["slow"]
    assert finished == ["quick"]
    assert not quick.cancelled() and slow.cancelled()


async def test_stop_all_cancelled_while_waiting_cancels_the_services():
    supervised = Supervisor(Health(unhealthy_after_s=60.0))
    service = supervised.spawn("deaf", lambda: asyncio.sleep(60))
    stopping = asyncio.create_task(supervised.stop_all(60.0))
    await asyncio.sleep(0.01)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert service.cancelled()
