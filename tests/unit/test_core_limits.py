"""awa._core.InsertRows: every insert limit, and the rows it hands to SQL.

Every insert path (one job, many, COPY) goes through ``InsertRows.add``, so
a value that breaks a limit is an ``awa.ValidationError`` naming its field,
never a database error.
"""

from __future__ import annotations

import datetime
from typing import Any

import pydantic
import pytest

import awa
from awa import _core
from tests.unit.core_rows import add, column, json_rows

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
MICROSECOND = datetime.timedelta(microseconds=1)
FIRST_INSTANT_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
LAST_INSTANT_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z

COPY_COLUMNS = [
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "max_attempts",
    "max_crashes",
    "tags",
    "metadata",
    "run_at",
]


def micros(moment: datetime.datetime) -> int:
    """Microseconds since the Unix epoch, as the Python layer passes them."""
    return (moment - EPOCH) // MICROSECOND


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


def rows_of(*jobs: dict[str, Any]) -> _core.InsertRows:
    rows = _core.InsertRows(len(jobs))
    for fields in jobs:
        add(rows, **fields)
    return rows


def refusal(**overrides: Any) -> awa.ValidationError:
    """The ValidationError that adding a job with ``overrides`` raises."""
    rows = _core.InsertRows()
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(**overrides))
    assert len(rows) == 0, "a refused job must not be added"
    return caught.value


def accepts(**overrides: Any) -> None:
    assert len(rows_of(job(**overrides))) == 1


def copy_lines(
    rows: _core.InsertRows, now_us: int, ids: list[int] | None = None
) -> list[list[str]]:
    """COPY text split into rows of fields (escapes left as they are)."""
    text = rows.copy_text(now_us, ids).decode()
    assert text.endswith("\n")
    return [line.split("\t") for line in text[:-1].split("\n")]


# ── numbers ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize("priority", [1, 2, 3, 4])
def test_priorities_1_to_4_are_accepted(priority: int) -> None:
    accepts(priority=priority)


@pytest.mark.parametrize("priority", [0, 5, -1])
def test_priority_outside_1_to_4_is_refused(priority: int) -> None:
    error = refusal(priority=priority)
    assert error.field == "priority"
    assert str(error) == f"priority: must be between 1 and 4 (got {priority})"


def test_max_attempts_from_1_to_1000_are_accepted() -> None:
    accepts(max_attempts=1)
    accepts(max_attempts=1000)


@pytest.mark.parametrize("max_attempts", [0, 1001])
def test_max_attempts_outside_1_to_1000_is_refused(max_attempts: int) -> None:
    assert refusal(max_attempts=max_attempts).field == "max_attempts"


def test_max_crashes_may_be_zero_or_unbounded() -> None:
    accepts(max_crashes=0)
    accepts(max_crashes=None)


def test_negative_max_crashes_is_refused() -> None:
    assert refusal(max_crashes=-1).field == "max_crashes"


def test_max_crashes_must_fit_a_smallint_budget() -> None:
    accepts(max_crashes=10_000)
    assert refusal(max_crashes=10_001).field == "max_crashes"


def test_schema_versions_from_1_to_32767_are_accepted() -> None:
    accepts(schema_version=1)
    accepts(schema_version=32_767)


@pytest.mark.parametrize("schema_version", [0, -1, 32_768, 2.0, "2"])
def test_schema_version_outside_1_to_32767_or_not_an_int_is_refused(schema_version: object) -> None:
    assert refusal(schema_version=schema_version).field == "schema_version"


def test_a_bool_is_not_accepted_as_an_integer() -> None:
    error = refusal(priority=True)
    assert error.field == "priority"
    assert "must be an integer (got bool)" in str(error)


@pytest.mark.parametrize("field", ["priority", "max_attempts", "max_crashes"])
def test_integer_fields_refuse_other_types(field: str) -> None:
    assert refusal(**{field: 2.0}).field == field
    assert refusal(**{field: "2"}).field == field


def test_an_integer_beyond_64_bits_is_out_of_range() -> None:
    error = refusal(max_attempts=2**70)
    assert error.field == "max_attempts"
    assert "out of range" in str(error)


# ── names ───────────────────────────────────────────────────────────────


def test_kinds_of_1_to_200_characters_are_accepted() -> None:
    accepts(kind="q")
    accepts(kind="q" * _core.MAX_NAME_CHARS)


def test_kinds_count_characters_not_bytes() -> None:
    accepts(kind="é" * _core.MAX_NAME_CHARS)
    accepts(kind="日" * _core.MAX_NAME_CHARS)


@pytest.mark.parametrize("field", ["kind", "queue"])
def test_an_empty_name_is_refused(field: str) -> None:
    error = refusal(**{field: ""})
    assert error.field == field
    assert str(error) == f"{field}: must not be empty"


def test_a_kind_over_200_characters_is_refused() -> None:
    error = refusal(kind="é" * 201)
    assert error.field == "kind"
    assert "at most 200 characters (got 201)" in str(error)


@pytest.mark.parametrize("field", ["kind", "queue"])
def test_a_nul_in_a_name_is_refused(field: str) -> None:
    assert refusal(**{field: "send\0email"}).field == field


@pytest.mark.parametrize("field", ["kind", "queue"])
def test_a_name_must_be_a_string(field: str) -> None:
    error = refusal(**{field: 1})
    assert error.field == field
    assert "must be a string (got int)" in str(error)


def test_a_lone_surrogate_in_a_name_is_refused() -> None:
    assert refusal(queue="q\ud800").field == "queue"


@pytest.mark.parametrize("queue", ["default", "9", "emails.high", "tenant_7-eu", "q" * 64])
def test_queue_names_of_the_grammar_are_accepted(queue: str) -> None:
    accepts(queue=queue)


@pytest.mark.parametrize("queue", [".hidden", "-x", "_x", "a b", "a/b", "é", "a:b", "q" * 65])
def test_queue_names_outside_the_grammar_are_refused(queue: str) -> None:
    error = refusal(queue=queue)
    assert error.field == "queue"
    assert str(error).startswith("queue: ")


def test_a_refused_queue_name_says_the_rule() -> None:
    assert str(refusal(queue="a b")) == (
        "queue: \"a b\" is not a queue name: use letters, digits, '.', '_' and '-', "
        "starting with a letter or digit"
    )


# ── tags ────────────────────────────────────────────────────────────────


def test_up_to_20_tags_are_accepted() -> None:
    accepts(tags=[f"tag{i}" for i in range(_core.MAX_TAGS)])


def test_more_than_20_tags_are_refused() -> None:
    error = refusal(tags=[f"tag{i}" for i in range(_core.MAX_TAGS + 1)])
    assert error.field == "tags"
    assert "at most 20 tags are allowed (got 21)" in str(error)


def test_an_empty_tag_names_its_position() -> None:
    assert refusal(tags=["fine", ""]).field == "tags[1]"


def test_a_tag_of_200_characters_is_accepted_and_201_is_refused() -> None:
    accepts(tags=["ü" * 200])
    assert refusal(tags=["ok", "ok", "t" * 201]).field == "tags[2]"


def test_a_nul_in_a_tag_names_its_position() -> None:
    assert refusal(tags=["a\0b"]).field == "tags[0]"


def test_a_tag_must_be_a_string() -> None:
    error = refusal(tags=["ok", 3])
    assert error.field == "tags[1]"
    assert "must be a string (got int)" in str(error)


def test_tags_must_be_a_list_not_a_string() -> None:
    error = refusal(tags="urgent")
    assert error.field == "tags"
    assert "not a string" in str(error)


def test_tags_must_be_iterable() -> None:
    assert refusal(tags=5).field == "tags"


# ── partition keys ──────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "partition_key", ["t", "tenant 7/eu", "ACME Corp.", "é" * 255, "\U0001f600" * 255, "a\\b"]
)
def test_partition_keys_of_1_to_255_characters_are_accepted(partition_key: str) -> None:
    rows = rows_of(job(partition_key=partition_key))
    assert column(rows, "partition_key") == [partition_key]


def test_no_partition_key_is_no_partition() -> None:
    rows = rows_of(job())
    assert column(rows, "partition_key") == [None]
    assert "partition_key" not in json_rows(rows)[0]


@pytest.mark.parametrize(
    ("partition_key", "message"),
    [
        ("", "partition_key: must not be empty"),
        ("k" * 256, "partition_key: must be at most 255 characters (got 256)"),
        ("é" * 300, "partition_key: must be at most 255 characters (got 300)"),
        ("a\0b", "partition_key: must not contain control characters (U+0000 at character 1)"),
        ("tenant\t7", "partition_key: must not contain control characters (U+0009 at character 6)"),
        ("a\nb", "partition_key: must not contain control characters (U+000A at character 1)"),
        ("\x7f", "partition_key: must not contain control characters (U+007F at character 0)"),
        ("é\x85", "partition_key: must not contain control characters (U+0085 at character 1)"),
        ("a\u2028", "partition_key: must not contain control characters (U+2028 at character 1)"),
    ],
)
def test_a_bad_partition_key_is_refused_saying_why(partition_key: str, message: str) -> None:
    error = refusal(partition_key=partition_key)
    assert error.field == "partition_key"
    assert str(error) == message
    assert error.__cause__ is None


@pytest.mark.parametrize(
    ("partition_key", "type_name"), [(7, "int"), (b"t", "bytes"), (["t"], "list")]
)
def test_a_partition_key_must_be_a_string(partition_key: object, type_name: str) -> None:
    error = refusal(partition_key=partition_key)
    assert error.field == "partition_key"
    assert str(error) == f"partition_key: must be a string (got {type_name})"


def test_a_lone_surrogate_in_a_partition_key_is_refused() -> None:
    assert refusal(partition_key="t\ud800").field == "partition_key"


def test_a_bad_partition_key_in_a_batch_names_the_jobs_position() -> None:
    rows = _core.InsertRows()
    add(rows, **job(partition_key="fine"), batch=True)
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(partition_key=""), batch=True)
    assert str(caught.value) == "jobs[1].partition_key: must not be empty"
    assert caught.value.field == "partition_key"
    assert len(rows) == 1


# ── run_at ──────────────────────────────────────────────────────────────


def test_run_at_within_years_1_to_9999_is_accepted() -> None:
    accepts(run_at_us=FIRST_INSTANT_US)
    accepts(run_at_us=LAST_INSTANT_US)
    accepts(run_at_us=micros(datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)))


@pytest.mark.parametrize("run_at_us", [FIRST_INSTANT_US - 1, LAST_INSTANT_US + 1])
def test_run_at_outside_years_1_to_9999_is_refused(run_at_us: int) -> None:
    error = refusal(run_at_us=run_at_us)
    assert error.field == "run_at"
    assert "years 1 to 9999" in str(error)


def test_the_year_boundaries_match_python_datetimes() -> None:
    assert micros(datetime.datetime.min.replace(tzinfo=datetime.UTC)) == FIRST_INSTANT_US
    assert micros(datetime.datetime.max.replace(tzinfo=datetime.UTC)) == LAST_INSTANT_US


# ── args and metadata ───────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("value", "json_type"),
    [([1], "array"), ("x", "string"), (None, "null"), (3, "number"), (True, "boolean")],
)
def test_args_must_be_a_json_object(value: object, json_type: str) -> None:
    error = refusal(args=value)
    assert error.field == "args"
    assert str(error) == f"args: must serialize to a JSON object (got {json_type})"


def test_metadata_must_be_a_json_object() -> None:
    assert refusal(metadata=["x"]).field == "metadata"


def test_a_nul_deep_in_args_names_the_path() -> None:
    args = {"items": [{"name": "a"}, {"name": "b"}, {"name": "\0"}]}
    assert refusal(args=args).field == "args.items[2].name"


def test_a_nul_in_metadata_names_the_path() -> None:
    assert refusal(metadata={"trace": {"id": "x\0"}}).field == "metadata.trace.id"


def test_a_nul_in_an_args_key_names_the_object() -> None:
    error = refusal(args={"outer": {"k\0": 1}})
    assert error.field is not None
    assert error.field.startswith("args.outer.k")


# ── batches ─────────────────────────────────────────────────────────────


def test_a_batch_error_message_names_the_jobs_position() -> None:
    rows = rows_of(job(), job())
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(priority=9), batch=True)
    assert str(caught.value) == "jobs[2].priority: must be between 1 and 4 (got 9)"
    assert caught.value.field == "priority"
    assert len(rows) == 2


def test_a_batch_error_in_args_keeps_the_path_after_the_position() -> None:
    rows = _core.InsertRows()
    with pytest.raises(awa.ValidationError) as caught:
        add(rows, **job(args={"a": [0, "\0"]}), batch=True)
    assert str(caught.value) == "jobs[0].args.a[1]: must not contain NUL characters"
    assert caught.value.field == "args.a[1]"


def test_a_single_insert_error_has_no_position() -> None:
    assert str(refusal(queue="")) == "queue: must not be empty"


# ── rows by name ────────────────────────────────────────────────────────


def test_json_rows_name_each_field_and_leave_out_absent_ones() -> None:
    rows = rows_of(
        job(),
        job(
            args={"n": 1.0},
            kind="resize",
            queue="images",
            priority=1,
            max_attempts=3,
            max_crashes=0,
            run_at_us=5,
            tags=["a", "b"],
            metadata={"trace": "t1"},
        ),
    )
    assert json_rows(rows) == [
        {
            "kind": "send_email",
            "queue": "email",
            "args": {"to": "a@b.c"},
            "priority": 2,
            "max_attempts": 25,
        },
        {
            "kind": "resize",
            "queue": "images",
            "args": {"n": 1.0},
            "priority": 1,
            "max_attempts": 3,
            "max_crashes": 0,
            "run_at": "1970-01-01 00:00:00.000005+00",
            "tags": ["a", "b"],
            "metadata": {"trace": "t1"},
        },
    ]


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (FIRST_INSTANT_US, "0001-01-01 00:00:00.000000+00"),
        (FIRST_INSTANT_US + 1, "0001-01-01 00:00:00.000001+00"),
        (-1, "1969-12-31 23:59:59.999999+00"),
        (LAST_INSTANT_US, "9999-12-31 23:59:59.999999+00"),
    ],
)
def test_run_at_and_deadline_go_to_sql_as_exact_timestamp_text(micros: int, text: str) -> None:
    rows = rows_of(job(run_at_us=micros, deadline_us=micros))
    [row] = json_rows(rows)
    assert (row["run_at"], row["deadline_at"]) == (text, text)
    assert rows.copy_text(0).decode().endswith(f"\t{text}\t\\N\t{text}\n")


def test_timeouts_and_deadlines_are_checked_and_kept() -> None:
    rows = _core.InsertRows(2)
    add(rows, {}, "k", "q", 2, 25, None, None, None, None, timeout_ms=1500, deadline_us=7)
    add(rows, {}, "k", "q", 2, 25, None, None, None, None)
    assert column(rows, "timeout_ms") == [1500, None]
    assert column(rows, "deadline_us") == [7, None]
    first = json_rows(rows)[0]
    assert (first["timeout_ms"], first["deadline_at"]) == (1500, "1970-01-01 00:00:00.000007+00")
    assert rows.copy_columns()[-2:] == ["timeout_ms", "deadline_at"]
    for field, kwargs in [
        ("timeout", {"timeout_ms": 0}),
        ("timeout", {"timeout_ms": 2**31}),
        ("deadline", {"deadline_us": 2**62}),
    ]:
        with pytest.raises(awa.ValidationError) as raised:
            add(rows, {}, "k", "q", 2, 25, None, None, None, None, **kwargs)
        assert raised.value.field == field


def test_empty_tags_and_empty_metadata_are_stored_as_null() -> None:
    rows = rows_of(job(tags=[], metadata={}))
    assert (column(rows, "tags"), column(rows, "metadata")) == ([None], [None])
    assert "tags" not in json_rows(rows)[0]


def test_tags_become_quoted_array_literals_in_copy_text() -> None:
    rows = rows_of(job(tags=("plain", 'say "hi"', "back\\slash", "a,b", "{}")))
    [fields] = copy_lines(rows, 0)
    assert fields[7] == r'{"plain","say \\"hi\\"","back\\\\slash","a,b","{}"}'
    assert json_rows(rows)[0]["tags"] == ["plain", 'say "hi"', "back\\slash", "a,b", "{}"]


def test_pydantic_args_are_stored_as_their_json() -> None:
    class Resize(pydantic.BaseModel):
        image_id: int
        width: int

    rows = rows_of(job(args=Resize(image_id=1, width=640)))
    assert column(rows, "args") == ['{"image_id":1,"width":640}']


# ── COPY text ───────────────────────────────────────────────────────────


def test_copy_columns_name_the_fields_in_copy_order() -> None:
    rows = rows_of(job())
    assert rows.copy_columns() == COPY_COLUMNS
    assert rows.copy_columns(with_ids=True) == ["id", *COPY_COLUMNS]


def test_copy_text_gives_rows_without_a_run_at_the_enqueue_time() -> None:
    """run_at is always sent: left to its default (a volatile function),
    PostgreSQL would write the rows one by one."""
    [plain, later] = copy_lines(rows_of(job(), job(run_at_us=5_000_000)), 1_000_000)
    assert plain[9] == "1970-01-01 00:00:01.000000+00" and plain[3] == "available"
    assert later[9] == "1970-01-01 00:00:05.000000+00" and later[3] == "scheduled"


def test_copy_text_writes_nulls_as_backslash_n() -> None:
    assert rows_of(job()).copy_text(0) == (
        b'send_email\temail\t{"to":"a@b.c"}\tavailable\t2\t25\t\\N\t\\N\t\\N'
        b"\t1970-01-01 00:00:00.000000+00\n"
    )


def test_backdated_lanes_are_those_given_available_jobs_keyed_before_the_enqueue_time() -> None:
    rows = rows_of(
        job(queue="a", run_at_us=500),
        job(queue="a", run_at_us=300),
        job(queue="a", priority=1, run_at_us=900),
        job(queue="b"),
        job(queue="b", run_at_us=2_000),
    )
    assert rows.backdated_lanes(1_000) == (["a", "a"], [1, 2], [900, 300])


def test_copy_text_escapes_backslashes_tabs_and_newlines() -> None:
    rows = rows_of(job(kind="tab\there line\nbreak\r", args={"path": "C:\\tmp"}))
    [fields] = copy_lines(rows, 0)
    assert fields[0] == "tab\\there line\\nbreak\\r"
    # The JSON escape (one backslash, doubled) is doubled again for COPY.
    assert fields[2] == '{"path":"C:\\\\\\\\tmp"}'


def test_copy_text_escapes_json_escapes_of_control_characters() -> None:
    [fields] = copy_lines(rows_of(job(args={"note": "a\tb\nc"})), 0)
    assert fields[2] == '{"note":"a\\\\tb\\\\nc"}'


def test_copy_text_writes_tags_as_escaped_array_literals() -> None:
    [fields] = copy_lines(rows_of(job(tags=['say "hi"', "tab\there"])), 0)
    assert fields[7] == '{"say \\\\"hi\\\\"","tab\\there"}'


def test_copy_text_writes_every_field_of_a_full_row() -> None:
    rows = rows_of(
        job(max_crashes=3, priority=4, max_attempts=7, tags=["x"], metadata={"m": 1}, run_at_us=0)
    )
    assert copy_lines(rows, 0) == [
        [
            "send_email",
            "email",
            '{"to":"a@b.c"}',
            "available",
            "4",
            "7",
            "3",
            '{"x"}',
            '{"m":1}',
            "1970-01-01 00:00:00.000000+00",
        ]
    ]


def test_rows_after_now_are_scheduled_and_the_rest_available() -> None:
    now_us = 1_000_000
    rows = rows_of(
        job(), job(run_at_us=now_us - 1), job(run_at_us=now_us), job(run_at_us=now_us + 1)
    )
    states = [fields[3] for fields in copy_lines(rows, now_us)]
    assert states == ["available", "available", "available", "scheduled"]


def test_copy_timestamps_are_utc_with_microseconds() -> None:
    moment = datetime.datetime(2026, 11, 30, 16, 33, 51, 123456, tzinfo=datetime.UTC)
    rows = rows_of(job(run_at_us=micros(moment)))
    [fields] = copy_lines(rows, 0)
    assert fields[-1] == "2026-11-30 16:33:51.123456+00"


def test_copy_timestamps_cover_the_first_and_last_year() -> None:
    rows = rows_of(job(run_at_us=FIRST_INSTANT_US), job(run_at_us=LAST_INSTANT_US))
    assert [fields[-1] for fields in copy_lines(rows, 0)] == [
        "0001-01-01 00:00:00.000000+00",
        "9999-12-31 23:59:59.999999+00",
    ]


def test_rows_without_run_at_run_at_now_when_others_have_one() -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    rows = rows_of(job(), job(run_at_us=micros(now) + 60_000_000))
    assert [fields[-1] for fields in copy_lines(rows, micros(now))] == [
        "2026-01-02 03:04:05.000000+00",
        "2026-01-02 03:05:05.000000+00",
    ]


def test_copy_text_puts_given_ids_first() -> None:
    rows = rows_of(job(), job())
    assert [fields[0] for fields in copy_lines(rows, 0, ids=[41, 42])] == ["41", "42"]


def test_copy_text_needs_one_id_per_row() -> None:
    with pytest.raises(ValueError, match="one id is needed per row"):
        rows_of(job(), job()).copy_text(0, [1])


def test_copy_text_of_no_rows_is_empty() -> None:
    assert _core.InsertRows().copy_text(0) == b""


def test_copy_sends_partition_keys_only_when_some_row_has_one() -> None:
    plain = rows_of(job())
    assert "partition_key" not in plain.copy_columns()
    rows = rows_of(job(), job(partition_key='tenant\\7 "eu"'))
    assert rows.copy_columns()[-1] == "partition_key"
    first, second = copy_lines(rows, 0)
    assert first[-1] == "\\N"
    assert second[-1] == 'tenant\\\\7 "eu"'
    assert json_rows(rows)[1]["partition_key"] == 'tenant\\7 "eu"'


# ── queues to notify ────────────────────────────────────────────────────


def test_available_queues_lists_each_queue_with_a_runnable_job_once() -> None:
    now_us = 10
    rows = rows_of(
        job(queue="email"),
        job(queue="email"),
        job(queue="images", run_at_us=now_us),
        job(queue="later", run_at_us=now_us + 1),
        job(queue="default"),
    )
    assert rows.available_queues(now_us) == ["default", "email", "images"]


def test_available_queues_is_empty_when_every_job_is_scheduled() -> None:
    assert rows_of(job(run_at_us=100)).available_queues(99) == []
