"""Benchmarks of awa._core's hot paths; `make bench` times them.

The normal suite runs them once, untimed (``--benchmark-disable``), so each
one also checks its result and the benchmark code cannot rot.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pydantic
from pytest_benchmark.fixture import BenchmarkFixture

from awa import _core
from awa.inserts import InsertOpts

NOW_US = 1_796_056_431_000_000  # 2026-11-30T16:33:51Z
NOW_S = 1_000.0

TYPICAL_ARGS: dict[str, Any] = {
    "user_id": 123_456,
    "email": "someone@example.com",
    "subject": "Your order has shipped",
    "order": {"id": "ord_9f8e7d", "total": 149.95, "currency": "EUR"},
    "items": [{"sku": f"SKU-{i}", "quantity": i + 1} for i in range(5)],
    "urgent": False,
    "note": None,
}


class ShipmentEmail(pydantic.BaseModel):
    user_id: int
    email: str
    subject: str
    shipped_at: datetime.datetime
    items: list[str]


SHIPMENT = ShipmentEmail(
    user_id=123_456,
    email="someone@example.com",
    subject="Your order has shipped",
    shipped_at=datetime.datetime(2026, 11, 30, 16, 33, tzinfo=datetime.UTC),
    items=[f"SKU-{i}" for i in range(5)],
)


class ShipmentUpdate(pydantic.BaseModel):
    """A model with unset optional fields: pydantic writes them as ``null``."""

    user_id: int
    ratio: float
    carrier: str | None = None
    delivered_at: datetime.datetime | None = None
    notes: list[str] = []


UPDATE = ShipmentUpdate(user_id=123_456, ratio=0.25)


def jsonb_text(value: object) -> str:
    """``value`` as PostgreSQL prints a jsonb column (``", "`` and ``": "``)."""
    return json.dumps(value, ensure_ascii=False)


#: What a worker reads back for a job with a larger payload: 200 records of
#: text (some escaped), ints, floats, booleans and nulls, about 30 KB.
LARGE_DOCUMENT: dict[str, Any] = {
    "batch": "import-2026-11-30",
    "records": [
        {
            "id": i,
            "sku": f"SKU-{i:05d}",
            "title": f'Item «{i}» "quoted"\tand tabbed',
            "price": i * 1.25,
            "stock": None if i % 7 == 0 else i * 3,
            "active": i % 2 == 0,
            "tags": ["a", "b", "ü"],
            "ledger": 10**30 + i,
        }
        for i in range(200)
    ],
}


OPTIONS = InsertOpts(
    kind="send_email",
    queue="email",
    max_crashes=5,
    max_crashes_from_queue=False,
    tags=["shipping"],
    metadata={"trace": "t"},
)


def as_given(
    args: object, kind: object, queue: object
) -> tuple[object, object, None, None, None, None]:
    return kind, queue, None, None, None, None


def add_job(rows: _core.InsertRows, args: object) -> None:
    rows.add_many([args], OPTIONS, as_given, now_us=NOW_US)


def test_bench_encode_typical_args(benchmark: BenchmarkFixture) -> None:
    encoded = benchmark(_core.encode_json, TYPICAL_ARGS)
    assert _core.decode_json(encoded) == TYPICAL_ARGS


def test_bench_encode_pydantic_model(benchmark: BenchmarkFixture) -> None:
    encoded = benchmark(_core.encode_json, SHIPMENT)
    assert ShipmentEmail.model_validate_json(encoded) == SHIPMENT


def test_bench_encode_pydantic_model_with_nulls(benchmark: BenchmarkFixture) -> None:
    encoded = benchmark(_core.encode_json, UPDATE)
    assert ShipmentUpdate.model_validate_json(encoded) == UPDATE


def test_bench_encode_large_document(benchmark: BenchmarkFixture) -> None:
    encoded = benchmark(_core.encode_json, LARGE_DOCUMENT)
    assert json.loads(encoded) == LARGE_DOCUMENT


def test_bench_decode_typical_args(benchmark: BenchmarkFixture) -> None:
    text = _core.encode_json(TYPICAL_ARGS)
    assert benchmark(_core.decode_json, text) == TYPICAL_ARGS


def test_bench_decode_typical_args_as_jsonb_prints_them(benchmark: BenchmarkFixture) -> None:
    text = jsonb_text(TYPICAL_ARGS)
    assert benchmark(_core.decode_json, text) == TYPICAL_ARGS


def test_bench_decode_large_document(benchmark: BenchmarkFixture) -> None:
    text = jsonb_text(LARGE_DOCUMENT)
    assert benchmark(_core.decode_json, text) == LARGE_DOCUMENT


def test_bench_insert_rows_add_one_job(benchmark: BenchmarkFixture) -> None:
    def add_one() -> _core.InsertRows:
        rows = _core.InsertRows(1)
        add_job(rows, TYPICAL_ARGS)
        return rows

    rows = benchmark(add_one)
    assert len(rows) == 1


def test_bench_insert_rows_add_1000_models_in_one_call(benchmark: BenchmarkFixture) -> None:
    models = [SHIPMENT] * 1_000

    def add_all() -> _core.InsertRows:
        rows = _core.InsertRows(1_000)
        rows.add_many(models, OPTIONS, as_given, now_us=NOW_US, batch=True)
        return rows

    rows = benchmark(add_all)
    assert len(rows) == 1_000


def test_bench_copy_text_for_1000_rows(benchmark: BenchmarkFixture) -> None:
    rows = _core.InsertRows(1_000)
    rows.add_many([TYPICAL_ARGS] * 1_000, OPTIONS, as_given, now_us=NOW_US, batch=True)
    text = benchmark(rows.copy_text, NOW_US)
    lines = text.decode().splitlines()
    assert len(lines) == 1_000
    assert all(line.count("\t") == len(rows.copy_columns()) - 1 for line in lines)


def test_bench_completion_batch_1000_outcomes(benchmark: BenchmarkFixture) -> None:
    batch = _core.CompletionBatch(1_000, 0.001, 7)

    def push_and_take() -> tuple[list[Any], ...]:
        for job_id in range(1_000):
            if job_id % 10 == 0:
                batch.record(
                    job_id, 1, 1, 25, 0, "failed", NOW_S, None, "ValueError", "boom", "Traceback …"
                )
            else:
                batch.record(job_id, 1, 1, 25, 0, "completed", NOW_S)
        assert batch.is_due(NOW_S)
        return batch.take().params()

    ids, _leases, states, _delays, _refunds, errors = benchmark(push_and_take)
    assert len(ids) == 1_000
    assert states.count("retryable") == 100
    assert sum(error is not None for error in errors) == 100
    assert len(batch) == 0


def test_bench_dispatch_cycle_for_100_jobs(benchmark: BenchmarkFixture) -> None:
    dispatcher = _core.Dispatcher([("email", 50), ("default", 50)], claim_batch_max=100)

    def cycle() -> int:
        dispatcher.mark_all_ready()
        plan = dispatcher.plan_claim()
        assert plan is not None
        plan_id, queues, counts = plan
        job_id = 0
        for queue, count in zip(queues, counts, strict=True):
            for _ in range(count):
                job_id += 1
                dispatcher.start(plan_id, job_id, 1, queue)
        dispatcher.settle_claim(plan_id)
        held = len(dispatcher)
        for finished in range(1, job_id + 1):
            dispatcher.finish(finished)
        return held

    assert benchmark(cycle) == 100
    assert len(dispatcher) == 0
