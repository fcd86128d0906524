"""Markdown to neutral blocks, keeping every block's verbatim source lines.

Why markdown-it tokens rather than regexes: they know that `#` inside a fenced
code block is not a heading, that setext underlines make headings, and where each
top-level block starts and ends (`token.map`), so block text can be sliced from
the source instead of being re-rendered.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sys
import unicodedata
from functools import lru_cache
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the same module, from PyPI
    import tomli as tomllib

from markdown_it import MarkdownIt
from markdown_it.common.utils import normalizeReference
from markdown_it.rules_core import inline as _inline_rule
from markdown_it.rules_core.state_core import StateCore
from markdown_it.token import Token
from mdit_py_plugins.front_matter import front_matter_plugin

from onetrip.sections import Block, ContentBlock, HeadingBlock

_KINDS = {
    "paragraph_open": "paragraph",
    "fence": "code",
    "code_block": "code",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "blockquote_open": "quote",
    "table_open": "table",
}

def _slug_keeps(ch: str) -> bool:
    """What github-slugger keeps of a heading: letters, marks (the vowel signs of Hindi or Thai, which Python's
    \\w drops), decimal and letter numbers, connector punctuation ('_'), '-' and space; it drops the rest
    (other numbers such as '²' and '½', which \\w keeps, punctuation, symbols, controls, format characters)."""
    cat = unicodedata.category(ch)
    return cat[0] in "LM" or cat in ("Nd", "Nl", "Pc") or ch in "- " or _alphabetic_symbol(ch)


def _alphabetic_symbol(ch: str) -> bool:
    """Symbols Unicode calls alphabetic, which github-slugger keeps: circled and squared letters (ⓔ, 🄺)."""
    o = ord(ch)
    return 0x24B6 <= o <= 0x24E9 or 0x1F130 <= o <= 0x1F149 or 0x1F150 <= o <= 0x1F169 or 0x1F170 <= o <= 0x1F189


#: markdown-it's nesting limit (its default, 20, is a list 10 deep): past it markdown-it silently
#: stops parsing, so every later heading became content. A document that reaches it is refused.
MAX_NESTING = 200


#: the nesting limit while inline text is parsed (markdown-it's commonmark default): markdown-it shares one
#: limit between blocks and inlines, and every '[' of a run with no ']' looks that many levels deep for
#: one, so MAX_NESTING there made a run of '[' cost 200 validation steps a character (60 KB of '[': 8-16 s)
#: where 20 costs 20. Inline levels are nested links and images only, which no real text nests 20 deep.
INLINE_MAX_NESTING = 20


class MarkdownTooDeepError(ValueError):
    """The document nests lists or quotes past MAX_NESTING: markdown-it would drop the rest."""


def _inline_shallow(state: StateCore) -> None:
    """markdown-it's inline core rule, run with INLINE_MAX_NESTING as the limit."""
    options = state.md.options
    block_limit = options["maxNesting"]
    options["maxNesting"] = min(block_limit, INLINE_MAX_NESTING)
    try:
        _inline_rule(state)
    finally:
        options["maxNesting"] = block_limit


def _parser(front_matter: bool = True) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable("table")
    if front_matter:
        md.use(front_matter_plugin)
    md.core.ruler.at("inline", _inline_shallow)
    return md


@lru_cache(maxsize=1)
def _tokens(text: str) -> list[Token]:
    """markdown-it's tokens of a text with \\n line ends; parsing is most of the cost, and `parse_file` asks
    twice per file (`parse_markdown`, then `truncation_warning`). The tokens are only read.

    A document that opens with a `---` rule is read as front matter up to the next `---` by the plugin;
    when that block is no front matter (prose, or lines that are not `key: value`) the text is parsed
    again without it, as CommonMark reads it: a rule, then Markdown. Its heading and words were lost."""
    tokens = _parser().parse(text)
    if tokens and tokens[0].type == "front_matter" and parse_front_matter(tokens[0].content) is None:
        return _parser(front_matter=False).parse(text)
    return tokens


class GithubSlugger:
    """GitHub-style heading anchors: lowercase, punctuation dropped, spaces to '-', -n for repeats."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    @staticmethod
    def slug(text: str) -> str:
        """Each space is a '-', as github-slugger makes it: `Version 0.1  (2012)` is `version-01--2012`."""
        return "".join(ch for ch in text.lower() if _slug_keeps(ch)).replace(" ", "-")

    def __call__(self, text: str) -> str:
        base = result = self.slug(text)
        while result in self._seen:
            self._seen[base] += 1
            result = f"{base}-{self._seen[base]}"
        self._seen[result] = 0
        return result


def _inline_text(inline: Token) -> str:
    """An inline token's text as written: markup dropped, code spans and image text kept, a line break "\n"."""
    out: list[str] = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append("\n")  # GitHub's heading text keeps the line break, which the slug then drops
        elif child.type == "image":
            out.append(_plain(child))
    return "".join(out)


def _plain(inline: Token | None) -> str:
    """Rendered text of an inline token (markup dropped, code spans kept), its whitespace collapsed."""
    if inline is None or not inline.children:
        return inline.content.strip() if inline is not None else ""
    return re.sub(r"\s+", " ", _inline_text(inline)).strip()


def _slug_source(inline: Token | None) -> str:
    """A heading's text as GitHub slugs it: `_plain`'s, but with its spaces as written, none collapsed or
    stripped (a space left by inline HTML, `## <a name="x"></a> Foo`, is the slug's leading '-')."""
    if inline is None or not inline.children:
        return _plain(inline)
    return _inline_text(inline)


#: Integers up to this many bits have fewer than Python's 4,300 decimal digits (`sys.get_int_max_str_digits`).
_MAX_JSON_INT_BITS = 14_000


def _jsonable(value: Any) -> Any:
    """Front matter goes into JSON columns: dates become ISO strings, the rest str()."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # .nan / .inf: JSON (and jsonb) has no NaN or Infinity
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_JSON_INT_BITS:
        return hex(value)  # past Python's int-to-decimal limit (4,300 digits) json.dumps fails: 0xfff... as written
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (_dt.date, _dt.datetime, _dt.time)):
        return value.isoformat()
    return str(value)


def _simple_front_matter(raw: str) -> dict | None:
    """`key: value` lines, for when PyYAML is missing or the YAML is invalid; None (no front matter: the block
    is read as Markdown, every word kept) when a line is none of what this can hold as written.

    It holds `key: value` at the left margin, a value's indented continuation lines (joined by a space, as
    YAML folds a plain scalar), `- item` lines under a key with no value (a list of strings), blank lines
    and `#` comments. Anything else, such as prose at the margin, a list with no key or under a key that has
    a value, or a mapping nested under a key, is None; so is a block with no `key: value` line (a table of
    contents between two rules: `## Contents` and `- [Install](#install)`). Those lines had been skipped
    and their words lost (an unquoted colon in a title made `tags:` and its list an empty string)."""
    out: dict[str, str | list[str]] = {}
    key: str | None = None  # the last key, which indented and `- ` lines belong to
    for line in raw.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        item = text == "-" or text.startswith(("- ", "-\t"))
        if line.startswith((" ", "\t")) or item:
            if key is None:
                return None
            value = out[key]
            if item and isinstance(value, list):
                value.append(_unquoted(text[1:].strip()))
            elif item and value == "":
                out[key] = [_unquoted(text[1:].strip())]
            elif not item and isinstance(value, str) and value and not text.split(None, 1)[0].endswith(":"):
                out[key] = f"{value} {text}"
            else:  # an indented mapping, or text under a list: nothing this can hold as written
                return None
            continue
        k, sep, value = line.partition(":")
        if not sep or not k.strip():
            return None
        key = k.strip()
        out[key] = _unquoted(value.strip())
    return out if out or not raw.strip() else None


def _unquoted(value: str) -> str:
    return value.strip("'\"")


@lru_cache(maxsize=1)
def _loader(yaml: Any) -> Any:
    """PyYAML's SafeLoader with mapping keys as written: it reads `1:`, `true:` and `null:` as 1, True and None,
    and 1 and True are one key in a dict, so `1: a` and `true: c` became {"1": "c"} and `null:` "None"."""

    class KeysAsWritten(yaml.SafeLoader):
        saw_alias = False  # set while composing: only aliased front matter needs its expansion weighed

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.saw_alias = True
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            if isinstance(node, yaml.MappingNode):
                self.flatten_mapping(node)  # merge keys (<<) first, as SafeLoader does
            out = {}
            for k, v in node.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else self.construct_object(k, deep=True)
                try:
                    hash(key)
                except TypeError:  # `{{ card_data }}` or `? [a, b]`: a TypeError had ended the whole ingest run
                    raise yaml.constructor.ConstructorError(None, None, "found unhashable key", k.start_mark) \
                        from None
                out[key] = self.construct_object(v, deep=deep)
            return out

    return KeysAsWritten


#: The most front matter may expand to through its aliases, in characters of JSON, roughly, before it is read as
#: plain lines: each node counts FRONT_MATTER_NODE_SIZE plus its scalar's length (a node count alone let a 10 KB
#: file with one long aliased string expand to 84 MB; characters alone, 100,000 nulls to 546 KB of JSON).
MAX_FRONT_MATTER_SIZE = 100_000
#: A node's JSON beyond its scalar's characters, at most: `null, ` (a value and its separator).
FRONT_MATTER_NODE_SIZE = 6


def _scalar_size(node: Any) -> int:
    """A scalar's characters as JSON sends them, escapes counted (a control character is 6, an emoji 12, in
    psycopg's ASCII JSON); !!binary becomes its bytes' str(), up to 4 characters a byte, each \\ escaped."""
    if node.tag.endswith(":binary"):
        return 8 * len(node.value)
    return len(json.dumps(node.value)) - 2


def _expanded_size(yaml: Any, root: Any) -> int:
    """The size of a composed YAML graph once its aliases are expanded, each node FRONT_MATTER_NODE_SIZE plus a
    scalar's length, counted without expanding them (each node's size made once); past MAX_FRONT_MATTER_SIZE,
    or for an alias cycle, one more."""
    cap = MAX_FRONT_MATTER_SIZE + 1
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the nodes whose children are being counted: meeting one again is a cycle
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        if isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        else:
            kids = node.value if isinstance(node, yaml.SequenceNode) else []
        if counted:
            own = _scalar_size(node) if isinstance(node, yaml.ScalarNode) else 0
            open_nodes.discard(id(node))
            sizes[id(node)] = min(cap, FRONT_MATTER_NODE_SIZE + own + sum(sizes[id(k)] for k in kids))
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            return cap
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def parse_front_matter(raw: str) -> dict | None:
    """YAML when PyYAML is importable, else simple `key: value` lines. None when the block is no front
    matter: YAML that is a bare string or number (prose between two `---` rules), or lines that are not
    `key: value`; `parse_markdown` then reads it as Markdown."""
    return _front_matter(raw)[0]


def _front_matter(raw: str) -> tuple[dict | None, str | None]:
    """`parse_front_matter`'s metadata, and the document's title as written: `title: 1984`, `title: 404` or
    `title: 1.10` are a number to YAML, and had been no title at all (the first h1 or the file name was
    taken, while the metadata said 1984); a title's own text is what a reader sees (1.10, not 1.1)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is usually present
        return _with_title(_simple_front_matter(raw))
    try:
        # an alias can expand exponentially (a few hundred bytes, tens of MB): front matter whose aliases
        # expand past MAX_FRONT_MATTER_SIZE is read as plain key: value lines, as invalid YAML is; below
        # that it is YAML as any other (all aliased front matter had gone to the lines, which hold no list
        # under an anchored key: `tags: &t` then `- sql` lost the document's title and every key)
        # composed once (the node graph, aliases shared, not expanded), weighed, then constructed from it
        loader = _loader(yaml)(raw)
        try:
            root = loader.get_single_node()
            if root is not None and loader.saw_alias and _expanded_size(yaml, root) > MAX_FRONT_MATTER_SIZE:
                return _with_title(_simple_front_matter(raw))
            data = None if root is None else loader.construct_document(root)
        finally:
            loader.dispose()
        if data is None:  # empty, or YAML comments alone (`# generated, do not edit`): front matter, as Jekyll's
            return {}, None
        # front matter is a mapping; anything else between two `---` rules is Markdown: prose (a string), a
        # list (a table of contents), had been taken as front matter and its text lost
        if not isinstance(data, dict):
            return None, None
        # the title key's last value (a repeated key: the last wins, as in `data`; merged keys come first), when
        # a scalar (a review: an earlier scalar had stood in for a last `title: [a, b]`)
        node = next((v for k, v in reversed(root.value) if isinstance(k, yaml.ScalarNode) and k.value == "title"),
                    None)
        scalar = isinstance(node, yaml.ScalarNode) and data.get("title") is not None
        return _jsonable(data), (node.value if scalar else None)
    # ValueError: a date such as 2024-02-30; OverflowError: a sexagesimal float past float's range (1:0:0:...:0.)
    # had failed the whole file; RecursionError: nested hundreds of levels deep ([[[[...), PyYAML and _jsonable
    # recurse
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError):
        return _with_title(_simple_front_matter(raw))


#: a `+++` line, which opens and closes TOML front matter
_TOML_FENCE = re.compile(r"^\+\+\+[ \t]*(?:\n|$)", re.MULTILINE)


def _toml_front_matter(text: str) -> tuple[dict | None, str | None, str]:
    """(metadata, title, text without it) of front matter in TOML between two `+++` lines, as Hugo and Zola
    write it; (None, None, text) when the text opens with no such block or it is not TOML (it is read as
    Markdown then). The block's lines stay as blank lines, so that line numbers do not move.

    It had been read as Markdown: its keys (title = "...", draft = true) were the first section's text, and
    its title was not the document's."""
    if not text.startswith("+++"):
        return None, None, text
    first = _TOML_FENCE.match(text)
    close = _TOML_FENCE.search(text, first.end()) if first else None
    if first is None or close is None:
        return None, None, text
    try:
        data = tomllib.loads(text[first.end():close.start()])
    # ValueError (TOMLDecodeError among them): an integer of thousands of digits; RecursionError: arrays nested
    # hundreds deep; the file stays Markdown, as YAML front matter that fails does
    except (ValueError, RecursionError):
        return None, None, text
    title = data.get("title")
    if isinstance(title, int) and not isinstance(title, bool):  # title = 1984: Hugo shows 1984, as YAML's does
        title = str(title)
    blank = "\n" * text.count("\n", 0, close.end())
    return _jsonable(data), (title if isinstance(title, str) else None), blank + text[close.end():]


def _with_title(metadata: dict | None) -> tuple[dict | None, str | None]:
    """Key: value lines' metadata and title: their values are text as written."""
    title = None if metadata is None else metadata.get("title")
    return metadata, (title if isinstance(title, str) else None)


def _top_level(tokens: list[Token]) -> list[Token]:
    """Opening or self-closing block tokens at nesting level 0, in order."""
    return [t for t in tokens if t.level == 0 and t.nesting >= 0 and t.map is not None]


#: MDX's ESM: a top-level paragraph opening with import or export (Docusaurus: `import Tabs from '@theme/Tabs';`)
_ESM = re.compile(r"(?:import|export)\s")
#: a line that is only a component's JSX tag (<Tabs>, </TabItem>, <Admonition type="tip">, <Video src="x" />) or a
#: fragment's (<>, </>); lowercase tags are HTML, which CommonMark keeps
_JSX_TAG_LINE = re.compile(r"[ \t]*<(?:/?[A-Z][\w.]*(?:\s[^<>]*)?/?|/?)>[ \t]*")
_JSX_COMMENT = re.compile(r"\{/\*.*?\*/\}", re.DOTALL)


def without_mdx_syntax(text: str) -> str:
    """``text`` without MDX's own syntax, line numbers kept: ESM (import and export blocks) and paragraphs that
    are only {/* comments */} become blank lines, a line that is only a component's JSX tag becomes its
    visible props (label="macOS", title="Quickstart") or a blank line, and a heading's {/* #id */} (Docusaurus'
    explicit id) its {#id} attribute block; code keeps them all. Read as Markdown, a Docusaurus page had
    stored its imports and its <TabItem value="x"> lines as text."""
    lines = text.split("\n")
    for tok in _tokens(text):
        if tok.map is None or tok.nesting < 0:
            continue
        start, end = tok.map
        source = lines[start:end]
        if tok.type == "heading_open":
            lines[start] = _MDX_HEADING_ID.sub(r"{\1}", lines[start])
        elif tok.type == "paragraph_open" and (tok.level == 0 and _ESM.match(source[0]) is not None
                                               or not _JSX_COMMENT.sub("", "\n".join(source)).strip()):
            lines[start:end] = [""] * (end - start)
        elif tok.type == "html_block" and all(_JSX_TAG_LINE.fullmatch(line) or not line.strip() for line in source):
            lines[start:end] = [_shown_props(line) for line in source]
    return "\n".join(lines)


def _shown_props(tag_line: str) -> str:
    """A JSX tag line as the label or title it shows, at its indentation (in a list item it stays in the item),
    escaped where it would start a heading, list or quote (label="# Foo"); a blank line when it shows none."""
    shown = " ".join(a or b for a, b in _JSX_SHOWN_PROP.findall(tag_line)).strip()
    if not shown:
        return ""
    if (m := _BLOCK_START.match(shown)) is not None:  # "\\# Foo", "1\\. first": Markdown's escapes
        shown = shown[:m.end(1)] + "\\" + shown[m.end(1):] if m.group(1) else "\\" + shown
    return tag_line[:len(tag_line) - len(tag_line.lstrip())] + shown


#: text that Markdown would read as a block's start: a heading, a list item, a quote, a rule
_BLOCK_START = re.compile(r"(\d{1,9})(?=[.)](?:\s|$))|#|>|[-+*](?:\s|$)|=+\s*$|-+\s*$")


#: the props of a component a reader sees: a tab's label, a card's or an admonition's title
_JSX_SHOWN_PROP = re.compile(r"""\b(?:label|title)=(?:"([^"]*)"|'([^']*)')""")
#: Docusaurus' explicit heading id, `## Requirements {/* #requirements */}` in MDX (`{#id}` in Markdown)
_MDX_HEADING_ID = re.compile(r"\{/\*\s*(#[\w:.-]+)\s*\*/\}(?=\s*(?:#+\s*)?$)")


def parse_markdown(text: str, *, mdx: bool = False) -> tuple[str, list[Block], dict]:
    """(title, blocks, front-matter metadata) for a markdown document (``mdx``: an MDX one, `without_mdx_syntax`).

    Title: front matter `title`, else the first h1, else "". Only top-level
    headings are section headings (a heading inside a list or quote is content).
    Blocks are the source as written, but for what no reader sees: a top-level
    raw HTML block is the text it shows (`parse_html.fragment_text`; not in MDX),
    HTML comments and link definitions no section references are dropped.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    toml_metadata, toml_title, text = _toml_front_matter(text)
    if mdx:
        text = without_mdx_syntax(text)
    lines = text.split("\n")
    tokens = _tokens(text)
    if any(t.level >= MAX_NESTING - 1 for t in tokens):
        # markdown-it's level: a list adds two (the list, its item), a quote one, and the innermost paragraph and
        # its inline text two more: 98 lists or 197 quotes are read whole, 99 or 198 refused
        raise MarkdownTooDeepError(f"Markdown nested deeper than {(MAX_NESTING - 3) // 2} levels of lists "
                                   f"({MAX_NESTING - 3} of quotes); the rest of the document would be lost")
    top = _top_level(tokens)
    index = {id(t): i for i, t in enumerate(tokens)}
    # every rendered heading takes its anchor in document order, as GitHub numbers repeats: a `> ## Note` (content
    # here, a heading on the page) before a top-level `## Note` makes that one `note-1`
    slugger = GithubSlugger()
    anchors: dict[int, str | None] = {}
    written: set[int] = set()  # headings whose source ends with an attribute block (not a code span's text)
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            source, own_id = _slug_source(tokens[i + 1]), None
            if _attributes_written(t, lines):
                written.add(id(t))
                source, own_id = heading_attributes(source)
            anchors[id(t)] = own_id or slugger(source) or None

    metadata: dict = toml_metadata or {}
    fm_title: str | None = toml_title  # front matter's title, as written
    blocks: list[Block] = []
    first_h1 = ""

    definitions: set[int] = set()  # blocks of link reference definitions alone, by id: kept where referenced
    read_tail: tuple[int, int] | None = None  # the lines after a block already parsed as definitions alone

    def gap(start: int, end: int) -> None:
        """Source lines no token claims (link reference definitions) stay as content, where referenced."""
        chunk = without_data_payloads("\n".join(lines[start:end]).strip("\n").rstrip())
        if chunk.strip():
            blocks.append(block := ContentBlock("other", chunk))
            # what markdown-it reads as definitions alone (not `_tokens`, whose one cached parse is the document's,
            # which `truncation_warning` reads again); a block's tail was parsed so already
            if (start, end) == read_tail or not _parser(front_matter=False).parse(chunk):
                definitions.add(id(block))

    covered = 0
    comments: set[int] = set()  # the blocks that are HTML comments alone (`only_comments`), by id
    for i, tok in enumerate(top):
        assert tok.map is not None
        start, end = tok.map
        next_start = top[i + 1].map[0] if i + 1 < len(top) else len(lines)  # type: ignore[index]
        if start > covered:
            gap(covered, start)
        tail = "\n".join(lines[end:next_start])
        if tok.type != "heading_open" and tail.strip() and not _parser(front_matter=False).parse(tail):
            # link reference definitions after the block, which its text had carried (hundreds at a Node.js API
            # page's end, in its last section's text): the next `gap` takes them, as a block of their own
            read_tail = (end, next_start)
            next_start = end
        if tok.type == "front_matter":
            metadata, fm_title = _front_matter(tok.content)  # metadata None: `_tokens` parsed without the plugin
            metadata = metadata or {}
            covered = end
            continue
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            inline = tokens[index[id(tok)] + 1]
            heading = heading_attributes(_plain(inline))[0] if id(tok) in written else _plain(inline)
            anchor = anchors[id(tok)]
            raw = "\n".join(lines[start:end]).strip()
            blocks.append(HeadingBlock(level, heading, anchor, raw))
            if level == 1 and not first_h1:
                first_h1 = heading
            gap(end, next_start)
            covered = next_start
            continue
        kind = _KINDS.get(tok.type, "other")
        body = "\n".join(lines[start:next_start]).rstrip().strip("\n")
        header_lines = 2 if kind == "table" else 0
        if kind != "code":
            body = without_data_payloads(body)
        if kind == "paragraph" and (grid_header := _grid_table_header(body)) is not None:
            kind, header_lines = "table", grid_header
        if tok.type != "html_block" and kind != "code" and not mdx:
            following = index[id(top[i + 1])] if i + 1 < len(top) else len(tokens)
            body = _without_inline_comments(body, tokens[index[id(tok)]:following])
        if tok.type == "html_block" and not mdx and only_comments(body):
            comment = ContentBlock(kind, body, header_lines)  # dropped below, unless the file has no other text
            comments.add(id(comment))
            blocks.append(comment)
            covered = next_start
            continue
        if tok.type == "html_block" and (html_heading := _html_heading(body)) is not None:
            level, heading, anchor, raw, rest = html_heading
            blocks.append(HeadingBlock(level, heading, anchor, raw))
            if level == 1 and not first_h1:
                first_h1 = heading
            body = rest
        if tok.type == "html_block" and not mdx and body.strip() and _unclosed_html_block(tok.content) is None:
            # (one never closed, which took in the rest of the file, stays as written: `truncation_warning`)
            from .parse_html import fragment_text  # (parse_html imports this module)

            # what a browser shows of it, not its markup; one that shows nothing (a logo, </details>) is dropped
            # below unless the file has nothing else, as a comment-only one is
            shown, shown_kind, header_lines = fragment_text(body)
            if not shown:
                blocks.append(markup := ContentBlock(kind, body))
                comments.add(id(markup))
                covered = next_start
                continue
            kind, body = shown_kind or kind, shown
        if body.strip():
            blocks.append(ContentBlock(kind, body, header_lines))
        covered = next_start
    if covered < len(lines):
        gap(covered, len(lines))
    blocks, unseen = _referenced_definitions(blocks, definitions)
    unseen |= comments
    if any(isinstance(b, ContentBlock) and id(b) not in unseen for b in blocks):
        blocks = [b for b in blocks if id(b) not in unseen]
    # else a file of comments alone (and headings without text) is stored as before: one stored so would fail
    # every re-cut

    return (fm_title or first_h1 or "").strip(), blocks, metadata


_COMMENT_END = re.compile(r"--!?>")
#: an element that shows its content as written, comments too
_SHOWS_RAW = re.compile(r"(?i)<(?:textarea|xmp|plaintext)\b")


def _ends_where_browsers_end(comment: str) -> bool:
    """Whether a browser ends this comment (as markdown-it read it) at its last character: at its first `-->` or
    `--!>`, `<!-->` and `<!--->` being empty ones."""
    if comment in ("<!-->", "<!--->"):
        return True
    end = _COMMENT_END.search(comment, 4)
    return end is not None and end.end() == len(comment)


def only_comments(html: str) -> bool:
    """Whether a raw HTML block holds HTML comments and blank space alone (`<!-- markdownlint-disable -->`, a
    licence header, a TODO): no reader sees it, and it had been stored, embedded and searched as its section's
    text (found by review). A comment ends at the first `-->` or `--!>`, as browsers end it; `<!-->` and
    `<!--->` are empty ones. One pass (a pattern had been quadratic on `<!--` never closed); a block with
    anything else in it (an element, text after a comment) stays whole, and MDX (no HTML comments) is left alone."""
    pos, n = 0, len(html)
    while True:
        while pos < n and html[pos].isspace():
            pos += 1
        if pos == n:
            return True
        if not html.startswith("<!--", pos):
            return False
        if html.startswith(">", pos + 4) or html.startswith("->", pos + 4):
            pos += 5 if html[pos + 4] == ">" else 6
            continue
        end = _COMMENT_END.search(html, pos + 4)
        if end is None:
            return False
        pos = end.end()


def _without_inline_comments(body: str, block: list[Token]) -> str:
    """``body`` (a paragraph, list, quote or table as written) without the HTML comments Markdown reads inline
    in it (``See <!-- TODO --> this.``): no reader sees them. Only when every ``<!--`` in the body opens one
    of those comments (none in a code span, an escape or a nested HTML block): each is then the next
    occurrence of its own text, so one pass removes exactly them; otherwise the body stays as written."""
    inline_html = [c.content for t in block if t.type == "inline" for c in t.children or () if c.type == "html_inline"]
    comments = [c for c in inline_html if c.startswith("<!--")]
    if not comments or body.count("<!--") != sum(c.count("<!--") for c in comments):
        return body
    if any(not _ends_where_browsers_end(c) for c in comments) or any(_SHOWS_RAW.match(c) for c in inline_html):
        return body  # a comment a browser ends sooner (at --!>: the rest is shown), one a <textarea> shows
    out: list[str] = []
    pos = 0
    for comment in comments:
        at = body.find(comment, pos)
        if at < 0:  # a comment split across a list item's or quote's line prefixes: leave the body whole
            return body
        before = body[pos:at]
        # one space of the two around it goes with the comment ("See <!-- x --> this." -> "See this.")
        if before.endswith((" ", "\t")) and body[at + len(comment):at + len(comment) + 1] in (" ", "\t", "\n", ""):
            before = before[:-1]
        out.append(before)
        pos = at + len(comment)
    out.append(body[pos:])
    return "".join(out)


#: a link reference definition's line, and a line that starts one whose label goes on over lines
_DEFINITION = re.compile(r" {0,3}\[((?:[^\]\\]|\\.){1,999})\]:")
_LABEL_START = re.compile(r" {0,3}\[")
#: a bracketed text, a link's or a reference's label ([text][label], [label][], [label])
_BRACKETED = re.compile(r"\[((?:[^\[\]\\]|\\.){1,999})\]")


def _referenced_definitions(blocks: list[Block], definitions: set[int]) -> tuple[list[Block], set[int]]:
    """(blocks, ids of blocks no reader needs): each block of link reference definitions (ids in
    ``definitions``) cut to the definitions its own section's text references (``[text][label]``, ``[label][]``,
    ``[label]``; labels compared case and spacing aside, as CommonMark matches them), or, when it references none,
    left whole and named in the set: no reader sees a definition, and a page's list of them had been its last
    section's text (found by review)."""
    out: list[Block] = []
    unseen: set[int] = set()
    start = 0
    for end in [*(i for i, b in enumerate(blocks) if isinstance(b, HeadingBlock)), len(blocks)]:
        own = [b.text for b in blocks[start:end] if isinstance(b, ContentBlock) and id(b) not in definitions]
        if start and isinstance(heading := blocks[start - 1], HeadingBlock):
            own.append(heading.raw)  # a reference in the heading (`# [Docs][d]`)
        # every bracketed text of the section, once (a search of its text per definition had been quadratic),
        # as markdown-it matches labels (its case folding: [ı] is [I])
        labels = {normalizeReference(m) for text in own for m in _BRACKETED.findall(text)}
        for b in blocks[start:end + 1]:  # the section's blocks, then the heading that ends it
            if id(b) not in definitions:
                out.append(b)
                continue
            kept: list[str] = []
            keep = False
            for line in b.text.split("\n"):  # a definition's title may follow on its next line
                if (m := _DEFINITION.match(line)) is not None:
                    label = normalizeReference(m.group(1))
                    # a footnote ([^1]: https://..., which CommonMark reads as a definition) is text where it is
                    keep = label.startswith("^") or label in labels
                elif _LABEL_START.match(line) is not None:  # a label over lines ([Foo\nbar]: /url): kept, unread
                    keep = True
                if keep:
                    kept.append(line)
            if kept:
                out.append(ContentBlock("other", "\n".join(kept)))
            else:
                out.append(b)
                unseen.add(id(b))
        start = end + 1
    return out, unseen


#: a heading's attribute block at its end, as Pandoc, kramdown, Docusaurus, Hugo and MkDocs read it ({#id .class
#: key=value}, {-} for unnumbered), or Obsidian's block id (^id)
_ATTRIBUTE = r"(?:#[\w:.-]+|\.[\w-]+|[\w-]+=(?:\"[^\"]*\"|'[^']*'|[^\s}]+)|-)"
_HEADING_ATTRIBUTES = re.compile(rf"\s+\{{\s*({_ATTRIBUTE}(?:\s+{_ATTRIBUTE})*)\s*\}}\s*$"
                                 r"|\s+\^(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9-]+\s*$")  # ^2 is a power, no id


def _attributes_written(heading_open: Token, lines: list[str]) -> bool:
    """Whether the heading's source ends with an attribute block: not one in a code span (`{#id}` explained in
    a README), escaped (\\{#x}) or in emphasis, which its text ends with too."""
    if heading_open.map is None:
        return False
    source = lines[heading_open.map[0]:heading_open.map[1]]
    if heading_open.markup in ("=", "-"):  # setext: the underline is no text
        source = source[:-1]
    text = re.sub(r"[ \t]+#+[ \t]*$", "", "\n".join(source).rstrip())  # an ATX closing sequence
    return _HEADING_ATTRIBUTES.search(text) is not None


def heading_attributes(text: str) -> tuple[str, str | None]:
    """(a heading's text without its attribute block, the id that block gives, or None).

    `## Deletion requests {#gdpr-erasure}` is a heading "Deletion requests" at #gdpr-erasure on every page
    those tools render (not on GitHub, which shows the braces): the block had been kept in the heading path
    and slugged into an anchor no page has (deletion-requests-gdpr-erasure)."""
    m = _HEADING_ATTRIBUTES.search(text)
    if m is None or not text[:m.start()].strip():
        return text, None
    own_id = next((a[1:] for a in re.findall(_ATTRIBUTE, m.group(1) or "") if a.startswith("#")), None)
    return text[:m.start()].rstrip(), own_id


#: a data: URI's base64 payload (an image Google Docs' Markdown export writes as a link definition): no text, and
#: split into tokens (+ and / separate them) it had made hundreds of sections that outranked real answers
# (a payload wrapped over lines goes on with lines of base64 alone, 40 characters or more: the words after one
# are not taken; the bounded media type keeps a long run after "data:" from backtracking)
_DATA_PAYLOAD = re.compile(r"(data:(?:[\w.+-]{1,127}/[\w.+-]{1,127})?(?:;[\w.+-]{1,127}=[\w.+-]{1,127})*;base64,)"
                           r"([A-Za-z0-9+/=]+(?:[ \t]*\n[ \t]*[A-Za-z0-9+/=]{40,}(?=[ \t]*(?:\n|$)))*)")


def without_data_payloads(text: str) -> str:
    """The text with each data: URI's base64 payload (64 base64 characters or more) shown as "…"."""
    if "base64," not in text:
        return text
    return _DATA_PAYLOAD.sub(lambda m: m.group(1) + "…" if sum(map(len, m.group(2).split())) >= 64 else m.group(0),
                             text)


_GRID_BORDER = re.compile(r"\+(?:[-=:]+\+)+\s*")


def _grid_table_header(body: str) -> int | None:
    """A Pandoc grid table's header lines (through its +===+ line; 0 when it has none), or None if ``body`` is none.

    CommonMark reads a grid table as a paragraph, which was cut by sentences mid-row and lost its header."""
    rows = body.split("\n")
    if len(rows) < 3 or not _GRID_BORDER.fullmatch(rows[0]) or not _GRID_BORDER.fullmatch(rows[-1]):
        return None
    if any(not row.startswith(("+", "|")) for row in rows):
        return None
    return next((i + 1 for i, row in enumerate(rows) if i and _GRID_BORDER.fullmatch(row) and "=" in row), 0)


_HTML_HEADING = re.compile(r"\s*<h([1-6])(\s[^>]*)?>(.*?)</h\1\s*>", re.IGNORECASE | re.DOTALL)
_HTML_ID = re.compile(r"""\sid\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)


def _html_heading(body: str) -> tuple[int, str, str | None, str, str] | None:
    """(level, text, id, its source, the rest) of an HTML block that opens with a heading with text, else None.

    A converter's (Confluence's) or a README's `<h2 id="x">Handover</h2>` is a heading on the page; as an HTML
    block it had been content of the section before. The rest of the block stays content, as written."""
    m = _HTML_HEADING.match(body)
    if m is None:
        return None
    from bs4 import BeautifulSoup

    text = re.sub(r"\s+", " ", BeautifulSoup(m.group(3), "html.parser").get_text()).strip()
    if not text:  # a logo: <h1 align="center"><img ...></h1>
        return None
    found = _HTML_ID.search(m.group(2) or "")
    own_id = next((g for g in found.groups() if g), None) if found else None
    return int(m.group(1)), text, own_id, m.group(0).strip(), body[m.end():].strip("\n")


_RAW_HTML_OPEN = re.compile(r"\s*<(script|pre|style|textarea)(?=[\s/>]|$)", re.IGNORECASE)
_RAW_HTML_CLOSE = re.compile(r"</(script|pre|style|textarea)>", re.IGNORECASE)  # any of them ends such a block
# CommonMark's other HTML blocks that only their end marker closes: opener, end marker, what it is
_MARKED_HTML = (("<!--", "-->", "an HTML comment (<!--)"), ("<?", "?>", "a processing instruction (<?)"),
                ("<![CDATA[", "]]>", "a CDATA section (<![CDATA[)"), ("<!", ">", "a declaration (<!)"))


def _unclosed_html_block(raw: str) -> str | None:
    """What an html_block token that runs to the end of the file is, if only its missing end marker would have
    ended it (CommonMark block types 1-5); None for blocks a blank line ends."""
    head = raw.lstrip()
    if opened := _RAW_HTML_OPEN.match(raw):
        return None if _RAW_HTML_CLOSE.search(raw) else f"a <{opened.group(1).lower()}> element"
    for opener, end, what in _MARKED_HTML:
        if head.startswith(opener):
            return None if end in head[len(opener):] else what
    return None


def truncation_warning(text: str) -> str | None:
    """A block that runs to the end of the file unclosed, named for the ingest report (the file is still stored).

    CommonMark reads everything after an unclosed code fence as code, and after
    an unclosed HTML comment, <script>/<pre>/<style>/<textarea>, <?...?>,
    <![CDATA[...]]> or <!DECLARATION> as raw HTML,
    so a file cut short or a lost closing line turns the rest of a document,
    headings included, into one block: valid Markdown, so nothing fails. TOML
    front matter is read as `parse_markdown` reads it, not as Markdown (a
    string in it holding ``` had been named an unclosed fence).
    """
    text = _toml_front_matter(text.replace("\r\n", "\n").replace("\r", "\n"))[2]
    lines = text.split("\n")
    last = len(lines)
    while last and not lines[last - 1].strip():
        last -= 1
    for tok in _tokens(text):
        if tok.type not in ("fence", "html_block") or tok.map is None or tok.map[1] < last:
            continue
        start, end = tok.map
        if tok.type == "fence":
            closer = re.sub(r"^[\s>]*", "", lines[end - 1]).rstrip() if end - 1 > start else ""  # in a quote: "> ```"
            char, n = tok.markup[:1], len(tok.markup)
            if closer.startswith(char * n) and closer.rstrip(char) == "":
                continue
            what, read_as = f"the code fence ({tok.markup})", "code"
        else:
            found = _unclosed_html_block(tok.content)
            if found is None:
                continue
            what, read_as = found, "raw HTML, not Markdown"
        rest = lines[start + 1:last]
        if not rest:  # opened on the last line: nothing after it is lost
            continue
        heads = sum(1 for line in rest if re.match(r" {0,3}#{1,6}(\s|$)", line))
        if len(rest) == 1:
            count, also, verb = "the line", " (a heading line)" if heads else "", "is"
        else:
            count, also, verb = f"the {len(rest)} lines", f", {heads} of them heading lines," if heads else "", "are"
        return (f"{what} opened at line {start + 1} is never closed: {count} after it{also} "
                f"{verb} read as {read_as} (the file may be truncated)")
    return None
