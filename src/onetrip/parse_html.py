"""HTML to neutral blocks, tuned for the DocBook output of the PostgreSQL manual.

Why a custom walk instead of get_text(): sections in that manual are `div`s
(sect1..5, refsect1..3, ...) whose titles sit in a `div.titlepage` or a direct
`h2`, and evidence is quoted against visible text, so inline markup must add no
spaces or line breaks while block elements must start new lines.

Rules:
* A section container is a `div` with one of SECTION_CLASSES. Its level is its
  nesting depth among containers (an outermost one sits below the last heading
  outside containers of a lower h-number than its title's: AsciiDoc's page <h1>;
  an untitled one, below the last such heading, and ended by the next heading;
  text after it goes back to the heading it is under);
  its anchor is its id, else an id or an
  `<a id|name>` in its title (DocBook's default stylesheets mark sections so),
  else the id of the innermost enclosing container (`refsynopsisdiv`: that is
  the source location of its text). Its title is the first heading in
  its leading `div.titlepage`/`div.refnamediv`/`<header>`/`<hgroup>` or a
  leading direct heading (elements without text before it, such as Sphinx's
  `<span id>`, and dropped ones, such as a `<nav>` breadcrumb, are skipped).
* Other h1-h6 outside content blocks are headings too: level = h-number when no
  container is open, else depth + (h-number - container title h-number);
  anchor = own id, else an `<a id|name>` inside, else the id of the HTML5
  `<section>`/`<article>` it is the first heading of, else the id or name of an
  empty `<a>`/`<span>` right before it (man2html, Doxygen, Texinfo), else a
  GitHub-style slug. A permalink (a link within the page whose text is ¶ § # 🔗,
  or any symbol when it links to the heading itself: MkDocs' icon, Doxygen's ◆)
  is not part of the heading's text; a symbol linking elsewhere is.
  In an untitled container the first such heading's h-number - 1 stands in
  for the title's, so its h2 and h3 still nest.
* Headings inside admonitions (note, tip, ...), tables, lists and the titlepage
  are content, as are `p.title` captions of tables/examples/figures; but an
  <ol> whose every item is one heading that is not all a link, and nothing
  else with text but such lists (how Google Docs and LibreOffice number
  headings), holds headings (the list's number is not kept).
* An unbracketed footnote mark (Pandoc's, LibreOffice's, docutils') is a word
  of its own, not glued to the word before it (or, a note's own mark, after).
* A heading's text ends where a heading or section container nested in it
  starts (lxml nests a heading left open in the one before it, as in
  `<h3>A<b>x<h3>B`), or where the content block holding that one starts (a
  list, table, admonition, pre, ...: it stays one block, its headings content,
  as anywhere else); that and all after it are read as if the outer heading
  had been closed there. A heading with no text of its own before it makes no
  section.
* A short lead (`_short_lead`: up to 100 characters, no heading) before the
  only heading an HTML5 `<section>`/`<article>` holds as a child is read after
  that heading (rustdoc's "since" version before each item's heading had gone
  to the item before); a longer one, or one before the first of several
  subheadings, stays the text of the heading before the section.
* Content that follows a nested container inside its parent (DocBook
  footnotes), or a nested HTML5 `<section>` inside a `<section>`/`<article>`
  that opened with a heading (bare, or in a `<header>`/`<hgroup>`), gets a
  repeated heading of the parent, so it is not attributed to the last subsection.
* A note written after the last section (footnotes, endnotes, comments of
  Google Docs, Word, LibreOffice, Pandoc, DocBook, docutils: the note and
  its mark of a few characters link to each other) is read at the end of
  its mark's section (`_place_notes`), unless it shares a table, list or
  quote with its mark, a heading follows it, or the notes have a heading
  of their own.
* A <nav> left open (more <nav> elements than the source has </nav>: the
  last outermost one, when no text follows it) keeps its text from its
  first <main>, <article> or <h1>, else the first heading, paragraph,
  table, pre or quote after a link outside a list (`_cut_open_navs`); it
  had taken in, and dropped, the rest of the page.
* Another element dropped as navigation, a footer or hidden (a table of
  contents <div>, a <footer>, a closed <dialog>, ...) that may have taken
  in the rest of the page (the source leaves an element of its tag open,
  no text follows it, and it holds text after its links) is still dropped,
  as which element of that tag is the open one cannot be told from lxml's
  tree (a fix that guessed kept closed sidebars as text, and was reverted),
  but the ingest report says so (`_open_dropped_warnings`).
* The page is <body>'s children, then what lxml left beside it (text after
  </body> or </html>, a second <body>'s), as HTML parsing moves it all into
  the one body a browser shows.
* Dropped (`_dropped`): head, script, style, <nav>, MathML's <annotation> (a
  formula's TeX source) and an aria-hidden copy drawn beside a formula's
  MathML (KaTeX, MathJax 2), what has role="navigation" or "contentinfo",
  a menu or toolbar (role) with no heading in it, a skip link no sentence
  quotes (`_in_sentence`) or a permalink glyph's link to the section it stands in
  (`_in_page_control`), a copy-to-clipboard button, mdBook's help popup,
  Node.js' pickers and rustdoc's top bar and toolbar, DROP_CLASSES (DocBook's navheader, navfooter and toc,
  Texinfo's tables of contents, Bootstrap's navbar, ...), an aria-hidden="true"
  dialog or icon (not one holding a heading or more than a few characters: a
  page saved with a dialog open hides its whole app so), a page's footer
  (<footer>, .footer, #footer with no article, section, main, quote, figure,
  cell, ... around it) and Texinfo's "Next: / Up:" bar (a div.header of links
  that are all rel=next, up, ... or have an accesskey, no heading, no other
  text than labels), breadcrumb trails (class or id breadcrumb(s),
  aria-label="breadcrumb"), Confluence's page metadata, the tables of contents
  of Word (p.MsoToc1-9), Confluence
  and Pandoc/LibreOffice (a div or section of id TOC, "Table of Contents1"),
  a paragraph that is one link to a heading of the page and nothing else
  (Google Docs' table of contents), and Word's hidden text (display:none
  with mso-hide:all) and symbol-font
  bullets (mso-list:Ignore of one character that is no digit, or of none
  that is a letter or digit). An empty heading outside containers makes no section
  unless it has an anchor (a link's target: then it heads what follows, as any
  heading does), and no container nests under it.
* Tables are one block: rows on lines (header rows first), cells joined " | ";
  their captions, and text inside them but outside any cell (browsers show it
  before the table), come first.

Every walk below is iterative, with an explicit stack: lxml nests each unclosed
inline tag (hundreds of `<b>` or `<font>` never closed) in the previous one, and
a recursive walk of such a page exceeded Python's recursion limit at a few
hundred levels, so the whole file was refused though browsers show it fine.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import re
import warnings
from html import unescape
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.element import CData, PreformattedString

from onetrip.parse_markdown import GithubSlugger
from onetrip.sections import MAX_LEVEL, Block, ContentBlock, HeadingBlock

SECTION_CLASSES = frozenset(
    "sect1 sect2 sect3 sect4 sect5 section simplesect chapter appendix preface "
    "refentry refsect1 refsect2 refsect3 refsynopsisdiv partintro part reference "
    "book set article index bibliography glossary "
    # Texinfo (makeinfo's HTML: the GNU manuals)
    "subsection subsubsection appendixsec appendixsubsec appendixsubsubsec "
    "unnumbered unnumberedsec unnumberedsubsec unnumberedsubsubsec".split()
)
# DocBook's navigation bars and toc; Texinfo's tables of contents (the page's, each chapter's), its 7's nav bar
# and its index-entry permalinks; Sphinx's and MkDocs' permalinks (a heading's, an API entry's ¶); Doxygen's
# breadcrumbs (and footer); a Bootstrap site menu (MkDocs); Javadoc's bars; the tables of contents of Word
# ("Save as Web Page": a paragraph per entry, its page number hidden) and of Confluence; breadcrumb trails, whose
# links ("Home > HR > Policies") had been the first section's text, and Confluence's page metadata ("Created by
# X, last modified on Y")
DROP_CLASSES = frozenset({"navheader", "navfooter", "toc", "Contents_element", "Overview_element", "section-toc",
                          "mini-toc", "nav-panel", "copiable-anchor", "copiable-link", "headerlink", "navpath",
                          "navbar", "topNav", "bottomNav", "subNav", "toc-macro", "MsoTocHeading",
                          *(f"MsoToc{n}" for n in range(1, 10)), "page-metadata",
                          # rustdoc: an open <details>' summary its style hides ("Expand description")
                          "hideme",
                          # Sphinx's viewcode links beside an API entry ("[source]") and back ("[docs]")
                          "viewcode-link", "viewcode-back"})
#: a breadcrumb trail's class or id (Bootstrap's ol.breadcrumb; Confluence's div#breadcrumb-section around
#: ol#breadcrumbs; many CMSs'), lowercased
_CRUMB_NAMES = frozenset({"breadcrumb", "breadcrumbs", "breadcrumb-section", "rustdoc-breadcrumbs"})
#: what a breadcrumb trail is written as: a section, article or heading of that id is text (a chapter on
#: breadcrumbs), and so is a <span> (inline in a sentence: "choose <span class=breadcrumb>Settings > Users</span>")
_CRUMB_TAGS = frozenset({"ol", "ul", "div", "p"})
#: ids of a table of contents: Pandoc's (HTML 4 output, a div; HTML5's is a <nav>), LibreOffice's "Table of Contents1"
_TOC_IDS = re.compile(r"TOC|Table of Contents\d*")
#: other spellings of a table of contents' id (npm's section#table_of_contents, "toc"), which a section about tables
#: of contents (docutils' section#table-of-contents, "TOC: total cost of ownership") has too: taken when it holds
#: links within the page and no other text than one heading (`_links_alone`)
_TOC_IDS_LOOSE = re.compile(r"(?i)_?(?:toc|table[ _-]?of[ _-]?contents)\d*")
DROP_TAGS = frozenset({"head", "title", "script", "style", "noscript", "template", "nav",
                       # rustdoc's custom elements: the narrow screen's top bar (the item's name again, as an
                       # <h2> that had joined the page's title) and the toolbar
                       "rustdoc-topbar", "rustdoc-toolbar"})
#: the ids of generators' hidden help panels: mdBook's keyboard-shortcut popup (its "Keyboard shortcuts"
#: section had been on every page of a book, and the top hits of a search about shortcuts)
_DROP_IDS = frozenset({"mdbook-help-container",
                       # Node.js' API pages: the header's pickers (this page's contents, every module, other
                       # versions, options), which had been each page's first sections
                       "gtoc"})
#: ARIA landmarks that are around a page's text: its navigation, its footer (Sphinx's)
_LANDMARK_ROLES = frozenset({"navigation", "contentinfo"})
#: ARIA widgets that are an application's controls, not a page's text: menus (mdBook's theme list), toolbars
_WIDGET_ROLES = frozenset({"menu", "menubar", "toolbar"})
#: a link that skips to the page's content or past its navigation, for keyboard users ("Skip to main content")
_SKIP_LINK = re.compile(r"(?i)\s*(?:skip|jump)\s+(?:to|over|past)\s+(?:the\s+)?(?:main\s+)?"
                        r"(?:content|navigation|nav|menu|main)\b.{0,20}")
#: a button that copies to the clipboard (rustdoc's "Copy item path", Docusaurus', MkDocs'): a control's label
#: or class (not a question that mentions copying: "Can I copy my licence?")
_COPY_BUTTON = re.compile(r"(?i)\s*copy\b|.*clipboard")
_COPY_CLASS = re.compile(r"(?i)(?:copy|clipboard|copy-to-clipboard|md-clipboard)(?:[-_]?(?:btn|button|icon|code))?"
                         r"|(?:btn|button)[-_]?(?:copy|clipboard)")  # (fullmatch: not "copyright", "body-copy")
# in <math>, a formula's source (TeX), which browsers never render: KaTeX's and Wikipedia's formulas had been
# stored as "x+y" then "x+y" again or "{\displaystyle x+y}"
_MATH_SOURCE = frozenset({"annotation", "annotation-xml"})
HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_HEADING_SET = frozenset(HEADINGS)

# div classes that are one content block: headings inside them are not sections
_BLOCK_DIV_KINDS = {
    "note": "other",
    "tip": "other",
    "warning": "other",
    "caution": "other",
    "important": "other",
    "sidebar": "other",
    "titlepage": "other",
    "bibliodiv": "other",
    "indexdiv": "other",
    "blockquote": "quote",
}
_BLOCK_TAG_KINDS = {
    "p": "paragraph",
    "address": "paragraph",
    "figcaption": "paragraph",
    "caption": "paragraph",
    "dt": "paragraph",
    "dd": "paragraph",
    "li": "paragraph",
    "pre": "code",
    "ul": "list",
    "ol": "list",
    "dl": "list",
    "menu": "list",
    "blockquote": "quote",
}
# elements that start a new line inside a block
_BREAKING = frozenset(
    "p div pre li dd dt ul ol dl menu table thead tbody tfoot tr td th caption "
    "blockquote h1 h2 h3 h4 h5 h6 hr br section article aside header footer main "
    "figure figcaption address details summary form fieldset center".split()
)
_HTML5_SECTIONS = frozenset({"section", "article"})
_PARAGRAPH_BREAK = frozenset({"p", "li", "dt"})  # blank line: preferred split points
_WS = re.compile(r"\s+")


def _classes(tag: Tag) -> list[str]:
    value = tag.get("class")
    if value is None:
        return []
    return value if isinstance(value, list) else str(value).split()


#: the rel of the links in a page's "Next: / Previous: / Up:" bar (Texinfo's div.header)
_NAV_RELS = frozenset({"next", "prev", "previous", "up", "contents", "index", "top", "first", "last"})
#: what a nav bar holds besides its links: labels and separators
# (a word or two before a colon: the bar's labels in any language Texinfo writes, "Suivant:", "Nächste:")
_NAV_LABELS = re.compile(r"(?i)\b(?:next|previous|prev|up|top|home|contents|index)\b|[^\W\d_]+(?: [^\W\d_]+)?\s*:"
                         r"|[\s:,;|\[\]()<>«»←→↑·•-]+")
#: where a <footer> is its own content's (HTML: a footer belongs to its nearest sectioning root or content)
# (not a table cell: old pages lay out their footer in one)
_MAIN_CONTENT = frozenset({"article", "section", "main", "aside", "nav", "blockquote", "figure", "details",
                           "dialog", "fieldset", "li", "dd"})


def _dropped(tag: Tag) -> bool:
    """What the page shows around its text rather than as it: navigation, page footers, what is hidden.

    role="navigation" is <nav> written as an ARIA landmark (Sphinx's related bar and sidebar, Node.js's
    <details role="navigation" id="toc">), role="contentinfo" a page footer (Sphinx's); aria-hidden="true"
    is what a screen reader skips (a closed dialog, icons); a <dialog> without `open`, or a dialog or modal
    marked `hidden`, is what no one sees until a script shows it. Their links and lines ("Last updated ...", which
    changes on every build) had been kept as sections' text.
    """
    if tag.name in DROP_TAGS or (tag.name in _MATH_SOURCE and tag.find_parent("math") is not None):
        return True
    if (tag.name in ("div", "section") and _TOC_IDS.fullmatch(str(tag.get("id", "")))) or _word_hidden(tag):
        return True
    if tag.name in ("div", "section") and _TOC_IDS_LOOSE.fullmatch(str(tag.get("id", ""))) and _links_alone(tag):
        return True
    classes = _classes(tag)
    if tag.name in _CRUMB_TAGS and _breadcrumb(tag, classes):
        return True
    if not DROP_CLASSES.isdisjoint(classes) or tag.get("role") in _LANDMARK_ROLES or tag.get("id") in _DROP_IDS:
        return True
    if tag.get("role") in _WIDGET_ROLES and not _heading_near(tag):  # a menu or toolbar with no heading in it
        return True
    if tag.name == "a" and str(tag.get("href", "")).startswith("#") and _in_page_control(tag):
        return True
    if tag.name == "a" and "src" in classes and tag.get_text().strip() == "Source":  # rustdoc's link to the code,
        return True  # beside each item's heading: "Source" had opened every item's text
    if tag.name == "button" and (any(_COPY_BUTTON.match(str(tag.get(a, ""))) for a in ("title", "aria-label"))
                                 or any(_COPY_CLASS.fullmatch(c) for c in classes)):
        return True
    if tag.name == "dialog" and not tag.has_attr("open"):  # a closed <dialog> shows only when a script opens it
        return True
    if tag.get("aria-hidden") == "true" and (_hidden_aside(tag, classes) or _drawn_formula(tag)):
        return True
    # a `hidden` dialog or modal (not "until-found", which find-in-page opens); any other hidden element is
    # kept: an accordion's answer, however short ("Yes, up to 3 users."), is what a reader opens it for
    if tag.has_attr("hidden") and str(tag.get("hidden")).lower() != "until-found" and _dialog(tag, classes):
        return True
    if tag.name == "footer" or "footer" in classes or tag.get("id") == "footer":
        return not _in_main_content(tag)  # a page's footer; an article's or a quote's own <footer> is its text
    return "header" in classes and tag.name == "div" and _nav_bar(tag)


_HEADING_HOLDERS = frozenset({"header", "hgroup"})
#: `_short_lead`'s bounds: the characters of a lead, and the nodes read to find them
_LEAD_CHARS, _LEAD_NODES = 100, 32


def _short_lead(children: list[PageElement]) -> int | None:
    """The index of the heading an HTML5 section opens with after a short lead (rustdoc's "1.46.0 · Source", a
    date, a badge: at most `_LEAD_CHARS` characters in at most `_LEAD_NODES` nodes, no heading or section in it),
    when it is the section's only heading child; else None. A longer lead, or one before the first of several
    subheadings, is the text of the heading before the section, as a browser's reader takes it (a review: a
    section's intro had gone under its first subheading). Bounded, so nested sections cost no square."""
    chars = nodes = 0
    for i, child in enumerate(children):
        if isinstance(child, Tag):
            # the heading, bare or in a <header>/<hgroup> (HTML5 themes: <article><time>..</time><header><h2>)
            if child.name in _HEADING_SET or (child.name in _HEADING_HOLDERS and _heading_near(child)):
                later = any(isinstance(c, Tag) and (c.name in _HEADING_SET or c.name in _HEADING_HOLDERS)
                            for c in children[i + 1:])
                return i if i > 0 and not later else None
            if child.name in _HTML5_SECTIONS or child.name in _HEADING_HOLDERS:
                return None
            # (text of what is dropped in it counts: a lead less)
            for node in itertools.chain((child,), _first_nodes(child, _LEAD_NODES + 1)):
                nodes += 1
                if nodes > _LEAD_NODES or (isinstance(node, Tag) and node.name in _HEADING_SET):
                    return None
                if not isinstance(node, Tag) and _is_text(node):
                    chars += len(str(node).strip())
        elif _is_text(child):
            chars += len(str(child).strip())
        if chars > _LEAD_CHARS:
            return None
    return None


def _in_page_control(a: Tag) -> bool:
    """A link within the page that is no text: a permalink's glyph alone linking to the section it stands in
    (rustdoc's `§` beside an item's heading, outside it; a `§` linking elsewhere is a reference's), or a skip
    link ("Skip to main content") that no sentence quotes (`_in_sentence`)."""
    text = a.get_text().strip()
    if text in _PERMALINK_GLYPHS:
        target = str(a.get("href", ""))[1:]
        return bool(target) and any(p.get("id") == target for p in itertools.islice(a.parents, 4)
                                    if p.name in _HTML5_SECTIONS)  # (its own section, a few levels up at most)
    return _SKIP_LINK.fullmatch(text) is not None and not _in_sentence(a)


#: the nodes `_links_alone` and `_heading_near` read of an element at most: what they decide is
#: checked again on each element of a nested chain, so an unbounded read was quadratic (3,000 nested div#toc: 25 s)
_NEAR_NODES = 1000
_HEADING_NODES = 200
#: the elements a sentence is written in: a skip link in one is quoted, not one to follow
_SENTENCE_TAGS = frozenset({"p", "li", "td", "th", "dd", "dt", "blockquote", "figcaption", "caption", "label",
                            *HEADINGS})


def _first_nodes(tag: Tag, most: int) -> Iterator[PageElement]:
    """The first ``most`` nodes under ``tag``, in document order (an explicit stack: bs4's .descendants first
    walks to the subtree's end, which made every bounded read as long as the subtree)."""
    stack = list(reversed(tag.contents))
    for _ in range(most):
        if not stack:
            return
        node = stack.pop()
        yield node
        if isinstance(node, Tag):
            stack.extend(reversed(node.contents))


def _links_alone(tag: Tag) -> bool:
    """Whether an element holds links and no other letters than, at most, one heading's (numbers and marks
    aside): a table of contents, not a section about one. One of over `_NEAR_NODES` nodes is kept as text."""
    nodes = list(_first_nodes(tag, _NEAR_NODES + 1))
    if len(nodes) > _NEAR_NODES:
        return False
    links = headings = other = 0
    for node in nodes:
        if isinstance(node, Tag):
            if node.name == "a" and node.get("href"):
                links += 1
            elif node.name in _HEADING_SET:
                headings += 1
        elif _is_text(node) and any(ch.isalpha() for ch in str(node)) and \
                not any(p.name == "a" or p.name in _HEADING_SET for p in itertools.takewhile(
                    lambda up: up is not tag, node.parents)):
            other += 1
    return links > 0 and headings <= 1 and other == 0


def _heading_near(tag: Tag) -> bool:
    """Whether a heading is among the first `_HEADING_NODES` nodes under ``tag``, in document order: a toolbar
    that opens with its title, a <header> holding its section's. Only so far: each of a nested chain had been
    read 1,000 nodes deep (review: 20,000 nested menus, 5.8 s); a menu with no heading near its start is
    dropped whole, and nothing in it is read again."""
    return any(isinstance(n, Tag) and n.name in _HEADING_SET for n in _first_nodes(tag, _HEADING_NODES))


def _in_sentence(a: Tag) -> bool:
    """Whether a link stands in a paragraph, list item, cell or heading (up to a few inline elements up): a
    sentence quotes it. A skip link stands in the body or a layout <div> (WordPress: div#page, beside the header)."""
    for up in itertools.islice(a.parents, 8):
        if up.name in _SENTENCE_TAGS:
            return True
        if up.name in _BREAKING or up.name in _ROOTS:
            return False
    return False


def _breadcrumb(tag: Tag, classes: list[str]) -> bool:
    """A breadcrumb trail ("Home > HR > Policies"): by its class, id, aria-label or schema.org type, holding no
    heading (a review: an element of id "breadcrumbs" had also been a section about them, which was lost)."""
    named = str(tag.get("id", "")).lower() in _CRUMB_NAMES or any(c.lower() in _CRUMB_NAMES for c in classes) \
        or "breadcrumb" in str(tag.get("aria-label", "")).lower() or "BreadcrumbList" in str(tag.get("itemtype", ""))
    return named and tag.find(HEADINGS) is None


def _dialog(tag: Tag, classes: list[str]) -> bool:
    return tag.get("role") in ("dialog", "alertdialog") or "modal" in classes


def _hidden_aside(tag: Tag, classes: list[str]) -> bool:
    """An aria-hidden element that is no content: a closed dialog (role="dialog", a "modal"), or one with no
    heading and a few characters of text (an icon, a glyph, a decorative copy). aria-hidden only hides from
    screen readers: a page saved with a dialog open marks its whole app so, and an accordion its closed
    answers, which a reader opens."""
    if _dialog(tag, classes):
        return True
    return tag.find(HEADINGS) is None and len(tag.get_text().strip()) <= 20


def _word_hidden(tag: Tag) -> bool:
    """Word's hidden text (display:none;mso-hide:all: drafting notes, a TOC entry's page number), which no browser
    shows (mso-hide alone hides from Outlook only: an e-mail's "Pay online" link), and a list item's bullet drawn
    from a symbol font (mso-list:Ignore holding one character that is no digit: '§' or 'Ø' in Wingdings, '·' in
    Symbol, 'o' in Courier New), which had led headings ('§ Gifts') and their slugs; a numbered label ("1.1",
    "a)") stays, as shown."""
    style = tag.get("style")
    if not style or "mso-" not in style:
        return False
    style = style.replace(" ", "").lower()
    if "mso-hide:all" in style and "display:none" in style:
        return True
    if "mso-list:ignore" not in style:
        return False
    label = tag.get_text().replace("\xa0", " ").strip()
    return not any(c.isalnum() for c in label) or (len(label) == 1 and not label.isdigit())


def _note_mark(tag: Tag) -> bool:
    """A footnote's mark as generators write it unbracketed (Pandoc's footnote-ref, LibreOffice's sdfootnoteanc,
    docutils' footnote-reference, role="doc-noteref"): read glued to the word before it ("ombudsman.1",
    "carried1"), that word was lost to lexical search; it is a word of its own."""
    if tag.name != "a":
        return False
    return tag.get("role") == "doc-noteref" or not _NOTE_MARK_CLASSES.isdisjoint(_classes(tag))


_NOTE_MARK_CLASSES = frozenset({"footnote-ref", "sdfootnoteanc", "sdendnoteanc", "footnote-reference"})
#: a note's own mark, before the note's text (LibreOffice): glued to its first word ("1The ombudsman ...")
_NOTE_SYM_CLASSES = frozenset({"sdfootnotesym", "sdendnotesym"})


def _listed_headings(tag: Tag, has_text: Callable[[Tag], bool]) -> list[PageElement] | None:
    """What to walk of a numbered list that only numbers headings, else None.

    Google Docs and LibreOffice number a heading by putting it in an item of an <ol> (Google: one list per
    heading; LibreOffice: the next level's <ol> in the item, or in the list); as content (headings in lists
    are), a numbered policy had become one section without a heading. A browser shows them as headings,
    after the list's number, which is not kept. Each item holds one heading, besides nothing with text (an
    empty <p>, an <a name>) and such lists; a heading that is all one link is a card or a link list's item
    (Related articles), whose list stays content."""
    if tag.name != "ol":
        return None
    nodes: list[PageElement] = []
    for item in tag.children:
        if isinstance(item, NavigableString):
            if _is_text(item) and item.strip():
                return None
            continue
        if item.name == "ol":
            if _listed_headings(item, has_text) is None:
                return None
            nodes.append(item)
            continue
        if item.name != "li" or _dropped(item):
            return None
        headings = 0
        for child in item.children:
            if isinstance(child, NavigableString):
                if _is_text(child) and child.strip():
                    return None
                continue
            if child.name in _HEADING_SET:
                text = _collapse(child.get_text())
                if any(_collapse(a.get_text()) == text for a in child.find_all("a", href=True)):
                    return None
                headings += 1
            elif child.name == "ol":
                if _listed_headings(child, has_text) is None:
                    return None
            elif _has_text(child, has_text):
                return None
            nodes.append(child)
        if headings != 1:
            return None
    return nodes or None


def _drawn_formula(tag: Tag) -> bool:
    """An aria-hidden element beside a formula's MathML: the copy drawn for the eye (KaTeX's katex-html, MathJax
    2's mjx-math), whose MathML is read; stored too, the formula came twice. KaTeX's HTML-only output has no
    MathML beside it, and is kept."""
    parent = tag.parent
    return parent is not None and any(isinstance(sibling, Tag) and sibling is not tag
                                      and (sibling.name == "math" or sibling.find("math") is not None)
                                      for sibling in parent.children)


def _in_main_content(tag: Tag) -> bool:
    up = tag.parent
    while up is not None:
        if up.name in _MAIN_CONTENT or up.get("role") == "main":
            return True
        up = up.parent
    return False


def _nav_bar(tag: Tag) -> bool:
    """A bar of links to the next, previous and enclosing pages (Texinfo's div.header before each node: "Next:
    Definitions, Up: Bash Features [Contents][Index]"), which had been each section's first line of text and,
    being text, hid the title after it: every link a nav link (rel next, up, ... or an accesskey), no heading,
    and no text outside the links but labels and separators (a header holding a title and a byline is kept)."""
    links = tag.find_all("a")
    if not links or tag.find(HEADINGS) is not None or not all(
            a.get("accesskey") or not _NAV_RELS.isdisjoint(str(a.get("rel") or "").lower().split()) for a in links):
        return False
    rest = "".join(str(t) for t in tag.find_all(string=True) if _is_text(t) and t.find_parent("a") is None)
    return not _NAV_LABELS.sub("", rest)


def _is_container(tag: Tag) -> bool:
    return tag.name == "div" and not SECTION_CLASSES.isdisjoint(_classes(tag))


def _sectioning(tag: Tag) -> bool:
    """A heading or section container: what starts a section of its own wherever it is met."""
    return tag.name in _HEADING_SET or _is_container(tag)


def _content_block(tag: Tag) -> bool:
    """What `_Walker.node` reads as one content block, headings inside it included."""
    if _is_container(tag):
        return False
    return (tag.name == "table" or tag.name in _BLOCK_TAG_KINDS
            or (tag.name == "div" and _Walker.block_div_kind(tag) is not None))


def _heading_text(tag: Tag, targets: frozenset[str] = frozenset()) -> tuple[str, Tag | None, Iterator[PageElement]]:
    """A heading's own text, up to the first heading or section container nested in it, or to the outermost
    content block inside it that holds that one (whose headings are content, as anywhere else); that element
    (None: none), and it with all after it inside the heading (`_flat_text_until`)."""
    text, nested, rest = _flat_text_until(tag, _sectioning)
    block = None
    up = nested.parent if nested is not None else None
    while up is not None and up is not tag:
        if _content_block(up):
            block = up
        up = up.parent
    if block is not None:
        text, nested, rest = _flat_text_until(tag, lambda t: t is block)
    return _without_permalink(tag, text, targets), nested, rest


def _is_glyph(text: str) -> bool:
    """A few characters, none a letter or digit: a permalink's symbol, not a word."""
    return 0 < len(text) <= 3 and not any(ch.isalnum() for ch in text)


#: what documentation generators put in a link from a heading to itself: Sphinx and MkDocs ¶, rustdoc §,
#: Node's docs and many static sites #, some 🔗
_PERMALINK_GLYPHS = frozenset({"\u00b6", "\u00a7", "#", "\U0001f517"})


def _without_permalink(tag: Tag, text: str, targets: frozenset[str] = frozenset()) -> str:
    """The heading's text without its permalink (`Install¶`, `Macros§`, `os.cpus()#`, Doxygen's
    `◆ CharReaderBuilder()`, an icon font's private-use character): a link within the page whose text is
    one of the usual glyphs, or any symbol when it links to the heading itself (``targets``: its own id,
    the ids it or the empty anchor before it carries, its section's), is not one of the heading's words,
    and it went into heading paths, embedding texts and slugs. A symbol linking elsewhere stays (`<=>` in
    "Comparison with <=>", linking to the operators' table)."""
    if text[-1:].isalnum() and text[:1].isalnum():
        return text
    for a in tag.find_all("a", href=True):
        if any(_dropped(x) for x in (a, *itertools.takewhile(lambda up: up is not tag, a.parents))):
            continue  # not in the text (an aria-hidden or headerlink permalink): a glyph it ends with is its own
        glyph = a.get_text().strip()
        href = str(a["href"])
        if (_is_glyph(glyph) and href.startswith("#") and len(glyph) < len(text)
                and (glyph in _PERMALINK_GLYPHS or href[1:] in targets
                     or href[1:] == GithubSlugger.slug(text.replace(glyph, "").strip()))):  # its slug: no id
            # where the link sits, not which end the glyph matches: "# Learn C#" (VuePress's leading link)
            # had lost the heading's own "#"
            if text.startswith(glyph) and not _text_before(tag, a).strip():
                text = text[len(glyph):].lstrip()
            elif text.endswith(glyph):
                text = text[: -len(glyph)].rstrip()
            elif text.startswith(glyph):
                text = text[len(glyph):].lstrip()
    return text


def _text_before(tag: Tag, inner: Tag) -> str:
    """The text of ``tag`` before ``inner``, an element in it."""
    parts: list[str] = []
    for string in tag.find_all(string=True):
        if inner in string.parents:
            break
        parts.append(str(string))
    return "".join(parts)


def _is_text(node: PageElement) -> bool:
    return isinstance(node, NavigableString) and not isinstance(node, PreformattedString)


def _collapse(text: str) -> str:
    return _WS.sub(" ", text).strip()


class _Text:
    """Accumulates visible text: collapses whitespace outside <pre>, tracks line breaks."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pending = 0  # newlines owed before the next text
        self.line_start = True
        self.glued = False  # after a <dt>: one newline at most before the next text, its definition's

    def after_opening(self) -> bool:
        """Whether the text so far ends with an opening bracket (or nothing): a note's mark needs no space there."""
        return not self.parts or self.parts[-1][-1:] in _OPENING

    def add(self, text: str, pre: bool = False) -> None:
        if not pre:
            text = _WS.sub(" ", text)
            if self.line_start or self.pending or (self.parts and self.parts[-1].endswith(" ")):
                text = text.lstrip(" ")
            if not text:
                return
        elif not text:
            return
        if self.pending and self.parts:
            self.parts[-1] = self.parts[-1].rstrip(" ")
            self.parts.append("\n" * self.pending)
        self.pending = 0
        self.glued = False
        self.parts.append(text)
        self.line_start = text.endswith("\n")

    def newline(self, n: int = 1) -> None:
        if self.parts:
            self.pending = max(self.pending, min(n, 1) if self.glued else n)
        self.line_start = True

    def glue(self) -> None:
        """End a line that belongs with the next text (a term with its definition): no blank line, a preferred
        split point, comes between them (the manual's parameter names had ended one part, their definitions
        starting the next without naming them: 705 of its 6,124 part boundaries; found by review)."""
        self.newline(1)
        self.glued = True

    def value(self, keep_indent: bool = False) -> str:
        text = "".join(self.parts)
        return text.strip("\n").rstrip() if keep_indent else text.strip()

    def __bool__(self) -> bool:
        return any(p.strip() for p in self.parts)


def _flat_text(tag: Tag, *, cell: bool = False) -> str:
    """Text of a table cell on one line: block boundaries become spaces. With ``cell``, the rows and cells
    nested in it outside any table inside it are left out: they are its table's own (an unclosed <div> in a
    cell holds the rest of the table under lxml; browsers close the cell), which `_own_rows` reads."""
    return _flat_text_until(tag, None, cell=cell)[0]


def _flat_text_until(tag: Tag, stop: Callable[[Tag], bool] | None, *,
                     cell: bool = False) -> tuple[str, Tag | None, Iterator[PageElement]]:
    """`_flat_text` of ``tag`` up to its first descendant that ``stop`` accepts; that descendant (None when there
    is none), and it with every node after it inside ``tag``, in document order."""
    out: list[str] = []
    # open elements: (their remaining children, what to add when they end, whether a table inside tag holds them)
    stack: list[tuple[Iterator[PageElement], str, bool]] = [(iter(tag.contents), "", False)]
    while stack:
        children, after, in_table = stack[-1]
        for child in children:
            if isinstance(child, Tag):
                if _dropped(child) or (cell and not in_table and child.name in _ROW_OR_CELL):
                    continue
                if stop is not None and stop(child):  # the rest: it, its following siblings, then each open element's
                    # (a block element's end marked: `<h2>A<div><h3>B</h3>tail</div>more` read 'tailmore')
                    return (_collapse("".join(out)), child,
                            itertools.chain((child,), *(itertools.chain(it, (_BLOCK_END,)) if after else it
                                                        for it, after, _ in reversed(stack))))
                breaking = child.name in _BREAKING
                if breaking or (_note_mark(child) and out and out[-1][-1:] not in _OPENING):
                    out.append(" ")
                stack.append((iter(child.contents), " " if breaking else "", in_table or child.name == "table"))
                break  # read the child's content first
            elif _is_text(child):
                out.append(str(child))
        else:
            stack.pop()
            out.append(after)
    return _collapse("".join(out)), None, iter(())


_TABLE_PARTS = frozenset({"thead", "tbody", "tfoot", "tr"})
#: what the table's loose text leaves out: its cells and captions, read on their own. A <colgroup> is no more
#: than any wrapper: left open (its end tag is optional), lxml puts what follows in it, which a browser shows
#: before the table (text) or after it (a table); skipped, that had been lost
_NOT_FOSTERED = frozenset({"td", "th", "caption"})


_DONE = object()

#: in the nodes `_flat_text_until` leaves to walk: where a block element open at the stop ends (`_Walker.node`
#: ends the loose text there, as a block's end does)
_BLOCK_END = NavigableString("")


def _preorder(root: Tag, descend: Callable[[Tag], bool]) -> Iterator[PageElement]:
    """Every node under ``root`` in document order, entering an element only where ``descend`` says so;
    iterative (an explicit stack), so nesting depth costs no Python stack."""
    stack: list[Iterator[PageElement]] = [iter(root.contents)]
    while stack:
        child = next(stack[-1], _DONE)
        if child is _DONE:
            stack.pop()
            continue
        yield child
        if isinstance(child, Tag) and descend(child):
            stack.append(iter(child.contents))


class _AroundCells:
    """What a table holds outside its cells, each part read once: its captions, its loose text (template loops,
    stray words; browsers show it before the table, lxml keeps it where it was, which no cell reads) and the
    tables in it but in no cell (`stray_tables`).

    The table is walked from itself and from each row lxml nested in one of its cells (`<td><div>a<tr>stray<td>b`:
    an unclosed element in the cell holds the rest of the table; a browser closes the cell), none of these walks
    entering another's row, a cell, a caption (read whole) or a table inside it (read on its own); so each costs
    what the table holds itself, however deep the tables nest in it (each nested table's walk had also walked
    every table below it: the depth squared).
    """

    def __init__(self, table: Tag) -> None:
        # one pass over the table's own elements (`_own_elements`, the walk `_own_rows` makes, into a caption in a
        # cell too) finds the rows lxml nested in its cells and the elements with a row, cell, caption or table
        # inside: asking each element (find) costs the depth squared when rows sit under thousands of nested
        # wrappers. A table or caption counts: each is read on its own, so an element around it is read around
        # it (its text had been read twice)
        nested_rows: list[Tag] = []
        self.holders: set[int] = set()
        for child, in_cell in _own_elements(table):
            if in_cell and child.name == "tr":
                nested_rows.append(child)
            if child.name in ("tr", "td", "th", "table", "caption"):
                up = child.parent
                while up is not None and up is not table and id(up) not in self.holders:
                    self.holders.add(id(up))
                    up = up.parent
        self.roots = [table, *nested_rows]
        self.starts = {id(root) for root in nested_rows}
        # then one walk around the rows reads all three parts: its captions (its children, and those lxml leaves
        # below a <tbody>, <form>, <colgroup> or a wrapper: a browser moves them up; not those of a cell or a
        # table inside it), its loose text, and its stray tables (in none of its cells: their parent's </table>
        # left out, lxml nests them, browsers show them as tables of their own; also those in a row lxml nests
        # in a cell, `<td><div>a<tr><table>`; not those in a caption, which is read whole)
        self.captions: list[Tag] = []
        self.stray_tables: list[Tag] = []
        loose: list[str] = []
        for child in itertools.chain.from_iterable(_preorder(root, self.wrapper) for root in self.roots):
            if isinstance(child, Tag):
                if child.name in ("caption", "table"):
                    if not _dropped(child):
                        (self.captions if child.name == "caption" else self.stray_tables).append(child)
                elif not self.skipped(child) and not self.wrapper(child):
                    loose.append(_flat_text(child))
            elif _is_text(child) and str(child).strip():
                loose.append(_collapse(str(child)))
        self.fostered = " ".join(t for t in loose if t)

    def skipped(self, tag: Tag) -> bool:
        """A cell is its row's (a table inside it too), a caption read whole, a nested table its own, a row
        nested in a cell walked from itself."""
        return tag.name in _NOT_FOSTERED or tag.name == "table" or _dropped(tag) or id(tag) in self.starts

    def wrapper(self, tag: Tag) -> bool:
        """Around rows (<form>, a template's <div>): its rows are the table's; read around them."""
        return not self.skipped(tag) and (tag.name in _TABLE_PARTS or id(tag) in self.holders)


def _own_elements(table: Tag) -> Iterator[tuple[Tag, bool]]:
    """The table's own elements in document order, each with whether it sits in one of its cells (one pass).
    Tables inside it are not entered (each is read on its own), nor are its captions (read whole), except a
    caption lxml nests in a cell, no row between them (`<td>a<caption>T<td>b`: a browser closes the cell at
    the caption, and the cells after the caption's text are the table's, which had been lost)."""
    in_cell: dict[int, bool] = {id(table): False}
    cell_nearest: dict[int, bool] = {id(table): False}  # is the nearest cell, row or table at or above it a cell
    descend = lambda tag: tag.name != "table" and (tag.name != "caption" or cell_nearest[id(tag)])  # noqa: E731
    for child in _preorder(table, descend):
        if isinstance(child, Tag):
            parent = id(child.parent) if child.parent is not None else id(table)
            inside = in_cell.get(parent, False)
            in_cell[id(child)] = child.name != "table" and (inside or child.name in _CELLS)
            cell_nearest[id(child)] = (child.name in _CELLS if child.name in (*_CELLS, "tr", "table")
                                       else cell_nearest.get(parent, False))
            yield child, inside


_CELLS = ("td", "th")
_ROW_OR_CELL = frozenset({"tr", *_CELLS})


def _own_rows(table: Tag) -> list[tuple[Tag, list[Tag]]]:
    """The table's rows as (the element holding the row, its cells), in document order, not those of tables
    inside it (one pass; asking each row for its table, find_parent, costs rows times depth). A cell belongs
    to the nearest <tr> above it, also when it sits inside another cell (`<td>a<div>b<td>c`: lxml nests what
    an unclosed element leaves open, browsers close the cell: a row a b | c). Cells outside any <tr> (lxml
    keeps them where they stand; browsers make a row of them) make a row of their own, one per run of such
    cells under one parent with no <tr> between them."""
    rows: list[tuple[Tag, list[Tag]]] = []
    cells_of: dict[int, list[Tag]] = {}  # by id of each <tr>
    row_of: dict[int, Tag | None] = {id(table): None}  # by id of each element walked: its nearest <tr>
    loose: tuple[Tag, list[Tag]] | None = None  # the open row of cells outside any <tr>
    for child, _ in _own_elements(table):
        parent = child.parent
        row_of[id(child)] = (None if child.name == "table" else child if child.name == "tr"
                             else row_of.get(id(parent)) if parent is not None else None)
        if child.name == "tr":
            cells_of[id(child)] = []
            rows.append((child, cells_of[id(child)]))
            loose = None
        elif child.name in _CELLS:
            row = row_of[id(parent)] if parent is not None else None
            if row is not None:
                cells_of[id(row)].append(child)
            else:
                if loose is None or loose[0] is not parent:
                    loose = (parent, [])
                    rows.append(loose)
                loose[1].append(child)
    return rows


def _table(table: Tag) -> tuple[str, int]:
    """(text, header line count): one row per line, header rows first."""
    rows = _own_rows(table)

    def rank(row: tuple[Tag, list[Tag]]) -> int:
        holder = row[0] if row[0].name != "tr" else row[0].parent
        return {"thead": 0, "tfoot": 2}.get(holder.name if holder is not None else "", 1)

    rows.sort(key=rank)  # stable: document order within each group
    lines: list[str] = []
    header = 0
    for row in rows:
        cells = row[1]
        texts = [_flat_text(c, cell=True) for c in cells]
        if not any(texts):
            continue
        if rank(row) == 0 or (not lines and cells and all(c.name == "th" for c in cells)):
            if len(lines) == header:
                header += 1
        lines.append(" | ".join(texts))
    return "\n".join(lines), header



class _Walker:
    """Walks the body once, emitting HeadingBlocks and ContentBlocks in order.

    `node` handles one node; for an element whose children are walked too it returns an iterator of them (a
    generator when there is work to do between or after them), which `walk` drives from its stack: the code
    after a generator's `yield child` runs once that child and everything in it has been walked, as after a
    recursive call, but nesting depth costs no Python stack.
    """

    def __init__(self) -> None:
        self.blocks: list[Block | _Resume] = []
        self.loose = _Text()  # text that sits directly in transparent containers
        self.containers: list[tuple[int, str | None, int | None]] = []  # depth, anchor, title hN
        self.consumed: set[int] = set()  # id() of headings used as container titles
        self.slugger = GithubSlugger()
        self.html5_ids: list[str | None] = []  # per open HTML5 <section>/<article>: its id, until a heading takes it
        # what is open outside containers, outermost first: (h-number, level, is a container, the heading's block)
        # of each heading and each top-level container's title, so a heading after a container takes its level on
        # its scale, and text after a container goes back to the heading it is under
        self.open_free: list[tuple[int, int, bool, HeadingBlock | None]] = []
        self.has_text = _TextCheck()
        self.heading_ids: frozenset[str] = frozenset()  # the page's headings' ids: what a table of contents links to

    # -- output helpers
    def flush(self) -> None:
        if self.loose:
            self.blocks.append(ContentBlock("other", self.loose.value()))
        self.loose = _Text()

    def heading(self, level: int, text: str, anchor: str | None) -> None:
        self.flush()
        self.blocks.append(HeadingBlock(min(max(level, 1), MAX_LEVEL), text, anchor))

    # -- dispatch
    def walk(self, nodes: Iterable[PageElement]) -> None:
        """Walks nodes and everything inside them, in document order."""
        stack: list[Iterator[PageElement]] = [iter(list(nodes))]
        while stack:
            child = next(stack[-1], _DONE)
            if child is _DONE:
                stack.pop()
                continue
            inner = self.node(child)
            if inner is not None:
                stack.append(inner)

    def node(self, node: PageElement) -> Iterator[PageElement] | None:
        """Handles one node; returns what `walk` should walk next, inside it."""
        if not isinstance(node, Tag):
            if node is _BLOCK_END:
                self.flush()
            elif _is_text(node):
                self.loose.add(str(node))
            return None
        if _dropped(node):
            return None
        name = node.name
        if _is_container(node):
            return self.container(node)
        elif name in _HEADING_SET:
            if id(node) not in self.consumed:
                return self.free_heading(node)
        elif name == "table":
            self.flush()
            around = _AroundCells(node)
            for cap in around.captions:
                self.content(cap, "paragraph")
            if fostered := around.fostered:
                self.blocks.append(ContentBlock("paragraph", fostered))
            text, header = _table(node)
            if text:
                self.blocks.append(ContentBlock("table", text, header))
            return iter(around.stray_tables)  # each a table of its own, after this one
        elif name == "p" and node.find(HEADINGS) is not None:
            # a <p> left open with an inline element in it, then a heading: lxml nests the heading in both
            # (<p>x <b>y<h2>H</h2>), where a browser closes the paragraph at the heading's start tag and shows
            # a heading. Read through, as a transparent block: its text, then the heading's section
            return self.block(node)
        elif name == "ol" and (numbered := _listed_headings(node, self.has_text)) is not None:
            self.flush()
            return iter(numbered)
        elif name == "p" and self.toc_entry(node):
            return None
        elif name in _BLOCK_TAG_KINDS:
            self.content(node, _BLOCK_TAG_KINDS[name])
        elif name == "div" and (kind := self.block_div_kind(node)):
            self.content(node, kind)
        elif name in ("br", "hr"):
            self.loose.newline(1)
            if name == "hr":
                self.flush()
        elif name in _BREAKING:  # transparent block container (div, section, ...)
            return self.block(node)
        else:  # inline element in a transparent container
            if _note_mark(node) and not self.loose.after_opening():
                self.loose.add(" ")
            return iter(list(node.contents))
        return None

    def block(self, tag: Tag) -> Iterator[PageElement]:
        """A transparent block container: its loose text is apart from what comes before and after it.

        An HTML5 <section> or <article> is one too (levels stay the headings' numbers), but text after a
        <section> nested in it is its own again: it gets a repeated heading of the one that opened it, as
        text after a nested section container does, instead of going to the last subsection."""
        self.flush()
        if tag.name not in _HTML5_SECTIONS:
            yield from list(tag.contents)
            self.flush()
            return
        own: HeadingBlock | None = None  # the heading this element's own children opened it with
        after_nested = False
        # its id is the anchor of the heading that opens it (Sphinx's <section id="module-os"><h1>, rustdoc's
        # <section id="method.new"><h4>), as a section container's id is; it had been a slug of the heading
        self.html5_ids.append(str(tag["id"]) if tag.get("id") else None)
        children = list(tag.contents)
        # a short lead before the one heading it holds as a child is that heading's, read after it: rustdoc's
        # <section id="method.as_slice"><span>1.46.0 · Source</span><h4>: each item's "since" version had gone to
        # the item before it
        if (first := _short_lead(children)) is not None:
            children = [children[first], *children[:first], *children[first + 1:]]
        for child in children:
            if isinstance(child, Tag) and child.name in _HTML5_SECTIONS:
                if _dropped(child):  # no subsection: what follows is still this one's (npm's table of contents
                    continue  # had made the rest of the page a repeat of its heading)
                yield child
                after_nested = own is not None
                continue
            if after_nested and _has_text(child, self.has_text):
                assert own is not None
                self.heading(own.level, own.text, own.anchor)  # resume this section
                after_nested = False
            before = len(self.blocks)
            yield child
            # its heading may be wrapped: <header><h1>A</h1></header> (HTML5 themes) or an <hgroup>; only a
            # bare one had counted, and text after a nested <section> went to that subsection
            if own is None and isinstance(child, Tag) and child.name in _HEADING_SET | {"header", "hgroup"}:
                own = next((b for b in self.blocks[before:] if isinstance(b, HeadingBlock)), None)
        self.html5_ids.pop()
        self.flush()

    def toc_entry(self, tag: Tag) -> bool:
        """A paragraph that is one link to a heading of this page and nothing else: a table of contents' entry
        (Google Docs writes its table of contents so, <p><a href="#h.x">Purpose</a></p>), which had put every
        heading's words into the page's first section again."""
        links = tag.find_all("a", href=True, limit=2)
        if len(links) != 1 or not str(links[0]["href"]).startswith("#") or str(links[0]["href"])[1:] not in \
                self.heading_ids:
            return False
        text = _collapse(tag.get_text())
        return bool(text) and text == _collapse(links[0].get_text())

    @staticmethod
    def block_div_kind(tag: Tag) -> str | None:
        for cls in _classes(tag):
            if cls in _BLOCK_DIV_KINDS:
                return _BLOCK_DIV_KINDS[cls]
        return None

    # -- sections
    def container(self, tag: Tag) -> Iterator[PageElement]:
        title = _find_title(tag, self.has_text)
        if self.containers:
            depth = self.containers[-1][0] + 1
        else:  # under the last heading outside containers of a lower h-number (AsciiDoc: the page's <h1>, then
            # div.sect1 with an h2 title, beside a bare h2), as a heading of its h-number would be
            # an untitled one nests under the last open heading and ends at the next heading (an h-number above
            # any: counted as an <h1>, it had ended the page's <h1>, and every section after it lost its parent)
            hn = int(title.name[1]) if title is not None else _UNTITLED_HN
            while self.open_free and self.open_free[-1][0] >= hn:
                self.open_free.pop()
            # under the last open heading; a container before it of a lower h-number is its sibling still
            depth = next((level for _, level, is_container, _ in reversed(self.open_free) if not is_container), 0) + 1
            self.open_free.append((hn, depth, True, None))
        own_id = tag.get("id")
        heading = ""
        children: Iterable[PageElement] = list(tag.contents)
        nested = None
        if title is not None:
            self.consumed.add(id(title))
            targets = _targets(title, tag.get("id"), _anchor_before(title),
                               self.containers[-1][1] if self.containers else None)
            if title.parent is tag:  # its text ends at a heading or section nested in it (see free_heading)
                heading, nested, rest = _heading_text(title, targets)
                if nested is not None:  # which, and all after it in the title, are the container's after the title
                    at = next(i for i, child in enumerate(children) if child is title) + 1
                    children = itertools.chain(children[:at], rest, children[at:])
            else:  # in a titlepage, one content block that skips its title: the title keeps all its text
                heading = _without_permalink(title, _flat_text(title), targets)
        if not own_id and title is not None:
            # DocBook (xsltproc's default) marks a container by an <a name> in its title, not an id on the div:
            # every section of such a page had taken the enclosing one's anchor (one slug, not on the page)
            link = _anchor_link(title, nested)
            own_id = title.get("id") or (link.get("id") or link.get("name") if link is not None else None)
        anchor = str(own_id) if own_id else (self.containers[-1][1] if self.containers else None)
        if anchor is None and heading:
            anchor = self.slugger(heading) or None
        hn = int(title.name[1]) if title is not None else None
        self.heading(depth, heading, anchor)
        self.containers.append((depth, anchor, hn))
        after_nested = False
        for child in children:
            if isinstance(child, Tag) and _is_container(child):
                yield child
                after_nested = True
                continue
            if after_nested and _has_text(child, self.has_text):
                self.heading(depth, heading, anchor)  # resume the parent section
                after_nested = False
            yield child
        self.flush()
        self.containers.pop()
        if not self.containers:  # text after a top-level container is the heading's it sits under, as text after a
            # nested one is its parent's: it had gone to the container's last subsection
            under = next((block for _, _, is_container, block in reversed(self.open_free) if not is_container), None)
            if under is not None:
                self.blocks.append(_Resume(under))

    def free_heading(self, tag: Tag) -> Iterator[PageElement] | None:
        """A heading's section; returns a heading or section nested in it, and all after that inside it, to walk.

        lxml nests a heading left open in the one before (``<h3>A<b>x<h3>B`` or ``<h3>A x<h3>B``, not
        ``<h3>A<p>x<h3>B``): read as one text, the first heading of a page of unclosed ones took in the rest of
        the page and was its only section, its text all heading. A browser shows each as a heading block of
        its own (HTML5 parsing closes an open heading at the next one's start tag, or nests it when an inline
        element is open, still a block of its own), so each is a section of its own here.
        """
        n = int(tag.name[1])
        if self.containers:
            depth, anchor_of, title_hn = self.containers[-1]
            if title_hn is None:  # an untitled container: its first heading sets the scale, so h2 > h3 nest
                title_hn = n - 1
                self.containers[-1] = (depth, anchor_of, title_hn)
            level = depth + max(1, n - title_hn)
        else:  # its h-number, but no deeper than a container before it that it ends: a bare <h3> after a
            # div.section titled <h3> (level 2 under the page's <h1>) had been that section's subsection
            ended = [lv for hn, lv, *_ in self.open_free if hn >= n]
            level = min([n, *ended])
        before = _anchor_before(tag)
        section_id = self.html5_ids[-1] if self.html5_ids else None
        container = self.containers[-1][1] if self.containers else None
        text, nested, rest = _heading_text(tag, _targets(tag, before, section_id, container))
        if nested is not None and not text:  # nothing of its own to show (<h2><h3>T</h3></h2>): the inner one heads
            return rest
        anchor = tag.get("id")
        if not anchor:
            inner = _anchor_link(tag, nested)
            if inner is not None:
                anchor = inner.get("id") or inner.get("name")
        if section_id:  # the first heading of an HTML5 <section id>: its anchor, unless the heading has one
            self.html5_ids[-1] = None
            anchor = anchor or section_id
        anchor = anchor or before
        if not self.containers and not text and not anchor:  # a logo's <h1><img>: nothing to show or link to,
            return None  # so no section (it had headed the page's sections with ''); one with an anchor is a
            # link's target: its section stays, to keep that anchor, when anything is under it (rule 1 of
            # `build_sections` drops a section with no heading text, content or subsection)
        if not self.containers:  # it ends the headings of its level and below; no container nests under an empty one
            while self.open_free and self.open_free[-1][0] >= n:
                self.open_free.pop()
        self.heading(level, text, str(anchor) if anchor else (self.slugger(text) or None))
        if not self.containers and text:
            self.open_free.append((n, level, False, self.blocks[-1]))
        return rest if nested is not None else None

    # -- content blocks
    def content(self, tag: Tag, kind: str) -> None:
        self.flush()
        buf = _Text()
        pre = tag.name == "pre"
        _inline(tag, buf, pre, self.consumed)
        text = buf.value(keep_indent=pre)
        if text:
            # DocBook's title of a table, example, figure or note: kept with what it titles when a section is cut
            self.blocks.append(ContentBlock(kind, text, keep_with_next=tag.name == "p" and "title" in _classes(tag)))


_TEXT_TYPES = frozenset({NavigableString, CData})  # the strings get_text() reads in all but a few elements


def _string_types(tag: Tag) -> frozenset[type]:
    """The string classes ``tag.get_text()`` reads: a set from beautifulsoup4 4.13, a tuple or one class before."""
    kinds = tag.interesting_string_types
    return frozenset(kinds) if isinstance(kinds, (set, frozenset, tuple, list)) else frozenset((kinds,))


class _TextCheck:
    """bool(tag.get_text().strip()), remembered for each element under the one asked about: a chain of nested
    section containers without titles asks each for the text of the next, all of the rest of the chain, which
    unremembered costs the depth squared."""

    def __init__(self) -> None:
        self.known: dict[int, bool] = {}  # id() of element: it has text

    def __call__(self, tag: Tag) -> bool:
        if _string_types(tag) != _TEXT_TYPES:  # script, style, template, rt, rp read their own strings
            return bool(tag.get_text().strip())
        known = self.known
        if (answer := known.get(id(tag))) is not None:
            return answer
        # depth first; every element on the stack has text once a string with text is found under the last
        stack: list[tuple[Tag, Iterator[PageElement]]] = [(tag, iter(tag.contents))]
        while stack:
            found = False
            for child in stack[-1][1]:
                if isinstance(child, Tag):
                    inner = known.get(id(child))
                    if inner is None:  # not known yet: look into it first
                        stack.append((child, iter(child.contents)))
                        break
                    if inner:
                        found = True
                        break
                elif type(child) in _TEXT_TYPES and child.strip():  # get_text's own test: the exact type
                    found = True
                    break
            else:
                known[id(stack.pop()[0])] = False
                continue
            if found:
                for element, _ in stack:
                    known[id(element)] = True
                return True
        return known[id(tag)]


def _anchor_link(heading: Tag, end: Tag | None) -> Tag | None:
    """The heading's first ``<a id>``, else its first ``<a name>``, before ``end`` (a heading inside it, whose own
    they are; searching all of a page of nested headings for each costs the page's length squared)."""
    with_name = None
    for el in _preorder(heading, lambda tag: True):  # lazy: bs4's descendants first finds the subtree's end
        if el is end:
            break
        if isinstance(el, Tag) and el.name == "a":
            if el.get("id") is not None:
                return el
            if with_name is None and el.get("name") is not None:
                with_name = el
    return with_name


def _targets(heading: Tag, *more: str | None) -> frozenset[str]:
    """The ids a link to this heading may name: its own, an <a id|name> in it, and ``more`` (the empty anchor
    before it, its section's)."""
    ids = {heading.get("id"), *more}
    for a in heading.find_all("a"):
        ids.update((a.get("id"), a.get("name")))
    return frozenset(str(i) for i in ids if i)


def _anchor_before(heading: Tag) -> str | None:
    """The id or name of an empty ``<a>`` or ``<span>`` right before the heading (man2html's ``<A NAME="lbAB">
    &nbsp;</A><H2>``, Doxygen's ``<a id="details"></a><h2>``, Texinfo's ``<span id="X-1"></span><h3>``): the
    page's own target for it, where a slug of its text is on no page."""
    for sib in heading.previous_siblings:
        if isinstance(sib, Tag):
            if _dropped(sib):  # Texinfo: <span id="X"></span>, its nav bar, then the heading
                continue
            if sib.name in ("a", "span") and not sib.get("href") and not sib.get_text().strip():
                target = sib.get("id") or sib.get("name")
                return str(target) if target else None
            return None
        if _is_text(sib) and str(sib).strip():
            return None
    return None


def _has_text(node: PageElement, has_text: Callable[[Tag], bool]) -> bool:
    if isinstance(node, Tag):
        return not _dropped(node) and has_text(node)
    return _is_text(node) and bool(str(node).strip())


_OPENING = frozenset("([{\"'“‘ \n") | {""}
_GLUE, _UNGLUE = -1, -2  # what the end of a <dt> and of a <dl> does in `_inline`, for line breaks owed
_SPACE = -3  # what the end of a note's own mark does: a space before the note's text


def _inline(tag: Tag, buf: _Text, pre: bool, skip: set[int]) -> None:
    """Visible text of a content block: inline markup adds nothing, blocks add newlines.

    `skip` holds headings already used as section titles (e.g. in a titlepage).
    """
    # open elements: (their remaining children, inside <pre>, line breaks to add when they end)
    stack: list[tuple[Iterator[PageElement], bool, int]] = [(iter(tag.contents), pre, 0)]
    while stack:
        children, pre, after = stack[-1]
        for child in children:
            if not isinstance(child, Tag):
                if _is_text(child):
                    buf.add(str(child), pre)
                continue
            if _dropped(child) or id(child) in skip:
                continue
            name = child.name
            if name == "br":
                buf.newline(1)
            elif name == "table":  # inside a content block (a list item, a note): caption and stray text too
                text, _ = _table(child)
                buf.newline(2)
                around = _AroundCells(child)
                for line in [*(_flat_text(c) for c in around.captions), around.fostered]:
                    if line:
                        buf.add(line)
                        buf.newline(1)
                buf.add(text, pre=True)
                buf.newline(2)
                if strays := around.stray_tables:  # each a table of its own, after this one
                    stack.append((iter(strays), pre, 0))
                    break
            elif name == "pre":
                buf.newline(1)
                stack.append((iter(child.contents), True, 1))
                break  # read the child's content first
            elif name in _BREAKING:
                n = 2 if name in _PARAGRAPH_BREAK else 1
                buf.newline(n)
                # a <dt> glues its line to the next text (`_Text.glue`), its definition's; the end of its <dl>
                # ends that, so a term without one leaves the text after the list a paragraph apart
                stack.append((iter(child.contents), pre, _GLUE if name == "dt" else _UNGLUE if name == "dl" else n))
                break
            else:
                if pre and name == "code" and _after_code_block(child):
                    buf.newline(1)  # Node.js' two versions of a sample (ES module, CommonJS): the second's first line
                    # had been glued to the first's last ("});const dns = require(...)")
                if _note_mark(child) and not pre and not buf.after_opening():
                    buf.add(" ")
                note_sym = name == "a" and not pre and not _NOTE_SYM_CLASSES.isdisjoint(_classes(child))
                stack.append((iter(child.contents), pre, _SPACE if note_sym else 0))
                break
        else:
            stack.pop()
            if after == _SPACE:
                buf.add(" ")
            elif after == _GLUE:
                buf.glue()
            elif after == _UNGLUE:
                buf.glued = False
                buf.newline(1)
            elif after:
                buf.newline(after)


def _after_code_block(code: Tag) -> bool:
    """A <code> in a <pre> right after another of several lines or highlighted as a block, with nothing between
    them but a control (no text, not even a space) and no space ending it: one block of code after another, which
    a page shows one at a time (Node.js: a checkbox picks)."""
    for sib in code.previous_siblings:
        if isinstance(sib, Tag):
            if sib.name == "code":  # a block: of several lines, or highlighted as one (class language-*)
                text = sib.get_text()
                return not text[-1:].isspace() and ("\n" in text or any(c.startswith("language-")
                                                                        for c in _classes(sib)))
            if sib.name not in ("input", "button", "label"):
                return False
        elif str(sib):  # text between them, even a space or a line break, is theirs to keep apart (review)
            return False
    return False


def _find_title(container: Tag, has_text: Callable[[Tag], bool]) -> Tag | None:
    """The container's own title: in a leading titlepage/refnamediv or <header>/<hgroup>, or a leading heading.
    What the page drops (a <nav> breadcrumb, a script) is not in front of it."""
    for child in container.contents:
        if not isinstance(child, Tag):
            if _is_text(child) and str(child).strip():
                return None
            continue
        if _dropped(child):
            continue
        if child.name in _HEADING_SET:
            return child
        classes = _classes(child)
        if ((child.name == "div" and ("titlepage" in classes or "refnamediv" in classes))
                or child.name in ("header", "hgroup")):
            found = child.find(HEADINGS)
            if isinstance(found, Tag):
                return found
            continue
        if not has_text(child):
            continue  # index-term anchors, Sphinx's <span id>, empty wrappers: nothing to read before the title
        return None
    return None


def _metadata(soup: BeautifulSoup, title: str) -> dict:
    meta: dict = {}
    if title:
        meta["title"] = title
    for tag in soup.find_all("meta"):
        name = tag.get("name") or tag.get("property")
        content = tag.get("content")
        if name and content is not None:
            meta[str(name)] = str(content)
    links: dict[str, str] = {}
    for tag in soup.find_all("link"):
        rel = tag.get("rel")
        rels = rel if isinstance(rel, list) else str(rel or "").split()
        for r in rels:
            if r in ("prev", "next", "up", "home", "canonical") and tag.get("href"):
                links[r] = str(tag["href"])
    up = soup.find("a", attrs={"accesskey": "u"})
    if isinstance(up, Tag) and up.get("href") and "up" not in links:
        links["up"] = str(up["href"])
    if links:
        meta["links"] = links
    return meta


_HEADING_TAG = re.compile(r"<(/?)h([1-6])(?=[\s/>])", re.IGNORECASE)


def _matched_heading_ends(text: str) -> str:
    """``text`` with each heading end tag that closes another level's heading made that heading's.

    A browser closes the open heading at any heading end tag (sqlite.org's ``<h2>Documentation</h1>``); lxml
    ignores one that does not match, and the heading took in the rest of the page (a heading of 19,212 word
    pieces, found by review). Well-formed pages come back as they were.
    """
    out: list[str] = []
    pos, open_level = 0, None
    for m in _HEADING_TAG.finditer(text):
        if not m.group(1):
            open_level = m.group(2)
            continue
        if open_level is not None and m.group(2) != open_level:
            out += [text[pos:m.start(2)], open_level]
            pos = m.end(2)
        open_level = None
    return "".join([*out, text[pos:]]) if out else text


#: an untitled section container's h-number: above any heading's, so every heading after it ends it
_UNTITLED_HN = 7


#: elements whose content is another markup language's: a <title> inside is theirs, not the page's
_FOREIGN_CONTENT = ("svg", "math")


_NAV_START = re.compile(r"<nav[\s/>]", re.IGNORECASE)
_NAV_END = re.compile(r"</nav\s*>", re.IGNORECASE)
#: comments and the content of scripts, styles, textareas and titles, where a tag is text
_NOT_MARKUP = re.compile(r"<!--.*?(?:-->|$)|<(script|style|textarea|title)\b.*?(?:</\1\s*>|$)",
                         re.IGNORECASE | re.DOTALL)
#: what a <nav> left open holds after its links: the page's own text
_AFTER_NAV = frozenset({*HEADINGS, "p", "table", "pre", "blockquote"})


def _cut_open_navs(soup: BeautifulSoup, text: str) -> list[str]:
    """Read the page's text that a <nav> left open took in; what was done, for the ingest report.

    A <nav> the source never closes holds the rest of the page (for a browser too), and all of it was dropped
    as navigation: "HTML has no visible text", or only what came before it. When the page holds more <nav>
    elements than its source has </nav>, the last outermost <nav> is taken for the open one if no text follows
    it: its text from its first <main>, <article> or <h1>, else from the first heading, paragraph, table,
    pre or quote after a link that is in no list, is the page's; what comes before stays dropped. Only that
    one: a <nav> before it ends where its source ends it (a review: cutting each in turn had kept a closed
    header's menu)."""
    if _NAV_START.search(text) is None:  # no <nav> element (lxml makes one only of that tag): no walk of the page
        return []
    navs = soup.find_all("nav")
    # elements, and end tags outside comments, scripts and styles: a "<nav></nav>" in a script is neither
    if len(navs) <= len(_NAV_END.findall(_NOT_MARKUP.sub("", text))):
        return []
    has_text = _TextCheck()
    nav = next((n for n in reversed(navs) if not any(p.name == "nav" for p in n.parents)), None)
    if nav is None or _text_after(nav, has_text):
        return []
    cut = _nav_content_start(nav)
    if cut is None:
        return [f"a <nav> is never closed: the {len(nav.get_text())} characters of text from it to the page's end "
                "are dropped as navigation"]
    node = cut
    while node is not nav:  # the menu: what comes before the cut, at each level down to it
        parent = node.parent
        assert parent is not None
        for before in list(itertools.takewhile(lambda n: n is not node, parent.contents)):
            before.extract()
        if parent.name == "nav" and parent is not nav:  # a <nav> left open inside it holds the page's text too
            parent.name, parent.attrs = "div", {}  # (a review: it had stayed dropped, "kept" text and 0 blocks)
        node = parent
    nav.name, nav.attrs = "div", {}  # the rest is the page's text (its class or role would drop it again)
    start = _collapse(cut.get_text(" "))[:60]
    return [f"a <nav> is never closed: it is taken to end before the <{cut.name}> {start!r}"]


#: tags `_dropped` may drop that hold other elements (besides <nav>, read by `_cut_open_navs`): one left open
#: holds the rest of its parent, often the page
_DROPPABLE_HOLDERS = ("div", "section", "footer", "aside", "header", "details", "dialog", "noscript", "template")
#: a start tag (group 1 empty) or an end tag of one of them, to its ">" (a quoted ">" inside is no end); it never
#: crosses a "<": a second review timed 8 s for 48 KB of "<div x" when each start scanned to the end of the text
_HOLDER_TAG = re.compile(rf"""<(/?)({'|'.join(_DROPPABLE_HOLDERS)})(?=[\s/>])((?:[^<>"']|"[^"<]*"|'[^'<]*')*)>""",
                         re.IGNORECASE)


def _left_open(text: str) -> set[str]:
    """The tags among _DROPPABLE_HOLDERS whose start tags outnumber their end tags in ``text``. A start tag
    lxml closes at once (a browser would not) is not counted: "<div/>", "<div />", '<div class="x"/>', but not
    "<div / >" or "<div class=x/>", whose slash is the value's (found by a second review)."""
    count: collections.Counter[str] = collections.Counter()
    for m in _HOLDER_TAG.finditer(text):
        attrs = m.group(3)
        if m.group(1):
            count[m.group(2).lower()] -= 1
        elif not (attrs.endswith("/") and (len(attrs) == 1 or attrs[-2] in " \t\n\r\f\"'")):
            count[m.group(2).lower()] += 1
    return {name for name, n in count.items() if n > 0}


def _open_dropped_warnings(soup: BeautifulSoup, text: str) -> list[str]:
    """Report lines for dropped elements that may hold the page's text because the source leaves one open.

    Only said, not mended: for a tag whose start tags outnumber its end tags in the source (comments, scripts,
    styles, textareas and titles aside; a stray end tag elsewhere can hide an open one, which counting cannot see),
    the first outermost dropped element of that tag with no text shown after it (outside every dropped element)
    that holds a <main>, <article> or <h1>, or text after its links (as `_nav_content_start` finds it for a
    <nav>); one line per tag, counting the others. Which element of the tag is the open one is not in lxml's
    tree; a fix that took this one for it kept a closed sidebar as text when a <div> elsewhere was the open one
    (reverted in session 55). One walk of the page, not entering dropped elements: a review found the first
    version quadratic (187 s and 10,000 lines for 10,000 sibling tables of contents after an open <div>).
    """
    if _HOLDER_TAG.search(text) is None:
        return []
    names = _left_open(_NOT_MARKUP.sub("", text))  # a "</div>" in a comment or a script balances nothing
    if not names:
        return []
    candidates: list[tuple[int, Tag, bool]] = []  # (place in document order, element, it is in a list)
    last_text, place = -1, 0
    stack: list[tuple[Iterator[PageElement], bool]] = [(iter(soup.contents), False)]
    while stack:
        node = next(stack[-1][0], None)
        if node is None:
            stack.pop()
            continue
        place += 1
        if isinstance(node, Tag):
            listed = stack[-1][1]
            if _dropped(node):  # not entered: its own dropped elements are not outermost, its text is not shown
                if node.name in names:
                    candidates.append((place, node, listed))
            else:
                stack.append((iter(node.contents), listed or node.name in _LISTS))
        elif _is_text(node) and node.strip():
            last_text = place
    found: dict[str, list[tuple[Tag, Tag]]] = {}
    for at, held, listed in candidates:
        if at > last_text and (cut := _nav_content_start(held, listed)) is not None:
            found.setdefault(held.name, []).append((held, cut))
    notes: list[str] = []
    for name, [(held, cut), *more] in found.items():
        shown = "".join(f' {a}="{held.get(a)}"' for a in ("id", "class", "role") if held.get(a))
        start = _collapse(cut.get_text(" "))[:60]
        others = f" ({len(more)} more <{name}> elements so dropped hold text after their links)" if more else ""
        notes.append(f"the source leaves a <{name}> open, and the <{name}{shown}> dropped as navigation, a footer "
                     f"or hidden holds text from the <{cut.name}> {start!r} on: if it is the open one, that text "
                     f"is dropped too (close it in the source){others}")
    return notes


def _text_after(tag: Tag, has_text: Callable[[Tag], bool]) -> bool:
    """Some text is shown after the element (outside it)."""
    return any(_has_text(sib, has_text) for holder in (tag, *tag.parents) for sib in holder.next_siblings)


def _nav_content_start(nav: Tag, listed: bool | None = None) -> Tag | None:
    """Where the page's text starts in a <nav> left open (see `_cut_open_navs`), or None."""
    first = nav.find(["main", "article", "h1"])  # the first of them (an <h1> and its intro before an <article>)
    if first is not None:
        return first
    linked = False
    # in a list: under one inside the nav, or the nav is in one (each asked once: a review timed the walk of every
    # candidate's ancestors to the root at 3 s for 4,000 tables of contents nested in open <div>s)
    if listed is None:  # the caller may know it (`_open_dropped_warnings` does, from its walk)
        listed = any(p.name in _LISTS for p in nav.parents)
    for tag in nav.find_all(True):
        if tag.name == "a" and tag.get("href"):
            linked = True
        elif tag.name in _AFTER_NAV and linked and not (listed or _listed_below(tag, nav)):
            return tag
    return None


def _listed_below(tag: Tag, top: Tag) -> bool:
    """``tag`` is inside a list that is inside ``top``."""
    for p in tag.parents:
        if p is top:
            return False
        if p.name in _LISTS:
            return True
    return False


def parse_html(text: str, report: list[str] | None = None) -> tuple[str, list[Block], dict]:
    """(title, blocks, metadata) for an HTML page; title is the <title> text. ``report``: where to add what was
    read otherwise than the markup says (a <nav> left open), for the ingest report."""
    text = _matched_heading_ends(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # class stays a plain string: building per-tag class lists costs ~15% of parse time
        soup = BeautifulSoup(text, "lxml", multi_valued_attributes=None)
    # the document's <title>, not an inline SVG's or MathML's (an accessible icon's "Home icon"), which is no
    # title of the page to a browser (document.title) and had become the title of every section's path
    title_tag = soup.find(lambda tag: tag.name == "title" and tag.find_parent(_FOREIGN_CONTENT) is None)
    title = _collapse(title_tag.get_text()) if isinstance(title_tag, Tag) else ""
    metadata = _metadata(soup, title)
    cut = _cut_open_navs(soup, text)
    if report is not None:
        report.extend(cut + _open_dropped_warnings(soup, text))
    if _IN_PAGE_HREF.search(text):  # no link within the page (an href whose value starts with #): no note
        _place_notes(soup)
    walker = _Walker()
    walker.heading_ids = frozenset(str(h["id"]) for h in soup.find_all(HEADINGS) if h.get("id"))
    walker.walk(_body_nodes(soup))
    walker.flush()
    return title, _resumed(walker.blocks), metadata


def fragment_text(html: str) -> tuple[str, str | None, int]:
    """(text, kind, header lines) a browser shows for a fragment of HTML, a Markdown file's raw HTML block: its
    visible text as `parse_html` reads a content block (markup, comments, scripts, styles and controls dropped; a
    table one row a line, its header rows first); kind "table" (with its header line count) or "code" (its
    indentation kept) when the fragment is one table or one <pre>, else None. The markup had been
    stored, embedded and searched as text: a README's centred logo (<picture>'s srcset URLs, 250 tokens), its
    <div align="center"> and </details> lines, an HTML table as <tr>/<td> lines cut mid-cell (found by review)."""
    if not _TAG_TEXT.sub("", html).strip() and not _SHOWN_RAW.search(html):
        return "", None, 0  # tags alone (<div align="center">, </details>, <img>, <br>): nothing shown, no parse
    if (simple := _simple_fragment_text(html)) is not None:
        return simple, None, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(html, "lxml", multi_valued_attributes=None)
    root = soup.body or soup
    shown = [c for c in root.children if isinstance(c, Tag) or str(c).strip()]
    one = shown[0] if len(shown) == 1 and isinstance(shown[0], Tag) and not _dropped(shown[0]) else None
    if one is not None and one.name == "table":
        text, header = _table(one)
        return text, "table", header
    buf = _Text()
    _inline(root, buf, False, set())
    pre = one is not None and one.name == "pre"
    return buf.value(keep_indent=pre), "code" if pre else None, 0


def _simple_fragment_text(html: str) -> str | None:
    """`fragment_text`'s text for a fragment of plain tags alone (<p>, <div align>, <b>, <a href>, <img>, ...: no
    class, id, role or other attribute `_dropped` reads, no entity but the usual, no comment), read as `_inline`
    reads their tree, without a parse (a BeautifulSoup per block had cost a file of 70,000 `<p>x` blocks 8.5 s,
    found by review); None for any other fragment. Tested equal to the parse's reading."""
    if _UNSAFE_CHARACTERS.search(html):
        return None  # control characters, a byte-order mark: lxml's to read
    buf = _Text()
    pos = 0
    open_tags: list[str] = []  # well nested, a block only inside blocks other than <p>: as lxml builds the tree
    for m in _SIMPLE_TAG.finditer(html):
        text = html[pos:m.start()]
        pos = m.end()
        if not _plain_text(text):
            return None
        buf.add(unescape(text))
        name, attrs = m.group(2).lower(), m.group(3)
        if name not in _SIMPLE_TAGS or attrs.count('"') % 2 or attrs.count("'") % 2 \
                or any(a.lower() not in _SIMPLE_ATTRS for a in _ATTR_NAME.findall(attrs)) \
                or (name == "a" and _IN_PAGE_HREF.search(attrs)) \
                or (name not in _VOID_TAGS and attrs.rstrip().endswith("/")):  # <div/>: lxml's reading
            return None
        if m.group(1):  # an end tag: the innermost open element's, or the reading is lxml's to make
            if not open_tags or open_tags.pop() != name:
                return None
        elif name not in _VOID_TAGS:
            if name in _BREAKING and any(t not in _SIMPLE_BLOCKS for t in open_tags):
                return None  # lxml closes a <p> or moves the block: its tree, not this reading
            open_tags.append(name)
        if name == "br":
            buf.newline(1)
        elif name in _BREAKING:
            buf.newline(2 if name in _PARAGRAPH_BREAK else 1)  # at its start and its end, as `_inline`
    text = html[pos:]
    if not _plain_text(text):
        return None
    buf.add(unescape(text))
    return buf.value()


def _plain_text(text: str) -> bool:
    """Text between plain tags that `unescape` reads as lxml does: no `<` or `>`, entities with their `;`, a
    numeric one only of a printable character."""
    if "<" in text or ">" in text or not _SIMPLE_ENTITIES.fullmatch(text):
        return False
    return all((shown := unescape(e)) and shown.isprintable() for e in _NUMERIC_ENTITY.findall(text))


#: `_simple_fragment_text`'s tags: text-level ones and the plain blocks a README wraps text in
_SIMPLE_TAGS = frozenset("p div span b strong i em u s small big sub sup br img picture source a code kbd center "
                         "font abbr cite mark q".split())
_VOID_TAGS = frozenset({"br", "img", "source"})
_SIMPLE_BLOCKS = frozenset({"div", "center"})  # what a block may open inside, in lxml's tree as written
#: attributes no reading depends on
_SIMPLE_ATTRS = frozenset("align valign width height src srcset sizes alt href target rel media type loading "
                          "color size face".split())
#: a tag (one pass: `[^<>]*` stops at the next `<`; a quoted `>` leaves its quotes unmatched, which is refused)
_SIMPLE_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)(?=[\t\n\f\r />])([^<>]*)>")  # (`<div=>`: not a div)
_NUMERIC_ENTITY = re.compile(r"&#[0-9xX][0-9A-Fa-f]*;")
_UNSAFE_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff]")
_ATTR_NAME = re.compile(r"""([^\s=/"']+)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?""")
_SIMPLE_ENTITIES = re.compile(r"(?:[^&]|&(?:[A-Za-z]{2,8}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});)*", re.DOTALL)


#: a tag, for `fragment_text`'s test of text outside tags (`<` and a letter, `/`, `!` or `?`: `<- back` is text)
_TAG_TEXT = re.compile(r"<[A-Za-z/!?][^<>]*>")
#: an element that shows its content as written, tags and comments too (a <textarea>'s "<!-- x -->")
_SHOWN_RAW = re.compile(r"(?i)<(?:textarea|xmp|plaintext)\b")


#: an href that may start with "#" once read (written so, or as a character reference: &#35;)
_IN_PAGE_HREF = re.compile(r"""\bhref\s*=\s*["']?[#&]""", re.IGNORECASE)
#: a note's mark: a number, one or two letters, a roman numeral or a symbol, maybe bracketed ([1], 12, (a), iv, *)
_NOTE_MARK = re.compile(r"[\[(]?(?:\d{1,3}|[a-z]{1,2}|[ivxlc]{1,6}|[*\u2020\u2021\u00a7\u00b6#]{1,3})[\])]?", re.I)
_ROOTS = frozenset({"body", "html", "[document]"})
_LISTS = frozenset({"ol", "ul", "dl", "menu"})
#: where a note stays with what holds its reference: a note in the same table, list, quote or figure
_NOTE_UNITS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "td", "th", "ul", "ol", "menu", "dl", "dt", "dd",
                         "li", "blockquote", "figure", "aside", "pre"})


def _own_ids(tag: Tag) -> set[str]:
    """The ids and names a link to this note mark may target: its own, its children's (DocBook's <sup id>) and
    its inline parents' (Python-Markdown's <sup id><a href>)."""
    ids = {str(v) for t in (tag, *tag.descendants) if isinstance(t, Tag)
           for v in (t.attrs.get("id"), t.attrs.get("name")) if v}
    for parent in tag.parents:
        if parent.name in _BREAKING or parent.name in _ROOTS:
            break
        ids.update(str(v) for v in (parent.attrs.get("id"), parent.attrs.get("name")) if v)
    return ids


def _note_pairs(soup: BeautifulSoup) -> list[tuple[Tag, Tag]]:
    """(mark, note) of each note that links back to a mark linking to it, in the marks' document order: the
    note is the mark's target, which is (Google Docs, Word, LibreOffice) or holds (Pandoc, DocBook, docutils,
    Python-Markdown) a link to the mark, its child (DocBook's <sup id>) or its inline parent (Python-Markdown's
    <sup id> around it). A note referred to more than once goes with its first mark."""
    targets: dict[str, Tag] = {}
    links: list[Tag] = []
    for tag in soup.find_all(True):  # one pass, reading attributes directly: bs4's filters cost a page 25%
        attrs = tag.attrs
        if "id" in attrs or "name" in attrs:
            for key in ("id", "name") if tag.name == "a" else ("id",):
                if attrs.get(key):
                    targets.setdefault(str(attrs[key]), tag)
        if _links_within(tag):
            links.append(tag)
    if not links:
        return []
    target_ids = {id(t) for t in targets.values()}
    links_in: dict[int, set[str]] = {}  # per target: the links within the page it is or holds (hrefs without #)
    for link in links:
        for holder in (link, *link.parents):
            if id(holder) in target_ids:
                links_in.setdefault(id(holder), set()).add(str(link["href"])[1:])
    pairs: list[tuple[Tag, Tag]] = []
    taken: set[int] = set()
    for mark in links:
        note = targets.get(str(mark["href"])[1:])
        if note is None or id(note) not in links_in or id(note) in taken or note.name in _HEADING_SET:
            continue
        if any(id(p) in taken or p is note for p in (mark, *mark.parents)):  # in a note (its link back) or in
            continue  # its own target
        if any(p is mark for p in note.parents) or links_in[id(note)].isdisjoint(_own_ids(mark)):
            continue
        taken.add(id(note))
        pairs.append((mark, note))
    return pairs


def _place_notes(soup: BeautifulSoup) -> None:
    """Move each note written at the end (footnotes, endnotes, a reviewer's comments) to the end of the
    section that refers to it.

    Google Docs, Word, LibreOffice, Pandoc, DocBook and docutils write notes after the last section (a
    note and its mark link to each other, which is how a note is told from a cross-reference), so every
    note had gone into the last section, or a repeated page heading, away from the clause it explains. The
    note is placed before the next section that starts after its mark, or at the end of the section
    container holding the mark (DocBook's div.sect2, an HTML5 <section>). A note stays where it is when it
    is not at the end (a section starts after it), is under a heading of the notes' own (Notes, References:
    nothing is shown between the last heading and the first note), shares a table,
    list or quote with its mark, or is not shown (nor in an aria-hidden element, which moving them could leave
    short enough to drop); so do two links between words (a cross-reference and its way back). Its words are
    not changed."""
    pairs = _note_pairs(soup)
    if not pairs:
        return
    notes = {id(note) for _, note in pairs}
    marks = {id(mark) for mark, _ in pairs}
    order: dict[int, int] = {}
    listed: dict[int, bool] = {}  # per <ol>: it numbers headings (`_listed_headings`), asked once
    headings: list[Tag] = []  # the headings that start sections, in document order
    for i, tag in enumerate(soup.find_all(True)):
        order[id(tag)] = i
        if tag.name in _HEADING_SET and _starts_section(tag, listed):
            headings.append(tag)
    starts = [order[id(h)] for h in headings]
    found = [(mark, _note_parts(note, notes, marks)) for mark, note in pairs
             if _NOTE_MARK.fullmatch(_collapse(mark.get_text())) and _shown(mark) and _shown(note)
             and not any(p.get("aria-hidden") == "true" for p in note.parents)]
    found = [(mark, parts) for mark, parts in found if parts and order[id(mark)] < order[id(parts[0])]
             and (not starts or starts[-1] < order[id(parts[0])])]  # after its mark, and at the end
    if not found or headings and _notes_section(headings[-1], min((parts[0] for _, parts in found),
                                                                   key=lambda t: order[id(t)])):
        return
    for mark, parts in found:
        common = next(p for p in parts[0].parents if any(q is p for q in mark.parents))
        if common.name in _NOTE_UNITS or _Walker.block_div_kind(common):
            continue
        j = bisect.bisect_right(starts, order[id(mark)])  # the first section to start after the mark
        heading = headings[j] if j < len(headings) and starts[j] < order[id(parts[0])] else None
        section = mark.find_parent(lambda t: _is_container(t) or t.name in _HTML5_SECTIONS)
        into = section is not None and not any(p is section for p in parts[0].parents) and (
            heading is None or not any(p is section for p in heading.parents))
        if not into and heading is None:
            continue
        before = None if into else _section_start(heading, mark)
        if parts[0].name == "dt":  # a label and its text stay one definition, as in their list
            dl = soup.new_tag("dl")
            for part in parts:
                dl.append(part.extract())
            parts = [dl]
        for part in parts:
            if before is not None:
                before.insert_before(part.extract())
            elif section is not None:  # the end of the section holding the mark, before any after it
                section.append(part.extract())


def _shown(tag: Tag) -> bool:
    """Neither the element nor one around it is dropped."""
    return not any(_dropped(t) for t in (tag, *tag.parents) if t.name not in _ROOTS)


#: where a heading is content to the walk, not a section's start (besides a block div: a note, a sidebar; and a
#: list, unless it is an <ol> that numbers headings)
_CONTENT_HEADING_PARENTS = frozenset({"table", "blockquote", "pre", "ul", "dl", "menu"})


def _starts_section(heading: Tag, listed: dict[int, bool]) -> bool:
    """The heading starts a section as the walk reads it: it is shown, and not in a table, quote, list, note, ...
    (a heading in a layout table had been taken for the next section's start, and a note put in the table).
    ``listed``: each <ol>'s answer to `_listed_headings`, kept for the page (asked per heading, nested lists of
    headings had cost seconds)."""
    def numbers_headings(ol: Tag) -> bool:
        if id(ol) not in listed:
            listed[id(ol)] = _listed_headings(ol, _TextCheck()) is not None
        return listed[id(ol)]

    return _shown(heading) and not any(
        p.name in _CONTENT_HEADING_PARENTS
        or p.name == "ol" and not numbers_headings(p)
        or p.name == "div" and _Walker.block_div_kind(p) is not None and "titlepage" not in _classes(p)
        for p in heading.parents)


#: what shows as content without text: a section holding only images (Screenshots) is no heading of notes
_SHOWN_WITHOUT_TEXT = frozenset({"img", "picture", "video", "audio", "iframe", "svg", "canvas", "object", "embed"})


def _notes_section(heading: Tag, first: Tag) -> bool:
    """The last heading heads the notes (Notes, References, Texinfo's Footnotes): nothing is shown between it
    and the first note (a link within the page, "Back to top", and a rule are nothing; an image is something).
    Text after the notes (an uncited entry, a copyright line) does not matter; an introduction before them
    does, and they then move."""
    own = {id(s) for s in heading.find_all(string=True)}
    for node in heading.next_elements:
        if node is first:
            return True
        if isinstance(node, Tag):
            if node.name in _SHOWN_WITHOUT_TEXT and _shown(node):
                return False
        elif _is_text(node) and id(node) not in own and node.strip() and _shown(node.parent) and \
                node.find_parent(_links_within) is None:
            return False
    return True


def _note_parts(note: Tag, notes: set[int], marks: set[int]) -> list[Tag]:
    """The elements that are the whole note, in order, or none (the note is or holds a heading).

    The block the note's target is or starts (an <a> is in a <p>); a <dt> label with its <dd>s (docutils before
    0.18); else widened to an element around it while that starts with it, holds no other note, mark or
    heading and nothing else that links within the page, holds no text after it unless it is a note's own
    element (Word: the div of one footnote around its paragraphs), and is no list, section container or
    dropped element (Pandoc: the <li>, not its list)."""
    block = note
    while block.name not in _BREAKING and (parent := block.parent) is not None and parent.name not in _ROOTS:
        block = parent
    if block.name in _HEADING_SET or block.find(HEADINGS) is not None:
        return []
    if block.name == "dt":
        parts = [block]
        for sib in block.next_siblings:
            if isinstance(sib, Tag):
                if sib.name != "dd":
                    break
                parts.append(sib)
        return parts
    while (parent := block.parent) is not None and parent.name not in _ROOTS and parent.name not in _LISTS \
            and not _is_container(parent) and not _dropped(parent):
        if any(_shows_text(s) for s in block.previous_siblings):  # its parent does not start with it
            break
        if any(isinstance(t, Tag) and (id(t) in marks or id(t) in notes and t is not note or t.name in _HEADING_SET)
               for t in parent.descendants):
            break
        if any(child is not block and isinstance(child, Tag) and (_links_within(child) or child.find(_links_within))
               for child in parent.children):
            break
        if not _note_element(parent, notes) and any(_shows_text(s) for s in block.next_siblings):
            break  # text after it in an element that is no note's own is not the note's (a wrapper's)
        block = parent
    return [block]


#: an element that is one note by its id, class or style: Word's div id=ftn1 (mso-element:footnote, endnote:
#: edn1), LibreOffice's div id=sdfootnote1, a "footnote" class; its paragraphs after the first are the note's
_NOTE_ELEMENT = re.compile(r"(?i)foot|endnote|\bftn\d|\bedn\d|mso-element:\s*(?:foot|end)note")


def _note_element(tag: Tag, notes: set[int]) -> bool:
    """The element is one note's own: by its id, class or style, or by where it is, after a rule or another
    note (Google Docs writes each note as a bare <div>, its paragraphs after the first in it)."""
    if _NOTE_ELEMENT.search(" ".join(str(tag.get(a, "")) for a in ("id", "class", "style"))):
        return True
    before = tag.find_previous_sibling(True)
    return before is not None and (before.name == "hr" or any(
        isinstance(t, Tag) and id(t) in notes for t in (before, *before.descendants)))


def _shows_text(node: PageElement) -> bool:
    """A string with text, or an element holding any (dropped ones too: where a note or a section starts)."""
    return _is_text(node) and bool(node.strip()) or isinstance(node, Tag) and bool(node.get_text().strip())


def _links_within(tag: Tag) -> bool:
    """A link to a place in this page (a note's link back to its mark is one)."""
    return tag.name == "a" and len(href := str(tag.get("href") or "")) > 1 and href.startswith("#")


def _section_start(heading: Tag, mark: Tag) -> Tag:
    """The outermost element that starts with ``heading`` and does not hold ``mark``: where its section starts
    (DocBook: the div.sect2 around the div.titlepage around the heading)."""
    top = heading
    while (parent := top.parent) is not None and parent.name not in _ROOTS:
        if any(p is parent for p in mark.parents):
            break
        before = itertools.takewhile(lambda n: n is not top, parent.contents)
        if any(_shows_text(n) for n in before):
            break
        top = parent
    return top


@dataclass(frozen=True)
class _Resume:
    """Where a top-level section container ended under a heading: that heading again, if text follows."""

    heading: HeadingBlock


def _resumed(blocks: list[Block | _Resume]) -> list[Block]:
    """The blocks, each _Resume followed by content (before any heading) replaced by its heading, the rest dropped."""
    out: list[Block] = []
    for i, block in enumerate(blocks):
        if not isinstance(block, _Resume):
            out.append(block)
            continue
        following = next((blocks[j] for j in range(i + 1, len(blocks)) if not isinstance(blocks[j], _Resume)), None)
        if isinstance(following, ContentBlock):
            out.append(block.heading)
    return out


def _body_nodes(soup: BeautifulSoup) -> list[PageElement]:
    """What a browser shows as the page's body, in order: <body>'s children, then what lxml left beside it.

    HTML parsing moves text after </body> or </html> (a CMS's appended block, pages joined by `cat`) and a
    second <body>'s children into the one body; lxml keeps them beside <body> or in a second <html>, and
    only <body> had been read: that text was lost without a warning."""
    if not isinstance(soup.body, Tag):
        return list(soup.contents)
    nodes: list[PageElement] = []

    def add(children: Iterable[PageElement]) -> None:
        for child in list(children):
            if isinstance(child, Tag) and child.name in ("html", "body"):
                add(child.contents)
            else:  # a <head> among them is dropped as the walk drops any
                nodes.append(child)

    add(soup.body.contents)
    add(soup.body.next_siblings)
    page = soup.body.find_parent("html")
    if page is not None:
        add(page.next_siblings)
    return nodes


# elements whose content is raw text: left open, they take in the rest of the page, which is then not read
# (a comment, script, style, title) or read as plain text, its markup included (the others)
_RAW_TEXT = frozenset({"script", "style", "title", "textarea", "xmp", "iframe", "noembed", "noframes", "plaintext"})
_HIDDEN = frozenset({"script", "style", "title"})
# a comment's or a start tag's opening; a start tag runs to the first > outside a quoted attribute value
_TAG_OPEN = re.compile(r"<(?:(!--)|([A-Za-z][^\s/>]*))")
_TAG_REST = re.compile(r"""(?:[^>"'=]|=\s*"[^"]*"|=\s*'[^']*'|=)*>""")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def truncation_warning(text: str) -> str | None:
    """What a page cut short or left open loses, for the ingest report (the page is still stored).

    Browsers and lxml read such a page without complaint, so nothing fails:
    a comment or a raw-text element (script, style, title, textarea, ...)
    never closed takes in everything after it, and a page ending inside a tag
    lost its end. Unclosed ordinary elements (no ``</body>``) lose nothing and
    are not named; nor is a self-closed ``<script .../>`` (XHTML), which lxml
    reads as closed. The page is read forward tag by tag, as a browser does,
    so a ``<!--`` or a ``>`` inside a quoted attribute value is no markup.
    """
    pos = 0
    while m := _TAG_OPEN.search(text, pos):
        if m.group(1):
            short = next((n for n in (">", "->") if text.startswith(n, m.end())), None)  # <!--> and <!---> end there
            c = None if short else re.compile(r"--!?>").search(text, m.end())
            end = m.end() + len(short) if short else (c.end() if c else -1)
            what, hidden, opened = "a comment (<!--)", True, m.end()
        else:
            rest = _TAG_REST.match(text, m.end())
            if rest is None:  # the page ends inside this tag: the check below names it
                break
            tag, gt = m.group(2).lower(), rest.end() - 1
            if tag not in _RAW_TEXT or text[gt - 1] == "/":  # <script src="x.js"/>, <title/> in SVG: closed
                pos = gt + 1
                continue
            c = re.compile(rf"</{tag}\s*>", re.IGNORECASE).search(text, gt + 1)
            end = c.end() if c else -1
            what, hidden, opened = f"a <{tag}> element", tag in _HIDDEN, gt + 1  # counted after its opening tag
        if end < 0:
            rest_len = len(text) - opened
            how = "not read as text" if hidden else "read as plain text, markup included"
            return (f"{what} opened at line {_line_of(text, m.start())} is never closed: the {rest_len} characters "
                    f"after it are {how} (the file may be truncated)")
        pos = end
    tail = text.rstrip()
    lt = tail.rfind("<")
    if lt >= 0 and ">" not in tail[lt:] and re.match(r"</?[A-Za-z]", tail[lt:]):
        cut = tail[lt:lt + 30]
        return f"the file ends inside a tag ({cut!r} at line {_line_of(text, lt)}): it looks truncated"
    return None
