"""The release build, installed the way a user installs it.

``make wheel`` builds one wheel and one sdist into an emptied ``target/dist``,
both carrying the licences. The wheel goes into a fresh virtualenv with no
cargo or rustc on PATH and only prebuilt wheels allowed; there ``awa
--version`` works and the README's quick start runs from a new directory
against the test database, and a handler that raises has its traceback in
the log. An sdist build without Rust stops at once, naming rustup, instead of
fetching a toolchain.

Slow: the first ``make wheel`` compiles the core with the release profile.
"""

from __future__ import annotations

import asyncio
import email.parser
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.integration.test_readme import quick_start

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "target" / "dist"
RUST_TOOLS = ("cargo", "rustc", "rustup")
BUILD_TIMEOUT_S = 1200
STEP_TIMEOUT_S = 300

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S + STEP_TIMEOUT_S)]


def without_rust(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with no directory holding cargo, rustc or rustup on PATH,
    and no source tree or virtualenv leaking in (PYTHONPATH, VIRTUAL_ENV)."""
    path = [
        directory
        for directory in environ.get("PATH", "").split(os.pathsep)
        if directory and not any(Path(directory, tool).exists() for tool in RUST_TOOLS)
    ]
    env = {
        key: value
        for key, value in environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join(path)
    assert shutil.which("cargo", path=env["PATH"]) is None
    return env


def run(
    command: list[str | Path], *, timeout: float = STEP_TIMEOUT_S, **options: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        **options,
    )


@pytest.fixture(scope="module")
def dist() -> Path:
    """``make wheel``'s output, built once for the module. A leftover wheel
    planted first must be gone afterwards: the directory is emptied."""
    DIST.mkdir(parents=True, exist_ok=True)
    (DIST / "awa_queue-0.0.0-cp311-abi3-linux_x86_64.whl").write_bytes(b"stale")
    built = run(["make", "wheel", f"PYTHON={sys.executable}"], cwd=ROOT, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout + built.stderr
    return DIST


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [built] = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed, no Rust on PATH, and
    nothing built from source (``--only-binary :all:``)."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    env = without_rust(os.environ)
    made = run([sys.executable, "-m", "venv", home], env=env)
    assert made.returncode == 0, made.stderr
    installed = run(
        [home / "bin" / "python", "-m", "pip", "install", "--only-binary", ":all:", wheel],
        env=env,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return home


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def test_make_wheel_leaves_exactly_one_wheel_and_one_sdist(dist):
    assert sorted(path.suffix for path in dist.iterdir()) == [".gz", ".whl"]
    [wheel] = dist.glob("*.whl")
    # abi3: one wheel serves every CPython from 3.11 on.
    assert "-cp311-abi3-" in wheel.name


def test_the_wheel_carries_both_licences_and_the_project_urls(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata_name] = [name for name in names if name.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    dist_info = metadata_name.removesuffix("/METADATA")
    assert f"{dist_info}/licenses/LICENSE-MIT" in names
    assert f"{dist_info}/licenses/LICENSE-APACHE" in names
    assert metadata["License-Expression"] == "MIT OR Apache-2.0"
    assert sorted(metadata.get_all("License-File") or []) == ["LICENSE-APACHE", "LICENSE-MIT"]
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(urls)


def test_the_sdist_carries_both_licences_and_its_build_backend(dist):
    [sdist] = dist.glob("*.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    assert {
        f"{top}/LICENSE-MIT",
        f"{top}/LICENSE-APACHE",
        f"{top}/build_backend/require_rust.py",
    } <= names


def test_awa_version_in_a_fresh_venv_without_rust(venv, wheel):
    shown = run([venv / "bin" / "awa", "--version"], env=without_rust(os.environ))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"awa {wheel_version(wheel)}\n"


async def run_script(
    venv: Path, directory: Path, name: str, source: str, database_url: str
) -> tuple[int, str, str]:
    """Runs ``source`` as ``directory/name`` with the venv's Python, from
    ``directory``, on the test database."""
    (directory / name).write_text(source, encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"),
        name,
        cwd=directory,
        env={**without_rust(os.environ), "AWA_DATABASE_URL": database_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def test_the_readme_quick_start_runs_from_the_installed_wheel(
    venv, database_url, conn, tmp_path
):
    code, out, err = await run_script(venv, tmp_path, "quick_start.py", quick_start(), database_url)
    assert code == 0, err
    assert "sending 'Welcome' to ada@example.com (attempt 1)" in out


FAILING_HANDLER = textwrap.dedent("""
    import asyncio
    import logging

    import awa

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    client = awa.AsyncClient()


    @client.task(dict, kind="always_fails", queue="install_check")
    async def always_fails(job):
        raise RuntimeError("the handler failed on purpose")


    async def main():
        await client.migrate()
        job = await client.insert({}, kind="always_fails", queue="install_check", max_attempts=2)
        await client.start([("install_check", 1)])
        while (await client.get_job(job.id)).state is not awa.JobState.Retryable:
            await asyncio.sleep(0.05)
        await client.close()


    asyncio.run(main())
""")


async def test_a_failing_handler_logs_its_traceback_from_the_installed_wheel(
    venv, database_url, conn, tmp_path
):
    code, _, err = await run_script(venv, tmp_path, "failing.py", FAILING_HANDLER, database_url)
    assert code == 0, err
    [line] = [line for line in err.splitlines() if line.startswith("WARNING awa.worker job ")]
    assert "always_fails" in line
    assert "RuntimeError: the handler failed on purpose" in line
    assert "Traceback (most recent call last)" in err
    assert "in always_fails" in err
    assert 'raise RuntimeError("the handler failed on purpose")' in err


def test_an_sdist_build_without_rust_stops_at_once_naming_rustup(dist, tmp_path):
    """Offline against a local copy of the build requirements, so a backend
    that wants to fetch a toolchain shows it by asking for ``puccinialin``."""
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/pyproject.toml")
        assert member is not None
        requires = tomllib.load(member)["build-system"]["requires"]
    wheels = tmp_path / "build-requirements"
    fetched = run(
        [sys.executable, "-m", "pip", "download", "--only-binary", ":all:", "-d", wheels, *requires]
    )
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    built = run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
            "--find-links", wheels, "--wheel-dir", tmp_path / "out", sdist,
        ],
        env=without_rust(os.environ),
    )  # fmt: skip
    output = built.stdout + built.stderr
    assert built.returncode != 0, output
    assert "rustup" in output
    assert "https://rustup.rs" in output
    assert "puccinialin" not in output
    assert not list((tmp_path / "out").glob("*.whl"))
