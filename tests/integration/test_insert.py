"""Inserting through the client: every path, the options, and transactions."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import math

import asyncpg
import pytest
from pydantic import BaseModel, Field

import awa
from awa.worker.notifier import CHANNEL
from tests.support import FAST_WORKER, wait_for_state

UTC = datetime.UTC


class SendEmail(BaseModel):
    to: str
    subject: str = "hi"


class SMTPEmail(BaseModel):
    to: str


@dataclasses.dataclass
class ResizeImage:
    path: str
    width: int


class Aliased(BaseModel):
    user_id: int = Field(alias="userId")


async def test_insert_returns_the_committed_job(client):
    job = await client.insert(SendEmail(to="a@b.c"), priority=1, tags=["t1"], metadata={"m": 1})
    assert isinstance(job, awa.Job)
    assert job.id > 0
    assert job.kind == "send_email"
    assert job.queue == "default"
    assert job.state is awa.JobState.Available
    assert (job.priority, job.attempt, job.max_attempts) == (1, 0, 25)
    assert job.tags == ["t1"]
    assert job.metadata == {"m": 1}
    assert job.errors == []
    assert job.created_at.tzinfo is not None and job.run_at.tzinfo is not None
    assert job.finalized_at is None
    fetched = await client.get_job(job.id, include_payload=True)
    assert fetched.args == {"to": "a@b.c", "subject": "hi"}  # no task registered: a dict


async def test_kind_comes_from_the_registered_task_or_the_class_name(client):
    @client.task(SendEmail, queue="email")
    async def send(job):
        return None

    registered = await client.insert(SendEmail(to="x"))
    assert (registered.kind, registered.queue) == ("send_email", "email")
    assert registered.args == SendEmail(to="x")
    explicit = await client.insert({"a": 1}, kind="custom", queue="other")
    assert (explicit.kind, explicit.queue, explicit.args) == ("custom", "other", {"a": 1})
    named = await client.insert(SMTPEmail(to="y"), kind="smtp_email")
    assert (named.kind, named.queue) == ("smtp_email", "default")


async def test_a_model_no_task_handles_is_refused_by_a_client_with_tasks(client):
    @client.task(SendEmail, queue="email")
    async def send(job):
        return None

    with pytest.raises(awa.ValidationError, match="no task is registered for SMTPEmail") as raised:
        await client.insert(SMTPEmail(to="y"))
    assert raised.value.field == "kind"
    assert await client.count_by_state() == {}


async def test_a_producer_without_tasks_derives_the_kind_from_the_class_name(database_url):
    async with awa.AsyncClient(database_url) as producer:
        derived = await producer.insert(SMTPEmail(to="y"))
    assert (derived.kind, derived.queue) == ("smtp_email", "default")


async def test_a_dict_for_a_registered_model_is_validated_before_sql(client):
    @client.task(SendEmail, queue="email")
    async def send(job):
        return None

    with pytest.raises(awa.ValidationError) as raised:
        await client.insert({"to": 5, "extra": 1}, kind="send_email")
    assert raised.value.field == "args.to"
    assert "do not validate as SendEmail, the arguments of kind 'send_email'" in str(raised.value)
    assert "args.to: Input should be a valid string" in str(raised.value)
    with pytest.raises(awa.ValidationError, match=r"^jobs\[1\]\.args: do not validate") as batch:
        await client.insert_many([{"to": "a"}, {}], kind="send_email")
    assert batch.value.field == "args.to"
    assert await client.count_by_state() == {}
    good = await client.insert({"to": "z"}, kind="send_email")
    assert good.args == {"to": "z"}  # decoded as given; the worker decodes it as SendEmail


async def test_dataclass_and_alias_arguments_round_trip(client):
    @client.task(ResizeImage)
    def resize(job):
        return None

    @client.task(Aliased, kind="aliased")
    async def aliased(job):
        return None

    job = await client.insert(ResizeImage(path="/a.png", width=10))
    assert job.kind == "resize_image"
    assert (await client.get_job(job.id, include_payload=True)).args == ResizeImage(
        path="/a.png", width=10
    )
    model = await client.insert(Aliased(userId=7))
    assert json.loads(model.args_json) == {"userId": 7}
    assert (await client.get_job(model.id, include_payload=True)).args.user_id == 7


async def test_inserted_jobs_decode_their_args_as_they_were_given(client):
    # No task for send_email or resize_image: the jobs still hold the types
    # inserted (a Job[SendEmail] whose args were a dict would be a lie).
    email = await client.insert(SendEmail(to="a@b.c"))
    image = await client.insert(ResizeImage(path="/a.png", width=10))
    assert (email.args, image.args) == (SendEmail(to="a@b.c"), ResizeImage("/a.png", 10))
    many = await client.insert_many([SendEmail(to="b@c.d"), SendEmail(to="c@d.e")])
    copied = await client.insert_many_copy([ResizeImage(path="/b.png", width=20)])
    assert [job.args for job in many] == [SendEmail(to="b@c.d"), SendEmail(to="c@d.e")]
    assert [job.args for job in copied] == [ResizeImage(path="/b.png", width=20)]


async def test_a_dict_inserted_for_a_model_task_stays_a_dict(client):
    @client.task(SendEmail)
    async def send(job):
        return None

    job = await client.insert({"to": "a@b.c"}, kind="send_email")
    assert job.args == {"to": "a@b.c"}
    [copied] = await client.insert_many_copy([{"to": "b@c.d"}], kind="send_email")
    assert copied.args == {"to": "b@c.d"}
    # What a worker hands the handler, and get_job without args_type, follow the task.
    read = await client.get_job(job.id, include_payload=True)
    assert read.args == SendEmail(to="a@b.c", subject="hi")


async def test_a_batch_giving_one_kind_args_of_two_types_decodes_it_as_its_task_says(client):
    @client.task(SendEmail)
    async def send(job):
        return None

    jobs = await client.insert_many(
        [SendEmail(to="a@b.c"), {"to": "b@c.d"}, SMTPEmail(to="c@d.e")],
        opts=[None, {"kind": "send_email"}, {"kind": "smtp_email"}],
    )
    assert [job.args for job in jobs] == [
        SendEmail(to="a@b.c"),
        SendEmail(to="b@c.d"),
        SMTPEmail(to="c@d.e"),
    ]


async def test_a_dict_without_kind_is_refused(client):
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert({"a": 1})
    assert raised.value.field == "kind"


async def test_past_run_at_is_available_at_once_and_future_is_scheduled(client):
    past = await client.insert({}, kind="k", run_at=datetime.datetime(2000, 1, 1, tzinfo=UTC))
    future = await client.insert({}, kind="k", run_at=datetime.timedelta(hours=1))
    assert past.state is awa.JobState.Available
    assert past.run_at == datetime.datetime(2000, 1, 1, tzinfo=UTC)
    assert future.state is awa.JobState.Scheduled


async def test_insert_wakes_listeners_of_its_queue(client, database_url):
    listener = await asyncpg.connect(database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        await client.insert({}, kind="k", queue="wake-me")
        assert await asyncio.wait_for(heard.get(), 5) == "wake-me"
        await client.insert({}, kind="k", queue="later", run_at=datetime.timedelta(hours=1))
        await client.insert({}, kind="k", queue="again")
        assert await asyncio.wait_for(heard.get(), 5) == "again"  # nothing for "later"
    finally:
        await listener.close()


async def test_rolled_back_transaction_leaves_no_job(client, conn, database_url):
    async with _connect(database_url) as own:
        await own.execute("CREATE TABLE IF NOT EXISTS signup (email text)")
        try:
            async with own.transaction():
                await own.execute("INSERT INTO signup VALUES ('a@b.c')")
                await client.insert(SendEmail(to="a@b.c"), connection=own)
                raise RuntimeError("the request failed")
        except RuntimeError:
            pass
        async with own.transaction():
            await own.execute("INSERT INTO signup VALUES ('d@e.f')")
            kept = await client.insert(SendEmail(to="d@e.f"), connection=own)
        emails = [row[0] for row in await own.fetch("SELECT email FROM signup")]
        await own.execute("DROP TABLE signup")
    assert emails == ["d@e.f"]
    assert await conn.fetchval("SELECT array_agg(id) FROM awa.jobs") == [kept.id]


async def test_jobs_inserted_in_an_open_transaction_are_invisible_until_commit(
    client, conn, database_url
):
    async with _connect(database_url) as own:
        transaction = own.transaction()
        await transaction.start()
        job = await client.insert({}, kind="k", connection=own)
        assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0
        await transaction.commit()
    assert await conn.fetchval("SELECT id FROM awa.jobs") == job.id


async def test_insert_many_is_one_statement_and_keeps_order(client):
    jobs = await client.insert_many(
        [SendEmail(to=f"{i}@x") for i in range(5)],
        queue="bulk",
        opts=[None, {"priority": 1}, None, {"queue": "other", "tags": ["t"]}, None],
    )
    assert [job.args.to for job in jobs] == [f"{i}@x" for i in range(5)]
    assert [job.priority for job in jobs] == [2, 1, 2, 2, 2]
    assert [job.queue for job in jobs] == ["bulk", "bulk", "bulk", "other", "bulk"]
    assert jobs[3].tags == ["t"]
    assert await client.insert_many([]) == []


async def test_insert_many_validates_everything_before_writing(client, conn):
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert_many(
            [{"a": 1}, {"a": 2}, {"a": 3}], kind="k", opts=[None, None, {"priority": 9}]
        )
    assert raised.value.field == "priority"
    assert "jobs[2]" in str(raised.value)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_jobs_with_equal_overrides_get_their_values_and_true_is_not_one(client, conn):
    """Equal per-job overrides share one options object; a value's type is
    part of what is equal (True is refused as a priority, 1 is not)."""
    same = {"priority": 1, "queue": "q1"}
    jobs = await client.insert_many(
        [{"a": i} for i in range(6)],
        kind="k",
        opts=[same, {"queue": "q1", "priority": 1}, {"priority": 3}, None, dict(same),
              {"priority": 3}],
    )  # fmt: skip
    assert [(job.priority, job.queue) for job in jobs] == [
        (1, "q1"), (1, "q1"), (3, "default"), (2, "default"), (1, "q1"), (3, "default"),
    ]  # fmt: skip
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert_many(
            [{"a": 1}] * 4,
            kind="k",
            opts=[{"priority": 1}, {"priority": True}, {"priority": True}, None],
        )
    assert raised.value.field == "priority"
    assert "jobs[1]" in str(raised.value)
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 6


async def test_unknown_per_job_options_are_refused(client):
    with pytest.raises(awa.ValidationError) as raised:
        await client.insert_many([{"a": 1}], kind="k", opts=[{"prio": 1}])
    assert raised.value.field == "opts[0]"


async def test_an_unknown_option_is_refused_by_name_with_a_suggestion(client, conn):
    with pytest.raises(awa.ValidationError, match=r"\['priorty'\] \(did you mean 'priority'\?\)"):
        await client.insert({"a": 1}, kind="k", priorty=1)  # type: ignore[call-arg]
    with pytest.raises(awa.ValidationError, match="unique_opts: COPY cannot skip duplicates"):
        await client.enqueue_many_copy([{"a": 1}], kind="k", unique_opts={})  # type: ignore[call-arg]
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_a_batch_of_mixed_argument_types_resolves_each_type_and_overrides(client):
    @client.task(SendEmail, queue="email")
    async def send(job):
        return None

    @client.task(ResizeImage, queue="images")
    async def resize(job):
        return None

    jobs = await client.insert_many(
        [SendEmail(to="a"), ResizeImage("p", 1), {"to": "b"}, SendEmail(to="c")],
        opts=[None, {"priority": 1}, {"kind": "send_email", "tags": ["dict"]}, {"queue": "vip"}],
        max_attempts=3,
    )
    assert [(j.kind, j.queue, j.priority, j.max_attempts, j.tags) for j in jobs] == [
        ("send_email", "email", 2, 3, []),
        ("resize_image", "images", 1, 3, []),
        ("send_email", "email", 2, 3, ["dict"]),
        ("send_email", "vip", 2, 3, []),
    ]
    # One kind given arguments of two types decodes as its task says.
    assert jobs[0].args == SendEmail(to="a") and jobs[2].args == SendEmail(to="b")


async def test_insert_many_copy_returns_its_own_jobs_when_other_inserts_take_ids_meanwhile(
    client, database_url
):
    # The COPY's jobs are read back by the range of the ids it reserved; jobs
    # other sessions insert while the ids are drawn land inside that range.
    other = await asyncpg.connect(database_url)
    interleaved: list[int] = []
    try:
        for _attempt in range(5):
            stop = asyncio.Event()

            async def insert_others(stop: asyncio.Event) -> list[int]:
                ids = []
                while not stop.is_set():
                    ids.append(
                        await other.fetchval(
                            "INSERT INTO awa.jobs (kind) VALUES ('other') RETURNING id"
                        )
                    )
                return ids

            inserting = asyncio.create_task(insert_others(stop))
            await asyncio.sleep(0.01)
            jobs = await client.insert_many_copy([{"n": i} for i in range(20_000)], kind="mine")
            stop.set()
            others = await inserting
            ids = [job.id for job in jobs]
            interleaved = [i for i in others if ids[0] < i < ids[-1]]
            assert [job.args["n"] for job in jobs] == list(range(20_000))
            assert {job.kind for job in jobs} == {"mine"}
            if interleaved:
                break
    finally:
        await other.close()
    assert interleaved, "no other insert took an id inside the COPY's range in 5 tries"


async def test_insert_many_copy_returns_the_jobs(client):
    run_at = datetime.datetime.now(UTC) + datetime.timedelta(hours=1)
    jobs = await client.insert_many_copy(
        [{"n": i, "text": "tab\there\nnewline \\ backslash"} for i in range(3)],
        kind="copied",
        tags=["a", 'quo"te'],
        metadata={"source": "copy"},
        opts=[None, {"run_at": run_at}, {"priority": 4}],
    )
    assert [job.args["n"] for job in jobs] == [0, 1, 2]
    assert jobs[0].args["text"] == "tab\there\nnewline \\ backslash"
    assert jobs[0].tags == ["a", 'quo"te']
    assert jobs[0].metadata == {"source": "copy"}
    assert [job.state for job in jobs] == [
        awa.JobState.Available,
        awa.JobState.Scheduled,
        awa.JobState.Available,
    ]
    assert jobs[1].run_at == run_at
    assert jobs[2].priority == 4


async def test_enqueue_many_copy_counts_and_notifies(client, conn, database_url):
    listener = await asyncpg.connect(database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        count = await client.enqueue_many_copy(
            [{"i": i} for i in range(1000)], kind="bulk", queue="copyq"
        )
        assert count == 1000
        assert await asyncio.wait_for(heard.get(), 5) == "copyq"
    finally:
        await listener.close()
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state = 'available'") == 1000


async def test_copy_inside_a_caller_transaction_rolls_back_with_it(client, conn, database_url):
    async with _connect(database_url) as own:
        try:
            async with own.transaction():
                await client.enqueue_many_copy([{"i": 1}], kind="k", connection=own)
                raise RuntimeError
        except RuntimeError:
            pass
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


class _connect:
    """``async with _connect(url) as connection``: a plain asyncpg connection."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __aenter__(self) -> asyncpg.Connection:
        self.connection = await asyncpg.connect(self.url)
        return self.connection

    async def __aexit__(self, *_exc: object) -> None:
        await self.connection.close()


async def test_a_caller_owned_pool_serves_inserts_and_a_worker(database_url, conn):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=8)
    try:
        async with awa.AsyncClient(pool=pool) as client:

            @client.task(SendEmail)
            async def send(job):
                return None

            job = await client.insert(SendEmail(to="p@q.r"))
            assert client.database_url is None
            await client.start([("default", 2)], poll_interval=0.1)
            await wait_for_state(conn, job.id, "completed")
            await client.shutdown()
        # Closing the client leaves the caller's pool open.
        assert await pool.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_a_pool_too_small_for_a_worker_is_explained(database_url):
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        async with awa.AsyncClient(pool=pool) as client:

            @client.task(SendEmail)
            async def send(job):
                return None

            with pytest.raises(awa.ConfigurationError, match="needs 5"):
                await client.start()
    finally:
        await pool.close()


def test_a_url_and_a_pool_together_are_refused():
    with pytest.raises(awa.ConfigurationError):
        awa.AsyncClient("postgresql://x", pool=object())  # type: ignore[arg-type]


async def test_max_crashes_defaults_to_the_queues_then_to_five(client):
    client.set_queue_defaults("risky", max_crashes=1)
    client.set_queue_defaults("patient", max_crashes=None)
    risky = await client.insert({}, kind="k", queue="risky")
    patient = await client.insert({}, kind="k", queue="patient")
    plain = await client.insert({}, kind="k", queue="other")
    explicit = await client.insert({}, kind="k", queue="risky", max_crashes=3)
    [copied] = await client.insert_many_copy([{}], kind="k", queue="risky")
    assert [j.max_crashes for j in (risky, patient, plain, explicit, copied)] == [1, None, 5, 3, 1]
    with pytest.raises(awa.ConfigurationError, match="max_crashes"):
        client.set_queue_defaults("risky", max_crashes=-1)


# ── timestamps are stored exactly ────────────────────────────────────────

FIRST = datetime.datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime.datetime.max.replace(tzinfo=UTC)  # 9999-12-31T23:59:59.999999Z

#: Moments over years 1–9999 whose microseconds float arithmetic loses
#: (everything outside about 1685–2255), and a few inside that range.
MOMENTS = [
    FIRST,
    datetime.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime.datetime(1500, 6, 15, 12, 30, 45, 123_457, tzinfo=UTC),
    datetime.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime.datetime(2026, 11, 30, 16, 33, 51, 123_456, tzinfo=UTC),
    datetime.datetime(2400, 2, 29, 0, 0, 0, 7, tzinfo=UTC),
    datetime.datetime(
        5000, 7, 1, 5, 30, 0, 999_999, tzinfo=datetime.timezone(datetime.timedelta(hours=5))
    ),
    LAST,
]

INSERT_PATHS = [
    "insert",
    "insert_many",
    "insert_many_copy",
    "enqueue_many_copy",
    "durable_follow_up",
    "staged_follow_up",
]


class Stamp(BaseModel):
    n: int


class Trigger(BaseModel):
    n: int


async def insert_stamps(path: str, client: awa.AsyncClient, conn: asyncpg.Connection) -> None:
    """One ``stamp`` job per moment, with that moment as run_at and deadline,
    written by ``path``."""
    jobs = [Stamp(n=n) for n in range(len(MOMENTS))]
    options = [{"run_at": moment, "deadline": moment} for moment in MOMENTS]
    if path == "insert":
        for args, opts in zip(jobs, options, strict=True):
            await client.insert(args, queue="stamps", **opts)
    elif path in ("insert_many", "insert_many_copy", "enqueue_many_copy"):
        await getattr(client, path)(jobs, queue="stamps", opts=options)
    elif path == "durable_follow_up":
        client.on_cancelled_enqueue_with(
            Trigger,
            lambda args, job, reason: awa.EnqueueRequest(
                Stamp(n=args.n), kind="stamp", queue="stamps", **options[args.n]
            ),
        )
        for n in range(len(MOMENTS)):
            trigger = await client.insert(Trigger(n=n), queue="triggers")
            await client.cancel(trigger.id)
    else:

        @client.task(Trigger, queue="triggers")
        async def stage(job: awa.Job[Trigger]) -> None:
            for args, opts in zip(jobs, options, strict=True):
                job.enqueue_on_completion(args, kind="stamp", queue="stamps", **opts)

        trigger = await client.insert(Trigger(n=0), queue="triggers")
        await client.start([("triggers", 1)], **FAST_WORKER)
        await wait_for_state(conn, trigger.id, "completed")


@pytest.mark.parametrize("path", INSERT_PATHS)
async def test_run_at_and_deadline_are_stored_to_the_microsecond_over_years_1_to_9999(
    client, conn, path
):
    await insert_stamps(path, client, conn)
    rows = await conn.fetch(
        "SELECT id, run_at, deadline_at FROM awa.jobs WHERE kind = 'stamp'"
        " ORDER BY (args ->> 'n')::int"
    )
    assert [row["run_at"] for row in rows] == MOMENTS
    assert [row["deadline_at"] for row in rows] == MOMENTS
    # The client reads every one of them back too.
    listed = await client.list_jobs(kind="stamp")
    assert sorted(job.run_at for job in listed) == sorted(MOMENTS)
    assert (await client.get_job(rows[-1]["id"])).run_at == LAST


async def test_the_latest_run_at_is_stored_and_read_back(client):
    job = await client.insert(Stamp(n=1), run_at=LAST)
    assert job.run_at == LAST
    assert job.state is awa.JobState.Scheduled
    assert [listed.run_at for listed in await client.list_jobs()] == [LAST]


async def test_a_job_with_the_latest_deadline_is_claimed_and_completes(client, conn):
    @client.task(Stamp, queue="stamps")
    async def handle(job: awa.Job[Stamp]) -> None:
        return None

    job = await client.insert(Stamp(n=1), deadline=LAST, run_at=FIRST)
    await client.start([("stamps", 1)], **FAST_WORKER)
    row = await wait_for_state(conn, job.id, "completed")
    assert row["deadline_at"] == LAST


@pytest.mark.parametrize("path", INSERT_PATHS[:4])
@pytest.mark.parametrize("option", ["run_at", "deadline"])
async def test_moments_outside_years_1_to_9999_in_utc_are_refused_before_writing(
    client, conn, path, option
):
    east = datetime.timezone(datetime.timedelta(hours=5))
    west = datetime.timezone(-datetime.timedelta(hours=5))
    for moment in (
        datetime.datetime.min.replace(tzinfo=east),  # year 0 in UTC
        datetime.datetime.max.replace(tzinfo=west),  # year 10000 in UTC
        datetime.timedelta(days=-800_000),
        datetime.timedelta.max,
    ):
        with pytest.raises(awa.ValidationError) as raised:
            if path == "insert":
                await client.insert(Stamp(n=0), **{option: moment})
            else:
                await getattr(client, path)([Stamp(n=0)], **{option: moment})
        assert raised.value.field == option
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs") == 0


async def test_jsonb_keeps_numbers_by_value_and_orders_keys(client):
    """What PostgreSQL's jsonb does on its own, as docs/operations.md tells
    ("What a payload stores, and what reads back")."""
    args = {"whole": 1e16, "huge": 1.5e300, "negzero": -0.0, "below": 1e15, "tiny": 1.5e-7}
    job = await client.insert(args, kind="k")
    stored = (await client.get_job(job.id, include_payload=True)).args
    assert list(stored) == ["huge", "tiny", "below", "whole", "negzero"]
    assert stored["whole"] == 10**16 and type(stored["whole"]) is int
    assert type(stored["huge"]) is int and float(stored["huge"]) == 1.5e300
    assert stored["negzero"] == 0.0 and math.copysign(1.0, stored["negzero"]) == 1.0
    assert stored["below"] == 1e15 and type(stored["below"]) is float
    assert stored["tiny"] == 1.5e-7
