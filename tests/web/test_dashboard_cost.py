"""The dashboard's benchmark (benches/operator/dashboard_cost.py) runs on a
small table in the normal suite, untimed, so its code cannot rot: every
page it times answers 200 on the table it fills."""

from __future__ import annotations

import importlib.util

from tests.processes import ROOT


def load_benchmark():
    path = ROOT / "benches" / "operator" / "dashboard_cost.py"
    spec = importlib.util.spec_from_file_location("dashboard_cost", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_benchmark_times_every_page_on_the_table_it_fills(server_url):
    benchmark = load_benchmark()
    timings = await benchmark.run(server_url, 2_000, 1)
    assert set(timings) == {
        *benchmark.pages(2_000), benchmark.COLD_OVERVIEW,
        "client.list_queues()", "client.queue_activity()",
    }  # fmt: skip
    assert all(ms > 0 for ms in timings.values())
