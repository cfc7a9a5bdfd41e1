"""Worker settings: every key given is used or refused by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from awa.config import WorkerConfig, normalize_queues, worker_config
from awa.errors import ConfigurationError


@pytest.mark.parametrize("extra", [{"rate_limit": "fast"}, {"priority_aging_interval": 60}])
def test_a_queue_entry_refuses_keys_it_would_ignore(extra: dict[str, object]) -> None:
    (key,) = extra
    entry = {"name": "email", "max_workers": 4, **extra}
    with pytest.raises(
        ConfigurationError, match=rf"unknown key '{key}'.*name, max_workers, weight, min_workers"
    ):
        normalize_queues([entry])


def test_queue_entries_give_their_shares_of_the_global_cap() -> None:
    config = worker_config(
        [{"name": "a", "max_workers": 8, "weight": 3}, {"name": "b", "min_workers": 2}, ("c", 4)],
        {"global_max_workers": 6},
    )
    assert config.queue_shares == (("a", 3, 0), ("b", 1, 2))


def test_shares_without_a_global_cap_are_refused_as_unused() -> None:
    with pytest.raises(ConfigurationError, match="set global_max_workers too"):
        worker_config([{"name": "a", "weight": 2}], {})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"weight": 0}, "weight of queue 'a' must be an integer >= 1"),
        ({"weight": 1.5}, "weight of queue 'a' must be an integer >= 1"),
        ({"min_workers": -1}, "min_workers of queue 'a' must be a whole number"),
        (
            {"min_workers": 5},
            r"min_workers of queue 'a' \(5\) must not exceed its max_workers \(4\)",
        ),
    ],
)
def test_bad_shares_are_refused(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        worker_config([{"name": "a", "max_workers": 4, **extra}], {"global_max_workers": 4})


def test_a_queue_entry_needs_a_name() -> None:
    with pytest.raises(ConfigurationError, match="needs a 'name'"):
        normalize_queues([{"max_workers": 4}])


def test_a_queue_entry_keeps_name_and_max_workers() -> None:
    assert normalize_queues([{"name": "email", "max_workers": 4}, {"name": "x"}]) == (
        ("email", 4),
        ("x", 10),
    )


def test_an_unknown_worker_setting_is_named_with_the_closest_accepted_one() -> None:
    with pytest.raises(ConfigurationError, match="unknown worker setting 'poll_intervall'") as info:
        worker_config({"q": 1}, {"poll_intervall": 2.0})
    assert "did you mean 'poll_interval'" in str(info.value)
    assert "claim_batch_size" in str(info.value)  # the accepted ones are listed


def test_queues_are_not_a_worker_setting() -> None:
    with pytest.raises(ConfigurationError, match="unknown worker setting 'queues'"):
        worker_config({"q": 1}, {"queues": {"q": 2}})


def test_known_worker_settings_are_kept() -> None:
    config = worker_config({"q": 1}, {"poll_interval": 2.0})
    assert config == WorkerConfig(queues=(("q", 1),), poll_interval=2.0)


def test_importing_the_main_module_does_not_exit() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import awa.__main__; print('still here')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "still here", probe.stderr
