"""A benchmark's --out that is a file and a malformed --questions line are refused as bad arguments, before
anything connects, loads or measures (exit 2, one error line; found by a reviewer).

A file as --out had been refused only when the results were written, after the whole measurement, which
was lost (quality.run, lexical_grid, cost_split, many_queries); a malformed question line had been a
traceback (quality.run, lexical_grid: a ValueError; latency.run and many_queries: a JSONDecodeError naming
no file or line, after connecting and loading the manual's corpus).
"""

from __future__ import annotations

import argparse
import json
import re

import pytest

from .benchmark_cli import refused


def _questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "What does VACUUM do?", "needs": "parent", "evidence": [
        {"page": "sql-vacuum.html", "section_id": "id-1", "quote": "VACUUM reclaims storage"}]}) + "\n")
    return str(path)


OUT_CASES = {
    "benchmarks.quality.run": lambda tmp: ["--questions", _questions(tmp), "--no-ingest"],
    "benchmarks.quality.lexical_grid": lambda tmp: ["--questions", _questions(tmp)],
    "benchmarks.latency.cost_split": lambda tmp: ["--sizes", "1000"],
    "benchmarks.latency.many_queries": lambda tmp: ["--size", "1000"],
    "benchmarks.latency.run": lambda tmp: ["--sizes", "1000", "--skip-e"],
}


@pytest.mark.parametrize("module", sorted(OUT_CASES))
def test_an_out_that_is_a_file_is_refused_before_the_run(module, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("kept\n")
    line = refused(module, *OUT_CASES[module](tmp_path), "--out", str(afile))
    assert line.endswith(f"error: argument --out: {str(afile)!r} is a file, not a folder"), line
    assert afile.read_text() == "kept\n"


def test_an_out_folder_is_refused_under_a_file_and_taken_otherwise(tmp_path):
    from benchmarks.args import output_folder

    (tmp_path / "afile").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match=r"cannot be a folder: '.*afile' is a file"):
        output_folder(str(tmp_path / "afile" / "sub"))
    assert output_folder(str(tmp_path / "new" / "sub")) == tmp_path / "new" / "sub"  # made when written
    assert output_folder(str(tmp_path)) == tmp_path
    assert not (tmp_path / "new").exists()


BAD_LINE = '{"id":"x1","question":"q","evidence":[],"needs":"none"}\n{not json\n'

QUESTION_CASES = {
    "benchmarks.quality.run": lambda bad: ["--questions", bad, "--no-ingest"],
    "benchmarks.quality.lexical_grid": lambda bad: ["--questions", bad],
    "benchmarks.latency.run": lambda bad: ["--sizes", "manual", "--questions", bad, "--skip-e"],
    "benchmarks.latency.many_queries": lambda bad: ["--manual", "--n", "1", "--questions", bad],
}


@pytest.mark.parametrize("module", sorted(QUESTION_CASES))
def test_a_malformed_question_line_is_refused_naming_its_file_and_line(module, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(BAD_LINE)
    line = refused(module, *QUESTION_CASES[module](str(bad)), "--out", str(tmp_path / "out"))
    assert f"error: {bad}:2: not a question record (JSONDecodeError: " in line, line
    assert not (tmp_path / "out").exists()


def test_question_texts_read_as_the_quality_questions_are(tmp_path):
    """The latency benchmarks' queries need only "question"; '#' lines are skipped, as load_questions skips them
    (they had been a JSONDecodeError), and a record without a question names its line."""
    from benchmarks.quality.metrics import question_texts

    path = tmp_path / "q.jsonl"
    path.write_text('# the latency queries\n{"question": "Why freeze?"}\n\n{"id": "q2", "question": "What is MVCC?"}\n')
    assert question_texts(path) == ["Why freeze?", "What is MVCC?"]
    path.write_text('{"question": "Why freeze?"}\n{"text": "no question"}\n')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:2: not a question record \(KeyError: 'question'\)$"):
        question_texts(path)
    path.write_text('{"question": 3}\n')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:1: not a question record \(TypeError: question must be"):
        question_texts(path)
