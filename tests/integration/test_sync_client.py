"""``awa.Client``: AsyncClient's producer and admin API without an event loop
in the caller, from plain code, from a thread that runs a loop, and from
many threads at once; closed, it refuses by name."""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
import warnings
from collections.abc import Iterator

import psycopg
import pytest
from pydantic import BaseModel

import awa
from awa import sql


class SendEmail(BaseModel):
    to: str


@pytest.fixture
def sync_client(database_url: str, conn: object) -> Iterator[awa.Client]:
    """A sync client on the clean test database (``conn`` cleans it)."""
    with awa.Client(database_url) as client:
        yield client


def fail(database_url: str, job_id: int) -> None:
    """Makes a job a dead letter, as a handler's terminal error would."""
    with psycopg.connect(database_url) as connection:
        connection.execute(
            "UPDATE awa.jobs SET state = 'failed', finalized_at = now(), attempt = 1, "
            "failure_reason = 'terminal_error' WHERE id = %s",
            [job_id],
        )


def test_inserts_return_typed_jobs_read_back_by_get_job_and_list_jobs(sync_client):
    job = sync_client.insert(SendEmail(to="a@b.c"), queue="email", tags=["t"])
    assert isinstance(job, awa.Job) and job.args == SendEmail(to="a@b.c")
    assert job.state is awa.JobState.Available and job.queue == "email"
    many = sync_client.insert_many([{"n": 1}, {"n": 2}], kind="counted")
    assert [j.args for j in many] == [{"n": 1}, {"n": 2}]
    copied = sync_client.insert_many_copy([{"n": 3}], kind="counted")
    assert copied[0].args == {"n": 3}
    assert sync_client.enqueue_many_copy([{"n": 4}, {"n": 5}], kind="counted") == 2

    read = sync_client.get_job(job.id, args_type=SendEmail, include_payload=True)
    assert read.args == SendEmail(to="a@b.c")
    assert [j.id for j in sync_client.list_jobs(tag="t")] == [job.id]
    assert len(sync_client.list_jobs(kind="counted")) == 5
    assert sync_client.count_by_state() == {awa.JobState.Available: 6}


def test_errors_are_the_async_clients_named_ones(sync_client):
    with pytest.raises(awa.ValidationError) as raised:
        sync_client.insert({"n": 1}, kind="k", priority=9)
    assert raised.value.field == "priority"
    with pytest.raises(awa.JobNotFound):
        sync_client.get_job(10**9)


def test_cancel_and_the_dead_letter_queue(sync_client, database_url):
    running = sync_client.insert({"n": 1}, kind="k")
    cancelled = sync_client.cancel(running.id, reason="not needed")
    assert cancelled is not None and cancelled.state is awa.JobState.Cancelled
    assert sync_client.cancel(running.id) is None

    dead = [sync_client.insert({"n": n}, kind="k").id for n in (2, 3)]
    for job_id in dead:
        fail(database_url, job_id)
    letters = sync_client.list_dlq(kind="k")
    assert sorted(letter.job.id for letter in letters) == sorted(dead)
    assert sync_client.retry_from_dlq([dead[0]]) == [dead[0]]
    assert sync_client.get_job(dead[0]).state is awa.JobState.Available
    assert sync_client.purge_dlq(everything=True) == 1
    assert sync_client.list_dlq() == []


def test_queues_schema_and_health(sync_client):
    sync_client.insert({"n": 1}, kind="k", queue="reports")
    assert sync_client.pause_queue("reports", paused_by="ops").paused
    [summary] = sync_client.list_queues()
    assert summary.config.queue == "reports" and summary.config.paused
    assert not sync_client.resume_queue("reports").paused
    assert sync_client.migrate() == []
    assert sync_client.pending_migrations() == []
    report = sync_client.health_check()
    assert report.schema_version == sql.LATEST_VERSION


async def test_works_from_a_thread_that_runs_an_event_loop(sync_client):
    """A sync function called inside an async framework: the call blocks
    this loop, but runs on the client's own, so it cannot deadlock."""
    assert asyncio.get_running_loop().is_running()
    job = sync_client.insert({"n": 1}, kind="k")
    assert sync_client.get_job(job.id).id == job.id


def test_many_threads_share_one_client(sync_client):
    threads, per_thread = 8, 5
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def produce(index: int) -> None:
        try:
            start.wait()
            for n in range(per_thread):
                sync_client.insert({"thread": index, "n": n}, kind="k")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert errors == []
    assert sync_client.count_by_state() == {awa.JobState.Available: threads * per_thread}


def test_a_forked_child_gets_a_loop_and_pool_of_its_own(sync_client):
    """A pre-forking server: the parent's thread does not cross the fork,
    so the child's first call starts its own (a bounded wait: the child
    exits on its own, and the test's timeout stops a hang)."""
    parent_job = sync_client.insert({"n": 1}, kind="k")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            job = sync_client.insert({"n": 2}, kind="k")
            code = 0 if sync_client.get_job(job.id).id == job.id else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sync_client.get_job(parent_job.id).id == parent_job.id
    assert sync_client.count_by_state() == {awa.JobState.Available: 2}


def test_use_after_close_raises_client_closed_and_the_thread_ends(database_url, conn):
    client = awa.Client(database_url)
    client.insert({"n": 1}, kind="k")
    [thread] = [t for t in threading.enumerate() if t.name == "awa-sync-client"]
    client.close()
    assert not thread.is_alive()
    client.close()  # a second close is a no-op
    with pytest.raises(awa.ClientClosed, match="closed"):
        client.insert({"n": 2}, kind="k")
    with pytest.raises(awa.ClientClosed):
        client.list_jobs()


def test_a_call_waiting_in_another_thread_when_the_client_closes_raises_client_closed(
    database_url, conn
):
    """Closing never leaves another thread waiting for ever: its call is
    cancelled on the loop and raises. (The call is a minute's sleep on the
    client's loop that the close cuts short; the thread's join is bounded.)"""
    client = awa.Client(database_url)
    client.insert({"n": 1}, kind="k")
    _async_client, runner = client._client()
    started = threading.Event()
    outcome: list[BaseException | None] = []

    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    def wait() -> None:
        try:
            runner.run(slow())
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - asserted below
            outcome.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert started.wait(10)
    client.close()
    waiter.join(10)
    assert not waiter.is_alive()
    [error] = outcome
    assert isinstance(error, awa.ClientClosed)


def test_a_client_never_used_starts_no_thread_and_closes(database_url):
    with awa.Client(database_url) as client:
        assert client._runner is None
    assert "awa-sync-client" not in {thread.name for thread in threading.enumerate()}


def test_bad_options_raise_in_the_constructor():
    with pytest.raises(awa.ConfigurationError, match="max_connections"):
        awa.Client("postgresql://nowhere/db", max_connections=0)


def test_an_unreachable_database_is_a_named_error_not_a_hang():
    with (
        awa.Client("postgresql://nobody@127.0.0.1:1/none", connect_timeout=5) as client,
        pytest.raises(awa.ConnectionFailed),
    ):
        client.insert({"n": 1}, kind="k", run_at=datetime.timedelta(0))
