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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, assert_type

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


def test_a_handler_may_be_sync_take_dicts_or_a_wider_job_type() -> None:
    client = awa.AsyncClient("postgresql://localhost/never-connected")

    @client.task(ResizeImage)
    def resize(job: awa.Job[ResizeImage]) -> None:
        assert_type(job.args, ResizeImage)

    @client.task(dict, kind="raw")
    async def raw(job: awa.Job[dict[str, Any]]) -> None:
        assert_type(job.args, dict[str, Any])

    @client.task(ResizeImage, kind="logged")
    async def logged(job: awa.Job[object]) -> None:  # a Job is read-only, so covariant
        assert_type(job.args, object)

    client.task(ResizeImage, kind="by_lambda")(lambda job: assert_type(job.args, ResizeImage))

    assert_type(resize, Callable[[awa.RunningJob[ResizeImage]], None])
    assert_type(raw, Callable[[awa.RunningJob[dict[Any, Any]]], Coroutine[Any, Any, None]])
    assert [task.args_type for task in client.tasks.values()] == [
        ResizeImage,
        dict,
        ResizeImage,
        ResizeImage,
    ]
    assert client.tasks["logged"].handler is logged


async def inserts_and_reads_are_typed_by_their_args(client: awa.AsyncClient) -> None:
    """Never run (it needs a database; tests/integration runs the calls):
    mypy checks what the inserts and ``get_job`` return."""
    job = await client.insert(ResizeImage(image_id=1, width=10), queue="images")
    assert_type(job, awa.Job[ResizeImage])
    assert_type(job.args.width, int)
    raw = await client.insert({"image_id": 1, "path": "/a.png"}, kind="raw")
    assert_type(raw, awa.Job[dict[str, Any]])
    assert_type(raw.args["path"].upper(), Any)
    dicts = await client.insert_many([{"image_id": 1}, {"path": "/b.png"}], kind="raw")
    assert_type(dicts, list[awa.Job[dict[str, Any]]])
    copied = await client.insert_many_copy([{"image_id": 1}, {"path": "/b.png"}], kind="raw")
    assert_type(copied, list[awa.Job[dict[str, Any]]])
    batch = [ResizeImage(image_id=n, width=10) for n in range(3)]
    assert_type(await client.insert_many(batch), list[awa.Job[ResizeImage]])
    assert_type(await client.insert_many_copy(batch), list[awa.Job[ResizeImage]])
    assert_type(await client.enqueue_many_copy(batch), int)
    assert_type(await client.get_job(job.id), awa.Job[Any])
    read = await client.get_job(job.id, args_type=ResizeImage, include_payload=True)
    assert_type(read, awa.Job[ResizeImage])
    assert_type(await client.get_job(job.id, args_type=dict), awa.Job[dict[Any, Any]])
    wider: awa.Job[object] = read
    assert wider is read


# ── what mypy must refuse, and this module under mypy ────────────────────
#
# Each snippet of MUST_FAIL is a user's module that mypy --strict must reject
# with the given message; those of MUST_PASS it must accept. They and this
# module are checked in one mypy run, in a subprocess on this interpreter,
# with ``awa`` resolved to the tree under test (MYPYPATH) and errors inside
# awa itself silenced, so the ``assert_type`` lines above are proved here too.

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
    job = await client.insert(SendEmail(to="a@b.c"))
    other: awa.Job[Other] = job
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
    jobs = await client.insert_many([SendEmail(to="a@b.c")])
    other: list[awa.Job[Other]] = jobs
""",
        'expression has type "list[Job[SendEmail]]", variable has type "list[Job[Other]]"',
    ),
    "insert_many_copy_returns_jobs_of_its_args": (
        """
async def insert() -> None:
    jobs = await client.insert_many_copy([SendEmail(to="a@b.c")])
    other: list[awa.Job[Other]] = jobs
""",
        'expression has type "list[Job[SendEmail]]", variable has type "list[Job[Other]]"',
    ),
    "get_job_returns_the_job_of_args_type": (
        """
async def read() -> None:
    job = await client.get_job(1, args_type=SendEmail)
    other: awa.Job[Other] = job
""",
        'expression has type "Job[SendEmail]", variable has type "Job[Other]"',
    ),
}

MUST_PASS: Final = {
    # Unannotated handlers, in a module that allows them.
    "unannotated_handlers": """
@client.task(SendEmail)
async def send(job):
    return job.args.to


@client.task(dict, kind="raw")
def raw(job):
    return job.args
""",
}

MYPY_INI = """\
[mypy]
strict = True
follow_imports = silent
"""


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict's error lines (``<line>: error: …``) by module name: each
    snippet's and this module's (``test_typing``)."""
    directory = tmp_path_factory.mktemp("typing")
    snippets = {name: body for name, (body, _expected) in MUST_FAIL.items()}
    snippets.update(
        {name: "# mypy: allow-untyped-defs\n" + body for name, body in MUST_PASS.items()}
    )
    for name, body in snippets.items():
        (directory / f"{name}.py").write_text(SNIPPET_HEADER + body, encoding="utf-8")
    (directory / "mypy.ini").write_text(MYPY_INI, encoding="utf-8")
    package_root = Path(awa.__file__).resolve().parents[1]
    env = dict(os.environ)
    if package_root.name != "site-packages":  # a source tree: check it, not an installed copy
        env["MYPYPATH"] = str(package_root)
    process = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--config-file", str(directory / "mypy.ini"),
            "--cache-dir", str(directory / ".mypy_cache"), __file__,
            *(f"{name}.py" for name in snippets),
        ],
        cwd=directory, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert process.returncode in (0, 1), process.stdout + process.stderr
    errors: dict[str, list[str]] = {name: [] for name in [*snippets, "test_typing"]}
    for line in process.stdout.splitlines():
        path, _, rest = line.partition(".py:")
        name = Path(path).name
        if ": error: " in rest:
            errors.setdefault(name, []).append(rest)
    return errors


def test_this_module_passes_strict_mypy(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["test_typing"] == []


@pytest.mark.parametrize("name", sorted(MUST_PASS))
def test_mypy_accepts(name: str, mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors[name] == []


@pytest.mark.parametrize("name", sorted(MUST_FAIL))
def test_mypy_refuses(name: str, mypy_errors: dict[str, list[str]]) -> None:
    _body, expected = MUST_FAIL[name]
    assert any(expected in line for line in mypy_errors[name]), mypy_errors[name]
