"""awa.worker.processes without a database: the supervisor's timings (and
their override, AWA_SUPERVISOR_TIMINGS), its restart backoff, and children
whose health it cannot judge."""

from __future__ import annotations

import sys

import pytest

from awa.errors import ConfigurationError
from awa.worker.processes import (
    RESTART_BACKOFF_JITTER,
    TIMINGS_ENV,
    Timings,
    backoff_s,
    describe_exit,
    run_children,
)


def test_without_the_variable_the_timings_are_the_documented_constants():
    assert Timings.from_environment({}) == Timings()
    assert Timings.from_environment({TIMINGS_ENV: "  "}) == Timings()
    assert Timings().backoff_initial_s == 1.0 and Timings().backoff_max_s == 30.0
    assert Timings().crash_loop_limit == 5


def test_the_variable_overrides_the_timings_it_names_and_keeps_the_others():
    timings = Timings.from_environment(
        {TIMINGS_ENV: "backoff_initial_s=0.1, crash_loop_limit=3,staleness_s=2"}
    )
    assert (timings.backoff_initial_s, timings.crash_loop_limit, timings.staleness_s) == (
        0.1,
        3,
        2.0,
    )
    assert timings.backoff_max_s == Timings().backoff_max_s


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("backof_initial_s=1", "'backof_initial_s=1' is not name=value with a name of"),
        ("backoff_initial_s", "'backoff_initial_s' is not name=value"),
        ("backoff_initial_s=0", "backoff_initial_s must be a number of seconds above 0, got '0'"),
        ("wedged_after_s=-1", "wedged_after_s must be a number of seconds above 0"),
        ("staleness_s=soon", "staleness_s must be a number of seconds above 0, got 'soon'"),
        ("staleness_s=nan", "staleness_s must be a number of seconds above 0"),
        ("staleness_s=inf", "staleness_s must be a number of seconds above 0"),
        ("crash_loop_limit=2.5", "crash_loop_limit must be a whole number above 0, got '2.5'"),
    ],
)
def test_a_bad_override_is_a_configuration_error_that_names_it(value, message):
    with pytest.raises(ConfigurationError, match=TIMINGS_ENV) as raised:
        Timings.from_environment({TIMINGS_ENV: value})
    assert message in str(raised.value)


def test_the_backoff_doubles_from_the_first_wait_up_to_the_cap_less_some_jitter():
    timings = Timings(backoff_initial_s=1.0, backoff_max_s=30.0)
    for deaths, full in [(0, 1.0), (1, 2.0), (2, 4.0), (4, 16.0), (5, 30.0), (500, 30.0)]:
        for _ in range(50):
            assert full * (1 - RESTART_BACKOFF_JITTER) <= backoff_s(deaths, timings) <= full


def test_an_exit_is_described_by_its_status_or_its_signal():
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(None) == "is still running"


async def test_without_a_database_url_a_child_that_keeps_dying_is_still_a_crash_loop(caplog):
    quick = Timings(backoff_initial_s=0.01, backoff_max_s=0.02, crash_loop_limit=3)
    result = await run_children(
        [sys.executable, "-c", "raise SystemExit(3)"], 2, stop_timeout_s=5, timings=quick
    )
    assert result.exit_code == 1
    assert "health is not judged" in caplog.text
    assert "a crash loop" in caplog.text
    assert max(child.restarts for child in result.children) == 2
    assert "exited with status 3" in {child.last_exit for child in result.children}
    assert all(child.healthy is not True for child in result.children)


def test_the_usage_status_is_the_command_lines():
    from awa.cli.output import ExitCode
    from awa.worker.processes import EXIT_USAGE

    assert EXIT_USAGE == ExitCode.USAGE
