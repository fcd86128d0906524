"""reStructuredText: sections along its titles (docutils' rules), blocks verbatim."""

from __future__ import annotations

from pathlib import Path

from onetrip.parse_rst import make_id, parse_rst
from onetrip.sections import ContentBlock, HeadingBlock, parse_file

GUIDE = """\
=====================
 Data Retention Guide
=====================

:Author: Legal

This guide says how long records are kept.

.. _scope-label:

Scope
=====

It applies to every team.

Retention periods
-----------------

Invoices are kept ten years. Example::

    SELECT * FROM invoices;

    -- then delete them

Deletion
========

Run the job weekly.

Not a title
---

Short underline above: text, as docutils reads it.

----------

    Indented line
    -------------
"""


def test_titles_levels_anchors_and_the_document_title(tmp_path: Path) -> None:
    """An .rst file had been one text: a Sphinx source folder gave one section per file, no heading paths."""
    p = tmp_path / "guide.rst"
    p.write_text(GUIDE)
    doc = parse_file(p, count_tokens=lambda t: len(t.split()), min_tokens=0)
    assert (doc.format, doc.title) == ("rst", "Data Retention Guide")
    assert [(s.section_id, s.parent_section_id, s.heading_path) for s in doc.sections] == [
        ("data-retention-guide", None, ("Data Retention Guide",)),
        ("scope-label", "data-retention-guide", ("Data Retention Guide", "Scope")),  # the target before it
        ("retention-periods", "scope-label", ("Data Retention Guide", "Scope", "Retention periods")),
        ("deletion", "data-retention-guide", ("Data Retention Guide", "Deletion"))]
    by_id = {s.section_id: s.content for s in doc.sections}
    assert by_id["retention-periods"] == ("Invoices are kept ten years. Example::\n\n    SELECT * FROM invoices;\n\n"
                                          "    -- then delete them")
    assert by_id["deletion"].endswith("Not a title\n---\n\nShort underline above: text, as docutils reads it.\n\n"
                                      "----------\n\n    Indented line\n    -------------")


def test_blocks_are_the_source_lines() -> None:
    title, blocks, meta = parse_rst("Intro text\nover two lines.\n\nA title\n=======\n\nBody::\n\n   code\n\n   more\n")
    assert (title, meta) == ("A title", {})
    assert blocks == [ContentBlock("paragraph", "Intro text\nover two lines."),
                      HeadingBlock(1, "A title", "a-title", "A title\n======="),
                      ContentBlock("paragraph", "Body::", keep_with_next=True),
                      ContentBlock("code", "   code\n\n   more")]
    assert make_id("2. Überblick & Ziele") == "uberblick-ziele"
