"""Properties of the JSON codec, without a database: awa refuses exactly what
it cannot store, naming the field, and reads back what it wrote; its reader
agrees with an RFC 8259 reader on any text."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import awa
from awa import _core
from tests.fuzz.settings import fuzz
from tests.fuzz.values import (
    contains_model,
    json_view,
    objects,
    refusal,
    storable,
    storable_text,
    values,
)
from tests.unit.core_rows import add


@fuzz(300)
@given(
    value=st.one_of(values, objects),
    root=st.sampled_from(["args", "metadata", "payload"]),
    interpreter_limit=st.sampled_from([0, 640, 4300]),
)
def test_encoding_refuses_what_cannot_be_stored_and_reads_back_the_rest(
    value: Any, root: str, interpreter_limit: int
) -> None:
    expected = refusal(value, root)
    try:
        sys.set_int_max_str_digits(interpreter_limit)
        try:
            text = _core.encode_json(value, root)
            decoded = _core.decode_json(text)
        finally:
            sys.set_int_max_str_digits(0)
    except awa.ValidationError as error:
        assert expected is not None, f"refused a storable value: {error}"
        assert error.field is not None
        if contains_model(value):
            # Inside a model awa may name the model or the field in it.
            assert error.field.startswith(expected) or expected.startswith(error.field)
        else:
            assert error.field == expected
        return
    assert expected is None, f"stored what must be refused at {expected}: {text[:200]}"
    assert decoded == json_view(value)
    assert json.loads(text) == json_view(value)  # and it is plain JSON


#: Bytes that matter to a JSON reader, to build near-JSON text from.
JSON_ALPHABET = [
    *'{}[]",:-+.eE0123456789 \t\n\r\\/ubfnrt',
    "true",
    "false",
    "null",
    "NaN",
    "Infinity",
    "\\u00e9",
    "\\ud83d",
    "\\ude00",
    "\\u+041",
    "\x00",
    "\x0c",
    "\u00a0",
    "\ufeff",
    "é",
]


def _strict_python_reader(text: str) -> Any:
    """Python's json module, held to RFC 8259 where it is lenient: it takes
    NaN and Infinity and lone surrogate escapes."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    value = json.loads(text, parse_constant=refuse_constant)
    if _has_lone_surrogate(value):
        raise ValueError("a lone surrogate is not Unicode")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    return False


def _mutations(text: str, seed: int) -> str:
    """``text`` with one character inserted, removed or replaced."""
    chooser = random.Random(seed)
    position = chooser.randrange(len(text) + 1)
    piece = chooser.choice(JSON_ALPHABET)
    action = chooser.randrange(3)
    if action == 0:
        return text[:position] + piece + text[position:]
    if action == 1:
        return text[:position] + text[position + 1 :]
    return text[:position] + piece + text[position + 1 :]


json_trees = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
json_documents = st.builds(
    lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only), json_trees, st.booleans()
)

#: Numbers and strings near JSON's grammar: leading zeros, bare points,
#: signs, and \u escapes with signs, spaces and letters in them.
near_numbers = st.from_regex(r"[-+]?\d{0,3}(\.\d{0,2})?([eE][-+]?\d{0,2})?", fullmatch=True)
near_strings = st.from_regex(r'"(\\u[-+ 0-9a-fA-FgG]{4}|\\.|[a-z\x00-\x1f])*"', fullmatch=True)

near_json = st.one_of(
    near_numbers,
    near_strings,
    st.builds("[{}, {}]".format, near_numbers, near_strings),
    st.lists(st.sampled_from(JSON_ALPHABET), max_size=14).map("".join),
    st.builds(_mutations, json_documents, st.integers(0, 2**32)),
    json_documents,
)


@fuzz(500)
@given(text=near_json)
def test_the_reader_accepts_and_refuses_what_rfc_8259_does(text: str) -> None:
    try:
        expected = _strict_python_reader(text)
    except (ValueError, RecursionError):
        with pytest.raises(ValueError, match=r"^invalid JSON|nested more than"):
            _core.decode_json(text)
        return
    assert _core.decode_json(text) == expected


@fuzz(100)
@given(args=st.dictionaries(storable_text, storable, min_size=2, max_size=6))
def test_a_unique_key_ignores_the_order_of_keys(args: dict[str, Any]) -> None:
    reordered = dict(reversed(list(args.items())))

    def key(value: dict[str, Any]) -> bytes:
        rows = _core.InsertRows()
        add(rows, value, "k", "q", 2, 25, unique=(True, True, None, 255))
        [unique_key] = rows.unique_keys()
        assert unique_key is not None
        return unique_key

    assert key(args) == key(reordered)
