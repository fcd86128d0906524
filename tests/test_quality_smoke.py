"""The evidence-coverage benchmark and the lexical grid run end to end on a one-page manual.

No figure is asserted (one question); what is asserted is that each result file
records what its figures were measured on: the corpus size, k, the date and the
PostgreSQL and pgvector versions (the latency, scale, cost-split and
several-queries results did; these two named neither version).
"""

from __future__ import annotations

import json

import pytest

from benchmarks.quality import lexical_grid, run

PAGE = ("<html><body><h1>Vacuum</h1><p>Routine maintenance.</p>"
        "<h2 id='freeze'>Freezing</h2><p>VACUUM freezes old row versions so that they survive wraparound.</p>"
        "<h2 id='stats'>Statistics</h2><p>ANALYZE collects statistics for the planner.</p></body></html>")


@pytest.fixture()
def manual_and_questions(tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "maintenance.html").write_text(PAGE)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Why does VACUUM freeze rows?", "needs": "parent",
                                     "evidence": [{"page": "maintenance.html", "section_id": "freeze",
                                                   "quote": "freezes old row versions"}]}) + "\n")
    return manual, questions


def _server(conn_versions):
    return {"postgresql", "pgvector"} == set(conn_versions) and all(conn_versions.values())


@pytest.mark.slow
def test_quality_and_lexical_grid_results_name_the_server_they_ran_on(dsn, tmp_path, manual_and_questions):
    manual, questions = manual_and_questions
    out = tmp_path / "out"
    assert run.main(["--dsn", dsn, "--questions", str(questions), "--manual", str(manual), "--prefix", "qsmoke_",
                     "--modes", "topk,parent_n1", "--ks", "3", "--budgets", "1000,2000", "--out", str(out)]) == 0
    settings = json.loads((out / "quality.json").read_text())["settings"]
    assert settings["ingest"]["sections_stored"] >= 2 and settings["ks"] == [3] and settings["date"]
    assert _server(settings["server"]), settings.get("server")

    assert lexical_grid.main(["--dsn", dsn, "--questions", str(questions), "--prefix", "qsmoke_", "--mode", "lexical",
                              "--grid", "tf_weight=0", "--budgets", "1000", "--out", str(out)]) == 0
    doc = json.loads((out / "lexical_grid_lexical.json").read_text())
    assert doc["sections"] == settings["ingest"]["sections_stored"] and doc["k"] == 10 and doc["date"]
    assert _server(doc["server"]), doc.get("server")


@pytest.mark.slow
def test_quality_reports_a_set_without_answerable_questions_and_names_bad_citations(dsn, tmp_path, capsys,
                                                                                    manual_and_questions):
    """A set of `none` questions alone had run every mode, then failed choosing the tuned row ('ValueError:
    max() arg is an empty sequence'), writing nothing; a cited section the tables lack had only been counted."""
    manual, _ = manual_and_questions
    nones = tmp_path / "none.jsonl"
    nones.write_text("\n".join(json.dumps(r) for r in [
        {"id": "n1", "question": "How do I grant MAINTAIN?", "needs": "none", "evidence": []},
        {"id": "n2", "question": "What does any_value() return?", "needs": "parent", "evidence": []}]) + "\n")
    out = tmp_path / "out"
    base = ["--dsn", dsn, "--prefix", "qnone_", "--modes", "topk,parent_n1", "--ks", "3", "--budgets", "1000,2000"]
    assert run.main([*base, "--questions", str(nones), "--manual", str(manual), "--out", str(out)]) == 0
    res = json.loads((out / "quality.json").read_text())
    assert res["tuned"] is None and res["leave_one_out"] is None
    assert set(res["none_questions"]["tables"]["sections"]["none"]) == {"n1", "n2"}
    md = (out / "quality.md").read_text()
    assert "**No question is answerable**" in md and "| sections | – | – | – | " in md and "Tuning winner" not in md
    warning = f"{nones}:2: question 'n2' has needs 'parent' but no evidence; scored as `none` (no evidence)"
    assert f"- {warning}" in md and f"warning: {warning}" in capsys.readouterr().err

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "q1", "question": "Why does VACUUM freeze rows?", "needs": "parent", "evidence": [
        {"page": "maintenance.html", "section_id": "freeze", "quote": "freezes old row versions"},
        {"page": "maintenance.html", "section_id": "nosuch", "quote": "Routine maintenance."},
        {"page": "maintenance.html", "section_id": "nosuch", "quote": "VACUUM freezes"},
        {"page": "gone.html", "section_id": "x", "quote": "anything"}]}) + "\n")
    assert run.main([*base, "--questions", str(bad), "--no-ingest", "--out", str(out)]) == 0
    md, err = (out / "quality.md").read_text(), capsys.readouterr().err
    for w in (f"{bad}:1: question 'q1' cites maintenance.html#nosuch, not in qnone_sections: no stored section of "
              "maintenance.html has that id (its section recall cannot reach 1)",
              f"{bad}:1: question 'q1' cites gone.html#x, not in qnone_sections: gone.html is not stored"):
        assert md.count(w) == 1 and err.count(w) == 1
    assert [m["section_id"] for m in json.loads((out / "quality.json").read_text())["missing_citations"]] == [
        "nosuch", "x"]


def test_quality_refuses_budgets_without_the_tuning_budget(tmp_path, manual_and_questions):
    """The tuned rows are chosen at 2,000 tokens: --budgets 1000 had run every mode, then failed with
    'ValueError: max() arg is an empty sequence' before writing anything."""
    from .benchmark_cli import refused

    manual, questions = manual_and_questions
    line = refused("benchmarks.quality.run", "--questions", str(questions), "--manual", str(manual),
                   "--budgets", "1000", "--out", str(tmp_path / "out"))
    assert line.endswith("error: --budgets 1000: must include 2000, the budget the tuned configuration is chosen at")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, names", [(("--ks", "0"), "--ks"), (("--ks", "x"), "--ks"),
                                          (("--budgets", "2000,0"), "--budgets"), (("--budgets", "abc"), "--budgets")])
def test_quality_refuses_bad_ks_and_budgets_before_ingesting(flags, names, tmp_path, manual_and_questions):
    """--ks 0 or --budgets 2000,0 had failed with a traceback only after the ingest and the window build."""
    from .benchmark_cli import refused

    manual, questions = manual_and_questions
    line = refused("benchmarks.quality.run", "--questions", str(questions), "--manual", str(manual), *flags,
                   "--out", str(tmp_path / "out"))
    assert f"argument {names}:" in line
    assert not (tmp_path / "out").exists()


def test_quality_refuses_a_file_without_questions(tmp_path, manual_and_questions):
    """A file of comments and blank lines alone holds nothing to score: refused before the model loads."""
    from .benchmark_cli import refused

    manual, _ = manual_and_questions
    empty = tmp_path / "empty.jsonl"
    empty.write_text("# no question yet\n\n")
    line = refused("benchmarks.quality.run", "--questions", str(empty), "--manual", str(manual),
                   "--out", str(tmp_path / "out"))
    assert line.endswith(f"error: no question in {empty}")
    assert not (tmp_path / "out").exists()


def test_quality_refuses_a_run_of_baselines_alone(tmp_path, manual_and_questions):
    """--modes topk (no library mode) had run every question, then failed choosing the tuned row among none
    ('ValueError: max() arg is an empty sequence'), writing nothing; found by a benchmark runner's review."""
    from .benchmark_cli import refused

    manual, questions = manual_and_questions
    line = refused("benchmarks.quality.run", "--questions", str(questions), "--manual", str(manual),
                   "--modes", "topk,windows", "--out", str(tmp_path / "out"))
    assert "--modes topk,windows: name at least one library mode" in line and "parent_section" in line
    assert not (tmp_path / "out").exists()


def test_quality_without_ingest_reads_no_manual_and_names_missing_tables(db, dsn, tmp_path, manual_and_questions):
    """--no-ingest ("use the tables as they are") had still looked for the manual (downloading it when absent)
    and built and embedded missing window tables; a missing table had said `run onetrip init`, which led to
    empty tables and a KeyError writing the report."""
    _, questions = manual_and_questions
    base = ["--dsn", dsn, "--questions", str(questions), "--no-ingest", "--out", str(tmp_path / "out"),
            "--manual", str(tmp_path / "no-manual-here")]
    with pytest.raises(SystemExit) as e:
        run.main([*base, "--prefix", "nosuch_", "--modes", "topk,parent_n1"])
    assert "nosuch_sections does not exist" in str(e.value) and "run once without it" in str(e.value)
    from onetrip import init_schema
    from onetrip.layout import Layout
    from onetrip.store import replace_document
    from onetrip.synthetic import generate

    layout = init_schema(db, Layout(prefix="qnoingest_"))
    doc = next(iter(generate(1, dim=layout.dim, seed=1)))
    replace_document(db, layout, doc.record, doc.sections, doc.embeddings)
    with pytest.raises(SystemExit) as e:  # sections there, windows not: named, not built
        run.main([*base, "--prefix", "qnoingest_", "--window-prefix", "nosuchwin_", "--modes", "windows,parent_n1"])
    assert "nosuchwin_sections does not exist" in str(e.value) and "--window-prefix" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_the_report_signs_the_change_against_a_baseline():
    """A tuned configuration that loses to a baseline had read '(+-8.3 points)'."""
    rec = {"wins": 1, "ties": 2, "losses": 3}
    assert run.vs_baseline("baseline: windows", 0.683, 0.6, rec) == (
        "vs baseline: windows: 68.3% → 60.0% (-8.3 points); per question 1 better, 2 same, 3 worse.")
    assert "(+2.0 points)" in run.vs_baseline("b", 0.5, 0.52, rec)
    assert "(+0.0 points)" in run.vs_baseline("b", 0.5, 0.4996, rec)  # no '-0.0'
