"""The documentation site builds with ``mkdocs build --strict``, and its API
reference covers the public API.

The build is what ``make docs`` runs (mkdocs.yml at the root): docs/*.md,
and the reference that mkdocstrings generates from the docstrings. A broken
link between pages, a missing #anchor or image, or a docstring mkdocstrings
cannot render is a warning, and ``--strict`` makes a warning fail the build.
It reads only this tree: no page, inventory or font is fetched.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The modules the reference documents.
REFERENCE_MODULES = (
    "awa",
    "awa.metrics",
    "awa.prometheus",
    "awa.otel",
    "awa.tracing",
    "awa.testing",
    "awa.testing_plugin",
    "awa.bridges",
    "awa.bridges.psycopg",
    "awa.bridges.sqlalchemy",
    "awa.contrib.django",
    "awa.events",
    "awa.web",
)

#: A build takes about 5 s here; this bounds a hung one.
BUILD_TIMEOUT_S = 100


def build_site(site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of this tree into ``site``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


def inventory_names(site: Path) -> set[str]:
    """The object names in the site's ``objects.inv`` (Sphinx's format:
    four header lines, then zlib-compressed ``name domain:role ...`` lines)."""
    data = (site / "objects.inv").read_bytes()
    *_header, body = data.split(b"\n", 4)
    lines = zlib.decompress(body).decode("utf-8").splitlines()
    return {line.split(" ", 1)[0] for line in lines if line}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module's tests."""
    site = tmp_path_factory.mktemp("site")
    build = build_site(site)
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr}"
    assert "WARNING" not in build.stderr, build.stderr
    return site


def test_every_page_is_built(site: Path) -> None:
    guides = sorted(path.stem for path in (ROOT / "docs").glob("*.md"))
    api_pages = sorted(path.stem for path in (ROOT / "docs" / "api").glob("*.md"))
    assert "operating" in guides
    assert {"index", "clients", "jobs", "errors", "metrics", "testing"} <= set(api_pages)
    for page in guides:
        built = site / "index.html" if page == "index" else site / page / "index.html"
        assert built.is_file(), f"docs/{page}.md was not built"
    for page in api_pages:
        built = site / "api" / ("" if page == "index" else page) / "index.html"
        assert built.is_file(), f"docs/api/{page}.md was not built"


@pytest.mark.parametrize("package", ["awa", "awa.web"])
def test_the_reference_documents_every_public_name(site: Path, package: str) -> None:
    """Each name of the package's ``__all__`` has an entry, under the name
    a program imports it by or where it is defined."""
    names = inventory_names(site)
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        canonical = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if f"{package}.{name}" not in names and canonical not in names:
            missing.append(name)
    assert missing == [], f"{package}.__all__ names with no entry in the API reference"


def test_the_reference_documents_every_public_module(site: Path) -> None:
    names = inventory_names(site)
    assert [module for module in REFERENCE_MODULES if module not in names] == []


def test_roles_in_docstrings_become_links(site: Path) -> None:
    clients = (site / "api" / "clients" / "index.html").read_text(encoding="utf-8")
    # AsyncClient's docstring says :class:`awa.ConfigurationError`.
    assert 'href="../errors/#awa.ConfigurationError"><code>awa.ConfigurationError</code>' in (
        clients
    )
    # A role naming a method by its short name links to that class's method.
    assert 'href="#awa.AsyncClient.insert"><code>insert</code>' in clients
    for page in (site / "api").rglob("index.html"):
        text = page.read_text(encoding="utf-8")
        for role in (":class:`", ":meth:`", ":func:`", ":mod:`", ":data:`", ":attr:`"):
            assert role not in text, f"{page.relative_to(site)} shows the role {role} as text"


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strictness the other tests rely on: a copy of the docs with a link
    to a page that does not exist does not build."""
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n\n[gone](no-such-page.md)\n", encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.split("\nnav:", 1)[0].replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert build.returncode != 0
    assert "no-such-page.md" in build.stderr
