"""A worker process whose handler takes the process down:
``python -m tests.acceptance.crash_worker URL QUEUE KIND MODE RUNS``.

It serves QUEUE with one handler for KIND. Every run first appends a line
to the file RUNS (JSON: pid, job id, attempt, crashes, run lease), flushed
to disk, so the test knows what each attempt saw. Then, by MODE:

``always``       SIGKILL this process (a job that kills its worker every time)
``once``         SIGKILL this process on the first run only (a marker file,
                 ``RUNS.crashed``, remembers it across processes), then
                 complete normally
``once-then-raise``  as ``once``, but raise ``ValueError`` after the crash
``stubborn``     the task has a 0.3 s timeout and the handler ignores the
                 cancellation it brings, running on (a hung attempt)

The process prints ``started`` once its worker runs and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import awa
from tests.acceptance.worker_process import serve_until_sigterm


def record(runs: Path, job: awa.Job[dict]) -> None:
    line = {
        "pid": os.getpid(),
        "id": job.id,
        "attempt": job.attempt,
        "crashes": job.crashes,
        "run_lease": job.run_lease,
    }
    with runs.open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
        out.flush()
        os.fsync(out.fileno())


def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, queue: str, kind: str, mode: str, runs_path: str) -> None:
    runs = Path(runs_path)
    marker = runs.with_name(runs.name + ".crashed")
    client = awa.AsyncClient(url)

    @client.task(dict, kind=kind, queue=queue, timeout=0.3 if mode == "stubborn" else None)
    async def handler(job: awa.Job[dict]) -> None:
        record(runs, job)
        if mode == "stubborn":
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    runs.with_name(runs.name + ".ignored").touch()
        if mode == "always":
            crash()
        if not marker.exists():
            marker.touch()
            crash()
        if mode == "once-then-raise":
            raise ValueError("the handler failed after the crash")

    await serve_until_sigterm(client, queue, 1)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
