"""What the templates draw with: sparklines, ages, durations."""

from __future__ import annotations

import datetime

from awa.activity import QueueActivity, minute_starts
from awa.web.app import failure_rates
from awa.web.render import SPARKLINE_HEIGHT, age, duration, sparkline


def points(svg: str) -> list[tuple[float, float]]:
    listed = svg.split('points="')[1].split('"')[0]
    return [tuple(map(float, point.split(","))) for point in listed.split()]  # type: ignore[misc]


def test_a_sparkline_spans_its_width_and_puts_the_maximum_at_the_top():
    drawn = points(sparkline([0, 5, 10], "completed", "label"))
    assert [x for x, _ in drawn] == [0.0, 60.0, 120.0]
    assert drawn[0][1] == SPARKLINE_HEIGHT - 1 and drawn[2][1] == 1.0


def test_a_sparkline_of_zeros_is_flat_and_a_given_top_scales_it():
    assert {y for _, y in points(sparkline([0, 0], "failed", "label"))} == {SPARKLINE_HEIGHT - 1}
    half = points(sparkline([0.5], "failed", "label", 1.0))[0][1]
    assert half == (SPARKLINE_HEIGHT - 1) - (SPARKLINE_HEIGHT - 2) / 2


def test_a_sparklines_label_is_escaped():
    assert "<b>" not in sparkline([1], "completed", "queue <b>")
    assert "queue &lt;b&gt;" in sparkline([1], "completed", "queue <b>")


def test_ages_and_durations_read_as_people_say_them():
    assert [age(None), age(5), age(95), age(3 * 3600 + 120), age(2 * 86400 + 3600)] == [
        "–", "5s", "1m 35s", "3h 2m", "2d 1h",
    ]  # fmt: skip
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert duration(start, start + datetime.timedelta(milliseconds=40)) == "40 ms"
    assert duration(start, None) == "–"


def test_failure_rates_are_per_minute_and_zero_where_nothing_finished():
    starts = minute_starts(3, datetime.datetime(2026, 1, 1, 12, 0, 30, tzinfo=datetime.UTC))
    assert starts[-1] == datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    entry = QueueActivity("q", starts, completed=(3, 0, 0), failed=(1, 0, 2))
    assert failure_rates(entry) == (0.25, 0.0, 1.0)
