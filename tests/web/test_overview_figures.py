"""The overview's figures: read once, served from memory while fresh,
refreshed in the background when stale, read afresh after an action."""

from __future__ import annotations

import asyncio
import datetime

from awa.web import create_app
from awa.web.overview import Figures, OverviewFigures
from tests.support import eventually
from tests.web.conftest import http


def backlog(html: str, queue: str) -> str:
    """The queue's row of the overview."""
    start = html.index(f'href="/jobs?queue={queue}"')
    return html[start : html.index("</tr>", start)]


async def test_loads_within_the_age_share_one_read(tasks):
    await tasks.insert({}, kind="web_ok", queue="cached")
    async with http(create_app(tasks, overview_max_age=3600)) as dashboard:
        first = (await dashboard.get("/")).text
        await tasks.insert({}, kind="web_ok", queue="cached")
        second = (await dashboard.get("/")).text
    assert '<td class="num">1</td>' in backlog(first, "cached")
    assert backlog(second, "cached") == backlog(first, "cached")  # from memory
    assert "Figures as of" in second


async def test_an_action_makes_the_next_load_read_afresh(tasks):
    await tasks.insert({}, kind="web_ok", queue="acted")
    async with http(create_app(tasks, allow_actions=True, overview_max_age=3600)) as admin:
        first = (await admin.get("/")).text
        assert "Paused queues" not in first
        token = first.split('name="csrf_token" value="')[1].split('"')[0]
        answer = await admin.post("/queues/acted/pause", data={"csrf_token": token})
        assert answer.status_code == 303
        after = (await admin.get("/")).text
    assert "Paused queues" in after


async def test_stale_figures_are_served_while_the_next_are_read(tasks):
    await tasks.insert({}, kind="web_ok", queue="stale")
    async with http(create_app(tasks, overview_max_age=0.05)) as dashboard:
        await dashboard.get("/")
        await tasks.insert({}, kind="web_ok", queue="stale")
        await asyncio.sleep(0.1)
        served = (await dashboard.get("/")).text  # stale, and starts a refresh
        assert '<td class="num">1</td>' in backlog(served, "stale")

        async def refreshed() -> bool:
            html = (await dashboard.get("/")).text
            return '<td class="num">2</td>' in backlog(html, "stale")

        await eventually(refreshed)


def figures(n: int) -> Figures:
    return Figures([], [], datetime.datetime(2026, 1, 1, 0, 0, n, tzinfo=datetime.UTC))


async def test_a_failed_refresh_keeps_the_last_figures_and_says_why():
    reads = [figures(1)]

    async def read() -> Figures:
        if not reads:
            raise ConnectionError("the database went away")
        return reads.pop()

    kept = OverviewFigures(read, max_age_s=0.01)
    assert await kept.get() == figures(1)
    await asyncio.sleep(0.02)
    assert await kept.get() == figures(1)  # stale: served, refresh started

    async def failed() -> bool:
        return kept.refresh_error is not None

    await eventually(failed)
    assert await kept.get() == figures(1)
    assert "went away" in str(kept.refresh_error)
    kept.invalidate()  # a load that must read now gets the error itself
    try:
        await kept.get()
    except ConnectionError as error:
        assert "went away" in str(error)
    else:
        raise AssertionError("the read's error should reach a load that waits for it")


async def test_a_read_longer_than_the_wait_gives_nothing_yet_then_the_figures():
    release = asyncio.Event()

    async def slow_read() -> Figures:
        await release.wait()
        return figures(5)

    kept = OverviewFigures(slow_read, max_age_s=60, wait_s=0.01)
    assert await kept.get() is None  # the read goes on
    release.set()

    async def read() -> bool:
        return await kept.get() == figures(5)

    await eventually(read)


async def test_the_page_says_the_figures_are_being_read_and_reloads(tasks):
    async with http(create_app(tasks, overview_wait=0)) as dashboard:
        page = await dashboard.get("/")
        assert page.status_code == 200
        assert (
            'id="reading"' in page.text and '<meta http-equiv="refresh" content="1">' in page.text
        )

        async def figures_shown() -> bool:
            return "Figures as of" in (await dashboard.get("/")).text

        await eventually(figures_shown)
