"""Where sections are made: parser blocks in, a valid section tree out.

Parsers (`parse_markdown`, `parse_html`, plain text) emit a flat list of blocks in
document order; `build_sections` turns it into `Section`s. Rules, in order:

1. Tree. A heading's parent is the nearest earlier heading with a lower level
   number (h1 -> h3: the h3's parent is the h1). Text before the first heading is
   a preface (level 0, heading "", path ()) whose parent is None; it is never a
   parent itself. A heading with no text, no content and no subsection that is
   kept (an untitled, empty HTML container) makes no section.
2. Merge. A section whose content has fewer than `min_tokens` tokens is merged
   forward into the next section only when that next section has the same parent
   (i.e. it is a sibling, so the tiny section has no children). Its heading line
   and content are prepended to the next section's content, which then also
   starts with its own heading line (so the text reads in document order, each
   part under its heading), and recorded in `metadata["merged"]`. The section
   is then labelled with every part's heading in order ("Synopsis; Description",
   see `merged_heading`), in its own heading path and in its subtree's. Tiny sections
   followed by their own children (heading-only parents), and tiny last
   children, are kept as they are. Because
   only childless sections disappear, no parent_section_id can dangle.
   Merging runs back to front so runs of tiny siblings fold into one section.
3. Split. Content over `max_tokens` (given the document's title: less what the model
   reads before it, `embedding_text`) is cut at block boundaries first, then
   paragraphs, lines (lists, code), sentences, word groups, words and, last,
   characters; pieces are packed greedily into parts. A block that fits is never
   cut, so a table or code block that fits stays whole in one part. An oversized
   table is cut by rows, repeating its header rows in every part. Parts share the
   parent, level, heading and heading path; children point at the first part.
4. Ids. sequence_index is contiguous from 0. section_id is the anchor (else
   f"s{sequence_index}"), cut to MAX_SECTION_ID characters (a key, not a text); later parts
   get f"{id}~{n}" (n = 2, 3, ...), and a colliding anchor gets the first free f"{anchor}~{n}".

Merging hides the tiny section's anchor from `Section.anchor`; `section_anchors`
lists every anchor whose text a section holds (pass min_tokens=0 to never merge).

Counting is linear: each block is counted once (blocks far over budget in
characters are never counted whole, only their pieces), pieces are counted in
batches, and with the built-in counter part counts are sums (BERT counts add
across whitespace joins). Other counters get each multi-piece part recounted; a
counter that is not additive may then exceed max_tokens slightly.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Union

from onetrip.errors import InputDocumentError
from onetrip.tokens import DEFAULT_MAX_TOKENS, SPECIAL_TOKENS, TokenCounter, count_tokens, count_tokens_batch

DEFAULT_MIN_TOKENS = 20

SECTIONING = 28
"""How files are cut into sections (the parsers and `build_sections`), as a number that
`ingest_paths` stores with each document (metadata key ``onetrip_sectioning``). Raised whenever
the same file would be cut or labelled differently, so that the next ingest re-cuts the
documents an older onetrip stored without being asked (``--force`` had been the only way):
1, to 2026-12-05 (never stored): a merged section kept its last part's heading;
2: it is labelled with every part's heading (`merged_heading`);
3: a heading lxml nested in a paragraph left open (``<p>x <b>y<h2>H``) is a heading, not the paragraph's text;
4: (2026-12-05, found by review) HTML table rows after an unclosed element in a cell are read once; a
container's title may sit in a <header> or after a <nav>, an untitled one's headings nest; text after a
nested HTML5 <section> is its parent's; a heading's permalink glyph (¶ § #) is dropped; CJK text is cut
after 。！？; a Markdown file opening with a `---` rule keeps what follows it; front matter keys as written;
a block of many characters per token (deep indentation) that fits is no longer cut; a cell-less table
in a wrapper in a table is read once;
5: (2026-12-06, found by review) heading anchors keep combining marks (Hindi, Thai) and drop other
numbers (² ½), as GitHub's; a Markdown heading inside a quote or list counts for the -n of repeats; an
HTML container's anchor may be an <a name> in its title (DocBook), an HTML5 <section id> is its first
heading's anchor; text after a nested <section> under a <header>-wrapped heading is its own; role="navigation"
is dropped as <nav> is;
6: (2026-12-06, found by review) a section's content is cut to fit the model together with the title and
heading path put before it (`embedding_text`), whose last words had not been embedded; a `---` block with no
`key: value` line, or YAML that is no mapping, is Markdown, not front matter; a Markdown anchor keeps each
space of its heading as a '-', none collapsed or stripped, as GitHub's; HTML: Texinfo's nav bars and tables of
contents, page footers, Bootstrap navbars and aria-hidden elements are dropped, Texinfo's subsection divs are
containers, an outermost container nests under a page heading outside containers (AsciiDoc), an empty anchor
right before a heading is its anchor, any symbol link within the page is a permalink, a heading end tag of
another level closes the open heading (added the same day as the rest of 6: the only HTML stored under 6
before it, the PostgreSQL manual, has no such tag);
7: (2026-12-06, found by review) HTML: an inline SVG's or MathML's <title> is not the page's title; a table's
captions (also those lxml leaves below a <tbody> or in a wrapper) are read once, a table inside them too; the
loose text of a row lxml nests in a cell, and a table right inside such a row, are kept; so is what an unclosed
<colgroup> holds; an empty heading outside containers with no anchor (a logo's <h1><img>) makes no section, one
with an anchor ends the headings of its level and below, so no container nests under it (these last three came
later the same day; the only HTML stored under 7 before them, the PostgreSQL manual, is cut identically). Metadata keys of the ``onetrip_`` prefix (front matter,
<meta>) are dropped with a warning (the PostgreSQL manual is cut as under 6);
8: (2026-12-06, found by review) front matter that is invalid YAML keeps a list under a key with no value
(``tags:`` then ``- sql`` lines, an empty string before) and a value's indented continuation lines; a block
holding any other line the fallback cannot hold (a list under a key with a value, an indented mapping) is
Markdown, its words kept (they had been dropped); valid YAML with aliases is read as YAML when they expand
to at most `parse_markdown.MAX_FRONT_MATTER_SIZE` (nodes plus scalar characters) (it had been read as those lines). HTML is cut as
under 7;
9: (2026-12-06, found by review) HTML: a <dialog> without `open`, and a dialog or modal marked `hidden`, are
dropped (any other hidden element, an accordion's answer, is kept); a heading outside
containers after a top-level container it ends is no deeper than that container (it had been its
subsection). The PostgreSQL manual is cut as under 8; Markdown too;
10: (2026-12-06, found by review) a Markdown front matter title that YAML reads as a number, a date or true/false
(``title: 1984``, ``title: 1.10``) is the document's title as written (it had been ignored, the first h1 or the
file name taken). HTML is cut as under 9;
11: (2026-12-07) a stored qualified name's parts that hold an underscore are technical terms too
(``pg_stat_activity.wait_event`` gives ``pg_stat_activity`` and ``wait_event``: `onetrip.store.technical_terms`),
so the stored rows' ``terms`` differ; files are cut as under 10 (the stored vectors are reused);
12: (2026-12-07, found by review) HTML: a <dt> term and its definition are one line apart, not a blank line
(the preferred cut: 705 of the PostgreSQL manual's part boundaries had left a parameter's name at the end of
one part, its definition in the next); a DocBook title paragraph (``Table 9.1. ...``) that would end a full
part starts the next, with what it titles, when both fit there. Markdown is cut as under 11;
13: (2026-12-07, found by review) an identifier after leading underscores is a technical term (``_PG_init`` gives
``pg_init``; Markdown's emphasis ``_shared_buffers_`` gives ``shared_buffers``: `onetrip.store.technical_terms`),
so the stored rows' ``terms`` differ; files are cut as under 12 (the stored vectors are reused);
14: (2026-12-07, found by review) HTML: text after ``</body>`` or after a top-level container, untitled
containers, formulas, permalinks, a byte-order mark, office exports (numbered headings, tables of contents,
hidden text, footnote marks); Markdown: ``data:`` payloads, heading attributes, HTML-block headings, grid tables;
reStructuredText is cut by its titles. The PostgreSQL manual is cut as under 13;
15: (2026-12-07, reviewed) HTML: a note written after the last section (a footnote, an endnote, a reviewer's
comment, linked to its mark and back) ends the section of its mark (it had gone into the last section or a
repeated page heading); a <nav> left open (the last, when no text follows it) keeps the text from its first
<main>, <article> or <h1>, or first heading, paragraph or table after a link outside a list (the rest of the
page had been dropped as navigation); breadcrumb trails and Confluence's page metadata are dropped. Markdown:
TOML front matter between `+++` lines (Hugo, Zola) is metadata and title, not text; an .mdx file is Markdown
without MDX's imports, exports, component tag lines and comments. 5 of the PostgreSQL manual's 1,167 pages are
cut differently (their footnotes);
16: (2026-12-07, found by review) a heading over MAX_HEADING_CHARS characters is cut at a word with " …" in the
heading, the heading path and the anchor made from it, and its whole text is its section's first paragraph; a
title as long is cut too (every part of a section carries them: a 400 KB Markdown file with a 200 KB heading had
taken 194 s and 5.8 GB to ingest); reStructuredText title markup is searched for within bounded lengths (an
opener never closed had been searched for to the line's end). The PostgreSQL manual is cut as under 15 (its
longest heading: 68 characters), and so are the 8,119 .rst files on this machine;
17: (2026-12-07, found by review) Markdown: a raw HTML block of HTML comments alone (``<!-- markdownlint-disable
-->``, ``<!-- TODO -->``) is no text (`parse_markdown.only_comments`); a file of nothing else is stored as before.
MDX, HTML and reStructuredText are cut as under 16;
18: (2026-12-07) Markdown: an HTML comment Markdown reads inline in a paragraph, list, quote or table (``See <!--
TODO --> this.``) is no text either (`parse_markdown._without_inline_comments`; left as written when any
``<!--`` of the block is not such a comment: in a code span, escaped, split across a quote's line prefixes). 6
of the 651 Markdown files on this machine hold one (16 comments, in model card templates). MDX, HTML
and reStructuredText are cut as under 17;
19: (2026-12-07, found by review) reStructuredText: a comment (``.. free text``: not a directive, target,
footnote or substitution) and the indented text it takes are no text; a file of comments alone is stored as
before. Markdown, MDX and HTML are cut as under 18;
20: (2026-12-07, found by review) Markdown and MDX: link reference definitions (``[label]: url``, lines no
block claims) stay only where their own section's text references them (`parse_markdown._referenced_definitions`;
a file of nothing else is stored as before): a Node.js API page's hundreds of them had been its last section's
text. 131 of the 652 Markdown files on this machine are cut differently, each difference definitions dropped.
HTML and reStructuredText are cut as under 19;
21: (2026-12-07, found by review) HTML: ARIA menus and toolbars, skip links ("Skip to main content"), a
permalink glyph's link outside its heading, copy-to-clipboard buttons, mdBook's keyboard-shortcut popup and
rustdoc's top bar, toolbar, breadcrumbs and "Expand description" label are not text; what stands before the
heading that opens an HTML5 <section> or <article> (as its child) is that section's, read after its heading
(rustdoc's "since" versions had been the previous item's). Of 648 pages checked (every non-Rust HTML page on
this machine, 250 Rust ones), 310 are cut differently, all rustdoc, mdBook or Node.js pages; the PostgreSQL
manual's 1,167 pages are cut as under 20. Markdown and reStructuredText are cut as under 20;
22: (2026-12-07, found by review) HTML: Node.js API pages' pickers (div#gtoc) and a table of contents by any
spelling of its id (``toc``, ``table_of_contents``: npm's) are not text, nor is a button whose class names a copy
(Node.js' "copy"); a dropped <section> inside a section no longer makes what follows it a repeat of that
section's heading; a <pre>'s second block of code (after one of several lines or highlighted as a block:
Node.js' ES-module and CommonJS versions of a sample) starts on a line of its own. Of the 648 pages above, 404
are cut differently than under 20, all rustdoc, mdBook, Node.js or npm ones; the PostgreSQL manual as under 20;
23: (2026-12-07, found by review) Markdown: a raw HTML block is the text a browser shows of it
(`parse_html.fragment_text`: markup, comments and scripts gone, a table a row a line, a <pre> its lines), and one
that shows nothing (a centred logo, ``</details>``) is dropped unless the file has nothing else; one never closed
stays as written (warned), and MDX as before. 88 of the 652 Markdown files on this machine are cut differently.
HTML and reStructuredText are cut as under 22;
24: (2026-12-07, from the review of 18-22) HTML: only a short lead (100 characters) before the only heading an
HTML5 section holds as a child goes after it (a section's intro before its first of several subheadings had gone
under that subheading); a skip link is dropped only when it is all of its parent's text, a permalink glyph's link
only when it links to the section it stands in, a button by a label that starts with "Copy" or names the
clipboard, a menu or toolbar only when it holds no heading. Markdown: a footnote CommonMark reads as a link
definition (``[^1]: https://...``) is text wherever it stands; an inline comment a browser ends sooner (at
``--!>``) or a <textarea> shows stays. The pages and files above are cut as under 23 otherwise;
25: (2026-12-07, from the review of 22-23) HTML: an element whose id spells "toc" or "table of contents"
otherwise than ``TOC`` / ``Table of Contents1`` is dropped only when it holds in-page links and at most one heading
besides (docutils' section#table-of-contents about toctree had been lost); two <code> blocks in a <pre> are cut
apart only with nothing between them and no space ending the first. Markdown: ``<- back`` in a raw HTML block is
text (the tags-alone test had read it as a tag). No page or file checked above is cut otherwise than under 24 but
for npm's 93 pages, whose tables of contents are dropped as under 22;
26: (2026-12-07, from the second review of 21-25) HTML: a skip link is dropped unless it stands in a sentence
(a paragraph, list item, cell or heading: WordPress's, beside its header in div#page, had been kept); a copy
button by a class that names a copy control (copy-button, btn-copy, md-clipboard; not copyright-notice or
body-copy); a short lead before a <header>/<hgroup> holding the section's heading goes after it too; a table of
contents by a loose id is one of links (to any page) with no other letters than one heading's, read within 1,000
nodes, as a menu's or toolbar's heading is looked for (larger ones are text: every nested one had been read
whole, quadratic). Markdown: definitions' labels match as markdown-it folds them, the heading's references count,
a label over two lines is kept. One npm page of the 648 checked differs from 25 (its 1,000-node contents kept);
27: (2026-12-07, from the third review) HTML: a menu or toolbar is kept only when a heading opens it (within its
first 200 nodes), so a nested one is not read again; the plain-fragment reading takes a tag only where its name
ends at a space, `/` or `>` (`<div=>` is lxml's to read). No page checked above is cut otherwise than under 26;
28: (2026-12-07) HTML: links to the source code are not text: rustdoc's "Source" beside each item (class src),
Sphinx's viewcode "[source]" and "[docs]". 218 of the 250 rustdoc pages checked are cut differently, no other page
checked above, and the PostgreSQL manual as under 27."""

BLOCK_KINDS = ("paragraph", "code", "table", "list", "quote", "other")

_CHARS_PER_TOKEN_CAP = 16
"""A text longer than this many characters per budget token is taken to be over
budget without counting it whole: it is cut first and only its pieces are counted
(real text averages 4-6 characters per word piece)."""

_CHARS_PER_TOKEN_RECHECK = 64
"""A whole block up to this many characters per budget token is counted before it is cut (code indented by
spaces runs to 18 characters per word piece and more); past it, cut unasked."""


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Section:
    """One retrievable unit: a heading's own text (or a part of it) plus its place in the tree."""

    section_id: str
    parent_section_id: str | None
    sequence_index: int
    level: int
    heading: str
    heading_path: tuple[str, ...]
    content: str
    token_count: int
    anchor: str | None
    metadata: dict = field(default_factory=dict)


@dataclass
class ParsedDocument:
    """A parsed file: its sections in document order plus document-level facts."""

    title: str
    sections: list[Section]
    metadata: dict
    format: str  # "markdown" | "html" | "rst" | "text"
    #: what parsing lost without failing (a file cut short, a fence or comment never closed), for the report
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class HeadingBlock:
    """A heading as found by a parser; `raw` is its verbatim source (used when merged)."""

    level: int
    text: str
    anchor: str | None = None
    raw: str = ""


@dataclass(frozen=True)
class ContentBlock:
    """Body text between headings; `header_lines` = table lines to repeat when split."""

    kind: str  # one of BLOCK_KINDS
    text: str
    header_lines: int = 0
    keep_with_next: bool = False  # a title of what follows (DocBook's "Table 9.1. ..."): not cut from it if both fit


Block = Union[HeadingBlock, ContentBlock]


# ------------------------------------------------------------------ token counting


class _Counter:
    """Wraps a TokenCounter with batching and knowledge of additivity."""

    def __init__(self, fn: TokenCounter) -> None:
        self.fn = fn
        builtin = fn is count_tokens
        self.additive = builtin
        self._batch: Callable[[Sequence[str]], list[int]] | None = (
            count_tokens_batch if builtin else None
        )

    def one(self, text: str) -> int:
        return self.fn(text)

    def many(self, texts: Sequence[str]) -> list[int]:
        if self._batch is not None:
            return self._batch(texts)
        return [self.fn(t) for t in texts]


# ------------------------------------------------------------------ text splitting


@dataclass(frozen=True)
class _Piece:
    text: str
    tokens: int
    joiner: str  # text that precedes this piece when it is not first in a part
    mid_word: bool = False  # a character window after the first: `_pack` never joins it to what precedes
    keep_with_next: bool = False  # ends a part only if what follows cannot join it there


_PARAGRAPH_SEP = re.compile(r"(\n(?:[ \t]*\n)+)")
_LINE_SEP = re.compile(r"(\n+)")
# a sentence ends at . ! ? before whitespace, or at Chinese/Japanese 。！？ (their text has no spaces: group 2
# may match empty, and the tokenizer splits at that punctuation, so counts still add up across the cut)
# whitespace the model's normalizer keeps as a space: Python's \s also matches \x0b \x0c \x1c-\x1f \x85, which
# it deletes as control characters, gluing the words a cut there had counted apart (found by review)
_WS = r"[^\S\x0b\x0c\x1c-\x1f\x85]"
_SENTENCE_SEP = re.compile(rf"[.!?][\"'\u201d\u2019)\]]*({_WS}+)"
                           rf"|[\u3002\uff01\uff1f][\"'\u201d\u2019)\]\u300d\u300f\uff09\u3011]*({_WS}*)")
_WORD_SEP = re.compile(rf"({_WS}+)")

_STRATEGIES: dict[str, tuple[str, ...]] = {
    "code": ("lines", "wordgroups", "words", "chars"),
    "list": ("paragraphs", "lines", "sentences", "wordgroups", "words", "chars"),
    "table": ("lines", "sentences", "wordgroups", "words", "chars"),
}
_DEFAULT_STRATEGY = ("paragraphs", "sentences", "wordgroups", "words", "chars")


def _spans(text: str, sep: re.Pattern[str]) -> list[tuple[int, int]]:
    """Non-blank stretches of `text` between separator matches (the group that matched)."""
    out: list[tuple[int, int]] = []
    pos = 0
    for m in sep.finditer(text):
        start, end = m.span(m.lastindex or 1)
        if text[pos:start].strip():
            out.append((pos, start))
        pos = end
    if text[pos:].strip():
        out.append((pos, len(text)))
    return out


def _units(text: str, how: str, max_tokens: int) -> list[tuple[str, str]]:
    """(joiner, unit) pairs; joining them reproduces `text` without its outer whitespace."""
    if how == "paragraphs":
        spans = _spans(text, _PARAGRAPH_SEP)
    elif how == "lines":
        spans = _spans(text, _LINE_SEP)
    elif how == "sentences":
        spans = _spans(text, _SENTENCE_SEP)
    elif how in ("words", "wordgroups"):
        spans = _spans(text, _WORD_SEP)
        if how == "wordgroups":
            size = max(1, max_tokens // 8)
            spans = [
                (spans[i][0], spans[min(i + size, len(spans)) - 1][1])
                for i in range(0, len(spans), size)
            ]
    else:  # pragma: no cover - guarded by _STRATEGIES
        raise ValueError(how)
    out: list[tuple[str, str]] = []
    prev_end: int | None = None
    for start, end in spans:
        joiner = "" if prev_end is None else text[prev_end:start]
        out.append((joiner, text[start:end]))
        prev_end = end
    return out


def _char_pieces(text: str, counter: _Counter, max_tokens: int) -> list[_Piece]:
    """Last resort for a giant 'word': the widest character windows that fit the budget.

    Windows join with "" (mid-word), where counts are not additive, so `_pack`
    never puts two of them in one part; they are sized to be nearly full instead.
    """
    out: list[_Piece] = []
    i, n = 0, len(text)
    while i < n:
        width = max(1, max_tokens)
        tokens = counter.one(text[i : i + width])
        if tokens <= max_tokens:  # grow while it fits
            while i + width < n and width < 64 * max_tokens:
                wider = counter.one(text[i : i + 2 * width])
                if wider > max_tokens:
                    break
                width, tokens = 2 * width, wider
        else:  # shrink until it fits
            while tokens > max_tokens and width > 1:
                width //= 2
                tokens = counter.one(text[i : i + width])
        out.append(_Piece(text[i : i + width], tokens, "", mid_word=bool(out)))
        i += width
    return out


def _pieces(
    text: str, strategies: tuple[str, ...], counter: _Counter, max_tokens: int
) -> list[_Piece]:
    """Cut `text` (known or assumed to be over budget) into pieces that each fit."""
    if not strategies or strategies[0] == "chars":
        return _char_pieces(text, counter, max_tokens)
    units = _units(text, strategies[0], max_tokens)
    if not units:
        return []
    if len(units) == 1:  # this level cannot cut it; try the next one
        return _pieces(units[0][1], strategies[1:], counter, max_tokens)
    big = _CHARS_PER_TOKEN_CAP * max_tokens
    counts = iter(counter.many([u for _, u in units if len(u) <= big]))
    out: list[_Piece] = []
    for joiner, unit in units:
        tokens = next(counts) if len(unit) <= big else None
        if tokens is not None and tokens <= max_tokens:
            out.append(_Piece(unit, tokens, joiner))
        else:
            sub = _pieces(unit, strategies[1:], counter, max_tokens)
            if sub:
                sub[0] = replace(sub[0], joiner=joiner)
            out.extend(sub)
    return out


def _table_pieces(block: ContentBlock, counter: _Counter, max_tokens: int) -> list[_Piece]:
    """Cut an oversized table by rows; every chunk starts with the header rows."""
    lines = block.text.split("\n")
    head = lines[: block.header_lines]
    header = "\n".join(head)
    header_tokens = counter.one(header) if head else 0
    if header_tokens > max_tokens // 2:  # a header that big cannot be repeated
        head, header, header_tokens = [], "", 0
    rows = [r for r in lines[len(head) :] if r.strip()]
    counts = counter.many(rows)
    budget = max_tokens - header_tokens
    out: list[_Piece] = []
    cur: list[str] = []
    cur_tokens = 0

    def flush() -> None:
        nonlocal cur, cur_tokens
        if cur:
            text = "\n".join(([header] if header else []) + cur)
            out.append(_Piece(text, header_tokens + cur_tokens, "\n"))
        cur, cur_tokens = [], 0

    for row, tokens in zip(rows, counts):
        if tokens > budget:  # a row too big for one part: cut it, its first piece under the header
            flush()
            sub = _pieces(row, _STRATEGIES["table"][1:], counter, budget)
            if sub:
                first = sub[0]
                # (packed like any piece: a part may then hold the header twice, which costs a few tokens;
                # forcing a new part instead left parts of a few tokens on 5 manual pages)
                sub[0] = (_Piece(f"{header}\n{first.text}", header_tokens + first.tokens, "\n") if header
                          else replace(first, joiner="\n"))
            out.extend(sub)
            continue
        if cur and cur_tokens + tokens > budget:
            flush()
        cur.append(row)
        cur_tokens += tokens
    flush()
    return out


def _pack(pieces: list[_Piece], max_tokens: int) -> list[list[_Piece]]:
    """Greedy: fill a part until the next piece would overflow it. A title ending the full part (a table's
    caption) starts the next one instead, with what it titles, when both fit there (found by review: 268 of
    the PostgreSQL manual's 6,124 part boundaries had cut a caption from its table or example)."""
    parts: list[list[_Piece]] = []
    cur: list[_Piece] = []
    total = 0
    for p in pieces:
        if cur and (total + p.tokens > max_tokens or p.mid_word):
            keep = 0
            while keep < len(cur) - 1 and cur[-1 - keep].keep_with_next:
                keep += 1
            carried = cur[len(cur) - keep:]
            total = sum(c.tokens for c in carried)
            # not before another title (a run of figure titles with no text between had become a part each)
            if p.mid_word or p.keep_with_next or total + p.tokens > max_tokens:
                carried, total = [], 0
            parts.append(cur[:len(cur) - len(carried)])
            cur = carried
        cur.append(p)
        total += p.tokens
    if cur:
        parts.append(cur)
    return parts


# --------------------------------------------------------------------- tree build


@dataclass(eq=False)
class _Node:
    level: int
    heading: str
    raw_heading: str
    anchor: str | None
    path: tuple[str, ...]
    parent: _Node | None
    blocks: list[ContentBlock] = field(default_factory=list)
    counts: list[int | None] = field(default_factory=list)
    merged: list[dict] = field(default_factory=list)

    def tokens(self) -> int | None:
        """Sum of block counts, None when some block was too big to count whole."""
        if any(c is None for c in self.counts):
            return None
        return sum(c for c in self.counts if c is not None)


MAX_HEADING_CHARS = 300
"""A longer heading is cut (`_shown_heading`), with its anchor: every part of a section carries its heading path
and anchor, read and counted with each part, so a 200 KB heading (a broken file's) had cost its length times its
parts."""


def _shown_heading(text: str) -> str:
    """``text`` if it is at most MAX_HEADING_CHARS long, else its start, cut at a word, and "…"."""
    if len(text) <= MAX_HEADING_CHARS:
        return text
    cut = text[:MAX_HEADING_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_HEADING_CHARS // 2 else cut).rstrip() + " …"


def _tree(blocks: Sequence[Block]) -> list[_Node]:
    nodes: list[_Node] = []
    stack: list[_Node] = []
    current: _Node | None = None
    kept: set[tuple[int, str, str | None]] = set()  # the cut headings whose whole text a section holds
    for b in blocks:
        if isinstance(b, HeadingBlock):
            level = min(max(int(b.level), 1), MAX_LEVEL)
            while stack and stack[-1].level >= level:
                stack.pop()
            parent = stack[-1] if stack else None
            heading = _shown_heading(b.text)
            path = (parent.path if parent else ()) + (heading,)
            if heading == b.text:
                current = _Node(level, heading, b.raw or b.text, b.anchor, path, parent)
            else:  # cut: so is the anchor made from it, and a merge puts the cut heading in (found by review)
                anchor = b.anchor[:MAX_HEADING_CHARS] if b.anchor else b.anchor
                current = _Node(level, heading, heading, anchor, path, parent)
                if (level, b.text, b.anchor) not in kept:  # not again where HTML resumes the section
                    kept.add((level, b.text, b.anchor))
                    current.blocks.append(ContentBlock("paragraph", b.text))  # its words, once
            nodes.append(current)
            stack.append(current)
        else:
            if not b.text.strip():
                continue
            if current is None:
                current = _Node(0, "", "", None, (), None)
                nodes.append(current)
            current.blocks.append(b)
    return nodes


def _count_blocks(nodes: list[_Node], counter: _Counter, max_tokens: int) -> None:
    """One batch for the whole document; blocks surely over budget stay uncounted (None)."""
    big = _CHARS_PER_TOKEN_CAP * max_tokens
    counts = iter(counter.many([b.text for n in nodes for b in n.blocks if len(b.text) <= big]))
    for n in nodes:
        n.counts = [next(counts) if len(b.text) <= big else None for b in n.blocks]


def _merge_tiny(nodes: list[_Node], counter: _Counter, min_tokens: int) -> list[_Node]:
    """Fold tiny childless sections into their next sibling (see module docstring).

    Back to front, so a run of tiny siblings folds into the section after it.
    What each merge puts in front is collected and joined once at the end:
    prepending it on every merge was quadratic in a run's length (40,000
    empty headings in a row, 9 s).
    """
    keep = [True] * len(nodes)
    front: dict[int, list[tuple[list[ContentBlock], list[int | None]]]] = {}  # by id(node), last merge first
    j = len(nodes) - 1  # the next node that is kept
    for i in range(len(nodes) - 2, -1, -1):
        node, nxt = nodes[i], nodes[j]
        tokens = node.tokens()
        if tokens is None or tokens >= min_tokens or nxt.parent is not node.parent:
            j = i
            continue
        head: list[ContentBlock] = []
        head_counts: list[int | None] = []
        if node.raw_heading.strip():
            head.append(ContentBlock("other", node.raw_heading.strip()))
            head_counts.append(counter.one(head[0].text))
        if not nxt.merged and nxt.raw_heading.strip():
            # its own heading line goes in too, between what was merged and its text: a FAQ of short answers
            # had read "Q1 A1 Q2 A2 A3" under the heading Q3, the last question missing from the text
            own = ContentBlock("other", nxt.raw_heading.strip())
            nxt.blocks = [own] + nxt.blocks
            nxt.counts = [counter.one(own.text)] + nxt.counts
        front.setdefault(id(nxt), []).append((head + node.blocks, head_counts + node.counts))
        nxt.merged.append({"heading": node.heading, "anchor": node.anchor, "level": node.level})
        keep[i] = False
    out = []
    for node, kept in zip(nodes, keep):
        if not kept:
            continue
        chunks = front.get(id(node))
        if chunks:  # in document order: the earliest merged section first
            node.blocks = [b for blocks, _ in reversed(chunks) for b in blocks] + node.blocks
            node.counts = [c for _, counts in reversed(chunks) for c in counts] + node.counts
            node.merged.reverse()
            node.heading = merged_heading([m["heading"] for m in node.merged] + [node.heading])
        out.append(node)
    if len(out) < len(nodes):  # a relabelled section's subtree reads its new heading in its paths
        for node in out:
            if node.level:
                node.path = (node.parent.path if node.parent is not None else ()) + (node.heading,)
    return out


MERGED_HEADING_SEP = "; "


def merged_heading(headings: Sequence[str]) -> str:
    """The label of a section that took tiny siblings: every part's heading, in document order.

    Labelled with the last part's heading alone, "Synopsis" then "Description"
    read as "Description" while the text began with the synopsis. A run of more
    than four keeps its first two, an ellipsis and the last, so a FAQ of a
    hundred short answers does not make a heading of a hundred questions.
    """
    named = [h for h in headings if h.strip()]
    if len(named) > 4:
        named = [*named[:2], "…", named[-1]]
    return MERGED_HEADING_SEP.join(named)


def _split(node: _Node, counter: _Counter, max_tokens: int) -> list[tuple[str, int]]:
    """The node's content as one or more (text, token_count) parts."""
    if not node.blocks:
        return [("", 0)]
    total = node.tokens()
    if total is not None and total <= max_tokens:
        text = "\n\n".join(b.text for b in node.blocks)
        if len(node.blocks) > 1 and not counter.additive:
            total = counter.one(text)
        return [(text, total)]
    pieces: list[_Piece] = []
    for b, c in zip(node.blocks, node.counts):
        # over the cap, but maybe not over budget (deep indentation): a block that fits is never cut, which the
        # cap alone had broken (a 4,429-character code block of 240 tokens, cut in two)
        if c is None and len(b.text) <= _CHARS_PER_TOKEN_RECHECK * max_tokens:
            c = counter.one(b.text)
        if c is not None and c <= max_tokens:
            sub = [_Piece(b.text, c, "\n\n")]
        elif b.kind == "table":
            sub = _table_pieces(b, counter, max_tokens)
        else:
            strategies = _STRATEGIES.get(b.kind, _DEFAULT_STRATEGY)
            sub = _pieces(b.text, strategies, counter, max_tokens)
        if sub:
            sub[0] = replace(sub[0], joiner="\n\n")
            if b.keep_with_next:
                sub[-1] = replace(sub[-1], keep_with_next=True)
        pieces.extend(sub)
    parts: list[tuple[str, int]] = []
    for group in _pack(pieces, max_tokens):
        text = group[0].text + "".join(p.joiner + p.text for p in group[1:])
        exact = counter.additive or len(group) == 1
        parts.append((text, sum(p.tokens for p in group) if exact else counter.one(text)))
    return parts


#: section_id is part of the primary key: an anchor longer than this (a heading of megabytes) is cut
MAX_SECTION_ID = 200

#: deepest heading level kept: HTML section containers nest deeper than h6 (DocBook book > part >
#: chapter > sect1..sect4 is 7), and capping at 6 gave deeper sections a wrong parent and path
MAX_LEVEL = 100


class _Ids:
    """Section ids taken so far; `take` gives ``base`` or its first free ``base~n`` and takes it.

    Each base remembers where its search for a free n stopped: counting up from
    2 every time was quadratic in the repeats (8,000 headings of one id, 6 s).
    """

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next_n: dict[str, int] = {}

    def take(self, base: str) -> str:
        sid = base
        if sid in self.used:
            n = self.next_n.get(base, 2)
            while suffixed(base, n) in self.used:
                n += 1
            self.next_n[base] = n + 1
            sid = suffixed(base, n)
        self.used.add(sid)
        return sid


def suffixed(base: str, n: int) -> str:
    """``base~n`` within MAX_SECTION_ID characters, the base cut to make room: a 200-character anchor's later parts
    had ids of 202 characters, over the stored limit in 4-byte letters, and the parser's own file was refused."""
    suffix = f"~{n}"
    return base[: MAX_SECTION_ID - len(suffix)] + suffix


def embedding_text(title: str, heading_path: Sequence[str], content: str) -> str:
    """What the model sees of a section: a context line (title and heading path), then the verbatim content."""
    crumbs = " > ".join(h for h in (title, *heading_path) if h)
    return f"{crumbs}\n\n{content}" if crumbs else content


def _budgets(nodes: list[_Node], counter: _Counter, max_tokens: int, title: str | None) -> list[int]:
    """Each node's content budget: ``max_tokens``, less what the model reads before the content (see
    `build_sections`), but never under half of it (a heading path that long loses its text's end instead)."""
    if title is None:
        return [max_tokens] * len(nodes)
    # a lone surrogate (a title from a file name that is not UTF-8) is counted as "?": the tokenizer refuses
    # it, and the file fails later with a message naming it (DocumentRecord)
    before = counter.many([embedding_text(title, n.path, "").encode("utf-8", "replace").decode() for n in nodes])
    return [max(max_tokens - SPECIAL_TOKENS - b, (max_tokens - SPECIAL_TOKENS) // 2, 1) for b in before]


def build_sections(
    blocks: Sequence[Block],
    *,
    count_tokens: TokenCounter = count_tokens,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    title: str | None = None,
) -> list[Section]:
    """Turn parser blocks into a valid section tree (rules in the module docstring).

    With ``title`` (the document's), a section's content is cut to fit the model with what the model reads
    before it (`embedding_text`: the title and heading path, and the model's special tokens): cut to
    ``max_tokens`` alone, a full section's last words (14 word pieces on average, in 2,477 of the PostgreSQL
    manual's 9,342 sections) lay past the model's 256 and were never embedded. Without it (None), contents
    are cut to ``max_tokens``.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    counter = _Counter(count_tokens)
    nodes = _tree(blocks)
    # nothing to read and nothing kept below: an untitled, empty container (HTML) or a bare "#" is not a
    # section. Bottom-up (children follow their parent), so one holding only such containers goes too
    kept, has_kept_child = [], set()
    for n in reversed(nodes):
        if n.heading.strip() or n.blocks or id(n) in has_kept_child:
            kept.append(n)
            if n.parent is not None:
                has_kept_child.add(id(n.parent))
    nodes = kept[::-1]
    _count_blocks(nodes, counter, max_tokens)
    nodes = _merge_tiny(nodes, counter, min_tokens)

    sections: list[Section] = []
    ids = _Ids()
    first_id: dict[int, str] = {}
    for node, budget in zip(nodes, _budgets(nodes, counter, max_tokens, title)):
        parts = _split(node, counter, budget)
        base_id = ids.take((node.anchor or f"s{len(sections)}")[:MAX_SECTION_ID])
        first_id[id(node)] = base_id
        parent_id = first_id[id(node.parent)] if node.parent is not None else None
        for k, (text, tokens) in enumerate(parts, start=1):
            sid = base_id if k == 1 else ids.take(suffixed(base_id, k))
            meta: dict = {}
            if len(parts) > 1:
                meta.update(part=k, parts=len(parts))
            if k == 1 and node.merged:
                meta["merged"] = list(node.merged)
            sections.append(
                Section(
                    section_id=sid,
                    parent_section_id=parent_id,
                    sequence_index=len(sections),
                    level=node.level,
                    heading=node.heading,
                    heading_path=node.path,
                    content=text,
                    token_count=tokens,
                    anchor=node.anchor,
                    metadata=meta,
                )
            )
    return sections


def section_anchors(section: Section) -> tuple[str, ...]:
    """Every source anchor whose text this section holds: its own, then merged ones."""
    merged = [m.get("anchor") for m in section.metadata.get("merged", [])]
    return tuple(a for a in [section.anchor, *merged] if a)


# ---------------------------------------------------------------------- file entry

MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdown", ".mkd", ".mkdn", ".mdx"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
RST_SUFFIXES = {".rst", ".rest"}
#: read as plain text; so is a file named directly with any other suffix
TEXT_SUFFIXES = {".txt", ".text"}


def _read_text(path: Path, data: bytes | None = None, notes: list[str] | None = None) -> str:
    """Read a document as UTF-8, or an HTML page in the charset its ``<meta>`` or XML declaration names (from
    ``data``, its bytes, when given), rejecting what cannot be a text document. An .html or .htm page that names
    no charset anywhere and is not UTF-8, most of its non-ASCII bytes in no UTF-8 sequence, is read as
    windows-1252, as browsers read such a legacy page (a Latin-1 libxslt page had been refused); ``notes`` gets
    a warning saying so."""
    shown = str(path)
    if data is None:
        if not path.exists():
            raise InputDocumentError(shown, "path does not exist")
        if path.is_dir():
            raise InputDocumentError(shown, "is a directory, not a file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputDocumentError(shown, f"cannot read file: {exc.strerror or exc}") from exc
    if not data:
        raise InputDocumentError(shown, "empty file (0 bytes)")
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):  # before UTF-16's: FF FE starts both
        raise InputDocumentError(shown, "UTF-32 encoded (byte-order mark); convert it to UTF-8")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputDocumentError(shown, "UTF-16 encoded (byte-order mark); convert it to UTF-8")
    nul = data.find(b"\x00")  # anywhere: PostgreSQL text cannot hold NUL, so a late one would fail at COPY
    if nul >= 0:
        if _looks_utf16(data):
            raise InputDocumentError(shown, "UTF-16 encoded (no byte-order mark); convert it to UTF-8")
        raise InputDocumentError(shown, f"binary file (NUL byte at offset {nul})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        declared = _declared_html_charset(data) if path.suffix.lower() in HTML_SUFFIXES else None
        text, why = None, ""
        if declared and data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark overrides <meta> (WHATWG)
            declared, why = None, f"; its UTF-8 byte-order mark overrides its declared charset {declared[0]!r}"
        if declared:  # an HTML page that says its encoding in a <meta> tag is read in it
            label, codec = declared
            named = repr(label) if codec == label else f"{label!r} (read as {codec}, as browsers do)"
            # the codec HTML reads the label as, else Python's codec of that name (Big5: six pairs that
            # Big5-HKSCS refuses and big5 reads had made a page readable before fail)
            for name in dict.fromkeys((codec, label)):
                try:
                    text = data.decode(name, errors="onetrip-whatwg-c1" if name in ("cp1252", "cp874") else "strict")
                    break
                except LookupError:
                    why = why or f"; its declared charset {label!r} is not one Python knows"
                except UnicodeDecodeError:
                    why = f"; its declared charset {named} does not decode it either"
        if text is None and not declared and not why and path.suffix.lower() in (".html", ".htm") \
                and not _CHARSET_NAMED.search(data) and _mostly_not_utf8(data):
            text = data.decode("cp1252", errors="onetrip-whatwg-c1")
            if notes is not None:
                notes.append(f"not UTF-8 (byte offset {exc.start}) and no charset declared: read as windows-1252, "
                             "as browsers read such a page; declare its charset if that is wrong")
        if text is None:
            raise InputDocumentError(shown, f"invalid UTF-8 at byte offset {exc.start} ({exc.reason}){why}") from exc
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")  # one line ending for every format
    if not text.strip():
        raise InputDocumentError(shown, "empty file (whitespace only)")
    if _invisible(text):
        raise InputDocumentError(shown, "empty file (only whitespace and invisible characters such as U+200B)")
    return text


#: whitespace, zero-width and other format characters a reader never sees (str.strip keeps the zero-width ones)
_INVISIBLE = re.compile(r"[\s\u00ad\u034f\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff]+")
_FILLERS = "\u115f\u1160\u3164\uffa0"  # Hangul fillers: letters by category, blank on the page


def _invisible(text: str) -> bool:
    """Nothing a reader would see: the regex takes the usual ones; what is left, if short, is checked by category."""
    rest = _INVISIBLE.sub("", text)
    return len(rest) < 64 and all(ch in _FILLERS or unicodedata.category(ch) in ("Cf", "Cc", "Mn", "Zs", "Zl", "Zp")
                                  for ch in rest)


#: a multi-byte UTF-8 sequence
_UTF8_SEQUENCE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")
#: a charset or encoding named anywhere (a <meta> past the first 4 kB that `_declared_html_charset` reads): the
#: page says what it is, so no guess is made
_CHARSET_NAMED = re.compile(rb"(?i)charset|encoding\s*=")


def _mostly_not_utf8(data: bytes) -> bool:
    """Whether more of a page's non-ASCII bytes are not UTF-8 than are: a legacy page whose letters now and then
    form a UTF-8 pair ("café »" holds one), not a UTF-8 page with a bad byte (review)."""
    valid = sum(len(m) for m in _UTF8_SEQUENCE.findall(data))
    high = sum(1 for b in data if b >= 0x80)
    return high - valid > valid
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
#: an XHTML file's encoding, in its XML declaration (read when no <meta> names one)
_XML_ENCODING = re.compile(rb"""\A(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")
#: what HTML reads a declared charset as (WHATWG Encoding): Latin-1 and ASCII labels mean windows-1252, GB2312
#: means GBK, Shift_JIS windows-31j, EUC-KR windows-949, TIS-620 windows-874 (pages declaring the older one
#: hold the wider one's characters: a browser shows them, Python's codec of the label had refused the page),
#: and a page that declares UTF-16 in its own bytes cannot be UTF-16
_HTML_CHARSET_AS = {**dict.fromkeys(("iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "cp819",
                                     "ibm819", "us-ascii", "ascii", "windows-1252", "x-cp1252", "cp1252"), "cp1252"),
                    **dict.fromkeys(("gb2312", "gb_2312", "gb_2312-80", "csgb2312", "csiso58gb231280", "chinese",
                                     "iso-ir-58", "gbk", "x-gbk", "cp936", "windows-936"), "gbk"),
                    **dict.fromkeys(("shift_jis", "shift-jis", "sjis", "x-sjis", "csshiftjis", "ms932", "ms_kanji",
                                     "windows-31j", "cp932"), "cp932"),
                    **dict.fromkeys(("euc-kr", "euc_kr", "cseuckr", "csksc56011987", "iso-ir-149", "korean",
                                     "ks_c_5601-1987", "ks_c_5601-1989", "ksc5601", "ksc_5601", "windows-949",
                                     "cp949"), "cp949"),
                    **dict.fromkeys(("tis-620", "iso-8859-11", "iso8859-11", "windows-874", "dos-874"), "cp874"),
                    **dict.fromkeys(("big5", "big5-hkscs", "cn-big5", "csbig5", "x-x-big5"), "big5hkscs"),
                    **dict.fromkeys(("utf-16", "utf-16le", "utf-16be"), None)}


def _declared_html_charset(data: bytes) -> tuple[str, str] | None:
    """(label, codec): the charset an HTML page declares in a <meta> tag of its first 4 kB (else an XHTML file in
    its XML declaration), and the Python codec that reads it as HTML does; None when none is declared or the
    label is UTF-16's."""
    m = _META_CHARSET.search(data[:4096]) or _XML_ENCODING.match(data[:4096])
    if not m:
        return None
    label = m.group(1).decode("ascii").lower()
    codec = _HTML_CHARSET_AS.get(label, label)
    return None if codec is None else (label, codec)


def _c1_controls(e: UnicodeError) -> tuple[str, int]:
    """windows-1252 and windows-874 as WHATWG reads them: a byte from 0x80 to 0x9F that Python's codec leaves
    unassigned (cp1252: 0x81, 0x8D, 0x8F, 0x90, 0x9D) is the C1 control of its number (it had refused the
    whole page); any other undecodable byte is an error still."""
    assert isinstance(e, UnicodeDecodeError)
    bad = e.object[e.start:e.end]
    if not all(0x80 <= b <= 0x9F for b in bad):
        raise e
    return "".join(chr(b) for b in bad), e.end


codecs.register_error("onetrip-whatwg-c1", _c1_controls)


def _looks_utf16(data: bytes) -> bool:
    """Text of mostly ASCII in UTF-16 without a byte-order mark: every other byte NUL."""
    head = data[:400]
    if len(head) < 4:
        return False
    return any(head[i::2].count(0) >= 0.9 * len(head[i::2]) and head[1 - i::2].count(0) == 0 for i in (0, 1))


def parse_file(
    path: str | Path,
    *,
    count_tokens: TokenCounter = count_tokens,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    data: bytes | None = None,
) -> ParsedDocument:
    """Parse a markdown, HTML or plain-text file into sections (format by suffix).

    ``data``: the file's bytes when the caller has read them already (ingest hashes them), so that the
    sections come from the bytes that were hashed, not from a second read of a file edited in between.
    """
    path = Path(path)
    notes: list[str] = []
    text = _read_text(path, data, notes)
    try:
        doc = _parse_text(path, text, count_tokens=count_tokens, max_tokens=max_tokens, min_tokens=min_tokens)
        return replace(doc, warnings=(*notes, *doc.warnings)) if notes else doc
    except RecursionError:  # a clear error for this file, not a crashed batch. None is known to get here: the HTML
        # walks are iterative, markdown-it caps nesting, deep front matter is read as key: value lines
        raise InputDocumentError(str(path), "nested too deeply to parse") from None


def _parse_text(path: Path, text: str, *, count_tokens: TokenCounter, max_tokens: int,
                min_tokens: int) -> ParsedDocument:
    suffix = path.suffix.lower()
    blocks: list[Block]
    if suffix in MARKDOWN_SUFFIXES:
        from onetrip.parse_markdown import MarkdownTooDeepError, parse_markdown, truncation_warning

        try:
            title, blocks, metadata = parse_markdown(text, mdx=suffix == ".mdx")
        except MarkdownTooDeepError as e:
            raise InputDocumentError(str(path), str(e)) from None
        fmt = "markdown"
        lost = truncation_warning(text)
    elif suffix in HTML_SUFFIXES:
        from onetrip.parse_html import parse_html
        from onetrip.parse_html import truncation_warning as html_truncation_warning

        report: list[str] = []
        title, blocks, metadata = parse_html(text, report)
        fmt = "html"
        lost = "; ".join(w for w in (html_truncation_warning(text), *report) if w) or None
        if not any(isinstance(b, ContentBlock) and b.text.strip() for b in blocks) and not any(
            isinstance(b, HeadingBlock) and b.text.strip() for b in blocks
        ):
            raise InputDocumentError(str(path), "HTML has no visible text" + (f" ({lost})" if lost else ""))
    elif suffix in RST_SUFFIXES:
        from onetrip.parse_rst import parse_rst

        title, blocks, metadata = parse_rst(text)
        fmt = "rst"
        lost = None
    else:
        title, blocks, metadata = "", [ContentBlock("paragraph", text.strip("\n"))], {}
        fmt = "text"
        lost = None
    title = _shown_heading(title or path.stem)  # read with every part, as a heading path is
    sections = build_sections(
        blocks, count_tokens=count_tokens, max_tokens=max_tokens, min_tokens=min_tokens, title=title
    )
    if not sections:
        raise InputDocumentError(str(path), f"no text content found in {fmt} document")
    return ParsedDocument(title=title, sections=sections, metadata=metadata, format=fmt,
                          warnings=(lost,) if lost else ())
