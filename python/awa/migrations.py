"""Forward-only, numbered schema migrations, safe to run from many processes
at once.

Overview: ``migrate`` takes a session advisory lock, creates the ``awa``
schema and its migration ledger if needed, then applies each missing
migration in its own transaction and records it. A second process waiting
on the lock finds nothing left to do.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from awa import sql
from awa.db import Database, session_changed

log = logging.getLogger("awa.migrations")

# Arbitrary but fixed: the advisory lock key every awa migrator shares.
MIGRATION_LOCK_KEY: Final = 0x61_77_61_6D_69_67  # "awamig"


async def migrate(db: Database, connection: Any = None) -> list[int]:
    """Applies every missing migration; returns the versions applied now."""
    if connection is None:
        async with db.pool.acquire() as pooled:
            return await _migrate_locked(db, pooled)
    return await _migrate_locked(db, connection)


async def _migrate_locked(db: Database, connection: Any) -> list[int]:
    session_changed(connection)
    await db.execute("schema_migrations_lock", MIGRATION_LOCK_KEY, connection=connection)
    try:
        await db.execute("schema_migrations_bootstrap", connection=connection)
        applied = {
            row["version"]
            for row in await db.fetch("schema_migrations_applied", connection=connection)
        }
        newly_applied = []
        for migration in sql.MIGRATIONS:
            if migration.version in applied:
                continue
            async with connection.transaction():
                await connection.execute(migration.sql)
                await db.execute(
                    "schema_migrations_record",
                    migration.version,
                    migration.name,
                    connection=connection,
                )
            log.info("applied migration %04d_%s", migration.version, migration.name)
            newly_applied.append(migration.version)
        db.schema_changed()
        return newly_applied
    finally:
        await db.execute("schema_migrations_unlock", MIGRATION_LOCK_KEY, connection=connection)
