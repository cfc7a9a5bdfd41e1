"""awa-queue with its metrics exported the way a production worker runs
them, and then some: ``/metrics`` served (what ``awa worker
--metrics-port`` starts) and scraped every second, the queue depth and
lag read every 15 s, and, where the OpenTelemetry SDK is installed, a
meter provider exporting every second. Set beside the plain run, this is
the cost of metrics on (docs/metrics.md)."""

from __future__ import annotations

import threading
import urllib.request

from awa_queue import QUEUE, AwaQueueAdapter

import common
from awa import otel
from awa.worker.endpoint import Endpoint

SCRAPE_EVERY_S = 1.0
QUEUE_METRICS_INTERVAL_S = 15.0


class MetricsAdapter(AwaQueueAdapter):
    async def setup(self) -> None:
        await super().setup()
        self._endpoint = Endpoint("127.0.0.1", 0, lambda: self.client.worker)
        self._stop = threading.Event()
        self._scraper = threading.Thread(target=self._scrape, daemon=True)
        self._scraper.start()
        self._provider = _meter_provider()

    def _scrape(self) -> None:
        url = f"http://127.0.0.1:{self._endpoint.port}/metrics"
        while not self._stop.wait(SCRAPE_EVERY_S):
            with urllib.request.urlopen(url, timeout=5) as page:
                page.read()

    async def start_worker(self, concurrency: int) -> None:
        await self.client.start(
            [(QUEUE, concurrency)], queue_metrics_interval=QUEUE_METRICS_INTERVAL_S
        )
        self.running = True

    async def close(self) -> None:
        await super().close()
        self._stop.set()
        self._endpoint.close()
        if self._provider is not None:
            self._provider.shutdown()


def _meter_provider():
    """An SDK meter provider exporting every second to nowhere, when the SDK
    is installed (None otherwise); awa's instruments registered with it."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            MetricExporter,
            MetricExportResult,
            PeriodicExportingMetricReader,
        )
    except ImportError:
        return None

    class Nowhere(MetricExporter):
        def export(self, metrics_data, timeout_millis=10_000, **kwargs):
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis=10_000):
            return True

        def shutdown(self, timeout_millis=30_000, **kwargs):
            return None

    reader = PeriodicExportingMetricReader(Nowhere(), export_interval_millis=1000)
    provider = MeterProvider(metric_readers=[reader])
    otel.instrument(provider)
    return provider


if __name__ == "__main__":
    common.main(MetricsAdapter)
