"""The held-out question files are well formed and stay apart: the format the quality benchmark and the eval
set's verify_qa.py read, the needs mix their READMEs promise, and no page cited by two sets (the quotes
themselves are checked against the manual by verify_qa.py, which needs the manual: see the READMEs)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

QUALITY = Path(__file__).resolve().parents[1] / "benchmarks" / "quality"
SETS = {"validation": sorted((QUALITY / "validation").glob("*.jsonl")),
        "validation_fresh": sorted((QUALITY / "validation_fresh").glob("*.jsonl"))}
FILES = [f for files in SETS.values() for f in files]


def questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_sets_hold_the_files_their_readmes_list():
    assert [f.name for f in SETS["validation"]] == ["administration.jsonl", "reference.jsonl", "sql_language.jsonl"]
    assert [f.name for f in SETS["validation_fresh"]] == ["operations.jsonl", "server_programming.jsonl"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_question_file_is_in_the_eval_format_with_the_promised_mix(path):
    qs = questions(path)
    assert len(qs) == 12
    for q in qs:
        assert set(q) == {"id", "question", "evidence", "needs", "why"}, q["id"]
        assert q["needs"] in {"parent", "neighbor", "section", "multi", "none"}, q["id"]
        assert q["question"].strip() and q["why"].strip(), q["id"]
        assert (q["evidence"] == []) == (q["needs"] == "none"), q["id"]
        for e in q["evidence"]:
            assert set(e) == {"page", "section_id", "quote"} and all(e.values()), q["id"]
            assert e["page"].endswith(".html") and e["quote"] == " ".join(e["quote"].split()), q["id"]
        if q["needs"] == "multi":  # as verify_qa.py reads it: three or more sections, or more than one page
            sections = {(e["page"], e["section_id"]) for e in q["evidence"]}
            assert len(sections) >= 3 or len({page for page, _ in sections}) > 1, q["id"]
        elif q["evidence"]:  # the rest of the answer sits on the main section's page, elsewhere than its section
            main = q["evidence"][0]
            assert all(e["page"] == main["page"] for e in q["evidence"]), q["id"]
            assert any(e["section_id"] != main["section_id"] for e in q["evidence"][1:]), q["id"]
    assert Counter(q["needs"] for q in qs) == {"parent": 4, "neighbor": 4, "section": 2, "multi": 1, "none": 1}


def test_ids_are_unique_and_no_page_is_cited_by_two_sets():
    ids = [q["id"] for f in FILES for q in questions(f)]
    assert len(ids) == len(set(ids)) == 60
    pages = {name: {e["page"] for f in files for q in questions(f) for e in q["evidence"]}
             for name, files in SETS.items()}
    assert pages["validation"] and pages["validation_fresh"]
    assert pages["validation"] & pages["validation_fresh"] == set()
