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
    assert cost_split.main(["--dsn", dsn, "--out", str(tmp_path), "--rtt-ms", "direct,0.5", *ARGV]) == 0
    doc = json.loads((tmp_path / "cost_split.json").read_text())
    direct, proxied = doc["results"]
    assert direct["added_rtt_ms"] is None and "achieved_rtt_ms" not in direct
    assert proxied["added_rtt_ms"] == 0.5 and proxied["achieved_rtt_ms"] > 0.5  # the proxy really delayed
    for result in (direct, proxied):
        assert result["sections"] == 2000
        assert {s: len(v) for s, v in result["raw_ms"].items()} == {s: 20 for s in cost_split.STEPS}
        assert set(result["split_us"]) >= {"iterative_scan", "expansion_sql_and_transfer", "mapping_to_hits",
                                           "B_minus_A", "server_work_yardstick"}
    md = (tmp_path / "cost_split.md").read_text()
    assert md.startswith("## Cost split") and "| 2,000 | direct |" in md and "+0.5 ms (achieved" in md


def test_server_work_is_added_without_changing_the_rows():
    sql = "SELECT doc_id, content FROM t ORDER BY e <=> %(q)s LIMIT 10"
    assert cost_split.with_server_work(sql, 5) == (
        "SELECT doc_id, content, (SELECT count(*) FROM generate_series(1, 5)) AS work FROM t "
        "ORDER BY e <=> %(q)s LIMIT 10")


@pytest.mark.slow
def test_cost_split_refuses_steps_that_return_other_sections(dsn, tmp_path, monkeypatch):
    real = cost_split.raw_fetch

    def drops_last_row(conn, statement, params):
        run = real(conn, statement, params)
        return lambda q: run(q)[:-1]

    monkeypatch.setattr(cost_split, "raw_fetch", drops_last_row)
    with pytest.raises(RuntimeError, match="returned other sections than B"):
        cost_split.main(["--dsn", dsn, "--out", str(tmp_path), "--rtt-ms", "direct", *ARGV])
