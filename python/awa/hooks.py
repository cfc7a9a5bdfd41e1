"""Lifecycle hooks: the registry behind ``client.on_event`` and their dispatch.

Hooks observe committed transitions. Each transition of a kind with hooks
becomes one detached task that runs that kind's hooks in registration
order; ``async def`` hooks run on the event loop, plain ``def`` hooks in a
small thread pool so a slow one cannot stall claiming or flushing. A hook
that raises is logged and the next one still runs. Nothing waits for
hooks: not the handler's slot, not the completer, not ``shutdown()``; a
process that dies loses the events it had not dispatched.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from awa import _core
from awa.errors import ConfigurationError
from awa.events import (
    Cancelled,
    Completed,
    Exhausted,
    JobEvent,
    Rescued,
    RescueReason,
    Retried,
    Started,
    WaitingForCallback,
)
from awa.job import ArgsDecoder, Job

log = logging.getLogger("awa.hooks")

HOOK_THREADS: Final = 4

#: The transitions lifecycle code reports, by name.
STARTED: Final = "started"
WAITING_FOR_CALLBACK: Final = "waiting_for_callback"
COMPLETED: Final = "completed"
RETRIED: Final = "retried"
EXHAUSTED: Final = "exhausted"
CANCELLED: Final = "cancelled"
RESCUED: Final = "rescued"
#: An attempt that failed: ``retried`` or ``exhausted``, as the committed row says.
FAILED: Final = "failed"


@dataclass(slots=True)
class Transition:
    """A committed change of one job, as hooks and follow-up specs see it.

    ``job`` is the row after the transition. ``error`` and ``attempt``
    describe a failed attempt (retried, exhausted), ``reason`` a cancel or
    a rescue; ``duration_s`` is how long the handler ran.
    """

    outcome: str
    job: Job[Any]
    duration_s: float = 0.0
    error: str = ""
    attempt: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Hook:
    function: Callable[[Any], Any]
    decode_args: ArgsDecoder
    is_async: bool


def build_event(transition: Transition, args: Any) -> JobEvent:
    """The public event for a transition, carrying ``args`` decoded for one hook."""
    job = transition.job
    outcome = transition.outcome
    if outcome == STARTED:
        return Started(job, args)
    if outcome == COMPLETED:
        return Completed(job, args, datetime.timedelta(seconds=transition.duration_s))
    if outcome == RETRIED:
        return Retried(job, args, transition.error, transition.attempt, job.run_at)
    if outcome == EXHAUSTED:
        return Exhausted(job, args, transition.error, transition.attempt)
    if outcome == CANCELLED:
        return Cancelled(job, args, transition.reason)
    if outcome == WAITING_FOR_CALLBACK:
        return WaitingForCallback(job, args)
    if outcome == RESCUED:
        return Rescued(job, args, RescueReason(transition.reason))
    raise ValueError(f"no event for transition {outcome!r}")


class Hooks:
    """Hooks by job kind, and the tasks dispatching them."""

    def __init__(self) -> None:
        self._by_kind: dict[str, list[Hook]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._threads: ThreadPoolExecutor | None = None

    def add(
        self, kind: str, function: Callable[[Any], Any], decode_args: ArgsDecoder | None
    ) -> None:
        if not callable(function):
            raise ConfigurationError(f"the hook for {kind!r} is not callable")
        is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None)  # noqa: B004 - async callable objects
        )
        hook = Hook(function, decode_args or _core.decode_json, is_async)
        self._by_kind.setdefault(kind, []).append(hook)

    def wants(self, kind: str) -> bool:
        return kind in self._by_kind

    @property
    def any(self) -> bool:
        return bool(self._by_kind)

    def emit(self, transition: Transition) -> None:
        """Dispatches the transition's event to its kind's hooks, detached."""
        hooks = self._by_kind.get(transition.job.kind)
        if not hooks:
            return
        task = asyncio.get_running_loop().create_task(
            self._run(hooks, transition), name=f"awa-hooks-{transition.job.id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, hooks: list[Hook], transition: Transition) -> None:
        decoded: dict[ArgsDecoder, Any] = {}
        for hook in hooks:
            try:
                if hook.decode_args not in decoded:
                    decoded[hook.decode_args] = hook.decode_args(transition.job.args_json)
                event = build_event(transition, decoded[hook.decode_args])
                await self._call(hook, event)
            except Exception:
                log.exception(
                    "%s hook %s for job %d (%s) raised",
                    transition.outcome,
                    getattr(hook.function, "__qualname__", hook.function),
                    transition.job.id,
                    transition.job.kind,
                )

    async def _call(self, hook: Hook, event: JobEvent) -> None:
        if hook.is_async:
            await hook.function(event)
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(HOOK_THREADS, thread_name_prefix="awa-hook")
        result = await asyncio.get_running_loop().run_in_executor(
            self._threads, hook.function, event
        )
        if inspect.isawaitable(result):
            await result

    @property
    def pending(self) -> int:
        """Dispatches not finished yet."""
        return len(self._tasks)

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Waits until every dispatch so far has finished; ``False`` on timeout."""
        if not self._tasks:
            return True
        _done, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return not pending

    def close(self) -> None:
        """Cancels dispatches still running (hooks are best-effort)."""
        for task in self._tasks:
            task.cancel()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None
