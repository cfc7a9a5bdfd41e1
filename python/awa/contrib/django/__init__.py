"""Django: enqueue inside ``transaction.atomic()``, and run the worker with
``manage.py awa_worker``.

Add ``"awa.contrib.django"`` to ``INSTALLED_APPS`` and, for the worker and
for inserts that should use your tasks (their kinds, queues and schema
versions), ``AWA_APP = "myproject.tasks:client"`` naming your
:class:`awa.AsyncClient`. Then, in a view::

    from django.db import transaction
    from awa.contrib.django import insert

    with transaction.atomic():
        order = Order.objects.create(...)
        insert(SendReceipt(order=order.pk))

The job is written on Django's own connection (``using``: the database
alias, ``default`` by default) by :mod:`awa.bridges.psycopg`, so it commits
or rolls back with the block. Needs Django 4.2 or later on PostgreSQL with
psycopg 3 (the ``django`` extra); another database or driver raises
:class:`awa.ConfigurationError` naming it. Outside ``atomic()`` (Django's
autocommit) each insert commits at once, and awa says so once in its log.

Like Django's ORM, these functions are synchronous: from async code, call
them through ``asgiref.sync.sync_to_async``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar, Unpack, overload

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from awa.bridges import psycopg as bridge
from awa.bridges._steps import TaskSource
from awa.errors import ConfigurationError
from awa.inserts import InsertOptions
from awa.job import Job

T = TypeVar("T")

__all__ = ["app_client", "insert", "insert_many"]


@overload
def insert(
    args: dict[str, Any],
    *,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[dict[str, Any]]: ...


@overload
def insert(
    args: T,
    *,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]: ...


def insert(
    args: T,
    *,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> Job[T]:
    """Inserts one job on Django's connection ``using`` (in its
    transaction) and returns it, as :meth:`awa.AsyncClient.insert` does:
    the same options, errors and result. ``client`` lends its tasks;
    by default ``settings.AWA_APP``'s, if set."""
    connection = _psycopg_connection(using)
    return bridge.insert(connection, args, client=_tasks(client), **options)


@overload
def insert_many(
    jobs: Sequence[dict[str, Any]],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[dict[str, Any]]]: ...


@overload
def insert_many(
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]: ...


def insert_many(
    jobs: Sequence[T],
    *,
    opts: Sequence[InsertOptions | None] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    client: TaskSource = None,
    **options: Unpack[InsertOptions],
) -> list[Job[T]]:
    """Inserts many jobs in one statement on Django's connection ``using``
    and returns them, as :meth:`awa.AsyncClient.insert_many` does."""
    connection = _psycopg_connection(using)
    return bridge.insert_many(connection, jobs, opts=opts, client=_tasks(client), **options)


def app_client() -> Any:
    """The :class:`awa.AsyncClient` ``settings.AWA_APP`` names
    (``"module:attribute"``), imported once; ``None`` when it is not set."""
    target = getattr(settings, "AWA_APP", None)
    if not target:
        return None
    return _load_app(target)


@functools.cache
def _load_app(target: str) -> Any:
    from awa.cli.worker import load_client

    try:
        return load_client(target)
    except ConfigurationError as error:
        raise ConfigurationError(f"settings.AWA_APP: {error}") from None


def _tasks(client: TaskSource) -> TaskSource:
    return app_client() if client is None else client


def _psycopg_connection(using: str) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under Django's connection ``using``,
    opened if need be; :class:`awa.ConfigurationError` for a database awa
    cannot write to."""
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            f"awa.contrib.django: database {using!r} is {wrapper.vendor} "
            f"({wrapper.settings_dict.get('ENGINE')}); awa needs PostgreSQL "
            "(django.db.backends.postgresql) with psycopg 3"
        )
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        driver = type(raw).__module__.partition(".")[0]
        raise ConfigurationError(
            f"awa.contrib.django: database {using!r} connects with {driver}; awa needs "
            "psycopg 3 (pip install 'psycopg[binary]'; Django uses it when installed)"
        )
    return raw
