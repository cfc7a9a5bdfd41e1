"""Tenant fairness (configure_queue(fair=True), partition_key= on insert):
a worker's claims go round-robin across the partitions with jobs waiting,
so one tenant's backlog does not hold back another tenant's first job."""

from __future__ import annotations

import asyncio

import pytest

import awa
from tests.support import FAST_WORKER, eventually

QUEUE = "tenants"
BACKLOG = 10_000


async def _claims_until_first_job_of_b(client, *, fair: bool, wait_claims: int) -> int | None:
    """Runs a 10-slot worker on a backlog of tenant A's jobs, inserts one
    job of tenant B once the worker is busy, and returns how many claims the
    worker made from that insert until B's job started (``None``: it had not
    started after ``wait_claims`` claims)."""
    await client.configure_queue(QUEUE, fair=fair)
    b_job: dict[str, int] = {}
    claims_at_b_start: list[int] = []
    started = 0

    @client.task(dict, kind="tenant_job", queue=QUEUE)
    async def tenant_job(job):
        nonlocal started
        started += 1
        if job.id == b_job.get("id"):
            claims_at_b_start.append(client.worker.producer.claims)
        await asyncio.sleep(0.002)

    await client.enqueue_many_copy([{}] * BACKLOG, kind="tenant_job", partition_key="a")
    await client.start([(QUEUE, 10)], **FAST_WORKER)

    async def busy() -> bool:
        return started >= 50

    await eventually(busy, timeout=30)
    claims_before = client.worker.producer.claims
    b_job["id"] = (await client.insert({}, kind="tenant_job", partition_key="b")).id

    async def decided() -> bool:
        return (
            bool(claims_at_b_start) or client.worker.producer.claims - claims_before > wait_claims
        )

    await eventually(decided, timeout=60)
    if not claims_at_b_start:
        return None
    return claims_at_b_start[0] - claims_before


@pytest.mark.timeout(180)
async def test_with_fairness_a_tenants_first_job_starts_within_five_claims(client):
    claims = await _claims_until_first_job_of_b(client, fair=True, wait_claims=20)
    assert claims is not None and claims <= 5


@pytest.mark.timeout(180)
async def test_without_fairness_the_backlog_runs_first(client):
    assert await _claims_until_first_job_of_b(client, fair=False, wait_claims=20) is None


async def test_fair_is_kept_until_set_again_and_shown(client):
    config = await client.configure_queue(QUEUE, fair=True)
    assert config.fair
    config = await client.configure_queue(QUEUE, global_max_running=3)
    assert config.fair and config.global_max_running == 3
    assert not (await client.configure_queue(QUEUE, fair=False)).fair
    assert (await client.get_queue_config(QUEUE)).fair is False


@pytest.mark.parametrize("value", [1, "yes", None])
async def test_a_bad_fair_setting_is_refused_by_name(client, value):
    with pytest.raises(awa.ValidationError, match=r"^fair: must be True or False"):
        await client.configure_queue(QUEUE, fair=value)
