"""Forward-only, numbered schema migrations, safe to run from many processes
at once.

Overview: ``migrate`` creates the ``awa`` schema and its migration ledger if
needed, then applies each missing migration in its own transaction and
records it. Every one of those transactions first takes a transaction-level
advisory lock and looks again at what is applied, so concurrent migrators
queue up and the later ones find nothing left to do. Behind a pooler in
transaction mode that is all; on a direct connection a session lock is also
held across the whole run, so one migrator applies every missing migration
and the others wait for it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from awa import sql
from awa.db import Database

log = logging.getLogger("awa.migrations")

# Arbitrary but fixed: the advisory lock key every awa migrator shares.
MIGRATION_LOCK_KEY: Final = 0x61_77_61_6D_69_67  # "awamig"


async def migrate(db: Database, connection: Any = None) -> list[int]:
    """Applies every missing migration; returns the versions applied now."""
    if connection is None:
        async with db.pool.acquire() as pooled:
            return await _migrate_serially(db, pooled)
    return await _migrate_serially(db, connection)


async def pending(db: Database) -> list[sql.Migration]:
    """The migrations ``migrate`` would apply now, oldest first (every one
    on a database awa never touched); applies nothing."""
    if not await db.fetchval("schema_migrations_exists"):
        return list(sql.MIGRATIONS)
    applied = {row["version"] for row in await db.fetch("schema_migrations_applied")}
    return [migration for migration in sql.MIGRATIONS if migration.version not in applied]


async def _migrate_serially(db: Database, connection: Any) -> list[int]:
    # The per-migration transaction locks keep concurrent migrators correct
    # everywhere; on a direct connection a session lock also keeps one
    # migrator from taking turns with another, so "applied migrations [...]"
    # names the whole set in one process instead of splitting it.
    if db.pooler is not None:
        return await _migrate(db, connection)
    await db.execute("schema_migrations_lock_session", MIGRATION_LOCK_KEY, connection=connection)
    try:
        return await _migrate(db, connection)
    finally:
        await db.execute(
            "schema_migrations_unlock_session", MIGRATION_LOCK_KEY, connection=connection
        )


async def _migrate(db: Database, connection: Any) -> list[int]:
    async with connection.transaction():
        await db.execute("schema_migrations_lock", MIGRATION_LOCK_KEY, connection=connection)
        await db.execute("schema_migrations_bootstrap", connection=connection)
    newly_applied = []
    for migration in sql.MIGRATIONS:
        async with connection.transaction():
            await db.execute("schema_migrations_lock", MIGRATION_LOCK_KEY, connection=connection)
            if await db.fetchval(
                "schema_migrations_is_applied", migration.version, connection=connection
            ):
                continue
            await connection.execute(migration.sql)
            await db.execute(
                "schema_migrations_record", migration.version, migration.name, connection=connection
            )
        log.info("applied migration %04d_%s", migration.version, migration.name)
        newly_applied.append(migration.version)
    db.schema_changed()
    return newly_applied
