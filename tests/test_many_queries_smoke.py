"""The several-queries benchmark runs end to end on a small corpus (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.latency import many_queries


@pytest.mark.slow
def test_many_queries_runs_checks_equality_and_writes_results(dsn, tmp_path):
    argv = ["--dsn", dsn, "--out", str(tmp_path), "--size", "2000", "--n", "1,3", "--rtt-ms", "0.5",
            "--sets", "4", "--warmup", "1", "--seed", "5"]
    assert many_queries.main(argv) == 0  # it exits with an error if M and S ever differ
    doc = json.loads((tmp_path / "many_queries.json").read_text())
    assert [(r["n"], r["added_rtt_ms"]) for r in doc["results"]] == [(1, 0.5), (3, 0.5)]
    for r in doc["results"]:
        assert r["achieved_rtt_ms"] > 0.5 and r["statements"] == {"M": 1, "S": r["n"]}
        assert {v: len(t) for v, t in r["raw_ms"].items()} == {"M": 4, "S": 4}
    assert (tmp_path / "many_queries.png").stat().st_size > 0
    assert "| 3 | 0.5 ms |" in (tmp_path / "many_queries.md").read_text()
