"""awa-queue with the queue's fleet-wide flow control on, none of it
binding, as issue 12 asks to measure it: priority aging every minute,
fairness across eight tenants (each job names one in turn) and a rate class
on every job far above any drain rate. What the settings cost the claim
(each claim reads the queue's partition lanes and spends the class's
tokens), beside the plain run. A queue rate limit is left out: its claims
take turns on the queue's settings row (docs/benchmarks.md, "Flow control,
second part", measured it)."""

from __future__ import annotations

from awa_queue import KIND, QUEUE, AwaQueueAdapter

import common

#: Far above what one machine drains (about 15 000 jobs/s here).
RATE_PER_S = 1_000_000
BURST = 100_000
AGING_INTERVAL_S = 60
RATE_CLASS = "bench-class"
TENANTS = [f"tenant-{n}" for n in range(8)]


def per_tenant(count: int) -> list[dict]:
    """Insert options for ``count`` jobs: the rate class, and the tenants in turn."""
    return [{"rate_class": RATE_CLASS, "partition_key": TENANTS[n % len(TENANTS)]}
            for n in range(count)]  # fmt: skip


class FlowControlAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        await self.client.configure_queue(
            QUEUE,
            priority_aging_interval=AGING_INTERVAL_S,
            fair=True,
        )
        await self.client.configure_rate_class(RATE_CLASS, rate=RATE_PER_S, burst=BURST)

    async def bulk_enqueue(self, payloads: list[dict]) -> int:
        return await self.client.enqueue_many_copy(
            payloads, opts=per_tenant(len(payloads)), kind=KIND, queue=QUEUE
        )

    async def bulk_enqueue_unnest(self, payloads: list[dict]) -> int:
        jobs = await self.client.insert_many(
            payloads, opts=per_tenant(len(payloads)), kind=KIND, queue=QUEUE
        )
        return len(jobs)

    async def insert_one(self, payload: dict) -> None:
        await self.client.insert(
            payload, kind=KIND, queue=QUEUE, rate_class=RATE_CLASS, partition_key=TENANTS[0]
        )


if __name__ == "__main__":
    common.main(FlowControlAdapter)
