"""The progress buffer between a worker's handlers and its heartbeat, and the
checks of a report (no database)."""

from __future__ import annotations

import json

import pytest

from awa.errors import ProgressError
from awa.worker.progress import MAX_PROGRESS_BYTES, ProgressBuffer, progress_json


def test_a_job_keeps_only_its_latest_report():
    buffer = ProgressBuffer()
    buffer.put(1, 7, "a")
    buffer.put(1, 7, "b")
    buffer.put(2, 3, "c")
    assert buffer.take_all() == {1: (7, "b"), 2: (3, "c")}
    assert len(buffer) == 0


def test_a_failed_write_puts_back_only_what_no_newer_report_replaced():
    buffer = ProgressBuffer()
    buffer.put(1, 7, "old one")
    buffer.put(2, 3, "old two")
    taken = buffer.take_all()
    buffer.put(1, 7, "new one")  # reported while the beat was failing
    buffer.put_back(taken)
    assert buffer.take_all() == {1: (7, "new one"), 2: (3, "old two")}


def test_take_hands_out_one_job_once():
    buffer = ProgressBuffer()
    buffer.put(1, 7, "a")
    assert buffer.take(1) == (7, "a")
    assert buffer.take(1) is None


def test_a_report_is_stored_as_percent_message_and_data():
    text = progress_json(12, None, {"rows": [1, 2]})
    assert json.loads(text) == {"percent": 12.0, "message": None, "data": {"rows": [1, 2]}}


def test_a_report_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not():
    overhead = len(progress_json(0, None, {"x": ""}).encode())
    fits = progress_json(0, None, {"x": "y" * (MAX_PROGRESS_BYTES - overhead)})
    assert len(fits.encode()) == MAX_PROGRESS_BYTES
    with pytest.raises(ProgressError) as raised:
        progress_json(0, None, {"x": "y" * (MAX_PROGRESS_BYTES - overhead + 1)})
    assert raised.value.field == "progress"
    assert f"{MAX_PROGRESS_BYTES + 1} bytes" in str(raised.value)


def test_a_message_with_nul_is_refused_naming_it():
    with pytest.raises(ProgressError) as raised:
        progress_json(1, "a\x00b", {})
    assert raised.value.field == "progress.message"
