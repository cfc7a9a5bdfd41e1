"""How much the property tests try.

By default every property runs a fixed, derandomized set of examples, so the
suite is quick and a failure repeats. ``AWA_FUZZ_SCALE=20`` (say) runs twenty
times as many, drawn at random, for a longer hunt by hand.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("AWA_FUZZ_SCALE", "1")))


def fuzz(examples: int) -> settings:
    """Settings for a property tried on ``examples`` examples (times the scale)."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        # Each example of a database property reuses the test's client and
        # connection; examples do not depend on each other's rows.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
