"""``awa.contrib.django``: a job inserted inside ``transaction.atomic()``
commits or rolls back with the block, with the tasks of settings.AWA_APP;
another database is refused by name; ``manage.py awa_worker`` runs the
app's jobs and stops on SIGTERM.

Django's database calls are synchronous (they refuse to run on a thread
whose event loop is running), so the insert tests are plain functions."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import override_settings

import awa
from awa.contrib.django import insert, insert_many
from tests.django_project.configure import configure
from tests.django_project.tasks import SendReceipt
from tests.processes import ROOT
from tests.support import wait_for_state

#: How long the worker command may take to start, run a job, and stop.
WORKER_STEP_TIMEOUT_S = 60.0


@pytest.fixture
def django_db(database_url: str, conn: object) -> Iterator[awa.Client]:
    """Django configured on the clean test database, with the caller's own
    table; a sync awa client to look at the jobs."""
    configure(database_url)
    with connections["default"].cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS django_orders (note text NOT NULL)")
        cursor.execute("TRUNCATE django_orders")
    try:
        with awa.Client(database_url) as client:
            yield client
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("DROP TABLE django_orders")
        connections.close_all()


def orders() -> list[str]:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT note FROM django_orders")
        return [note for (note,) in cursor.fetchall()]


def add_order(note: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("INSERT INTO django_orders (note) VALUES (%s)", [note])


def test_a_job_inserted_in_atomic_commits_with_the_block(django_db):
    with transaction.atomic():
        add_order("paid")
        job = insert(SendReceipt(order="paid"))
    # The kind and queue of the task settings.AWA_APP registers.
    assert (job.kind, job.queue) == ("send_receipt", "receipts")
    assert job.args == SendReceipt(order="paid")
    assert orders() == ["paid"]
    assert django_db.get_job(job.id).state is awa.JobState.Available


def test_a_job_inserted_in_atomic_rolls_back_with_the_block(django_db):
    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        add_order("declined")
        job = insert(SendReceipt(order="declined"))
        raise RuntimeError("payment declined")
    assert orders() == []
    with pytest.raises(awa.JobNotFound):
        django_db.get_job(job.id)


def test_insert_many_in_a_savepoint_that_rolls_back_leaves_the_outer_block(django_db):
    with transaction.atomic():
        kept = insert_many([{"n": 1}], kind="counted")
        with pytest.raises(RuntimeError), transaction.atomic():
            insert_many([{"n": 2}, {"n": 3}], kind="counted")
            raise RuntimeError
    assert [job.id for job in django_db.list_jobs(kind="counted")] == [kept[0].id]


def test_a_database_that_is_not_postgresql_is_refused_by_name(django_db):
    with pytest.raises(awa.ConfigurationError, match=r"database 'other' is sqlite"):
        insert({"n": 1}, kind="k", using="other")


def test_an_awa_app_that_does_not_load_is_a_configuration_error(django_db):
    with (
        override_settings(AWA_APP="tests.django_project.tasks:nobody"),
        pytest.raises(awa.ConfigurationError, match=r"settings\.AWA_APP: .* no attribute 'nobody'"),
    ):
        insert(SendReceipt(order="o"))


def test_the_worker_command_without_awa_app_says_what_to_set(django_db):
    with override_settings(AWA_APP=None), pytest.raises(CommandError, match="set AWA_APP"):
        call_command("awa_worker")


async def test_the_awa_worker_command_runs_a_job_and_stops_on_sigterm(database_url, conn, client):
    job = await client.insert(SendReceipt(order="o"), kind="send_receipt", queue="receipts")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)]),
        "AWA_DATABASE_URL": database_url,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.django_project.manage", "awa_worker",
        "--queue", "receipts=2", "--shutdown-timeout", "5",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for_state(conn, job.id, "completed", timeout=WORKER_STEP_TIMEOUT_S)
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), WORKER_STEP_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
