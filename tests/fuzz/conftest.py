"""Fixtures for the property tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def printable_ints() -> Iterator[None]:
    """Lifts the interpreter's int/str digit limit while a property runs, so
    hypothesis can print a failing example that holds a huge integer. awa
    itself must not care (the codec properties set limits of their own)."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)
