"""Properties of every insert path and of callback payloads, on real
PostgreSQL: whatever a user passes, only awa's documented errors come out
(``ValidationError``, ``StagingError``, ``UniqueConflict``, never a database
or codec error from deep inside), nothing is written when one does, and
whatever is stored reads back equal (timestamps to the microsecond)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

import awa
from awa.errors import StagingError
from awa.followups import FollowUpStage
from awa.tasks import Registry
from tests.fuzz.settings import fuzz
from tests.fuzz.values import (
    aware_datetimes,
    floats,
    ints,
    json_view,
    naive_datetimes,
    objects,
    refusal,
    same_after_jsonb,
    storable,
    storable_text,
    texts,
    values,
)

UTC = datetime.UTC
PATHS = ["insert", "insert_many", "insert_many_copy", "enqueue_many_copy"]

#: Moments anywhere in (and just outside) years 1–9999, with any UTC offset.
moments = st.one_of(
    aware_datetimes,
    st.sampled_from(
        [
            datetime.datetime.min.replace(tzinfo=UTC),
            datetime.datetime.max.replace(tzinfo=UTC),
            datetime.datetime.min.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
            datetime.datetime.max.replace(tzinfo=datetime.timezone(-datetime.timedelta(hours=1))),
        ]
    ),
    naive_datetimes,
    st.timedeltas(),
    st.sampled_from(["tomorrow", 0, 1.5]),
)

numbers = st.one_of(ints, floats, st.booleans(), st.sampled_from(["1", None]))
names = st.one_of(texts, st.text(min_size=199, max_size=202), st.sampled_from([None, 5]))

unique_options = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "by_args": st.one_of(st.booleans(), st.sampled_from([1, None])),
            "by_queue": st.booleans(),
            "by_period": st.one_of(
                st.none(), numbers, st.timedeltas(), st.sampled_from([60, 3600.5])
            ),
            "states": st.one_of(
                st.frozensets(st.sampled_from([state.value for state in awa.JobState])),
                st.sampled_from(["available", ["bogus"], 7]),
            ),
        },
    ),
)

insert_options = st.fixed_dictionaries(
    {},
    optional={
        "queue": names,
        "priority": numbers,
        "max_attempts": numbers,
        "max_crashes": st.one_of(st.none(), numbers),
        "run_at": moments,
        "deadline": moments,
        "timeout": st.one_of(numbers, st.timedeltas()),
        "tags": st.one_of(st.none(), st.lists(texts, max_size=22), st.just("tag")),
        "metadata": st.one_of(st.none(), objects),
        "unique_opts": unique_options,
        "schema_version": st.one_of(st.none(), numbers),
    },
)

valid_options = st.fixed_dictionaries(
    {},
    optional={
        "priority": st.integers(1, 4),
        "run_at": aware_datetimes,
        "deadline": aware_datetimes,
        "tags": st.lists(storable_text.filter(bool), max_size=3),
    },
)

FIRST = datetime.datetime.min.replace(tzinfo=UTC)
LAST = datetime.datetime.max.replace(tzinfo=UTC)


def in_range(moment: datetime.datetime) -> bool:
    return FIRST <= moment <= LAST


async def insert_on(client: awa.AsyncClient, path: str, args: Any, options: Mapping[str, Any]):
    """Inserts one job by ``path``; returns its id, or ``None`` when skipped."""
    options = {"kind": "fuzzed", **options}
    if path == "insert":
        return (await client.insert(args, **options)).id
    batch: dict[str, Any] = {}
    if path != "insert_many":
        # COPY takes no unique_opts keyword; per job, it refuses them.
        unique_opts = options.pop("unique_opts", None)
        if unique_opts is not None:
            batch["opts"] = [{"unique_opts": unique_opts}]
    if path == "enqueue_many_copy":
        await client.enqueue_many_copy([args], **options, **batch)
        return None
    jobs = await getattr(client, path)([args], **options, **batch)
    return jobs[0].id if jobs else None


async def newest(conn: asyncpg.Connection) -> Any:
    return await conn.fetchrow("SELECT * FROM awa.jobs ORDER BY id DESC LIMIT 1")


async def job_count(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM awa.jobs"))


@fuzz(60)
@given(path=st.sampled_from(PATHS), options=insert_options, args=st.one_of(storable, objects))
async def test_insert_options_are_refused_by_field_or_stored_as_given(
    client: awa.AsyncClient, conn: asyncpg.Connection, path: str, options: Any, args: Any
) -> None:
    before = await job_count(conn)
    try:
        await insert_on(client, path, args, options)
    except awa.UniqueConflict:
        assert await job_count(conn) == before
        return
    except awa.ValidationError as error:
        assert isinstance(error.field, str) and error.field
        assert await job_count(conn) == before, "a refused insert must write nothing"
        return
    written = await job_count(conn) - before
    if written == 0:  # insert_many skips a duplicate
        assert path == "insert_many" and options.get("unique_opts") is not None
        return
    row = await newest(conn)
    stored = await client.get_job(row["id"], include_payload=True)
    assert same_after_jsonb(stored.args, json_view(args))
    assert same_after_jsonb(stored.metadata, json_view(options.get("metadata") or {}))
    for option in ("priority", "max_attempts", "queue"):
        if options.get(option) is not None:
            assert getattr(stored, option) == options[option]
    if options.get("tags"):
        assert stored.tags == list(options["tags"])
    for option, column in (("run_at", "run_at"), ("deadline", "deadline_at")):
        moment = options.get(option)
        if isinstance(moment, datetime.datetime):
            assert in_range(moment)
            assert row[column] == moment, f"{option} is not stored exactly"


@fuzz(60)
@given(path=st.sampled_from(PATHS), options=valid_options, args=objects, metadata=objects)
async def test_args_and_metadata_are_refused_by_field_or_read_back_equal(
    client: awa.AsyncClient,
    conn: asyncpg.Connection,
    path: str,
    options: Any,
    args: Any,
    metadata: Any,
) -> None:
    before = await job_count(conn)
    # InsertRows encodes metadata first, then args.
    expected = refusal(metadata, "metadata") or refusal(args, "args")
    for moment in (options.get("run_at"), options.get("deadline")):
        if moment is not None and not in_range(moment):
            expected = expected or "run_at/deadline"
    try:
        await insert_on(client, path, args, {**options, "metadata": metadata})
    except awa.ValidationError as error:
        assert await job_count(conn) == before
        assert error.field is not None
        # Whatever it was, the field is named; a non-object is refused at
        # the root.
        assert expected is not None or error.field in ("args", "metadata"), error
        return
    assert expected is None, f"stored what must be refused at {expected}"
    row = await newest(conn)
    stored = await client.get_job(row["id"], include_payload=True)
    assert same_after_jsonb(stored.args, json_view(args))
    assert same_after_jsonb(stored.metadata, json_view({} if metadata is None else metadata))
    for option, column in (("run_at", "run_at"), ("deadline", "deadline_at")):
        if option in options:
            assert row[column] == options[option]


@fuzz(100)
@given(args=st.one_of(storable, objects), options=insert_options)
def test_a_handler_staging_a_follow_up_meets_only_staging_errors(args: Any, options: Any) -> None:
    stage = FollowUpStage(Registry())
    try:
        stage.add(args, {"kind": "fuzzed", **options})
    except StagingError as error:
        assert stage.count == 0
        assert stage.error is error
        return
    assert stage.count == 1
    [row] = stage.rows.rows()
    assert same_after_jsonb(awa._core.decode_json(row["args"]), json_view(args))


async def park(conn: asyncpg.Connection, client: awa.AsyncClient) -> uuid.UUID:
    """A job waiting on a new callback, put there by SQL."""
    job = await client.insert({"waits": True}, kind="parked")
    callback = uuid.uuid4()
    await conn.execute(
        "UPDATE awa.jobs SET state = 'waiting_external', attempt = 1, callback_id = $1"
        " WHERE id = $2",
        callback,
        job.id,
    )
    return callback


@fuzz(40)
@given(payload=st.one_of(values, objects))
async def test_a_callback_payload_is_refused_by_field_or_kept_as_given(
    client: awa.AsyncClient, conn: asyncpg.Connection, payload: Any
) -> None:
    callback = await park(conn, client)
    expected = refusal(payload, "payload")
    try:
        job = await client.complete_external(callback, payload)
    except awa.ValidationError as error:
        assert expected is not None, error
        assert error.field is not None and error.field.startswith("payload")
        state = await conn.fetchval("SELECT state FROM awa.jobs WHERE callback_id = $1", callback)
        assert state == "waiting_external"
        return
    assert expected is None, f"kept what must be refused at {expected}"
    stored = (await client.get_job(job.id, include_payload=True)).metadata
    if payload is None:
        assert "callback_result" not in stored
    else:
        assert same_after_jsonb(stored["callback_result"], json_view(payload))


@pytest.mark.parametrize("resolve", ["resume_external", "resolve_callback"])
@fuzz(15)
@given(payload=st.one_of(values, objects))
async def test_other_callback_calls_refuse_payloads_by_field(
    client: awa.AsyncClient, resolve: str, payload: Any
) -> None:
    expected = refusal(payload, "payload")
    try:
        await getattr(client, resolve)(uuid.uuid4(), payload)
    except awa.ValidationError as error:
        assert expected is not None, error
        assert error.field is not None and error.field.startswith("payload")
    except awa.CallbackNotFound:
        assert expected is None, f"accepted what must be refused at {expected}"
