"""Hypothesis strategies for what users hand awa, and the reference for what
awa must make of it.

``refusal(value, root)`` is an independent statement of the encoder's rules
(docs/operations.md, "What a payload stores, and what reads back"): the path
of the first value awa must refuse, or ``None`` when the whole value can be
stored. ``json_view(value)`` is what a faithful JSON round trip gives back,
and ``same_after_jsonb`` compares a value read back from PostgreSQL with it,
allowing for what jsonb does on its own (numbers by value, ``-0.0``).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from typing import Any

import pydantic
from hypothesis import strategies as st

MAX_INT_DIGITS = 4300
MAX_ENCODE_DEPTH = 256
UTC = datetime.UTC


class Colour(enum.Enum):
    RED = "red"
    ONE = 1


class Reading(pydantic.BaseModel):
    ratio: float
    count: int = 0
    label: str | None = None
    taken_at: datetime.datetime | None = None
    history: list[float] = []


class Batch(pydantic.BaseModel):
    name: str
    readings: list[Reading] = []
    extra: dict[str, Any] = {}


@dataclasses.dataclass
class Point:
    x: Any
    y: Any


#: Edge cases every strategy below mixes in with its random draws.
AWKWARD_TEXT = ["", "\0", "a\0b", "\ud800", "x\udfff", "é 😀 日本", '"\\/\b\f\n\r\t\x01', "\u2028"]
AWKWARD_INTS = [
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    2**127,
    -(2**128),
    10**MAX_INT_DIGITS - 1,
    -(10**MAX_INT_DIGITS - 1),
    10**MAX_INT_DIGITS,
    -(10**MAX_INT_DIGITS),
    10**5000,
]
AWKWARD_FLOATS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    1e15,
    1e16,
    1.5e300,
    5e-324,
    1.7976931348623157e308,
    0.1,
]

#: Offsets a user's time zone may have (UTC−23:59 to UTC+23:59).
offsets = st.builds(
    datetime.timezone,
    st.timedeltas(
        min_value=datetime.timedelta(hours=-23, minutes=-59),
        max_value=datetime.timedelta(hours=23, minutes=59),
    ).map(lambda delta: datetime.timedelta(minutes=delta // datetime.timedelta(minutes=1))),
)

#: Any Python string: NUL, control characters and lone surrogates included.
texts = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=12),
    st.sampled_from(AWKWARD_TEXT),
)
ints = st.one_of(st.integers(), st.sampled_from(AWKWARD_INTS))
floats = st.one_of(st.floats(), st.sampled_from(AWKWARD_FLOATS))
naive_datetimes = st.datetimes()
aware_datetimes = st.datetimes(timezones=offsets)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    texts,
    naive_datetimes,
    aware_datetimes,
    st.dates(),
    st.times(),
    st.uuids(),
    st.decimals(),
    st.sampled_from(Colour),
    st.binary(max_size=3),
)


def nested_lists(depth: int, leaf: Any = None) -> Any:
    """``depth`` lists, each inside the previous one, around ``leaf``."""
    value: Any = [] if leaf is None else [leaf]
    for _ in range(depth - 1):
        value = [value]
    return value


#: Nesting around the encoder's bound of 256 levels.
deep = st.builds(nested_lists, st.integers(250, 260), st.one_of(st.none(), st.integers(0, 9)))

readings = st.builds(
    Reading,
    ratio=floats,
    count=ints,
    label=st.one_of(st.none(), texts),
    taken_at=st.one_of(st.none(), naive_datetimes, aware_datetimes),
    history=st.lists(floats, max_size=3),
)
models = st.one_of(readings, st.builds(Batch, name=texts, readings=st.lists(readings, max_size=2)))

values = st.recursive(
    st.one_of(scalars, models),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.one_of(texts, st.integers(0, 3)), children, max_size=4),
        st.builds(Point, children, children),
    ),
    max_leaves=12,
)

#: What args and metadata are: objects (and now and then not).
objects = st.one_of(
    st.dictionaries(texts, st.one_of(values, deep), max_size=5),
    st.builds(Point, values, values),
    models,
    values,
)


#: Values awa always stores: JSON's own types, nothing it refuses.
storable_text = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\0"), max_size=8
)
storable = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        storable_text,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(storable_text, children, max_size=3),
    ),
    max_leaves=10,
)


def _has_lone_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def _path(root: str, parts: list[str | int]) -> str:
    rendered = root
    for part in parts:
        rendered += f"[{part}]" if isinstance(part, int) else f".{part}"
    return rendered


def contains_model(value: Any) -> bool:
    """Whether a pydantic model sits anywhere inside ``value``."""
    if isinstance(value, pydantic.BaseModel):
        return True
    if isinstance(value, dict):
        return any(contains_model(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(contains_model(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(contains_model(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def refusal(value: Any, root: str = "args") -> str | None:
    """The path awa must name when it refuses ``value``, or ``None`` when it
    must store it. Inside a pydantic model awa reports what pydantic's own
    serializer makes of it, so only ``"model"`` is promised there: the path
    then starts with the model's path (see ``model_refusal``)."""
    return _refusal(value, root, [], 0)


def _refusal(value: Any, root: str, parts: list[str | int], depth: int) -> str | None:
    here = _path(root, parts)
    if depth >= MAX_ENCODE_DEPTH:
        return here
    if isinstance(value, enum.Enum):
        return _refusal(value.value, root, parts, depth + 1)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return here if abs(value) >= 10**MAX_INT_DIGITS else None
    if isinstance(value, float):
        return None if math.isfinite(value) else here
    if isinstance(value, str):
        return here if "\0" in value or _has_lone_surrogate(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or _has_lone_surrogate(key):
                return here
            if "\0" in key:
                return _path(root, [*parts, key.replace("\0", "\\u0000")])
            found = _refusal(item, root, [*parts, key], depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _refusal(item, root, [*parts, index], depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, pydantic.BaseModel):
        return model_refusal(value, here)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            found = _refusal(getattr(value, field.name), root, [*parts, field.name], depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, datetime.date | datetime.time | uuid.UUID | decimal.Decimal):
        return None
    return here  # bytes, and any other type


def model_refusal(model: pydantic.BaseModel, here: str) -> str | None:
    """For a model: ``None`` when it must be stored, else the model's path
    (awa may name a field inside it)."""
    dumped = model.model_dump(mode="python", by_alias=True, round_trip=True)
    return None if _model_storable(dumped) else here


def _model_storable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) < 10**MAX_INT_DIGITS
    if isinstance(value, str):
        return "\0" not in value and not _has_lone_surrogate(value)
    if isinstance(value, dict):
        return all(_model_storable(k) and _model_storable(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_model_storable(item) for item in value)
    return True  # datetimes and the like: pydantic writes them as text


def json_view(value: Any) -> Any:
    """What a faithful JSON round trip of a storable ``value`` gives back."""
    if isinstance(value, enum.Enum):
        return json_view(value.value)
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, dict):
        return {key: json_view(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_view(item) for item in value]
    if isinstance(value, pydantic.BaseModel):
        return json_view(value.model_dump(mode="json", by_alias=True, round_trip=True))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_view(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)  # UUID, Decimal


def same_after_jsonb(stored: Any, expected: Any) -> bool:
    """Whether ``stored`` (read back from a jsonb column) is ``expected`` (a
    ``json_view``) as jsonb keeps it: numbers by value, so a float of
    magnitude 1e16 or more comes back as the equal ``int`` and ``-0.0`` as
    ``0.0``; key order is jsonb's own."""
    if isinstance(expected, float):
        if isinstance(stored, bool) or not isinstance(stored, int | float):
            return False
        if isinstance(stored, int) and abs(expected) < 1e16:
            return False
        return float(stored) == expected
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return type(stored) is type(expected) and stored == expected
    if isinstance(expected, int):
        return type(stored) is int and stored == expected
    if isinstance(expected, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(expected)
            and all(same_after_jsonb(s, e) for s, e in zip(stored, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == expected.keys()
            and all(same_after_jsonb(stored[key], expected[key]) for key in expected)
        )
    return False
