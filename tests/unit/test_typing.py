"""The public API's types, as a user's code sees them.

pytest runs this file; mypy (strict) checks it, so ``assert_type`` lines
fail type checking when a public signature drifts. Nothing here needs a
database.
"""

from __future__ import annotations

import dataclasses
from typing import assert_type

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
