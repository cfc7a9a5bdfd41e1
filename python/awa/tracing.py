"""Traces across the queue: W3C trace context from the enqueue to the handler.

Overview: when OpenTelemetry's API is installed (``awa-queue[otel]``) and a
span is current as jobs are inserted (the web request that enqueues them,
say), each job's ``metadata["trace_context"]`` gets that span's context as
the configured propagator writes it (W3C ``traceparent`` and
``tracestate`` by default). A worker whose process has a tracer provider
configured (an OpenTelemetry SDK) runs each handler inside a span,
``process <queue>`` (kind ``CONSUMER``, the messaging attributes, the job
id, kind and attempt), continued from that context: one trace runs from
the request through the job's execution, and through the follow-ups the
handler inserts. A failing handler's span records the exception.

Cost: without OpenTelemetry, or without a current span, an insert pays
one check per call, not per job; without a tracer provider, a worker pays
nothing per job (it decides once, as it starts: configure the SDK before
starting the worker).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol, TypeVar

# What this module reads of an insert's options and of a running job, as
# protocols: the insert path and the worker both import this module.


class _WithMetadata(Protocol):
    """An insert's options (``awa.inserts.InsertOpts``, a dataclass)."""

    @property
    def metadata(self) -> Any: ...


class _Attempt(Protocol):
    """A running job (``awa.RunningJob``)."""

    @property
    def id(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...


Options = TypeVar("Options", bound=_WithMetadata)

#: The metadata key holding a job's trace context.
TRACE_KEY: Final = "trace_context"

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - the otel extra is not installed
    trace = None  # type: ignore[assignment]


def current_carrier() -> dict[str, str] | None:
    """The current span's context as propagation headers, or None when no
    span is recording (or OpenTelemetry is not installed)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def with_trace_context(options: Options | list[Options]) -> Options | list[Options]:
    """``options`` with the current trace context in each job's metadata
    (as they were when no span is current)."""
    carrier = current_carrier()
    if carrier is None:
        return options
    if not isinstance(options, list):
        return _traced(options, carrier)
    made: dict[int, Options] = {}
    traced = []
    for option in options:
        # Jobs sharing one options object share one traced copy.
        copy = made.get(id(option))
        if copy is None:
            copy = made[id(option)] = _traced(option, carrier)
        traced.append(copy)
    return traced


def _traced(options: Options, carrier: dict[str, str]) -> Options:
    metadata = options.metadata
    if metadata is not None and not isinstance(metadata, dict):
        return options  # the core refuses it, naming the field
    traced = {**(metadata or {}), TRACE_KEY: carrier}
    return dataclasses.replace(options, metadata=traced)  # type: ignore[type-var]


def worker_tracer() -> Any:
    """The tracer handler spans go to, or None when OpenTelemetry is not
    installed or no tracer provider was configured (the API's default
    proxy with nothing behind it): then handlers run without spans."""
    if trace is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return trace.get_tracer("awa")


@contextlib.contextmanager
def job_span(tracer: Any, job: _Attempt) -> Iterator[None]:
    """The handler's span, a child of the context the job was inserted in."""
    carrier = job.metadata.get(TRACE_KEY)
    parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
    attributes = {
        "messaging.system": "awa",
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "awa.job.kind": job.kind,
        "awa.job.attempt": job.attempt,
    }
    with tracer.start_as_current_span(
        f"process {job.queue}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ):
        yield
