"""Fixtures of the dashboard's tests: the application on the test database,
an HTTP client that speaks to it in the test's own event loop (the
``client`` fixture's pool lives there), and jobs in the states the pages
show, made the way production makes them (a worker ran them)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

import awa
from awa.testing import AwaTestClient
from awa.web import create_app

CSRF_TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


class BrokenOnPurpose(Exception):
    """What the failing task raises."""


def register_tasks(client: awa.AsyncClient) -> None:
    """``web_ok`` completes, ``web_broken`` raises :class:`BrokenOnPurpose`."""

    @client.task(dict, kind="web_ok", queue="web")
    async def web_ok(job: Any) -> None:
        return None

    @client.task(dict, kind="web_broken", queue="web")
    async def web_broken(job: Any) -> None:
        raise BrokenOnPurpose("the handler broke on purpose")


async def failed_job(client: awa.AsyncClient, queue: str = "web") -> awa.Job[Any]:
    """A job of ``web_broken`` in ``queue`` whose one attempt failed: a dead letter."""
    job = await client.insert(
        {"secret": "s3cr3t-payload"}, kind="web_broken", queue=queue, max_attempts=1
    )
    result = await AwaTestClient(client).work_one("web_broken", queue=queue)
    assert result is not None and result.job.state is awa.JobState.Failed
    return job


async def completed_job(client: awa.AsyncClient) -> awa.Job[Any]:
    job = await client.insert({}, kind="web_ok", queue="web")
    result = await AwaTestClient(client).work_one("web_ok")
    assert result is not None and result.job.state is awa.JobState.Completed
    return job


def csrf_token(html: str) -> str:
    """The CSRF token the page's forms carry."""
    found = CSRF_TOKEN.search(html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def http(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dashboard")


@pytest.fixture
def tasks(client: awa.AsyncClient) -> awa.AsyncClient:
    register_tasks(client)
    return client


@pytest.fixture
async def dashboard(tasks: awa.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """The read-only dashboard of the test database."""
    async with http(create_app(tasks)) as browser:
        yield browser


@pytest.fixture
async def admin(tasks: awa.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard with actions enabled."""
    async with http(create_app(tasks, allow_actions=True)) as browser:
        yield browser


@pytest.fixture
def make_dashboard(tasks: awa.AsyncClient) -> Callable[..., httpx.AsyncClient]:
    """A dashboard of the test database built with these options."""
    return lambda **options: http(create_app(tasks, **options))
