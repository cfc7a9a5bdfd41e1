"""Bad inputs raise awa.ValidationError naming the field, before any SQL."""

from __future__ import annotations

import dataclasses
import datetime
import math
import sys
import uuid

import pydantic
import pytest

import awa

UTC = datetime.UTC


async def refused(client, conn, args=None, **options) -> awa.ValidationError:
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert({"ok": 1} if args is None else args, **{"kind": "k", **options})
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0
    return raised.value


@pytest.mark.parametrize("priority", [0, 5, -1, True, "1", 2.0])
async def test_priority_outside_1_to_4(client, conn, priority):
    assert (await refused(client, conn, priority=priority)).field == "priority"


@pytest.mark.parametrize("max_attempts", [0, 1001])
async def test_max_attempts_outside_1_to_1000(client, conn, max_attempts):
    assert (await refused(client, conn, max_attempts=max_attempts)).field == "max_attempts"


async def test_limits_at_their_edges_are_accepted(client):
    job = await client.insert(
        {},
        kind="k" * 200,
        queue="q" * 64,
        priority=4,
        max_attempts=1000,
        tags=[f"t{i}" for i in range(20)],
        run_at=datetime.datetime(9999, 12, 31, tzinfo=UTC),
    )
    assert job.max_attempts == 1000 and len(job.tags) == 20


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", ""),
        ("kind", "k" * 201),
        ("queue", ""),
        ("queue", "q" * 65),
        ("queue", "a b"),
        ("kind", "a\0b"),
    ],
)
async def test_bad_kinds_and_queue_names_are_refused(client, conn, field, value):
    assert (await refused(client, conn, **{field: value})).field == field


async def test_at_most_20_tags(client, conn):
    assert (await refused(client, conn, tags=[f"t{i}" for i in range(21)])).field == "tags"


async def test_nul_in_a_tag(client, conn):
    assert (await refused(client, conn, tags=["fine", "b\0d"])).field == "tags[1]"


async def test_nul_anywhere_in_args_names_the_path(client, conn):
    error = await refused(client, conn, args={"user": {"names": ["ok", "b\0d"]}})
    assert error.field == "args.user.names[1]"


async def test_nul_in_metadata(client, conn):
    assert (await refused(client, conn, metadata={"note": "\0"})).field == "metadata.note"


async def test_args_must_serialize_to_json(client, conn):
    assert (await refused(client, conn, args={"when": object()})).field == "args.when"
    assert (await refused(client, conn, args={"x": math.nan})).field == "args.x"
    assert (await refused(client, conn, args={1: "int key"})).field == "args"


async def test_args_must_be_an_object(client, conn):
    @dataclasses.dataclass
    class Holder:
        value: object

    assert (await refused(client, conn, args=Holder(value=b"raw"))).field == "args.value"
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert([1, 2], kind="k")  # type: ignore[arg-type]
    assert raised.value.field == "args"


async def test_run_at_must_be_aware_and_within_years_1_to_9999(client, conn):
    naive = datetime.datetime(2030, 1, 1)
    assert (await refused(client, conn, run_at=naive)).field == "run_at"
    late = datetime.datetime(
        9999, 12, 31, 23, tzinfo=datetime.timezone(-datetime.timedelta(hours=5))
    )
    assert (await refused(client, conn, run_at=late)).field == "run_at"
    assert (await refused(client, conn, run_at=datetime.timedelta(days=10**8))).field == "run_at"
    assert (await refused(client, conn, run_at="tomorrow")).field == "run_at"


async def test_metadata_must_be_an_object(client, conn):
    assert (await refused(client, conn, metadata=["x"])).field == "metadata"


async def test_validation_error_is_a_value_error_with_a_readable_message(client, conn):
    error = await refused(client, conn, priority=9)
    assert isinstance(error, ValueError)
    assert str(error) == "priority: must be between 1 and 4 (got 9)"


class Ratio(pydantic.BaseModel):
    ratio: float


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=repr)
async def test_a_model_holding_nan_or_an_infinity_is_refused_by_field(client, conn, number):
    assert (await refused(client, conn, args=Ratio(ratio=number))).field == "args.ratio"
    error = await refused(client, conn, metadata={"seen": [Ratio(ratio=number)]})
    assert error.field == "metadata.seen[0].ratio"
    for insert in (client.insert_many, client.insert_many_copy, client.enqueue_many_copy):
        with pytest.raises(awa.ValidationError) as raised:
            await insert([{"ok": 1}, Ratio(ratio=number)], kind="k")
        assert raised.value.field == "args.ratio"
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


@pytest.mark.parametrize("number", [math.nan, math.inf], ids=repr)
async def test_a_callback_payload_holding_nan_is_refused_by_field(client, number):
    callback = uuid.uuid4()
    for resolve in (client.complete_external, client.resume_external, client.resolve_callback):
        with pytest.raises(awa.ValidationError) as raised:
            await resolve(callback, {"result": Ratio(ratio=number)})
        assert raised.value.field == "payload.result.ratio"
        with pytest.raises(awa.ValidationError) as raised:
            await resolve(callback, {"plain": [number]})
        assert raised.value.field == "payload.plain[0]"


@pytest.fixture
def int_digit_limit():
    """Sets the interpreter's int/str conversion limit; restores it afterwards."""
    before = sys.get_int_max_str_digits()
    try:
        yield sys.set_int_max_str_digits
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.parametrize("interpreter_limit", [0, 4300])
async def test_integers_beyond_4300_digits_are_refused_by_field(
    client, conn, int_digit_limit, interpreter_limit
):
    int_digit_limit(interpreter_limit)
    for value in (10**4300, -(10**4300), 10**200_000):
        assert (await refused(client, conn, args={"n": [value]})).field == "args.n[0]"
        assert (await refused(client, conn, metadata={"n": value})).field == "metadata.n"


@pytest.mark.parametrize("interpreter_limit", [0, 640, 4300])
async def test_integers_of_4300_digits_are_stored_and_read_back(
    client, int_digit_limit, interpreter_limit
):
    int_digit_limit(interpreter_limit)
    largest = 10**4300 - 1
    job = await client.insert({"n": largest, "m": -largest}, kind="k", metadata={"n": largest})
    stored = await client.get_job(job.id, include_payload=True)
    assert stored.args == {"n": largest, "m": -largest}
    assert stored.metadata == {"n": largest}


@pytest.mark.parametrize("period", [math.nan, math.inf, -math.inf, 1e300, 10**30], ids=repr)
async def test_a_unique_period_must_be_a_finite_bounded_number_of_seconds(client, conn, period):
    error = await refused(client, conn, unique_opts={"by_period": period})
    assert error.field == "unique_opts.by_period"
    error = await refused(client, conn, unique_opts=awa.UniqueOpts(by_period=period))
    assert error.field == "unique_opts.by_period"


@pytest.mark.parametrize(
    "timeout", [10**400, -(10**400), 1.7e308], ids=["huge", "-huge", "1.7e308"]
)
async def test_a_timeout_far_out_of_range_is_refused_by_field(client, conn, timeout):
    assert (await refused(client, conn, timeout=timeout)).field == "timeout"
