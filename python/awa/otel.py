"""awa's metrics as OpenTelemetry instruments.

Overview: :func:`instrument` registers every counter and gauge of
:data:`awa.metrics.INSTRUMENTS` as an *observable* instrument of the meter
``awa``: the SDK reads :func:`awa.metrics.collect` when it exports, so a
job costs nothing more with OpenTelemetry on. It is a no-op until an
OpenTelemetry SDK is configured (the API's global meter provider is a
proxy until then), and a worker calls it as it starts whenever the API is
installed (``awa-queue[otel]``), so configuring the SDK is all a user
does.

The histograms (handler duration, claim and flush sizes) are registered
only when asked (``instrument(histograms=True)``): the API has no
observable histogram, so each observation is recorded into the SDK as it
happens, and a job's costs the worker several microseconds
(docs/metrics.md). They are always on ``/metrics`` (Prometheus), and each
job's duration is also its span's (:mod:`awa.tracing`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from awa import metrics

try:
    from opentelemetry import metrics as otel_metrics
except ImportError:  # pragma: no cover - the otel extra is not installed
    otel_metrics = None  # type: ignore[assignment]

_lock = threading.Lock()
_instrumented: set[int] = set()


def available() -> bool:
    """Whether OpenTelemetry's API is installed."""
    return otel_metrics is not None


def instrument(meter_provider: Any = None, *, histograms: bool = False) -> bool:
    """Registers awa's counters and gauges with ``meter_provider`` (the
    global one by default), once per provider; returns whether it did
    (False without OpenTelemetry's API, or when already done). With
    ``histograms``, also the three histograms, recorded into the SDK as
    they happen: a job's duration once per job, which costs the worker what
    the SDK's ``record`` costs (several µs a job; docs/metrics.md)."""
    if otel_metrics is None:
        return False
    provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
    with _lock:
        if id(provider) in _instrumented:
            return False
        _instrumented.add(id(provider))
    meter = provider.get_meter("awa")
    for instrument_ in metrics.INSTRUMENTS:
        if instrument_.kind == "counter":
            meter.create_observable_counter(
                instrument_.name, [_observer(instrument_.name)],
                unit=instrument_.unit, description=instrument_.description,
            )  # fmt: skip
        elif instrument_.kind == "gauge":
            meter.create_observable_gauge(
                instrument_.name, [_observer(instrument_.name)],
                unit=instrument_.unit, description=instrument_.description,
            )  # fmt: skip
    if histograms:
        metrics.observe_histograms(_recorder(meter))
    return True


def _recorder(meter: Any) -> Callable[[str, float, Mapping[str, str]], None]:
    """Records each histogram observation into ``meter``'s histogram of the
    same name."""
    recorded = {
        instrument_.name: meter.create_histogram(
            instrument_.name, unit=instrument_.unit, description=instrument_.description
        )
        for instrument_ in metrics.INSTRUMENTS
        if instrument_.kind == "histogram"
    }

    def record(name: str, value: float, labels: Mapping[str, str]) -> None:
        recorded[name].record(value, labels)

    return record


def _observer(name: str) -> Callable[[Any], Iterable[Any]]:
    def observe(_options: Any) -> Iterable[Any]:
        assert otel_metrics is not None
        return [
            otel_metrics.Observation(reading.value, dict(reading.labels))
            for reading in metrics.collect()
            if isinstance(reading, metrics.Reading) and reading.name == name
        ]

    return observe
