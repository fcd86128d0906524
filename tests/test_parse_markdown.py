"""Markdown parsing: headings from markdown-it tokens, verbatim block text, front matter."""

from __future__ import annotations

import json
from pathlib import Path

from onetrip.parse_markdown import GithubSlugger, parse_front_matter, parse_markdown, truncation_warning
from onetrip.sections import ContentBlock, HeadingBlock, Section, build_sections, parse_file


def words(text: str) -> int:
    return len(text.split())


def tree(sections: list[Section]) -> list[tuple]:
    return [
        (s.section_id, s.parent_section_id, s.sequence_index, s.level, s.heading_path)
        for s in sections
    ]


def sections_of(md: str, max_tokens: int = 256) -> list[Section]:
    _, blocks, _ = parse_markdown(md)
    return build_sections(blocks, count_tokens=words, max_tokens=max_tokens, min_tokens=0)


def test_hash_lines_in_fenced_code_are_not_headings() -> None:
    md = (
        "# Setup\n\nRun this:\n\n```bash\n# install\npip install onetrip\n"
        "## not a heading either\n```\n\n## Next\n\nDone.\n"
    )
    secs = sections_of(md)
    assert tree(secs) == [
        ("setup", None, 0, 1, ("Setup",)),
        ("next", "setup", 1, 2, ("Setup", "Next")),
    ]
    code = "```bash\n# install\npip install onetrip\n## not a heading either\n```"
    assert secs[0].content == "Run this:\n\n" + code


def test_setext_headings_count() -> None:
    md = "Title\n=====\n\nIntro.\n\nPart\n----\n\nBody.\n"
    title, blocks, _ = parse_markdown(md)
    assert title == "Title"
    assert [b for b in blocks if isinstance(b, HeadingBlock)] == [
        HeadingBlock(1, "Title", "title", "Title\n====="),
        HeadingBlock(2, "Part", "part", "Part\n----"),
    ]
    assert tree(build_sections(blocks, count_tokens=words, min_tokens=0)) == [
        ("title", None, 0, 1, ("Title",)),
        ("part", "title", 1, 2, ("Title", "Part")),
    ]


def test_skipped_levels_and_preface() -> None:
    md = "Preface text.\n\n# A\n\na\n\n### A deep\n\nd\n\n## A two\n\nt\n\n# B\n\nb\n"
    assert tree(sections_of(md)) == [
        ("s0", None, 0, 0, ()),
        ("a", None, 1, 1, ("A",)),
        ("a-deep", "a", 2, 3, ("A", "A deep")),
        ("a-two", "a", 3, 2, ("A", "A two")),
        ("b", None, 4, 1, ("B",)),
    ]


def test_nested_lists_are_one_verbatim_block() -> None:
    md = "# L\n\n- one\n  - one.a\n    1. deep\n- two\n\n  continued para\n\nAfter.\n"
    _, blocks, _ = parse_markdown(md)
    assert blocks[1:] == [
        ContentBlock("list", "- one\n  - one.a\n    1. deep\n- two\n\n  continued para"),
        ContentBlock("paragraph", "After."),
    ]


def test_headings_inside_quotes_and_lists_are_content() -> None:
    md = "# Real\n\n> # quoted\n\n- # in a list\n"
    secs = sections_of(md)
    assert tree(secs) == [("real", None, 0, 1, ("Real",))]
    assert secs[0].content == "> # quoted\n\n- # in a list"


def test_table_kept_whole_with_header() -> None:
    md = (
        "# T\n\nSome words before the table here.\n\n"
        "| col a | col b |\n|-------|-------|\n| 1 | 2 |\n| 3 | 4 |\n\nAfter the table.\n"
    )
    _, blocks, _ = parse_markdown(md)
    table = ContentBlock("table", "| col a | col b |\n|-------|-------|\n| 1 | 2 |\n| 3 | 4 |", 2)
    assert table in blocks
    secs = build_sections(blocks, count_tokens=words, max_tokens=22, min_tokens=0)
    assert [s.content for s in secs] == [
        "Some words before the table here.",
        table.text + "\n\nAfter the table.",
    ]


def test_oversized_table_repeats_header_and_delimiter() -> None:
    rows = [f"| r{i} | v{i} |" for i in range(6)]
    md = "# T\n\n| k | v |\n|---|---|\n" + "\n".join(rows) + "\n"
    secs = sections_of(md, max_tokens=16)  # header 2 lines = 6 words, rows 5 words
    assert len(secs) == 3
    for s in secs:
        assert s.content.startswith("| k | v |\n|---|---|\n")
    assert [ln for s in secs for ln in s.content.split("\n")[2:]] == rows


def test_front_matter_to_metadata_and_title() -> None:
    md = "---\ntitle: My Doc\ndate: 2024-05-01\ntags: [rag, pg]\n---\n\n# Heading One\n\nText.\n"
    title, blocks, meta = parse_markdown(md)
    assert title == "My Doc"
    assert meta == {"title": "My Doc", "date": "2024-05-01", "tags": ["rag", "pg"]}
    assert blocks[0] == HeadingBlock(1, "Heading One", "heading-one", "# Heading One")
    assert all("title:" not in getattr(b, "text", "") for b in blocks)


def test_a_front_matter_title_yaml_reads_as_a_number_or_boolean_is_the_title_as_written() -> None:
    """Found by review: `title: 1984` (YAML's int) was no title: the first h1 was taken while the metadata
    said 1984. The title is the scalar as written (1.10, not 1.1); the metadata stays as YAML reads it."""
    cases = {"title: 1984": ("1984", 1984), "title: 1.10": ("1.10", 1.1), "title: true": ("true", True),
             "title: 2024-05-01": ("2024-05-01", "2024-05-01"), "title: a\ntitle: 404": ("404", 404),
             "base: &b\n  title: 7\n<<: *b": ("7", 7), "title:": ("Intro", None), "title: [a]": ("Intro", ["a"]),
             # the last title is the title (a review: an earlier scalar had stood in for a last list or mapping)
             "title: Draft\ntitle: [a, b]": ("Intro", ["a", "b"]), "<<: {title: Old}\ntitle: {x: 1}": ("Intro", {"x": 1}),
             "title: null\ntitle: [a]": ("Intro", ["a"])}
    for fm, (title, value) in cases.items():
        got, _, meta = parse_markdown(f"---\n{fm}\n---\n# Intro\n\ntext\n")
        assert (got, meta["title"]) == (title, value), fm


def test_title_falls_back_to_first_h1_then_empty() -> None:
    assert parse_markdown("## Two\n\n# One\n\n# Other\n")[0] == "One"
    assert parse_markdown("just text\n")[0] == ""


def test_front_matter_fallback_parser() -> None:
    assert parse_front_matter("title: x: y\ndate: 2024") == {"title": "x: y", "date": "2024"}
    assert parse_front_matter("") == {}
    # YAML comments alone are empty front matter, as Jekyll reads them (found by review: a generator's "# do not
    # edit" line had become the document's title)
    assert parse_front_matter("# generated, do not edit\n") == {} and parse_front_matter("\n\n") == {}
    assert parse_markdown("---\n# generated, do not edit\n---\n# Real Title\n\nText.\n")[0] == "Real Title"


def test_a_table_of_contents_between_two_rules_is_markdown_not_front_matter() -> None:
    """Found by review: a `---` block holding a list (valid YAML: stored as metadata["front_matter"]) or a
    heading and links (invalid YAML with no key: value line: stored as {}) was taken as front matter, and its
    heading and text were in no section. Front matter is a mapping; anything else there is Markdown."""
    assert parse_front_matter("- a\n- b\n") is None
    for toc in ("## Table of contents\n- [Install](#install)\n- [Usage](#usage)\n", "- item one\n- item two\n"):
        title, blocks, meta = parse_markdown(f"---\n{toc}---\n\n# Guide\n\nText.\n")
        assert meta == {} and title == "Guide", meta
        text = "\n".join(b.text for b in blocks)
        assert "item" in text or ("Table of contents" in text and "[Install](#install)" in text), text
    assert parse_markdown("---\ntitle: Kept\ntags: [a]\n---\n\nText.\n")[2] == {"title": "Kept", "tags": ["a"]}


def test_a_document_opening_with_a_rule_keeps_what_follows_it() -> None:
    """Found by review: the front matter plugin takes everything from an opening `---` rule to the next
    `---`. A heading and paragraph there were lost (the paragraph became metadata, the title the file
    name); invalid YAML kept its key: value lines and dropped the rest. A block that is no front matter
    (a bare YAML string, or a line that is not key: value) is now read as CommonMark reads it."""
    title, blocks, meta = parse_markdown("---\n\n# Release notes\n\nVersion 2.0 drops PostgreSQL 12.\n\n---\n\n"
                                         "## Upgrading\n\nRun the script.\n")
    assert meta == {} and title == "Release notes"
    assert [b.text for b in blocks] == ["---", "Release notes", "Version 2.0 drops PostgreSQL 12.", "---",
                                        "Upgrading", "Run the script."]
    _, blocks, meta = parse_markdown("---\nNote: a draft\nSee the wiki for details.\n---\n\n# Guide\n\nBody.\n")
    assert meta == {} and "See the wiki for details." in " ".join(b.text for b in blocks)
    assert parse_front_matter("\n# Release notes\n\nVersion 2.0 drops PostgreSQL 12.\n") is None  # a YAML string
    assert parse_front_matter("Note: a draft\nSee the wiki for details.\n") is None  # invalid YAML, not key: value
    # front matter as it was: a mapping, and invalid YAML whose lines are key: value (a list is Markdown since
    # SECTIONING 6: test_a_table_of_contents_between_two_rules_is_markdown_not_front_matter)
    assert parse_markdown("---\ntitle: T\n---\n\nText.\n")[2] == {"title": "T"}
    assert parse_markdown("---\ntitle: x: y\n---\n\nText.\n")[2] == {"title": "x: y"}


def test_github_slugs() -> None:
    slug = GithubSlugger()
    assert slug("Hello, World!") == "hello-world"
    assert slug("Hello, World!") == "hello-world-1"
    assert slug("`code` & Stuff_here") == "code--stuff_here"
    assert slug("Ünïcode 2") == "ünïcode-2"


def test_an_anchor_keeps_every_space_of_its_heading_as_github_does() -> None:
    """Found by review: runs of spaces were collapsed and a space next to inline HTML stripped, so the anchor
    differed from GitHub's (github-slugger turns each space into '-': `# &#x20;a` is `-a`)."""
    _, blocks, _ = parse_markdown('# Version 0.1  (2012-01-20)\n\n## <a name="ls"></a> `team.ls()`\n\n'
                                  '## Install <a id="x"></a>\n\nText.\n')
    assert [(b.text, b.anchor) for b in blocks if isinstance(b, HeadingBlock)] == [
        ("Version 0.1 (2012-01-20)", "version-01--2012-01-20"), ("team.ls()", "-teamls"), ("Install", "install-")]
    # a setext heading over two lines: GitHub's text keeps the line break, which the slug drops; letter-like
    # symbols (circled, squared letters) are kept, as github-slugger's Other_Symbol fixture has them
    _, blocks, _ = parse_markdown("Foo\nbar\n===\n\ntext\n\n# a¦ Ⓔ ☎ 🄺b\n\nmore\n")
    assert [b.anchor for b in blocks if isinstance(b, HeadingBlock)] == ["foobar", "a-ⓔ--🄺b"]


def test_a_repeated_heading_skips_a_suffix_another_heading_already_took() -> None:
    """"Setup", "Setup 1", "Setup" get setup, setup-1, setup-2 (as GitHub's slugger): the third must not
    reuse setup-1, or two sections share one anchor and a link to the second lands on the first."""
    _, blocks, _ = parse_markdown("# Setup\n\na\n\n# Setup 1\n\nb\n\n# Setup\n\nc\n\n# Setup\n\nd\n")
    anchors = [b.anchor for b in blocks if isinstance(b, HeadingBlock)]
    assert anchors == ["setup", "setup-1", "setup-2", "setup-3"]


def test_heading_text_drops_markup() -> None:
    _, blocks, _ = parse_markdown("# The `jsonb` *type* [link](http://x)\n")
    raw = "# The `jsonb` *type* [link](http://x)"
    assert blocks == [HeadingBlock(1, "The jsonb type link", "the-jsonb-type-link", raw)]


def test_content_is_verbatim_source() -> None:
    body = (
        "A *para* with `code` and a [link][ref].\nSecond line.\n\n"
        "[ref]: https://example.com\n\n<div>html</div>"
    )
    secs = sections_of("# H\n\n" + body + "\n\n<!-- comment -->\n")  # a block of comments alone: not text
    assert secs[0].content == body.replace("<div>html</div>", "html")  # a raw HTML block: the text it shows


def test_parse_file_markdown(tmp_path: Path) -> None:
    p = tmp_path / "guide.md"
    p.write_text("---\nauthor: me\n---\nIntro line.\n\n# Guide\n\nSome text for the guide.\n")
    doc = parse_file(p, count_tokens=words)
    assert (doc.format, doc.title, doc.metadata) == ("markdown", "Guide", {"author": "me"})
    # the 2-word preface is tiny and its next section is a root sibling: merged forward
    assert tree(doc.sections) == [("guide", None, 0, 1, ("Guide",))]
    assert doc.sections[0].content == "Intro line.\n\n# Guide\n\nSome text for the guide."  # in source order
    assert doc.sections[0].metadata == {"merged": [{"heading": "", "anchor": None, "level": 0}]}


def test_crlf_input() -> None:
    title, blocks, _ = parse_markdown("# A\r\n\r\nline one\r\nline two\r\n")
    assert title == "A"
    assert blocks[1] == ContentBlock("paragraph", "line one\nline two")


def test_a_list_ten_deep_keeps_the_headings_after_it():
    """markdown-it's default nesting limit (20) silently stopped parsing inside a 10-deep list."""
    deep = "".join("  " * i + "- item\n" for i in range(10))
    _, blocks, _ = parse_markdown(f"# Guide\n\nintro\n\n{deep}\n## Install\n\nx\n\n## Usage\n\ny\n")
    assert [b.text for b in blocks if isinstance(b, HeadingBlock)] == ["Guide", "Install", "Usage"]


def test_a_run_of_open_brackets_costs_few_steps_a_character(monkeypatch):
    """markdown-it shares one nesting limit between blocks and inline text, and each '[' of a run with no ']'
    looks that many levels deep for one: with the block limit (200) that was 200 validation steps a
    character (60 KB of '[' took ~8 s). Inline text is parsed with markdown-it's own 20. Steps are counted,
    not timed; the lists of the test above still nest past 10 deep."""
    from markdown_it.parser_inline import ParserInline

    steps = 0
    skip = ParserInline.skipToken

    def counted(self, state):
        nonlocal steps
        steps += 1
        return skip(self, state)

    monkeypatch.setattr(ParserInline, "skipToken", counted)
    n = 2000
    _, blocks, _ = parse_markdown(f"# Title [[\n\n{'[' * n}\n\n## Next [a](b)\n\n[x]: /u\n")
    assert steps <= 25 * n
    assert blocks == [HeadingBlock(1, "Title [[", "title-", "# Title [["), ContentBlock("paragraph", "[" * n),
                      HeadingBlock(2, "Next a", "next-a", "## Next [a](b)")]  # [x]: /u is referenced nowhere


def test_nesting_past_the_limit_is_a_clear_error(tmp_path):
    import pytest

    from onetrip.errors import InputDocumentError

    p = tmp_path / "deep.md"
    p.write_text("".join("  " * i + "- item\n" for i in range(150)) + "\n# After\n\ntext\n")
    with pytest.raises(InputDocumentError, match="nested deeper than 98 levels of lists"):
        parse_file(p)
    # the message's numbers are the limits: one more list, or one more quote, is refused
    for many, limit in (("- " * 98, "98 levels of lists"), ("> " * 197, "197 of quotes")):
        p.write_text(many + "deep\n")
        assert "deep" in parse_file(p).sections[0].content
        p.write_text(many[:2] + many + "deep\n")
        with pytest.raises(InputDocumentError, match=limit):
            parse_file(p)
    # a quote is one level of markdown-it's nesting, a list two: 150 quotes are read whole, 250 are not
    p.write_text("> " * 150 + "quoted\n\n# After\n\ntext\n")
    read = parse_file(p).sections
    assert [s.heading for s in read] == ["", "After"] and "quoted" in read[0].content
    p.write_text("> " * 250 + "quoted\n\n# After\n\ntext\n")
    with pytest.raises(InputDocumentError, match=r"\(197 of quotes\)"):
        parse_file(p)


def test_front_matter_aliases_bad_dates_and_nan_are_read_safely():
    # each alias line multiplies the expansion by 9: eight lines would be ~3 GB as YAML
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
    meta = parse_front_matter(bomb)  # read as plain key: value lines, as invalid YAML is
    assert set(meta) == set("abcdefghi") and len(str(meta)) < 1000
    assert parse_front_matter("title: R\ndate: 2024-02-30\n") == {"title": "R", "date": "2024-02-30"}
    assert parse_front_matter("x: .nan\ny: .inf\nz: 1.5\n") == {"x": "nan", "y": "inf", "z": 1.5}  # jsonb has no NaN
    # a review: a sexagesimal float past float's range raised OverflowError, failing the whole file; an integer
    # past Python's 4,300 decimal digits failed json.dumps at the write ("NaN or infinity")
    assert parse_front_matter("x: 1" + ":0" * 200 + ".\ny: 2\n")["y"] == "2"
    huge = parse_front_matter("x: 0x" + "f" * 4000 + "\n")["x"]
    assert huge == "0x" + "f" * 4000 and json.dumps(huge)
    # keys as written (found by review): YAML reads 1: and true: as 1 and True, one key in a dict, and null: as None
    assert parse_front_matter("1: a\ntrue: c\nnull: x\nd: {<<: {a: 1}, b: 2}\n") == {
        "1": "a", "true": "c", "null": "x", "d": {"a": 1, "b": 2}}


def test_text_right_under_a_heading_is_kept_whole() -> None:
    """A link reference definition on the line after a heading is text of that section, not lost between
    the heading and the next block."""
    _, blocks, _ = parse_markdown("# H\n[foo]: http://x.org/a\n\nText [foo].\n")
    (sec,) = build_sections(blocks, count_tokens=lambda t: len(t.split()), min_tokens=0)
    assert "[foo]: http://x.org/a" in sec.content and "Text [foo]." in sec.content


def test_an_unclosed_code_fence_is_stored_with_a_warning(tmp_path: Path) -> None:
    """CommonMark reads the rest of the file as code: the headings after it are no sections, so say so."""
    p = tmp_path / "doc.md"
    p.write_text("# Guide\n\nIntro.\n\n```python\nprint(1)\n\n## Setup\n\nInstall it.\n\n## Use\n\nRun it.\n\n")
    doc = parse_file(p, min_tokens=0)
    assert [s.heading for s in doc.sections] == ["Guide"]
    assert doc.warnings == ("the code fence (```) opened at line 5 is never closed: the 9 lines after it, 2 of "
                            "them heading lines, are read as code (the file may be truncated)",)


def test_closed_fences_warn_nothing(tmp_path: Path) -> None:
    cases = [
        "# A\n\n```\ncode\n```",                      # closed on the last line, no newline
        "# A\n\n````\n```\nstill code\n`````\n\n",     # a longer closer closes it; a shorter one does not
        "# A\n\n> ```\n> quoted code\n> ```\n",         # in a quote
        "# A\n\n- item\n\n  ```\n  code\n  ```\n",     # in a list
        "# A\n\n~~~\ncode\n~~~\n",
    ]
    for i, text in enumerate(cases):
        p = tmp_path / f"doc{i}.md"
        p.write_text(text)
        assert parse_file(p, min_tokens=0).warnings == (), text
    p = tmp_path / "open.md"
    p.write_text("# A\n\n````\n```\n")  # a shorter closer does not close it
    assert parse_file(p, min_tokens=0).warnings == (
        "the code fence (````) opened at line 3 is never closed: the line after it is read as code "
        "(the file may be truncated)",)


def test_an_unclosed_html_comment_or_raw_element_is_stored_with_a_warning(tmp_path: Path) -> None:
    """Found by fuzzing: CommonMark reads the rest of the file as raw HTML after an unclosed <!-- or <script>,
    <pre>, <style>, <textarea>; the headings after it were no sections and nothing was said."""
    cases = {
        "<!-- draft note": "an HTML comment (<!--) opened at line 5",
        "<script>\nvar x = 1;": "a <script> element opened at line 5",
        "<PRE>": "a <pre> element opened at line 5",
        "<?php echo 1;": "a processing instruction (<?) opened at line 5",
        "<![CDATA[ data": "a CDATA section (<![CDATA[) opened at line 5",
        "<!DOCTYPE html": "a declaration (<!) opened at line 5",
    }
    for opener, warned in cases.items():
        p = tmp_path / "doc.md"
        p.write_text(f"# A\n\nIntro paragraph text.\n\n{opener}\n\n# B\n\nBody of section B.\n")
        doc = parse_file(p, min_tokens=0)
        assert [s.heading for s in doc.sections] == ["A"] and "Body of section B." in doc.sections[0].content
        assert len(doc.warnings) == 1 and doc.warnings[0].startswith(warned), doc.warnings
        assert "1 of them heading lines, are read as raw HTML, not Markdown" in doc.warnings[0]
    for closed in ("<!-- a note -->", "<!--\nmany\nlines\n-->", "<script>var x;</script>", "<pre>\ncode\n</pre>",
                   "<div>\nnot a raw-text element, ends at a blank line", "<?php echo 1; ?>", "<!DOCTYPE html>",
                   "<pre>\ncode\n</script>"):  # (any of the four closing tags ends such a block)
        p = tmp_path / "doc.md"
        p.write_text(f"# A\n\n{closed}\n\n# B\n\ntext\n")
        doc = parse_file(p, min_tokens=0)
        assert doc.warnings == () and [s.heading for s in doc.sections] == ["A", "B"], closed
    p = tmp_path / "doc.md"
    p.write_text("# A\n\nText.\n\n```\n")  # opened on the last line: nothing after it is lost
    assert parse_file(p, min_tokens=0).warnings == ()


def test_anchors_are_githubs_for_marks_numbers_and_headings_in_quotes() -> None:
    """Found by review: Python's \\w drops combining marks (a Hindi heading's vowel signs: 'हनद-भष' for GitHub's
    'हिन्दी-भाषा') and keeps other numbers ('x²-and-½' for 'x-and-'); and a heading inside a quote or list, which
    GitHub renders and numbers, was not counted, so the top-level repeat took the quoted one's anchor."""
    slug = GithubSlugger()
    assert [slug.slug(t) for t in ("हिन्दी भाषा", "ภาษาไทย ที่นี่", "x² and ½", "max_connections")] == [
        "हिन्दी-भाषा", "ภาษาไทย-ที่นี่", "x-and-", "max_connections"]
    _, blocks, _ = parse_markdown("> ## Note\n\n## Note\n\ntext\n\n- ## Install\n\n## Install\n\nmore\n")
    assert [b.anchor for b in blocks if isinstance(b, HeadingBlock)] == ["note-1", "install-1"]


def test_front_matter_with_a_mapping_as_a_key_is_read_as_markdown_not_a_crash(tmp_path: Path) -> None:
    """Hugging Face's model-card templates open with `{{ card_data }}`: a mapping as a YAML key had raised a bare
    TypeError (unhashable), which ended a whole ingest run; it is invalid front matter, read as the others are."""
    for front in ("{{ card_data }}", "? [a, b]\n: c"):
        page = tmp_path / "card.md"
        page.write_text(f"---\n{front}\n---\n# Model card\n\nThis model embeds sentences.\n")
        doc = parse_file(page, min_tokens=0)
        text = " ".join(s.heading + " " + s.content for s in doc.sections)
        assert "This model embeds sentences." in text and doc.metadata == {}


def test_invalid_yaml_front_matter_keeps_its_lists_and_lines() -> None:
    """Found by review: when the YAML was invalid (an unquoted colon in a title), the fallback skipped every
    indented or `- ` line: `tags:` and its list became an empty string (a metadata filter on the tags then
    missed the document) and bullet lines under a key with a value were in no section. It now keeps a list
    under a key with no value and a value's continuation lines; a block holding anything else is Markdown."""
    assert parse_front_matter("title: Postgres: the good parts\ntags:\n  - sql\n  - tuning\n") == {
        "title": "Postgres: the good parts", "tags": ["sql", "tuning"]}
    assert parse_front_matter("title: a: b\ntags:\n- sql\n- 'tuning'\nsummary: a long\n  folded text\n") == {
        "title": "a: b", "tags": ["sql", "tuning"], "summary": "a long folded text"}
    for raw in ("Status: draft\n- Version 2.0 drops PostgreSQL 12.\n",  # a list under a key with a value
                "title: x: y\n  bad: [",  # an indented mapping under a value
                "title: a: b\nauthors:\n  - name: A\n    email: b\n",  # a mapping in a list
                "- a: b\ntitle: c\n"):  # a list with no key
        assert parse_front_matter(raw) is None, raw
    title, blocks, meta = parse_markdown("---\nStatus: draft\n- Version 2.0 drops PostgreSQL 12.\n"
                                         "- The CLI gains a --json flag.\n---\n\n# Release notes\n\nSee below.\n")
    text = " ".join(b.text for b in blocks)
    assert meta == {} and title == "Release notes"
    for words in ("Status: draft", "Version 2.0 drops PostgreSQL 12.", "The CLI gains a --json flag.", "See below."):
        assert words in text, (words, text)


def test_valid_yaml_front_matter_with_aliases_is_read_as_yaml() -> None:
    """A review of the fallback's fix: all front matter with an alias went to the key: value lines (a guard
    against alias bombs), which now hold no list or mapping under an anchored key, so `tags: &t` then `- sql`
    lost the title and every key (the block became Markdown). Aliases expanding to a bounded size are YAML."""
    assert parse_front_matter("title: Guide\ntags: &t\n  - sql\nkeywords: *t\n") == {
        "title": "Guide", "tags": ["sql"], "keywords": ["sql"]}
    title, _, meta = parse_markdown("---\ntitle: My Guide\ndefaults: &d\n  lang: en\npage:\n  <<: *d\n"
                                    "  kind: guide\n---\n\n# Intro\n\nBody text.\n")
    assert title == "My Guide" and meta == {"title": "My Guide", "defaults": {"lang": "en"},
                                            "page": {"lang": "en", "kind": "guide"}}
    assert parse_front_matter("a: &a [x, y]\nb: &b [*a, *a]\nc: [*b, *b]\n") == {
        "a": ["x", "y"], "b": [["x", "y"]] * 2, "c": [[["x", "y"]] * 2] * 2}
    # a cycle expands without end: read as lines (here a flow list on one line, kept as its text)
    assert parse_front_matter("a: &a [1, *a]\n") == {"a": "&a [1, *a]"}
    # a review of the fix: one long string aliased 8,000 times stayed under a node count of 10,000, and a 10 KB
    # file became 84 MB of metadata; the size counts each scalar's characters, so it is read as lines
    long = "x" * 10_000
    bomb = "\n".join(["title: Guide", f'a: &a "{long}"', "b: &b [" + ",".join(["*a"] * 20) + "]",
                      "c: &c [" + ",".join(["*b"] * 20) + "]", "d: [" + ",".join(["*c"] * 20) + "]"])
    meta = parse_front_matter(bomb)
    assert meta is not None and meta["title"] == "Guide" and len(str(meta)) < 2 * len(bomb)
    # ... and each node its JSON (a review of that: 90 aliases of 1,000 nulls, 4 KB, loaded as 546 KB of JSON)
    nulls = "a: &a\n" + "\n".join(["  -"] * 1000) + "\nb: [" + ",".join(["*a"] * 90) + "]\n"
    meta = parse_front_matter(nulls)
    assert meta is None or len(json.dumps(meta)) < 100_000
    # ... and a scalar's characters as JSON escapes them (a review: 1,000 control characters or emoji aliased 95
    # times counted 96,602 and gave 576 KB / 1.15 MB of JSON)
    for ch in ("\\x01", "\\U0001F600"):
        escaped = f'a: &a "{ch * 1000}"\nb: [' + ",".join(["*a"] * 95) + "]\n"
        meta = parse_front_matter(escaped)
        assert meta is None or len(json.dumps(meta)) < 150_000, ch
    # the same long string aliased a few times is YAML
    assert parse_front_matter(f'a: &a "{long}"\nb: [*a, *a]\n') == {"a": long, "b": [long, long]}


def test_markdown_as_export_tools_write_it() -> None:
    """A review of Markdown from Google Docs, Pandoc, Docusaurus, Obsidian and Confluence converters."""
    import base64

    # an embedded image's base64 (a link definition, or inline) had made dozens of sections that outranked answers
    blob = base64.b64encode(bytes(range(256)) * 24).decode()
    for md in (f"# Setup\n\nOpen the VPN client.\n\n![][image1]\n\n[image1]: <data:image/png;base64,{blob}>\n",
               f"# Setup\n\nOpen the VPN client. ![shot](data:image/png;base64,{blob}) Then log in.\n"):
        (only,) = sections_of(md)
        assert "data:image/png;base64,…" in only.content and blob[:64] not in only.content
    # an attribute block is not the heading's text; its #id is the anchor
    title, blocks, _ = parse_markdown("# **Section 3** {#h.4f1x9k2}\n\nx\n\n## Deletion requests {#gdpr-erasure .x}\n\n"
                                      "y\n\n## Appendix {-}\n\nz\n\n## Scope ^scope1\n\nw\n\n## Set {a} of rules\n\nv\n")
    assert title == "Section 3"
    assert [(b.text, b.anchor) for b in blocks if isinstance(b, HeadingBlock)] == [
        ("Section 3", "h.4f1x9k2"), ("Deletion requests", "gdpr-erasure"), ("Appendix", "appendix"),
        ("Scope", "scope"), ("Set {a} of rules", "set-a-of-rules")]
    # an HTML block that opens with a heading starts a section; the rest of the block is its content
    _, blocks, _ = parse_markdown("## On-call\n\nText.\n\n<h2 id=\"OC-Handover\">Hand<b>over</b></h2>\n"
                                  "<p>Write a note.</p>\n\n<h1 align=\"center\"><img src=logo.png></h1>\n")
    assert blocks[2] == HeadingBlock(2, "Handover", "OC-Handover", '<h2 id="OC-Handover">Hand<b>over</b></h2>')
    assert blocks[3] == ContentBlock("other", "Write a note.")  # the text the rest of the block shows
    assert len(blocks) == 4  # <h1 align="center"><img src=logo.png></h1> shows no text: not stored
    # a grid table is a table: cut by lines, each part under its header
    rows = "".join(f"| Control {i:<3} | Requirement number {i} is long enough to count |\n"
                   f"+-------------+-----------------------------------------------+\n" for i in range(30))
    grid = ("# Controls\n\n+-------------+-----------------------------------------------+\n"
            "| Control     | Requirement                                   |\n"
            "+=============+===============================================+\n" + rows)
    parts = sections_of(grid)
    assert len(parts) > 1 and all(p.content.startswith("+---") and "| Control     | Requirement" in p.content
                                  for p in parts)


def test_review_of_the_markdown_export_fixes() -> None:
    """The review of the fixes above: words after a payload had been taken with it; a code span, an escape or
    a power at a heading's end had been read as an attribute block or an Obsidian id."""
    payload = "A" * 80
    _, blocks, _ = parse_markdown(f"# Logo\n\nThe logo is data:image/png;base64,{payload}\nInstall it with pip\n\n"
                                  "A URI like data:image/gif;base64,R0lGODlhAQABAAAAACw and the rest follow\n")
    assert [b.text for b in blocks[1:]] == ["The logo is data:image/png;base64,…\nInstall it with pip",
                                            "A URI like data:image/gif;base64,R0lGODlhAQABAAAAACw and the rest follow"]
    _, blocks, _ = parse_markdown("## Heading IDs `{#custom-id}`\n\n## Escaped \\{#notid}\n\n## Power ^2\n\n"
                                  "Setext {#sx}\n---\n\n## Closed {#cl} ##\n")
    assert [(b.text, b.anchor) for b in blocks if isinstance(b, HeadingBlock)] == [
        ("Heading IDs {#custom-id}", "heading-ids-custom-id"), ("Escaped {#notid}", "escaped-notid"),
        ("Power ^2", "power-2"), ("Setext", "sx"), ("Closed", "cl")]


def test_toml_front_matter_is_metadata_and_title() -> None:
    """Hugo and Zola write front matter in TOML between `+++` lines: it had been read as Markdown, its keys the
    first section's text and its title not the document's. Line numbers after it do not move (a heading's
    source lines are kept); a `+++` block that is no TOML, or one never closed, stays Markdown."""
    text = ('+++\ntitle = "Expense policy"\ndate = 2024-03-01\ndraft = false\ntags = ["finance", "hr"]\n'
            '[params]\nowner = "finance"\n+++\n\nIntro text.\n\n## Travel {#travel}\n\nBook economy class.\n')
    title, blocks, metadata = parse_markdown(text)
    assert title == "Expense policy"
    assert metadata == {"title": "Expense policy", "date": "2024-03-01", "draft": False, "tags": ["finance", "hr"],
                        "params": {"owner": "finance"}}
    assert blocks == [ContentBlock("paragraph", "Intro text."),
                      HeadingBlock(2, "Travel", "travel", "## Travel {#travel}"),
                      ContentBlock("paragraph", "Book economy class.")]
    assert json.dumps(metadata)  # stored in a JSON column
    # a title that is a float is no title (the first h1 is: 1.10 would read 1.1); \r\n line ends; no TOML, or not
    # closed: Markdown
    assert parse_markdown("+++\r\ntitle = 1.5\r\n+++\r\n# Animal Farm\r\n")[:1] == ("Animal Farm",)
    assert parse_markdown("+++\ntitle = 1984\n+++\n# Animal Farm\n")[:1] == ("1984",)  # an integer, as written
    # a TOML string holding a code fence is no unclosed fence (a review: the warning had read it as Markdown)
    assert truncation_warning('+++\nsummary = """\n```sh\nls\n"""\n+++\n# T\n') is None
    assert truncation_warning("# T\n\n```sh\nls\n") is not None
    # not TOML, not closed, an integer of 5,000 digits, arrays 1,000 deep (a review: those two had failed the file)
    for text in ("+++\nnot toml at all\n+++\n\nBody.\n", "+++\ntitle = \"x\"\n\nBody.\n", "+++ plus\n+++\nBody.\n",
                 "+++\nn = " + "9" * 5000 + "\n+++\nBody.\n", "+++\na = " + "[" * 1000 + "]" * 1000 + "\n+++\nBody.\n"):
        title, blocks, metadata = parse_markdown(text)
        assert metadata == {} and "+++" in "\n".join(b.text for b in blocks), text


def test_an_mdx_page_is_markdown_without_its_imports_and_component_tags() -> None:
    """A Docusaurus page (.mdx) had been skipped in a folder, or read as one plain text: its imports, exports,
    {/* comments */} and <TabItem value="x"> lines are MDX's syntax, not text (a tab's label is); code keeps
    them, and HTML and inline components stay as CommonMark keeps them."""
    doc = parse_file(Path(__file__).parent / "data" / "parsing" / "docusaurus_install.mdx", min_tokens=0)
    assert (doc.title, doc.format, doc.metadata) == ("Installing the client", "markdown",
                                                     {"title": "Installing the client", "sidebar_position": 2})
    (section,) = doc.sections
    assert section.heading_path == ("Install",)
    assert section.content == ("  Debian\n\nRun the installer with apt.\n\n```bash\nimport this is code, kept\n```\n\n"
                               "  macOS\n\nUse <Highlight>brew</Highlight> instead.\n\n:::tip\nRestart the shell afterwards.\n"
                               ":::\n\n<details>\n<summary>Proxy</summary>\nSet HTTPS_PROXY first.\n</details>")
    # a review: a paragraph with text between two comments keeps it; a tab's label and a card's title are shown
    # (the tag lines become them); Docusaurus' explicit heading id {/* #id */} is the heading's anchor
    _, blocks, _ = parse_markdown("## Requirements {/* #reqs */}\n\n{/* BEGIN */}\nGenerated text.\n{/* END */}\n\n"
                                  "{/* only a comment */}\n\n<Tabs>\n<TabItem value='win' label=\"Windows\">\n\n"
                                  "Run setup.\n\n</TabItem>\n<Card title=\"Quickstart\" href=\"/q\" />\n</Tabs>\n",
                                  mdx=True)
    assert blocks[0] == HeadingBlock(2, "Requirements", "reqs", "## Requirements {#reqs}")
    assert [b.text for b in blocks[1:]] == ["{/* BEGIN */}\nGenerated text.\n{/* END */}", "Windows", "Run setup.",
                                            "Quickstart"]
    # a tag line keeps its indentation (in a list item it stays in the item) and a label that would start a
    # block is escaped (a third review)
    listed = parse_markdown("1. Step\n\n   <Tabs>\n   <TabItem label=\"Linux\">\n\n   Run it.\n\n   </TabItem>\n"
                            "   </Tabs>\n2. Next\n\n<TabItem label=\"# Foo\">\n<TabItem label=\"1. first\">\n",
                            mdx=True)[1]
    assert [(b.kind, b.text) for b in listed] == [("list", "1. Step\n\n\n   Linux\n\n   Run it.\n\n\n\n2. Next"),
                                                  ("paragraph", "\\# Foo\n1\\. first")]
    # the same text as .md is CommonMark: the imports are a paragraph, as before
    assert parse_markdown("import A from 'a';\n\n# T\n")[1][0] == ContentBlock("paragraph", "import A from 'a';")
    assert parse_markdown("import A from 'a';\n\n# T\n", mdx=True)[1] == [HeadingBlock(1, "T", "t", "# T")]


def test_an_html_block_of_comments_alone_is_not_text() -> None:
    """Found by review: `<!-- markdownlint-disable -->`, a licence header or a TODO in a comment was stored,
    embedded and searched as its section's text. A raw HTML block of comments alone is dropped; one with anything
    else (an element, text after `--!>`, which ends a comment in browsers) is the text it shows (SECTIONING 23);
    code, a comment never closed (warned), MDX and a file of comments alone stay as they were."""
    from onetrip.parse_markdown import only_comments

    md = ("<!-- markdownlint-disable MD013 -->\n# Setup\n\n<!--\nLicensed under the Apache License\n-->\n\n"
          "Install it.\n\n<!-- TODO: screenshots --><div>Shown</div>\n<!-->\n<!---->\n\nSee <!-- inline --> this."
          "\n\n```html\n<!-- code keeps it -->\n```\n\n<!-- a --!> Visible text <!-- b -->\n")
    title, blocks, _ = parse_markdown(md)
    assert title == "Setup"
    assert [(type(b).__name__, getattr(b, "kind", None), b.text) for b in blocks] == [
        ("HeadingBlock", None, "Setup"), ("ContentBlock", "paragraph", "Install it."),
        ("ContentBlock", "other", "Shown"),
        ("ContentBlock", "paragraph", "See this."),
        ("ContentBlock", "code", "```html\n<!-- code keeps it -->\n```"),
        ("ContentBlock", "other", "Visible text")]
    never_closed = "# A\n\nText.\n\n<!-- cut short\n\n## B\n"
    assert parse_markdown(never_closed)[1][-1].text == "<!-- cut short\n\n## B"
    assert truncation_warning(never_closed) is not None
    assert parse_markdown("<!-- only -->\n\n<!--\nand another\n-->\n")[1] == [
        ContentBlock("other", "<!-- only -->"), ContentBlock("other", "<!--\nand another\n-->")]
    assert parse_markdown("# T\n\n<!-- x -->\n\nText.\n", mdx=True)[1][1].text == "<!-- x -->"
    assert [only_comments(h) for h in ("<!---->", "<!--->", "<!-- a --!>", "<!-- a --> b", "<!-- x", "")] == [
        True, True, True, False, False, True]
    assert not only_comments("<!--" * 100_000)  # one pass (a pattern had taken 221 s on this; not timed here)
    assert only_comments("<!--a-->" * 40_000 + "<!--b--!>")  # one search per comment (two had been quadratic)
    # headings without text beside the comments: the file is stored as before, not refused
    assert [type(b).__name__ for b in parse_markdown("#\n\n<!-- licence -->\n")[1]] == ["HeadingBlock", "ContentBlock"]


def test_inline_html_comments_are_not_text() -> None:
    """A comment Markdown reads inline (a paragraph's, a list item's, a table cell's) is dropped with one of the
    spaces around it (SECTIONING 18). A block where any `<!--` is not such a comment (a code span, an escape, a
    comment across a quote's line prefixes, an HTML block's) stays as written, and so does MDX."""
    md = ("# T\n\nSee <!-- inline --> this.\n\n- a <!-- x --> b\n- c<!--y-->\n\n| a | b <!-- c --> |\n|---|---|\n"
          "| 1 | 2 |\n\nx <!---> y <!--> z <!-- two\nlines --> w\n")
    assert [b.text for b in parse_markdown(md)[1]] == [
        "T", "See this.", "- a b\n- c", "| a | b |\n|---|---|\n| 1 | 2 |", "x y z w"]
    kept = ("`<!-- code -->` and <!-- c --> x", "\\<!-- escaped --> and <!-- c --> x", "> q <!-- z\n> w --> r")
    for text in kept:
        assert parse_markdown(f"# T\n\n{text}\n")[1][1].text == text
    # an HTML block's (SECTIONING 23: the text it shows)
    assert parse_markdown("# T\n\n<!-- c --> an HTML block's text\n")[1][1].text == "an HTML block's text"
    assert parse_markdown("# T\n\nSee <!-- inline --> this.\n", mdx=True)[1][1].text == "See <!-- inline --> this."
    # (review) a comment a browser ends at --!> shows the rest; a <textarea> shows the comment in it
    for text in ("Before <!-- note --!> shown --> after.", "Text <textarea><!-- shown --></textarea> x"):
        assert parse_markdown(f"# T\n\n{text}\n")[1][1].text == text


def test_link_definitions_stay_only_where_their_section_references_them() -> None:
    """Found by review: lines no block claims (link reference definitions) had been kept as text wherever they
    stood: a Node.js API page's hundreds of them were its last section's text, cut into parts of links alone,
    and one after a comment-only HTML block kept the comment. A block of definitions keeps those its own
    section's text references (full, collapsed or shortcut; case and spacing aside), titles on their next line
    with them; the rest go, unless the file holds nothing else (SECTIONING 20)."""
    md = ("# A\n\nSee [the guide][g] and [Other  thing].\n\n[g]: http://g\n[other thing]: http://o\n  \"Title\"\n"
          "[unused]: http://u\n\n## B\n\nMore [x][].\n\n<!-- keep in sync -->\n\n[X]: http://x\n[g2]: http://g2\n")
    assert [b.text for b in parse_markdown(md)[1]] == [
        "A", "See [the guide][g] and [Other  thing].", "[g]: http://g\n[other thing]: http://o\n  \"Title\"",
        "B", "More [x][].", "[X]: http://x"]
    # a definition in another section than its reference is not moved; an indented one is code, kept
    assert [b.text for b in parse_markdown("[a]: http://a\n\n# T\n\nUses [a].\n\n    [c]: x\n")[1]] == [
        "T", "Uses [a].", "    [c]: x"]
    assert [b.text for b in parse_markdown("# T\n\n[only]: http://o\n")[1]] == ["T", "[only]: http://o"]
    # (second review) a reference in the heading keeps its definition; labels fold as markdown-it folds them
    # ([ı] is [I]); a label over two lines is kept
    assert [b.text for b in parse_markdown("# [Docs][d]\n\nSee [I].\n\n[d]: /docs\n[ı]: /i\n[x]: /x\n"
                                           "[Foo\nbar]: /url\n")[1]] == [
        "Docs", "See [I].", "[d]: /docs\n[ı]: /i\n[Foo\nbar]: /url"]
    # a footnote CommonMark reads as a definition ([^1]: a URL or one word) is text wherever it is (review)
    assert parse_markdown("# A\n\nSee.[^1]\n\n# R\n\nMore.\n\n[^1]: https://arxiv.org/abs/1706\n")[1][-1].text == (
        "[^1]: https://arxiv.org/abs/1706")


def test_a_raw_html_block_is_the_text_it_shows() -> None:
    """Found by review: a README's raw HTML was stored as markup: its centred logo (a <picture>'s srcset URLs,
    250 tokens of the opening section), <div align="center"> and </details> lines, an HTML table as <tr>/<td>
    lines, cut mid-cell when split. A raw HTML block is now what a browser shows of it (parse_html's reading:
    a table a row a line, header first; a <pre> keeps its indentation; scripts, comments and controls go), and
    one that shows nothing is dropped unless the file has nothing else; one never closed stays as written."""
    md = ('<div align="center">\n  <picture><source srcset="a.png 1x, b.png 2x"><img src="logo.png" alt="Logo">'
          "</picture>\n  <h3>A fast engine</h3>\n</div>\n\n# Title\n\n<details>\n<summary>See more</summary>\n\n"
          "Hidden *markdown*.\n\n</details>\n\n<table>\n<tr><th>Name</th><th>Value</th></tr>\n<tr><td>a</td><td>"
          "Indicates that the\nconnection was reset.</td></tr>\n</table>\n\n<script>alert(1)</script>\n\n"
          "<pre>\n  code  kept\n</pre>\n\n<textarea>\n<!-- shown -->\n</textarea>\n")
    assert [(type(b).__name__, getattr(b, "kind", None), b.text, getattr(b, "header_lines", None))
            for b in parse_markdown(md)[1]] == [
        ("ContentBlock", "other", "A fast engine", 0), ("HeadingBlock", None, "Title", None),
        ("ContentBlock", "other", "See more", 0), ("ContentBlock", "paragraph", "Hidden *markdown*.", 0),
        ("ContentBlock", "table", "Name | Value\na | Indicates that the connection was reset.", 1),
        ("ContentBlock", "code", "  code  kept", 0), ("ContentBlock", "other", "<!-- shown -->", 0)]
    assert [b.text for b in parse_markdown('<p align="center"><img src="logo.png"></p>\n')[1]] == [
        '<p align="center"><img src="logo.png"></p>']  # nothing else in the file: stored as before
    assert parse_markdown("# T\n\n<div>x</div>\n", mdx=True)[1][1].text == "<div>x</div>"  # MDX: JSX, as before
