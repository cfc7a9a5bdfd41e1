"""awa-queue with a slow lifecycle hook: every event of a bench job (Started
and Completed) waits 50 ms in an ``async def`` hook. Hooks run detached,
after the commit, so throughput should match the run without them."""

from __future__ import annotations

import asyncio

from awa_queue import KIND, AwaQueueAdapter

import common

HOOK_DELAY_S = 0.05


async def slow_hook(event) -> None:
    await asyncio.sleep(HOOK_DELAY_S)


class SlowHookAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        self.client.on_event_kind(KIND, slow_hook)


if __name__ == "__main__":
    common.main(SlowHookAdapter)
