"""The growth curve's report renders every row with its day and achieved RTT (no database), and each row names its server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.scale import run
from benchmarks.scale.run import build_parser, write_report

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "scale.json"

from .benchmark_cli import refused  # noqa: E402


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


@pytest.mark.parametrize("flags, names", [
    (("--layouts", "vector,foo"), "--layouts"),
    (("--ef", "abc"), "--ef"),
    (("--ef", "40,0"), "--ef"),
    (("--sizes", "10k,abc"), "--sizes"),
    (("--rtts=-1",), "--rtts"),
    (("--queries", "0"), "--queries"),
])
def test_scale_refuses_bad_flags_before_loading(flags, names, tmp_path):
    line = refused("benchmarks.scale.run", *flags, "--out", str(tmp_path / "out"))
    assert f"argument {names}:" in line
    assert not (tmp_path / "out").exists()


def test_scale_refuses_rtts_its_report_has_no_columns_for(tmp_path):
    line = refused("benchmarks.scale.run", "--rtts", "0,2", "--out", str(tmp_path / "out"))
    assert "argument --rtts:" in line and "2 ms" in line and "0, 1" in line
    assert build_parser().parse_args(["--rtts", "1"]).rtts == [1.0]


def test_scale_help_shows_the_defaults():
    parser = build_parser()
    a = parser.parse_args(["--sizes", "10k,1m", "--layouts", "partitioned"])
    assert a.sizes == [10_000, 1_000_000] and a.layouts == ["partitioned"] and a.rtts == [0.0, 1.0]
    help_text = " ".join(parser.format_help().split())
    for default in ("(default: benchmarks/results)", "(default: vector,halfvec)", "(default: 4GB)",
                    "(default: 40,100,200,400,1000)", "(default: 0,1)"):
        assert default in help_text


def test_scale_report_names_each_builds_memory_and_k(tmp_path):
    doc = json.loads(RESULTS.read_text())
    rows = [dict(r) for r in doc["results"][:3]]
    rows[1]["maintenance_work_mem"] = "1GB"  # a reused table keeps the setting it was built with
    text = write_report(rows, {**doc["meta"], "k": 5}, tmp_path)
    assert "| recall@5 ef=" in text
    usual = f"maintenance_work_mem={rows[0]['maintenance_work_mem']}"
    assert f"HNSW builds with {usual}, " in text
    assert f"(maintenance_work_mem=1GB, 2 parallel maintenance workers for {rows[1]['sections']:,} {rows[1]['layout']})" in text
    same = write_report(rows[:1], doc["meta"], tmp_path)
    assert "| recall@10 ef=" in same and "(maintenance_work_mem=" not in same


def test_scale_refuses_another_k_into_an_existing_report(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "scale.json").write_text(RESULTS.read_text())  # rows at k=10
    line = refused("benchmarks.scale.run", "--k", "5", "--out", str(out))
    assert "k=10" in line and "another --out for k=5" in line


def test_scale_plot_labels_carry_ratio_achieved_rtt_and_day(tmp_path):
    """The plot's latency lines name B/A, the achieved RTT and the day measured, as the table does; they had
    said "+1.0 ms" only, so a row from a slower machine (the ef_construction 64 one) read as the graph's cost."""
    from benchmarks.scale.run import plot, series_note

    def row(n, achieved, ratio, day):
        return {"sections": n, "layout": "vector", "ef_construction": 200, "measured": day, "recall": {"40": {"recall": 1.0}},
                "latency": {"1.0": {"achieved_rtt_ms": achieved, "A_p50": 1.5, "B_p50": 1.5 * ratio,
                                    "B_over_A": ratio}}}

    rows = [row(10_000, 1.061, 1.083, "2026-12-02"), row(100_000, 1.18, 1.09, "2026-12-03")]
    assert series_note(rows, "1.0") == "B/A 1.083 / 1.090; achieved 1.06–1.18 ms; 2026-12-02 / 2026-12-03"
    assert series_note(rows[:1], "1.0") == "B/A 1.083; achieved 1.06 ms; 2026-12-02"
    plot(rows, {"k": 10, "ef": [40]}, tmp_path)
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_each_row_names_the_server_it_was_measured_on(dsn, tmp_path):
    """scale.json keeps rows of earlier runs (the README's came from two machines) under one meta, the last
    run's: each row now records its own PostgreSQL and pgvector versions and cores beside its day."""
    argv = ["--dsn", dsn, "--sizes", "300", "--layouts", "vector", "--ef", "40", "--rtts", "1", "--queries", "3",
            "--warmup", "0", "--recall-queries", "5", "--out", str(tmp_path)]
    assert run.main(argv) == 0
    (row,) = json.loads((tmp_path / "scale.json").read_text())["results"]
    assert row["sections"] == 300 and row["measured"] and row["cores"] >= 1
    assert set(row["server"]) == {"postgresql", "pgvector"} and all(row["server"].values())
    assert (row["queries"], row["recall_queries"], row["warmup"]) == (3, 5, 0)
    workers = row["max_parallel_maintenance_workers"]
    assert isinstance(workers, int)
    # run again over the same table with another workers setting: the row keeps the build's
    from psycopg.conninfo import make_conninfo

    other = make_conninfo(dsn, options=f"-c max_parallel_maintenance_workers={workers + 1}")
    argv2 = ["--dsn", other, *argv[2:]]
    assert run.main(argv2) == 0
    (row,) = json.loads((tmp_path / "scale.json").read_text())["results"]
    assert row["load_reused"] and row["max_parallel_maintenance_workers"] == workers
    # a row of a file from before rows kept their counts takes that file's meta, not this run's (a review of
    # the per-row header: the committed rows, measured with 100 recall queries, were labelled with the new 5)
    doc = json.loads(RESULTS.read_text())
    legacy = {k: v for k, v in doc["results"][0].items() if k not in ("queries", "recall_queries")}
    doc["results"] = [legacy]
    (tmp_path / "scale.json").write_text(json.dumps(doc))
    assert run.main(argv) == 0
    rows = {r["sections"]: r for r in json.loads((tmp_path / "scale.json").read_text())["results"]}
    assert rows[legacy["sections"]]["recall_queries"] == doc["meta"]["recall_queries"] != 5
    assert rows[300]["recall_queries"] == 5
    header = (tmp_path / "scale.md").read_text().splitlines()[2]
    old = doc["meta"]["recall_queries"]
    assert re.search(rf"(5 \({old} for [^)]*\)|{old} \(5 for 300 vector\)) recall queries", header), header


def test_replot_redraws_the_committed_results_into_another_folder(tmp_path):
    """Found by review: --replot read scale.json from --out, so the committed results could only be redrawn
    into benchmarks/results itself; --from-json names the file to redraw, --out where the drawing goes."""
    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    run.replot(tmp_path / "scratch", committed / "scale.json")
    assert (tmp_path / "scratch" / "scale.md").read_text() == (committed / "scale.md").read_text()
    assert (tmp_path / "scratch" / "scale.png").stat().st_size > 0
    assert build_parser().parse_args(["--replot", "--from-json", "x.json"]).from_json == "x.json"


def test_scale_refuses_from_json_without_replot(tmp_path):
    """--from-json alone had been ignored: a full measurement started."""
    line = refused("benchmarks.scale.run", "--from-json", str(RESULTS), "--out", str(tmp_path / "out"))
    assert "--from-json is read only with --replot" in line
    assert not (tmp_path / "out").exists()


def test_scale_refuses_a_memory_size_postgres_cannot_take(tmp_path):
    """--maintenance-work-mem lots had failed after the corpus was generated and copied, its index dropped."""
    line = refused("benchmarks.scale.run", "--maintenance-work-mem", "lots", "--out", str(tmp_path / "out"))
    assert "argument --maintenance-work-mem:" in line and "512MB" in line
    assert build_parser().parse_args(["--maintenance-work-mem", "2GB"]).maintenance_work_mem == "2GB"
    for out_of_range in ("32kB", "63", "3TB"):  # PostgreSQL refuses them (64kB to 2147483647kB)
        line = refused("benchmarks.scale.run", "--maintenance-work-mem", out_of_range, "--out", str(tmp_path / "o"))
        assert "outside maintenance_work_mem's range" in line, line


def test_scale_report_names_each_rows_own_query_counts_and_build_workers(tmp_path):
    """A review re-ran one row with --queries 10 --recall-queries 10 into a scale.json of rows measured with 40
    and 30: the header named 10 and 10 for every row (the last run's meta). Rows now keep their own counts
    (older rows: timed queries counted from their raw timings), and a reused table's parallel workers are its
    build's, from its load note (they were the reusing run's SHOW), '?' when the note predates them."""
    doc = json.loads(RESULTS.read_text())
    rows = [dict(r) for r in doc["results"][:3]]
    raw = len(rows[1]["latency"]["1.0"]["raw_A_ms"])
    rows[0].update(queries=40, recall_queries=30, max_parallel_maintenance_workers=None)
    meta = {**doc["meta"], "queries": 10, "recall_queries": 10}
    text = write_report(rows, meta, tmp_path)
    first = f"{rows[0]['sections']:,} {rows[0]['layout']}"
    assert f"{raw} (40 for {first}) interleaved A/B queries per RTT" in text, text.splitlines()[2]
    assert f"10 (30 for {first}) recall queries" in text
    assert f"? parallel maintenance workers for {first}" in text
    same = write_report(rows[1:], meta, tmp_path)
    assert f"; {raw} interleaved A/B queries per RTT, 10 recall queries;" in same


@pytest.mark.parametrize("content", ["# not json\n", "{}", '{"meta": {"k": 10, "ef": [40]}, "results": [{"k": 1}]}'])
def test_scale_replot_of_a_wrong_file_is_one_line(content, tmp_path):
    """A review: --replot --from-json README.md (or another benchmark's JSON, or {}) ended in a traceback, exit 1,
    after making the --out folder."""
    wrong = tmp_path / "wrong.json"
    wrong.write_text(content)
    line = refused("benchmarks.scale.run", "--replot", "--from-json", str(wrong), "--out", str(tmp_path / "out"))
    assert f"{wrong}: not a readable scale.json of this benchmark" in line
    assert not (tmp_path / "out").exists()
    line = refused("benchmarks.scale.run", "--replot", "--from-json", str(tmp_path / "none.json"),
                   "--out", str(tmp_path / "out"))
    assert "none.json: not a readable scale.json of this benchmark (No such file or directory)" in line
