"""The cost-split benchmark runs on a small corpus, and its same-sections check bites.

No timing is asserted: the split's numbers are for benchmarks/results, not tests.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.latency import cost_split

ARGV = ["--sizes", "2000", "--queries", "20", "--warmup", "2", "--seed", "5"]


@pytest.mark.slow
def test_cost_split_runs_and_writes_every_step(dsn, tmp_path):
    assert cost_split.main(["--dsn", dsn, "--out", str(tmp_path), *ARGV]) == 0
    doc = json.loads((tmp_path / "cost_split.json").read_text())
    (result,) = doc["results"]
    assert result["sections"] == 2000
    assert {s: len(v) for s, v in result["raw_ms"].items()} == {s: 20 for s in cost_split.STEPS}
    assert set(result["split_us"]) >= {"iterative_scan", "expansion_sql_and_transfer", "mapping_to_hits", "B_minus_A"}
    assert (tmp_path / "cost_split.md").read_text().startswith("## Cost split")


@pytest.mark.slow
def test_cost_split_refuses_steps_that_return_other_sections(dsn, tmp_path, monkeypatch):
    real = cost_split.raw_fetch

    def drops_last_row(conn, statement, params):
        run = real(conn, statement, params)
        return lambda q: run(q)[:-1]

    monkeypatch.setattr(cost_split, "raw_fetch", drops_last_row)
    with pytest.raises(RuntimeError, match="returned other sections than B"):
        cost_split.main(["--dsn", dsn, "--out", str(tmp_path), *ARGV])
