"""Render the tree's reStructuredText roles as links in the API reference.

awa's docstrings are plain prose with Sphinx roles (:class:`awa.Job`,
:meth:`insert`). Markdown knows no roles, so mkdocstrings would print them
as ``:class:`` followed by code. This Griffe extension rewrites each role,
before the docstring is parsed, into an optional cross-reference of
mkdocs-autorefs: a link where the target is rendered somewhere in the site,
the same code text where it is not (a private helper, a module left out of
the reference), and never a warning. A role's target is resolved the way
Python would read it in the docstring's scope, so :meth:`stop` in a class
links to that class's method. ``~`` shows the last part of the name only,
as in Sphinx. A paragraph that ends in ``::`` introduces a literal block,
as in reStructuredText: the marker becomes one colon (none after a space),
and the indented block is Markdown's code block already. Double-backtick
literals need nothing: Markdown reads them as code too.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):`(?P<target>[^`]+)`")
"""A role as the docstrings write it: ``:kind:`target```."""

LITERAL_BLOCK_MARKER = re.compile(r"(?P<space>\s?)::\n(?=\n)")
"""``::`` ending a paragraph before a blank line: a literal block follows."""


def qualified_name(obj: griffe.Object, target: str) -> str:
    """The full dotted path a role's target names, seen from ``obj``'s scope.

    A name Griffe cannot resolve is kept as written: autorefs then shows it
    as code instead of linking it.
    """
    if target.startswith("awa."):
        return target
    first, _, rest = target.partition(".")
    try:
        resolved = obj.resolve(first)
    except (griffe.NameResolutionError, KeyError, AttributeError):
        return target
    return f"{resolved}.{rest}" if rest else resolved


def cross_reference(obj: griffe.Object, match: re.Match[str]) -> str:
    """One role as an optional autorefs cross-reference, shown as code."""
    target = match["target"].strip()
    shown = target
    if target.startswith("~"):
        target = target[1:]
        shown = target.rpartition(".")[2]
    identifier = html.escape(qualified_name(obj, target), quote=True)
    code = f"<code>{html.escape(shown)}</code>"
    return f'<autoref identifier="{identifier}" optional>{code}</autoref>'


def literal_block_marker(match: re.Match[str]) -> str:
    """``text::`` reads ``text:``; a ``::`` standing after a space goes."""
    return "\n" if match["space"] else ":\n"


class RstRoles(griffe.Extension):
    """Rewrites roles in every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s own docstring (aliases share their target's)."""
        docstring = obj.docstring
        if docstring is None or ":" not in docstring.value:
            return
        text = ROLE.sub(lambda match: cross_reference(obj, match), docstring.value)
        docstring.value = LITERAL_BLOCK_MARKER.sub(literal_block_marker, text)
