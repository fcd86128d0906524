"""The growth curve's report renders every row with its day and achieved RTT (no database)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.scale.run import write_report

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "scale.json"


def test_scale_report_names_each_rows_day_and_achieved_rtt(tmp_path):
    doc = json.loads(RESULTS.read_text())
    text = write_report(doc["results"], doc["meta"], tmp_path)
    rows = [line for line in text.splitlines() if line[:3] in {f"| {d}" for d in "123456789"}]
    assert len(rows) == len(doc["results"])
    for r, line in zip(doc["results"], rows):
        one = r["latency"]["1.0"]
        assert line.endswith(f"| {r['measured']}, {r['latency']['0.0']['achieved_rtt_ms']:.2f} / "
                             f"{one['achieved_rtt_ms']:.2f} |"), line
        assert f"| {one['B_over_A']} |" in line
    assert (tmp_path / "scale.md").read_text() == text
