"""reStructuredText to neutral blocks: sections along its titles, each block's source lines kept verbatim.

Why not docutils: it renders, and evidence is quoted against the source; the
titles are all that is needed, and their rules are few (docutils' spec,
"Sections"):

* A title is a line of text under a blank line (or the file's start) with an
  underline of one punctuation character repeated, at least as long as the
  text or 4 long (a shorter one makes the lines ordinary text, as docutils
  reads them), or between an overline and an underline of the same character.
  Its text starts at the line's start (an indented line is a block's, a code
  sample's), except under an overline.
* Levels come from the adornment styles in the order they first appear
  (character, and whether it has an overline): the first style seen is level 1.
* A title's text is its line without inline markup (roles, literals, links);
  its anchor the id docutils gives it (`make_id`: lowercase, runs of other
  characters as '-'), or the name of an explicit target (`.. _name:`) right
  before it, which is what a `:ref:` links to; none when that id is taken
  (docutils then numbers it, idN, which only its whole run knows).
* Not titles: a line starting a bullet item or explicit markup, a simple
  table's rows (its "=====  =====" borders, its span rules).
* The document's title is its first level-1 title.
* A comment (explicit markup that is no directive, target, footnote or
  substitution) and the indented text it takes are dropped: no reader sees them
  (unless the file holds nothing else).
* Between titles, blocks are runs of lines between blank lines; an indented
  run (a literal block, a directive's body), with the blank lines inside it,
  is one code block, kept with the paragraph ending in "::" or the directive
  before it when both fit.
"""

from __future__ import annotations

import re
import unicodedata

from onetrip.sections import Block, ContentBlock, HeadingBlock

#: a line of one punctuation character repeated (docutils: any non-alphanumeric printable 7-bit ASCII character)
_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+[ \t]*")
_TARGET = re.compile(r"\.\.[ \t]+_(?:`([^`]+)`|([^:`]+)):[ \t]*")
#: a simple table's border of two or more columns ("=====  =====")
_TABLE_BORDER = re.compile(r"=+(?:[ \t]+=+)+[ \t]*")
#: explicit markup's start (a comment, target or directive); "...and so" is a paragraph
_EXPLICIT = re.compile(r"\.\.(?:[ \t]|$)")
#: a line docutils reads as another body element before a title: a bullet item, explicit markup, a field, an
#: option ("-v  Verbose"), a line block, a doctest
_NOT_TITLE = re.compile(r"(?:[-*+\u2022\u2023\u2043]|\.\.|\||>>>)(?:[ \t]|$)|:[^:\s][^:]*:(?:[ \t]|$)"
                        r"|--?\w[\w-]*(?:[ =][\w<>.-]+)?(?: {2,}|\t)")
#: explicit markup that is not a comment: a footnote or citation ([), a target (_), a substitution (|), a directive
#: (a name and "::"); any other ".. text" is a comment, which no reader sees
_NOT_COMMENT = re.compile(r"\.\.[ \t]+(?:[\[_|]|[^\W_]+(?:[-._+:][^\W_]+)*[ \t]*::)")
#: what else takes an id: a target with a URI (".. _name: https://..."), an inline target (_`name`)
_URI_TARGET = re.compile(r"\.\.[ \t]+_(?:`([^`]+)`|([^:`]+)):[ \t]+\S")
_INLINE_TARGET = re.compile(r"(?<![\w`])_`([^`]+)`")
#: inline markup, one pass (what one removes cannot make another), docutils' start and end rules roughly: a role
#: (its text, without <target> or ~), a literal, a link with its URI, interpreted text, strong, emphasis. A role's
#: name, a literal's or strong text and a link's <URI> are searched for so far only (64, 200, 200 and 500
#: characters): an opener never closed had been searched for to the line's end once per opener, and 30,000 of
#: them in a title took minutes (found by review); longer spans stay as written
_INLINE = re.compile(r"(?<![\w\\]):[\w.+:-]{1,64}:`(?P<role>[^`]+)`(?!\w)"
                     r"|(?<![\w\\`])``(?P<literal>\S(?:.{0,200}?\S)?)``(?!`)"
                     r"|(?<![\w\\`])`(?P<link>[^`<]*?)\s*<[^>]{0,500}>`__?(?!\w)"
                     r"|(?<![\w\\`])`(?P<text>[^`\s](?:[^`]*[^`\s])?)`(?::[\w.+:-]+:|__?)?(?![\w`])"
                     r"|(?<![\w\\*])\*\*(?P<strong>\S(?:.{0,200}?\S)?)\*\*(?![\w*])"
                     r"|(?<![\w\\*])\*(?P<emphasis>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])")

# docutils.nodes' tables for make_id: letters NFKD does not take to ASCII (after lowercasing)
_ID_DIGRAPHS = {0x00DF: "sz", 0x00E6: "ae", 0x0153: "oe", 0x0238: "db", 0x0239: "qp"}
_ID_LETTERS = {0x00F8: "o", 0x0111: "d", 0x0127: "h", 0x0131: "i", 0x0142: "l", 0x0167: "t", 0x0180: "b",
               0x0183: "b", 0x0188: "c", 0x018C: "d", 0x0192: "f", 0x0199: "k", 0x019A: "l", 0x019E: "n",
               0x01A5: "p", 0x01AB: "t", 0x01AD: "t", 0x01B4: "y", 0x01B6: "z", 0x01E5: "g", 0x0225: "z",
               0x0234: "l", 0x0235: "n", 0x0236: "t", 0x0237: "j", 0x023C: "c", 0x023F: "s", 0x0240: "z",
               0x0247: "e", 0x0249: "j", 0x024B: "q", 0x024D: "r", 0x024F: "y"}


def make_id(text: str) -> str:
    """The id docutils makes of a title's text or a target's name (docutils.nodes.make_id): lowercase, its
    letter tables (ß sz, ø o, ł l, ...), NFKD to ASCII, other characters' runs as '-', no leading digit or '-'."""
    folded = text.lower().translate(_ID_DIGRAPHS).translate(_ID_LETTERS)
    folded = unicodedata.normalize("NFKD", folded).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"^[-0-9]+|-+$", "", re.sub(r"[^a-z0-9]+", "-", " ".join(folded.split())))


def title_text(source: str) -> str:
    """A title's text as rendered: inline markup dropped (roles, ``literals``, `links <url>`_, *emphasis*), escapes
    resolved; a '*' or '`' that starts or ends no markup (`a * b`, `x*y*z`, `*args`) stays."""
    def shown(m: re.Match[str]) -> str:
        kind = m.lastgroup
        inner = m.group(kind) if kind else m.group(0)
        return re.sub(r"\s*<[^>]*>$", "", inner).lstrip("~!") if kind == "role" else inner
    text = re.sub(r"\\(.)", r"\1", _INLINE.sub(shown, source))
    return " ".join(text.split())


def _width(text: str) -> int:
    """Columns the text takes (a wide character two), as docutils measures a title against its underline."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _is_adornment(line: str) -> bool:
    return len(line.strip()) >= 2 and _ADORNMENT.fullmatch(line) is not None


def _title_at(lines: list[str], i: int) -> tuple[str, tuple[str, bool], int] | None:
    """(source text, style, lines it takes) of a title that starts at line ``i``, else None."""
    line = lines[i]
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if _is_adornment(line) and i + 2 < len(lines):  # overline, text, underline
        text, under = lines[i + 1].strip(), lines[i + 2]
        if text and not _is_adornment(lines[i + 1]) and _is_adornment(under) and under.strip() == line.strip():
            return text, (line.strip()[0], True), 3
        return None
    if (not line.strip() or line[:1].isspace() or _is_adornment(line) or _NOT_TITLE.match(line)
            or not _is_adornment(nxt) or nxt[:1].isspace()):
        return None
    text, length = line.rstrip(), len(nxt.strip())
    if length < _width(text) and length < 4:  # "Possible title underline, too short": ordinary text
        return None
    return text.strip(), (nxt.strip()[0], False), 2


def _simple_table_end(lines: list[str], i: int) -> int:
    """The line after a simple table that starts at ``i`` (docutils' isolate_simple_table): at its second border
    after the top one (the header rule, then the bottom), or at a border a blank line follows; rows with blank
    lines between them and span rules stay in it, no title."""
    found = 0
    for j in range(i + 1, len(lines)):
        if _TABLE_BORDER.fullmatch(lines[j]):
            found += 1
            if found == 2 or j + 1 == len(lines) or not lines[j + 1].strip():
                return j + 1
    return i + 1


def _run_end(lines: list[str], i: int, *, indented: bool = False) -> int:
    """The first blank line at or after ``i`` (or, ``indented``, the first line that is blank or not indented)."""
    while i < len(lines) and lines[i].strip() and (not indented or lines[i][:1].isspace()):
        i += 1
    return i


def parse_rst(text: str) -> tuple[str, list[Block], dict]:
    """(title, blocks, metadata) for a reStructuredText document (metadata: none is read)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    styles: list[tuple[str, bool]] = []
    blocks: list[Block] = []
    title = ""
    target: str | None = None  # an explicit target's id, waiting for the title right after it
    used: set[str] = set()  # ids given out: a repeated title gets docutils' idN, which is not known here: no anchor
    may_title = True  # after a blank line, a title or an explicit markup block
    comments: set[int] = set()  # comment blocks (and the indented text they take), by id: dropped at the end
    i, n = 0, len(lines)
    while i < n:
        if not lines[i].strip():
            i += 1
            may_title = True
            continue
        found = _title_at(lines, i) if may_title else None
        if found is not None:
            source, style, taken = found
            heading = title_text(source)
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            own = make_id(heading)
            anchor = target or (own if own and own not in used else None)
            if own:  # (a target is in `used` from when it was read)
                used.add(own)
            blocks.append(HeadingBlock(level, heading, anchor, "\n".join(lines[i:i + taken])))
            if level == 1 and not title:
                title = heading
            target = None
            i += taken
            continue
        start, indented = i, lines[i][:1].isspace()
        explicit = _EXPLICIT.match(lines[i]) is not None
        i += 1
        if _TABLE_BORDER.fullmatch(lines[start]):
            i = _simple_table_end(lines, start)
        else:  # a comment, target or directive: its indented lines, a line at the margin ends it; else its lines
            i = _run_end(lines, i, indented=explicit)
        may_title = explicit
        if indented:  # an indented run goes on over blank lines while it stays indented
            while i < n:
                j = i
                while j < n and not lines[j].strip():
                    j += 1
                if j < n and lines[j][:1].isspace():
                    i = _run_end(lines, j + 1)
                else:
                    break
        block = "\n".join(lines[start:i])
        m = _TARGET.fullmatch(block)
        target = make_id(m.group(1) or m.group(2)) or None if m else None
        if target in used:  # taken (by a title before it): the next title keeps its own id
            target = None
        elif target:
            used.add(target)
        used.update(make_id(name) for uri in _URI_TARGET.finditer(block) for name in uri.groups() if name)
        used.update(make_id(name) for name in _INLINE_TARGET.findall(block))
        kind = "code" if indented else "other" if explicit else "paragraph"
        # a paragraph ending in "::" (its literal block follows) or a directive stays with the indented run after it
        if indented and blocks and isinstance(blocks[-1], ContentBlock) and blocks[-1].kind != "code" and (
                blocks[-1].text.rstrip().endswith("::") or blocks[-1].text.startswith("..")):
            if id(blocks[-1]) in comments:  # a comment's indented text, after a blank line, is the comment's too
                blocks.append(comment := ContentBlock(kind, block))
                comments.add(id(comment))
                continue
            previous = blocks.pop()
            assert isinstance(previous, ContentBlock)
            blocks.append(ContentBlock(previous.kind, previous.text, keep_with_next=True))
        blocks.append(ContentBlock(kind, block))
        # a comment (`.. text`, not a directive, target, footnote or substitution); `..` alone is an empty one,
        # which takes no indented text after a blank line (docutils), so it is not followed above
        if explicit and not indented and _NOT_COMMENT.match(block) is None and block.strip() != "..":
            comments.add(id(blocks[-1]))
    if any(isinstance(b, ContentBlock) and id(b) not in comments for b in blocks):
        blocks = [b for b in blocks if id(b) not in comments]
    # else a file of comments alone (and titles) is stored as before: one stored so would fail every re-cut
    return title, blocks, {}
