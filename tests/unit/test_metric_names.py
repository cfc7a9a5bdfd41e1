"""docs/metrics.md lists every instrument awa reports, under both names."""

from __future__ import annotations

from pathlib import Path

from awa import metrics, prometheus

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_every_instrument_is_documented_with_its_prometheus_name():
    text = DOC.read_text()
    for instrument in metrics.INSTRUMENTS:
        exported = prometheus.prometheus_name(instrument)
        if instrument.kind == "counter":
            exported += "_total"
        assert f"| `{instrument.name}` | `{exported}` | {instrument.kind} |" in text, (
            instrument.name
        )


def test_instrument_names_are_unique_and_dotted():
    names = [instrument.name for instrument in metrics.INSTRUMENTS]
    assert len(names) == len(set(names))
    assert all(name.startswith("awa.") for name in names)
