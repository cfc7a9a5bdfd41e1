"""A process that leaves the interpreter with a worker running:
``python -m tests.acceptance.exit_worker URL MODE``.

MODE ``return``: main returns without shutting the worker down;
``sys_exit``: an async handler calls ``sys.exit(3)``; ``sys_exit_sync``: a
sync handler does; ``sigterm``: the process waits to be sent SIGTERM, with
no handler of its own installed.
"""

from __future__ import annotations

import asyncio
import sys

import awa
from tests.support import FAST_WORKER


async def main(url: str, mode: str) -> None:
    client = awa.AsyncClient(url)

    @client.task(dict, kind="exiting")
    async def exiting(job: awa.Job[dict]) -> None:
        if mode == "sys_exit":
            sys.exit(3)
        await asyncio.sleep(3600)

    @client.task(dict, kind="exiting_sync")
    def exiting_sync(job: awa.Job[dict]) -> None:
        sys.exit(3)

    await client.start([("default", 4)], **FAST_WORKER)
    kind = "exiting_sync" if mode == "sys_exit_sync" else "exiting"
    await client.insert({}, kind=kind)
    print("started", flush=True)
    if mode == "return":
        await asyncio.sleep(0.5)  # the handler is running
        return
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
