"""awa.testing on a real PostgreSQL: AwaTestClient.work_one through the worker's
own executor and completer, and the pytest fixtures of awa.testing_plugin used
the way an application's test suite uses them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from awa import events
from awa.testing import AwaTestClient

# The fixtures, imported as a conftest below the top level must (pytest only
# honours `pytest_plugins` in the top-level conftest); they then run under this
# suite's asyncio settings (auto mode, session loop).
from awa.testing_plugin import awa_client, awa_database_url, awa_test_client  # noqa: F401


class StageA(BaseModel):
    item: int


class StageB(BaseModel):
    item_id: int


class Audit(BaseModel):
    item: int


class Other(BaseModel):
    note: str


def register_stage_a(client: awa.AsyncClient, handler: Any = None) -> None:
    async def stage_a(job: awa.Job[StageA]) -> None:
        return None

    client.task(StageA)(handler or stage_a)


async def test_work_one_completes_a_job_and_returns_its_committed_row(client, conn):
    seen: list[int] = []

    @client.task(StageA)
    async def stage_a(job: awa.Job[StageA]) -> None:
        assert job.state is awa.JobState.Running
        seen.append(job.args.item)
        # Held by a live worker row while it runs, so no rescuer takes it.
        held_by = await conn.fetchval("SELECT worker_id FROM awa.jobs WHERE id = $1", job.id)
        assert held_by is not None
        assert held_by == await conn.fetchval("SELECT id FROM awa.workers")

    inserted = await client.insert(StageA(item=7))
    result = await AwaTestClient(client).work_one()

    assert result is not None
    assert seen == [7]
    assert (result.outcome, result.error) == ("completed", None)
    assert result.job.id == inserted.id
    assert result.job.state is awa.JobState.Completed
    assert result.job.attempt == 1
    assert result.job.finalized_at is not None
    assert result.job.args == StageA(item=7)
    stored = await conn.fetchrow("SELECT state::text, worker_id FROM awa.jobs")
    assert (stored["state"], stored["worker_id"]) == ("completed", None)
    assert await conn.fetchval("SELECT count(*) FROM awa.workers") == 0


async def test_work_one_returns_after_the_hooks_it_dispatched_have_run(client):
    register_stage_a(client)
    received: list[events.JobEvent] = []
    client.on_event(StageA, received.append)  # a plain hook: it runs in a thread

    await client.insert(StageA(item=1))
    result = await AwaTestClient(client).work_one(StageA)

    assert result is not None
    completed = [event for event in received if isinstance(event, events.Completed)]
    assert len(completed) == 1
    assert completed[0].job.state is awa.JobState.Completed
    assert completed[0].args == StageA(item=1)
    assert any(isinstance(event, events.Started) for event in received)


async def test_work_one_inserts_staged_and_spec_follow_ups_with_the_completion(client):
    @client.task(StageA)
    async def stage_a(job: awa.Job[StageA]) -> None:
        job.enqueue_on_completion(StageB(item_id=job.args.item * 10), kind="stage_b", priority=1)

    client.on_completed_enqueue(
        StageA, lambda args, job: awa.EnqueueRequest(Audit(item=args.item), kind="audit")
    )
    await client.insert(StageA(item=4))

    result = await AwaTestClient(client).work_one()

    assert result is not None and result.outcome == "completed"
    available = await client.list_jobs(state="available", include_payload=True)
    follow_ups = {job.kind: job for job in available}
    assert set(follow_ups) == {"stage_b", "audit"}
    assert follow_ups["stage_b"].args == {"item_id": 40}
    assert follow_ups["stage_b"].priority == 1
    assert follow_ups["audit"].args == {"item": 4}


async def test_drain_works_follow_ups_until_none_is_left(client):
    @client.task(StageA)
    async def stage_a(job: awa.Job[StageA]) -> None:
        job.enqueue_on_completion(StageB(item_id=job.args.item))

    @client.task(StageB)
    async def stage_b(job: awa.Job[StageB]) -> None:
        return None

    await client.insert(StageA(item=1))
    results = await AwaTestClient(client).drain()

    assert [(r.job.kind, r.outcome) for r in results] == [
        ("stage_a", "completed"),
        ("stage_b", "completed"),
    ]


async def test_work_one_reports_a_raising_handler_as_retried_with_its_error(client):
    async def failing(job: awa.Job[StageA]) -> None:
        raise ValueError("boom")

    register_stage_a(client, failing)
    await client.insert(StageA(item=1))

    result = await AwaTestClient(client).work_one()

    assert result is not None
    assert (result.outcome, result.error) == ("retried", "ValueError: boom")
    assert result.job.state is awa.JobState.Retryable
    assert result.job.errors[-1]["message"] == "boom"


def _raise(error: Exception) -> Any:
    raise error


def _swallow_staging_error(job: awa.Job[Any]) -> None:
    with contextlib.suppress(awa.StagingError):
        job.enqueue_on_completion(StageB(item_id=1), kind="stage_b", priority=9)


OUTCOMES = [
    pytest.param(lambda job: None, {}, "completed", "completed", None, id="completed"),
    pytest.param(
        lambda job: _raise(ValueError("x")),
        {"max_attempts": 1},
        "exhausted",
        "failed",
        "ValueError: x",
        id="attempts_spent",
    ),
    pytest.param(
        lambda job: _raise(awa.TerminalError("no")),
        {},
        "exhausted",
        "failed",
        "TerminalError: no",
        id="terminal_error",
    ),
    pytest.param(
        lambda job: awa.Cancel("stop"), {}, "cancelled", "cancelled", "Cancel: stop", id="cancel"
    ),
    pytest.param(lambda job: awa.Snooze(60), {}, "snoozed", "scheduled", None, id="snooze"),
    pytest.param(lambda job: awa.RetryAfter(60), {}, "retried", "retryable", None, id="retry"),
    pytest.param(
        _swallow_staging_error,
        {},
        "exhausted",
        "failed",
        "StagingError: priority: must be between 1 and 4 (got 9)",
        id="swallowed_staging_error",
    ),
]


@pytest.mark.parametrize(("behaviour", "insert_options", "outcome", "state", "error"), OUTCOMES)
async def test_work_one_names_each_outcome_as_hooks_do(
    client, behaviour, insert_options, outcome, state, error
):
    def handler(job: awa.Job[StageA]) -> Any:  # a plain def: it runs in a thread
        return behaviour(job)

    register_stage_a(client, handler)
    await client.insert(StageA(item=1), **insert_options)

    result = await AwaTestClient(client).work_one()

    assert result is not None
    assert (result.outcome, result.job.state.value, result.error) == (outcome, state, error)


async def test_work_one_returns_none_when_no_job_is_available(client):
    register_stage_a(client)
    test_client = AwaTestClient(client)
    assert await test_client.work_one() is None
    await client.insert(StageA(item=1), run_at=datetime.timedelta(hours=1))  # scheduled
    assert await test_client.work_one() is None


async def test_work_one_with_a_kind_or_queue_leaves_other_jobs_untouched(client, conn):
    register_stage_a(client)
    other = await client.insert(Other(note="more urgent"), kind="other", priority=1)
    elsewhere = await client.insert(StageA(item=2), queue="elsewhere", priority=1)
    mine = await client.insert(StageA(item=1))
    test_client = AwaTestClient(client)

    by_type = await test_client.work_one(StageA, queue="default")
    assert by_type is not None and by_type.job.id == mine.id
    by_kind = await test_client.work_one("stage_a")
    assert by_kind is not None and by_kind.job.id == elsewhere.id
    assert await test_client.work_one("stage_a") is None

    untouched = await client.get_job(other.id)
    assert (untouched.state, untouched.attempt, untouched.run_lease) == (
        awa.JobState.Available,
        0,
        0,
    )


async def test_work_one_gives_back_a_job_whose_handler_outlives_the_timeout(client, conn):
    never = asyncio.Event()

    async def stuck(job: awa.Job[StageA]) -> None:
        await never.wait()

    register_stage_a(client, stuck)
    inserted = await client.insert(StageA(item=1))

    with pytest.raises(TimeoutError, match="did not finish"):
        await AwaTestClient(client).work_one(timeout=0.05)

    job = await client.get_job(inserted.id)
    assert (job.state, job.attempt) == (awa.JobState.Available, 0)


async def test_a_cancelled_work_one_stops_the_handler_and_gives_the_job_back(client):
    started, never = asyncio.Event(), asyncio.Event()
    handler_cancelled = asyncio.Event()

    async def stuck(job: awa.Job[StageA]) -> None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise

    register_stage_a(client, stuck)
    inserted = await client.insert(StageA(item=1))

    working = asyncio.create_task(AwaTestClient(client).work_one())
    await asyncio.wait_for(started.wait(), 10)
    working.cancel()
    with pytest.raises(asyncio.CancelledError):
        await working

    assert handler_cancelled.is_set()
    job = await client.get_job(inserted.id)
    assert (job.state, job.attempt) == (awa.JobState.Available, 0)


# ── the pytest fixtures ──────────────────────────────────────────────────


async def test_the_fixtures_give_a_migrated_client_and_a_test_client(
    awa_client,  # noqa: F811 - the fixture imported above
    awa_test_client,  # noqa: F811
):
    assert awa_test_client.client is awa_client
    assert await awa_client.count_by_state() == {}
    register_stage_a(awa_client)
    await awa_client.insert(StageA(item=1))

    result = await awa_test_client.work_one()

    assert result is not None and result.outcome == "completed"


USER_CONFTEST = """
pytest_plugins = ["awa.testing_plugin"]
"""

USER_TESTS = """
import pytest
from pydantic import BaseModel


class Ping(BaseModel):
    n: int


@pytest.fixture
def app(awa_client):
    @awa_client.task(Ping)
    async def ping(job):
        if job.args.n == 0:
            job.enqueue_on_completion(Ping(n=1))

    return awa_client


@pytest.mark.asyncio
@pytest.mark.parametrize("run", [1, 2])
async def test_each_test_starts_from_an_empty_queue(app, awa_test_client, run):
    job = await app.insert(Ping(n=0))
    assert job.id == 1
    result = await awa_test_client.work_one()
    assert result.outcome == "completed"
    assert [j.args.n for j in await app.list_jobs(include_payload=True)] == [1, 0]
"""

USER_INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
asyncio_default_test_loop_scope = function
filterwarnings = error
"""


async def run_pytest(directory: Path, server_url: str, *options: str) -> tuple[int, str]:
    """Runs pytest in a user's project at ``directory``, on databases it
    creates on ``server_url``; returns its exit code and report."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *options,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=directory,
        env={**os.environ, "AWA_DATABASE_URL": server_url},
    )
    out, _ = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_the_plugin_works_in_a_users_project_in_strict_mode(server_url, tmp_path):
    (tmp_path / "pytest.ini").write_text(USER_INI)
    (tmp_path / "conftest.py").write_text(USER_CONFTEST)
    (tmp_path / "test_app.py").write_text(textwrap.dedent(USER_TESTS))
    code, report = await run_pytest(tmp_path, server_url)
    assert code == 0, report
    assert "2 passed" in report


def docs_pytest_project() -> dict[str, str]:
    """The project docs/testing.md sets up for the fixtures, file by file:
    its ``# conftest.py`` and ``# test_ping.py`` blocks and its pytest
    configuration (the TOML block), as pyproject.toml."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text("utf-8")
    files = {}
    for _indent, language, body in re.findall(
        r"^( *)```(\w+)\n(.*?)^\1```", doc, flags=re.DOTALL | re.MULTILINE
    ):
        body = textwrap.dedent(body)
        first_line = body.splitlines()[0]
        if language == "toml" and first_line == "[tool.pytest.ini_options]":
            files["pyproject.toml"] = body
        elif language == "python" and first_line in ("# conftest.py", "# test_ping.py"):
            files[first_line.removeprefix("# ")] = body
    assert sorted(files) == ["conftest.py", "pyproject.toml", "test_ping.py"]
    return files


@pytest.mark.parametrize("mode", ["strict", "auto"])
async def test_the_testing_docs_pytest_example_passes(server_url, tmp_path, mode):
    for name, text in docs_pytest_project().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    code, report = await run_pytest(
        tmp_path, server_url, "-o", f"asyncio_mode={mode}", "-W", "error"
    )
    assert code == 0, report
    assert "1 passed" in report


async def test_an_unmarked_async_test_in_strict_mode_is_told_what_to_configure(
    server_url, tmp_path
):
    files = docs_pytest_project()
    unmarked = files["test_ping.py"].replace("@pytest.mark.asyncio", "")
    assert unmarked != files["test_ping.py"]
    (tmp_path / "pyproject.toml").write_text(files["pyproject.toml"], encoding="utf-8")
    (tmp_path / "conftest.py").write_text(files["conftest.py"], encoding="utf-8")
    (tmp_path / "test_ping.py").write_text(unmarked, encoding="utf-8")

    code, report = await run_pytest(tmp_path, server_url, "-o", "asyncio_mode=strict")

    assert code == 1, report
    assert "1 error" in report
    assert (
        "test_ping.py::test_ping is an async test that pytest-asyncio does not run: in its "
        "strict mode (the default) mark it @pytest.mark.asyncio (a whole module: "
        'pytestmark = pytest.mark.asyncio), or set asyncio_mode = "auto"'
    ) in report
    assert "not natively supported" not in report
