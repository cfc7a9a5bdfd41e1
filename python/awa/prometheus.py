"""awa's metrics as Prometheus reads them.

:class:`AwaCollector` translates :func:`awa.metrics.collect` into
prometheus-client's metric families at each scrape (nothing is counted
twice, and nothing is counted here). Names are the OpenTelemetry names
with dots as underscores and the unit as a suffix where it is seconds:
``awa.job.duration`` is ``awa_job_duration_seconds``, counters get
prometheus-client's ``_total``, and label names lose their dots the same
way (``awa.follow_up.result`` is ``awa_follow_up_result``). :func:`render` is the ``/metrics`` page:
``awa worker --metrics-port`` serves it, and an application that already
runs a prometheus-client registry adds ``AwaCollector()`` to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from awa import metrics


def prometheus_name(instrument: metrics.Instrument) -> str:
    """``awa.job.duration`` (unit ``s``) → ``awa_job_duration_seconds``."""
    name = instrument.name.replace(".", "_")
    return f"{name}_seconds" if instrument.unit == "s" else name


class AwaCollector(Collector):
    """The process's awa metrics, read afresh at every scrape."""

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for reading in metrics.collect():
            instrument = metrics.BY_NAME.get(reading.name)
            if instrument is None:
                continue  # a counter named by a caller, not one of awa's
            family: Any = families.get(reading.name)
            if family is None:
                family = families[reading.name] = _family(instrument)
            values = [str(reading.labels.get(label, "")) for label in instrument.labels]
            if isinstance(reading, metrics.HistogramReading):
                assert isinstance(family, HistogramMetricFamily)
                family.add_metric(values, _buckets(reading), reading.total)
            else:
                family.add_metric(values, reading.value)
        yield from families.values()


def _family(instrument: metrics.Instrument) -> Metric:
    name = prometheus_name(instrument)
    labels = [label.replace(".", "_") for label in instrument.labels]
    if instrument.kind == "counter":
        return CounterMetricFamily(name, instrument.description, labels=labels)
    if instrument.kind == "histogram":
        return HistogramMetricFamily(name, instrument.description, labels=labels)
    return GaugeMetricFamily(name, instrument.description, labels=labels)


def _buckets(reading: metrics.HistogramReading) -> list[tuple[str, float]]:
    """Cumulative counts by upper bound, ending with ``+Inf``."""
    bounds: Iterable[str] = [*(_bound(bound) for bound in reading.bounds), "+Inf"]
    return list(zip(bounds, accumulate(reading.counts), strict=True))


def _bound(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{bound:.1f}"


def registry() -> CollectorRegistry:
    """A registry holding only awa's metrics (what ``/metrics`` serves)."""
    made = CollectorRegistry(auto_describe=False)
    made.register(AwaCollector())
    return made


def render(target: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The page and its content type for a scrape that sent ``accept``."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(target), content_type
