"""``client.doctor()`` and ``awa doctor``: whether the database can serve awa
well, not only whether it answers (that is ``awa health``).

Overview: each check reads the catalogs (``sql/queries/diagnostics.sql``) or
makes a small round trip, and gives a :class:`DoctorCheck` whose status is
``ok``, ``warn`` (awa works, but something will cost it: bloat, a slow wake-up)
or ``fail`` (awa cannot work well until it is fixed). The report is ``ok``
when no check fails. docs/operations.md says what each check means and what
to do.

Failure handling: a check never raises. One whose catalog view hides other
roles' rows (``pg_stat_activity`` without ``pg_read_all_stats``) says
"unknown (needs pg_read_all_stats)" and warns; one the role may not run at
all warns with the server's reason; any other database error fails that
check only, with the server's reason, and the other checks still run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import asyncpg

from awa import sql
from awa.connecting import target
from awa.db import Database, Record, release_quietly, session_changed
from awa.migrations import pending

Status = Literal["ok", "warn", "fail"]
OK: Final[Status] = "ok"
WARN: Final[Status] = "warn"
FAIL: Final[Status] = "fail"
_SEVERITY: Final = {OK: 0, WARN: 1, FAIL: 2}

#: The awa tables every claim, outcome or heartbeat writes: the ones whose
#: dead tuples autovacuum must keep removing.
HOT_TABLES: Final = (
    "jobs", "claims", "lane_moves", "lane_lowerings", "job_due", "job_unique_keys",
    "workers", "leaders", "queue_settings", "rate_classes",
)  # fmt: skip

#: A hot table not vacuumed for this long (seconds) while it holds
#: MANY_DEAD_TUPLES dead tuples or more: autovacuum is not keeping up.
STALE_VACUUM_S: Final = 24 * 3600.0
MANY_DEAD_TUPLES: Final = 100_000
#: Dead tuples of awa.jobs as a share of all its tuples: warn, fail.
DEAD_TUPLE_RATIO_WARN: Final = 0.2
DEAD_TUPLE_RATIO_FAIL: Final = 0.5
#: Below this many dead tuples awa.jobs's ratio is not judged (a nearly
#: empty table swings from 0 to 1 with a handful of jobs).
DEAD_TUPLES_JUDGED: Final = 10_000
#: A horizon held for this long (seconds) or this many transactions: warn, fail.
HORIZON_WARN_S: Final = 300.0
HORIZON_FAIL_S: Final = 3600.0
HORIZON_WARN_XACTS: Final = 1_000_000
HORIZON_FAIL_XACTS: Final = 100_000_000
#: A transaction open this long (seconds): warn, fail.
LONG_TRANSACTION_WARN_S: Final = 300.0
LONG_TRANSACTION_FAIL_S: Final = 3600.0
#: A session idle in its transaction for this long (seconds): warn.
IDLE_IN_TRANSACTION_WARN_S: Final = 60.0
#: How long the LISTEN round trip may take before it counts as lost (seconds).
LISTEN_TIMEOUT_S: Final = 2.0
#: The server's clock against this machine's (seconds, either way): warn, fail.
CLOCK_SKEW_WARN_S: Final = 1.0
CLOCK_SKEW_FAIL_S: Final = 30.0
#: Clock readings taken; the one with the shortest round trip is used.
CLOCK_SAMPLES: Final = 3

NEEDS_READ_ALL_STATS: Final = "unknown (needs pg_read_all_stats)"
WORKER_CLOCKS_UNKNOWN: Final = (
    "not measurable: awa.workers records only the server's times (started_at and "
    "heartbeat_at are the server's now()), never a worker's own clock"
)


@dataclass(frozen=True)
class DoctorThresholds:
    """The limits the checks judge by; the defaults are this module's
    constants (docs/operations.md). Seconds, transactions, or a share."""

    stale_vacuum_s: float = STALE_VACUUM_S
    many_dead_tuples: int = MANY_DEAD_TUPLES
    dead_tuple_ratio_warn: float = DEAD_TUPLE_RATIO_WARN
    dead_tuple_ratio_fail: float = DEAD_TUPLE_RATIO_FAIL
    dead_tuples_judged: int = DEAD_TUPLES_JUDGED
    horizon_warn_s: float = HORIZON_WARN_S
    horizon_fail_s: float = HORIZON_FAIL_S
    horizon_warn_xacts: int = HORIZON_WARN_XACTS
    horizon_fail_xacts: int = HORIZON_FAIL_XACTS
    long_transaction_warn_s: float = LONG_TRANSACTION_WARN_S
    long_transaction_fail_s: float = LONG_TRANSACTION_FAIL_S
    idle_in_transaction_warn_s: float = IDLE_IN_TRANSACTION_WARN_S
    listen_timeout_s: float = LISTEN_TIMEOUT_S
    clock_skew_warn_s: float = CLOCK_SKEW_WARN_S
    clock_skew_fail_s: float = CLOCK_SKEW_FAIL_S


@dataclass(frozen=True)
class DoctorCheck:
    """One check's answer: ``status`` is ``"ok"``, ``"warn"`` or ``"fail"``;
    ``message`` one sentence for a person; ``details`` the figures behind it
    (JSON values only)."""

    name: str
    status: Status
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DoctorReport:
    """Every check, in a fixed order; ``ok`` when none failed (warnings allowed)."""

    ok: bool
    checks: tuple[DoctorCheck, ...]

    def check(self, name: str) -> DoctorCheck:
        """The check called ``name`` (``"schema"``, ``"mvcc_horizon"``, …)."""
        for found in self.checks:
            if found.name == name:
                return found
        raise KeyError(name)


async def examine(db: Database, thresholds: DoctorThresholds) -> DoctorReport:
    """Runs every check, one after another (none may disturb another's
    reading: the LISTEN and pooler probes open connections of their own)."""
    checks: list[tuple[str, Callable[[], Awaitable[DoctorCheck]]]] = [
        ("schema", lambda: _schema(db)),
        ("autovacuum", lambda: _autovacuum(db, thresholds)),
        ("dead_tuples", lambda: _dead_tuples(db, thresholds)),
        ("mvcc_horizon", lambda: _horizon(db, thresholds)),
        ("long_transactions", lambda: _transactions(db, thresholds)),
        ("listen", lambda: _listen(db, thresholds)),
        ("pooler", lambda: _pooler(db)),
        ("clock_skew", lambda: _clock(db, thresholds)),
    ]
    results = tuple([await _guarded(name, run) for name, run in checks])
    return DoctorReport(ok=all(check.status != FAIL for check in results), checks=results)


async def _guarded(name: str, run: Callable[[], Awaitable[DoctorCheck]]) -> DoctorCheck:
    """``run``'s answer; a check the server refuses is a named answer too,
    never an exception that would hide the other checks."""
    try:
        return await run()
    except asyncpg.InsufficientPrivilegeError as error:
        return DoctorCheck(
            name, WARN, f"unknown: this role may not read what the check needs ({error})",
            {"error": str(error)},
        )  # fmt: skip
    except asyncpg.PostgresError as error:
        return DoctorCheck(
            name, FAIL, f"the check could not run: {error} ({type(error).__name__})",
            {"error": str(error)},
        )  # fmt: skip


def _worst(*statuses: Status) -> Status:
    return max(statuses, key=lambda status: _SEVERITY[status], default=OK)


def _graded(value: float, warn_at: float, fail_at: float) -> Status:
    """FAIL at or past ``fail_at``, WARN at or past ``warn_at``, else OK."""
    if value >= fail_at:
        return FAIL
    return WARN if value >= warn_at else OK


# ── schema ──────────────────────────────────────────────────────────────


async def _schema(db: Database) -> DoctorCheck:
    try:
        version = await db.schema_version()
        missing = await pending(db)
    except asyncpg.InsufficientPrivilegeError as error:
        # A role that may not read the ledger cannot run awa at all.
        return DoctorCheck(
            "schema", FAIL,
            f"this role may not read awa's tables ({error}): grant it awa's privileges "
            "(docs/operations.md)",
            {"error": str(error)},
        )  # fmt: skip
    details = {
        "version": version,
        "latest": sql.LATEST_VERSION,
        "pending": [f"{migration.version:04d}_{migration.name}" for migration in missing],
    }
    if missing:
        return DoctorCheck(
            "schema", FAIL,
            f"the schema is at migration {version or 'none'}, this code needs "
            f"{sql.LATEST_VERSION} ({len(missing)} pending): run `awa migrate` "
            "(or `await client.migrate()`)",
            details,
        )  # fmt: skip
    if version is not None and version > sql.LATEST_VERSION:
        return DoctorCheck(
            "schema", WARN,
            f"the schema is at migration {version}, newer than this code's "
            f"{sql.LATEST_VERSION}: upgrade awa here",
            details,
        )  # fmt: skip
    return DoctorCheck("schema", OK, f"the schema is at migration {version}, this code's", details)


# ── vacuum ──────────────────────────────────────────────────────────────


async def _autovacuum(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    server = await _row(db, "diagnostics_server")
    tables = await db.fetch("diagnostics_tables", list(HOT_TABLES))
    disabled = [row["name"] for row in tables if not row["autovacuum_enabled"]]
    stale = [row["name"] for row in tables if _vacuum_is_stale(row, thresholds)]
    details = {
        "autovacuum": server["autovacuum"],
        "track_counts": server["track_counts"],
        "tables": {row["name"]: _table_details(row) for row in tables},
    }
    problems, status = [], OK
    if not server["autovacuum"] or not server["track_counts"]:
        off = "autovacuum" if not server["autovacuum"] else "track_counts"
        problems.append(f"{off} is off on the server: turn it on (postgresql.conf)")
        status = FAIL
    if disabled:
        names = ", ".join(f"awa.{name}" for name in disabled)
        problems.append(
            f"autovacuum is disabled on {names}: ALTER TABLE … RESET (autovacuum_enabled)"
        )
        status = FAIL
    if stale:
        names = ", ".join(f"awa.{name}" for name in stale)
        problems.append(
            f"{names} not vacuumed for over {thresholds.stale_vacuum_s:g} s with at least "
            f"{thresholds.many_dead_tuples} dead tuples: autovacuum is not keeping up "
            "(or a pinned horizon keeps it from removing them)"
        )
        status = _worst(status, WARN)
    if not tables:
        return DoctorCheck(
            "autovacuum", status,
            "; ".join(problems) or "autovacuum is on (awa's tables do not exist yet)", details,
        )  # fmt: skip
    message = "; ".join(problems) or f"autovacuum is on for awa's {len(tables)} hot tables"
    return DoctorCheck("autovacuum", status, message, details)


def _vacuum_is_stale(row: Record, thresholds: DoctorThresholds) -> bool:
    if row["dead_tuples"] < thresholds.many_dead_tuples:
        return False
    ago = row["vacuumed_s_ago"]
    return ago is None or ago >= thresholds.stale_vacuum_s


def _table_details(row: Record) -> dict[str, Any]:
    return {
        "autovacuum_enabled": row["autovacuum_enabled"],
        "live_tuples": row["live_tuples"],
        "dead_tuples": row["dead_tuples"],
        "last_vacuumed_at": _iso(row["last_vacuumed_at"]),
    }


async def _dead_tuples(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    [jobs] = await db.fetch("diagnostics_tables", ["jobs"]) or [None]
    if jobs is None:
        return DoctorCheck("dead_tuples", OK, "awa.jobs does not exist yet (see schema)", {})
    live, dead = jobs["live_tuples"], jobs["dead_tuples"]
    ratio = dead / (live + dead) if live + dead else 0.0
    details = {"live_tuples": live, "dead_tuples": dead, "ratio": round(ratio, 4)}
    status = OK
    if dead >= thresholds.dead_tuples_judged:
        status = _graded(ratio, thresholds.dead_tuple_ratio_warn, thresholds.dead_tuple_ratio_fail)
    message = f"awa.jobs holds {dead} dead tuples to {live} live ({ratio:.0%})"
    if status != OK:
        message += (
            ": claims and outcomes read past them; see mvcc_horizon and autovacuum "
            "(VACUUM awa.jobs removes them once nothing pins the horizon)"
        )
    return DoctorCheck("dead_tuples", status, message, details)


# ── what holds vacuum back ──────────────────────────────────────────────


async def _horizon(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    rows = await db.fetch("diagnostics_horizon_holders")
    hidden = sum(1 for row in rows if row["hidden"])
    details: dict[str, Any] = {"holders": [_holder(row) for row in rows]}
    if hidden:
        details["hidden_sessions"] = hidden
        details["other_roles"] = NEEDS_READ_ALL_STATS

    def grade(row: Record) -> Status:
        return _worst(
            _graded(row["age_s"] or 0.0, thresholds.horizon_warn_s, thresholds.horizon_fail_s),
            _graded(row["age_xacts"] or 0, thresholds.horizon_warn_xacts,
                    thresholds.horizon_fail_xacts),
        )  # fmt: skip

    graded = [(grade(row), row) for row in rows]
    status = _worst(*(found for found, _ in graded))
    oldest = rows[0] if rows else None
    if status == OK:
        message = "nothing holds the MVCC horizon back for long"
        if oldest is not None:
            message = f"the oldest horizon is {_describe_holder(oldest)}: not long"
    else:
        worst = next(row for found, row in graded if found == status)
        message = (
            f"the MVCC horizon is pinned by {_describe_holder(worst)}: vacuum keeps every "
            "row version newer than it, so dead jobs pile up; end it (pg_terminate_backend, "
            "pg_drop_replication_slot, ROLLBACK PREPARED)"
        )
    if hidden:
        message += (
            f"; since when {hidden} sessions of other roles hold it is {NEEDS_READ_ALL_STATS}"
        )
        status = _worst(status, WARN)
    return DoctorCheck("mvcc_horizon", status, message, details)


def _holder(row: Record) -> dict[str, Any]:
    return {
        "kind": row["kind"],
        "holder": row["holder"],
        "role": row["role"],
        "application": row["application"],
        "state": row["state"],
        "backend_type": row["backend_type"],
        "age_xacts": row["age_xacts"],
        "age_s": _rounded(row["age_s"]),
        "age_s_known": not row["hidden"] and row["age_s"] is not None,
    }


def _describe_holder(row: Record) -> str:
    if row["kind"] == "session":
        who = f"session pid {row['holder']}"
        if row["role"]:
            who += f" (role {row['role']}"
            who += f", {row['application']})" if row["application"] else ")"
    elif row["kind"] == "replication slot":
        who = f"replication slot {row['holder']}"
    else:
        who = f"prepared transaction {row['holder']!r}"
    since = "" if row["age_s"] is None else f", {row['age_s']:.1f} s"
    return f"{who}: {row['age_xacts']} transactions old{since}"


async def _transactions(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    rows = await db.fetch("diagnostics_transactions")
    visible = [row for row in rows if not row["hidden"]]
    hidden = len(rows) - len(visible)
    long_ones = [
        row for row in visible
        if (row["transaction_s"] or 0) >= thresholds.long_transaction_warn_s
    ]  # fmt: skip
    idle_ones = [
        row for row in visible if (row["idle_s"] or 0) >= thresholds.idle_in_transaction_warn_s
    ]
    details: dict[str, Any] = {
        "long": [_session(row) for row in long_ones],
        "idle_in_transaction": [_session(row) for row in idle_ones],
    }
    status: Status = OK
    problems = []
    if long_ones:
        longest = max(row["transaction_s"] for row in long_ones)
        status = _graded(
            longest, thresholds.long_transaction_warn_s, thresholds.long_transaction_fail_s
        )
        problems.append(
            f"{len(long_ones)} transactions open over {thresholds.long_transaction_warn_s:g} s "
            f"(pids {_pids(long_ones)}; the longest {longest:.1f} s)"
        )
    if idle_ones:
        status = _worst(status, WARN)
        problems.append(
            f"{len(idle_ones)} sessions idle in a transaction over "
            f"{thresholds.idle_in_transaction_warn_s:g} s (pids {_pids(idle_ones)}): "
            "they hold locks and the horizon; set idle_in_transaction_session_timeout"
        )
    if hidden:
        details["hidden_sessions"] = hidden
        details["other_roles"] = NEEDS_READ_ALL_STATS
        problems.append(f"{hidden} sessions of other roles: {NEEDS_READ_ALL_STATS}")
        status = _worst(status, WARN)
    message = "; ".join(problems) or "no long transaction and no session idle in one"
    return DoctorCheck("long_transactions", status, message, details)


def _session(row: Record) -> dict[str, Any]:
    return {
        "pid": row["pid"],
        "role": row["role"],
        "application": row["application"],
        "state": row["state"],
        "transaction_s": _rounded(row["transaction_s"]),
        "idle_s": _rounded(row["idle_s"]),
    }


def _pids(rows: list[Record]) -> str:
    return ", ".join(str(row["pid"]) for row in rows)


# ── connections ─────────────────────────────────────────────────────────


async def _listen(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    """A LISTEN on a private channel, then a NOTIFY on it from another
    connection: what wakes idle workers. Through a pooler in transaction
    mode the LISTEN stays on a server connection this client no longer
    holds, so the notification never comes back."""
    if db.poll_only:
        return DoctorCheck(
            "listen", WARN,
            "this client polls only (pooler='transaction' without listen_url): idle workers "
            "find new jobs at the poll interval; give listen_url (a direct URL) to LISTEN",
            {"tried": False, "via": None},
        )  # fmt: skip
    via = "listen_url" if db.listen_url is not None else "pool"
    channel = f"awa_doctor_{uuid.uuid4().hex}"
    payload = uuid.uuid4().hex
    heard: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    arrived: float | None

    def on_notification(_connection: Any, _pid: int, _channel: str, message: str) -> None:
        if message == payload and not heard.done():
            heard.set_result(time.perf_counter())

    connection, pooled = await db.listen_connection()
    try:
        if pooled:
            session_changed(connection)  # the pool's reset UNLISTENs it
        await connection.add_listener(channel, on_notification)
        try:
            started = time.perf_counter()
            async with _another_connection(db) as notifier:
                await db.execute("diagnostics_notify", channel, payload, connection=notifier)
            arrived = await asyncio.wait_for(heard, thresholds.listen_timeout_s)
        except TimeoutError:
            arrived = None
        finally:
            with contextlib.suppress(Exception):
                await connection.remove_listener(channel, on_notification)
    finally:
        if pooled:
            await release_quietly(db.pool, connection)
        else:
            with contextlib.suppress(Exception):
                await connection.close()
    if arrived is None:
        return DoctorCheck(
            "listen", FAIL,
            f"a NOTIFY did not come back to the LISTEN within "
            f"{thresholds.listen_timeout_s:g} s: workers wake only at the poll interval "
            "(behind a pooler in transaction mode use pooler='transaction' with listen_url, "
            "a direct URL)",
            {"tried": True, "via": via, "round_trip_ms": None},
        )  # fmt: skip
    round_trip_ms = (arrived - started) * 1000
    return DoctorCheck(
        "listen", OK, f"a NOTIFY came back to the LISTEN in {round_trip_ms:.1f} ms",
        {"tried": True, "via": via, "round_trip_ms": round(round_trip_ms, 3)},
    )  # fmt: skip


async def _pooler(db: Database) -> DoctorCheck:
    """Whether a session survives between transactions. A session setting
    is made on one client connection; then a second client connection reads
    it (behind a pooler in transaction mode it usually gets the server
    connection the first just gave back: the same backend pid, the same
    setting) and the first reads it again (it may get another server
    connection: a new pid, no setting). Either sign means transaction
    pooling. Otherwise, a server port other than the one connected to means
    something in between keeps sessions whole (a pooler in session mode, or
    a proxy)."""
    token = uuid.uuid4().hex
    async with db.pool.acquire() as first:
        session_changed(first)  # the pool's reset (RESET ALL) clears the mark
        marked = await _row(db, "diagnostics_session_mark", token, connection=first)
        async with _another_connection(db) as second:
            other = await _row(db, "diagnostics_session_read", connection=second)
        again = await _row(db, "diagnostics_session_read", connection=first)
        server = await _row(db, "diagnostics_server_address", connection=first)
    shared = other["pid"] == marked["pid"] or other["mark"] == token
    lost = again["pid"] != marked["pid"] or again["mark"] != token
    connected_port = _connected_port(db)
    details: dict[str, Any] = {
        "configured": db.pooler,
        "backend_pid_kept": again["pid"] == marked["pid"],
        "session_setting_kept": again["mark"] == token,
        "second_connection_shared_backend": shared,
        "connected_port": connected_port,
        "server_port": server["port"],
    }
    if shared or lost:
        details["mode"] = "transaction"
        if db.pooler == "transaction":
            return DoctorCheck(
                "pooler", OK,
                "a pooler in transaction mode, and this client is configured for it",
                details,
            )  # fmt: skip
        return DoctorCheck(
            "pooler", FAIL,
            "a pooler in transaction mode (the session did not survive between transactions), "
            "but this client expects a session of its own: pass pooler='transaction' and "
            "listen_url (a direct URL) to AsyncClient, --pooler transaction and --listen-url "
            "to awa doctor (docs/operations.md)",
            details,
        )  # fmt: skip
    between = (
        connected_port is not None and server["port"] is not None
        and connected_port != server["port"]
    )  # fmt: skip
    details["mode"] = "session" if between else "none-detected"
    if db.pooler == "transaction":
        return DoctorCheck(
            "pooler", WARN,
            "this client is configured for a pooler in transaction mode, but the session "
            "survives between transactions: a direct URL could LISTEN and keep prepared "
            "statements",
            details,
        )  # fmt: skip
    if between:
        return DoctorCheck(
            "pooler", OK,
            f"the session survives, through something on port {connected_port} in front of "
            f"the server's {server['port']} (a pooler in session mode, or a proxy)",
            details,
        )  # fmt: skip
    return DoctorCheck("pooler", OK, "no pooler detected: the session survives", details)


@contextlib.asynccontextmanager
async def _another_connection(db: Database) -> AsyncIterator[Any]:
    """A connection besides the one a probe holds: a pooled one, or, from a
    pool of one connection (which would wait for ever), one of its own."""
    if db.pool.get_max_size() > 1 or not db.can_connect:
        async with db.pool.acquire() as pooled:
            yield pooled
        return
    own = await db.connect()
    try:
        yield own
    finally:
        await own.close()


def _connected_port(db: Database) -> int | None:
    """The port this client connects to, as its URL (or pool) names it."""
    if "port" in db.connect_kwargs:
        return int(db.connect_kwargs["port"])
    url = next((arg for arg in db.connect_args if isinstance(arg, str)), None)
    url = url or db.connect_kwargs.get("dsn")
    if not isinstance(url, str) or "://" not in url:
        return None
    return target(url)[1] or None


async def _clock(db: Database, thresholds: DoctorThresholds) -> DoctorCheck:
    """The server's clock_timestamp() against this machine's clock at the
    midpoint of the round trip; the reading with the shortest round trip is
    the most exact (half of it bounds the error)."""
    samples = []
    async with db.pool.acquire() as connection:
        for _ in range(CLOCK_SAMPLES):
            sent_at = time.time()
            started = time.perf_counter()
            server_time = await db.fetchval("diagnostics_clock", connection=connection)
            round_trip_s = time.perf_counter() - started
            samples.append((round_trip_s, server_time.timestamp() - (sent_at + round_trip_s / 2)))
    round_trip_s, skew_s = min(samples)
    details = {
        "skew_s": round(skew_s, 6),
        "uncertainty_s": round(round_trip_s / 2, 6),
        "round_trip_ms": round(round_trip_s * 1000, 3),
        "workers": WORKER_CLOCKS_UNKNOWN,
    }
    status = _graded(abs(skew_s), thresholds.clock_skew_warn_s, thresholds.clock_skew_fail_s)
    ahead = "ahead of" if skew_s >= 0 else "behind"
    message = (
        f"the server's clock is {abs(skew_s) * 1000:.1f} ms {ahead} this machine's "
        f"(± {round_trip_s / 2 * 1000:.1f} ms)"
    )
    if status != OK:
        message += (
            ": run_at and deadlines given from here land early or late; sync both clocks (NTP)"
        )
    return DoctorCheck("clock_skew", status, message, details)


async def _row(db: Database, name: str, *args: Any, connection: Any = None) -> Record:
    """The one row of a catalog query that always returns one (no FROM)."""
    row = await db.fetchrow(name, *args, connection=connection)
    assert row is not None, name
    return row


def _iso(moment: Any) -> str | None:
    return None if moment is None else str(moment.isoformat())


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
