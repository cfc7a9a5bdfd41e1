"""maturin's PEP 517 build backend, except that a build without Rust stops at
once and says how to get Rust.

Where ``cargo`` is not on PATH, maturin's own backend asks for
``puccinialin`` and quietly downloads a Rust toolchain (about 660 MB) in the
middle of ``pip install``. Here that is switched off with
``MATURIN_NO_INSTALL_RUST``, the switch maturin documents for it (maturin's
guide, "Environment Variables": https://www.maturin.rs/environment-variables.html),
and every hook first checks for ``cargo``: without it the build fails with
one message naming rustup and the prebuilt wheels. Everything else is
maturin's backend, unchanged.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tomllib
from collections.abc import Callable
from typing import Any

import maturin

# maturin reads it in every hook; its subprocesses inherit it.
os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
# maturin warns that pip "will not use maturin" when build-backend is not
# `maturin`; this backend is maturin's, so the warning would mislead.
os.environ["MATURIN_NO_MISSING_BUILD_BACKEND_WARNING"] = "1"

#: The PEP 517 hooks maturin provides (the optional ones only where it has them).
HOOKS = (
    "get_requires_for_build_sdist",
    "build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_wheel",
    "build_wheel",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_editable",
    "build_editable",
)


def _rust_version() -> str:
    """The minimum Rust version, as Cargo.toml states it (hooks run in the project root)."""
    with open("Cargo.toml", "rb") as manifest:
        return str(tomllib.load(manifest)["package"].get("rust-version", "stable"))


def require_cargo() -> None:
    """Exit with the message saying how to get Rust, unless ``cargo`` is on PATH."""
    if shutil.which("cargo") is not None:
        return
    sys.stderr.write(
        f"\nawa-queue: building from source needs Rust {_rust_version()} or newer, and no "
        "`cargo` is on PATH.\n"
        "Install Rust with rustup (https://rustup.rs), open a new shell and run this again,\n"
        "or install a prebuilt wheel, which needs no Rust: "
        "pip install --only-binary awa-queue awa-queue\n"
        "(This build never downloads a Rust toolchain itself: MATURIN_NO_INSTALL_RUST is set.)\n\n"
    )
    sys.exit(1)


def _requiring_cargo(hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def checked(*args: Any, **kwargs: Any) -> Any:
        require_cargo()
        return hook(*args, **kwargs)

    return checked


for _name in HOOKS:
    if hasattr(maturin, _name):
        globals()[_name] = _requiring_cargo(getattr(maturin, _name))
