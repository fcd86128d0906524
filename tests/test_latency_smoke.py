"""The latency benchmark runs end to end on a small corpus, and its checks bite.

No timing is asserted (this machine is noisy); what is asserted is that every
variant ran at every RTT level, that B, C, C2 and D returned identical content,
that the statement counts read from the server's log match what each variant
sent, and that the JSON, Markdown and PNG files are written. A second run with
a deliberately wrong multi-call variant must fail with a non-zero exit.
"""

from __future__ import annotations

import os

import json

import pytest

from benchmarks.latency import llamaindex_peer, run, variants

N_SECTIONS = 3000
# the dev extra installs the peer (E), so the smoke test runs it rather than shrinking without it
E_MISSING = llamaindex_peer.available()


def _argv(dsn: str, out, log_path, *, with_e: bool) -> list[str]:
    argv = [
        "--dsn", dsn, "--sizes", str(N_SECTIONS), "--k", "5", "--rtts", "0,0.5", "--queries", "6",
        "--warmup", "2", "--count-queries", "3", "--rtt-samples", "20", "--diag-queries", "3",
        "--out", str(out), "--statement-log", str(log_path), "--seed", "7",
    ]
    return argv + (["--e-queries", "2"] if with_e else ["--skip-e"])


@pytest.mark.slow
def test_benchmark_runs_end_to_end(dsn, statement_log, tmp_path):
    assert E_MISSING is None, f"the LlamaIndex peer (variant E) does not import; pip install -e '.[dev]': {E_MISSING}"
    rc = run.main(_argv(dsn, tmp_path, statement_log.path, with_e=True))
    assert rc == 0

    stem = tmp_path / f"latency_n{N_SECTIONS}_k5"
    doc = json.loads(stem.with_suffix(".json").read_text())
    md = stem.with_suffix(".md").read_text()
    assert md.startswith("## Latency")
    assert "HNSW m=16, ef_construction=64, hnsw.ef_search=" in md  # the index timed (the file name omits it)
    assert (doc["corpus"]["hnsw_m"], doc["corpus"]["hnsw_ef_construction"]) == (16, 64)
    # the iterative scan's cost is the cost split's to say (its file), not figures written into this report
    assert "the `hnsw.iterative_scan` column of `python -m benchmarks.latency.cost_split`" in md and " us " not in md
    header = next(line for line in md.splitlines() if line.startswith("| added RTT | achieved RTT"))
    for label in ("A bare top-K", "B onetrip single statement", "F onetrip assembled context", "Af bare filtered",
                  "G onetrip single statement, filtered", "H onetrip hybrid"):  # every variant that ran has a column
        assert label in header, label
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    expected = ["A", "B", "C", "C2", "D", "F", "Af", "G", "H", "E"]
    assert list(doc["variants"]) == expected
    assert doc["corpus"]["sections"] == N_SECTIONS and not doc["corpus"]["load"]["reused"]
    assert [lv["added_rtt_ms"] for lv in doc["levels"]] == [0.0, 0.5]
    for lv in doc["levels"]:
        assert lv["rtt"]["median_ms"] > 0
        for v in ["A", "B", "C", "C2", "D", "F", "Af", "G", "H"]:
            assert len(lv["raw_ms"][v]) == 6
        assert len(lv["raw_ms"]["E"]) == 2
        assert set(lv["ratios"]) >= {"B/A", "C/B", "C2/B", "D/B", "F/A", "G/Af", "H/B"}

    checks = doc["checks"]
    assert checks["mismatches"] == []
    assert checks["identical_queries"] == checks["compared_queries"] == 12

    counts = doc["statement_counts"]["variants"]
    assert counts["A"]["per_query"] == [1, 1, 1]
    assert counts["B"]["per_query"] == [1, 1, 1]
    assert counts["C"]["per_query"] == [3, 3, 3]
    assert counts["C2"]["per_query"] == [3, 3, 3]
    for single in ("F", "Af", "G", "H"):  # assembled, filtered and hybrid: still one statement
        assert counts[single]["per_query"] == [1, 1, 1]
    assert counts["D"]["per_query"] == counts["D"]["expected"]
    assert all(1 + 1 <= c <= 1 + 3 * 5 for c in counts["D"]["per_query"])
    assert all(c > 3 for c in counts["E"]["per_query"])
    assert checks["e_overlap"]["queries"] == 4

    # A second run reuses the loaded corpus instead of loading it again.
    rc = run.main(_argv(dsn, tmp_path / "again", statement_log.path, with_e=False) + ["--rtts", "0"])
    assert rc == 0
    again = json.loads((tmp_path / "again" / f"latency_n{N_SECTIONS}_k5.json").read_text())
    assert again["corpus"]["load"]["reused"]


@pytest.mark.slow
def test_disagreeing_variant_fails_the_run(dsn, statement_log, tmp_path, monkeypatch):
    real_run = variants.NaiveMultiCall.run

    def wrong(self, vec):  # drops every hit's next section
        return [h.__class__(h.rank, h.distance, h.section, h.parent, h.prev, None) for h in real_run(self, vec)]

    monkeypatch.setattr(variants.NaiveMultiCall, "run", wrong)
    argv = _argv(dsn, tmp_path, statement_log.path, with_e=False)
    argv[argv.index("--rtts") + 1] = "0"
    assert run.main(argv) == 1
    doc = json.loads((tmp_path / f"latency_n{N_SECTIONS}_k5.json").read_text())
    assert doc["checks"]["mismatches"] and {m["variant"] for m in doc["checks"]["mismatches"]} == {"D"}


def test_by_preceding_splits_each_variant_by_what_ran_before_it():
    from benchmarks.latency.report import by_preceding

    # query 0: D ran just before A and F; query 1: nothing multi-statement before A, B or F
    level = {"order": [["D", "A", "B", "D", "F"], ["A", "B", "F", "C"]],
             "raw_ms": {"A": [3.0, 1.0], "B": [4.0, 1.2], "F": [9.0, 1.5]}}
    r = by_preceding(level)
    assert r["A"]["after_multi_statement_p50"] == 3.0 and r["A"]["n_multi"] == 1
    assert r["A"]["after_one_statement_p50"] == 1.0 and r["A"]["n_one"] == 1
    assert r["B"]["n_multi"] == 0 and r["B"]["after_one_statement_p50"] == 2.6  # median of 4.0 and 1.2
    assert r["B/A"]["n"] == 1 and r["B/A"]["both_after_one_statement_p50"] == pytest.approx(1.2)
    assert r["F/A"]["n"] == 1 and r["F/A"]["both_after_one_statement_p50"] == pytest.approx(1.5)
    assert by_preceding({"raw_ms": level["raw_ms"]}) is None  # older result files have no order


def test_ratios_compare_the_queries_both_variants_ran():
    """E runs the first e_queries_per_level queries only: E/B had divided E's median over those by B's median over
    all of them (found by a benchmark runner's review; the committed E/B figures were rebuilt from their raw
    timings). A variant that ran every query is compared over all of them, as before."""
    from benchmarks.latency.report import ratios

    level = {"raw_ms": {"A": [1.0, 1.0, 1.0, 1.0], "B": [1.0, 2.0, 9.0, 9.0], "E": [10.0, 20.0]},
             "stats": {"B": {"p50": 5.5, "p95": 9.0}, "E": {"p50": 15.0, "p95": 19.5}}}
    r = ratios(level)
    assert r["E/B"]["p50"] == pytest.approx(15.0 / 1.5)  # B's median over queries 0 and 1, not 5.5
    assert r["E/B"]["paired_median"] == pytest.approx(10.0)
    assert r["B/A"]["p50"] == pytest.approx(5.5) and r["B/A"]["p95"] == pytest.approx(9.0)


# -- bad flags and a missing manual: refused before any corpus runs or --out is created ---------------------------

from .benchmark_cli import refused  # noqa: E402


@pytest.mark.parametrize("flags, names", [
    (("--sizes", "10k,inf"), "--sizes"),
    (("--sizes", ","), "--sizes"),
    (("--rtts", "0,nan"), "--rtts"),
    (("--rtts=-1",), "--rtts"),
    # these had run the whole timed run, then failed writing nothing (KeyError 'E', no median of no pings), or
    # (--e-queries 0) run E on every query
    (("--e-queries=-1",), "--e-queries"),
    (("--e-queries", "0"), "--e-queries"),
    (("--rtt-samples", "0"), "--rtt-samples"),
    (("--count-queries", "0"), "--count-queries"),
    (("--dim", "0"), "--dim"),
    (("--diag-queries=-1",), "--diag-queries"),
    (("--k", "0"), "--k"),
    # an unknown extra variant had failed with KeyError after the corpus load; F,F timed F twice into one list
    (("--extra", "Z"), "--extra"),
    (("--extra", "F,F"), "--extra"),
    (("--maintenance-work-mem", "8gb"), "--maintenance-work-mem"),  # PostgreSQL's units are case-sensitive
])
def test_latency_refuses_bad_flags_before_loading(flags, names, tmp_path):
    line = refused("benchmarks.latency.run", *flags, "--skip-e", "--out", str(tmp_path / "out"))
    assert f"argument {names}:" in line
    assert not (tmp_path / "out").exists()


def test_latency_refuses_a_statement_log_that_is_not_there(tmp_path):
    """Given by name, a missing log had become "statement counting unavailable" in a run that exited 0."""
    line = refused("benchmarks.latency.run", "--statement-log", str(tmp_path / "nope.log"), "--skip-e",
                   "--out", str(tmp_path / "out"))
    assert line.endswith(f"--statement-log {tmp_path / 'nope.log'}: no such file")
    assert not (tmp_path / "out").exists()


def test_latency_manual_without_the_manual_says_so_before_any_size_runs(dsn, tmp_path):
    line = refused("benchmarks.latency.run", "--sizes", f"{N_SECTIONS},manual", "--skip-e",
                   "--out", str(tmp_path / "out"), dsn=dsn)
    assert line.endswith("error: no table pg15_sections: ingest the manual first (python -m benchmarks.ingest_manual)")
    assert not (tmp_path / "out").exists()


def test_latency_sizes_accept_suffixes_and_the_manual():
    a = run.parse_args(["--sizes", "10k,1_000,1.5m,manual", "--rtts", "0,0.5"])
    assert a.sizes == [10_000, 1_000, 1_500_000, "manual"] and a.rtts == [0.0, 0.5]
    help_text = " ".join(run.build_parser().format_help().split())
    assert "(default benchmarks/results)" in help_text and "default 10000)" in help_text


def test_plot_names_achieved_rtt_and_server_statement_counts(tmp_path):
    """The PNG carries what its Markdown table does: each level's achieved RTT and each variant's
    statements per query counted at the server (it had the added RTT and the bare labels only)."""
    from benchmarks.latency import report

    doc = {
        "meta": {"k": 10}, "corpus": {"corpus": "synthetic", "sections": 1000},
        "variants": {"A": {"label": "A bare top-K"}, "D": {"label": "D naive 1+K+2K calls"},
                     "E": {"label": "E LlamaIndex"}},
        "statement_counts": {"variants": {"A": {"per_query": [1, 1]}, "D": {"per_query": [20, 24]},
                                          "E": {"per_query": [70, 80]}}},
        "levels": [{"added_rtt_ms": d, "rtt": {"median_ms": d + 0.07},
                    "stats": {v: {"p50": 1.0 + d, "p95": 2.0 + d} for v in "ADE"}} for d in (0.0, 1.0)],
    }
    assert report.variant_label(doc, "A") == "A bare top-K [1 stmts/query]"
    assert report.variant_label(doc, "D") == "D naive 1+K+2K calls [22.0 (20–24) stmts/query]"
    assert report.variant_label(doc, "E") == "E LlamaIndex [75.0 (70–80) stmts/query]"
    assert report.rtt_axis_label(doc).endswith("achieved (SELECT 1 p50 through it): 0.07 / 1.07 ms")
    doc["statement_counts"] = {"unavailable": "no server log"}  # nothing counted: the bare label, no made-up count
    assert report.variant_label(doc, "A") == "A bare top-K"
    png = report.plot(doc, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_title_stays_inside_the_figure():
    """The title is centred over the axes, which the legend beside them leaves narrow: on one line the
    manual's ("... PostgreSQL 15 manual (9,341 sections), k=10") ran off the PNG's left edge."""
    from benchmarks.latency import report

    doc = {
        "meta": {"k": 10}, "corpus": {"corpus": "manual", "sections": 9341},
        "variants": {v: {"label": label} for v, label in (
            ("A", "A bare top-K (floor; LIMIT k written in the SQL, so its plan is cached)"),
            ("F", "F onetrip assembled context (parent + ±1 + dedup + 2000-token budget)"))},
        "statement_counts": {"variants": {v: {"per_query": [1, 1]} for v in "AF"}},  # as wide as the committed legend
        "levels": [{"added_rtt_ms": d, "rtt": {"median_ms": d + 0.07},
                    "stats": {v: {"p50": 1.0 + d, "p95": 2.0 + d} for v in "AF"}} for d in (0.0, 1.0, 5.0)],
    }
    fig = report.figure(doc)
    try:
        title = fig.axes[0].title
        box = title.get_window_extent(fig.canvas.get_renderer())
        assert "PostgreSQL 15 manual (9,341 sections), k=10" in title.get_text()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box.x0, box.x1, fig.bbox.width)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


@pytest.mark.slow
def test_cache_warmer_reads_h_pages_when_h_runs(dsn, statement_log):
    """Before each timed query the warmer runs A's and B's statements and, when H is timed, H's hybrid
    search: H's vector side reads more candidates than k and its lexical side other pages, which A and B
    never touched, so H had paid for its own cold reads on the first RTT level."""
    from benchmarks.latency import corpus as corpus_mod
    from onetrip.connection import connect

    docs = corpus_mod.generate_corpus(400, 3, 16)
    layout = corpus_mod.bench_layout(400, 3, 16)
    with connect(dsn) as conn:
        corpus_mod.ensure_loaded(conn, docs, layout, log=lambda *_: None)
    vec = corpus_mod.query_set(docs, 1, 3)[0]
    sent = {}
    for hybrid in (False, True):
        warmer = variants.CacheWarmer(dsn, layout, 5, hybrid=hybrid)
        try:
            warmer.warm(vec)  # settings and prepared statements are in place after this one
            with statement_log.watch(warmer.conn) as w:
                warmer.warm(vec)
            sent[hybrid] = w.statements
        finally:
            warmer.close()
    with connect(dsn) as conn:  # what H sends on its own (the log holds each statement's first line)
        h = variants.OnetripHybrid(conn, layout, 5)
        h.run(vec)
        with statement_log.watch(conn) as w:
            h.run(vec)
    assert len(w.statements) == 1 and w.statements[0] not in sent[False]
    assert len(sent[False]) == 2 and sent[True] == sent[False] + w.statements


@pytest.mark.slow
def test_manual_queries_say_where_they_came_from(dsn, tmp_path):
    """--sizes manual takes its first queries from --questions (default ../shared/eval/pgdocs_tuning.jsonl,
    beside the repository) and fills up with heading questions. A missing file had silently made every
    query a heading question, and neither the result nor its report said which queries ran."""
    import argparse

    from benchmarks.latency import report

    from .benchmark_cli import ingest_one_page_manual

    ingest_one_page_manual(dsn, tmp_path)
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("What does VACUUM do?", "Why freeze?")))

    args = argparse.Namespace(manual_prefix="pg15_", questions=questions, seed=0)
    docs, vecs, info = run.load_corpus(args, dsn, "manual", 5)
    assert len(vecs) == 5 and info == {"questions_file": str(questions), "found": True, "from_file": 2,
                                       "from_headings": 3}
    assert "the first 2 of the 4 timed queries are the questions of" in report.queries_line(info, 4)

    args.questions = tmp_path / "missing.jsonl"
    _, vecs, info = run.load_corpus(args, dsn, "manual", 5)
    assert len(vecs) == 5 and not info["found"] and info["from_file"] == 0 and info["from_headings"] == 5
    assert report.queries_line(info, 4).startswith("Queries: heading questions only")
    assert "missing.jsonl` was not found" in report.queries_line(info, 4)


def test_report_names_the_hnsw_build_of_older_results_from_their_table_prefix():
    """Results written before the corpus recorded its HNSW build (the committed 1M run: ef_construction 200)."""
    from benchmarks.latency.report import hnsw_index

    assert hnsw_index({"layout_prefix": "bench1000000_s0_efc200_"}) == "HNSW m=16, ef_construction=200"
    assert hnsw_index({"layout_prefix": "benchmanual_s0_"}) == "HNSW m=16, ef_construction=64"
    assert hnsw_index({"layout_prefix": "bench10_s0_m8_efc100_", "hnsw_ef_construction": 32}) == \
        "HNSW m=8, ef_construction=32"


def test_report_redraws_a_committed_result_into_another_folder(tmp_path):
    """`python -m benchmarks.latency.report RESULT.json --out DIR` rebuilds the committed table unchanged, and
    the plot, into DIR, leaving the committed files alone (it had written beside the JSON only)."""
    from benchmarks.latency import report

    from .benchmark_cli import ROOT

    committed = ROOT / "benchmarks" / "results" / "latency_n10000_k10.json"
    assert report.main([str(committed), "--out", str(tmp_path / "redrawn")]) == 0
    assert (tmp_path / "redrawn" / "latency_n10000_k10.md").read_text() == committed.with_suffix(".md").read_text()
    assert (tmp_path / "redrawn" / "latency_n10000_k10.png").stat().st_size > 0


def test_the_content_check_names_the_field_that_differs():
    """B, C and D must agree; a parent whose content differs had been reported as "parent d/s != d/s"."""
    from onetrip.retrieve import Hit, SectionRecord

    def rec(sid: str, content: str = "text") -> SectionRecord:
        return SectionRecord("d", sid, int(sid[1:]), 2, sid, ("Doc", sid), content, "s0", sid, 3, 1)

    def hits(parent_content: str = "text", hit_content: str = "text") -> list[Hit]:
        return [Hit(1, 0.25, rec("s2", hit_content), rec("s0", parent_content), rec("s1"), rec("s3"))]

    assert variants.diff_hits(hits(), hits()) is None
    assert variants.diff_hits(hits(), hits(parent_content="other")) == \
        "rank 1 (d/s2): parent d/s0: content 'other' != 'text'"
    assert variants.diff_hits(hits(), hits(hit_content="other")) == "rank 1: hit d/s2: content 'other' != 'text'"
    missing = hits()
    missing[0].next = None
    assert variants.diff_hits(hits(), missing) == "rank 1 (d/s2): next None != d/s3"


def test_latency_extra_takes_names_or_nothing():
    from benchmarks.latency.run import build_parser

    assert build_parser().parse_args([]).extra == ["F", "Af", "G", "H"]
    assert build_parser().parse_args(["--extra", ""]).extra == []
    assert build_parser().parse_args(["--extra", "H,F"]).extra == ["H", "F"]


def test_latency_report_refuses_a_file_that_is_no_latency_result(tmp_path):
    """A cost-split or other JSON had failed with KeyError 'variants' (a traceback), after writing earlier files."""
    import subprocess
    import sys

    from .benchmark_cli import ROOT

    good = tmp_path / "good.json"
    good.write_text((ROOT / "benchmarks" / "results" / "latency_n10000_k10.json").read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    for bad, why in ((ROOT / "benchmarks" / "results" / "cost_split.json", "has no 'variants'"),
                     (ROOT / "README.md", "not JSON")):
        r = subprocess.run([sys.executable, "-m", "benchmarks.latency.report", str(good), str(bad), "--out",
                            str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.splitlines()[-1].startswith("python -m benchmarks.latency.report: error: ") and why in r.stderr
        assert not (tmp_path / "out" / "good.md").exists()  # nothing written before every file is checked
