"""``awa.Client``: the producer and admin API of :class:`awa.AsyncClient`
for code without an event loop of its own (scripts, Django views, WSGI
apps).

Overview: one :class:`AsyncClient` lives on a private event loop that runs
in a daemon thread of the client's own; each method hands the async
method's coroutine to that loop (``asyncio.run_coroutine_threadsafe``) and
waits for its result. So the caller needs no loop, a caller that already
runs one (a sync function called inside an async framework) does not block
on its own loop, and many threads may share one client: their calls
interleave on the private loop as concurrent tasks would, over the same
connection pool.

The thread and the loop start on the first call, not in the constructor, so
a client made at import time in a process that forks afterwards (a
pre-forking WSGI server) starts them in the child that uses it; a child
that inherits a client already started gets a loop and a pool of its own on
its first call (the parent's cannot cross a fork).

Workers and task handlers are async only: run them with
:meth:`AsyncClient.start` or ``awa worker``. To insert inside your own
transaction on psycopg, SQLAlchemy or Django, see :mod:`awa.bridges` and
:mod:`awa.contrib.django`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, Final, Literal, TypeVar, Unpack, overload

from awa import cancellation, dead_letters, health, queues
from awa.client import DEFAULT_LIST_LIMIT, AsyncClient
from awa.connecting import DEFAULT_CONNECT_TIMEOUT_S
from awa.errors import AwaError
from awa.inserts import CopyInsertOptions, InsertOptions
from awa.job import Job, JobState

T = TypeVar("T")
R = TypeVar("R")

#: How long :meth:`Client.close` waits for the private loop's thread to end
#: once the async client is closed.
THREAD_STOP_TIMEOUT_S: Final = 10.0
#: How often a waiting call checks that the private loop's thread still runs.
LIVENESS_CHECK_S: Final = 1.0


class ClientClosed(AwaError, RuntimeError):
    """A method of an :class:`awa.Client` was called after :meth:`~awa.Client.close`."""


class Client:
    """The synchronous client: :class:`awa.AsyncClient`'s inserts,
    inspection, dead-letter, queue and schema methods, each blocking until
    done, with the same arguments and results (each method's docstring
    names its async counterpart, which documents it).

    The constructor takes :class:`AsyncClient`'s options except ``pool``
    (an asyncpg pool belongs to the event loop that made it; this client
    opens its own). Use it as a context manager, or call :meth:`close`;
    after that every method raises :class:`awa.ClientClosed`. It is safe to
    share between threads, and to call from a thread that runs an event
    loop (it blocks that loop for the call: in async code, prefer
    :class:`AsyncClient`). Registering tasks and running a worker stay
    async-only. Inserts run on the client's own connections; to insert
    inside your transaction on another driver, see ``awa.bridges``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_connections: int = 10,
        pooler: Literal["transaction"] | None = None,
        listen_url: str | None = None,
        embedded: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self._options: dict[str, Any] = {
            "max_connections": max_connections,
            "pooler": pooler,
            "listen_url": listen_url,
            "embedded": embedded,
            "connect_timeout": connect_timeout,
        }
        self._url = url
        # Made here so that bad options raise now, in the caller's thread.
        self._async = AsyncClient(url, **self._options)
        self._lock = threading.Lock()
        self._runner: _LoopThread | None = None
        self._pid = os.getpid()
        self._closed = False

    @property
    def async_client(self) -> AsyncClient:
        """The :class:`AsyncClient` the calls run on (on the private loop:
        await its methods only there)."""
        return self._async

    # ── the private loop ────────────────────────────────────────────────

    def _client(self) -> tuple[AsyncClient, _LoopThread]:
        """The async client and its loop's thread, started on first use (and
        again in a forked child); :class:`ClientClosed` after close."""
        with self._lock:
            if self._closed:
                raise ClientClosed("this awa.Client is closed")
            if self._pid != os.getpid():
                self._forked()
            if self._runner is None:
                self._runner = _LoopThread()
            return self._async, self._runner

    def _forked(self) -> None:
        """In a child process: the parent's thread did not come along, and
        its pool's sockets are the parent's; start over with fresh ones."""
        self._pid = os.getpid()
        self._runner = None
        self._async = AsyncClient(self._url, **self._options)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``await async_client.<method>(*args, **kwargs)`` on the private loop."""
        client, runner = self._client()
        return runner.run(getattr(client, method)(*args, **kwargs))

    # ── inserting ───────────────────────────────────────────────────────

    @overload
    def insert(
        self, args: dict[str, Any], **options: Unpack[InsertOptions]
    ) -> Job[dict[str, Any]]: ...

    @overload
    def insert(self, args: T, **options: Unpack[InsertOptions]) -> Job[T]: ...

    def insert(self, args: Any, **options: Unpack[InsertOptions]) -> Job[Any]:
        """:meth:`AsyncClient.insert`, on the client's own connections (no
        ``connection=``: for your transaction use ``awa.bridges``)."""
        job: Job[Any] = self._call("insert", args, **options)
        return job

    @overload
    def insert_many(
        self,
        jobs: Sequence[dict[str, Any]],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[dict[str, Any]]]: ...

    @overload
    def insert_many(
        self,
        jobs: Sequence[T],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[T]]: ...

    def insert_many(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[Any]]:
        """:meth:`AsyncClient.insert_many`, on the client's own connections."""
        inserted: list[Job[Any]] = self._call("insert_many", jobs, opts=opts, **options)
        return inserted

    @overload
    def insert_many_copy(
        self,
        jobs: Sequence[dict[str, Any]],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[dict[str, Any]]]: ...

    @overload
    def insert_many_copy(
        self,
        jobs: Sequence[T],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[T]]: ...

    def insert_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[Any]]:
        """:meth:`AsyncClient.insert_many_copy`, on the client's own connections."""
        inserted: list[Job[Any]] = self._call("insert_many_copy", jobs, opts=opts, **options)
        return inserted

    def enqueue_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> int:
        """:meth:`AsyncClient.enqueue_many_copy`, on the client's own connections."""
        count: int = self._call("enqueue_many_copy", jobs, opts=opts, **options)
        return count

    # ── inspection and cancellation ─────────────────────────────────────

    @overload
    def get_job(self, job_id: int, *, include_payload: bool = False) -> Job[Any]: ...

    @overload
    def get_job(
        self, job_id: int, *, args_type: type[T], include_payload: bool = False
    ) -> Job[T]: ...

    def get_job(
        self, job_id: int, *, args_type: Any = None, include_payload: bool = False
    ) -> Job[Any]:
        """:meth:`AsyncClient.get_job`."""
        job: Job[Any] = self._call(
            "get_job", job_id, args_type=args_type, include_payload=include_payload
        )
        return job

    def list_jobs(
        self,
        *,
        state: JobState | str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        tag: str | None = None,
        before: int | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        include_payload: bool = False,
    ) -> list[Job[Any]]:
        """:meth:`AsyncClient.list_jobs`."""
        jobs: list[Job[Any]] = self._call(
            "list_jobs", state=state, queue=queue, kind=kind, tag=tag, before=before,
            limit=limit, include_payload=include_payload,
        )  # fmt: skip
        return jobs

    def count_by_state(self) -> dict[JobState, int]:
        """:meth:`AsyncClient.count_by_state`."""
        counts: dict[JobState, int] = self._call("count_by_state")
        return counts

    def cancel(self, job_id: int, *, reason: str = cancellation.DEFAULT_REASON) -> Job[Any] | None:
        """:meth:`AsyncClient.cancel`."""
        job: Job[Any] | None = self._call("cancel", job_id, reason=reason)
        return job

    # ── the dead-letter queue ───────────────────────────────────────────

    def list_dlq(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        include_payload: bool = False,
    ) -> list[dead_letters.DeadLetter]:
        """:meth:`AsyncClient.list_dlq`."""
        letters: list[dead_letters.DeadLetter] = self._call(
            "list_dlq", queue=queue, kind=kind, reason=reason, limit=limit,
            include_payload=include_payload,
        )  # fmt: skip
        return letters

    def retry_from_dlq(
        self,
        ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        everything: bool = False,
    ) -> list[int]:
        """:meth:`AsyncClient.retry_from_dlq` (``awa dlq retry``)."""
        redriven: list[int] = self._call(
            "retry_from_dlq", ids, queue=queue, kind=kind, reason=reason, everything=everything
        )
        return redriven

    def purge_dlq(
        self,
        ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        older_than: datetime.timedelta | None = None,
        everything: bool = False,
    ) -> int:
        """:meth:`AsyncClient.purge_dlq`."""
        purged: int = self._call(
            "purge_dlq", ids, queue=queue, kind=kind, reason=reason, older_than=older_than,
            everything=everything,
        )  # fmt: skip
        return purged

    # ── queues ──────────────────────────────────────────────────────────

    def list_queues(self) -> list[queues.QueueSummary]:
        """:meth:`AsyncClient.list_queues`."""
        summaries: list[queues.QueueSummary] = self._call("list_queues")
        return summaries

    def pause_queue(self, queue: str, paused_by: str | None = None) -> queues.QueueConfig:
        """:meth:`AsyncClient.pause_queue`."""
        config: queues.QueueConfig = self._call("pause_queue", queue, paused_by)
        return config

    def resume_queue(self, queue: str) -> queues.QueueConfig:
        """:meth:`AsyncClient.resume_queue`."""
        config: queues.QueueConfig = self._call("resume_queue", queue)
        return config

    # ── schema and health ───────────────────────────────────────────────

    def migrate(self) -> list[int]:
        """:meth:`AsyncClient.migrate`."""
        applied: list[int] = self._call("migrate")
        return applied

    def pending_migrations(self) -> list[tuple[int, str]]:
        """:meth:`AsyncClient.pending_migrations`."""
        waiting: list[tuple[int, str]] = self._call("pending_migrations")
        return waiting

    def health_check(self) -> health.HealthReport:
        """:meth:`AsyncClient.health_check` (this client runs no worker)."""
        report: health.HealthReport = self._call("health_check")
        return report

    # ── closing ─────────────────────────────────────────────────────────

    def close(self) -> None:
        """Closes the connections and stops the private loop's thread; later
        calls raise :class:`awa.ClientClosed`, and so do calls still waiting
        in other threads if the close ends them. Safe to call twice, and
        from any thread but the loop's own."""
        with self._lock:
            if self._closed:
                return
            runner = self._runner
            if runner is not None and runner.is_current():
                raise RuntimeError("awa.Client.close() was called from its own event loop")
            self._closed = True
            self._runner = None
            forked = self._pid != os.getpid()
        if runner is None or forked:
            return
        runner.stop(self._async.close())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _LoopThread:
    """An event loop running in a daemon thread of its own, and the one way
    to run a coroutine on it from another thread and wait for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="awa-sync-client", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, make: Coroutine[Any, Any, R]) -> R:
        """Runs ``make`` on the loop and waits for its result. An interrupt
        of the caller (KeyboardInterrupt) cancels it there; a loop that
        stops meanwhile (the client closed) raises :class:`ClientClosed`,
        never leaves the caller waiting."""
        if self.is_current():
            make.close()
            raise RuntimeError(
                "awa.Client was called from its own event loop (a hook or callback running "
                "there); use the AsyncClient (client.async_client) there instead"
            )
        try:
            future = asyncio.run_coroutine_threadsafe(make, self.loop)
        except RuntimeError:  # the loop closed after this call found it
            make.close()
            raise ClientClosed("this awa.Client is closed") from None
        try:
            while not future.done():
                concurrent.futures.wait([future], timeout=LIVENESS_CHECK_S)
                if not future.done() and not self._thread.is_alive():
                    raise ClientClosed("this awa.Client was closed while the call waited")
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClientClosed("this awa.Client was closed while the call waited") from None
        except BaseException:
            future.cancel()
            raise

    def stop(self, last: Coroutine[Any, Any, None]) -> None:
        """Runs ``last`` (closing the async client), cancels whatever else
        still runs on the loop (calls of other threads, which then raise
        :class:`ClientClosed`), stops the loop and waits for the thread."""

        async def finish() -> None:
            try:
                await last
            finally:
                current = asyncio.current_task()
                others = [task for task in asyncio.all_tasks() if task is not current]
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)

        try:
            self.run(finish())
        finally:
            with contextlib.suppress(RuntimeError):  # closed already
                self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(THREAD_STOP_TIMEOUT_S)
