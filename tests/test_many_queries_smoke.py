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


@pytest.mark.slow
def test_manual_run_records_the_manuals_own_hnsw_build(dsn, tmp_path):
    """--ef-construction (default 200) builds the synthetic corpus only; the manual's index is ingest's
    (pgvector's 64). many_queries_manual_hybrid.json had recorded "ef_construction": 200 all the same."""
    from .benchmark_cli import ingest_one_page_manual

    ingest_one_page_manual(dsn, tmp_path)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "What does VACUUM freeze?"}) + "\n")
    argv = ["--dsn", dsn, "--out", str(tmp_path), "--manual", "--questions", str(questions), "--n", "1",
            "--rtt-ms", "0", "--sets", "2", "--warmup", "0"]
    assert many_queries.main(argv) == 0
    meta = json.loads((tmp_path / "many_queries_manual_hybrid.json").read_text())["meta"]
    assert meta["corpus"] == "manual" and (meta["hnsw_m"], meta["ef_construction"]) == (16, 64)


# -- bad flags: refused by argparse before anything connects, loads or embeds -----------------------------------------

from .benchmark_cli import refused  # noqa: E402


@pytest.mark.parametrize("flags, names", [
    (("--n", "abc"), "--n"),
    (("--n", "1,0"), "--n"),
    (("--n", "200"), "--n"),  # search_many takes 1 to 100 queries
    (("--sets", "0"), "--sets"),
    (("--rtt-ms=-1",), "--rtt-ms"),
    (("--size", "10k", "--k", "0"), "--k"),
    (("--n", "2,2"), "--n"),  # a review: repeats were measured and reported twice
    (("--rtt-ms", "1,1.0"), "--rtt-ms"),
])
def test_many_queries_refuses_bad_flags_before_loading(flags, names, tmp_path):
    line = refused("benchmarks.latency.many_queries", *flags, "--out", str(tmp_path / "out"))
    assert f"argument {names}:" in line
    assert not (tmp_path / "out").exists()


def test_many_queries_manual_without_the_manual_says_so_before_loading_the_model(dsn, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How do I vacuum?"}) + "\n")
    line = refused("benchmarks.latency.many_queries", "--manual", "--n", "1", "--questions", str(questions),
                   "--out", str(tmp_path / "out"), dsn=dsn)
    assert line.endswith("error: no table pg15_sections: ingest the manual first (python -m benchmarks.ingest_manual)")
    assert not (tmp_path / "out").exists()


def test_many_queries_help_shows_the_defaults():
    parser = many_queries.build_parser()
    assert parser.parse_args(["--size", "100k", "--n", "1,2,4,8"]).size == 100_000
    help_text = " ".join(parser.format_help().split())
    for default in ("(default: benchmarks/results)", "(default: 1,2,4,8)", "(default: 0,1,2)", "(default: 200)"):
        assert default in help_text


def test_many_queries_refuses_a_k_past_its_corpus(tmp_path):
    """A review ran --size 100 --k 200 and got a report of 'k = 200 per query' on 100 sections, exit 0."""
    line = refused("benchmarks.latency.many_queries", "--size", "100", "--k", "200", "--out", str(tmp_path / "o"))
    assert "--k 200 must be smaller than the corpus (100 sections)" in line
