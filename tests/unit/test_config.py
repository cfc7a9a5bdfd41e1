"""Worker settings: every key given is used or refused by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from awa.config import WorkerConfig, normalize_queues, worker_config
from awa.errors import ConfigurationError


@pytest.mark.parametrize("extra", [{"weight": 0}, {"min_workers": 2}, {"rate_limit": "fast"}])
def test_a_queue_entry_refuses_keys_it_would_ignore(extra: dict[str, object]) -> None:
    (key,) = extra
    entry = {"name": "email", "max_workers": 4, **extra}
    with pytest.raises(ConfigurationError, match=rf"unknown key '{key}'.*name, max_workers"):
        normalize_queues([entry])


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
