"""Metrics, health pages and traces: what a worker counts (awa.metrics),
the Prometheus page and the OpenTelemetry instruments that read it, the
worker's /metrics, /healthz and /readyz, and a trace from the enqueue
through the handler.

Counters are per process and other tests run jobs too, so each test works
in queues of its own and compares before and after."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import awa
from awa import metrics, otel, prometheus
from awa.tracing import TRACE_KEY
from awa.worker.endpoint import Endpoint
from tests.processes import ROOT, finish_cli, kill_if_running
from tests.support import FAST_WORKER, eventually, wait_for_state

#: This tree's awa first, whichever tree the virtualenv was installed from.
PATH = (str(ROOT / "python"), str(ROOT))


def counted(name: str, queue: str, kind: str) -> int:
    return metrics.value(name, queue=queue, kind=kind)


def register_outcome_tasks(client: awa.AsyncClient, queue: str) -> None:
    """One task per outcome, all in ``queue``."""

    @client.task(dict, kind="m_ok", queue=queue)
    async def ok(job: Any) -> None:
        return None

    @client.task(dict, kind="m_fail", queue=queue)
    async def fail(job: Any) -> None:
        raise RuntimeError("always")

    @client.task(dict, kind="m_cancel", queue=queue)
    async def cancel(job: Any) -> Any:
        return awa.Cancel("not wanted")

    @client.task(dict, kind="m_snooze", queue=queue)
    async def snooze(job: Any) -> Any:
        return awa.Snooze(3600)


async def run_one_of_each(client: awa.AsyncClient, conn: Any, queue: str) -> None:
    register_outcome_tasks(client, queue)
    jobs = [
        *await client.insert_many([{}] * 3, kind="m_ok"),
        await client.insert({}, kind="m_fail", max_attempts=2),
        await client.insert({}, kind="m_cancel"),
        await client.insert({}, kind="m_snooze"),
    ]
    await client.start([(queue, 4)], **FAST_WORKER)
    for job in jobs[:3]:
        await wait_for_state(conn, job.id, "completed")
    await wait_for_state(conn, jobs[3].id, "failed", timeout=30)
    await wait_for_state(conn, jobs[4].id, "cancelled")
    await wait_for_state(conn, jobs[5].id, "scheduled")


async def test_a_worker_counts_each_outcome_by_queue_and_kind(client, conn):
    queue = "m_outcomes"
    inserted = metrics.value(metrics.JOB_INSERTED)
    await run_one_of_each(client, conn, queue)
    assert metrics.value(metrics.JOB_INSERTED) - inserted == 6

    async def all_counted() -> bool:
        return counted(metrics.JOB_SNOOZED, queue, "m_snooze") == 1

    await eventually(all_counted)
    assert counted(metrics.JOB_STARTED, queue, "m_ok") == 3
    assert counted(metrics.JOB_COMPLETED, queue, "m_ok") == 3
    # The first failed attempt had one left (retried); the second had none.
    assert counted(metrics.JOB_RETRIED, queue, "m_fail") == 1
    assert counted(metrics.JOB_FAILED, queue, "m_fail") == 1
    assert counted(metrics.JOB_STARTED, queue, "m_fail") == 2
    assert counted(metrics.JOB_CANCELLED, queue, "m_cancel") == 1
    assert counted(metrics.JOB_COMPLETED, queue, "m_cancel") == 0
    durations = [
        reading
        for reading in metrics.collect()
        if reading.name == metrics.JOB_DURATION
        and reading.labels == {"queue": queue, "kind": "m_ok"}
    ]
    [ok_durations] = durations
    assert isinstance(ok_durations, metrics.HistogramReading)
    assert ok_durations.count == 3 and ok_durations.total >= 0.0
    # Counts outlive the worker: a stopped worker's tally is kept.
    await client.shutdown()
    assert counted(metrics.JOB_COMPLETED, queue, "m_ok") == 3


async def test_the_prometheus_page_has_every_outcome_and_the_duration_histogram(client, conn):
    queue = "m_prometheus"
    await run_one_of_each(client, conn, queue)
    labels = {"queue": queue, "kind": "m_ok"}

    def samples() -> dict[str, float]:
        page = generate_latest(prometheus.registry()).decode()
        found = {}
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.labels == labels:
                    found[sample.name] = sample.value
        return found

    async def completed() -> dict[str, float] | None:
        found = samples()
        return found if found.get("awa_job_completed_total") == 3 else None

    found = await eventually(completed)
    assert found["awa_job_started_total"] == 3
    assert found["awa_job_duration_seconds_count"] == 3
    page = generate_latest(prometheus.registry()).decode()
    assert f'awa_job_failed_total{{kind="m_fail",queue="{queue}"}} 1.0' in page
    assert 'awa_job_duration_seconds_bucket{kind="m_ok",le="+Inf",queue="m_prometheus"} 3.0' in page
    assert f'awa_queue_capacity{{queue="{queue}"}} 4.0' in page
    assert "# TYPE awa_claim_batch_size histogram" in page
    assert "# TYPE awa_flush_batch_size histogram" in page
    # Label names lose their dots, as Prometheus requires.
    metrics.add(metrics.STAGED_FOLLOW_UPS_COMMITTED, **{metrics.FOLLOW_UP_RESULT: "inserted"})
    page = generate_latest(prometheus.registry()).decode()
    assert 'awa_job_staged_follow_ups_committed_total{awa_follow_up_result="inserted"}' in page


async def test_opentelemetry_reads_the_counters_and_gauges(client, conn):
    queue = "m_otel"
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    assert otel.instrument(provider, histograms=True) is True
    assert otel.instrument(provider) is False  # once per provider
    await run_one_of_each(client, conn, queue)

    def points(name: str) -> dict[tuple[tuple[str, Any], ...], float]:
        found = {}
        data = reader.get_metrics_data()
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[tuple(sorted(point.attributes.items()))] = point.value
        return found

    async def completed() -> bool:
        key = (("kind", "m_ok"), ("queue", queue))
        return points(metrics.JOB_COMPLETED).get(key) == 3

    await eventually(completed)
    assert points(metrics.QUEUE_CAPACITY)[(("queue", queue),)] == 4
    # Asked for, the histograms are recorded as they happen.
    data = reader.get_metrics_data()
    durations = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == metrics.JOB_DURATION
        for point in metric.data.data_points
        if point.attributes == {"queue": queue, "kind": "m_ok"}
    ]
    assert [point.count for point in durations] == [3]
    # (The provider stays: the histograms' observer outlives the test.)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except urllib.error.URLError:
        return 0, b"{}"  # nobody listens there (yet)


async def get_json(url: str) -> tuple[int, dict[str, Any]]:
    status, body = await asyncio.to_thread(get, url)
    return status, json.loads(body)


async def test_the_endpoint_answers_health_and_readiness_through_the_worker_life(client):
    @client.task(dict, kind="m_slow", queue="m_endpoint")
    async def slow(job: Any) -> None:
        await asyncio.sleep(30)

    served = Endpoint("127.0.0.1", 0, lambda: client.worker)
    base = f"http://127.0.0.1:{served.port}"
    try:
        assert await get_json(f"{base}/healthz") == (200, {
            "status": "starting", "reason": "the worker has not started yet"})  # fmt: skip
        status, body = await get_json(f"{base}/readyz")
        assert (status, body["status"]) == (503, "starting")
        await client.insert({}, kind="m_slow")
        await client.start([("m_endpoint", 3)], **FAST_WORKER)

        async def running_one() -> dict[str, Any] | None:
            status, body = await get_json(f"{base}/readyz")
            return body if status == 200 and body["queues"]["m_endpoint"]["running"] == 1 else None

        body = await eventually(running_one)
        report = await client.health_check()
        assert report.queues == (awa.QueueLoad("m_endpoint", 1, 3),)
        assert report.failing_services == ()
        assert body["status"] == "ok" and body["failing"] == {}
        assert body["queues"] == {"m_endpoint": {"running": 1, "capacity": 3}}
        assert body["worker_id"] == client.worker.worker_id
        status, page = await asyncio.to_thread(get, f"{base}/metrics")
        assert status == 200 and b'awa_queue_running{queue="m_endpoint"} 1.0' in page
        status, _ = await asyncio.to_thread(get, f"{base}/nowhere")
        assert status == 404
        worker = client.worker
        await client.shutdown(timeout=0.1)
        status, body = await get_json(f"{base}/readyz")
        assert (status, body["status"]) == (503, "stopping")
        status, body = await get_json(f"{base}/healthz")
        assert (status, body["status"]) == (200, "ok")
        # An unhealthy worker fails liveness as well, with its reason.
        worker.health.make_unhealthy("the test said so")
        status, body = await get_json(f"{base}/healthz")
        assert (status, body["status"], body["reason"]) == (503, "unhealthy", "the test said so")
    finally:
        served.close()


async def test_queue_depth_and_lag_come_from_the_lanes(client, conn):
    @client.task(dict, kind="m_waiting", queue="m_depth")
    async def waiting(job: Any) -> None:
        return None

    await client.pause_queue("m_depth")
    await client.insert_many([{}] * 5, kind="m_waiting", run_at=_an_hour_ago())
    await client.insert({}, kind="m_waiting", run_at=_in_an_hour())  # not due: not counted
    await client.start([("m_depth", 2)], queue_metrics_interval=0.05, **FAST_WORKER)

    async def gauges() -> dict[str, float] | None:
        found = {
            reading.name: reading.value
            for reading in metrics.collect()
            if reading.labels == {"queue": "m_depth"} and isinstance(reading, metrics.Reading)
        }
        return found if metrics.QUEUE_DEPTH in found else None

    found = await eventually(gauges)
    assert found[metrics.QUEUE_DEPTH] == 5
    assert 3590 <= found[metrics.QUEUE_LAG] <= 3700
    assert (found[metrics.QUEUE_RUNNING], found[metrics.QUEUE_CAPACITY]) == (0, 2)
    # Claimed jobs leave the count.
    await client.resume_queue("m_depth")

    async def drained() -> bool:
        depth = [
            reading.value
            for reading in metrics.collect()
            if reading.name == metrics.QUEUE_DEPTH and reading.labels == {"queue": "m_depth"}
        ]
        return depth == [0]

    await eventually(drained)


def _an_hour_ago() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)


def _in_an_hour() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)


async def test_rescues_are_counted_by_reason(client, conn):
    before = metrics.value(metrics.JOB_RESCUED, reason="callback_timeout")

    @client.task(dict, kind="m_park", queue="default")
    async def park(job: Any) -> Any:
        callback = await job.register_callback(timeout_seconds=0.2)
        return awa.WaitForCallback(callback)

    job = await client.insert({}, kind="m_park", max_attempts=1)
    await client.start([("default", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "failed", timeout=30)
    assert metrics.value(metrics.JOB_RESCUED, reason="callback_timeout") - before == 1


# ── traces ────────────────────────────────────────────────────────────────

_spans = InMemorySpanExporter()


@pytest.fixture(scope="module")
def tracing() -> InMemorySpanExporter:
    """The process's tracer provider (set once: OpenTelemetry allows one)."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_spans))
        trace.set_tracer_provider(provider)
    return _spans


async def test_a_trace_runs_from_the_enqueue_through_the_handler(client, conn, tracing):
    @client.task(dict, kind="m_traced", queue="m_traces")
    async def traced(job: Any) -> None:
        if job.args.get("fail"):
            raise ValueError("traced failure")

    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("web request") as request:
        ok = await client.insert({}, kind="m_traced")
        failing, plain = await client.insert_many(
            [{"fail": True}, {}],
            kind="m_traced",
            opts=[{"max_attempts": 1}, {"metadata": {"a": 1}}],
        )
    untraced = await client.insert({}, kind="m_traced")
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert trace_id in ok.metadata[TRACE_KEY]["traceparent"]
    assert plain.metadata["a"] == 1 and trace_id in plain.metadata[TRACE_KEY]["traceparent"]
    assert TRACE_KEY not in untraced.metadata  # no span was current

    await client.start([("m_traces", 2)], **FAST_WORKER)
    await wait_for_state(conn, failing.id, "failed")

    def handler_spans() -> dict[str, Any]:
        return {
            span.attributes["messaging.message.id"]: span
            for span in tracing.get_finished_spans()
            if span.name == "process m_traces"
        }

    async def all_ran() -> dict[str, Any] | None:
        spans = handler_spans()
        wanted = {str(job.id) for job in (ok, failing, plain, untraced)}
        return spans if wanted <= set(spans) else None

    spans = await eventually(all_ran)
    for job in (ok, failing, plain):
        span = spans[str(job.id)]
        assert span.context.trace_id == request.get_span_context().trace_id
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.attributes["awa.job.kind"] == "m_traced"
    assert spans[str(untraced.id)].parent is None  # a trace of its own
    failed = spans[str(failing.id)]
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]


# ── the command line ──────────────────────────────────────────────────────


async def test_awa_worker_serves_the_pages_on_its_metrics_port(database_url, tmp_path):
    from tests.processes import write_recording_app

    write_recording_app(tmp_path, database_url)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "worker", "--app", "procs_app:client",
        "--queue", "procs=2", "--metrics-port", "0", "--metrics-host", "127.0.0.1",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *PATH])},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        port = None
        while port is None:
            line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
            assert line, "the worker exited before serving"
            match = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            port = int(match.group(1)) if match else None

        async def ready() -> bool:
            status, _body = await get_json(f"http://127.0.0.1:{port}/readyz")
            return status == 200

        await eventually(ready, timeout=30)
        status, page = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and b'awa_queue_capacity{queue="procs"} 2.0' in page
        process.send_signal(signal.SIGTERM)
        code, err = await finish_cli(process)
    finally:
        await kill_if_running(process)
    assert code == 0, err


async def test_a_bad_or_busy_metrics_port_is_a_usage_error(database_url, tmp_path):
    from tests.integration.test_cli import run_awa
    from tests.processes import write_recording_app

    write_recording_app(tmp_path, database_url)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *PATH])}
    code, _out, err = await run_awa(
        "worker", "--app", "procs_app:client", "--metrics-port", "70000", env=env
    )
    assert code == 2 and "must be a port number from 0 to 65535" in err
    busy = Endpoint("127.0.0.1", 0, lambda: None)
    try:
        code, _out, err = await run_awa(
            "worker", "--app", "procs_app:client", "--metrics-host", "127.0.0.1",
            "--metrics-port", str(busy.port), env=env,
        )  # fmt: skip
    finally:
        busy.close()
    assert code == 2 and f"--metrics-port: cannot listen on 127.0.0.1:{busy.port}" in err


async def test_follow_ups_written_are_counted(client, conn):
    @client.task(dict, kind="m_parent", queue="m_follow")
    async def parent(job: Any) -> None:
        job.enqueue_on_completion({"staged": True}, kind="m_child", queue="m_follow_children")

    client.on_completed_enqueue_with(
        dict,
        lambda args, job: awa.EnqueueRequest(
            {"spec": True}, kind="m_child", queue="m_follow_children"
        ),
        kind="m_parent",
    )
    before = metrics.value(metrics.FOLLOW_UPS_WRITTEN)
    job = await client.insert({}, kind="m_parent")
    await client.start([("m_follow", 1)], **FAST_WORKER)
    await wait_for_state(conn, job.id, "completed")

    async def both_counted() -> bool:
        return metrics.value(metrics.FOLLOW_UPS_WRITTEN) - before == 2

    await eventually(both_counted)
    children = await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'm_child'")
    assert children == 2
