"""Migrations: schema.sql equals all migrations applied; concurrent migrators
are safe; an old schema gives a clear SchemaNotMigrated."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

import awa
from awa import _core, sql

ALL_VERSIONS = [migration.version for migration in sql.MIGRATIONS]

ROOT = Path(__file__).resolve().parents[2]

# Everything in schema `awa` a migration can create, in a comparable form.
CATALOG_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attnum
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'awa' AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p', 'v', 'm')
        ORDER BY 1, a.attnum""",
    "relations": """
        SELECT c.relname, c.relkind, c.reloptions
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'awa' ORDER BY 1""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'awa' ORDER BY 1""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'awa'::regnamespace ORDER BY 1, 2""",
    "enums": """
        SELECT t.typname, e.enumlabel, e.enumsortorder
        FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
        WHERE t.typnamespace = 'awa'::regnamespace ORDER BY 1, 3""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
        FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace ORDER BY 1""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE NOT tgisinternal
          AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'awa'::regnamespace)
        ORDER BY 1, 2""",
}


async def catalog(url: str) -> dict[str, list[tuple]]:
    connection = await asyncpg.connect(url)
    try:
        return {
            name: [tuple(row) for row in await connection.fetch(query)]
            for name, query in CATALOG_QUERIES.items()
        }
    finally:
        await connection.close()


async def declared_catalog(url: str) -> dict[str, list[tuple]]:
    """The catalog of ``schema.sql`` applied to the empty database ``url``."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql.schema_sql())
    finally:
        await connection.close()
    return await catalog(url)


async def test_schema_sql_equals_all_migrations_applied(fresh_database):
    migrated = await fresh_database()
    async with awa.AsyncClient(migrated) as client:
        assert await client.migrate() == [m.version for m in sql.MIGRATIONS]
    assert await catalog(migrated) == await declared_catalog(await fresh_database())


async def test_migrate_twice_applies_nothing_the_second_time(fresh_database):
    url = await fresh_database()
    async with awa.AsyncClient(url) as client:
        assert await client.migrate() == ALL_VERSIONS
        assert await client.migrate() == []


async def test_concurrent_migrators_apply_each_migration_once(fresh_database):
    url = await fresh_database()
    clients = [awa.AsyncClient(url) for _ in range(5)]
    try:
        results = await asyncio.gather(*(client.migrate() for client in clients))
    finally:
        for client in clients:
            await client.close()
    assert sorted(map(tuple, results)) == [(), (), (), (), tuple(ALL_VERSIONS)]
    connection = await asyncpg.connect(url)
    try:
        assert await connection.fetchval("SELECT count(*) FROM awa.schema_migrations") == len(
            ALL_VERSIONS
        )
    finally:
        await connection.close()


async def test_concurrent_migrate_commands_in_separate_processes(fresh_database):
    url = await fresh_database()
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "awa",
            "migrate",
            "--database-url",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ},
        )
        for _ in range(3)
    ]
    outputs = [await process.communicate() for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    messages = sorted(out.decode().strip() for out, _ in outputs)
    assert messages == [
        f"applied migrations {ALL_VERSIONS}",
        "the schema is up to date",
        "the schema is up to date",
    ]


async def test_an_unmigrated_database_gives_a_clear_error(fresh_database):
    url = await fresh_database()
    async with awa.AsyncClient(url) as client:

        @client.task(dict, kind="k")
        async def handler(job):
            return None

        with pytest.raises(awa.SchemaNotMigrated) as raised:
            await client.start()
        assert "awa migrate" in str(raised.value)
        assert raised.value.found is None
        with pytest.raises(awa.SchemaNotMigrated):
            await client.insert({}, kind="k")


async def test_an_older_schema_version_gives_a_clear_error(fresh_database):
    url = await fresh_database()
    async with awa.AsyncClient(url) as client:
        await client.migrate()
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("DELETE FROM awa.schema_migrations")
        await connection.execute(
            "INSERT INTO awa.schema_migrations (version, name) VALUES (0, 'old')"
        )
    finally:
        await connection.close()
    async with awa.AsyncClient(url) as client:
        with pytest.raises(awa.SchemaNotMigrated) as raised:
            await client.insert({}, kind="k")
    assert raised.value.found == 0
    assert raised.value.needed == sql.LATEST_VERSION


async def migrate_seeding(
    conn: asyncpg.Connection, version: int, seed, *, through: int | None = None
):
    """Applies every migration (up to ``through``'s, when given), running
    ``seed(conn)`` just before ``version``'s; returns what seed returned."""
    await conn.execute(sql.query("schema_migrations_bootstrap"))
    await apply_migrations(conn, through=version - 1)
    seeded = await seed(conn)
    await apply_migrations(conn, after=version - 1, through=through)
    return seeded


async def apply_migrations(
    conn: asyncpg.Connection, *, after: int = 0, through: int | None = None
) -> None:
    """Applies the migrations past ``after`` (up to ``through``'s), each in
    a transaction of its own."""
    for migration in sql.MIGRATIONS:
        if migration.version > after and (through is None or migration.version <= through):
            async with conn.transaction():
                await conn.execute(migration.sql)


async def test_migration_11_copies_the_unique_keys_held_and_only_those(fresh_database):
    async def seed(conn):
        waiting = await conn.fetchval(
            "INSERT INTO awa.jobs (kind, unique_key, unique_states) "
            "VALUES ('k', 'w', 31) RETURNING id"
        )
        kept = await conn.fetchval(
            "INSERT INTO awa.jobs (kind, state, unique_key, unique_states) "
            "VALUES ('k', 'completed', 'kept', 63) RETURNING id"
        )
        # A finished job outside its set, and a legacy duplicate (0).
        await conn.execute(
            "INSERT INTO awa.jobs (kind, state, unique_key, unique_states) "
            "VALUES ('k', 'completed', 'w', 31), ('k', 'available', 'legacy', 0)"
        )
        return waiting, kept

    conn = await asyncpg.connect(await fresh_database())
    try:
        waiting, kept = await migrate_seeding(conn, 11, seed)
        held = await conn.fetch("SELECT unique_key, job_id FROM awa.job_unique_keys")
        assert {bytes(r["unique_key"]): r["job_id"] for r in held} == {b"w": waiting, b"kept": kept}
    finally:
        await conn.close()


async def test_migration_12_gives_legacy_failed_jobs_the_reason_their_failure_implies(
    fresh_database,
):
    async def seed(conn):
        # Failed before version 5 recorded reasons: attempts used up, or
        # stopped early by a terminal error.
        return [
            await conn.fetchval(
                "INSERT INTO awa.jobs (kind, state, attempt, max_attempts) "
                "VALUES ('k', $1, $2, 3) RETURNING id",
                state,
                attempt,
            )
            for state, attempt in (("failed", 3), ("failed", 1), ("completed", 1))
        ]

    conn = await asyncpg.connect(await fresh_database())
    try:
        used_up, stopped, completed = await migrate_seeding(conn, 12, seed)
        reasons = dict(await conn.fetch("SELECT id, failure_reason FROM awa.jobs"))
        assert reasons == {
            used_up: "max_attempts_exhausted",
            stopped: "terminal_error",
            completed: None,
        }
    finally:
        await conn.close()


async def test_migration_13_copies_the_scheduled_and_retryable_jobs_and_only_those(
    fresh_database,
):
    async def seed(conn):
        waiting = {
            await conn.fetchval(
                "INSERT INTO awa.jobs (kind, state, run_at) "
                "VALUES ('k', $1, now() + interval '1 hour') RETURNING id",
                state,
            )
            for state in ("scheduled", "retryable")
        }
        await conn.execute(
            "INSERT INTO awa.jobs (kind, state) VALUES ('k', 'available'), ('k', 'running')"
        )
        return waiting

    conn = await asyncpg.connect(await fresh_database())
    try:
        waiting = await migrate_seeding(conn, 13, seed)
        due = await conn.fetch(
            "SELECT d.job_id FROM awa.job_due d JOIN awa.jobs j "
            "ON j.id = d.job_id AND j.run_at = d.run_at"
        )
        assert {row["job_id"] for row in due} == waiting
    finally:
        await conn.close()


async def test_migration_23_takes_the_lane_indexes_an_operator_built_first(fresh_database):
    """docs/operations.md: built CONCURRENTLY under the names migration 0023
    looks for, the two indexes are kept, and the schema ends as schema.sql's."""

    async def seed(conn):
        await conn.execute(
            "INSERT INTO awa.jobs (kind, queue, partition_key)"
            " VALUES ('k', 'q', NULL), ('k', 'q', 'tenant')"
        )
        await conn.execute(
            "CREATE INDEX CONCURRENTLY jobs_lane_key_idx"
            " ON awa.jobs (queue, priority, run_at, id, partition_key)"
        )
        await conn.execute(
            "CREATE INDEX CONCURRENTLY jobs_keyed_lane_idx"
            " ON awa.jobs (queue, priority, partition_key, run_at, id)"
            " WHERE partition_key IS NOT NULL"
        )
        return await conn.fetchval("SELECT oid FROM pg_class WHERE relname = 'jobs_keyed_lane_idx'")

    migrated = await fresh_database()
    conn = await asyncpg.connect(migrated)
    try:
        prebuilt = await migrate_seeding(conn, 23, seed, through=23)
        assert (
            await conn.fetchval(
                "SELECT oid FROM pg_class WHERE relname = 'jobs_partition_lane_idx'"
            )
            == prebuilt
        )
        await apply_migrations(conn, after=23)
    finally:
        await conn.close()
    assert await catalog(migrated) == await declared_catalog(await fresh_database())


#: A value each of migration 0026's checks refuses, and the check's name.
REFUSED_BY_THE_DOMAINS = [
    ("kind", "''", "jobs_kind_length"),
    ("queue", "repeat('q', 201)", "jobs_queue_length"),
    ("args", "'[]'", "jobs_args_object"),
    ("priority", "5", "jobs_priority_range"),
    ("max_attempts", "0", "jobs_max_attempts_range"),
    ("max_crashes", "-1", "jobs_max_crashes_range"),
    ("tags", "array_fill('t'::text, ARRAY[21])", "jobs_tags_count"),
    ("timeout_ms", "0", "jobs_timeout_positive"),
    ("schema_version", "0", "jobs_schema_version_positive"),
]
JOB_STORAGE = """
    SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c
    WHERE c.oid = 'awa.jobs'::regclass
       OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'awa.jobs'::regclass)
    ORDER BY 1"""
JOB_VALUES = """
    SELECT kind::text, queue::text, args::text, priority::int, max_attempts::int,
           max_crashes::int, tags::text, timeout_ms::int, schema_version::int
    FROM awa.jobs ORDER BY id"""


async def test_migration_26_rewrites_nothing_and_keeps_every_rule_and_its_name(fresh_database):
    """The checks move from the table to domains: no row and no index is
    written again, the jobs keep their values, and an insert or an update
    that breaks a rule is refused under the constraint name it had."""

    async def seed(conn):
        await conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args, priority, max_attempts, max_crashes,"
            " tags, timeout_ms, schema_version)"
            " VALUES ('k', 'q', '{\"a\": 1}', 4, 1000, 0, '{x,y}', 1, 3),"
            "        ('k2', 'default', '{}', 1, 25, NULL, NULL, NULL, NULL)"
        )
        return await conn.fetch(JOB_STORAGE), await conn.fetch(JOB_VALUES)

    conn = await asyncpg.connect(await fresh_database())
    try:
        storage, values = await migrate_seeding(conn, 26, seed, through=26)
        # A partial index on a column that changed type is built again (its
        # predicate keeps PostgreSQL from reusing it): the keyed jobs only.
        rebuilt = {"jobs_partition_lane_idx"}
        after = await conn.fetch(JOB_STORAGE)
        assert [row for row in after if row[0] not in rebuilt] == [
            row for row in storage if row[0] not in rebuilt
        ]
        assert len(after) == len(storage) == 9
        assert await conn.fetch(JOB_VALUES) == values
        job_id = await conn.fetchval("SELECT min(id) FROM awa.jobs")
        for column, value, constraint in REFUSED_BY_THE_DOMAINS:
            with pytest.raises(asyncpg.CheckViolationError) as inserted:
                await conn.execute(
                    f"INSERT INTO awa.jobs (kind, {column}) VALUES ('k', {value})"
                    if column != "kind"
                    else f"INSERT INTO awa.jobs (kind) VALUES ({value})"
                )
            assert inserted.value.constraint_name == constraint
            with pytest.raises(asyncpg.CheckViolationError) as updated:
                await conn.execute(f"UPDATE awa.jobs SET {column} = {value} WHERE id = $1", job_id)
            assert updated.value.constraint_name == constraint
    finally:
        await conn.close()


RATE_CLASS_NAMES = [
    "a", "Z9", "bench-class", "a.b_c-d", "0" * 64, "x" * 65, "", "-a", ".a", "_a",
    "a b", "a/b", "é", "a\n", "a$", "tenant:1",
]  # fmt: skip


async def test_migration_25_keeps_the_rate_classes_and_checks_the_grammar_the_core_does(
    fresh_database,
):
    """The rate class grammar, rewritten without a bounded repetition, takes
    exactly the names the core takes, and the jobs' classes stay."""

    async def seed(conn):
        await conn.execute("INSERT INTO awa.jobs (kind, rate_class) VALUES ('k', 'bench-class')")

    conn = await asyncpg.connect(await fresh_database())
    try:
        await migrate_seeding(conn, 25, seed)
        assert await conn.fetchval("SELECT rate_class::text FROM awa.jobs") == "bench-class"
        for name in RATE_CLASS_NAMES:
            try:
                _core.check_rate_class_name(name)
                core_takes = True
            except ValueError:
                core_takes = False
            try:
                await conn.fetchval("SELECT $1::text::awa.rate_class", name)
                database_takes = True
            except asyncpg.CheckViolationError:
                database_takes = False
            assert database_takes == core_takes, name
    finally:
        await conn.close()
