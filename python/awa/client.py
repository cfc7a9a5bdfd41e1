"""AsyncClient: tasks, inserts, inspection, migrations and the worker."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import asyncpg

from awa import _core
from awa.config import DEFAULT_MAX_WORKERS, WorkerConfig, normalize_queues
from awa.db import Database, reset_if_changed
from awa.errors import ConfigurationError, JobNotFound, ValidationError
from awa.job import Job, JobState
from awa.migrations import migrate
from awa.tasks import Registry, Task
from awa.worker import Worker

log = logging.getLogger("awa.client")

T = TypeVar("T")
HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])
R = TypeVar("R")

DEFAULT_PRIORITY: Final = 2
DEFAULT_MAX_ATTEMPTS: Final = 25
#: Crashes (worker died mid-attempt) a job survives before it fails with
#: ``crash_loop``. ``None`` means unbounded.
DEFAULT_MAX_CRASHES: Final = 5
DEFAULT_LIST_LIMIT: Final = 100
MAX_LIST_LIMIT: Final = 10_000
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND: Final = datetime.timedelta(microseconds=1)

_UNSET: Any = object()


class AsyncClient:
    """The entry point: register tasks, insert jobs, inspect them, run workers.

    Give a database URL, or an existing asyncpg ``pool``. With neither,
    ``AWA_DATABASE_URL`` is used, and without that a throwaway PostgreSQL is
    started on first use (needs the ``embedded`` extra; its data is deleted
    when the client closes unless ``AWA_PG_DATA`` names a directory).
    Connections open lazily, on the first call that needs one.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        max_connections: int = 10,
    ) -> None:
        if url is not None and pool is not None:
            raise ConfigurationError("give a database url or a pool, not both")
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 1
        ):
            raise ConfigurationError(
                f"max_connections must be an integer >= 1, got {max_connections!r}"
            )
        self._url = url
        self._pool = pool
        self._max_connections = max_connections
        self._registry = Registry()
        self._db: Database | None = None
        self._db_lock = asyncio.Lock()
        self._embedded: Any = None
        self._worker: Worker | None = None

    # ── tasks ───────────────────────────────────────────────────────────

    def task(
        self, args_type: type[T] | Any, *, kind: str | None = None, queue: str = "default"
    ) -> Callable[[HandlerT], HandlerT]:
        """Registers the decorated function as the handler for a job kind.

        ``args_type`` is a pydantic model, a dataclass or ``dict``; the kind
        defaults to the class name in snake case (``SendEmail`` →
        ``send_email``). The handler receives an :class:`awa.Job` whose
        ``args`` is an instance of ``args_type``. ``async def`` handlers run
        on the worker's event loop, plain ``def`` handlers in a thread pool.
        """

        def register(handler: HandlerT) -> HandlerT:
            self._registry.register(args_type, handler, kind=kind, queue=queue)
            return handler

        return register

    @property
    def tasks(self) -> Mapping[str, Task]:
        """Registered tasks by kind."""
        return dict(self._registry.by_kind)

    # ── connections and schema ──────────────────────────────────────────

    async def _database(self) -> Database:
        if self._db is not None:
            return self._db
        async with self._db_lock:
            if self._db is None:
                if self._pool is not None:
                    self._db = Database(self._pool, owns_pool=False)
                else:
                    pool = await asyncpg.create_pool(
                        self._resolve_url(),
                        min_size=1,
                        max_size=self._max_connections,
                        reset=reset_if_changed,
                    )
                    self._db = Database(pool, owns_pool=True)
        return self._db

    def _resolve_url(self) -> str:
        url = self._url or os.environ.get("AWA_DATABASE_URL")
        if url:
            return url
        from awa.embedded import EmbeddedPostgres

        self._embedded = EmbeddedPostgres(durable=True)
        url = self._embedded.start()
        log.warning(
            "no database URL given and AWA_DATABASE_URL is unset: using a throwaway "
            "PostgreSQL at %s (set AWA_DATABASE_URL to use your own)",
            url,
        )
        return str(url)

    @property
    def database_url(self) -> str | None:
        """The URL in use, once connected (``None`` for a caller's pool)."""
        if self._pool is not None:
            return None
        if self._embedded is not None:
            return str(self._embedded.url)
        return self._url or os.environ.get("AWA_DATABASE_URL")

    async def migrate(self) -> list[int]:
        """Brings the ``awa`` schema up to date; safe to run from many processes
        at once. Returns the migration versions applied by this call."""
        db = await self._database()
        return await migrate(db)

    # ── inserting ───────────────────────────────────────────────────────

    async def insert(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_crashes: int | None = DEFAULT_MAX_CRASHES,
        run_at: datetime.datetime | datetime.timedelta | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> Job[Any]:
        """Inserts one job and returns it.

        With ``connection`` (an asyncpg connection, typically inside your own
        transaction) the job commits or rolls back with your data. Every
        limit is checked before any SQL: priority 1–4, max_attempts 1–1000,
        kind and queue 1–200 characters, at most 20 tags, no NUL characters,
        run_at within years 1–9999, args serializable to a JSON object;
        violations raise :class:`awa.ValidationError` naming the field. A
        ``run_at`` in the past makes the job available at once; a
        ``timedelta`` is counted from now.
        """
        rows = _core.InsertRows(1)
        self._add(
            rows,
            args,
            kind,
            queue,
            priority,
            max_attempts,
            max_crashes,
            run_at,
            tags,
            metadata,
            batch=False,
        )
        kinds, queues, encoded, priorities, attempts, crashes, run_ats, tag_lits, metas = (
            rows.columns()
        )
        db = await self._database()
        await db.require_schema(connection)
        row = await db.fetchrow(
            "jobs_insert",
            kinds[0],
            queues[0],
            encoded[0],
            priorities[0],
            attempts[0],
            crashes[0],
            tag_lits[0],
            run_ats[0],
            metas[0],
            connection=connection,
        )
        return self._job(row)

    async def insert_many(
        self,
        jobs: Sequence[Any],
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_crashes: int | None = DEFAULT_MAX_CRASHES,
        run_at: datetime.datetime | datetime.timedelta | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> list[Job[Any]]:
        """Inserts many jobs in one statement and returns them in order.

        Keyword arguments apply to every job; ``opts[i]`` (a dict of the same
        keywords) overrides them for ``jobs[i]``. Validation is all or
        nothing: one bad job raises before anything is written.
        """
        rows = self._rows(
            jobs, kind, queue, priority, max_attempts, max_crashes, run_at, tags, metadata, opts
        )
        if not len(rows):
            return []
        db = await self._database()
        await db.require_schema(connection)
        records = await db.fetch("jobs_insert_many", *rows.columns(), connection=connection)
        return [self._job(record) for record in records]

    async def insert_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_crashes: int | None = DEFAULT_MAX_CRASHES,
        run_at: datetime.datetime | datetime.timedelta | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> list[Job[Any]]:
        """Like :meth:`insert_many` but writes with COPY, and returns the jobs.

        Use :meth:`enqueue_many_copy` when you only need the count: it skips
        reading the rows back. Whether a job with ``run_at`` starts
        ``available`` or ``scheduled`` is decided by this machine's clock.
        """
        rows = self._rows(
            jobs, kind, queue, priority, max_attempts, max_crashes, run_at, tags, metadata, opts
        )
        if not len(rows):
            return []
        db = await self._database()

        async def write(conn: asyncpg.Connection) -> list[Job[Any]]:
            await db.require_schema(conn)
            ids = [r["id"] for r in await db.fetch("jobs_reserve_ids", len(rows), connection=conn)]
            await self._copy(db, conn, rows, ids)
            records = await db.fetch("jobs_by_ids", ids, connection=conn)
            return [self._job(record) for record in records]

        return await self._in_transaction(db, connection, write)

    async def enqueue_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_crashes: int | None = DEFAULT_MAX_CRASHES,
        run_at: datetime.datetime | datetime.timedelta | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        opts: Sequence[Mapping[str, Any] | None] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> int:
        """The fastest bulk insert: COPY, returning only how many jobs were written."""
        rows = self._rows(
            jobs, kind, queue, priority, max_attempts, max_crashes, run_at, tags, metadata, opts
        )
        if not len(rows):
            return 0
        db = await self._database()

        async def write(conn: asyncpg.Connection) -> int:
            await db.require_schema(conn)
            await self._copy(db, conn, rows, None)
            return len(rows)

        return await self._in_transaction(db, connection, write)

    async def _copy(
        self, db: Database, conn: asyncpg.Connection, rows: Any, ids: list[int] | None
    ) -> None:
        now_us = _now_us()
        await db.copy_jobs(conn, rows.copy_columns(ids is not None), rows.copy_text(now_us, ids))
        queues = rows.available_queues(now_us)
        if queues:
            await db.fetchval("jobs_notify_queues", queues, connection=conn)

    @staticmethod
    async def _in_transaction(
        db: Database, connection: asyncpg.Connection | None, write: Callable[[Any], Awaitable[R]]
    ) -> R:
        if connection is not None:
            async with connection.transaction():
                return await write(connection)
        async with db.pool.acquire() as pooled, pooled.transaction():
            return await write(pooled)

    def _rows(
        self,
        jobs: Sequence[Any],
        kind: str | None,
        queue: str | None,
        priority: int,
        max_attempts: int,
        max_crashes: int | None,
        run_at: Any,
        tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None,
        opts: Sequence[Mapping[str, Any] | None] | None,
    ) -> Any:
        if isinstance(jobs, Mapping) or not isinstance(jobs, Sequence):
            raise ValidationError("jobs: must be a list of job arguments", "jobs")
        if opts is not None and len(opts) != len(jobs):
            raise ValidationError(
                f"opts: needs one entry per job ({len(opts)} for {len(jobs)} jobs)", "opts"
            )
        defaults = {
            "kind": kind,
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "max_crashes": max_crashes,
            "run_at": run_at,
            "tags": tags,
            "metadata": metadata,
        }
        rows = _core.InsertRows(len(jobs))
        for index, args in enumerate(jobs):
            options = defaults
            override = opts[index] if opts is not None else None
            if override:
                unknown = set(override) - set(defaults)
                if unknown:
                    raise ValidationError(
                        f"opts[{index}]: unknown options {sorted(unknown)}", f"opts[{index}]"
                    )
                options = {**defaults, **override}
            self._add(rows, args, batch=True, **options)
        return rows

    def _add(
        self,
        rows: Any,
        args: Any,
        kind: str | None,
        queue: str | None,
        priority: int,
        max_attempts: int,
        max_crashes: int | None,
        run_at: Any,
        tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None,
        *,
        batch: bool,
    ) -> None:
        kind, queue = self._registry.resolve(args, kind, queue)
        rows.add(
            args,
            kind,
            queue,
            priority,
            max_attempts,
            max_crashes,
            _run_at_us(run_at),
            tags,
            metadata,
            batch,
        )

    def _job(self, row: Any) -> Job[Any]:
        task = self._registry.by_kind.get(row["kind"])
        return Job.from_row(row, task.decode_args if task is not None else None)

    # ── inspection ──────────────────────────────────────────────────────

    async def get_job(self, job_id: int) -> Job[Any]:
        """The job with this id; raises :class:`awa.JobNotFound` if there is none."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationError(f"job_id: must be an integer (got {job_id!r})", "job_id")
        db = await self._database()
        row = await db.fetchrow("jobs_get", job_id)
        if row is None:
            raise JobNotFound(job_id)
        return self._job(row)

    async def list_jobs(
        self,
        *,
        state: JobState | str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
    ) -> list[Job[Any]]:
        """Jobs, newest first, filtered by any of state, queue and kind."""
        if state is not None:
            try:
                state = JobState(state)
            except ValueError:
                names = ", ".join(s.value for s in JobState)
                raise ValidationError(
                    f"state: must be one of {names} (got {state!r})", "state"
                ) from None
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_LIST_LIMIT
        ):
            raise ValidationError(
                f"limit: must be between 1 and {MAX_LIST_LIMIT} (got {limit!r})", "limit"
            )
        db = await self._database()
        rows = await db.fetch("jobs_list", state and state.value, queue, kind, limit)
        return [self._job(row) for row in rows]

    async def count_by_state(self) -> dict[JobState, int]:
        """How many jobs are in each state (states with none are omitted)."""
        db = await self._database()
        return {
            JobState(row["state"]): row["count"] for row in await db.fetch("jobs_count_by_state")
        }

    # ── the worker ──────────────────────────────────────────────────────

    async def start(
        self,
        queues: Sequence[tuple[str, int]] | Mapping[str, int] | None = None,
        **settings: Any,
    ) -> None:
        """Starts working jobs in this process; returns once the worker runs.

        ``queues`` pairs each queue with its ``max_workers`` (handlers at once),
        e.g. ``[("email", 8), ("default", 32)]``; by default every queue a
        task was registered for, with 10 each. Further keyword arguments
        tune the worker (see :class:`awa.WorkerConfig`).
        """
        if self._worker is not None and self._worker.running:
            raise ConfigurationError("this client's worker is already running")
        if not self._registry.by_kind:
            raise ConfigurationError("register at least one task (@client.task) before start()")
        if queues is None:
            queues = {task.queue: DEFAULT_MAX_WORKERS for task in self._registry.by_kind.values()}
        try:
            config = WorkerConfig(queues=normalize_queues(queues), **settings)
        except TypeError as error:
            raise ConfigurationError(str(error)) from None
        db = await self._database()
        pool_size = db.pool.get_max_size()
        if pool_size < config.connections_needed:
            raise ConfigurationError(
                f"the connection pool holds at most {pool_size} connections, but a worker "
                f"with claim_concurrency={config.claim_concurrency} needs "
                f"{config.connections_needed}; raise max_connections (or your pool's max_size)"
            )
        await db.require_schema()
        worker = Worker(db, self._registry, config)
        await worker.start()
        self._worker = worker

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stops the worker gracefully: no new claims, running handlers get
        ``timeout`` seconds to finish, every outcome is written, and jobs
        still running are given back for another worker."""
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.shutdown(timeout)

    @property
    def worker(self) -> Worker | None:
        """The running worker, if :meth:`start` was called."""
        return self._worker

    async def close(self) -> None:
        """Shuts the worker down (if running) and closes connections; also stops
        the throwaway PostgreSQL if this client started one."""
        await self.shutdown()
        if self._db is not None:
            await self._db.close()
            self._db = None
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


def _now_us() -> int:
    return time.time_ns() // 1000


def _run_at_us(run_at: Any) -> int | None:
    """``run_at`` as microseconds since the epoch (UTC), for the Rust checks."""
    if run_at is None:
        return None
    if isinstance(run_at, datetime.timedelta):
        micros = _now_us() + run_at // _MICROSECOND
    elif isinstance(run_at, datetime.datetime):
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValidationError(
                "run_at: must be timezone-aware (e.g. datetime.now(datetime.UTC))", "run_at"
            )
        micros = (run_at - _EPOCH) // _MICROSECOND
    else:
        raise ValidationError(
            "run_at: must be a timezone-aware datetime or a timedelta "
            f"(got {type(run_at).__name__})",
            "run_at",
        )
    # Far beyond the years 1–9999 the Rust check reports; keep it an int64.
    return max(min(micros, _INT64_MAX), -_INT64_MAX)


_INT64_MAX: Final = 2**63 - 1
