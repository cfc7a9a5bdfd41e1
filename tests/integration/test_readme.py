"""The README's quick start runs as written, against the test database."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    [runnable] = [block for block in blocks if "asyncio.run(main())" in block]
    return runnable


async def test_the_quick_start_runs(database_url, conn, tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start(), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        env={**os.environ, "AWA_DATABASE_URL": database_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert "sending 'Welcome' to ada@example.com (attempt 1)" in out.decode()
