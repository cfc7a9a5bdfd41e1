"""awa-queue with a lifecycle hook that does nothing: the fixed cost of
dispatching hooks (two events per job), to set beside the 50 ms hook."""

from __future__ import annotations

from awa_queue import KIND, AwaQueueAdapter

import common


async def noop_hook(event) -> None:
    return None


class NoopHookAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        self.client.on_event_kind(KIND, noop_hook)


if __name__ == "__main__":
    common.main(NoopHookAdapter)
