"""The catalog reads of ``awa doctor`` (sql/queries/diagnostics.sql) on
real PostgreSQL: a table's autovacuum switch however it was spelt, and
the session probe's setting as it survives (or not) a transaction."""

from __future__ import annotations

import pytest

from awa import sql

Q = sql.query


@pytest.mark.parametrize("spelt", ["false", "off", "0", "no"])
async def test_autovacuum_disabled_is_read_however_it_was_spelt(conn, spelt):
    await conn.execute(f"ALTER TABLE awa.workers SET (autovacuum_enabled = {spelt})")
    try:
        rows = await conn.fetch(Q("diagnostics_tables"), ["workers", "leaders", "absent"])
    finally:
        await conn.execute("ALTER TABLE awa.workers RESET (autovacuum_enabled)")
    assert {row["name"]: row["autovacuum_enabled"] for row in rows} == {
        "leaders": True, "workers": False,
    }  # fmt: skip


async def test_the_session_mark_outlives_its_transaction_on_a_session_of_its_own(conn):
    marked = await conn.fetchrow(Q("diagnostics_session_mark"), "token-1")
    read = await conn.fetchrow(Q("diagnostics_session_read"))
    assert (read["pid"], read["mark"]) == (marked["pid"], "token-1")
    await conn.execute("RESET ALL")  # what the pool's reset does
    assert (await conn.fetchrow(Q("diagnostics_session_read")))["mark"] == ""
