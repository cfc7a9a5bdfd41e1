"""``awa serve``: the dashboard and /metrics in a process of its own, basic
auth from the command line or AWA_BASIC_AUTH, and the usage errors."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx

from tests.processes import ROOT
from tests.support import eventually
from tests.web.test_browser import free_port


async def run_serve(
    *args: str, env: dict[str, str] | None = None, path_first: Path | None = None
) -> asyncio.subprocess.Process:
    paths = [str(ROOT / "python"), str(ROOT)]
    if path_first is not None:
        paths.insert(0, str(path_first))
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "serve", *args, cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(paths)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_without_the_web_extra_serve_is_a_usage_error_naming_the_install(
    database_url, tmp_path
):
    # A uvicorn that is not there, as on an install without awa-queue[web].
    (tmp_path / "uvicorn.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n"
    )
    process = await run_serve("--database-url", database_url, path_first=tmp_path)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2, err
    assert "pip install 'awa-queue[web]'" in err.decode()
    assert "uvicorn is not installed" in err.decode()


async def test_bad_basic_auth_and_json_are_usage_errors(database_url):
    process = await run_serve("--database-url", database_url, "--basic-auth", "nocolon")
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2 and "USER:PASSWORD" in err.decode(), err
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "--json", "serve", "--database-url", database_url,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2 and "takes no --json" in out.decode(), out


async def test_serve_asks_for_basic_auth_from_the_environment_and_serves_metrics(
    database_url, conn
):
    port = free_port()
    process = await run_serve(
        "--database-url", database_url, "--port", str(port),
        env={"AWA_BASIC_AUTH": "ops:secret"},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    async def answers() -> httpx.Response | None:
        try:
            async with httpx.AsyncClient() as probe:
                return await probe.get(f"{base}/")
        except httpx.TransportError:
            return None

    try:
        refused = await eventually(answers, timeout=30, interval=0.1)
        assert refused.status_code == 401 and "www-authenticate" in refused.headers
        async with httpx.AsyncClient(auth=("ops", "secret")) as operator:
            assert (await operator.get(f"{base}/")).status_code == 200
            metrics = await operator.get(f"{base}/metrics")
            # This process runs no worker, so its exposition may be empty; it is Prometheus text.
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            retry = await operator.post(f"{base}/jobs/1/retry")
            assert retry.status_code == 403 and "read-only" in retry.text
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err
    assert "awa dashboard on http://127.0.0.1" in err.decode()
