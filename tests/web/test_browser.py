"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``
and ``chromium-driver``, driven by Selenium) against ``awa serve`` in a
process of its own. The pages load, a failed job is found from the jobs
list filtered by state and retried with the page's button, and screenshots
are saved under ``target/screenshots/`` as the run's artifacts.

Skipped, saying so, only where Chromium or its driver is not installed
(``tests/install-chromium.sh`` installs them where it can; ``make test``
runs it first)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.processes import ROOT
from tests.support import eventually
from tests.web.conftest import completed_job, failed_job

CHROMIUM = Path(os.environ.get("AWA_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("AWA_CHROMEDRIVER", "/usr/bin/chromedriver"))
SCREENSHOTS = ROOT / "target" / "screenshots"
#: How long the browser waits for an element, and the server to answer.
WAIT_S = 30.0

pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
    reason=f"the browser tests need {CHROMIUM} and {CHROMEDRIVER} (Debian's chromium and "
    "chromium-driver): run `sh tests/install-chromium.sh` as root, or `make chromium`",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def served(database_url: str) -> AsyncIterator[str]:
    """``awa serve --allow-actions`` on the test database; its base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "serve", "--allow-actions", "--port", str(port),
        "--database-url", database_url, "--title", "awa (test)",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    async def answers() -> bool:
        if process.returncode is not None:
            output = await process.stdout.read() if process.stdout else b""
            pytest.fail(f"awa serve exited {process.returncode}: {output.decode()}")
        try:
            async with httpx.AsyncClient() as probe:
                return (await probe.get(f"{base}/static/dashboard.css")).status_code == 200
        except httpx.TransportError:
            return False

    try:
        await eventually(answers, timeout=WAIT_S, interval=0.1)
        yield base
    finally:
        if process.returncode is None:
            process.terminate()
        output, _ = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode == 0, output.decode()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,900"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    """Saves the page as ``target/screenshots/<name>.png`` (a test artifact)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"the browser saved no screenshot at {path}"
    return path


def heading(driver: webdriver.Chrome) -> str:
    return str(
        WebDriverWait(driver, WAIT_S)
        .until(expected_conditions.presence_of_element_located((By.TAG_NAME, "h1")))
        .text
    )


async def test_a_failed_job_is_found_by_state_and_retried_from_the_browser(
    served, browser, tasks, conn
):
    for _ in range(3):
        await completed_job(tasks)
    job = await failed_job(tasks)
    await tasks.insert_many([{} for _ in range(4)], kind="web_ok", queue="emails")

    browser.get(f"{served}/")
    assert heading(browser) == "Queues"
    assert browser.find_elements(By.CSS_SELECTOR, "#queues svg.spark.completed polyline")
    screenshot(browser, "dashboard-queues")

    browser.get(f"{served}/jobs")
    Select(browser.find_element(By.ID, "state")).select_by_value("failed")
    browser.find_element(By.ID, "filter").click()
    WebDriverWait(browser, WAIT_S).until(expected_conditions.url_contains("state=failed"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    assert [row.get_attribute("class") for row in rows] == ["state-failed"]
    browser.find_element(By.LINK_TEXT, str(job.id)).click()
    assert heading(browser).startswith(f"Job {job.id}")
    assert browser.find_element(By.ID, "job-state").text == "failed"
    assert "BrokenOnPurpose" in browser.find_element(By.ID, "attempts").text
    screenshot(browser, "dashboard-job")

    browser.find_element(By.XPATH, "//button[text()='Retry this job']").click()
    WebDriverWait(browser, WAIT_S).until(expected_conditions.url_contains("done=retried"))
    assert browser.find_element(By.ID, "job-state").text == "available"
    assert "sent back to work" in browser.find_element(By.CSS_SELECTOR, ".notice").text
    screenshot(browser, "dashboard-job-retried")
    state = await conn.fetchval("SELECT state::text FROM awa.jobs WHERE id = $1", job.id)
    assert state == "available"


async def test_every_page_loads_in_the_browser(served, browser, tasks):
    await failed_job(tasks)
    pages = {
        "/": "Queues", "/jobs": "Jobs", "/dlq": "Dead letters", "/periodic": "Periodic schedules",
        "/quarantine": "Quarantine", "/doctor": "Doctor",
    }  # fmt: skip
    for path, title in pages.items():
        browser.get(f"{served}{path}")
        assert heading(browser) == title, path
        assert "Traceback" not in browser.page_source
    screenshot(browser, "dashboard-doctor")
    browser.get(f"{served}/jobs/424242")
    assert heading(browser) == "Not found"
