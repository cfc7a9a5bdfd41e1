"""Every page of the dashboard on the real database: what it shows, what it
hides, and its error pages."""

from __future__ import annotations

import datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import awa
from awa.web import create_app
from tests.support import FAST_WORKER, eventually
from tests.web.conftest import completed_job, failed_job, http


async def test_overview_shows_each_queue_with_its_backlog_age_and_sparklines(dashboard, tasks):
    await completed_job(tasks)
    await failed_job(tasks)
    for _ in range(3):
        await tasks.insert({}, kind="web_ok", queue="backlog")
    page = await dashboard.get("/")
    assert page.status_code == 200
    html = page.text
    assert 'href="/jobs?queue=backlog"' in html and 'href="/jobs?queue=web"' in html
    backlog_row = html[
        html.index('href="/jobs?queue=backlog"') : html.index(
            "</tr>", html.index('href="/jobs?queue=backlog"')
        )
    ]
    assert '<td class="num">3</td>' in backlog_row
    web_row = html[html.index('href="/jobs?queue=web"') :]
    web_row = web_row[: web_row.index("</tr>")]
    # One completed and one failed in the last minutes: a failure rate of 50 %.
    assert "50.0%" in web_row
    assert '<svg class="spark completed"' in web_row and '<svg class="spark failed"' in web_row
    assert 'href="/dlq?queue=web">1</a>' in web_row


async def test_overview_lists_paused_queues_apart(dashboard, tasks):
    await tasks.insert({}, kind="web_ok", queue="held")
    await tasks.pause_queue("held", paused_by="ops")
    html = (await dashboard.get("/")).text
    assert "Paused queues" in html and "<strong>held</strong> (by ops)" in html


async def test_queue_activity_counts_finished_jobs_per_minute(tasks):
    await completed_job(tasks)
    await failed_job(tasks)
    [web] = await tasks.queue_activity(minutes=10)
    assert (web.queue, len(web.minutes), sum(web.completed), sum(web.failed)) == ("web", 10, 1, 1)
    assert web.minutes[-1] <= datetime.datetime.now(datetime.UTC)
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    assert await tasks.queue_activity(minutes=10, now=an_hour_ago) == []
    with pytest.raises(awa.ValidationError, match="minutes"):
        await tasks.queue_activity(minutes=0)


async def test_jobs_list_filters_by_state_and_pages_by_keyset(dashboard, tasks):
    await tasks.insert_many([{} for _ in range(60)], kind="web_ok", queue="web")
    broken = await failed_job(tasks)
    failed_page = (await dashboard.get("/jobs", params={"state": "failed"})).text
    assert f'href="/jobs/{broken.id}"' in failed_page and failed_page.count("<tr class=") == 1
    first = (await dashboard.get("/jobs", params={"state": "available"})).text
    assert first.count('<tr class="state-available">') == 50
    assert 'id="next" href="/jobs?state=available&amp;before=11"' in first
    second = (await dashboard.get("/jobs", params={"state": "available", "before": 11})).text
    assert second.count('<tr class="state-available">') == 10 and 'id="next"' not in second


async def test_jobs_list_names_a_bad_filter_in_a_400_page(dashboard):
    page = await dashboard.get("/jobs", params={"state": "exploded"})
    assert page.status_code == 400 and "state: must be one of" in page.text
    page = await dashboard.get("/jobs", params={"before": "x"})
    assert page.status_code == 400 and "before: must be a job id" in page.text


async def test_job_page_shows_the_attempts_and_errors_and_hides_the_payload(dashboard, tasks):
    job = await failed_job(tasks)
    page = await dashboard.get(f"/jobs/{job.id}")
    assert page.status_code == 200
    assert 'id="job-state">failed' in page.text
    assert "BrokenOnPurpose</code>: the handler broke on purpose" in page.text
    assert "<summary>Traceback</summary>" in page.text
    assert "s3cr3t-payload" not in page.text and "Show the payload" in page.text
    shown = await dashboard.get(f"/jobs/{job.id}", params={"payload": "1"})
    assert "s3cr3t-payload" in shown.text


async def test_job_page_says_why_a_waiting_job_is_not_running(dashboard, tasks):
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    job = await tasks.insert({}, kind="web_ok", queue="web", run_at=later)
    page = await dashboard.get(f"/jobs/{job.id}")
    assert "Why it is not running" in page.text and "It has not run yet." in page.text


async def test_an_unknown_job_is_a_404_page(dashboard):
    page = await dashboard.get("/jobs/999999")
    assert page.status_code == 404 and "there is no job with id 999999" in page.text
    assert (await dashboard.get("/nowhere")).status_code == 404


async def test_dead_letter_page_lists_failed_jobs_with_their_reason_and_error(dashboard, tasks):
    job = await failed_job(tasks)
    page = await dashboard.get("/dlq", params={"queue": "web"})
    assert f'href="/jobs/{job.id}"' in page.text
    assert "max_attempts_exhausted" in page.text and "broke on purpose" in page.text
    assert "No dead letters match." in (await dashboard.get("/dlq?queue=other")).text


async def test_periodic_page_lists_the_schedules(dashboard, tasks):
    tasks.periodic("nightly", "0 3 * * *", dict, {}, kind="web_ok", queue="web")
    await tasks.start([("web", 1)], **FAST_WORKER)
    await eventually(tasks.list_periodic)
    await tasks.shutdown()
    page = await dashboard.get("/periodic")
    assert "<td>nightly</td>" in page.text and "<code>0 3 * * *</code>" in page.text


async def test_quarantine_page_lists_quarantined_fingerprints(dashboard, tasks, conn):
    job = await tasks.insert({"n": 1}, kind="crashy", queue="web")
    await quarantine(conn, job.id)
    page = await dashboard.get("/quarantine")
    assert "crashy" in page.text and "quarantined" in page.text and "crash loop" in page.text


async def test_doctor_page_shows_every_check(dashboard, tasks):
    report = await tasks.doctor()
    page = await dashboard.get("/doctor")
    assert page.status_code == 200
    for check in report.checks:
        assert f"<td>{check.name}</td>" in page.text


async def test_a_database_that_does_not_answer_is_a_503_page_naming_it(database_url):
    down = awa.AsyncClient("postgresql://postgres@127.0.0.1:1/nowhere", connect_timeout=2)
    async with http(create_app(down)) as browser:
        for path in ("/", "/jobs", "/jobs/1", "/dlq", "/doctor"):
            page = await browser.get(path)
            assert page.status_code == 503, path
            assert "The database is unavailable" in page.text and "127.0.0.1" in page.text
            assert "Traceback" not in page.text
    await down.close()


async def test_an_unmigrated_database_is_a_503_page_saying_to_migrate(fresh_database):
    empty = awa.AsyncClient(await fresh_database())
    async with empty, http(create_app(empty)) as browser:
        page = await browser.get("/jobs")
    assert page.status_code == 503
    assert "SchemaNotMigrated" in page.text and "awa migrate" in page.text


async def test_a_database_gone_while_serving_is_a_503_page_naming_it(fresh_database, conn):
    url = await fresh_database()
    gone = awa.AsyncClient(url, connect_timeout=5)
    await gone.migrate()
    async with gone, http(create_app(gone)) as browser:
        assert (await browser.get("/jobs")).status_code == 200
        await conn.execute(f'DROP DATABASE "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        for path in ("/jobs", "/"):
            page = await browser.get(path)
            assert page.status_code == 503, (path, page.text)
            assert "does not exist" in page.text and "Traceback" not in page.text


async def test_metrics_are_served_when_asked(make_dashboard):
    async with make_dashboard(metrics=True) as browser:
        page = await browser.get("/metrics")
    assert page.status_code == 200 and "# TYPE" in page.text
    async with make_dashboard() as browser:
        assert (await browser.get("/metrics")).status_code == 404


async def test_mounted_under_a_prefix_its_links_carry_the_prefix(tasks):
    job = await failed_job(tasks)
    outer = Starlette(routes=[Mount("/ops/awa", create_app(tasks))])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=outer), base_url="http://app"
    ) as browser:
        page = await browser.get("/ops/awa/jobs")
        css = await browser.get("/ops/awa/static/dashboard.css")
    assert f'href="/ops/awa/jobs/{job.id}"' in page.text
    assert 'href="/ops/awa/static/dashboard.css"' in page.text and css.status_code == 200


async def quarantine(conn, job_id: int) -> None:
    """Quarantines the fingerprint of job ``job_id`` as the rescuer would."""
    await conn.execute(
        "INSERT INTO awa.quarantine (fingerprint, kind, crashes, window_started_at, "
        "last_crash_at, last_job_id, quarantined_at, reason) "
        "SELECT awa.job_fingerprint(kind, args), kind, 3, now(), now(), id, now(), 'crash loop' "
        "FROM awa.jobs WHERE id = $1",
        job_id,
    )


async def test_a_jobs_page_lists_its_follow_ups_and_a_follow_up_names_its_parent(dashboard, tasks):
    from awa.testing import AwaTestClient

    @tasks.task(dict, kind="web_parent", queue="web")
    async def web_parent(job):
        job.enqueue_on_completion({}, kind="web_ok", queue="web")

    parent = await tasks.insert({}, kind="web_parent", queue="web")
    done = await AwaTestClient(tasks).work_one("web_parent", queue="web")
    assert done is not None and done.job.state is awa.JobState.Completed
    [child] = await tasks.list_follow_ups(parent.id)
    page = (await dashboard.get(f"/jobs/{parent.id}")).text
    assert "Follow-ups (1)" in page and f'<a href="/jobs/{child.id}">{child.id}</a>' in page
    child_page = (await dashboard.get(f"/jobs/{child.id}")).text
    assert f'<a id="parent" href="/jobs/{parent.id}">job {parent.id}</a>' in child_page
    assert "No follow-ups" in child_page
