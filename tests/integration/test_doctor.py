"""``client.doctor()`` and ``awa doctor``: each check on a healthy database,
and each warning or failure provoked for real (an open snapshot, a
pending migration, autovacuum switched off, dead tuples, a role without
pg_read_all_stats or without awa's privileges, PgBouncer in front)."""

from __future__ import annotations

import asyncpg
import pytest

import awa
from awa import sql
from awa.embedded import EmbeddedPostgres
from tests.faults import revoked
from tests.integration.test_cli import run_awa
from tests.integration.test_cli_json import awa_json
from tests.support import eventually

CHECKS = [
    "schema", "autovacuum", "dead_tuples", "mvcc_horizon", "long_transactions", "listen",
    "pooler", "clock_skew",
]  # fmt: skip


async def test_a_healthy_database_passes_every_check(client):
    report = await client.doctor()
    assert [check.name for check in report.checks] == CHECKS
    assert {check.name: check.status for check in report.checks} == dict.fromkeys(CHECKS, "ok")
    assert report.ok is True
    assert report.check("pooler").details["mode"] == "none-detected"
    assert report.check("listen").details["round_trip_ms"] > 0
    clock = report.check("clock_skew").details
    assert abs(clock["skew_s"]) < awa.DoctorThresholds().clock_skew_warn_s
    # awa.workers keeps only the server's times: no worker clock to compare.
    assert "not measurable" in clock["workers"]


@pytest.fixture
async def open_snapshot(database_url):
    """A second connection in a REPEATABLE READ transaction that has taken
    its snapshot (and so holds the horizon back), idle in it; its pid."""
    holder = await asyncpg.connect(database_url)
    transaction = holder.transaction(isolation="repeatable_read")
    await transaction.start()
    pid = await holder.fetchval("SELECT pg_backend_pid()")
    try:
        yield pid
    finally:
        await transaction.rollback()
        await holder.close()


async def test_an_open_snapshot_pins_the_horizon_and_is_a_long_idle_transaction(
    client, open_snapshot
):
    report = await client.doctor(
        awa.DoctorThresholds(
            horizon_warn_s=0, long_transaction_warn_s=0, long_transaction_fail_s=0,
            idle_in_transaction_warn_s=0,
        )
    )  # fmt: skip
    horizon = report.check("mvcc_horizon")
    assert horizon.status == "warn"
    assert str(open_snapshot) in [h["holder"] for h in horizon.details["holders"]]
    assert "pinned by" in horizon.message
    transactions = report.check("long_transactions")
    assert transactions.status == "fail"
    assert open_snapshot in [s["pid"] for s in transactions.details["long"]]
    assert open_snapshot in [s["pid"] for s in transactions.details["idle_in_transaction"]]
    assert report.ok is False
    # With the default thresholds the same session is young: nothing to say.
    assert (await client.doctor()).check("long_transactions").status == "ok"


@pytest.fixture
def slot_server():
    """A server of the test's own that allows prepared transactions and
    logical replication slots (the suite's does not), migrated."""
    server = EmbeddedPostgres(
        durable=False, settings=("max_prepared_transactions=4", "wal_level=logical")
    )
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


async def test_a_replication_slot_and_a_prepared_transaction_are_named_holders(slot_server):
    admin = await asyncpg.connect(slot_server)
    try:
        await admin.execute(
            "SELECT pg_create_logical_replication_slot('awa_doctor_slot', 'pgoutput')"
        )
        await admin.execute("CREATE TABLE touched (n int)")
        await admin.execute(
            "BEGIN; INSERT INTO touched VALUES (1); PREPARE TRANSACTION 'awa_doctor_gid'"
        )
        async with awa.AsyncClient(slot_server) as fresh:
            await fresh.migrate()
            report = await fresh.doctor(awa.DoctorThresholds(horizon_warn_xacts=0))
        horizon = report.check("mvcc_horizon")
        holders = {(h["kind"], h["holder"]): h for h in horizon.details["holders"]}
        slot = holders[("replication slot", "awa_doctor_slot")]
        prepared = holders[("prepared transaction", "awa_doctor_gid")]
        assert (slot["age_s"], slot["age_s_known"]) == (None, False)  # a slot keeps no time
        assert prepared["age_s"] >= 0 and prepared["age_xacts"] >= 1
        assert horizon.status == "warn"
    finally:
        await admin.execute("ROLLBACK PREPARED 'awa_doctor_gid'")
        await admin.execute("SELECT pg_drop_replication_slot('awa_doctor_slot')")
        await admin.close()


async def test_a_pending_migration_fails_the_schema_check_and_says_to_migrate(fresh_database):
    url = await fresh_database()
    async with awa.AsyncClient(url) as fresh:
        await fresh.migrate()
        latest = sql.MIGRATIONS[-1]
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "DELETE FROM awa.schema_migrations WHERE version = $1", latest.version
            )
        finally:
            await conn.close()
        report = await fresh.doctor()
    schema = report.check("schema")
    assert schema.status == "fail"
    assert "run `awa migrate`" in schema.message
    assert schema.details["pending"] == [f"{latest.version:04d}_{latest.name}"]
    assert [check.name for check in report.checks] == CHECKS  # the others still ran
    assert report.ok is False
    code, envelope = await awa_json(url, "doctor")
    assert (code, envelope["ok"], envelope["data"]["ok"]) == (1, True, False)
    code, out, _ = await run_awa("doctor", "--database-url", url)
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL  schema: the schema is at migration")
    assert out.splitlines()[-1].startswith("NOT OK: 1 failed")


async def test_autovacuum_disabled_on_the_jobs_table_fails(client, conn):
    await conn.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")
    try:
        report = await client.doctor()
    finally:
        await conn.execute("ALTER TABLE awa.jobs RESET (autovacuum_enabled)")
    check = report.check("autovacuum")
    assert check.status == "fail"
    assert "autovacuum is disabled on awa.jobs" in check.message
    assert check.details["tables"]["jobs"]["autovacuum_enabled"] is False
    assert check.details["tables"]["claims"]["autovacuum_enabled"] is True


async def test_dead_tuples_of_the_jobs_table_warn_then_fail(client, conn):
    # Autovacuum off for the test, so it does not remove them first.
    await conn.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")
    try:
        await conn.execute(
            "INSERT INTO awa.jobs (kind, args) SELECT 'k', '{}' FROM generate_series(1, 400)"
        )
        await conn.execute("DELETE FROM awa.jobs WHERE id % 4 = 0")  # 100 dead, 300 live
        await conn.execute("SELECT pg_stat_force_next_flush()")

        async def dead_tuples(thresholds: awa.DoctorThresholds) -> awa.DoctorCheck | None:
            check = (await client.doctor(thresholds)).check("dead_tuples")
            return check if check.details["dead_tuples"] >= 100 else None

        warned = await eventually(
            lambda: dead_tuples(awa.DoctorThresholds(dead_tuples_judged=100)), timeout=30
        )
        assert warned.status == "warn"  # 25 %: past 20 %, short of 50 %
        assert warned.details["ratio"] == pytest.approx(0.25, abs=0.01)
        failed = await dead_tuples(
            awa.DoctorThresholds(dead_tuples_judged=100, dead_tuple_ratio_fail=0.25)
        )
        assert failed is not None and failed.status == "fail"
        # Too few dead tuples to judge with the default thresholds.
        assert (await client.doctor()).check("dead_tuples").status == "ok"
        # Never vacuumed, with as many dead tuples as the threshold.
        stale = (
            await client.doctor(awa.DoctorThresholds(stale_vacuum_s=0, many_dead_tuples=100))
        ).check("autovacuum")
        assert "awa.jobs not vacuumed for over 0 s with at least 100 dead tuples" in stale.message
    finally:
        await conn.execute("ALTER TABLE awa.jobs RESET (autovacuum_enabled)")


async def test_a_role_without_read_all_stats_gets_unknown_not_a_failure(
    restricted, conn, open_snapshot
):
    _, url = restricted
    async with awa.AsyncClient(url) as limited:
        report = await limited.doctor(awa.DoctorThresholds(horizon_warn_s=0))
    horizon = report.check("mvcc_horizon")
    assert horizon.status == "warn"
    assert "unknown (needs pg_read_all_stats)" in horizon.message
    assert horizon.details["hidden_sessions"] >= 1
    # Every role sees a snapshot's xmin; only since when it is held is hidden.
    [held] = [h for h in horizon.details["holders"] if h["holder"] == str(open_snapshot)]
    assert (held["age_s"], held["age_s_known"]) == (None, False)
    assert report.check("long_transactions").details["other_roles"] == (
        "unknown (needs pg_read_all_stats)"
    )
    assert report.check("schema").status == "ok"
    assert report.ok is True


async def test_a_role_without_awas_privileges_fails_the_schema_check(restricted, conn):
    role, url = restricted
    async with revoked(conn, role), awa.AsyncClient(url) as limited:
        report = await limited.doctor()
    schema = report.check("schema")
    assert schema.status == "fail"
    assert "may not read awa's tables" in schema.message
    assert report.ok is False


async def test_behind_pgbouncer_in_transaction_mode(database_url, start_pgbouncer):
    bouncer = start_pgbouncer(database_url)
    # Configured as awa's docs say, polling only: the pooler is expected.
    async with awa.AsyncClient(bouncer.url, pooler="transaction") as polling:
        report = await polling.doctor()
    assert report.check("pooler").details["mode"] == "transaction"
    assert report.check("pooler").status == "ok"
    assert report.check("listen").status == "warn"
    assert report.check("listen").details["tried"] is False
    # LISTEN through the pooler: the notification never comes back.
    async with awa.AsyncClient(
        bouncer.url, pooler="transaction", listen_url=bouncer.url
    ) as listening_through:
        listen = (await listening_through.doctor()).check("listen")
    assert (listen.status, listen.details["via"]) == ("fail", "listen_url")
    # LISTEN on a direct URL, as docs/operations.md advises.
    async with awa.AsyncClient(
        bouncer.url, pooler="transaction", listen_url=database_url
    ) as listening_direct:
        report = await listening_direct.doctor()
    assert report.check("listen").status == "ok"
    assert report.ok is True
    code, out, _ = await run_awa(
        "doctor", "--pooler", "transaction", "--listen-url", database_url,
        "--database-url", bouncer.url,
    )  # fmt: skip
    assert code == 0
    assert "OK    pooler: a pooler in transaction mode, and this client is configured" in out


async def test_a_pool_of_one_connection_is_enough(database_url):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        async with awa.AsyncClient(pool=pool) as small:
            report = await small.doctor()
    finally:
        await pool.close()
    assert report.ok is True
    assert report.check("listen").status == "ok"
    assert report.check("pooler").details["mode"] == "none-detected"


async def test_a_client_not_told_of_a_transaction_pooler_fails(database_url, start_pgbouncer):
    # One server connection: asyncpg's two-step statements stay on it.
    bouncer = start_pgbouncer(database_url, pool_size=1)
    pool = await asyncpg.create_pool(bouncer.url, statement_cache_size=0, min_size=1, max_size=3)
    try:
        async with awa.AsyncClient(pool=pool) as unaware:
            report = await unaware.doctor()
    finally:
        await pool.close()
    pooler = report.check("pooler")
    assert (pooler.status, pooler.details["mode"]) == ("fail", "transaction")
    assert "pooler='transaction'" in pooler.message
    assert report.check("listen").status == "fail"


async def test_a_session_mode_pooler_keeps_the_session(database_url, start_pgbouncer):
    bouncer = start_pgbouncer(database_url, pool_mode="session")
    async with awa.AsyncClient(bouncer.url) as through:
        report = await through.doctor()
    pooler = report.check("pooler")
    assert (pooler.status, pooler.details["mode"]) == ("ok", "session")
    assert report.check("listen").status == "ok"
