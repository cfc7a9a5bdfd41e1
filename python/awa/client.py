"""AsyncClient: tasks, inserts, inspection, migrations and the worker."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, Unpack, cast, overload

import asyncpg

from awa import (
    _core,
    activity,
    callbacks,
    cancellation,
    dead_letters,
    health,
    metrics,
    quarantine,
    queues,
    undecodable,
)
from awa import doctor as doctoring
from awa import explain as explaining
from awa import periodic as periodic_jobs
from awa.config import (
    DEFAULT_HEARTBEAT_STALENESS_S,
    DEFAULT_MAX_CRASHES,
    DEFAULT_MAX_WORKERS,
    positive_seconds,
    timeout_seconds,
    worker_config,
)
from awa.connecting import DEFAULT_CONNECT_TIMEOUT_S, check_caller_connection, open_pool
from awa.db import POOLER_MODES, Database, reset_if_changed
from awa.envelope import args_type_name
from awa.errors import (
    ConfigurationError,
    JobNotFound,
    UniqueConflict,
    ValidationError,
    check_text,
)
from awa.hooks import CANCELLED, COMPLETED, EXHAUSTED, RESCUED, RETRIED, WAITING_FOR_CALLBACK
from awa.inserts import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    CopyInsertOptions,
    InsertOptions,
    UniqueOpts,
    add_job,
    batch_rows,
    single_row,
)
from awa.job import ArgsDecoder, Job, JobState
from awa.lifecycle import Lifecycle
from awa.migrations import migrate as migrate_database
from awa.migrations import pending
from awa.tasks import Registry, Task, args_of, decoder_for, same_args_type
from awa.transaction import Transaction
from awa.worker import Worker

if TYPE_CHECKING:
    from awa.worker.attempt import RunningJob

log = logging.getLogger("awa.client")

#: Cancellation reasons are kept in the job's error history.
MAX_CANCEL_REASON_CHARS: Final = 2000

T = TypeVar("T")
R = TypeVar("R")

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_PRIORITY",
    "AsyncClient",
    "migrate",
]

NO_DATABASE: Final = (
    "no database given: pass a URL (AsyncClient('postgresql://user@host/db')) or pool=, "
    "or set AWA_DATABASE_URL; AsyncClient(embedded=True) starts a throwaway server "
    "for experiments"
)
DEFAULT_LIST_LIMIT: Final = 100
MAX_LIST_LIMIT: Final = 10_000


class AsyncClient:
    """The entry point: register tasks, insert jobs, inspect them, run workers.

    Give a database URL, or an existing asyncpg ``pool``. Behind a pooler in
    transaction mode (PgBouncer's ``pool_mode = transaction``) say
    ``pooler="transaction"``: awa then keeps no session state and no
    prepared statements, and LISTENs on ``listen_url`` (a direct connection
    to the server) if given, else polls (``poll_interval``). With neither,
    ``AWA_DATABASE_URL`` is used; without that the first call that needs the
    database raises :class:`awa.ConfigurationError`. Only
    ``embedded=True`` starts a throwaway PostgreSQL (for experiments and
    demos; needs the ``embedded`` extra; its data is deleted when the client
    closes unless ``AWA_PG_DATA`` names a directory). Connections open
    lazily, on the first call that needs one; one that cannot be opened
    within ``connect_timeout`` seconds, or that the server refuses, raises
    :class:`awa.ConnectionFailed` naming the host, role, database and cause.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        max_connections: int = 10,
        pooler: Literal["transaction"] | None = None,
        listen_url: str | None = None,
        embedded: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        if url is not None and pool is not None:
            raise ConfigurationError("give a database url or a pool, not both")
        if not isinstance(embedded, bool):
            raise ConfigurationError(f"embedded must be True or False (got {embedded!r})")
        if embedded and (url is not None or pool is not None):
            raise ConfigurationError(
                "embedded=True starts a server of its own: give no url or pool"
            )
        if pooler is not None and pooler not in POOLER_MODES:
            raise ConfigurationError(
                f"pooler must be None or one of {list(POOLER_MODES)} (got {pooler!r})"
            )
        if listen_url is not None and not isinstance(listen_url, str):
            raise ConfigurationError("listen_url must be a database URL (a string)")
        if pool is not None and pooler is not None:
            cache = getattr(pool, "_connect_kwargs", {}).get("statement_cache_size")
            if cache != 0:
                raise ConfigurationError(
                    "behind a pooler in transaction mode the pool must keep no prepared "
                    "statements: create it with asyncpg.create_pool(..., statement_cache_size=0)"
                )
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 1
        ):
            raise ConfigurationError(
                f"max_connections must be an integer >= 1, got {max_connections!r}"
            )
        self._connect_timeout = positive_seconds(
            connect_timeout, "connect_timeout", ConfigurationError
        )
        self._url = url
        self._pool = pool
        self._max_connections = max_connections
        self._pooler = pooler
        self._listen_url = listen_url
        self._wants_embedded = embedded
        self._registry = Registry()
        self._lifecycle = Lifecycle(self._registry)
        self._periodic: dict[str, periodic_jobs.PeriodicJob] = {}
        self._db: Database | None = None
        self._db_lock = asyncio.Lock()
        self._embedded: Any = None
        self._worker: Worker | None = None

    # ── tasks ───────────────────────────────────────────────────────────

    def task(
        self,
        args_type: type[T],
        *,
        kind: str | None = None,
        queue: str = "default",
        interrupt_on_cancel: bool = False,
        timeout: float | datetime.timedelta | None = None,
        schema_version: int = 1,
        upcasters: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        rate_class: str | None = None,
    ) -> Callable[[Callable[[RunningJob[T]], R]], Callable[[RunningJob[T]], R]]:
        """Registers the decorated function as the handler for a job kind.

        ``args_type`` is a pydantic model, a dataclass or ``dict``; the kind
        defaults to the class name in snake case (``SendEmail`` →
        ``send_email``). The handler receives an :class:`awa.RunningJob`
        whose ``args`` is an instance of ``args_type``; annotate its
        parameter ``awa.Job[SendEmail]`` or ``awa.RunningJob[SendEmail]``
        (a type checker refuses a handler for other arguments). The
        function itself is returned; type checkers see it as taking a
        ``RunningJob[SendEmail]``, which is what a worker (and
        :class:`awa.testing.HandlerJob`) passes. ``async def`` handlers run
        on the worker's event loop, plain ``def`` handlers in a thread pool.

        When a running job is cancelled (:meth:`cancel`), ``job.is_cancelled()``
        turns true; with ``interrupt_on_cancel=True`` an ``async def``
        handler's task is also cancelled (``asyncio.CancelledError`` at its
        next ``await``).

        ``timeout`` (seconds or a ``timedelta``) bounds each attempt; it
        overrides the queue's ``queue_timeouts`` entry. A handler still
        running then is cancelled and the attempt fails with
        ``AttemptTimeout`` (retried while attempts remain); if its worker
        hung or died, maintenance does the same once the deadline passed.

        ``schema_version`` (default 1) is the version of the arguments this
        task's jobs are written at: inserts, follow-ups and periodic jobs of
        the kind record it. ``upcasters`` maps each older version (exactly 1
        to ``schema_version - 1``) to a function taking the arguments of
        that version as a dict and returning the next version's; a worker
        applies them in turn to older jobs before validating the result as
        ``args_type``. A job this worker cannot decode (no task for its
        kind, a newer version, an upcaster that raised, arguments that do
        not validate) is parked ``undecodable`` without using an attempt;
        see :meth:`retry_undecodable`. A bad version or upcaster set raises
        :class:`awa.ConfigurationError` here.

        ``rate_class`` names the rate class (:meth:`configure_rate_class`)
        whose shared budget this task's jobs spend; an insert's own
        ``rate_class=`` overrides it.
        """
        if not isinstance(interrupt_on_cancel, bool):
            raise ConfigurationError("interrupt_on_cancel: must be True or False")
        timeout_s = timeout_seconds(timeout, "timeout")

        def register(handler: Callable[[RunningJob[T]], R]) -> Callable[[RunningJob[T]], R]:
            self._registry.register(
                args_type,
                handler,
                kind=kind,
                queue=queue,
                interrupt_on_cancel=interrupt_on_cancel,
                timeout_s=timeout_s,
                schema_version=schema_version,
                upcasters=upcasters,
                rate_class=rate_class,
            )
            return handler

        return register

    def set_queue_defaults(self, queue: str, *, max_crashes: int | None) -> None:
        """What jobs inserted into ``queue`` get when the insert does not say:
        ``max_crashes``, the worker crashes a job survives before it fails
        with ``crash_loop`` (``None``: unbounded). Applies to inserts made
        through this client (follow-ups included), from now on."""
        self._registry.set_queue_max_crashes(queue, max_crashes)

    def periodic(
        self,
        name: str,
        cron_expr: str,
        args_type: type[T],
        args: T | Mapping[str, Any],
        *,
        timezone: str = "UTC",
        kind: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        missed_fire_policy: periodic_jobs.MissedFirePolicy = "coalesce",
    ) -> None:
        """Enqueues a job of ``args`` at every fire time of ``cron_expr``.

        ``cron_expr`` has 5 fields (minute hour day-of-month month
        day-of-week) or 6 (seconds first), read in ``timezone`` (an IANA
        name; DST is followed). The maintenance leader of a worker started
        from this client enqueues each fire time once across the fleet,
        through restarts and leader changes; the jobs carry
        ``metadata["cron_name"]`` and ``metadata["cron_fire_at"]``.
        ``missed_fire_policy`` says what happens to fire times more than a
        minute late (no leader ran then): ``"coalesce"`` one job for them
        all, ``"catch_up"`` one each, ``"skip"`` none. A schedule this
        process's code no longer registers is retired by its leader, never
        fired. Anything invalid raises :class:`awa.ValidationError` now.
        """
        if name in self._periodic:
            raise ConfigurationError(f"periodic job {name!r} is registered twice")
        schedule = periodic_jobs.schedule_of(name, cron_expr, timezone, missed_fire_policy)
        value = args_of(args_type, args)
        options: dict[str, Any] = {
            key: option
            for key, option in (
                ("queue", queue), ("priority", priority), ("max_attempts", max_attempts),
                ("tags", None if tags is None else list(tags)),
                ("metadata", None if metadata is None else dict(metadata)),
            )
            if option is not None
        }  # fmt: skip
        # Every check an insert makes.
        batch_rows(self._registry, [value], None, {"kind": kind, **options})
        resolved_kind, resolved_queue, _, _, schema_version, _ = self._registry.resolution(
            value, kind, queue, require_task=True
        )
        options["queue"] = resolved_queue
        if schema_version is not None and schema_version > 1:
            # The stored arguments are this task's: its fires keep the
            # version, whichever release's leader enqueues them (version 1
            # is stored as none, like a job's).
            options["schema_version"] = schema_version
        self._periodic[name] = periodic_jobs.PeriodicJob(
            schedule, resolved_kind, json.loads(_core.encode_json(value)), options
        )

    async def list_periodic(self) -> list[periodic_jobs.PeriodicInfo]:
        """Every periodic job the database knows (retired ones included), by name."""
        return await periodic_jobs.list_periodic(await self._database())

    async def pause_periodic(self, name: str) -> periodic_jobs.PeriodicInfo:
        """Stops ``name`` firing (for the whole fleet) until resumed."""
        return await periodic_jobs.set_paused(await self._database(), name, True)

    async def resume_periodic(self, name: str) -> periodic_jobs.PeriodicInfo:
        """Lets ``name`` fire again, from its next fire time after now."""
        return await periodic_jobs.set_paused(await self._database(), name, False)

    async def trigger_periodic(self, name: str) -> Job[Any]:
        """Enqueues ``name``'s job now, outside its schedule (which is left
        as it was); works for a paused one too."""
        db = await self._database()
        info = await periodic_jobs.get(db, name)
        now = datetime.datetime.now(datetime.UTC)
        options = periodic_jobs.fire_options(info.options, name, now, cron_triggered=True)
        job: Job[Any] = await self.insert(info.args, kind=info.kind, **options)
        return job

    async def delete_periodic(self, name: str) -> bool:
        """Removes ``name``'s row; returns whether there was one. One still
        registered in the leader's code comes back on its next pass."""
        return await periodic_jobs.delete(await self._database(), name)

    async def _enqueue_fires(
        self,
        name: str,
        kind: str,
        args: Any,
        options: Mapping[str, Any],
        fires: Sequence[datetime.datetime],
        connection: Any,
    ) -> None:
        """One periodic job's fires, as jobs, on the leader's connection."""
        await self.insert_many(
            [args] * len(fires),
            kind=kind,
            opts=[
                cast(
                    InsertOptions,
                    {**periodic_jobs.fire_options(options, name, fire), "run_at": fire},
                )
                for fire in fires
            ],
            connection=connection,
        )

    @property
    def tasks(self) -> Mapping[str, Task]:
        """Registered tasks by kind."""
        return dict(self._registry.by_kind)

    # ── lifecycle hooks ─────────────────────────────────────────────────

    def on_event(
        self, args_type: type[T] | Any, hook: Callable[[Any], Any], *, kind: str | None = None
    ) -> None:
        """Calls ``hook(event)`` for every lifecycle event of jobs with these
        arguments; ``event.args`` is an instance of ``args_type``.

        Hooks observe committed transitions (see :mod:`awa.events`), after
        the commit and off the worker's path: they never hold a slot or
        delay claiming, flushing or shutdown, and may be lost if the process
        dies. Several hooks per kind run one after another in registration
        order; one that raises is logged and the next still runs. ``async
        def`` hooks run on the event loop, plain ones in a thread pool.
        ``kind`` is needed when the task was registered with a custom kind.
        """
        job_kind = self._registry.kind_of_type(args_type, kind)
        self._lifecycle.hooks.add(job_kind, hook, decoder_for(args_type))

    def on_event_kind(self, kind: str, hook: Callable[[Any], Any]) -> None:
        """Like :meth:`on_event`, keyed by the kind; ``event.args`` is a plain dict."""
        self._lifecycle.hooks.add(self._registry.kind_of_type(dict, kind), hook, None)

    # ── durable follow-ups ──────────────────────────────────────────────

    def _on_enqueue(
        self,
        outcome: str,
        trigger: Any,
        closure: Callable[..., Any],
        kind: str | None,
        *,
        returns_request: bool,
    ) -> None:
        self._lifecycle.follow_ups.add(
            self._registry.kind_of_type(trigger, kind),
            outcome,
            closure,
            decoder_for(trigger),
            returns_request=returns_request,
        )

    def on_completed_enqueue(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any]], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """When a job with ``trigger`` arguments completes, inserts the job whose
        arguments ``closure(args, job)`` returns, in the completion's own
        transaction: both commit or neither does. ``job`` is the completed
        row. If the closure raises, the completion is rolled back and the
        attempt recorded as a failure instead. The closure may also return
        an :class:`awa.EnqueueRequest` to set insert options.
        """
        self._on_enqueue(COMPLETED, trigger, closure, kind, returns_request=False)

    def on_completed_enqueue_with(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any]], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """Like :meth:`on_completed_enqueue`; the closure returns an
        :class:`awa.EnqueueRequest`, or ``None`` to insert nothing."""
        self._on_enqueue(COMPLETED, trigger, closure, kind, returns_request=True)

    def on_cancelled_enqueue(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any], str], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """On cancellation: ``closure(args, job, reason)``, in the same transaction."""
        self._on_enqueue(CANCELLED, trigger, closure, kind, returns_request=False)

    def on_cancelled_enqueue_with(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any], str], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """:meth:`on_cancelled_enqueue` returning an ``EnqueueRequest`` or ``None``."""
        self._on_enqueue(CANCELLED, trigger, closure, kind, returns_request=True)

    def on_retried_enqueue(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """When a failed attempt will be retried: ``closure(args, job, error,
        attempt, next_run_at)``, in the same transaction."""
        self._on_enqueue(RETRIED, trigger, closure, kind, returns_request=False)

    def on_retried_enqueue_with(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """:meth:`on_retried_enqueue` returning an ``EnqueueRequest`` or ``None``."""
        self._on_enqueue(RETRIED, trigger, closure, kind, returns_request=True)

    def on_exhausted_enqueue(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """When the job fails for good (no attempts left, or a terminal error):
        ``closure(args, job, error, attempt)``, in the same transaction."""
        self._on_enqueue(EXHAUSTED, trigger, closure, kind, returns_request=False)

    def on_exhausted_enqueue_with(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """:meth:`on_exhausted_enqueue` returning an ``EnqueueRequest`` or ``None``."""
        self._on_enqueue(EXHAUSTED, trigger, closure, kind, returns_request=True)

    def on_waiting_for_callback_enqueue(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any]], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """When the job parks for a callback: ``closure(args, job)``, in the same
        transaction."""
        self._on_enqueue(WAITING_FOR_CALLBACK, trigger, closure, kind, returns_request=False)

    def on_waiting_for_callback_enqueue_with(
        self,
        trigger: type[T] | Any,
        closure: Callable[[Any, Job[Any]], Any],
        *,
        kind: str | None = None,
    ) -> None:
        """:meth:`on_waiting_for_callback_enqueue` returning an ``EnqueueRequest`` or ``None``."""
        self._on_enqueue(WAITING_FOR_CALLBACK, trigger, closure, kind, returns_request=True)

    def on_rescued_enqueue(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """When maintenance rescues the job: ``closure(args, job, reason)``.

        Best effort: the rescue commits first and the follow-up is inserted
        in a transaction of its own; if that fails it is logged and the
        rescue stands.
        """
        self._on_enqueue(RESCUED, trigger, closure, kind, returns_request=False)

    def on_rescued_enqueue_with(
        self, trigger: type[T] | Any, closure: Callable[..., Any], *, kind: str | None = None
    ) -> None:
        """:meth:`on_rescued_enqueue` returning an ``EnqueueRequest`` or ``None``."""
        self._on_enqueue(RESCUED, trigger, closure, kind, returns_request=True)

    # ── connections and schema ──────────────────────────────────────────

    async def _database(self) -> Database:
        if self._db is not None:
            return self._db
        async with self._db_lock:
            if self._db is None:
                pooler, listen_url = self._pooler, self._listen_url
                if self._pool is not None:
                    self._db = Database(
                        self._pool, owns_pool=False, pooler=pooler, listen_url=listen_url
                    )
                else:
                    # Behind a pooler in transaction mode: no server-side
                    # prepared statements (see awa/db.py).
                    cache = {} if self._pooler is None else {"statement_cache_size": 0}
                    pool = await open_pool(
                        self._resolve_url(),
                        connect_timeout=self._connect_timeout,
                        min_size=1,
                        max_size=self._max_connections,
                        reset=reset_if_changed,
                        **cache,
                    )
                    self._db = Database(pool, owns_pool=True, pooler=pooler, listen_url=listen_url)
        return self._db

    def _resolve_url(self) -> str:
        if not self._wants_embedded:
            url = self._url or os.environ.get("AWA_DATABASE_URL")
            if not url:
                raise ConfigurationError(NO_DATABASE)
            return url
        # Imported only when asked for: the launcher is not part of the runtime.
        from awa.embedded import EmbeddedPostgres

        self._embedded = EmbeddedPostgres(durable=True)
        url = self._embedded.start()
        log.info("using a throwaway PostgreSQL at %s (embedded=True; deleted on close)", url)
        return str(url)

    @property
    def embedded(self) -> bool:
        """True for a client that runs on a throwaway server of its own."""
        return self._wants_embedded

    @property
    def database_url(self) -> str | None:
        """The URL in use (``None`` for a caller's pool, and for an embedded
        server not started yet)."""
        if self._pool is not None:
            return None
        if self._wants_embedded:
            return None if self._embedded is None else str(self._embedded.url)
        return self._url or os.environ.get("AWA_DATABASE_URL")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A transaction on a connection of the client's pool, for inserts
        that must commit together: ``async with client.transaction() as tx:
        await tx.insert(...)``. Commits when the block ends, rolls back if it
        raises; ``tx.connection`` runs your own SQL in it. With a connection
        of your own, pass ``connection=`` to the inserts instead."""
        db = await self._database()
        async with db.pool.acquire() as connection, connection.transaction():
            yield Transaction(self, connection)

    async def migrate(self) -> list[int]:
        """Brings the ``awa`` schema up to date; safe to run from many processes
        at once. Returns the migration versions applied by this call."""
        db = await self._database()
        return await migrate_database(db)

    async def health_check(self) -> health.HealthReport:
        """Whether the database answers and its schema is this code's, which
        worker processes of the fleet beat lately, who leads maintenance,
        and whether this client's own worker (if it runs one) is healthy:
        an :class:`awa.HealthReport` (``.healthy``, ``.problems``). A
        database that does not answer raises :class:`awa.ConnectionFailed`."""
        worker = self._worker
        staleness_s = (
            DEFAULT_HEARTBEAT_STALENESS_S if worker is None else worker.config.heartbeat_staleness
        )
        return await health.check(await self._database(), worker, staleness_s)

    async def doctor(
        self, thresholds: doctoring.DoctorThresholds | None = None
    ) -> doctoring.DoctorReport:
        """Whether the database can serve awa well: the schema, autovacuum and
        dead tuples, what pins the MVCC horizon, long transactions, a LISTEN
        round trip, a pooler in transaction mode and clock skew. An
        :class:`awa.DoctorReport` of :class:`awa.DoctorCheck` (``ok``,
        ``warn`` or ``fail`` each); ``.ok`` when none fails. ``thresholds``
        (:class:`awa.DoctorThresholds`) overrides the limits
        (docs/operations.md). Works for a role without ``pg_read_all_stats``
        (what it hides is reported as unknown)."""
        return await doctoring.examine(
            await self._database(), thresholds or doctoring.DoctorThresholds()
        )

    async def queue_stats(
        self,
        *,
        window: float | datetime.timedelta = queues.DEFAULT_STATS_WINDOW_S,
        queue: str | None = None,
    ) -> list[queues.QueueStats]:
        """Per queue (or only ``queue``): its jobs by state, the jobs completed
        and failed for good in the last ``window`` (seconds or a timedelta;
        default 5 minutes), as throughput per minute and failure rate, the
        age of the oldest due job (lag) and how many run now. Reads the whole
        jobs table (one queue: its rows): for operators, not a hot loop."""
        return await queues.stats(await self._database(), window, queue)

    async def queue_activity(
        self,
        *,
        minutes: int = activity.DEFAULT_ACTIVITY_MINUTES,
        now: datetime.datetime | None = None,
    ) -> list[activity.QueueActivity]:
        """Per queue, the jobs completed and failed for good in each of the
        last ``minutes`` minutes up to ``now`` (default: the present), oldest
        first: an :class:`awa.activity.QueueActivity` per queue that finished a job
        then (the dashboard's sparklines). Reads the whole jobs table, as
        :meth:`queue_stats` does: for operators, not a hot loop."""
        minutes = activity.check_minutes(minutes)
        return await activity.per_minute(await self._database(), minutes, now)

    async def pending_migrations(self) -> list[tuple[int, str]]:
        """The migrations :meth:`migrate` would apply now, as ``(version,
        name)``, oldest first; applies nothing (``awa migrate --dry-run``)."""
        db = await self._database()
        return [(migration.version, migration.name) for migration in await pending(db)]

    # ── inserting ───────────────────────────────────────────────────────
    #
    # Each insert is typed by its arguments: Job[T] for a model or dataclass,
    # Job[dict[str, Any]] for a dict (not the inferred dict[str, object] of a
    # dict whose values differ in type, whose args could not be used).

    @overload
    async def insert(
        self,
        args: dict[str, Any],
        *,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> Job[dict[str, Any]]: ...

    @overload
    async def insert(
        self,
        args: T,
        *,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> Job[T]: ...

    async def insert(
        self,
        args: Any,
        *,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> Job[Any]:
        """Inserts one job and returns it, typed and decoded as ``args`` was
        given: ``insert(SendEmail(...))`` gives a ``Job[SendEmail]`` (whether
        or not this client has a task for the kind), a dict stays a dict
        (``Job[dict[str, Any]]``).

        ``options`` are :class:`awa.InsertOptions`: ``kind``, ``queue``,
        ``priority``, ``max_attempts``, ``max_crashes``, ``run_at``,
        ``tags``, ``metadata``, ``timeout``, ``deadline``,
        ``schema_version``, ``rate_class``, ``partition_key`` and
        ``unique_opts``, each with its limits there. ``partition_key`` (1–255
        characters, no control characters) names the tenant the job belongs
        to: in a queue configured ``fair=True`` (:meth:`configure_queue`)
        claims take the tenants' jobs in turn. The returned job carries its
        ``rate_class`` and ``partition_key``. Every limit is checked
        before any SQL; a violation raises :class:`awa.ValidationError`
        naming the field, and an unknown option name is refused the same
        way. A ``run_at`` in the past makes the job available at once; a
        ``timedelta`` is counted from now. ``timeout`` bounds each attempt
        of this job, over its task's and queue's timeouts; ``deadline``
        bounds the whole job: no attempt runs past it, and a job still
        unfinished then fails with reason ``deadline_exceeded``.

        With ``connection`` (an asyncpg connection, or one from
        ``pool.acquire()``, typically inside your own transaction) the job
        commits or rolls back with your data; anything else (a pool, another
        driver's connection) raises :class:`awa.ValidationError`, and a
        connection outside a transaction is said once in the log (each
        insert on it commits at once).

        With ``unique_opts`` (:class:`awa.UniqueOpts` or a dict of its
        fields; ``{}`` for the defaults) the job is not inserted when another
        job with the same unique key is in one of the blocking states:
        :class:`awa.UniqueConflict` is raised, naming that job, and a
        caller's transaction stays usable.
        """
        check_caller_connection(connection)
        rows, decode = single_row(self._registry, args, options)
        db = await self._database()
        await db.require_schema(connection)
        row = await db.fetchrow("jobs_insert", rows.json_rows(), connection=connection)
        if row is None:
            [key] = rows.unique_keys()
            holder = await db.fetchval("jobs_unique_holder", key, connection=connection)
            raise UniqueConflict(holder)
        metrics.add(metrics.JOB_INSERTED)
        return self._job(row, decode=decode)

    @overload
    async def insert_many(
        self,
        jobs: Sequence[dict[str, Any]],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[dict[str, Any]]]: ...

    @overload
    async def insert_many(
        self,
        jobs: Sequence[T],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[T]]: ...

    async def insert_many(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[InsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[InsertOptions],
    ) -> list[Job[Any]]:
        """Inserts many jobs in one statement and returns them in order, each
        decoded as its arguments were given (see :meth:`insert`; where one
        batch gives a kind arguments of several types, that kind's jobs
        decode as its task says, else as dicts).

        ``options`` (:class:`awa.InsertOptions`) apply to every job;
        ``opts[i]`` (a dict of the same options) overrides them for
        ``jobs[i]``. Validation is all or nothing: one bad job raises before
        anything is written. Jobs with ``unique_opts`` whose key is already
        held are skipped, so the list returned can be shorter than ``jobs``.
        """
        check_caller_connection(connection)
        rows, decoders = batch_rows(self._registry, jobs, opts, options)
        if not len(rows):
            return []
        db = await self._database()
        await db.require_schema(connection)
        records = await db.fetch("jobs_insert", rows.json_rows(), connection=connection)
        metrics.add(metrics.JOB_INSERTED, len(records))
        return [self._job(record, decode=decoders.get(record["kind"])) for record in records]

    @overload
    async def insert_many_copy(
        self,
        jobs: Sequence[dict[str, Any]],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[dict[str, Any]]]: ...

    @overload
    async def insert_many_copy(
        self,
        jobs: Sequence[T],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[T]]: ...

    async def insert_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> list[Job[Any]]:
        """Like :meth:`insert_many` but writes with COPY, and returns the jobs
        (typed and decoded as :meth:`insert_many` says). ``unique_opts`` is
        refused: COPY cannot skip duplicates.

        Use :meth:`enqueue_many_copy` when you only need the count: it skips
        reading the rows back. Whether a job with ``run_at`` starts
        ``available`` or ``scheduled`` is decided by the database's clock, as
        for :meth:`insert`.
        """
        check_caller_connection(connection)
        rows, decoders = batch_rows(self._registry, jobs, opts, options, copy=True)
        if not len(rows):
            return []
        db = await self._database()

        async def write(conn: asyncpg.Connection) -> list[Job[Any]]:
            await db.require_schema(conn)
            ids = await self._copy(db, conn, rows, with_ids=True)
            records = await db.fetch("jobs_by_id_range", ids[0], ids[-1], connection=conn)
            if len(records) != len(ids):
                # Other sessions took ids inside the range while these were reserved.
                mine = set(ids)
                records = [record for record in records if record["id"] in mine]
            return [self._job(record, decode=decoders.get(record["kind"])) for record in records]

        return await self._in_transaction(db, connection, write)

    async def enqueue_many_copy(
        self,
        jobs: Sequence[Any],
        *,
        opts: Sequence[CopyInsertOptions | None] | None = None,
        connection: asyncpg.Connection | None = None,
        **options: Unpack[CopyInsertOptions],
    ) -> int:
        """The fastest bulk insert: COPY, returning only how many jobs were
        written (options as for :meth:`insert_many_copy`)."""
        check_caller_connection(connection)
        rows, _decoders = batch_rows(self._registry, jobs, opts, options, copy=True)
        if not len(rows):
            return 0
        db = await self._database()

        async def write(conn: asyncpg.Connection) -> int:
            await db.require_schema(conn)
            await self._copy(db, conn, rows, with_ids=False)
            return len(rows)

        return await self._in_transaction(db, connection, write)

    @staticmethod
    async def _copy(
        db: Database, conn: asyncpg.Connection, rows: Any, *, with_ids: bool
    ) -> list[int]:
        """COPYs the rows inside the caller's transaction; returns the ids it
        reserved for them (``with_ids``), in order.

        The enqueue time is read first, after the transaction has an id, as
        ``jobs_insert`` reads it: jobs without a ``run_at`` of their own get
        it, and a job available at once but keyed before it lowers its lane
        (docs/storage.md, Lanes)."""
        [start] = await db.fetch("jobs_copy_start", len(rows) if with_ids else 0, connection=conn)
        enqueued_us, ids = start["enqueued_us"], start["ids"]
        lane_queues, lane_priorities, lane_keys = rows.partition_lanes()
        if lane_queues:
            await db.fetch(
                "jobs_copy_open_partition_lanes",
                lane_queues, lane_priorities, lane_keys,
                connection=conn,
            )  # fmt: skip
        await db.copy_jobs(
            conn,
            rows.copy_columns(with_ids),
            rows.copy_text(enqueued_us, ids if with_ids else None),
        )
        metrics.add(metrics.JOB_INSERTED, len(rows))
        if lane_queues:
            await db.fetch("jobs_copy_partition_lanes_opened_end", connection=conn)
        queues, priorities, run_ats = rows.backdated_lanes(enqueued_us)
        if queues:
            await db.fetchval("jobs_lower_lanes", queues, priorities, run_ats, connection=conn)
        woken = rows.available_queues(enqueued_us)
        if woken:
            await db.fetchval("jobs_notify_queues", woken, connection=conn)
        return list(ids)

    @staticmethod
    async def _in_transaction(
        db: Database, connection: asyncpg.Connection | None, write: Callable[[Any], Awaitable[R]]
    ) -> R:
        if connection is not None:
            async with connection.transaction():
                return await write(connection)
        async with db.pool.acquire() as pooled, pooled.transaction():
            return await write(pooled)

    def _job(
        self, row: Any, include_payload: bool = True, decode: ArgsDecoder | None = None
    ) -> Job[Any]:
        """A job from a row; its args decode with ``decode``, else as the
        kind's task says (a dict for a kind without one), upcast first when
        written at an older version of that task."""
        return self._registry.committed_job(row, with_payload=include_payload, decode=decode)

    # ── the dead-letter queue ───────────────────────────────────────────

    async def list_dlq(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        include_payload: bool = False,
    ) -> list[dead_letters.DeadLetter]:
        """Failed jobs, newest first (by id, as :meth:`list_jobs`), each with
        its :class:`awa.DeadLetterReason` (``max_attempts_exhausted``,
        ``terminal_error``, ``callback_timeout``, ``deadline_exceeded``,
        ``crash_loop``); args and metadata only with ``include_payload=True``
        (see :meth:`get_job`)."""
        _check_flag("include_payload", include_payload)
        _check_limit(limit)
        selected = dead_letters.filters(None, queue, kind, reason)
        return await dead_letters.list_dead_letters(
            await self._database(), self._registry.committed_job, selected, limit, include_payload
        )

    async def retry_from_dlq(
        self,
        ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        everything: bool = False,
    ) -> list[int]:
        """Sends dead letters back to work (available now, attempts and crashes
        reset, error history kept) and returns their ids. Give ``ids`` or a
        filter; ``everything=True`` redrives every dead letter.

        A dead letter whose unique key another job holds now (the default
        ``unique_opts.states`` leave out ``failed``, so a new job may have
        taken it) stays ``failed``; the others are redriven and committed
        all the same. Then :class:`awa.UniqueConflict` is raised:
        ``existing_id`` is the job holding the key, ``job_id`` the dead letter
        left behind, ``conflicts`` every such ``(dead letter, holder)`` pair
        and ``redriven`` the ids this call would have returned."""
        selected = dead_letters.filters(ids, queue, kind, reason)
        dead_letters.require_selection(selected, everything, "retry_from_dlq")
        return await dead_letters.redrive(await self._database(), selected)

    async def purge_dlq(
        self,
        ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
        reason: dead_letters.DeadLetterReason | str | None = None,
        older_than: datetime.timedelta | None = None,
        everything: bool = False,
    ) -> int:
        """Deletes dead letters (failed before ``older_than`` ago, if given) and
        returns how many. Give ``ids`` or a filter; ``everything=True``
        purges every dead letter."""
        selected = dead_letters.filters(ids, queue, kind, reason)
        if older_than is not None and not isinstance(older_than, datetime.timedelta):
            raise ValidationError("older_than: must be a timedelta", "older_than")
        dead_letters.require_selection(selected, everything or older_than is not None, "purge_dlq")
        before = None if older_than is None else datetime.datetime.now(datetime.UTC) - older_than
        return await dead_letters.purge(await self._database(), selected, before)

    # ── undecodable jobs ────────────────────────────────────────────────

    async def retry_undecodable(
        self,
        ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        kind: str | None = None,
    ) -> int:
        """Makes undecodable jobs (``list_jobs(state="undecodable")``)
        available again, for workers that can now decode them, and returns
        how many. Give ``ids``, ``queue`` or ``kind`` (any of them narrows
        the selection); with none, :class:`awa.ValidationError`. Their
        attempts were never used and they kept their unique keys; a worker
        that still cannot decode one parks it again."""
        undecodable.check_selection(ids, queue, kind)
        return await undecodable.retry(await self._database(), ids, queue, kind)

    # ── quarantine ──────────────────────────────────────────────────────

    async def list_quarantine(
        self, *, include_watched: bool = False
    ) -> list[quarantine.QuarantinedFingerprint]:
        """Quarantined fingerprints (kind + arguments whose jobs kept killing
        their workers; claims hold their jobs), most recent first, each with
        its crash count and reason; with ``include_watched=True`` also those
        that crashed but are below the threshold."""
        _check_flag("include_watched", include_watched)
        return await quarantine.list_quarantine(await self._database(), include_watched)

    async def release_quarantine(
        self, fingerprint: str | bytes | quarantine.QuarantinedFingerprint
    ) -> bool:
        """Lets the fingerprint's jobs be claimed again (within a poll interval)
        and forgets its crashes; returns whether it was known."""
        return await quarantine.release(await self._database(), fingerprint)

    # ── queues ──────────────────────────────────────────────────────────

    async def pause_queue(self, queue: str, paused_by: str | None = None) -> queues.QueueConfig:
        """Stops every worker of the fleet claiming from ``queue``, within one
        poll interval at most (at once where LISTEN reaches them). Inserts go
        on, and running jobs finish. ``paused_by`` says who, for operators;
        returns the queue's settings."""
        return await queues.set_paused(await self._database(), queue, True, paused_by)

    async def list_queues(self) -> list[queues.QueueSummary]:
        """Every queue with jobs or settings, by name: its settings and how
        many of its jobs are due, running, due later, parked for a callback
        and failed, with the oldest due job's run_at. Reads the whole jobs
        table (0.18 s for a million jobs on a 2-core machine): for operators,
        not a hot loop."""
        return await queues.summaries(await self._database())

    async def resume_queue(self, queue: str) -> queues.QueueConfig:
        """Lets workers claim from ``queue`` again; returns its settings."""
        return await queues.set_paused(await self._database(), queue, False)

    async def drain_queue(self, queue: str, *, timeout: float | None = None) -> int:
        """Waits until ``queue`` is drained: no running job, no due queued
        job and no retry waiting for its backoff (jobs delayed at insert
        that never ran are not waited for; spec 002). Workers keep working
        meanwhile: pause the queue's producers, not the queue. Returns how
        many jobs it waited for; raises ``TimeoutError`` after ``timeout``
        seconds, saying how many are left."""
        return await queues.drain(await self._database(), queue, timeout)

    async def explain(self, job_id: int) -> explaining.Explanation:
        """Why job ``job_id`` is not running now: an :class:`awa.Explanation`
        with a machine-readable ``.reason`` (:class:`awa.ExplainReason`) and a
        ``.message`` sentence. Raises :class:`awa.JobNotFound`."""
        return await explaining.explain(await self._database(), job_id)

    async def configure_queue(
        self,
        queue: str,
        *,
        priority_aging_interval: float | datetime.timedelta | queues._Unset | None = queues.UNSET,
        global_max_running: int | queues._Unset | None = queues.UNSET,
        rate_limit: tuple[float, int] | queues._Unset | None = queues.UNSET,
        fair: bool | queues._Unset = queues.UNSET,
        max_workers_per_partition: int | queues._Unset | None = queues.UNSET,
    ) -> queues.QueueConfig:
        """Sets ``queue``'s flow control for the whole fleet; a setting not
        given keeps its value, ``None`` removes it. Every worker applies a
        change within one poll interval (at once where LISTEN reaches it),
        without a restart; returns the queue's settings.

        ``priority_aging_interval`` (seconds, or a timedelta): a due job
        counts one priority level more urgent per interval it has waited,
        so a steady stream of urgent jobs cannot starve the others.
        ``global_max_running``: at most this many of the queue's jobs run at
        once across every worker process and host, on top of each
        process's ``max_workers``. ``rate_limit=(max_rate_per_s, burst)``:
        at most that many jobs start per second across the fleet, ``burst``
        at once after a lull; a job held back waits, available, and is not
        charged an attempt. ``fair=True``: claims go round-robin across the
        partitions (``partition_key=`` on insert) that have jobs waiting, so
        one tenant's backlog cannot hold back another's jobs; within a
        partition the order stays priority, run_at, id.
        ``max_workers_per_partition``: at most this many jobs of each
        partition run at once across the fleet (jobs without a key are not
        capped); the queue's claims then go partition by partition, as with
        ``fair=True``. See docs/flow-control.md."""
        return await queues.configure(
            await self._database(),
            queue,
            priority_aging_interval=priority_aging_interval,
            global_max_running=global_max_running,
            rate_limit=rate_limit,
            fair=fair,
            max_workers_per_partition=max_workers_per_partition,
        )

    async def configure_rate_class(self, name: str, *, rate: float, burst: int) -> queues.RateClass:
        """Sets rate class ``name``: every job inserted with
        ``rate_class=name`` (or of a task registered with it), whatever its
        queue, shares one budget of ``rate`` jobs started a second, ``burst``
        at once after a lull, across the whole fleet. A job held back waits,
        available, and is not charged an attempt. A class nobody configured
        limits nothing. See docs/flow-control.md."""
        return await queues.configure_rate_class(await self._database(), name, rate, burst)

    async def delete_rate_class(self, name: str) -> bool:
        """Removes rate class ``name`` (its jobs are then not limited by it);
        whether it existed."""
        return await queues.delete_rate_class(await self._database(), name)

    async def list_rate_classes(self) -> list[queues.RateClass]:
        """Every configured rate class, by name."""
        return await queues.list_rate_classes(await self._database())

    async def get_queue_config(self, queue: str) -> queues.QueueConfig:
        """``queue``'s fleet-wide settings (the defaults if it has none)."""
        return await queues.get_config(await self._database(), queue)

    # ── cancellation ────────────────────────────────────────────────────

    async def cancel(
        self, job_id: int, *, reason: str = cancellation.DEFAULT_REASON
    ) -> Job[Any] | None:
        """Cancels a job that has not finished, whatever its state, and returns
        it as committed; ``None`` if it had already finished. A running
        attempt is told (``job.is_cancelled()``, or an asyncio cancellation
        for tasks registered with ``interrupt_on_cancel=True``) and whatever
        it writes afterwards is refused. ``on_cancelled_enqueue`` follow-ups
        commit with the cancellation (:class:`awa.FollowUpError`: nothing
        changed); ``Cancelled`` fires here. Raises :class:`awa.JobNotFound`
        for an unknown id."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationError(f"job_id: must be an integer (got {job_id!r})", "job_id")
        db = await self._database()
        cancelled = await cancellation.cancel(db, self._lifecycle, [job_id], _cancel_reason(reason))
        if cancelled:
            return cancelled[0]
        if await db.fetchrow("jobs_get", job_id, False) is None:
            raise JobNotFound(job_id)
        return None

    async def cancel_by_unique_key(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        unique_opts: UniqueOpts | Mapping[str, Any] | None = None,
        reason: str = cancellation.DEFAULT_REASON,
    ) -> list[Job[Any]]:
        """Cancels the unfinished jobs inserted with the unique key these
        arguments and options give (as :meth:`insert` computes it;
        ``unique_opts`` defaults to :class:`awa.UniqueOpts`); returns them.
        With ``by_period`` the key is the current period's."""
        rows = _core.InsertRows(1)
        add_job(
            rows, self._registry, args, kind=kind, queue=queue,
            unique_opts=UniqueOpts() if unique_opts is None else unique_opts,
        )  # fmt: skip
        [key] = rows.unique_keys()
        db = await self._database()
        ids = [row["id"] for row in await db.fetch("jobs_ids_by_unique_key", key)]
        return await cancellation.cancel(db, self._lifecycle, ids, _cancel_reason(reason))

    # ── callbacks ───────────────────────────────────────────────────────

    async def complete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None
    ) -> Job[Any]:
        """Completes the job parked on this callback and returns it; a
        ``payload`` (JSON-serializable) is kept in its metadata as
        ``callback_result``. ``on_completed_enqueue`` follow-ups commit with
        it, then ``Completed`` (duration zero) goes to this process's hooks.
        Raises :class:`awa.CallbackNotFound` for an unknown or resolved
        callback, :class:`awa.FollowUpError` (nothing changed) if a spec fails.
        """
        return await callbacks.complete(
            await self._database(), self._lifecycle, callback_id, payload
        )

    async def fail_external(self, callback_id: uuid.UUID | str, error: str) -> Job[Any]:
        """Fails the parked job for good with ``error`` (``Exhausted``); otherwise
        as :meth:`complete_external`."""
        return await callbacks.fail(await self._database(), self._lifecycle, callback_id, error)

    async def resolve_callback(
        self,
        callback_id: uuid.UUID | str,
        payload: Any = None,
        default_action: str = "ignore",
    ) -> callbacks.CallbackResolution:
        """Lets the callback's policy decide what ``payload`` means: the CEL
        expressions given to ``register_callback`` (``filter``, then
        ``on_fail``, then ``on_complete``; ``transform`` shapes what a
        completion stores), else ``default_action`` (``"ignore"``, the
        default, leaves the job parked: a payload no rule recognises does not
        complete the job or fire its completion follow-ups; ``"complete"`` or
        ``"fail"``; for a callback with no policy call
        :meth:`complete_external` or pass ``default_action``). Completes or
        fails as :meth:`complete_external` / :meth:`fail_external` do, in one
        transaction with the follow-ups, and returns an
        :class:`awa.CallbackResolution`. A policy that cannot be evaluated
        fails the job with the reason."""
        return await callbacks.resolve(
            await self._database(), self._lifecycle, callback_id, payload, default_action
        )

    async def resume_external(self, callback_id: uuid.UUID | str, payload: Any = None) -> Job[Any]:
        """Hands ``payload`` to the handler waiting in place on this callback
        (``await job.wait_for_callback(callback_id)`` returns it) and puts the
        job back to ``running``; returns the job. A callback that arrives
        before the handler started waiting is kept for it. Raises
        :class:`awa.CallbackNotFound` if nothing waits on the callback and
        :class:`awa.CallbackNotResumable` if its handler returned
        ``WaitForCallback`` instead of waiting."""
        return await callbacks.resume(await self._database(), callback_id, payload)

    async def heartbeat_callback(
        self, callback_id: uuid.UUID | str, timeout_seconds: float
    ) -> Job[Any]:
        """Moves the callback's deadline to ``timeout_seconds`` from now (an
        external system reporting progress on a long operation) and returns
        the job. Raises :class:`awa.CallbackNotFound` if no job waits on it."""
        return await callbacks.heartbeat(await self._database(), callback_id, timeout_seconds)

    async def retry_external(self, callback_id: uuid.UUID | str) -> Job[Any]:
        """Makes the parked job available again with its attempts reset
        (``Retried``); otherwise as :meth:`complete_external`."""
        return await callbacks.retry(await self._database(), self._lifecycle, callback_id)

    # ── inspection ──────────────────────────────────────────────────────

    @overload
    async def get_job(self, job_id: int, *, include_payload: bool = False) -> Job[Any]: ...

    @overload
    async def get_job(
        self, job_id: int, *, args_type: type[T], include_payload: bool = False
    ) -> Job[T]: ...

    async def get_job(
        self, job_id: int, *, args_type: Any = None, include_payload: bool = False
    ) -> Job[Any]:
        """The job with this id; raises :class:`awa.JobNotFound` if there is none.

        Its ``args`` and ``metadata`` (which may hold personal data) are read
        only with ``include_payload=True``; without it, touching them raises
        :class:`awa.PayloadOmitted`.

        With ``args_type`` (``get_job(id, args_type=SendEmail)``) the job is a
        ``Job[SendEmail]``, and that is checked: if this client has a task for
        the job's kind, it must take ``args_type``; with ``include_payload``
        the args are decoded now and must decode as ``args_type`` (without a
        task for the kind, that is the only check). Otherwise
        :class:`awa.ValidationError` (field ``args_type``) is raised, naming
        the job, its kind, the type asked for and the task's type or why the
        args did not decode. Without ``args_type`` the job is a ``Job[Any]``
        whose args decode, on first use, as the kind's task says (a dict for a
        kind without a task)."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationError(f"job_id: must be an integer (got {job_id!r})", "job_id")
        _check_flag("include_payload", include_payload)
        db = await self._database()
        row = await db.fetchrow("jobs_get", job_id, include_payload)
        if row is None:
            raise JobNotFound(job_id)
        if args_type is None:
            return self._job(row, include_payload)
        return self._typed_job(row, args_type, include_payload)

    async def result(
        self, job_id: int, *, timeout: float | datetime.timedelta | None = None
    ) -> Any:
        """Waits until the job ends and returns its result: what its handler
        returned, decoded from the JSON stored (``None`` if it returned
        ``None`` or a callback completed it). Returns at once for a job that
        already completed.

        Raises :class:`awa.errors.JobNotCompleted` if the job ended otherwise
        (``state`` ``failed``, a dead letter, with its ``reason``; or
        ``cancelled``), :class:`awa.errors.ResultTimeout` (a
        ``TimeoutError``) once ``timeout`` seconds (a number or a
        ``timedelta``; ``None``: no limit) pass first, and
        :class:`awa.JobNotFound` for an unknown id. It waits with LISTEN on
        ``awa_finished``, which the worker's completer notifies once per
        batch (see :mod:`awa.results`); behind a pooler without
        ``listen_url`` it reads the job twice a second."""
        from awa.config import positive_seconds
        from awa.results import wait_for_result

        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationError(f"job_id: must be an integer (got {job_id!r})", "job_id")
        timeout_s = None if timeout is None else positive_seconds(timeout, "timeout")
        return await wait_for_result(await self._database(), job_id, timeout_s)

    def _typed_job(self, row: Any, args_type: Any, include_payload: bool) -> Job[Any]:
        """The job of ``row`` with its args decoded as ``args_type``, or a
        :class:`awa.ValidationError` saying why they are not of that type."""
        kind, wanted = row["kind"], args_type_name(args_type)
        task = self._registry.by_kind.get(kind)
        if task is not None and not same_args_type(task.args_type, args_type):
            raise ValidationError(
                f"args_type: job {row['id']} is a {kind!r} job, whose task takes "
                f"{args_type_name(task.args_type)}, not {wanted}",
                "args_type",
            )
        job = self._job(row, include_payload, self._registry.decoder(kind, args_type))
        if include_payload:
            try:
                job.args  # noqa: B018 - decoded now, so a mismatch is raised here
            except (ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
                raise ValidationError(
                    f"args_type: the args of job {row['id']} ({kind!r}) do not decode "
                    f"as {wanted}: {error}",
                    "args_type",
                ) from error
        return job

    async def list_jobs(
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
        """Jobs, newest first, filtered by any of state, queue, kind and a
        tag, with ids below ``before`` (the next page: pass the last id of
        the one before); args and metadata only with ``include_payload=True``
        (see :meth:`get_job`)."""
        _check_flag("include_payload", include_payload)
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise ValidationError(f"before: must be a job id (got {before!r})", "before")
        if state is not None:
            try:
                state = JobState(state)
            except ValueError:
                names = ", ".join(s.value for s in JobState)
                raise ValidationError(
                    f"state: must be one of {names} (got {state!r})", "state"
                ) from None
        _check_limit(limit)
        db = await self._database()
        rows = await db.fetch(
            "jobs_list", state and state.value, queue, kind, limit, include_payload, tag, before
        )
        return [self._job(row, include_payload) for row in rows]

    async def list_follow_ups(
        self, job_id: int, *, limit: int = DEFAULT_LIST_LIMIT
    ) -> list[Job[Any]]:
        """The follow-ups job ``job_id``'s transitions inserted (its
        ``on_*_enqueue`` specs' and what its handler staged; each has
        ``parent_id == job_id``), oldest first, without their payload (see
        :meth:`get_job`). Empty for a job with none, or one that does not
        exist."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ValidationError(f"job_id: must be a job id (got {job_id!r})", "job_id")
        _check_limit(limit)
        db = await self._database()
        rows = await db.fetch("jobs_follow_ups", job_id, limit)
        return [self._job(row, False) for row in rows]

    async def count_by_state(self) -> dict[JobState, int]:
        """How many jobs are in each state (states with none are omitted)."""
        db = await self._database()
        return {
            JobState(row["state"]): row["count"] for row in await db.fetch("jobs_count_by_state")
        }

    # ── the worker ──────────────────────────────────────────────────────

    async def start(
        self,
        queues: (
            Sequence[tuple[str, int]] | Mapping[str, int] | Sequence[Mapping[str, Any]] | None
        ) = None,
        **settings: Any,
    ) -> None:
        """Starts working jobs in this process; returns once the worker runs.

        ``queues`` pairs each queue with its ``max_workers`` (handlers at once),
        e.g. ``[("email", 8), ("default", 32)]``; by default every queue a
        task was registered for, with 10 each; a queue may also be given as
        ``{"name": "email", "max_workers": 8}``, with ``"weight"`` and
        ``"min_workers"`` for its share of ``global_max_workers``. Further keyword arguments
        tune the worker (see :class:`awa.WorkerConfig`). A setting or queue
        key awa does not know raises :class:`awa.ConfigurationError` naming
        it, never passes unused.
        """
        if self._worker is not None and self._worker.running:
            raise ConfigurationError("this client's worker is already running")
        if not self._registry.by_kind:
            raise ConfigurationError("register at least one task (@client.task) before start()")
        if queues is None:
            queues = {task.queue: DEFAULT_MAX_WORKERS for task in self._registry.by_kind.values()}
        config = worker_config(queues, settings)
        db = await self._database()
        pool_size = db.pool.get_max_size()
        if pool_size < config.connections_needed:
            raise ConfigurationError(
                f"the connection pool holds at most {pool_size} connections, but a worker "
                f"with claim_concurrency={config.claim_concurrency} needs "
                f"{config.connections_needed}; raise max_connections (or your pool's max_size)"
            )
        await db.require_schema()
        worker = Worker(db, self._lifecycle, config, periodic=(self._periodic, self._enqueue_fires))
        try:
            await worker.start()
        except BaseException:
            await worker.abort_start()
            raise
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
        self._lifecycle.hooks.close()
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


def _cancel_reason(reason: Any) -> str:
    return check_text(reason, "reason", MAX_CANCEL_REASON_CHARS)


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValidationError(f"{name}: must be True or False (got {value!r})", name)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise ValidationError(
            f"limit: must be between 1 and {MAX_LIST_LIMIT} (got {limit!r})", "limit"
        )


async def migrate(url: str | None = None, **client_options: Any) -> list[int]:
    """Brings the ``awa`` schema of the database at ``url`` (default:
    ``AWA_DATABASE_URL``) up to date and returns the versions applied; the
    same as ``await AsyncClient(url, ...).migrate()`` on a client closed
    afterwards. ``client_options`` are :class:`AsyncClient`'s (``pool=``,
    ``connect_timeout=``, ``pooler=``)."""
    async with AsyncClient(url, **client_options) as client:
        return await client.migrate()
