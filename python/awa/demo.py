"""``python -m awa demo``: enqueue a few hundred real jobs of several kinds,
work them, and print where each ended up.

It shows the outcomes a handler can choose (complete, retry after an error,
``RetryAfter``, ``Snooze``, ``Cancel``, ``TerminalError``), sync and async
handlers, scheduled jobs, bulk inserts by unnest and by COPY, and an insert
that rolls back with the caller's transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import time
import uuid
from collections import defaultdict
from typing import Any

from pydantic import BaseModel

import awa
from awa.databases import (
    create_database,
    describe_server,
    drop_database,
    scratch_name,
    with_database,
)
from awa.job import JobState

SETTLED = {JobState.Completed, JobState.Failed, JobState.Cancelled}
DEMO_TIMEOUT_S = 120.0


class SendEmail(BaseModel):
    to: str
    subject: str


@dataclasses.dataclass
class ResizeImage:
    path: str
    width: int


class SyncInventory(BaseModel):
    sku: str


class PollReport(BaseModel):
    report_id: int


class ChargeCard(BaseModel):
    order_id: int
    cents: int


def build_client(url: str | None) -> awa.AsyncClient:
    """The demo's tasks on ``url``, or on a throwaway server without one."""
    client = awa.AsyncClient(url) if url else awa.AsyncClient(embedded=True)

    @client.task(SendEmail, queue="email")
    async def send_email(job: awa.Job[SendEmail]) -> None:
        await asyncio.sleep(0.005)  # the SMTP round trip
        if job.args.to.startswith("flaky") and job.attempt == 1:
            raise ConnectionError("SMTP server closed the connection")  # retried with backoff

    @client.task(ResizeImage)
    def resize_image(job: awa.Job[ResizeImage]) -> None:
        # A plain `def` handler runs in a thread: CPU work does not block the loop.
        digest = hashlib.sha256(job.args.path.encode())
        for _ in range(job.args.width):
            digest = hashlib.sha256(digest.digest())

    @client.task(SyncInventory)
    async def sync_inventory(job: awa.Job[SyncInventory]) -> awa.RetryAfter | None:
        if job.attempt == 1:
            return awa.RetryAfter(0.2)  # the supplier said "slow down"
        return None

    @client.task(PollReport)
    async def poll_report(job: awa.Job[PollReport]) -> awa.Snooze | None:
        ready_at = job.created_at + datetime.timedelta(seconds=0.6)
        if datetime.datetime.now(datetime.UTC) < ready_at:
            return awa.Snooze(0.2)  # not ready yet; the attempt is not used up
        return None

    @client.task(ChargeCard, queue="payments")
    async def charge_card(job: awa.Job[ChargeCard]) -> awa.Cancel | None:
        if job.args.cents <= 0:
            raise awa.TerminalError(f"order {job.args.order_id}: nothing to charge")
        if job.args.order_id % 7 == 0:
            return awa.Cancel("the order was withdrawn")
        return None

    return client


async def enqueue(client: awa.AsyncClient, count: int, tag: str) -> int:
    options: dict[str, Any] = {"tags": [tag]}
    emails = [
        SendEmail(to=f"{'flaky' if i % 10 == 0 else 'user'}{i}@example.com", subject="Welcome")
        for i in range(count // 3)
    ]
    await client.insert_many(emails, **options)
    images = [ResizeImage(path=f"/photos/{i}.jpg", width=200 + i % 50) for i in range(count // 3)]
    await client.insert_many_copy(images, **options)
    rest = count - len(emails) - len(images)
    charges = [ChargeCard(order_id=i, cents=(i % 5) * 250) for i in range(rest // 2)]
    await client.enqueue_many_copy(charges, priority=1, **options)
    others: list[object] = [SyncInventory(sku=f"SKU-{i}") for i in range(rest - len(charges) - 5)]
    others += [PollReport(report_id=i) for i in range(5)]
    scheduled = datetime.timedelta(seconds=1)
    await client.insert_many(others, run_at=scheduled, **options)
    return len(emails) + len(images) + len(charges) + len(others)


async def show_transactional_enqueue(client: awa.AsyncClient, tag: str) -> None:
    """An insert inside a transaction that rolls back leaves no job behind."""
    db = await client._database()
    async with db.pool.acquire() as connection:
        try:
            async with connection.transaction():
                await client.insert(
                    SendEmail(to="ghost@example.com", subject="never sent"),
                    tags=[tag],
                    connection=connection,
                )
                raise RuntimeError("the signup failed, so its welcome email must not exist")
        except RuntimeError as error:
            print(f"  rolled back with the caller's transaction: {error}")


async def wait_until_settled(
    client: awa.AsyncClient, tag: str, expected: int
) -> dict[str, dict[str, int]]:
    db = await client._database()
    deadline = time.monotonic() + DEMO_TIMEOUT_S
    while True:
        rows = await db.fetch("jobs_summary_by_tag", tag)
        summary: dict[str, dict[str, int]] = defaultdict(dict)
        for row in rows:
            summary[row["kind"]][row["state"]] = row["count"]
        settled = sum(
            count
            for kinds in summary.values()
            for state, count in kinds.items()
            if JobState(state) in SETTLED
        )
        if settled >= expected or time.monotonic() > deadline:
            return summary
        await asyncio.sleep(0.1)


def print_summary(summary: dict[str, dict[str, int]], elapsed_s: float) -> None:
    states = [state.value for state in JobState if any(state.value in k for k in summary.values())]
    width = max(len(kind) for kind in summary) + 2
    print()
    print("kind".ljust(width) + "".join(state.rjust(11) for state in states) + "      total")
    total = 0
    for kind, counts in sorted(summary.items()):
        row_total = sum(counts.values())
        total += row_total
        print(
            kind.ljust(width)
            + "".join(str(counts.get(s, 0)).rjust(11) for s in states)
            + str(row_total).rjust(11)
        )
    print(f"\n{total} jobs settled in {elapsed_s:.1f}s")


async def run(server_url: str | None, count: int, *, keep: bool = False) -> int:
    """Runs the demo in a database of its own: one it creates on
    ``server_url`` (dropped afterwards unless ``keep``), else a throwaway
    server's. It never writes to a database someone else uses."""
    if count < 30:
        raise awa.ConfigurationError("the demo needs at least 30 jobs")
    if server_url is None:
        if keep:
            raise awa.ConfigurationError(
                "--keep keeps the demo's database on a server of yours: give --database-url"
            )
        print("awa demo on a throwaway PostgreSQL (deleted afterwards)")
        return await _run_on(build_client(None), count)
    name = scratch_name("awa_demo")
    await create_database(server_url, name)
    print(f"awa demo in database {name} on {describe_server(server_url)}, created for it")
    try:
        return await _run_on(build_client(with_database(server_url, name)), count)
    finally:
        if keep:
            print(f"kept database {name} (drop it with: DROP DATABASE {name})")
        else:
            await drop_database(server_url, name)
            print(f"dropped database {name} (--keep keeps it)")


async def _run_on(client: awa.AsyncClient, count: int) -> int:
    tag = f"awa-demo-{uuid.uuid4().hex[:8]}"
    try:
        await client.migrate()
        started = time.monotonic()
        expected = await enqueue(client, count, tag)
        print(
            f"  enqueued {expected} jobs of 5 kinds "
            "(unnest and COPY inserts, some scheduled 1s ahead)"
        )
        await show_transactional_enqueue(client, tag)
        await client.start(
            [("email", 16), ("default", 16), ("payments", 4)],
            promote_interval=0.1,
            poll_interval=0.5,
        )
        summary = await wait_until_settled(client, tag, expected)
        print_summary(summary, time.monotonic() - started)
        unsettled = sum(
            n
            for counts in summary.values()
            for s, n in counts.items()
            if JobState(s) not in SETTLED
        )
        return 1 if unsettled else 0
    finally:
        await client.close()
