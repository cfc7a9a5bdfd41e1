"""The worker's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz``.

Overview: ``awa worker --metrics-port PORT`` serves, from a thread of its
own (so a blocked event loop still answers), three pages:

- ``/metrics``: :mod:`awa.prometheus`'s page (text exposition, or
  OpenMetrics when the scraper asks for it);
- ``/healthz`` (liveness): 200 while the worker is starting or healthy;
  503 once it became unhealthy (a service failed for longer than
  ``unhealthy_after``), with the reason: restart the process;
- ``/readyz`` (readiness): 200 once the worker serves and no service is
  failing right now; 503 while it starts, stops, or a service (the
  completer's writes, the claims, the database) fails.

Both health pages answer JSON: ``status``, ``reason``, the failing
services, and per queue the jobs running here and the slots
(``{"queues": {"email": {"running": 3, "capacity": 8}}}``).

``worker`` is asked for the worker at each request (None until it has
started); the last one it gave is kept, so a shutdown under way reads as
``stopping``. The worker is read, never called: its state is a few attributes the loop
writes and this thread reads.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Final

from awa import prometheus

if TYPE_CHECKING:
    from awa.worker.worker import Worker

log = logging.getLogger("awa.worker")

DEFAULT_HOST: Final = "0.0.0.0"


def health_page(worker: Worker | None, *, readiness: bool) -> tuple[HTTPStatus, dict[str, Any]]:
    """The status and JSON body of ``/healthz`` (or ``/readyz``) for ``worker``
    (None: not started yet)."""
    if worker is None:
        starting: dict[str, Any] = {
            "status": "starting",
            "reason": "the worker has not started yet",
        }
        return (HTTPStatus.SERVICE_UNAVAILABLE if readiness else HTTPStatus.OK), starting
    failing = {
        name: f"{type(error).__name__}: {error}" for name, error in worker.health.failing.items()
    }
    queues = {
        name: {"running": running, "capacity": slots}
        for name, running, slots in worker.queue_load()
    }
    body: dict[str, Any] = {"worker_id": worker.worker_id, "failing": failing, "queues": queues}
    if not worker.healthy:
        body.update(status="unhealthy", reason=worker.unhealthy_reason)
        return HTTPStatus.SERVICE_UNAVAILABLE, body
    if not readiness:
        body.update(status="ok", reason=None)
        return HTTPStatus.OK, body
    if not worker.running:
        body.update(status="stopping", reason="the worker is shutting down")
        return HTTPStatus.SERVICE_UNAVAILABLE, body
    if failing:
        body.update(status="degraded", reason="failing now: " + ", ".join(sorted(failing)))
        return HTTPStatus.SERVICE_UNAVAILABLE, body
    body.update(status="ok", reason=None)
    return HTTPStatus.OK, body


class Endpoint:
    """The HTTP server on its thread; :meth:`close` stops it."""

    def __init__(self, host: str, port: int, worker: Callable[[], Worker | None]) -> None:
        registry = prometheus.registry()
        last: Worker | None = None

        def current() -> Worker | None:
            # The last worker seen: a client forgets its worker as its
            # shutdown begins, and the pages must then say it is stopping.
            nonlocal last
            last = worker() or last
            return last

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    page, content_type = prometheus.render(registry, self.headers.get("Accept"))
                    self._answer(HTTPStatus.OK, page, content_type)
                elif path in ("/healthz", "/readyz"):
                    status, body = health_page(current(), readiness=path == "/readyz")
                    self._answer(status, json.dumps(body).encode(), "application/json")
                else:
                    self._answer(
                        HTTPStatus.NOT_FOUND,
                        b"not found: try /metrics, /healthz or /readyz\n",
                        "text/plain",
                    )

            def _answer(self, status: HTTPStatus, page: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics endpoint: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="awa-endpoint", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
