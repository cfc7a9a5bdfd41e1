"""awa-queue on the uvloop event loop, as ``python -m awa worker`` runs it
when ``awa-queue[uvloop]`` is installed. The adapter is awa_queue's; only the
loop differs. The ratio columns compare the asyncio run (awa_queue), so
that this row shows what the loop alone adds.
"""

from __future__ import annotations

import uvloop
from awa_queue import AwaQueueAdapter

import common

if __name__ == "__main__":
    common.main(AwaQueueAdapter, loop_runner=uvloop.run)
