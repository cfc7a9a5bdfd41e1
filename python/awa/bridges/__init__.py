"""Enqueue jobs inside a transaction of another database driver.

:class:`awa.AsyncClient` inserts on asyncpg connections (``connection=``).
These bridges run the same insert (the same checks, the same SQL, the same
:class:`awa.Job` results) on a connection of another driver, so a job
commits or rolls back with the rows you write in that transaction:

- :mod:`awa.bridges.psycopg`: psycopg 3 ``Connection`` and ``AsyncConnection``;
- :mod:`awa.bridges.sqlalchemy`: SQLAlchemy ``Connection`` / ``Session``
  (psycopg driver) and ``AsyncConnection`` / ``AsyncSession`` (asyncpg or
  psycopg driver);
- :mod:`awa.contrib.django`: Django's connection (PostgreSQL on psycopg 3).

Each driver module is imported on its own (``import awa.bridges.psycopg``)
and needs its extra installed; this package imports none of them.
"""
