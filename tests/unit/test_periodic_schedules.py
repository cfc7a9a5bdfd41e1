"""Fire times of periodic schedules: cron in IANA zones across DST, seconds,
and what each missed-fire policy enqueues. No database."""

from __future__ import annotations

import datetime as dt

import pytest

from awa.errors import ValidationError
from awa.periodic import MISSED_AFTER_S, Schedule, schedule_of

UTC = dt.UTC


def fires(schedule: Schedule, start: dt.datetime, count: int) -> list[dt.datetime]:
    found, moment = [], start
    for _ in range(count):
        moment = schedule.next_after(moment)
        found.append(moment)
    return found


def test_a_daily_time_the_clocks_skip_fires_once_right_after_the_gap() -> None:
    berlin = Schedule("d", "30 2 * * *", "Europe/Berlin", "coalesce")
    # 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    assert fires(berlin, dt.datetime(2026, 3, 28, 12, tzinfo=UTC), 2) == [
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST
        dt.datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
    ]


def test_a_daily_time_the_clocks_repeat_fires_once() -> None:
    berlin = Schedule("d", "30 2 * * *", "Europe/Berlin", "coalesce")
    # 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 comes twice.
    assert fires(berlin, dt.datetime(2026, 10, 24, 12, tzinfo=UTC), 2) == [
        dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST
        dt.datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET, the next day
    ]


def test_six_fields_put_seconds_first() -> None:
    every_2s = Schedule("s", "*/2 * * * * *", "UTC", "coalesce")
    assert fires(every_2s, dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), 2) == [
        dt.datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC),
        dt.datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC),
    ]


def test_a_five_field_schedule_fires_on_minutes_in_its_zone() -> None:
    tokyo = Schedule("t", "0 9 * * 1-5", "Asia/Tokyo", "coalesce")
    # Friday 2026-01-02 09:00 JST is 00:00 UTC; then Monday 2026-01-05.
    assert fires(tokyo, dt.datetime(2026, 1, 1, 12, tzinfo=UTC), 2) == [
        dt.datetime(2026, 1, 2, 0, 0, tzinfo=UTC),
        dt.datetime(2026, 1, 5, 0, 0, tzinfo=UTC),
    ]


NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
#: An hourly schedule whose leader was away for five hours.
AWAY_SINCE = NOW - dt.timedelta(hours=5)


@pytest.mark.parametrize(
    ("policy", "enqueued"),
    [
        ("catch_up", [AWAY_SINCE + dt.timedelta(hours=h) for h in range(6)]),
        ("coalesce", [NOW]),  # the fire on time; the missed ones fold into it
        ("skip", [NOW]),
    ],
)
def test_the_missed_fire_policy_decides_what_an_outage_enqueues(policy, enqueued) -> None:
    hourly = Schedule("h", "0 * * * *", "UTC", policy)
    times, after = hourly.due(AWAY_SINCE, NOW)
    assert times == enqueued
    assert after == NOW + dt.timedelta(hours=1)


@pytest.mark.parametrize(("policy", "enqueued"), [("coalesce", 1), ("skip", 0), ("catch_up", 5)])
def test_with_no_fire_on_time_coalesce_enqueues_the_latest_missed_one(policy, enqueued) -> None:
    hourly = Schedule("h", "0 * * * *", "UTC", policy)
    now = NOW + dt.timedelta(seconds=MISSED_AFTER_S + 1)
    times, _ = hourly.due(AWAY_SINCE + dt.timedelta(hours=1), now)
    assert len(times) == enqueued
    if policy == "coalesce":
        assert times == [NOW]


@pytest.mark.parametrize(
    ("cron", "zone", "policy", "field"),
    [
        ("* * * *", "UTC", "coalesce", "cron_expr"),
        ("* * * * * * *", "UTC", "coalesce", "cron_expr"),
        ("61 * * * *", "UTC", "coalesce", "cron_expr"),
        ("* * * * *", "Mars/Olympus", "coalesce", "timezone"),
        ("* * * * *", "../etc/passwd", "coalesce", "timezone"),
        ("* * * * *", "UTC", "sometimes", "missed_fire_policy"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(cron, zone, policy, field) -> None:
    with pytest.raises(ValidationError) as refused:
        schedule_of("nightly", cron, zone, policy)
    assert refused.value.field == field
