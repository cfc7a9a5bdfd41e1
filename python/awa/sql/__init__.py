"""Named SQL queries and numbered migrations, loaded from the `.sql` files
beside this module.

Each query block in ``queries/<table>.sql`` starts with ``-- name:
<table>_<verb>`` followed by a one-line comment saying what it does. The
loader builds ``{name: sql}`` once at import and fails loudly on a
duplicate, a missing purpose line or a name that does not start with its
file's table. Runtime code never builds SQL strings; it asks for a query by
name with :func:`query`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

_NAME_LINE: Final = re.compile(r"^-- name: (?P<name>[a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE: Final = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


class QueryFileError(RuntimeError):
    """A `.sql` file breaks the loader's rules (a bug in awa, not in user code)."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def _sql_dir() -> resources.abc.Traversable:
    return resources.files(__package__)


def _parse_query_file(table: str, text: str) -> dict[str, str]:
    matches = list(_NAME_LINE.finditer(text))
    parsed: dict[str, str] = {}
    for index, match in enumerate(matches):
        name = match["name"]
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        purpose, _, sql = body.partition("\n")
        if not purpose.startswith("-- ") or not sql.strip():
            raise QueryFileError(f"{table}.sql: query {name} needs a purpose line and a body")
        if not name.startswith(f"{table}_"):
            raise QueryFileError(f"{table}.sql: query {name} must be named {table}_<verb>")
        if name in parsed:
            raise QueryFileError(f"{table}.sql: query {name} is defined twice")
        parsed[name] = sql.strip()
    return parsed


def _load_queries() -> dict[str, str]:
    loaded: dict[str, str] = {}
    for entry in sorted(_sql_dir().joinpath("queries").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        table = entry.name.removesuffix(".sql")
        for name, sql in _parse_query_file(table, entry.read_text(encoding="utf-8")).items():
            if name in loaded:
                raise QueryFileError(f"query {name} is defined in two files")
            loaded[name] = sql
    return loaded


def _load_migrations() -> tuple[Migration, ...]:
    found: list[Migration] = []
    for entry in _sql_dir().joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                raise QueryFileError(f"migration file {entry.name} is not named NNNN_name.sql")
            continue
        found.append(
            Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8"))
        )
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if versions != list(range(1, len(found) + 1)):
        raise QueryFileError(f"migrations must be numbered 1, 2, 3… without gaps: {versions}")
    return tuple(found)


QUERIES: Final[dict[str, str]] = _load_queries()
MIGRATIONS: Final[tuple[Migration, ...]] = _load_migrations()
LATEST_VERSION: Final[int] = MIGRATIONS[-1].version


def query(name: str) -> str:
    """The SQL of a named query; an unknown name is a bug and raises at once."""
    try:
        return QUERIES[name]
    except KeyError:
        raise QueryFileError(f"there is no query named {name!r}") from None


def schema_sql() -> str:
    """The whole current schema in one file (checked against the migrations)."""
    return _sql_dir().joinpath("schema.sql").read_text(encoding="utf-8")
