"""Every query the docs name exists: a name in backticks that looks like a
query (``jobs_…``, ``workers_…``, ``leaders_…``, ``quarantine_…``,
``schema_migrations_…``) is a query in ``awa/sql/queries`` unless it names
something else the tree defines: a schema object (``schema.sql`` or a
migration, primary-key indexes included), a
worker setting (``awa/config.py``) or a table of the storage experiment
(``benches/storage/experiment.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from awa import sql

ROOT = Path(__file__).resolve().parents[2]
QUERY_LIKE = re.compile(r"`((?:jobs|workers|leaders|quarantine|schema_migrations)_[a-z_]+)`")
OTHER_DEFINITIONS = [
    ROOT / "python/awa/sql/schema.sql",
    *sorted((ROOT / "python/awa/sql/migrations").glob("*.sql")),
    ROOT / "python/awa/config.py",
    ROOT / "benches/storage/experiment.py",
]


def query_names() -> set[str]:
    names = set()
    for path in (ROOT / "python/awa/sql/queries").glob("*.sql"):
        names |= set(re.findall(r"^-- name: (\w+)", path.read_text(), re.MULTILINE))
    return names


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def primary_keys(schema: str) -> str:
    """The names PostgreSQL gives the primary-key indexes of the tables the
    schema creates (``jobs_pkey``), which no file spells out."""
    tables = re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?awa\.(\w+)", schema)
    return " ".join(f"{table}_pkey" for table in tables)


def test_every_query_the_docs_name_exists() -> None:
    queries = query_names()
    defined_elsewhere = "\n".join(path.read_text() for path in OTHER_DEFINITIONS)
    defined_elsewhere += "\n" + primary_keys(OTHER_DEFINITIONS[0].read_text())
    missing = sorted(
        f"{doc.relative_to(ROOT)}: {name}"
        for doc in documents()
        for name in set(QUERY_LIKE.findall(doc.read_text()))
        if name not in queries and not re.search(rf"\b{name}\b", defined_elsewhere)
    )
    assert not missing, "the docs name queries that do not exist:\n" + "\n".join(missing)


def test_the_query_files_load_every_named_query() -> None:
    assert query_names() <= set(sql.QUERIES)
