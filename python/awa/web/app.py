"""The dashboard's application: one handler per page and per action, each a
few library calls on :class:`awa.AsyncClient` rendered by a Jinja2 template.

Overview: ``create_app`` wires the pages, the actions, the static files,
optionally ``/metrics``, authentication and the error pages. Every page
reads a bounded amount: job listings are keyset pages (``before=``, as
``awa jobs list``). Only the overview's figures read the whole jobs table
(the per-queue counts of ``list_queues`` and the per-minute activity of
``queue_activity``, side by side), so they are read in the background at
most once per ``overview_max_age`` and served from memory
(:mod:`awa.web.overview`).

Failure handling: a job or schedule that does not exist is a 404 page, bad
input a 400 page naming the field, a database that does not answer (or an
unmigrated schema) a 503 page naming the problem; never a traceback.
Actions (POST) answer 403 in read-only mode and without a valid CSRF token.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import asyncpg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from awa import prometheus
from awa.activity import QueueActivity
from awa.client import AsyncClient
from awa.dead_letters import DeadLetterReason
from awa.errors import (
    ConfigurationError,
    ConnectionFailed,
    JobNotFound,
    PeriodicNotFound,
    SchemaNotMigrated,
    UniqueConflict,
    ValidationError,
)
from awa.job import JobState
from awa.queues import QueueSummary
from awa.web import render
from awa.web.overview import DEFAULT_MAX_AGE_S, DEFAULT_WAIT_S, Figures, OverviewFigures
from awa.web.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    AuthMiddleware,
    CsrfTokens,
    check_auth,
)

log = logging.getLogger("awa.web")

#: The name the pages carry unless told otherwise (``awa serve --title``).
DEFAULT_TITLE: Final = "awa"
HERE: Final = Path(__file__).parent
#: Jobs (and dead letters) on one page.
PAGE_SIZE: Final = 50
#: Minutes each sparkline covers.
SPARKLINE_MINUTES: Final = 60
#: Minutes over which the overview's throughput and failure rate are taken.
RATE_MINUTES: Final = 5
#: Seconds before a page that said the figures are being read loads again.
READING_RELOAD_S: Final = 1
#: Follow-ups a job's page lists, at most.
FOLLOW_UP_LIMIT: Final = 50
#: Jobs listed on a bulk action's confirmation page.
CONFIRM_SAMPLE: Final = 20
#: What a finished action says on the page it returns to (``?done=``).
NOTICES: Final = {
    "retried": "The job was sent back to work.",
    "dlq-retried": "The dead letters were sent back to work.",
    "dlq-purged": "The dead letters were deleted.",
    "paused": "The queue is paused: workers stop claiming from it.",
    "resumed": "The queue is resumed.",
    "periodic-paused": "The schedule is paused.",
    "periodic-resumed": "The schedule is resumed.",
    "periodic-triggered": "The schedule's job was inserted now.",
    "released": "The fingerprint was released from quarantine.",
}
#: States whose jobs never run again (no explanation to ask for).
FINAL_STATES: Final = frozenset({JobState.Completed, JobState.Failed, JobState.Cancelled})
#: Errors meaning the database cannot be reached (or used): a 503 page.
#: Besides the network's and awa's own: the server refusing new sessions
#: (starting, shutting down, too many connections), and the database or
#: role gone since the pool opened (its new connections are refused).
UNAVAILABLE: Final = (
    ConnectionFailed,
    SchemaNotMigrated,
    ConnectionError,
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.InvalidCatalogNameError,
    asyncpg.InvalidAuthorizationSpecificationError,
)


def create_app(
    client: AsyncClient,
    *,
    allow_actions: bool = False,
    auth: Any = None,
    title: str = DEFAULT_TITLE,
    metrics: bool = False,
    csrf_secret: bytes | None = None,
    overview_max_age: float = DEFAULT_MAX_AGE_S,
    overview_wait: float = DEFAULT_WAIT_S,
) -> Starlette:
    """The dashboard of ``client``'s database, as a Starlette application to
    mount (``Mount("/awa", create_app(client))``) or serve.

    Read-only unless ``allow_actions``: then retrying a failed job, DLQ
    retry and purge, pausing and resuming queues and schedules, triggering a
    schedule and releasing quarantine are offered (POST forms with a CSRF
    token; bulk ones ask for confirmation first). ``auth`` guards every
    request: an :class:`awa.web.BasicAuth`, a ``(user, password)`` pair, or
    a callable ``(request) -> bool`` (or awaitable bool). ``metrics=True``
    also serves ``/metrics`` (Prometheus, :func:`awa.prometheus.registry`).
    ``csrf_secret`` keys the CSRF tokens (default: random per application;
    give one when several processes serve the same dashboard). The queues
    page's counts and activity read the whole jobs table, so they are read
    at most once per ``overview_max_age`` seconds, in the background, and
    served from memory meanwhile (0: on every load); a load that needs a
    fresh read waits ``overview_wait`` seconds for it at most, then says
    the figures are being read and reloads (see :mod:`awa.web.overview`).
    The client's lifecycle stays the caller's: the application never
    closes it."""
    if not isinstance(allow_actions, bool):
        raise ConfigurationError(f"allow_actions must be True or False (got {allow_actions!r})")
    checked_auth = check_auth(auth)
    dashboard = Dashboard(
        client, allow_actions, title, CsrfTokens(csrf_secret),
        overview_max_age_s=overview_max_age, overview_wait_s=overview_wait,
    )  # fmt: skip
    routes: list[Route | Mount] = [
        Route("/", dashboard.overview, name="overview"),
        Route("/jobs", dashboard.jobs, name="jobs"),
        Route("/jobs/{job_id:int}", dashboard.job, name="job"),
        Route("/jobs/{job_id:int}/retry", dashboard.retry_job, methods=["POST"]),
        Route("/dlq", dashboard.dead_letters, name="dlq"),
        Route("/dlq/{verb:str}", dashboard.dlq_action, methods=["POST"]),
        Route("/queues/{queue:str}/{verb:str}", dashboard.queue_action, methods=["POST"]),
        Route("/periodic", dashboard.periodic, name="periodic"),
        Route("/periodic/{name:str}/{verb:str}", dashboard.periodic_action, methods=["POST"]),
        Route("/quarantine", dashboard.quarantine, name="quarantine"),
        Route(
            "/quarantine/{fingerprint:str}/release",
            dashboard.release_quarantine,
            methods=["POST"],
        ),
        Route("/doctor", dashboard.doctor, name="doctor"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    if metrics:
        from prometheus_client import make_asgi_app

        # A Route, not a Mount: /metrics itself answers (a Mount redirects it to /metrics/).
        routes.append(
            Route("/metrics", AsgiEndpoint(make_asgi_app(registry=prometheus.registry())))
        )
    middleware = [] if checked_auth is None else [Middleware(AuthMiddleware, auth=checked_auth)]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            HTTPException: dashboard.http_error,
            Refused: dashboard.refused,
            JobNotFound: dashboard.not_found,
            PeriodicNotFound: dashboard.not_found,
            ValidationError: dashboard.bad_request,
            UniqueConflict: dashboard.conflict,
            **dict.fromkeys(UNAVAILABLE, dashboard.unavailable),
            Exception: dashboard.server_error,
        },
    )


class AsgiEndpoint:
    """An ASGI application as a route's endpoint (a plain function would be
    taken for a request handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class Refused(Exception):
    """An action this dashboard will not take (read-only, bad CSRF token, a
    job that is not failed): its page, with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Dashboard:
    """The pages and actions over one client."""

    def __init__(
        self,
        client: AsyncClient,
        allow_actions: bool,
        title: str,
        csrf: CsrfTokens,
        overview_max_age_s: float = DEFAULT_MAX_AGE_S,
        overview_wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        self.client = client
        self.figures = OverviewFigures(self.read_figures, overview_max_age_s, overview_wait_s)
        self.allow_actions = allow_actions
        self.title = title
        self.csrf = csrf
        self.templates = Jinja2Templates(directory=HERE / "templates")
        self.templates.env.globals.update(
            sparkline=render.sparkline,
            age=render.age,
            since=render.since,
            when=render.when,
            duration=render.duration,
        )

    # ── rendering ───────────────────────────────────────────────────────

    def page(
        self, request: Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> Response:
        """``template`` with what every page shows; sets the CSRF nonce
        cookie when the browser has none yet."""
        nonce = request.cookies.get(CSRF_COOKIE)
        fresh = nonce is None
        if nonce is None:
            nonce = self.csrf.new_nonce()
        base = request.scope.get("root_path", "")
        done = request.query_params.get("done")
        response = self.templates.TemplateResponse(
            request,
            template,
            {
                "title": self.title,
                "base": base,
                "actions": self.allow_actions,
                "csrf_field": CSRF_FIELD,
                "csrf_token": self.csrf.token(nonce),
                "notice": NOTICES.get(done or ""),
                "now": datetime.datetime.now(datetime.UTC),
                **context,
            },
            status_code=status,
        )
        if fresh:
            response.set_cookie(
                CSRF_COOKIE, nonce, httponly=True, samesite="strict", path=base or "/"
            )
        return response

    def error_page(self, request: Request, status: int, heading: str, message: str) -> Response:
        return self.page(
            request, "error.html", {"status": status, "heading": heading, "message": message},
            status,
        )  # fmt: skip

    def back_to(self, request: Request, path: str, done: str) -> Response:
        """After an action: its page again (a GET), saying what was done. The
        overview's figures are read afresh on its next load: the action
        changed counts or settings they show."""
        self.figures.invalidate()
        base = request.scope.get("root_path", "")
        separator = "&" if "?" in path else "?"
        return RedirectResponse(f"{base}{path}{separator}done={done}", status_code=303)

    async def action_form(self, request: Request) -> Mapping[str, Any]:
        """The form of an action, once it is allowed: 403 in read-only mode
        and when the CSRF token is not this browser's."""
        if not self.allow_actions:
            raise Refused(403, "this dashboard is read-only: actions are not enabled")
        form = await request.form()
        if not self.csrf.valid(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
            raise Refused(
                403, "the form's CSRF token is missing or stale: reload the page and try again"
            )
        return form

    # ── pages ───────────────────────────────────────────────────────────

    async def overview(self, request: Request) -> Response:
        figures = await self.figures.get()
        if figures is None:
            return self.page(request, "reading.html", {"wait_s": READING_RELOAD_S})
        rows = queue_rows(figures.summaries, figures.activity, figures.read_at)
        paused = [row for row in rows if row["paused"]]
        error = self.figures.refresh_error
        return self.page(
            request,
            "overview.html",
            {"queues": rows, "paused": paused, "rate_minutes": RATE_MINUTES,
             "spark_minutes": SPARKLINE_MINUTES, "read_at": figures.read_at,
             "refresh_error": None if error is None else f"{type(error).__name__}: {error}"},
        )  # fmt: skip

    async def read_figures(self) -> Figures:
        """The overview's two whole-table reads, side by side."""
        read_at = datetime.datetime.now(datetime.UTC)
        summaries, activity = await asyncio.gather(
            self.client.list_queues(), self.client.queue_activity(minutes=SPARKLINE_MINUTES)
        )
        return Figures(summaries, activity, read_at)

    async def jobs(self, request: Request) -> Response:
        query = request.query_params
        filters = {name: query.get(name) or None for name in ("state", "queue", "kind", "tag")}
        before = optional_id(query.get("before"), "before")
        found = await self.client.list_jobs(
            state=filters["state"], queue=filters["queue"], kind=filters["kind"],
            tag=filters["tag"], before=before, limit=PAGE_SIZE,
        )  # fmt: skip
        next_before = found[-1].id if len(found) == PAGE_SIZE else None
        return self.page(
            request,
            "jobs.html",
            {"jobs": found, "filters": filters, "states": [s.value for s in JobState],
             "next_before": next_before, "next_query": next_query(filters, next_before)},
        )  # fmt: skip

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        with_payload = request.query_params.get("payload") == "1"
        job = await self.client.get_job(job_id, include_payload=with_payload)
        explanation = None if job.state in FINAL_STATES else await self.client.explain(job_id)
        follow_ups = await self.client.list_follow_ups(job_id, limit=FOLLOW_UP_LIMIT)
        payload = None
        if with_payload:
            payload = {"args": job.args_json, "metadata": job.metadata}
        return self.page(
            request,
            "job.html",
            {"job": job, "attempts": job.attempts, "explanation": explanation,
             "payload": payload, "retryable": job.state is JobState.Failed,
             "follow_ups": follow_ups, "follow_up_limit": FOLLOW_UP_LIMIT},
        )  # fmt: skip

    async def dead_letters(self, request: Request) -> Response:
        filters = dlq_filters(request.query_params)
        letters = await self.client.list_dlq(
            queue=filters["queue"], kind=filters["kind"], reason=filters["reason"], limit=PAGE_SIZE
        )
        return self.page(
            request,
            "dlq.html",
            {"letters": letters, "filters": filters, "page_size": PAGE_SIZE,
             "reasons": [reason.value for reason in DeadLetterReason]},
        )  # fmt: skip

    async def periodic(self, request: Request) -> Response:
        return self.page(request, "periodic.html", {"schedules": await self.client.list_periodic()})

    async def quarantine(self, request: Request) -> Response:
        held = await self.client.list_quarantine(include_watched=True)
        return self.page(request, "quarantine.html", {"fingerprints": held})

    async def doctor(self, request: Request) -> Response:
        report = await self.client.doctor()
        return self.page(request, "doctor.html", {"report": report})

    # ── actions ─────────────────────────────────────────────────────────

    async def retry_job(self, request: Request) -> Response:
        await self.action_form(request)
        job_id = request.path_params["job_id"]
        job = await self.client.get_job(job_id)
        if job.state is not JobState.Failed:
            raise Refused(409, f"job {job_id} is {job.state.value}: only failed jobs are retried")
        await self.client.retry_from_dlq([job_id])
        return self.back_to(request, f"/jobs/{job_id}", "retried")

    async def dlq_action(self, request: Request) -> Response:
        """Retry or purge the dead letters a filter selects (every one when
        none is given): a confirmation page first, the action once the form
        says ``confirm=yes``."""
        verb = request.path_params["verb"]
        if verb not in ("retry", "purge"):
            raise HTTPException(404)
        form = await self.action_form(request)
        filters = dlq_filters(form)
        everything = not any(filters.values())
        if form.get("confirm") != "yes":
            sample = await self.client.list_dlq(
                queue=filters["queue"], kind=filters["kind"], reason=filters["reason"],
                limit=CONFIRM_SAMPLE,
            )  # fmt: skip
            return self.page(
                request,
                "confirm.html",
                {"verb": verb, "filters": filters, "everything": everything,
                 "sample": sample, "sample_size": CONFIRM_SAMPLE},
            )  # fmt: skip
        if verb == "retry":
            await self.client.retry_from_dlq(
                queue=filters["queue"], kind=filters["kind"], reason=filters["reason"],
                everything=everything,
            )  # fmt: skip
            return self.back_to(request, "/dlq", "dlq-retried")
        await self.client.purge_dlq(
            queue=filters["queue"], kind=filters["kind"], reason=filters["reason"],
            everything=everything,
        )  # fmt: skip
        return self.back_to(request, "/dlq", "dlq-purged")

    async def queue_action(self, request: Request) -> Response:
        verb, queue = request.path_params["verb"], request.path_params["queue"]
        if verb not in ("pause", "resume"):
            raise HTTPException(404)
        await self.action_form(request)
        if verb == "pause":
            await self.client.pause_queue(queue, paused_by="awa dashboard")
            return self.back_to(request, "/", "paused")
        await self.client.resume_queue(queue)
        return self.back_to(request, "/", "resumed")

    async def periodic_action(self, request: Request) -> Response:
        verb, name = request.path_params["verb"], request.path_params["name"]
        actions = {
            "pause": (self.client.pause_periodic, "periodic-paused"),
            "resume": (self.client.resume_periodic, "periodic-resumed"),
            "trigger": (self.client.trigger_periodic, "periodic-triggered"),
        }
        if verb not in actions:
            raise HTTPException(404)
        await self.action_form(request)
        act, done = actions[verb]
        await act(name)
        return self.back_to(request, "/periodic", done)

    async def release_quarantine(self, request: Request) -> Response:
        await self.action_form(request)
        fingerprint = request.path_params["fingerprint"]
        if not await self.client.release_quarantine(fingerprint):
            raise HTTPException(404, f"no fingerprint {fingerprint} is quarantined or watched")
        return self.back_to(request, "/quarantine", "released")

    # ── errors ──────────────────────────────────────────────────────────

    async def http_error(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        heading = "Not found" if error.status_code == 404 else "Error"
        message = error.detail
        if error.status_code == 404 and message == "Not Found":  # Starlette's: no route
            message = f"nothing here: {request.url.path}"
        return self.error_page(request, error.status_code, heading, message)

    async def not_found(self, request: Request, error: Exception) -> Response:
        return self.error_page(request, 404, "Not found", str(error))

    async def bad_request(self, request: Request, error: Exception) -> Response:
        return self.error_page(request, 400, "Bad request", str(error))

    async def conflict(self, request: Request, error: Exception) -> Response:
        return self.error_page(request, 409, "Conflict", str(error))

    async def unavailable(self, request: Request, error: Exception) -> Response:
        log.warning("the dashboard cannot read the database: %s", error)
        return self.error_page(
            request, 503, "The database is unavailable",
            f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
        )  # fmt: skip

    async def refused(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, Refused)
        return self.error_page(request, error.status, "Refused", str(error))

    async def server_error(self, request: Request, error: Exception) -> Response:
        log.error("the dashboard failed on %s", request.url.path, exc_info=error)
        return self.error_page(
            request, 500, "Internal error",
            f"{type(error).__name__}: the server's log has the details",
        )  # fmt: skip


def queue_rows(
    summaries: list[QueueSummary], activity: list[QueueActivity], now: datetime.datetime
) -> list[dict[str, Any]]:
    """One row per queue with jobs, settings or recent activity: its counts,
    the age of its oldest due job, its throughput and failure rate over the
    last :data:`RATE_MINUTES` minutes and the per-minute series."""
    by_queue = {summary.config.queue: summary for summary in summaries}
    recent = {entry.queue: entry for entry in activity}
    rows = []
    for name in sorted(by_queue.keys() | recent.keys()):
        summary, entry = by_queue.get(name), recent.get(name)
        completed, failed = entry.totals(RATE_MINUTES) if entry else (0, 0)
        finished = completed + failed
        rows.append({
            "queue": name,
            "paused": bool(summary and summary.config.paused),
            "paused_by": summary.config.paused_by if summary else None,
            "due": summary.due if summary else 0,
            "running": summary.running if summary else 0,
            "later": summary.later if summary else 0,
            "waiting_external": summary.waiting_external if summary else 0,
            "failed": summary.failed if summary else 0,
            "oldest_due_age": render.since(summary.oldest_due_at, now) if summary else "–",
            "throughput_per_min": completed / RATE_MINUTES,
            "failure_rate": failed / finished if finished else None,
            "completed_series": entry.completed if entry else (0,) * SPARKLINE_MINUTES,
            "failure_rate_series": failure_rates(entry),
        })  # fmt: skip
    return rows


def failure_rates(entry: QueueActivity | None) -> tuple[float, ...]:
    """Per minute, the share of the jobs that finished which failed for good
    (0 for a minute in which none finished)."""
    if entry is None:
        return (0.0,) * SPARKLINE_MINUTES
    return tuple(
        failed / (completed + failed) if completed + failed else 0.0
        for completed, failed in zip(entry.completed, entry.failed, strict=True)
    )


def optional_id(value: str | None, field: str) -> int | None:
    """A job id from the query string, or a :class:`awa.ValidationError`."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValidationError(f"{field}: must be a job id (got {value!r})", field) from None


def next_query(filters: Mapping[str, str | None], next_before: int | None) -> str | None:
    """The query string of the next page of a job listing."""
    if next_before is None:
        return None
    kept = {name: value for name, value in filters.items() if value}
    return urlencode({**kept, "before": next_before})


def dlq_filters(source: Mapping[str, Any]) -> dict[str, str | None]:
    """The queue, kind and reason a DLQ page or form names (empty: none;
    a file upload in their place counts as none)."""
    return {
        name: value if isinstance(value := source.get(name), str) and value else None
        for name in ("queue", "kind", "reason")
    }
