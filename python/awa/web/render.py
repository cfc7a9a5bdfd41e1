"""What the templates need beyond Jinja2: inline SVG sparklines, ages and
times for people."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Final

from markupsafe import Markup, escape

#: Size of a sparkline in CSS pixels.
SPARKLINE_WIDTH: Final = 120
SPARKLINE_HEIGHT: Final = 24


def sparkline(
    values: Sequence[int | float], css_class: str, label: str, top: float | None = None
) -> Markup:
    """``values`` as an inline SVG line, scaled to ``top`` (default: their own
    maximum; a flat line at the bottom when all are 0); ``label`` is its
    accessible name."""
    if not values:
        return Markup("")
    top = top or max(values) or 1
    step = SPARKLINE_WIDTH / max(len(values) - 1, 1)
    usable = SPARKLINE_HEIGHT - 2
    points = " ".join(
        f"{index * step:.1f},{SPARKLINE_HEIGHT - 1 - usable * value / top:.1f}"
        for index, value in enumerate(values)
    )
    return Markup(
        '<svg class="spark {css}" role="img" aria-label="{label}" width="{w}" height="{h}" '
        'viewBox="0 0 {w} {h}"><title>{label}</title>'
        '<polyline fill="none" points="{points}"/></svg>'
    ).format(css=css_class, label=label, w=SPARKLINE_WIDTH, h=SPARKLINE_HEIGHT, points=points)


def age(seconds: float | None) -> str:
    """``95`` → ``1m 35s``; ``None`` → ``–``."""
    if seconds is None:
        return "–"
    whole = int(max(seconds, 0))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def since(moment: datetime.datetime | None, now: datetime.datetime) -> str:
    """How long ago ``moment`` was, as :func:`age` says it."""
    return age(None if moment is None else (now - moment).total_seconds())


def when(moment: datetime.datetime | None) -> Markup:
    """A UTC time to the second in a ``<time>`` element, or ``–``."""
    if moment is None:
        return Markup("–")
    utc = moment.astimezone(datetime.UTC)
    return Markup('<time datetime="{iso}">{shown}</time>').format(
        iso=utc.isoformat(), shown=utc.strftime("%Y-%m-%d %H:%M:%S")
    )


def duration(start: datetime.datetime | None, end: datetime.datetime | None) -> str:
    """The time from ``start`` to ``end`` (``–`` when either is unknown)."""
    if start is None or end is None:
        return "–"
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else age(seconds)


def text(value: object) -> Markup:
    """Any value as escaped text (for error entries' fields)."""
    return escape("" if value is None else str(value))
