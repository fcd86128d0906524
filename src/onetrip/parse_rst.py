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
* A title's anchor is the id docutils gives it (`make_id`: lowercase, runs of
  other characters as '-'), or the name of an explicit target (`.. _name:`)
  right before it, which is what a `:ref:` links to.
* The document's title is its first level-1 title.
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


def make_id(text: str) -> str:
    """The id docutils makes of a title or a target name: ASCII, lowercase, other characters' runs as '-', no
    leading digit or '-'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return re.sub(r"^[^a-z]+|[^a-z0-9]+$", "", re.sub(r"[^a-z0-9]+", "-", ascii_text))


def _is_adornment(line: str) -> bool:
    return len(line.strip()) >= 2 and _ADORNMENT.fullmatch(line) is not None


def _title_at(lines: list[str], i: int) -> tuple[str, tuple[str, bool], int] | None:
    """(text, style, lines it takes) of a title that starts at line ``i`` (after a blank line), else None."""
    line = lines[i]
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if _is_adornment(line) and i + 2 < len(lines):  # overline, text, underline
        text, under = lines[i + 1].strip(), lines[i + 2]
        if text and not _is_adornment(lines[i + 1]) and _is_adornment(under) and under.strip() == line.strip():
            return text, (line.strip()[0], True), 3
        return None
    if not line.strip() or line[:1].isspace() or _is_adornment(line) or not _is_adornment(nxt) or nxt[:1].isspace():
        return None
    text, length = line.rstrip(), len(nxt.strip())
    if length < len(text) and length < 4:  # "Possible title underline, too short": ordinary text
        return None
    return text.strip(), (nxt.strip()[0], False), 2


def parse_rst(text: str) -> tuple[str, list[Block], dict]:
    """(title, blocks, metadata) for a reStructuredText document (metadata: none is read)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    styles: list[tuple[str, bool]] = []
    blocks: list[Block] = []
    title = ""
    target: str | None = None  # an explicit target's id, waiting for the title right after it
    i, n = 0, len(lines)
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        found = _title_at(lines, i) if i == 0 or not lines[i - 1].strip() else None
        if found is not None:
            heading, style, taken = found
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            blocks.append(HeadingBlock(level, heading, target or make_id(heading) or None,
                                       "\n".join(lines[i:i + taken])))
            if level == 1 and not title:
                title = heading
            target = None
            i += taken
            continue
        start, indented = i, lines[i][:1].isspace()
        i += 1
        while i < n and lines[i].strip():
            i += 1
        if indented:  # an indented run goes on over blank lines while it stays indented
            while i < n:
                j = i
                while j < n and not lines[j].strip():
                    j += 1
                if j < n and lines[j][:1].isspace():
                    i = j + 1
                    while i < n and lines[i].strip():
                        i += 1
                else:
                    break
        block = "\n".join(lines[start:i])
        m = _TARGET.fullmatch(block)
        target = make_id(m.group(1) or m.group(2)) or None if m else None
        kind = "code" if indented else "other" if block.startswith("..") else "paragraph"
        # a paragraph ending in "::" (its literal block follows) or a directive stays with the indented run after it
        if indented and blocks and isinstance(blocks[-1], ContentBlock) and blocks[-1].kind != "code" and (
                blocks[-1].text.rstrip().endswith("::") or blocks[-1].text.startswith("..")):
            previous = blocks.pop()
            assert isinstance(previous, ContentBlock)
            blocks.append(ContentBlock(previous.kind, previous.text, keep_with_next=True))
        blocks.append(ContentBlock(kind, block))
    return title, blocks, {}
