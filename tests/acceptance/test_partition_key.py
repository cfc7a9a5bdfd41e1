"""``partition_key=`` on every insert path (one job, many, COPY, a
transaction, durable and staged follow-ups), checked in the core before any
SQL; and the ``rate_class`` and ``partition_key`` a ``Job`` read back from
an insert, ``get_job`` or ``list_jobs`` carries."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel

import awa
from tests.support import FAST_WORKER, eventually, wait_for_state

QUEUE = "tenants"
KIND = "sync"

#: A partition key may be any text of 1-255 characters without a control
#: character: spaces, slashes, quotes, backslashes and non-ASCII included.
ODD_KEY = 'tenant 7/eu "Zürich" \\ 😀'


class Signup(BaseModel):
    user_id: int


class WelcomeEmail(BaseModel):
    user_id: int


async def stored_keys(conn) -> dict[int, str | None]:
    return dict(await conn.fetch("SELECT id, partition_key FROM awa.jobs ORDER BY id"))


async def test_a_partition_key_round_trips_on_insert_and_reads(client, conn):
    inserted = await client.insert({"n": 1}, kind=KIND, queue=QUEUE, partition_key=ODD_KEY)
    plain = await client.insert({"n": 2}, kind=KIND, queue=QUEUE)
    assert (inserted.partition_key, plain.partition_key) == (ODD_KEY, None)
    assert await stored_keys(conn) == {inserted.id: ODD_KEY, plain.id: None}

    assert (await client.get_job(inserted.id)).partition_key == ODD_KEY
    assert (await client.get_job(plain.id, include_payload=True)).partition_key is None
    listed = {job.id: job.partition_key for job in await client.list_jobs(queue=QUEUE)}
    assert listed == {inserted.id: ODD_KEY, plain.id: None}


async def test_a_partition_key_round_trips_on_insert_many_shared_and_per_job(client, conn):
    shared = await client.insert_many(
        [{"n": 1}, {"n": 2}], kind=KIND, queue=QUEUE, partition_key="acme"
    )
    per_job = await client.insert_many(
        [{"n": 3}, {"n": 4}, {"n": 5}],
        kind=KIND,
        queue=QUEUE,
        partition_key="acme",
        opts=[{"partition_key": "globex"}, None, {"partition_key": None}],
    )
    keys = [job.partition_key for job in shared + per_job]
    assert keys == ["acme", "acme", "globex", "acme", None]
    assert list((await stored_keys(conn)).values()) == keys
    listed = await client.list_jobs(queue=QUEUE)
    assert [job.partition_key for job in reversed(listed)] == keys


async def test_a_partition_key_round_trips_on_copy(client, conn):
    copied = await client.insert_many_copy(
        [{"n": 1}, {"n": 2}, {"n": 3}],
        kind=KIND,
        queue=QUEUE,
        opts=[{"partition_key": ODD_KEY}, {"partition_key": "acme"}, None],
    )
    assert [job.partition_key for job in copied] == [ODD_KEY, "acme", None]
    counted = await client.enqueue_many_copy(
        [{"n": 4}, {"n": 5}], kind=KIND, queue=QUEUE, partition_key="globex"
    )
    assert counted == 2
    # Without a partition key anywhere, COPY does not send the column.
    assert await client.enqueue_many_copy([{"n": 6}], kind=KIND, queue=QUEUE) == 1
    keys = list((await stored_keys(conn)).values())
    assert keys == [ODD_KEY, "acme", None, "globex", "globex", None]
    for job in copied:
        assert (await client.get_job(job.id)).partition_key == job.partition_key


async def test_a_partition_key_commits_with_a_transaction(client, conn):
    async with client.transaction() as tx:
        one = await tx.insert({"n": 1}, kind=KIND, queue=QUEUE, partition_key="acme")
        many = await tx.insert_many([{"n": 2}], kind=KIND, queue=QUEUE, partition_key="globex")
        copied = await tx.insert_many_copy(
            [{"n": 3}], kind=KIND, queue=QUEUE, partition_key="initech"
        )
    assert [job.partition_key for job in [one, *many, *copied]] == ["acme", "globex", "initech"]
    assert list((await stored_keys(conn)).values()) == ["acme", "globex", "initech"]


async def partition_lanes(conn) -> list[tuple[str, int, str]]:
    rows = await conn.fetch(
        "SELECT queue, priority, partition_key FROM awa.lanes"
        " WHERE partition_key <> '' ORDER BY 1, 2, 3"
    )
    return [tuple(row) for row in rows]


async def test_a_copy_opens_its_partitions_lanes_and_then_the_trigger_opens_them_again(
    client, conn
):
    """A COPY opens its rows' partition lanes in one statement before it
    writes, and the insert trigger skips its rows; any insert after it in
    the same transaction (SQL of one's own included) opens its own."""
    async with conn.transaction():
        await client.enqueue_many_copy(
            [{}] * 4,
            kind=KIND,
            queue=QUEUE,
            opts=[{"partition_key": "acme"}, {"partition_key": "globex", "priority": 1}] * 2,
            connection=conn,
        )
        await conn.execute(
            "INSERT INTO awa.jobs (kind, queue, partition_key) VALUES ($1, $2, 'initech')",
            KIND,
            QUEUE,
        )
    assert await partition_lanes(conn) == [
        (QUEUE, 1, "globex"),
        (QUEUE, 2, "acme"),
        (QUEUE, 2, "initech"),
    ]
    done: list[str] = []

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def sync(job):
        done.append(job.partition_key)

    await client.configure_queue(QUEUE, fair=True)
    await client.start([(QUEUE, 2)], **FAST_WORKER)

    async def all_done() -> bool:
        return len(done) == 5

    await eventually(all_done)
    assert sorted(done) == ["acme", "acme", "globex", "globex", "initech"]


async def test_a_back_dated_job_of_a_partition_is_inserted_and_runs(client, conn):
    """An available job keyed before the insert's enqueue time lowers its
    lanes (awa.lower_lane_v2: the whole lane and its partition's); a worker
    then takes it like any other."""
    done: list[int] = []

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def sync(job):
        done.append(job.id)

    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    first = await client.insert({"n": 1}, kind=KIND, partition_key="acme")
    await client.start([(QUEUE, 2)], **FAST_WORKER)
    await wait_for_state(conn, first.id, "completed")
    late = await client.insert({"n": 2}, kind=KIND, partition_key="acme", run_at=past)
    other = await client.insert_many([{"n": 3}], kind=KIND, partition_key="globex", run_at=past)
    assert late.state is awa.JobState.Available
    for job in [late, *other]:
        await wait_for_state(conn, job.id, "completed")
    assert sorted(done) == [first.id, late.id, other[0].id]


async def test_a_handler_sees_its_jobs_partition_key_and_rate_class(client, conn):
    """The claim returns both, so a handler can tell which tenant it serves."""
    seen: dict[int, tuple[str | None, str | None]] = {}

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def sync(job):
        seen[job.id] = (job.partition_key, job.rate_class)

    keyed = await client.insert({}, kind=KIND, partition_key="acme", rate_class="mail")
    plain = await client.insert({}, kind=KIND)
    await client.start([(QUEUE, 2)], **FAST_WORKER)
    for job in (keyed, plain):
        await wait_for_state(conn, job.id, "completed")
    assert seen == {keyed.id: ("acme", "mail"), plain.id: (None, None)}


async def test_follow_ups_keep_their_partition_key(client, conn):
    @client.task(Signup, queue=QUEUE)
    async def signup(job):
        job.enqueue_on_completion(WelcomeEmail(user_id=job.args.user_id), partition_key="acme")

    @client.task(WelcomeEmail, queue=QUEUE)
    async def welcome(job):
        return None

    client.on_completed_enqueue_with(
        Signup,
        lambda args, job: awa.EnqueueRequest(WelcomeEmail(user_id=-args.user_id)).with_opts(
            queue=QUEUE, partition_key="globex"
        ),
    )
    trigger = await client.insert(Signup(user_id=7))
    await client.start([(QUEUE, 2)], **FAST_WORKER)
    await wait_for_state(conn, trigger.id, "completed")

    async def both_follow_ups() -> list[Any]:
        rows = await conn.fetch(
            "SELECT args, partition_key FROM awa.jobs WHERE kind = 'welcome_email' ORDER BY id"
        )
        return rows if len(rows) == 2 else []

    rows = await eventually(both_follow_ups)
    assert {row["partition_key"] for row in rows} == {"acme", "globex"}


async def test_a_jobs_rate_class_is_on_the_job_from_insert_get_job_and_list_jobs(client):
    @client.task(dict, kind="synced", queue=QUEUE, rate_class="partner-api")
    async def synced(job):
        return None

    from_task = await client.insert({}, kind="synced")
    overridden = await client.insert({}, kind="synced", rate_class="other-api")
    [many] = await client.insert_many([{}], kind="synced")
    [copied] = await client.insert_many_copy([{}], kind="synced", rate_class="bulk-api")
    unclassed = await client.insert({}, kind="plain", queue=QUEUE)
    expected = {
        from_task.id: "partner-api",
        overridden.id: "other-api",
        many.id: "partner-api",
        copied.id: "bulk-api",
        unclassed.id: None,
    }
    inserted = [from_task, overridden, many, copied, unclassed]
    assert {job.id: job.rate_class for job in inserted} == expected
    for job_id, rate_class in expected.items():
        assert (await client.get_job(job_id)).rate_class == rate_class
    listed = await client.list_jobs(queue=QUEUE)
    assert {job.id: job.rate_class for job in listed} == expected


# ── refusals ────────────────────────────────────────────────────────────

BAD_KEYS = [
    pytest.param("", "partition_key: must not be empty", id="empty"),
    pytest.param(
        "k" * 256, "partition_key: must be at most 255 characters (got 256)", id="256-chars"
    ),
    pytest.param(
        "tenant\n7",
        "partition_key: must not contain control characters (U+000A at character 6)",
        id="newline",
    ),
    pytest.param(
        "a\x00b",
        "partition_key: must not contain control characters (U+0000 at character 1)",
        id="nul",
    ),
    pytest.param(7, "partition_key: must be a string (got int)", id="int"),
    pytest.param(b"acme", "partition_key: must be a string (got bytes)", id="bytes"),
]

Insert = Callable[[awa.AsyncClient, Any], Awaitable[Any]]


async def _insert(client: awa.AsyncClient, key: Any) -> Any:
    return await client.insert({}, kind=KIND, queue=QUEUE, partition_key=key)


async def _insert_many(client: awa.AsyncClient, key: Any) -> Any:
    return await client.insert_many([{}], kind=KIND, queue=QUEUE, partition_key=key)


async def _insert_many_per_job(client: awa.AsyncClient, key: Any) -> Any:
    return await client.insert_many(
        [{}, {}], kind=KIND, queue=QUEUE, opts=[None, {"partition_key": key}]
    )


async def _insert_many_copy(client: awa.AsyncClient, key: Any) -> Any:
    return await client.insert_many_copy([{}], kind=KIND, queue=QUEUE, partition_key=key)


async def _enqueue_many_copy(client: awa.AsyncClient, key: Any) -> Any:
    return await client.enqueue_many_copy(
        [{}, {}], kind=KIND, queue=QUEUE, opts=[None, {"partition_key": key}]
    )


async def _in_transaction(client: awa.AsyncClient, key: Any) -> Any:
    async with client.transaction() as tx:
        return await tx.insert({}, kind=KIND, queue=QUEUE, partition_key=key)


#: Each insert path, and the position a batch's error names (``None``: none).
PATHS = [
    pytest.param(_insert, None, id="insert"),
    pytest.param(_insert_many, 0, id="insert_many"),
    pytest.param(_insert_many_per_job, 1, id="insert_many-opts"),
    pytest.param(_insert_many_copy, 0, id="insert_many_copy"),
    pytest.param(_enqueue_many_copy, 1, id="enqueue_many_copy-opts"),
    pytest.param(_in_transaction, None, id="transaction"),
]


@pytest.mark.parametrize(("key", "message"), BAD_KEYS)
@pytest.mark.parametrize(("path", "position"), PATHS)
async def test_a_bad_partition_key_is_refused_on_every_insert_path(
    client, conn, path: Insert, position: int | None, key: Any, message: str
):
    with pytest.raises(awa.ValidationError) as caught:
        await path(client, key)
    prefix = "" if position is None else f"jobs[{position}]."
    assert str(caught.value) == prefix + message
    assert caught.value.field == "partition_key"
    assert caught.value.__cause__ is None
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_every_character_the_databases_check_calls_control_is_refused_before_sql(
    client, conn
):
    """The core refuses at least what ``awa.jobs``'s check (``[[:cntrl:]]``,
    in this database's locale) would: no key reaches a constraint error."""
    controls = await conn.fetchval(
        "SELECT array_agg(cp ORDER BY cp) FROM generate_series(1, 1114111) AS cp "
        "WHERE (cp < 55296 OR cp > 57343) AND chr(cp) ~ '[[:cntrl:]]'"
    )
    assert controls, "the check must refuse something"
    for code_point in controls:
        with pytest.raises(awa.ValidationError, match=r"^partition_key: must not contain"):
            await _insert(client, f"t{chr(code_point)}")
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_a_bad_partition_key_is_refused_when_a_handler_stages_it(client, conn):
    refused: asyncio.Future[awa.StagingError] = asyncio.get_running_loop().create_future()

    @client.task(dict, kind=KIND, queue=QUEUE)
    async def sync(job):
        try:
            job.enqueue_on_completion({}, kind="welcome", partition_key="a\tb")
        except awa.StagingError as error:
            refused.set_result(error)

    trigger = await client.insert({}, kind=KIND)
    await client.start([(QUEUE, 1)], **FAST_WORKER)
    error = await asyncio.wait_for(refused, 15)
    assert str(error) == (
        "partition_key: must not contain control characters (U+0009 at character 1)"
    )
    assert error.field == "partition_key"
    # A refused follow-up fails its attempt for good, caught or not.
    await wait_for_state(conn, trigger.id, "failed")
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'welcome'") == 0
