"""Adding jobs to ``awa._core.InsertRows`` one at a time, as the unit tests
of the core's limits do: options given by name, kind and queue as given."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from awa import _core


def add(
    rows: _core.InsertRows,
    args: Any,
    kind: Any,
    queue: Any,
    priority: Any,
    max_attempts: Any,
    max_crashes: Any = None,
    run_at_us: Any = None,
    tags: Any = None,
    metadata: Any = None,
    batch: bool = False,
    unique: Any = None,
    now_us: int = 0,
    timeout_ms: Any = None,
    deadline_us: Any = None,
    schema_version: Any = None,
    rate_class: Any = None,
    partition_key: Any = None,
) -> None:
    """Checks one job and appends it, its options in an object read by name
    (as :class:`awa.inserts.InsertOpts` is)."""
    options = SimpleNamespace(
        kind=kind,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        max_crashes=max_crashes,
        max_crashes_from_queue=False,
        run_at_us=run_at_us,
        tags=tags,
        metadata=metadata,
        unique=unique,
        timeout_ms=timeout_ms,
        deadline_us=deadline_us,
        schema_version=schema_version,
        rate_class=rate_class,
        partition_key=partition_key,
    )
    rows.add_many([args], options, as_given, now_us=now_us, batch=batch)


def as_given(args: Any, kind: Any, queue: Any) -> tuple[Any, Any, None, None, None, None]:
    """A resolver that keeps the kind and queue given, checks nothing and
    knows no schema version or rate class."""
    return kind, queue, None, None, None, None


def json_rows(rows: _core.InsertRows) -> list[dict[str, Any]]:
    """The rows as the insert statements read them, by field name."""
    parsed: list[dict[str, Any]] = json.loads(rows.json_rows())
    return parsed


def column(rows: _core.InsertRows, name: str) -> list[Any]:
    """One field of every row of :meth:`InsertRows.rows`."""
    return [row[name] for row in rows.rows()]
