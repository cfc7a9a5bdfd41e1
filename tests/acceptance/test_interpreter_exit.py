"""The interpreter exits with a worker running, in a real subprocess: no
hang, and no crash in the native module, whichever way it leaves."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from tests.processes import ROOT

EXIT_TIMEOUT_S = 30.0


async def _run(database_url: str, mode: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-X", "faulthandler", "-m", "tests.acceptance.exit_worker",
        database_url, mode,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line.strip() == b"started", line
    if mode == "sigterm":
        await asyncio.sleep(0.3)  # let the handler start
        process.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.wait_for(process.wait(), EXIT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"the interpreter did not exit within {EXIT_TIMEOUT_S}s ({mode})")
    stderr = (await process.stderr.read()).decode(errors="replace")
    return code, stderr


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("return", 0), ("sys_exit", 3), ("sys_exit_sync", 3), ("sigterm", -signal.SIGTERM)],
)
async def test_the_interpreter_exits_with_a_worker_running(database_url, conn, mode, expected):
    code, stderr = await _run(database_url, mode)
    assert "Fatal Python error" not in stderr, stderr
    assert "Segmentation fault" not in stderr, stderr
    assert code == expected, stderr
