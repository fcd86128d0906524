"""Unit tests of the quality benchmark's metrics and window splitter (no database, no model run)."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.quality.metrics import (
    Evidence,
    Question,
    coverage,
    covered_pairs,
    distribution,
    load_question_files,
    load_questions,
    normalize_ws,
    paired_record,
    passage_anchors,
    question_texts,
    question_warnings,
    quotes_found,
    section_recall,
)
from benchmarks.quality.windows import page_text, split_windows, window_rows
from onetrip.sections import ContentBlock, HeadingBlock, ParsedDocument, build_sections, section_anchors
from onetrip.tokens import count_tokens, get_tokenizer

# ------------------------------------------------------------------ normalization and coverage


def test_normalize_collapses_every_whitespace_run():
    assert normalize_ws("  a\tb\n\n c\u00a0 d \r\n") == "a b c d"
    assert normalize_ws("") == ""
    assert normalize_ws(" \n\t ") == ""


def test_quote_found_across_line_breaks_and_indentation():
    context = "### Path [p.html#X]\nThe default is\n    the ISO\tformat.\n\nNext paragraph."
    assert quotes_found(["The default is the ISO format."], context) == [True]
    assert quotes_found(["  The default   is the\nISO format. "], context) == [True]


def test_quote_must_match_exactly_apart_from_whitespace():
    context = "The default is the ISO format."
    assert quotes_found(["the default is the iso format."], context) == [False]  # case matters
    assert quotes_found(["Thedefault is"], context) == [False]  # whitespace runs are kept, not removed
    assert quotes_found(["ISO format. Extra"], context) == [False]


def test_coverage_is_fraction_of_quotes():
    context = "alpha beta gamma delta"
    assert coverage(["alpha beta", "gamma", "omega"], context) == pytest.approx(2 / 3)
    assert coverage(["alpha", "delta"], context) == 1.0
    assert coverage(["omega"], context) == 0.0
    assert coverage([], context) is None
    assert coverage(["omega", "omega", "alpha"], context) == pytest.approx(1 / 3)  # each listed quote counts


def test_empty_quote_never_counts_as_found():
    assert quotes_found(["", "  "], "anything") == [False, False]


def test_quote_split_between_two_passages_is_not_found():
    # the rendered context puts a header line between passages
    context = "### A [p#a]\nfirst half of\n\n### B [p#b]\nthe sentence"
    assert quotes_found(["first half of the sentence"], context) == [False]


# ------------------------------------------------------------------ recall and anchors


def test_passage_anchors_own_merged_and_window_lists():
    meta = {"merged": [{"heading": "Tiny", "anchor": "TINY", "level": 2}, {"heading": "x", "anchor": None}]}
    assert passage_anchors("MAIN", meta) == ("MAIN", "TINY")
    assert passage_anchors(None, {"anchors": ["A", "B", "A"]}) == ("A", "B")
    assert passage_anchors("MAIN", None) == ("MAIN",)
    assert passage_anchors(None, {}) == ()


def test_passage_anchors_reads_json_text_metadata():
    meta = {"merged": [{"heading": "Tiny", "anchor": "TINY", "level": 2}]}
    assert passage_anchors("MAIN", json.dumps(meta)) == ("MAIN", "TINY")
    assert passage_anchors("MAIN", json.dumps(json.dumps(meta))) == ("MAIN", "TINY")


def _merged_doc():
    """A page whose tiny first subsection (id TINY) is merged into its next sibling (BIG)."""
    big = " ".join(["word"] * 40)
    blocks = [
        HeadingBlock(1, "Page", "PAGE"),
        ContentBlock("paragraph", "Intro text " + " ".join(["intro"] * 30)),
        HeadingBlock(2, "Tiny", "TINY"),
        ContentBlock("paragraph", "The tiny fact."),
        HeadingBlock(2, "Big", "BIG"),
        ContentBlock("paragraph", big),
        HeadingBlock(2, "Other", "OTHER"),
        ContentBlock("paragraph", " ".join(["other"] * 40)),
    ]
    return build_sections(blocks, min_tokens=20)


def test_recall_counts_merged_anchors_like_section_anchors():
    sections = _merged_doc()
    ids = [s.section_id for s in sections]
    assert "TINY" not in ids and "BIG" in ids
    big = next(s for s in sections if s.section_id == "BIG")
    assert section_anchors(big) == ("BIG", "TINY")
    # what run.py builds from stored rows: anchor column + metadata
    anchors_of = {("p.html", s.section_id): passage_anchors(s.anchor, s.metadata) for s in sections}
    assert anchors_of[("p.html", "BIG")] == section_anchors(big)

    covered = covered_pairs([("p.html", "BIG")], anchors_of)
    assert covered == {("p.html", "BIG"), ("p.html", "TINY")}
    cited = [("p.html", "TINY"), ("p.html", "PAGE"), ("p.html", "TINY")]  # duplicates count once
    assert section_recall(cited, covered) == 0.5
    assert section_recall(cited, covered_pairs([("p.html", "BIG"), ("p.html", "PAGE")], anchors_of)) == 1.0
    assert section_recall([], covered) is None


def test_recall_is_per_page():
    anchors_of = {("a.html", "X"): ("X",), ("b.html", "Y"): ("Y",)}
    covered = covered_pairs([("a.html", "X"), ("b.html", "Y"), ("c.html", "missing")], anchors_of)
    assert section_recall([("b.html", "X")], covered) == 0.0
    assert section_recall([("a.html", "X"), ("b.html", "Y")], covered) == 1.0


def test_question_records(tmp_path):
    f = tmp_path / "q.jsonl"
    rows = [
        {"id": "q1", "question": "?", "needs": "parent",
         "evidence": [{"page": "p.html", "section_id": "A", "quote": "x"},
                      {"page": "p.html", "section_id": "A", "quote": "y"},
                      {"page": "p.html", "section_id": "B", "quote": "z"}]},
        {"id": "q2", "question": "??", "needs": "none", "evidence": []},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    qs = load_questions(f)
    assert [q.id for q in qs] == ["q1", "q2"]
    assert qs[0].answerable and not qs[1].answerable
    assert qs[0].cited_pairs == (("p.html", "A"), ("p.html", "B"))
    f.write_text('{"question": "no id"}\n')
    with pytest.raises(ValueError, match="q.jsonl:1"):
        load_questions(f)
    # a line that is no object, or a quote that is no string, had passed or failed unnamed (found by review)
    for line in ("[1, 2]", '"text"', json.dumps({**rows[0], "evidence": [{"page": "p.html", "section_id": "A",
                                                                            "quote": None}]})):
        f.write_text(json.dumps(rows[1]) + "\n" + line + "\n")
        with pytest.raises(ValueError, match="q.jsonl:2: not a question record"):
            load_questions(f)


def test_several_question_files_are_one_set_with_unique_ids(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    q1, q2 = ({"id": i, "question": "?", "evidence": []} for i in ("q1", "q2"))
    a.write_text(json.dumps(q1) + "\n")
    b.write_text(json.dumps(q2) + "\n")
    assert [q.id for q in load_question_files([a, b])] == ["q1", "q2"]
    # both lines are named (the file alone had been named, twice over when both were in one file)
    b.write_text(json.dumps(q2) + "\n\n" + json.dumps(q1) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{b}:3: question id 'q1' already read at {a}:1")):
        load_question_files([a, b])
    a.write_text("# a comment\n" + "\n".join(map(json.dumps, (q1, q2, q1))) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{a}:4: question id 'q1' already read at {a}:2")):
        load_question_files([a])


def test_a_byte_order_mark_and_raw_line_separators_in_strings_are_read(tmp_path):
    """A UTF-8 BOM had failed line 1 ('Unexpected UTF-8 BOM'), and a raw U+2028, U+2029 or U+0085 in a string
    (valid JSON; json.dumps(ensure_ascii=False) writes them raw) had cut its record in two: str.splitlines
    splits there. Lines end at "\n" ("\r\n" too), and FILE:LINE in errors counts those alone."""
    f = tmp_path / "q.jsonl"
    rows = [{"id": "q1", "question": "pasted\u2028from\u2029a page\u0085?", "needs": "parent",
             "evidence": [{"page": "p.html", "section_id": "A", "quote": "one\u2028two"}]},
            {"id": "q2", "question": "??", "needs": "none", "evidence": []}]
    text = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n"
    assert "\u2028" in text
    for bom in (b"\xef\xbb\xbf", b""):
        f.write_bytes(bom + text.encode())
        qs = load_questions(f)
        assert [q.id for q in qs] == ["q1", "q2"] and qs[0].question == rows[0]["question"]
        assert qs[0].evidence[0].quote == "one\u2028two" and qs[1].where == f"{f}:2"
        assert question_texts(f) == [rows[0]["question"], "??"]
    f.write_bytes(b"\xef\xbb\xbf" + (text + "{\"id\": \"q3\", \u2028\r\n").encode())
    with pytest.raises(ValueError, match=re.escape(f"{f}:3: not a question record (JSONDecodeError")):
        load_questions(f)


def test_needs_and_evidence_that_disagree_are_warned_and_the_evidence_decides(tmp_path):
    """Records whose needs disagreed with their evidence, or was no label of the format, had been taken as
    `none` silently (a `none` with quotes kept a coverage in its per-question row, out of every mean)."""
    ev = [{"page": "p.html", "section_id": "A", "quote": "x"}]
    rows = [{"id": "a", "needs": "parent", "evidence": []}, {"id": "b", "needs": "none", "evidence": ev},
            {"id": "c", "needs": "sibling", "evidence": ev}, {"id": "d", "evidence": ev},
            {"id": "e", "needs": "PARENT", "evidence": []}, {"id": "f", "needs": "none", "evidence": []},
            {"id": "g", "needs": "multi", "evidence": ev}]
    f = tmp_path / "q.jsonl"
    f.write_text("# header\n" + "\n".join(json.dumps({"question": "?", **r}) for r in rows) + "\n")
    qs = load_questions(f)
    assert [q.id for q in qs if q.answerable] == ["b", "c", "d", "g"]
    assert question_warnings(qs) == [
        f"{f}:2: question 'a' has needs 'parent' but no evidence; scored as `none` (no evidence)",
        f"{f}:3: question 'b' has needs 'none' but 1 evidence quote(s); scored as answerable (it cites evidence)",
        f"{f}:4: question 'c' has needs 'sibling', not one of parent, neighbor, section, multi, none; "
        "scored as answerable (it cites evidence)",
        f"{f}:5: question 'd' has no needs, not one of parent, neighbor, section, multi, none; "
        "scored as answerable (it cites evidence)",
        f"{f}:6: question 'e' has needs 'PARENT', not one of parent, neighbor, section, multi, none; "
        "scored as `none` (no evidence)",
    ]
    assert question_warnings([Question("x", "?", (), "none"), Question("y", "?", (Evidence("p", "A", "q"),),
                                                                      "neighbor")]) == []


def test_small_statistics():
    assert distribution([0.3, None, 0.1, 0.2]) == {"n": 3, "min": 0.1, "median": 0.2, "max": 0.3,
                                                    "mean": pytest.approx(0.2)}
    assert distribution([])["n"] == 0
    assert paired_record([1.0, 0.5, None, 0.0], [0.5, 0.5, 1.0, 1.0]) == {"wins": 1, "ties": 1, "losses": 1}
    assert Question("x", "q", (), "none").cited_pairs == ()


# ------------------------------------------------------------------ fixed windows


TEXT = (
    "PostgreSQL's MVCC keeps old row versions until VACUUM removes them; "
    "a long-running transaction (e.g. idle in transaction) holds back the xmin horizon.\n\n"
    "Table 13.1. Transaction Isolation Levels | Dirty Read | Nonrepeatable Read\n"
    "Read uncommitted | Allowed, but not in PG | Possible\n\n"
) * 12


def _ids(text: str) -> list[int]:
    return get_tokenizer().encode(text, add_special_tokens=False).ids


def test_windows_are_verbatim_spans_of_the_source():
    wins = split_windows(TEXT, size=64, overlap=10)
    assert len(wins) > 3
    for w in wins:
        assert w.text == TEXT[w.char_start:w.char_end]
        assert w.text == w.text.strip()  # spans start and end on tokens, not on whitespace
        # cuts fall on word boundaries, so re-tokenizing a window gives exactly its pieces
        assert count_tokens(w.text) == w.tokens <= 64
    assert wins[0].char_start == 0 and wins[0].tok_start == 0
    assert wins[-1].char_end == len(TEXT.rstrip())
    assert wins[-1].tok_end == len(_ids(TEXT))


def test_windows_keep_the_overlap():
    all_ids = _ids(TEXT)
    wins = split_windows(TEXT, size=64, overlap=10)
    for a, b in zip(wins, wins[1:]):
        shared = a.tok_end - b.tok_start
        assert shared >= 10, (a, b)
        assert shared < 64
        # the shared pieces are the same text at the end of one window and the start of the next
        assert all_ids[b.tok_start:a.tok_end] == _ids(TEXT[b.char_start:a.char_end])
        assert a.text.endswith(TEXT[b.char_start:a.char_end])
        assert b.text.startswith(TEXT[b.char_start:a.char_end])
    # every token is in some window, in order, without gaps
    assert [w.tok_start for w in wins] == sorted(w.tok_start for w in wins)
    for a, b in zip(wins, wins[1:]):
        assert b.tok_start <= a.tok_end


def test_window_defaults_are_512_with_50_overlap():
    long_text = TEXT * 4
    wins = split_windows(long_text)
    assert len(wins) >= 3
    assert max(w.tokens for w in wins) <= 512
    assert all(w.tokens >= 500 for w in wins[:-1])
    assert all(a.tok_end - b.tok_start >= 50 for a, b in zip(wins, wins[1:]))


def test_short_and_empty_text():
    wins = split_windows("just a few words", size=512, overlap=50)
    assert len(wins) == 1 and wins[0].text == "just a few words"
    assert split_windows("   \n ") == []
    with pytest.raises(ValueError):
        split_windows("x", size=10, overlap=10)


def test_a_quote_shorter_than_the_overlap_is_always_inside_one_window():
    wins = split_windows(TEXT, size=64, overlap=20)
    quote = "a long-running transaction (e.g. idle in transaction)"
    assert count_tokens(quote) < 20
    start = 0
    while (i := TEXT.find(quote, start)) >= 0:
        assert any(w.char_start <= i and i + len(quote) <= w.char_end for w in wins)
        start = i + 1


def test_page_text_spans_and_window_anchors():
    sections = _merged_doc()
    page = page_text(ParsedDocument("Page", sections, {}, "html"))
    for (s, e, anchors), sec in zip(page.spans, sections):
        assert page.text[s:e].endswith(sec.content)
        assert anchors == section_anchors(sec)
    assert page.text.startswith("Page\n\nIntro text")
    # the page's own text: the merged section's label is not in it, its parts' heading lines are, once each
    assert "Tiny; Big" not in page.text
    assert "\n\nTiny\n\nThe tiny fact.\n\nBig\n\nword word" in page.text and page.text.count("Big") == 1
    rows = window_rows("p.html", page, size=30, overlap=5)
    assert rows[0].metadata["anchors"][0] == "PAGE"
    everything = {a for r in rows for a in r.metadata["anchors"]}
    assert everything == {"PAGE", "BIG", "TINY", "OTHER"}
    for r in rows:
        assert r.content == page.text[r.metadata["char_start"]:r.metadata["char_end"]]
        assert r.token_count == count_tokens(r.content)
        assert r.parent_section_id is None and r.anchor is None
    assert [r.sequence_index for r in rows] == list(range(len(rows)))


def test_lexical_grid_parses_every_combination():
    from benchmarks.quality.lexical_grid import parse_grid

    grid = parse_grid(["tf_weight=0,0.5", "candidates=50,100"])
    assert grid == [{"tf_weight": 0, "candidates": 50}, {"tf_weight": 0, "candidates": 100},
                    {"tf_weight": 0.5, "candidates": 50}, {"tf_weight": 0.5, "candidates": 100}]
    assert isinstance(grid[0]["candidates"], int)
    with pytest.raises(ValueError, match="name=v1"):
        parse_grid(["tf_weight"])
    # checked before the model loads and every question is embedded (they had been tracebacks after)
    with pytest.raises(ValueError, match="'bogus' is no HybridOptions field"):
        parse_grid(["bogus=1"])
    with pytest.raises(ValueError, match="the values must be numbers"):
        parse_grid(["tf_weight=x"])
    with pytest.raises(ValueError, match="tf_weight must be"):
        parse_grid(["tf_weight=0,-1"])


def test_lexical_grid_names_each_question_set_apart():
    """Two files of one name in two folders had been one set, keyed by the stem: the other set was dropped."""
    from benchmarks.quality.lexical_grid import set_names

    assert set_names(["a/q3.jsonl", "b/x.jsonl,b/y.jsonl"]) == ["q3", "x+y"]
    assert set_names(["a/q3.jsonl", "b/q3.jsonl"]) == ["a/q3.jsonl", "b/q3.jsonl"]
    with pytest.raises(ValueError, match="the same set twice"):
        set_names(["a/q3.jsonl", "a/q3.jsonl"])


# ------------------------------------------------------------------ report helpers of run.py


def test_cited_sections_no_stored_row_carries_are_named_once_each():
    """A (page, section_id) the tables lack had only been counted ('7/8 quotes reachable', 'not reachable:
    ['bp1']'): each is named, once per question and pair, with the line that cites it."""
    from benchmarks.quality.run import citation_warning, missing_citations

    anchors_of = {("p.html", "A"): ("A", "TINY"), ("p.html", "B~2"): ("B",), ("q.html", "C"): ("C",)}
    ev = [Evidence("p.html", "A", "x"), Evidence("p.html", "TINY", "merged into A"), Evidence("p.html", "B", "a part"),
          Evidence("p.html", "NOPE", "y"), Evidence("p.html", "NOPE", "z"), Evidence("gone.html", "A", "w"),
          Evidence("q.html", "A", "on another page")]
    qs = [Question("q1", "?", tuple(ev), "multi", where="q.jsonl:4"),
          Question("q2", "?", (Evidence("p.html", "NOPE", "y"),), "parent"), Question("q3", "?", (), "none")]
    miss = missing_citations(qs, anchors_of)
    assert [(m["question"], m["page"], m["section_id"]) for m in miss] == [
        ("q1", "p.html", "NOPE"), ("q1", "gone.html", "A"), ("q1", "q.html", "A"), ("q2", "p.html", "NOPE")]
    assert [citation_warning(m, "pg15_sections") for m in miss[:2]] == [
        "q.jsonl:4: question 'q1' cites p.html#NOPE, not in pg15_sections: no stored section of p.html has that "
        "id (its section recall cannot reach 1)",
        "q.jsonl:4: question 'q1' cites gone.html#A, not in pg15_sections: gone.html is not stored "
        "(its section recall cannot reach 1)"]
    assert citation_warning(miss[3], "t").startswith("question 'q2' cites p.html#NOPE")


def test_none_scores_without_an_answerable_question():
    """With no answerable question the share of them closer than a `none` one had divided by zero."""
    from benchmarks.quality.run import none_cell, none_scores

    d = none_scores({"n1": 0.3, "n2": 0.5}, set(), ["n1", "n2"])
    assert d["answerable"]["n"] == 0 and d["none"]["n1"] == {"distance": 0.3, "fraction_answerable_closer": None}
    assert none_cell(d["none"]["n1"]) == "0.300" and none_cell(None) == "–"
    d = none_scores({"a": 0.2, "b": 0.4, "n1": 0.3}, {"a", "b"}, ["n1"])
    assert d["none"]["n1"]["fraction_answerable_closer"] == 0.5
    assert none_cell(d["none"]["n1"]) == "0.300 (50% of answerable closer)"
