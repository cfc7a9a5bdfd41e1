"""The public API's types, as a user's code sees them.

pytest runs this file; mypy (strict) checks it, so ``assert_type`` lines
fail type checking when a public signature drifts. Nothing here needs a
database.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Final, assert_type

import pytest

import awa


@dataclasses.dataclass
class ResizeImage:
    image_id: int
    width: int


def decide(attempt: int) -> awa.RetryAfter | awa.Snooze | awa.Cancel | None:
    """A handler's decision, in the union of outcomes a handler may return."""
    if attempt == 1:
        return awa.Snooze(5)
    if attempt < 5:
        return awa.RetryAfter(30)
    if attempt < 10:
        return awa.Cancel("gave up")
    return None


def test_outcomes_carry_seconds_as_floats() -> None:
    retry = awa.RetryAfter(30)
    snooze = awa.Snooze(0.5)
    assert_type(retry.seconds, float)
    assert_type(snooze.seconds, float)
    assert (retry.seconds, snooze.seconds) == (30.0, 0.5)
    assert isinstance(retry.seconds, float)


def test_cancel_carries_a_reason() -> None:
    assert_type(awa.Cancel("duplicate").reason, str)
    assert awa.Cancel().reason


def test_handlers_return_one_of_the_outcomes() -> None:
    assert [type(decide(n)).__name__ for n in (1, 2, 5, 10)] == [
        "Snooze",
        "RetryAfter",
        "Cancel",
        "NoneType",
    ]


def test_bad_outcome_seconds_raise_validation_errors_naming_the_outcome() -> None:
    with pytest.raises(awa.ValidationError) as caught:
        awa.RetryAfter(float("nan"))
    assert_type(caught.value.field, str | None)
    assert caught.value.field == "RetryAfter"


def test_job_states_are_their_database_names() -> None:
    state = awa.JobState("waiting_external")
    assert_type(state, awa.JobState)
    assert state is awa.JobState.WaitingExternal
    assert str(state) == state.value == "waiting_external"
    assert_type(state.is_terminal, bool)
    assert [s.value for s in awa.JobState if s.is_terminal] == ["completed", "failed", "cancelled"]


def test_validation_errors_are_awa_errors_and_value_errors() -> None:
    error = awa.ValidationError("priority: must be between 1 and 4 (got 9)", "priority")
    assert isinstance(error, awa.AwaError)
    assert isinstance(error, ValueError)
    assert error.field == "priority"


def test_derive_kind_gives_a_string() -> None:
    assert_type(awa.derive_kind("ResizeImage"), str)
    assert awa.derive_kind("ResizeImage") == "resize_image"


def test_the_task_decorator_keeps_the_handler_type() -> None:
    client = awa.AsyncClient("postgresql://localhost/never-connected")

    @client.task(ResizeImage, queue="images")
    async def resize(job: awa.Job[ResizeImage]) -> awa.RetryAfter | None:
        assert_type(job.args, ResizeImage)
        assert_type(job.state, awa.JobState)
        assert_type(job.tags, list[str])
        assert_type(job.max_crashes, int | None)
        return None if job.args.width > 0 else awa.RetryAfter(1)

    assert_type(resize.__name__, str)
    task = client.tasks["resize_image"]
    assert (task.kind, task.queue, task.args_type) == ("resize_image", "images", ResizeImage)


def test_a_running_job_has_the_attempts_capabilities_and_a_job_does_not() -> None:
    client = awa.AsyncClient("postgresql://localhost/never-connected")

    @client.task(ResizeImage, kind="resize_with_follow_up")
    async def resize(job: awa.RunningJob[ResizeImage]) -> None:
        assert_type(job.args, ResizeImage)
        assert_type(job.is_cancelled(), bool)
        job.enqueue_on_completion(ResizeImage(image_id=job.args.image_id, width=10))

    assert issubclass(awa.RunningJob, awa.Job)
    assert not hasattr(awa.Job, "enqueue_on_completion")
    assert client.tasks["resize_with_follow_up"].handler is resize


# ── what mypy must refuse ────────────────────────────────────────────────
#
# Each snippet below is a user's module that mypy --strict must reject with
# the given message. They are written to a temporary directory and checked
# in one mypy run, in a subprocess on this interpreter, with ``awa`` resolved
# to the tree under test (MYPYPATH) and errors inside awa itself silenced.

SNIPPET_HEADER = """\
import dataclasses
from typing import Any

import awa


@dataclasses.dataclass
class SendEmail:
    to: str


@dataclasses.dataclass
class Other:
    note: str


client = awa.AsyncClient("postgresql://localhost/never-connected")
"""

MUST_FAIL: Final = {
    "handler_for_other_args": (
        """
@client.task(SendEmail)
async def send(job: awa.Job[Other]) -> None: ...
""",
        'has incompatible type "Callable[[Job[Other]], Coroutine[Any, Any, None]]"',
    ),
    "running_job_handler_for_other_args": (
        """
@client.task(SendEmail)
async def send(job: awa.RunningJob[Other]) -> None: ...
""",
        'has incompatible type "Callable[[RunningJob[Other]], Coroutine[Any, Any, None]]"',
    ),
    "sync_handler_for_other_args": (
        """
@client.task(SendEmail)
def send(job: awa.Job[Other]) -> None: ...
""",
        'has incompatible type "Callable[[Job[Other]], None]"',
    ),
    "insert_returns_the_job_of_its_args": (
        """
async def insert() -> None:
    job: awa.Job[Other] = await client.insert(SendEmail(to="a@b.c"))
""",
        'expression has type "Job[SendEmail]", variable has type "Job[Other]"',
    ),
    "inserted_args_have_their_own_attributes": (
        """
async def insert() -> str:
    return (await client.insert(SendEmail(to="a@b.c"))).args.note
""",
        '"SendEmail" has no attribute "note"',
    ),
    "insert_many_returns_jobs_of_its_args": (
        """
async def insert() -> None:
    jobs: list[awa.Job[Other]] = await client.insert_many([SendEmail(to="a@b.c")])
""",
        'expression has type "list[Job[SendEmail]]", variable has type "list[Job[Other]]"',
    ),
    "insert_many_copy_returns_jobs_of_its_args": (
        """
async def insert() -> None:
    jobs: list[awa.Job[Other]] = await client.insert_many_copy([SendEmail(to="a@b.c")])
""",
        'expression has type "list[Job[SendEmail]]", variable has type "list[Job[Other]]"',
    ),
    "get_job_returns_the_job_of_args_type": (
        """
async def read() -> None:
    job: awa.Job[Other] = await client.get_job(1, args_type=SendEmail)
""",
        'expression has type "Job[SendEmail]", variable has type "Job[Other]"',
    ),
}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict's error lines for each snippet of :data:`MUST_FAIL`, by name."""
    directory = tmp_path_factory.mktemp("typing")
    for name, (body, _expected) in MUST_FAIL.items():
        (directory / f"{name}.py").write_text(SNIPPET_HEADER + body, encoding="utf-8")
    (directory / "mypy.ini").write_text(MYPY_INI, encoding="utf-8")
    package_root = Path(awa.__file__).resolve().parents[1]
    env = {**os.environ}
    if package_root.name != "site-packages":  # a source tree: check it, not an installed copy
        env["MYPYPATH"] = str(package_root)
    process = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--config-file", str(directory / "mypy.ini"),
            "--cache-dir", str(directory / ".mypy_cache"), *(f"{name}.py" for name in MUST_FAIL),
        ],
        cwd=directory, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    errors: dict[str, list[str]] = {name: [] for name in MUST_FAIL}
    for line in process.stdout.splitlines():
        name, _, rest = line.partition(".py:")
        if name in errors and ": error: " in rest:
            errors[name].append(rest)
    assert process.returncode in (0, 1), process.stdout + process.stderr
    return errors


MYPY_INI = """\
[mypy]
strict = True
follow_imports = silent
"""


@pytest.mark.parametrize("name", sorted(MUST_FAIL))
def test_mypy_refuses(name: str, mypy_errors: dict[str, list[str]]) -> None:
    _body, expected = MUST_FAIL[name]
    assert any(expected in line for line in mypy_errors[name]), mypy_errors[name]
