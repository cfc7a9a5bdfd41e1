"""awa-queue with one durable follow-up registered: every completed bench job
inserts a follow-up job (``on_completed_enqueue``) in its completion's
transaction. Follow-ups go to a queue nobody works, so the drain measures
the trigger path only; their inserts count in WAL and dead tuples."""

from __future__ import annotations

from awa_queue import KIND, AwaQueueAdapter

import awa
import common

FOLLOW_UP_QUEUE = "bench_follow_up"


class FollowUpAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        self.client.on_completed_enqueue(
            dict,
            lambda args, job: awa.EnqueueRequest(
                {"trigger": job.id}, kind="bench_follow_up", queue=FOLLOW_UP_QUEUE
            ),
            kind=KIND,
        )


if __name__ == "__main__":
    common.main(FollowUpAdapter)
