"""The dashboard's actions: offered and taken only with allow_actions, each
behind a CSRF token, bulk ones after a confirmation page; authentication."""

from __future__ import annotations

import base64

import pytest

import awa
from awa.web import BasicAuth, create_app
from tests.web.conftest import csrf_token, failed_job, http
from tests.web.test_pages import quarantine


async def test_read_only_mode_shows_no_action_and_refuses_every_post(dashboard, tasks, conn):
    job = await failed_job(tasks)
    await tasks.insert({}, kind="web_ok", queue="web")
    for path in (f"/jobs/{job.id}", "/", "/dlq"):
        assert 'method="post"' not in (await dashboard.get(path)).text, path
    for path in (
        f"/jobs/{job.id}/retry", "/dlq/retry", "/dlq/purge", "/queues/web/pause",
        "/queues/web/resume", "/periodic/nightly/trigger", "/quarantine/00/release",
    ):  # fmt: skip
        page = await dashboard.post(path, data={"confirm": "yes"})
        assert page.status_code == 403 and "read-only" in page.text, path
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job.id) == "failed"
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state = 'failed'") == 1


async def test_a_failed_job_is_retried_from_its_page(admin, tasks, conn):
    job = await failed_job(tasks)
    page = await admin.get(f"/jobs/{job.id}")
    assert "Retry this job" in page.text
    done = await admin.post(f"/jobs/{job.id}/retry", data={"csrf_token": csrf_token(page.text)})
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job.id}?done=retried"
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job.id) == (
        "available"
    )
    assert "sent back to work" in (await admin.get(done.headers["location"])).text


async def test_an_action_without_this_browsers_csrf_token_is_refused(admin, tasks, conn):
    job = await failed_job(tasks)
    await admin.get(f"/jobs/{job.id}")  # the browser has its nonce cookie
    for data in ({}, {"csrf_token": "0" * 64}):
        page = await admin.post(f"/jobs/{job.id}/retry", data=data)
        assert page.status_code == 403 and "CSRF token" in page.text
    # A token taken from another browser's page does not fit this one's cookie.
    async with http(create_app(tasks, allow_actions=True)) as other:
        token = csrf_token((await other.get(f"/jobs/{job.id}")).text)
    page = await admin.post(f"/jobs/{job.id}/retry", data={"csrf_token": token})
    assert page.status_code == 403
    assert await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job.id) == "failed"


async def test_only_a_failed_job_is_retried(admin, tasks):
    job = await tasks.insert({}, kind="web_ok", queue="web")
    token = csrf_token((await admin.get("/")).text)
    page = await admin.post(f"/jobs/{job.id}/retry", data={"csrf_token": token})
    assert page.status_code == 409 and f"job {job.id} is available" in page.text
    page = await admin.post("/jobs/424242/retry", data={"csrf_token": token})
    assert page.status_code == 404


async def test_dlq_purge_asks_for_confirmation_then_deletes_what_the_filter_names(
    admin, tasks, conn
):
    kept = await failed_job(tasks, queue="elsewhere")
    purged = [await failed_job(tasks) for _ in range(2)]
    token = csrf_token((await admin.get("/dlq")).text)
    confirm = await admin.post("/dlq/purge", data={"csrf_token": token, "queue": "web"})
    assert confirm.status_code == 200 and "Purge dead letters?" in confirm.text
    assert all(f'href="/jobs/{job.id}"' in confirm.text for job in purged)
    assert f'href="/jobs/{kept.id}"' not in confirm.text
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state = 'failed'") == 3
    done = await admin.post(
        "/dlq/purge", data={"csrf_token": token, "queue": "web", "confirm": "yes"}
    )
    assert done.status_code == 303 and done.headers["location"] == "/dlq?done=dlq-purged"
    assert [row["id"] for row in await conn.fetch("SELECT id FROM awa.jobs")] == [kept.id]


async def test_dlq_retry_without_a_filter_names_every_dead_letter_before_redriving(
    admin, tasks, conn
):
    jobs = [await failed_job(tasks) for _ in range(2)]
    token = csrf_token((await admin.get("/dlq")).text)
    confirm = await admin.post("/dlq/retry", data={"csrf_token": token})
    assert "sends every dead letter back to work" in confirm.text
    await admin.post("/dlq/retry", data={"csrf_token": token, "confirm": "yes"})
    states = await conn.fetch(
        "SELECT state::text FROM awa.jobs WHERE id = ANY($1::bigint[])", [j.id for j in jobs]
    )
    assert [row["state"] for row in states] == ["available", "available"]


async def test_a_queue_is_paused_and_resumed(admin, tasks):
    await tasks.insert({}, kind="web_ok", queue="web")
    token = csrf_token((await admin.get("/")).text)
    page = await admin.post("/queues/web/pause", data={"csrf_token": token})
    assert page.status_code == 303
    config = await tasks.get_queue_config("web")
    assert config.paused and config.paused_by == "awa dashboard"
    assert "/queues/web/resume" in (await admin.get("/")).text
    await admin.post("/queues/web/resume", data={"csrf_token": token})
    assert not (await tasks.get_queue_config("web")).paused


async def test_a_schedule_is_paused_resumed_and_triggered(admin, tasks, conn):
    from tests.support import FAST_WORKER, eventually

    tasks.periodic("hourly", "0 * * * *", dict, {}, kind="web_ok", queue="web")
    await tasks.start([("other", 1)], **FAST_WORKER)
    await eventually(tasks.list_periodic)
    await tasks.shutdown()
    token = csrf_token((await admin.get("/periodic")).text)
    await admin.post("/periodic/hourly/pause", data={"csrf_token": token})
    assert [info.paused for info in await tasks.list_periodic()] == [True]
    await admin.post("/periodic/hourly/resume", data={"csrf_token": token})
    assert [info.paused for info in await tasks.list_periodic()] == [False]
    page = await admin.post("/periodic/hourly/trigger", data={"csrf_token": token})
    assert page.headers["location"] == "/periodic?done=periodic-triggered"
    assert await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE kind = 'web_ok'") == 1
    missing = await admin.post("/periodic/nope/pause", data={"csrf_token": token})
    assert missing.status_code == 404


async def test_a_fingerprint_is_released_from_quarantine(admin, tasks, conn):
    job = await tasks.insert({"n": 1}, kind="crashy", queue="web")
    await quarantine(conn, job.id)
    [held] = await tasks.list_quarantine()
    page = await admin.get("/quarantine")
    done = await admin.post(
        f"/quarantine/{held.fingerprint}/release", data={"csrf_token": csrf_token(page.text)}
    )
    assert done.status_code == 303 and await tasks.list_quarantine(include_watched=True) == []


# ── authentication ──────────────────────────────────────────────────────


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


async def test_basic_auth_asks_for_credentials_and_lets_the_right_ones_in(make_dashboard):
    async with make_dashboard(auth=BasicAuth("ops", "pa:ss")) as browser:
        for headers in ({}, basic("ops", "wrong"), basic("other", "pa:ss")):
            page = await browser.get("/", headers=headers)
            assert page.status_code == 401
            assert page.headers["www-authenticate"].startswith('Basic realm="awa dashboard"')
        assert (await browser.get("/static/dashboard.css")).status_code == 401
        assert (await browser.get("/", headers=basic("ops", "pa:ss"))).status_code == 200


async def test_an_auth_callback_decides_sync_or_async(make_dashboard):
    def only_header(request):
        return request.headers.get("x-operator") == "yes"

    async def async_only_header(request):
        return only_header(request)

    for hook in (only_header, async_only_header):
        async with make_dashboard(auth=hook) as browser:
            refused = await browser.get("/")
            assert refused.status_code == 401 and "www-authenticate" not in refused.headers
            assert (await browser.get("/", headers={"x-operator": "yes"})).status_code == 200


def test_bad_auth_and_flags_are_named_configuration_errors(tasks):
    with pytest.raises(awa.ConfigurationError, match="auth must be"):
        create_app(tasks, auth="ops:secret")
    with pytest.raises(awa.ConfigurationError, match="USER:PASSWORD"):
        BasicAuth.parse("no-colon")
    with pytest.raises(awa.ConfigurationError, match="password"):
        BasicAuth("ops", "")
    with pytest.raises(awa.ConfigurationError, match="allow_actions"):
        create_app(tasks, allow_actions="yes")
