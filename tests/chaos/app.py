"""The application the chaos scenarios run: ``python -m awa worker --app
tests.chaos.app:client --queue chaos=N`` (cwd = the repository, PYTHONPATH
set to it), configured by environment variables the scenario sets:

``AWA_CHAOS_DATABASE_URL``  where the worker connects (the server, or PgBouncer)
``AWA_CHAOS_POOLER``        ``transaction``: ``AsyncClient(..., pooler="transaction")``
``AWA_CHAOS_LISTEN_URL``    with a pooler: the direct URL for LISTEN (unset: poll only)
``AWA_CHAOS_WORKER``        JSON object of worker settings (``awa.WorkerConfig``)
``AWA_CHAOS_RUNS_DIR``      where each handler run is recorded

The CLI starts a worker with ``client.start(queues)`` and no further
settings, so ``client`` is an :class:`awa.AsyncClient` whose ``start`` adds
those of ``AWA_CHAOS_WORKER`` (a CLI option for them would make this
unnecessary).

Every handler first records its run, ``job_id run_lease pid unix_time``, as
one line appended to ``runs-<pid>.txt`` with a single ``write`` on an
``O_APPEND`` file: the line is in the kernel once the call returns, so it
survives a SIGKILL of this process a moment later, and recording touches no
database connection, so the faults under test cannot disturb it.

Jobs (the scenario inserts them; kinds are the class names in snake case):

``ChaosWork``          sleeps ``sleep_ms``; ``outcome`` says how it ends:
                       ``complete``; ``retry_once`` (``RetryAfter`` on its
                       first attempt, then completes); ``terminal``
                       (``TerminalError``: fails for good)
``ChaosSpecTrigger``   completes; an ``on_completed_enqueue_with`` spec adds
                       one ``ChaosFollowUp`` (``via="spec"``)
``ChaosStagedTrigger`` completes, having staged one ``ChaosFollowUp``
                       (``via="staged"``) with ``job.enqueue_on_completion``
``ChaosFollowUp``      completes; ``trigger_id`` names the job that made it
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

import awa

QUEUE = "chaos"
#: Crash budget of every chaos job: a job may be held by several killed
#: workers in a row, and ending ``crash_loop`` is not what a scenario tests.
MAX_CRASHES = 1000
#: How long a ``retry_once`` job waits before its second attempt.
RETRY_AFTER_S = 0.3


class ChaosWork(BaseModel):
    seq: int
    sleep_ms: float = 0.0
    outcome: Literal["complete", "retry_once", "terminal"] = "complete"


class ChaosSpecTrigger(BaseModel):
    seq: int
    sleep_ms: float = 0.0


class ChaosStagedTrigger(BaseModel):
    seq: int
    sleep_ms: float = 0.0


class ChaosFollowUp(BaseModel):
    trigger_id: int
    via: Literal["spec", "staged"]


def _worker_settings() -> dict[str, Any]:
    settings = json.loads(os.environ.get("AWA_CHAOS_WORKER", "{}"))
    if not isinstance(settings, dict):
        raise SystemExit("AWA_CHAOS_WORKER must be a JSON object of worker settings")
    return settings


def _client_options() -> dict[str, Any]:
    pooler = os.environ.get("AWA_CHAOS_POOLER")
    if not pooler:
        return {}
    return {"pooler": pooler, "listen_url": os.environ.get("AWA_CHAOS_LISTEN_URL") or None}


class ChaosClient(awa.AsyncClient):
    """An ``AsyncClient`` whose worker takes the scenario's settings."""

    async def start(
        self,
        queues: Sequence[tuple[str, int]] | Mapping[str, int] | None = None,
        **settings: Any,
    ) -> None:
        await super().start(queues, **{**_worker_settings(), **settings})


class RunLedger:
    """Appends one line per handler run; see the module docstring."""

    def __init__(self) -> None:
        self._fd: int | None = None

    def record(self, job: awa.Job[Any]) -> None:
        if self._fd is None:
            directory = Path(os.environ.get("AWA_CHAOS_RUNS_DIR", "."))
            path = directory / f"runs-{os.getpid()}.txt"
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        line = f"{job.id} {job.run_lease} {os.getpid()} {time.time():.6f}\n"
        os.write(self._fd, line.encode())


runs = RunLedger()
# A client constructor that refuses an option (an older awa without pooler
# support) fails here, at import, and the worker exits saying so.
client = ChaosClient(os.environ.get("AWA_CHAOS_DATABASE_URL"), **_client_options())


@client.task(ChaosWork, queue=QUEUE)
async def work(job: awa.Job[ChaosWork]) -> awa.RetryAfter | None:
    runs.record(job)
    await asyncio.sleep(job.args.sleep_ms / 1000)
    if job.args.outcome == "terminal":
        raise awa.TerminalError("this job fails by design")
    if job.args.outcome == "retry_once" and job.attempt == 1:
        return awa.RetryAfter(RETRY_AFTER_S)
    return None


@client.task(ChaosSpecTrigger, queue=QUEUE)
async def spec_trigger(job: awa.Job[ChaosSpecTrigger]) -> None:
    runs.record(job)
    await asyncio.sleep(job.args.sleep_ms / 1000)


@client.task(ChaosStagedTrigger, queue=QUEUE)
async def staged_trigger(job: awa.Job[ChaosStagedTrigger]) -> None:
    runs.record(job)
    job.enqueue_on_completion(
        ChaosFollowUp(trigger_id=job.id, via="staged"), queue=QUEUE, max_crashes=MAX_CRASHES
    )
    await asyncio.sleep(job.args.sleep_ms / 1000)


@client.task(ChaosFollowUp, queue=QUEUE)
async def follow_up(job: awa.Job[ChaosFollowUp]) -> None:
    runs.record(job)


client.on_completed_enqueue_with(
    ChaosSpecTrigger,
    lambda _args, job: awa.EnqueueRequest(
        ChaosFollowUp(trigger_id=job.id, via="spec"), queue=QUEUE, max_crashes=MAX_CRASHES
    ),
)
