"""awa._core.InsertRows: unique keys, and the limits on staged follow-ups.

A job inserted with ``unique_opts`` carries a 16-byte key computed in the
core. A handler's follow-ups go into a staging set, which bounds them per
attempt, closes when the handler returns, and reports every refusal as an
``awa.errors.StagingError``.
"""

from __future__ import annotations

import datetime
from typing import Any

import pydantic
import pytest

import awa
from awa import _core
from awa.errors import StagingError
from tests.unit.core_rows import add, column

FIRST_INSTANT_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
LAST_INSTANT_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
MINUTE_US = 60_000_000
ALL_STATES = 255


def job(**overrides: Any) -> dict[str, Any]:
    """The arguments of ``core_rows.add`` for a valid job, with overrides."""
    fields: dict[str, Any] = {
        "args": {"to": "a@b.c"},
        "kind": "send_email",
        "queue": "email",
        "priority": 2,
        "max_attempts": 25,
        "max_crashes": None,
        "run_at_us": None,
        "tags": None,
        "metadata": None,
    }
    fields.update(overrides)
    return fields


def key_of(
    by_args: bool = True,
    by_queue: bool = True,
    period_s: int | None = None,
    now_us: int = 0,
    **overrides: Any,
) -> bytes:
    """The unique key the core gives a job."""
    rows = _core.InsertRows()
    add(rows, **job(**overrides), unique=(by_args, by_queue, period_s, ALL_STATES), now_us=now_us)
    [key] = rows.unique_keys()
    assert key is not None
    return key


def staging_refusal(rows: _core.InsertRows | None = None, **overrides: Any) -> StagingError:
    """The StagingError that staging a job with ``overrides`` raises."""
    rows = rows if rows is not None else _core.InsertRows(staging=True)
    before = (len(rows), rows.staged_bytes)
    with pytest.raises(StagingError) as caught:
        add(rows, **job(**overrides))
    assert (len(rows), rows.staged_bytes) == before, "a refused follow-up must not be staged"
    return caught.value


def staged(count: int) -> _core.InsertRows:
    rows = _core.InsertRows(staging=True)
    for _ in range(count):
        add(rows, **job())
    return rows


# ── unique keys ─────────────────────────────────────────────────────────


def test_a_unique_key_is_16_bytes() -> None:
    assert len(key_of()) == 16


def test_the_same_job_gets_the_same_key() -> None:
    assert key_of() == key_of()


def test_args_that_differ_only_in_key_order_get_the_same_key() -> None:
    one = {"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": None}}
    two = {"a": {"x": None, "y": [1, {"p": 3, "q": 2}]}, "b": 1}
    assert key_of(args=one) == key_of(args=two)


class Shipment(pydantic.BaseModel):
    user_id: int
    ratio: float
    big: float
    shipped_at: datetime.datetime
    note: str | None = None


#: Keys as awa 0.1 computed them (kind ``send_email``, queue ``email``, hourly
#: period at 2026-11-30T16:33:51Z). The database holds these keys, so a new
#: version that computed others would let duplicates of waiting jobs in.
STABLE_KEYS = {
    "plain": ({"to": "a@b.c", "subject": "hi"}, "e98f7a2039670d80fdc22f8160ba7fd9"),
    "reordered": ({"subject": "hi", "to": "a@b.c"}, "e98f7a2039670d80fdc22f8160ba7fd9"),
    "numbers": (
        {
            "i": 7,
            "neg": -12,
            "big": 2**64 + 1,
            "huge": -(10**40),
            "f": 1.5,
            "tiny": 5e-324,
            "large": 1e300,
            "whole": 1e16,
            "negzero": -0.0,
            "third": 1 / 3,
        },
        "97fa1ca47344021c9e61f5faa4b868e8",
    ),
    "text": (
        {"é": "ü 日本 😀", "esc": 'q"b\\s/ t\tn\nr\r c\x01 \x1f', "A": 1, "a": 2, "": ""},
        "0819ee68141e0f9386843916ea7d857c",
    ),
    "nested": (
        {"z": [{"y": [True, None, False]}, [], {}], "a": {"d": {"c": [1, [2, [3.25]]]}}},
        "37e51b05d6c0847b1143eb89a4eb23de",
    ),
    "pydantic": (
        {
            "order": Shipment(
                user_id=123456,
                ratio=0.1,
                big=1e300,
                shipped_at=datetime.datetime(2026, 11, 30, 16, 33, tzinfo=datetime.UTC),
            )
        },
        "15812edc44a57b7480228e62888f9b49",
    ),
}


@pytest.mark.parametrize("name", STABLE_KEYS)
def test_unique_keys_are_the_same_as_in_earlier_versions(name: str) -> None:
    args, key = STABLE_KEYS[name]
    now_us = 1_796_056_431_000_000
    assert key_of(args=args, period_s=3600, now_us=now_us).hex() == key


def test_keys_differ_by_kind() -> None:
    assert key_of(kind="a") != key_of(kind="b")


def test_keys_differ_by_queue_only_when_by_queue() -> None:
    assert key_of(queue="a") != key_of(queue="b")
    assert key_of(by_queue=False, queue="a") == key_of(by_queue=False, queue="b")


def test_keys_differ_by_args_only_when_by_args() -> None:
    assert key_of(args={"n": 1}) != key_of(args={"n": 2})
    assert key_of(by_args=False, args={"n": 1}) == key_of(by_args=False, args={"n": 2})


def test_array_order_in_args_matters() -> None:
    assert key_of(args={"n": [1, 2]}) != key_of(args={"n": [2, 1]})


def test_keys_differ_by_period_and_agree_within_one() -> None:
    assert key_of(period_s=60, now_us=0) == key_of(period_s=60, now_us=MINUTE_US - 1)
    assert key_of(period_s=60, now_us=MINUTE_US - 1) != key_of(period_s=60, now_us=MINUTE_US)
    assert key_of(period_s=60, now_us=-1) != key_of(period_s=60, now_us=0)
    assert key_of(period_s=60, now_us=0) != key_of()


def test_a_key_ignores_everything_but_kind_queue_args_and_period() -> None:
    assert key_of() == key_of(priority=4, max_attempts=1, tags=["x"], metadata={"m": 1})


def test_rows_without_unique_options_have_no_key() -> None:
    rows = _core.InsertRows()
    add(rows, **job())
    assert (rows.unique_keys(), column(rows, "unique_states")) == ([None], [None])
    assert not rows.has_unique()


def test_has_unique_is_true_when_any_row_has_a_key() -> None:
    rows = _core.InsertRows()
    add(rows, **job())
    add(rows, **job(), unique=(True, True, None, 3))
    assert rows.has_unique()
    assert column(rows, "unique_states") == [None, 3]


@pytest.mark.parametrize("states", [1, 255])
def test_states_masks_from_1_to_255_are_accepted(states: int) -> None:
    rows = _core.InsertRows()
    add(rows, **job(), unique=(False, False, None, states))
    assert column(rows, "unique_states") == [states]


@pytest.mark.parametrize("states", [0, 256, -1])
def test_states_masks_outside_1_to_255_are_refused(states: int) -> None:
    rows = _core.InsertRows()
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(), unique=(False, False, None, states))
    assert caught.value.field == "unique_opts.states"
    assert len(rows) == 0


@pytest.mark.parametrize("period_s", [0, -60])
def test_a_period_under_one_second_is_refused(period_s: int) -> None:
    rows = _core.InsertRows()
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(), unique=(False, False, period_s, 1), now_us=0)
    assert caught.value.field == "unique_opts.by_period"


def test_unique_options_must_be_a_tuple_of_four() -> None:
    rows = _core.InsertRows()
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(), unique=(True, True))  # type: ignore[arg-type]
    assert caught.value.field == "unique_opts"


def test_a_unique_error_in_a_batch_names_the_jobs_position() -> None:
    rows = _core.InsertRows()
    add(rows, **job(), batch=True)
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(), batch=True, unique=(False, False, None, 0))
    assert str(caught.value).startswith("jobs[1].unique_opts.states: ")


# ── staging limits ──────────────────────────────────────────────────────


def test_the_staging_limits_are_exported() -> None:
    assert _core.MAX_STAGED_FOLLOW_UPS == 16
    assert _core.MAX_STAGED_BYTES == 65_536


def test_an_attempt_may_stage_16_follow_ups() -> None:
    assert len(staged(_core.MAX_STAGED_FOLLOW_UPS)) == 16


def test_the_17th_follow_up_is_refused() -> None:
    error = staging_refusal(staged(_core.MAX_STAGED_FOLLOW_UPS))
    assert error.field == "follow_ups"
    assert "at most 16 follow-ups" in str(error)
    assert "17" in str(error)


def test_staged_bytes_count_kind_queue_args_metadata_and_tags() -> None:
    rows = _core.InsertRows(staging=True)
    add(rows, **job(kind="é", queue="q", args={}, tags=["ab", "日"], metadata={"a": 1}))
    assert rows.staged_bytes == 2 + 1 + 2 + 7 + 2 + 3


def test_follow_ups_past_the_byte_limit_are_refused() -> None:
    rows = _core.InsertRows(staging=True)
    overhead = len("send_email") + len("email") + len('{"s":""}')
    add(rows, **job(args={"s": "x" * (_core.MAX_STAGED_BYTES - 100 - overhead)}))
    assert rows.staged_bytes == _core.MAX_STAGED_BYTES - 100
    error = staging_refusal(rows, args={"s": "x" * (101 - overhead)})
    assert error.field == "follow_ups"
    assert f"at most {_core.MAX_STAGED_BYTES} bytes" in str(error)
    assert f"would make {_core.MAX_STAGED_BYTES + 1}" in str(error)
    # The refused follow-up used no budget: one that fits is still staged.
    add(rows, **job(args={"s": "x" * (100 - overhead)}))
    assert rows.staged_bytes == _core.MAX_STAGED_BYTES


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"priority": 0}, "priority"),
        ({"priority": 5}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"kind": "k" * 201}, "kind"),
        ({"queue": "q" * 201}, "queue"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"args": {"a": "\0"}}, "args.a"),
        ({"kind": "a\0b"}, "kind"),
        ({"tags": ["ok", "a\0b"]}, "tags[1]"),
        ({"metadata": {"m": ["\0"]}}, "metadata.m[0]"),
        ({"run_at_us": FIRST_INSTANT_US - 1}, "run_at"),
        ({"run_at_us": LAST_INSTANT_US + 1}, "run_at"),
    ],
)
def test_every_insert_limit_is_a_staging_error_when_staging(
    overrides: dict[str, Any], field: str
) -> None:
    error = staging_refusal(**overrides)
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    assert not isinstance(error, awa.ValidationError)


@pytest.mark.parametrize("number", [float("nan"), float("inf")], ids=repr)
def test_a_follow_up_whose_model_holds_nan_is_a_staging_error_naming_the_field(
    number: float,
) -> None:
    class Ratio(pydantic.BaseModel):
        ratio: float

    assert staging_refusal(args=Ratio(ratio=number)).field == "args.ratio"
    assert staging_refusal(metadata={"r": [Ratio(ratio=number)]}).field == "metadata.r[0].ratio"


def test_a_bad_unique_option_is_a_staging_error_when_staging() -> None:
    rows = _core.InsertRows(staging=True)
    with pytest.raises(StagingError) as caught:
        add(rows, **job(), unique=(False, False, None, 0))
    assert caught.value.field == "unique_opts.states"


def test_staging_errors_have_no_batch_prefix() -> None:
    rows = staged(2)
    with pytest.raises(StagingError) as caught:
        add(rows, **job(priority=9), batch=True)
    assert str(caught.value) == "priority: must be between 1 and 4 (got 9)"


def test_staged_follow_ups_may_be_unique() -> None:
    rows = _core.InsertRows(staging=True)
    add(rows, **job(), unique=(True, True, 60, 3), now_us=0)
    assert rows.has_unique()


# ── sealing ─────────────────────────────────────────────────────────────


def test_a_sealed_staging_set_refuses_follow_ups() -> None:
    rows = staged(1)
    assert not rows.sealed
    rows.seal()
    assert rows.sealed
    error = staging_refusal(rows)
    assert error.field is None
    assert str(error) == (
        "staging is closed: the handler has already returned "
        "(stage follow-ups before returning, or await the task that stages them)"
    )


def test_sealing_is_reported_before_other_errors() -> None:
    rows = _core.InsertRows(staging=True)
    rows.seal()
    assert staging_refusal(rows, priority=0).field is None


def test_only_a_staging_set_can_be_sealed() -> None:
    rows = _core.InsertRows()
    with pytest.raises(ValueError, match="staging set"):
        rows.seal()
    assert not rows.sealed
    assert rows.staged_bytes == 0


# ── extend and rows ─────────────────────────────────────────────────────


def test_extend_appends_every_row_with_its_unique_key() -> None:
    stage = _core.InsertRows(staging=True)
    add(stage, **job(kind="a"), unique=(True, False, None, 7))
    add(stage, **job(kind="b"))
    stage.seal()
    batch = _core.InsertRows()
    add(batch, **job(kind="first"))
    batch.extend(stage)
    assert column(batch, "kind") == ["first", "a", "b"]
    assert batch.unique_keys()[1] == stage.unique_keys()[0]
    assert column(batch, "unique_states") == [None, 7, None]
    assert len(stage) == 2


def test_a_set_may_extend_itself() -> None:
    rows = _core.InsertRows()
    add(rows, **job(kind="a"))
    rows.extend(rows)
    assert column(rows, "kind") == ["a", "a"]


def test_a_staging_set_cannot_be_extended() -> None:
    with pytest.raises(ValueError, match="staging set"):
        staged(1).extend(staged(1))


def test_rows_show_each_row_as_a_dict() -> None:
    rows = _core.InsertRows(staging=True)
    add(rows, **job())
    add(
        rows,
        **job(
            args={"n": 1.0},
            kind="resize",
            queue="images",
            priority=1,
            max_attempts=3,
            max_crashes=0,
            run_at_us=5,
            tags=["a", 'say "hi"'],
            metadata={"trace": "t1"},
        ),
        unique=(True, True, None, 3),
        schema_version=4,
        rate_class="partner-api",
        partition_key="tenant 7",
    )
    plain, full = rows.rows()
    assert plain == {
        "kind": "send_email",
        "queue": "email",
        "args": '{"to":"a@b.c"}',
        "priority": 2,
        "max_attempts": 25,
        "max_crashes": None,
        "run_at_us": None,
        "tags": None,
        "metadata": None,
        "unique_key": None,
        "unique_states": None,
        "timeout_ms": None,
        "deadline_us": None,
        "schema_version": None,
        "rate_class": None,
        "partition_key": None,
    }
    assert full == {
        "kind": "resize",
        "queue": "images",
        "args": '{"n":1.0}',
        "priority": 1,
        "max_attempts": 3,
        "max_crashes": 0,
        "run_at_us": 5,
        "tags": ["a", 'say "hi"'],
        "metadata": '{"trace":"t1"}',
        "unique_key": rows.unique_keys()[1],
        "unique_states": 3,
        "timeout_ms": None,
        "deadline_us": None,
        "schema_version": 4,
        "rate_class": "partner-api",
        "partition_key": "tenant 7",
    }
