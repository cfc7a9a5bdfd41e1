"""`awa --version` and `python -m awa --version` print the package's version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import awa
from awa import cli


def test_version_option_prints_the_installed_distributions_version(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"awa {importlib.metadata.version('awa-queue')}\n"


def test_version_from_a_source_tree_without_metadata_says_so(capsys, monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"awa {awa.__version__} ")
    assert "not installed" in out


def test_python_dash_m_awa_prints_the_version():
    finished = subprocess.run(
        [sys.executable, "-m", "awa", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith("awa ")
