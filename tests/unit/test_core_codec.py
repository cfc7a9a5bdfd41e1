"""awa._core's JSON codec: Python values ⇄ compact JSON text (rust/python/codec.rs).

Refusals name the path to the bad value, so a user can find it in a large
payload: ``args.items[2].name``.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest

import awa
from awa import _core

DEEPEST_ENCODABLE = 256
DEEPEST_DECODABLE = 512
MAX_INT_DIGITS = 4300


def refusal(value: object, field: str = "args") -> awa.ValidationError:
    """The ValidationError that encoding ``value`` raises."""
    with pytest.raises(awa.ValidationError) as caught:
        _core.encode_json(value, field)
    return caught.value


def round_trip(value: object) -> Any:
    return _core.decode_json(_core.encode_json(value))


def nested_lists(depth: int) -> list[Any]:
    """``depth`` lists, each inside the previous one."""
    outer: list[Any] = []
    current = outer
    for _ in range(depth - 1):
        inner: list[Any] = []
        current.append(inner)
        current = inner
    return outer


# ── round trips ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"to": "a@b.c", "subject": "hi", "retries": 3, "urgent": False, "cc": None},
        ["text", 1, 2.5, True, None],
        "",
        "é ü 日本 😀",
        'quotes " backslash \\ slash /',
        "tab\t newline\n return\r",
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**63,
        -(2**200),
        0.1,
        -2.5e-300,
        1e300,
        True,
        False,
        None,
        {"a": {"b": [{"c": [1, [2, [3]]]}]}},
    ],
    ids=repr,
)
def test_json_values_round_trip_unchanged(value: object) -> None:
    decoded = round_trip(value)
    assert decoded == value
    assert type(decoded) is type(value)


def test_encoding_is_compact() -> None:
    assert _core.encode_json({"a": [1, 2], "b": {"c": None}}) == '{"a":[1,2],"b":{"c":null}}'


def test_dict_key_order_is_kept() -> None:
    assert _core.encode_json({"z": 1, "a": 2, "m": 3}) == '{"z":1,"a":2,"m":3}'


def test_a_whole_float_stays_a_float() -> None:
    assert _core.encode_json({"ratio": 1.0}) == '{"ratio":1.0}'
    decoded = round_trip(1.0)
    assert decoded == 1.0
    assert isinstance(decoded, float)


def test_large_and_small_floats_keep_their_type() -> None:
    for value in (1e16, 1e-7, 5e-324, -0.0):
        decoded = round_trip(value)
        assert isinstance(decoded, float)
        assert decoded == value


def test_integers_beyond_64_bits_are_written_exactly() -> None:
    huge = 2**100 + 7
    assert _core.encode_json({"n": huge}) == f'{{"n":{huge}}}'
    assert round_trip(-huge) == -huge


def test_bools_stay_bools_not_integers() -> None:
    assert _core.encode_json([True, False]) == "[true,false]"
    assert round_trip([True])[0] is True


def test_tuples_become_lists() -> None:
    assert _core.encode_json({"point": (1, 2)}) == '{"point":[1,2]}'
    assert round_trip((1, (2, 3))) == [1, [2, 3]]


def test_control_characters_are_escaped() -> None:
    text = '\x01\x1f"\\\n'
    assert _core.encode_json(text) == r'"\u0001\u001f\"\\\n"'
    assert round_trip(text) == text


def test_subclasses_of_builtins_encode_as_their_base() -> None:
    class Name(str):
        pass

    class Count(int):
        pass

    class Ratio(float):
        pass

    assert _core.encode_json([Name("x"), Count(3), Ratio(0.5)]) == '["x",3,0.5]'


# ── richer types ────────────────────────────────────────────────────────


class SendEmail(pydantic.BaseModel):
    to: str
    subject: str
    attempts: int = 1


class CamelCase(pydantic.BaseModel):
    user_id: int = pydantic.Field(alias="userId")
    display_name: str = pydantic.Field(serialization_alias="displayName")


@dataclasses.dataclass
class Item:
    name: str
    quantity: int = 1


@dataclasses.dataclass
class Order:
    order_id: int
    items: list[Item]
    placed_on: datetime.date


class Colour(enum.Enum):
    RED = "red"
    GREEN = 2


class Level(enum.IntEnum):
    HIGH = 3


class Mode(enum.StrEnum):
    FAST = "fast"


def test_pydantic_models_encode_through_their_own_serializer() -> None:
    model = SendEmail(to="a@b.c", subject="hi")
    assert _core.encode_json(model) == '{"to":"a@b.c","subject":"hi","attempts":1}'


def test_pydantic_aliases_are_used_when_encoding() -> None:
    model = CamelCase(userId=7, display_name="Ann")
    assert _core.encode_json(model) == '{"userId":7,"displayName":"Ann"}'


def test_pydantic_models_read_back_through_model_validate_json() -> None:
    model = CamelCase(userId=7, display_name="Ann")
    plain = SendEmail(to="a@b.c", subject="hi", attempts=3)
    assert SendEmail.model_validate_json(_core.encode_json(plain)) == plain
    assert _core.decode_json(_core.encode_json(model))["userId"] == 7


def test_pydantic_models_nest_inside_plain_values() -> None:
    encoded = _core.encode_json({"emails": [SendEmail(to="x@y.z", subject="s")]})
    assert _core.decode_json(encoded) == {
        "emails": [{"to": "x@y.z", "subject": "s", "attempts": 1}]
    }


def test_dataclasses_encode_as_objects_in_field_order() -> None:
    order = Order(
        order_id=9, items=[Item("pen"), Item("ink", 2)], placed_on=datetime.date(2026, 1, 2)
    )
    assert _core.encode_json(order) == (
        '{"order_id":9,"items":[{"name":"pen","quantity":1},{"name":"ink","quantity":2}],'
        '"placed_on":"2026-01-02"}'
    )


def test_dates_and_times_encode_as_iso_8601() -> None:
    aware = datetime.datetime(2026, 11, 30, 16, 33, 51, 123456, tzinfo=datetime.UTC)
    naive = datetime.datetime(2026, 11, 30, 16, 33)
    assert round_trip([aware, naive, datetime.date(2026, 2, 28), datetime.time(9, 5, 1)]) == [
        "2026-11-30T16:33:51.123456+00:00",
        "2026-11-30T16:33:00",
        "2026-02-28",
        "09:05:01",
    ]


def test_uuids_and_decimals_encode_as_strings() -> None:
    job_uuid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert _core.encode_json({"id": job_uuid, "price": decimal.Decimal("10.10")}) == (
        '{"id":"12345678-1234-5678-1234-567812345678","price":"10.10"}'
    )


def test_enums_encode_as_their_values() -> None:
    assert _core.encode_json([Colour.RED, Colour.GREEN, Level.HIGH, Mode.FAST]) == (
        '["red",2,3,"fast"]'
    )


def test_nested_mixture_of_types_encodes() -> None:
    value = {
        "order": Order(order_id=1, items=[Item("a")], placed_on=datetime.date(2026, 3, 4)),
        "email": SendEmail(to="t@u.v", subject="s"),
        "tags": (Colour.RED, uuid.UUID(int=1)),
    }
    assert round_trip(value) == {
        "order": {
            "order_id": 1,
            "items": [{"name": "a", "quantity": 1}],
            "placed_on": "2026-03-04",
        },
        "email": {"to": "t@u.v", "subject": "s", "attempts": 1},
        "tags": ["red", "00000000-0000-0000-0000-000000000001"],
    }


# ── refusals name the path ──────────────────────────────────────────────


def test_nul_in_a_nested_value_names_the_path() -> None:
    args = {"items": [{"name": "a"}, {"name": "b"}, {"name": "c\0"}]}
    error = refusal(args)
    assert error.field == "args.items[2].name"
    assert str(error) == "args.items[2].name: must not contain NUL characters"


def test_nul_in_nested_key_names_the_path() -> None:
    error = refusal({"items": [{"na\0me": "a"}]})
    assert error.field is not None
    assert error.field.startswith("args.items[0].na")
    assert "key must not contain NUL" in str(error)


def test_nul_inside_a_pydantic_model_names_the_path() -> None:
    error = refusal({"emails": [SendEmail(to="a\0", subject="s")]})
    assert error.field == "args.emails[0].to"


def test_nul_inside_a_dataclass_names_the_path() -> None:
    order = Order(
        order_id=1, items=[Item("ok"), Item("b\0ad")], placed_on=datetime.date(2026, 1, 1)
    )
    assert refusal(order).field == "args.items[1].name"


def test_the_field_argument_names_the_root() -> None:
    assert refusal({"note": "\0"}, field="metadata").field == "metadata.note"


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_nan_and_infinities_are_refused(number: float) -> None:
    error = refusal({"scores": [1.0, number]})
    assert error.field == "args.scores[1]"
    assert "NaN and infinities are not numbers in JSON" in str(error)


def test_nan_written_by_a_pydantic_model_is_refused() -> None:
    class Lenient(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(ser_json_inf_nan="constants")
        score: float

    error = refusal({"result": Lenient(score=float("nan"))})
    assert error.field == "args.result"
    assert "NaN" in str(error)


class Ratio(pydantic.BaseModel):
    ratio: float
    note: str | None = None


class Scores(pydantic.BaseModel):
    scores: list[float]
    inner: Ratio | None = None


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_a_pydantic_model_holding_nan_or_an_infinity_is_refused_by_field(number: float) -> None:
    # pydantic writes these as null by default, which would fail every attempt.
    error = refusal(Ratio(ratio=number))
    assert error.field == "args.ratio"
    assert "NaN and infinities are not numbers in JSON" in str(error)


def test_nan_deep_inside_pydantic_models_names_the_path() -> None:
    nested = Scores(scores=[1.0], inner=Ratio(ratio=float("nan")))
    assert refusal({"runs": [nested]}, field="metadata").field == "metadata.runs[0].inner.ratio"
    assert refusal(Scores(scores=[0.5, float("inf")])).field == "args.scores[1]"


def test_a_model_whose_serializer_writes_nan_as_a_string_is_stored_as_it_says() -> None:
    class AsText(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(ser_json_inf_nan="strings")
        ratio: float

    assert _core.encode_json(AsText(ratio=float("nan"))) == '{"ratio":"NaN"}'


def test_none_in_a_pydantic_model_is_still_null() -> None:
    assert _core.encode_json(Ratio(ratio=0.5)) == '{"ratio":0.5,"note":null}'


@pytest.fixture
def int_digit_limit() -> Iterator[Callable[[int], None]]:
    """Sets the interpreter's int/str conversion limit; restores it afterwards."""
    before = sys.get_int_max_str_digits()
    try:
        yield sys.set_int_max_str_digits
    finally:
        sys.set_int_max_str_digits(before)


LARGEST = 10**MAX_INT_DIGITS - 1  # 4300 nines


@pytest.mark.parametrize("interpreter_limit", [0, 640, 4300])
def test_integers_of_up_to_4300_digits_round_trip_whatever_the_interpreter_limit(
    int_digit_limit: Callable[[int], None], interpreter_limit: int
) -> None:
    int_digit_limit(interpreter_limit)
    for value in (LARGEST, -LARGEST, 2**64, -(2**63) - 1):
        assert round_trip({"n": value}) == {"n": value}


@pytest.mark.parametrize("interpreter_limit", [0, 640, 4300])
def test_integers_beyond_4300_digits_are_refused_by_field_whatever_the_interpreter_limit(
    int_digit_limit: Callable[[int], None], interpreter_limit: int
) -> None:
    int_digit_limit(interpreter_limit)
    for value in (LARGEST + 1, -LARGEST - 1, 10**200_000):
        error = refusal({"outer": [value]})
        assert error.field == "args.outer[0]"
        assert "at most 4300 digits" in str(error)


def test_an_oversized_integer_written_by_pydantic_is_refused_by_field(
    int_digit_limit: Callable[[int], None],
) -> None:
    class Count(pydantic.BaseModel):
        n: int

    int_digit_limit(0)  # or pydantic could not write it at all
    assert refusal({"count": Count(n=10**5000)}).field == "args.count.n"
    assert round_trip(Count(n=LARGEST)) == {"n": LARGEST}


def test_non_string_dict_keys_are_refused_at_the_dict() -> None:
    error = refusal({"counts": {1: "one"}})
    assert error.field == "args.counts"
    assert "has a key of type int" in str(error)


def test_bytes_are_refused_with_a_hint() -> None:
    error = refusal({"blob": b"\x00\x01"})
    assert error.field == "args.blob"
    assert "base64" in str(error)


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, frozenset(), datetime.timedelta(seconds=1), SendEmail, complex(1, 2)],
    ids=lambda value: type(value).__name__,
)
def test_unknown_objects_are_refused_by_type_name(value: object) -> None:
    error = refusal({"list": [value]})
    assert error.field == "args.list[0]"
    assert f"a value of type {type(value).__name__} cannot be stored as JSON" in str(error)


def test_a_lone_surrogate_in_a_value_is_refused() -> None:
    error = refusal({"text": "broken \ud800"})
    assert error.field == "args.text"
    assert "lone surrogate" in str(error)


def test_a_lone_surrogate_in_a_key_is_refused_at_the_dict() -> None:
    error = refusal({"outer": {"\udc00": 1}})
    assert error.field == "args.outer"
    assert "lone surrogate" in str(error)


def test_a_self_referencing_list_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    error = refusal({"loop": loop})
    assert error.field is not None
    assert error.field.startswith("args.loop[0][0]")
    assert "refers to itself" in str(error)


def test_a_self_referencing_dict_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert "refers to itself" in str(refusal(loop))


def test_nesting_is_allowed_up_to_the_limit() -> None:
    assert _core.encode_json(nested_lists(DEEPEST_ENCODABLE)).startswith("[[[")
    error = refusal(nested_lists(DEEPEST_ENCODABLE + 10))
    assert f"nested more than {DEEPEST_ENCODABLE} levels deep" in str(error)


def test_a_failing_pydantic_serializer_becomes_a_validation_error() -> None:
    class Secret(pydantic.BaseModel):
        value: int

        @pydantic.field_serializer("value")
        def hide(self, value: int) -> int:
            raise ValueError("not serializable")

    error = refusal({"secret": Secret(value=1)})
    assert error.field == "args.secret"
    assert "could not be serialized by pydantic" in str(error)


def test_a_refused_value_is_a_value_error_too() -> None:
    with pytest.raises(ValueError):
        _core.encode_json({"x": float("nan")})


# ── decoding ────────────────────────────────────────────────────────────


def test_decoding_builds_plain_python_values() -> None:
    text = ' { "a" : [ 1 , 2.0 , "three" , true , false , null ] , "b" : {} } '
    assert _core.decode_json(text) == {"a": [1, 2.0, "three", True, False, None], "b": {}}


def test_numbers_with_an_exponent_decode_as_floats() -> None:
    decoded = _core.decode_json("[1E2, 1e-2, -0.5]")
    assert decoded == [100.0, 0.01, -0.5]
    assert all(isinstance(number, float) for number in decoded)


def test_integers_decode_exactly_at_any_size() -> None:
    assert _core.decode_json("9223372036854775807") == 2**63 - 1
    assert _core.decode_json("-9223372036854775809") == -(2**63) - 1
    assert _core.decode_json("123456789012345678901234567890") == 123456789012345678901234567890


def test_unicode_escapes_decode_including_surrogate_pairs() -> None:
    assert _core.decode_json(r'"\u00e9 \ud83d\ude00"') == "é 😀"


def test_a_repeated_key_keeps_its_last_value() -> None:
    assert _core.decode_json('{"a": 1, "a": 2}') == {"a": 2}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", "0: EOF while parsing a value"),
        ('{"a":', "5: EOF while parsing a value"),
        ("[1] x", "4: trailing characters"),
        ("[1,]", "3: trailing comma"),
        ("'a'", "0: expected value"),
        ("NaN", "0: expected value"),
        ("tru", "3: EOF while parsing a value"),
        ("[1, 01]", "5: invalid number"),
        ('"\\u+041"', "3: invalid escape"),
    ],
)
def test_invalid_json_names_the_byte_offset_and_the_reason(text: str, where: str) -> None:
    with pytest.raises(ValueError) as raised:
        _core.decode_json(text)
    assert str(raised.value) == f"invalid JSON at byte {where}"


def test_an_integer_beyond_4300_digits_is_invalid_json() -> None:
    with pytest.raises(ValueError, match=r"^invalid JSON at byte .*more than 4300 digits"):
        _core.decode_json("[" + "7" * (MAX_INT_DIGITS + 1) + "]")
    assert _core.MAX_INT_DIGITS == MAX_INT_DIGITS


@pytest.mark.parametrize(
    "text",
    [
        "01",
        "-01",
        "00",
        "[-00]",
        '"\\u+041"',
        '"\\u-041"',
        '"\\u 041"',
        '"\\u00G1"',
        '"\\x41"',
        '"\\a"',
        "+1",
        ".5",
        "1.",
        "1.e5",
        "1e",
        "1e+",
        "0x10",
        "-",
        "Infinity",
        "-Infinity",
        "[1,]",
        '{"a": 1,}',
        "[,1]",
        "{a: 1}",
        '{"a" 1}',
        "[1 2]",
        '"tab\tinside"',
        '"line\ninside"',
        "\u00a01",
        "\x0c1",
        "\ufeff{}",
        '"\\udc00"',
        '"\\ud800\\u0041"',
        "nul",
        "[true false]",
    ],
    ids=repr,
)
def test_the_reader_refuses_what_rfc_8259_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid JSON at byte"):
        _core.decode_json(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("-0", 0),
        ("0", 0),
        ("0e1", 0.0),
        ("-0.0e-1", -0.0),
        ("1E+2", 100.0),
        ("1e-400", 0.0),
        ('"\\/\\b\\f\\u00e9\\uD83D\\uDE00"', "/\b\fé😀"),
        (' \t\r\n[ 1 , {"a" : null } ]\n ', [1, {"a": None}]),
    ],
    ids=repr,
)
def test_the_reader_accepts_what_rfc_8259_accepts(text: str, value: object) -> None:
    assert _core.decode_json(text) == value


def test_a_lone_surrogate_escape_is_invalid_json() -> None:
    with pytest.raises(ValueError, match="invalid JSON"):
        _core.decode_json(r'"\ud800"')


def test_decoding_refuses_nesting_beyond_the_limit() -> None:
    depth = DEEPEST_DECODABLE
    assert _core.decode_json("[" * depth + "]" * depth) == nested_lists(depth)
    with pytest.raises(ValueError, match="nested more than 512 levels"):
        _core.decode_json("[" * (depth + 1) + "]" * (depth + 1))


def test_decoding_needs_text_not_bytes() -> None:
    with pytest.raises(TypeError):
        _core.decode_json(b"{}")  # type: ignore[arg-type]


# ── kinds ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("class_name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("SMTPEmail", "smtp_email"),
        ("HTMLToPDF", "html_to_pdf"),
        ("ProcessV2Import", "process_v2_import"),
        ("Job", "job"),
        ("already_snake", "already_snake"),
    ],
)
def test_kinds_are_class_names_in_snake_case(class_name: str, kind: str) -> None:
    assert _core.derive_kind(class_name) == kind
