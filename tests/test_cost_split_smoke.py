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
                                           "B_minus_A", "server_work_yardstick", "wider_result",
                                           "expansion_work", "F_statement", "F_mapping", "F_minus_A"}
        assert result["pad_chars"] > 0  # B's result (hits + context rows) is larger than A's
    md = (tmp_path / "cost_split.md").read_text()
    assert md.startswith("## Cost split") and "| 2,000 | direct |" in md and "+0.5 ms (achieved" in md


def test_server_work_is_added_without_changing_the_rows():
    sql = "SELECT doc_id, content FROM t ORDER BY e <=> %(q)s LIMIT 10"
    assert cost_split.with_server_work(sql, 5) == (
        "SELECT doc_id, content, (SELECT count(*) FROM generate_series(1, 5)) AS work FROM t "
        "ORDER BY e <=> %(q)s LIMIT 10")


def test_content_is_padded_without_changing_the_rows():
    sql = "SELECT doc_id, content, token_count FROM t ORDER BY e <=> %(q)s LIMIT 10"
    assert cost_split.padded_content(sql, 7) == (
        "SELECT doc_id, content || repeat(' ', 7) AS content, token_count FROM t ORDER BY e <=> %(q)s LIMIT 10")
    with pytest.raises(ValueError, match="content"):
        cost_split.padded_content("SELECT doc_id FROM t", 7)


def test_wire_bytes_counts_values_and_row_overhead(dsn):
    import psycopg

    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT 'abc'::text, NULL::text UNION ALL SELECT 'de', 'f'")
        # values 3 + 0 + 2 + 1 bytes; two DataRows of 7 header bytes and 4 length bytes per column
        assert cost_split.wire_bytes(cur) == 6 + 2 * (7 + 4 * 2)


@pytest.mark.slow
def test_cost_split_refuses_steps_that_return_other_sections(dsn, tmp_path, monkeypatch):
    real = cost_split.raw_fetch

    def drops_last_row(conn, statement, params):
        run = real(conn, statement, params)
        return lambda q: run(q)[:-1]

    monkeypatch.setattr(cost_split, "raw_fetch", drops_last_row)
    with pytest.raises(RuntimeError, match="returned other sections than B"):
        cost_split.main(["--dsn", dsn, "--out", str(tmp_path), "--rtt-ms", "direct", *ARGV])


# -- bad flags: refused by argparse before anything connects or loads ------------------------------------------------

from .benchmark_cli import refused  # noqa: E402


@pytest.mark.parametrize("flags, names", [
    (("--sizes", "abc"), "--sizes"),
    (("--sizes", "10k,manual"), "--sizes"),
    (("--rtt-ms=-1",), "--rtt-ms"),
    (("--rtt-ms", "direct,abc"), "--rtt-ms"),
    (("--queries", "0"), "--queries"),
    (("--k", "0"), "--k"),
])
def test_cost_split_refuses_bad_flags_before_loading(flags, names, tmp_path):
    line = refused("benchmarks.latency.cost_split", *flags, "--out", str(tmp_path / "out"))
    assert f"argument {names}:" in line
    assert not (tmp_path / "out").exists()


def test_cost_split_defaults_to_one_small_corpus_and_shows_its_defaults(capsys):
    parser = cost_split.build_parser()
    assert parser.parse_args([]).sizes == [10_000]
    assert parser.parse_args(["--sizes", "10k,1m"]).sizes == [10_000, 1_000_000]
    assert parser.parse_args(["--rtt-ms", "direct,0,1.5"]).rtt_ms == [None, 0.0, 1.5]
    help_text = " ".join(parser.format_help().split())
    for default in ("(default: 10000)", "(default: benchmarks/results)", "(default: direct,1)", "(default: 800)"):
        assert default in help_text
