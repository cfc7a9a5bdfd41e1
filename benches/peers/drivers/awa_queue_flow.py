"""awa-queue with the queue's fleet-wide flow control on, none of it
binding: priority aging every minute and a rate limit far above any drain
rate. What the settings cost the claim (a rate-limited queue's claims take
turns on its settings row), beside the plain run."""

from __future__ import annotations

from awa_queue import QUEUE, AwaQueueAdapter

import common

#: Far above what one machine drains (about 15 000 jobs/s here).
RATE_PER_S = 1_000_000
BURST = 100_000
AGING_INTERVAL_S = 60


class FlowControlAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        await self.client.configure_queue(
            QUEUE, priority_aging_interval=AGING_INTERVAL_S, rate_limit=(RATE_PER_S, BURST)
        )


if __name__ == "__main__":
    common.main(FlowControlAdapter)
