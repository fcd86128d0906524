"""The "tutorial" baseline: fixed 512-token windows with 50 tokens of overlap, no structure.

Per page, the text is the page's parsed sections in document order (each section's
heading line, then its content, blank lines between): the same visible text onetrip
ingests, only flattened. It is cut into windows of at most ``size`` word pieces of
the embedding model's tokenizer, each next window starting ``overlap`` pieces before
the previous one ended. Cuts are snapped to word boundaries (the BERT pre-tokenizer's
words: whitespace- and punctuation-separated), so a window is a verbatim span of the
page text whose re-tokenization gives exactly its pieces, and the overlap is at least
``overlap`` pieces (more only when a word straddles the cut).

Each window is embedded as is with the same model. all-MiniLM-L6-v2 reads 256 word
pieces and silently truncates the rest, so only the first half of a 512-token window
shapes its vector: that is what the tutorial recipe does, and we keep it.

Windows are stored like sections in their own tables (``Layout(prefix="pg15win_")``):
one row per window, no parent, anchor None, ``metadata["anchors"]`` = anchors of the
sections whose text the window overlaps (for section recall), so the same
`Retriever.assemble` (parent=False, neighbors=0) fills the budget greedily by rank.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onetrip.sections import SECTIONING, Section

DEFAULT_SIZE = 512
DEFAULT_OVERLAP = 50
WINDOWS_VERSION = "windows-v2"  # v2: a merged section's label is not put in the page text (it holds its headings)


@dataclass(frozen=True)
class Window:
    """One window: a verbatim span ``text == source[char_start:char_end]``."""

    index: int
    text: str
    char_start: int
    char_end: int
    tok_start: int
    tok_end: int

    @property
    def tokens(self) -> int:
        return self.tok_end - self.tok_start


@dataclass(frozen=True)
class PageText:
    """A page flattened to text, with each section's character span and anchors."""

    title: str
    text: str
    spans: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)

    def anchors_between(self, start: int, end: int) -> tuple[str, ...]:
        """Anchors of every section whose span overlaps [start, end), in page order."""
        out: dict[str, None] = {}
        for s, e, anchors in self.spans:
            if s < end and start < e:
                for a in anchors:
                    out.setdefault(a, None)
        return tuple(out)


def page_text(parsed: Any) -> PageText:
    """Flatten a `onetrip.sections.ParsedDocument`: heading line + content per section.

    A section that took merged tiny siblings already begins with each part's heading line,
    its own too, so its label (`merged_heading`: "Synopsis; Description") is not added: it
    is not text of the page.
    """
    from onetrip.sections import section_anchors

    pieces: list[str] = []
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    pos = 0
    for s in parsed.sections:
        first_part = s.metadata.get("part", 1) == 1 and not s.metadata.get("merged")
        chunk = "\n\n".join(x for x in ((s.heading if first_part else ""), s.content) if x.strip())
        if not chunk:
            continue
        if pieces:
            pieces.append("\n\n")
            pos += 2
        spans.append((pos, pos + len(chunk), section_anchors(s)))
        pieces.append(chunk)
        pos += len(chunk)
    return PageText(parsed.title, "".join(pieces), spans)


def split_windows(
    text: str,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    *,
    tokenizer: Any = None,
) -> list[Window]:
    """Cut ``text`` into windows of <= ``size`` word pieces overlapping by >= ``overlap``.

    ``tokenizer`` is a `tokenizers.Tokenizer` (default: the embedding model's, without
    truncation). Word-piece offsets map windows back to verbatim source spans.
    """
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"need size >= 1 and 0 <= overlap < size, got size={size}, overlap={overlap}")
    if tokenizer is None:
        from onetrip.tokens import get_tokenizer

        tokenizer = get_tokenizer()
    enc = tokenizer.encode(text, add_special_tokens=False)
    offsets = enc.offsets
    words = enc.word_ids
    n = len(offsets)
    if n == 0:
        return []
    # token indices where a pre-tokenizer word starts (+ n): the only places we cut
    bounds = [i for i in range(n) if i == 0 or words[i] is None or words[i] != words[i - 1]] + [n]

    def last_bound_at_most(x: int, floor: int) -> int:
        """Largest boundary in (floor, x]; falls back to x itself (a word longer than a window)."""
        import bisect

        j = bisect.bisect_right(bounds, x) - 1
        return bounds[j] if j >= 0 and bounds[j] > floor else x

    out: list[Window] = []
    start = 0
    while True:
        end = n if start + size >= n else last_bound_at_most(start + size, start)
        cs, ce = offsets[start][0], offsets[end - 1][1]
        out.append(Window(len(out), text[cs:ce], cs, ce, start, end))
        if end >= n:
            break
        nxt = last_bound_at_most(end - overlap, start) if overlap else end
        if nxt <= start:  # cannot step back that far without stalling
            nxt = end
        start = nxt
    return out


# A window is stored as an onetrip Section (no parent, no anchor).
WindowRow = Section


def window_rows(doc_id: str, page: PageText, size: int = DEFAULT_SIZE,
                overlap: int = DEFAULT_OVERLAP) -> list[WindowRow]:
    from onetrip.tokens import count_tokens_batch

    wins = split_windows(page.text, size, overlap)
    counts = count_tokens_batch([w.text for w in wins])
    title = page.title or doc_id
    return [
        WindowRow(
            section_id=f"w{w.index:04d}", parent_section_id=None, sequence_index=w.index, level=1,
            heading=title, heading_path=(title,), content=w.text, token_count=c, anchor=None,
            metadata={"anchors": list(page.anchors_between(w.char_start, w.char_end)),
                      "char_start": w.char_start, "char_end": w.char_end, "window_tokens": w.tokens},
        )
        for w, c in zip(wins, counts)
    ]


def build_windows(
    conn: Any,
    manual_dir: Path,
    *,
    prefix: str = "pg15win_",
    embedder: Any,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    batch_windows: int = 256,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build (or reuse) the window tables for every *.html page in ``manual_dir``.

    A page whose bytes and window settings are unchanged since the stored revision is
    skipped (content hash), so a second run only checks hashes.
    """
    from onetrip.schema import init_schema
    from onetrip.sections import parse_file
    from onetrip.store import DocumentRecord, current_hash, refresh_term_stats, replace_document, term_stats_behind
    from onetrip.layout import Layout

    layout = init_schema(conn, Layout(prefix=prefix, dim=embedder.dim))
    pages = sorted(Path(manual_dir).glob("*.html"))
    stats: dict[str, Any] = {"pages": len(pages), "built": 0, "unchanged": 0, "failed": [], "windows_written": 0,
                             "embed_seconds": 0.0, "size": size, "overlap": overlap}
    pending: list[tuple[DocumentRecord, list[WindowRow]]] = []

    def flush() -> None:
        if not pending:
            return
        texts = [r.content for _, rows in pending for r in rows]
        t0 = time.perf_counter()
        vecs = embedder.embed_documents(texts)
        stats["embed_seconds"] += time.perf_counter() - t0
        off = 0
        for rec, rows in pending:
            replace_document(conn, layout, rec, rows, vecs[off:off + len(rows)], force=True)
            off += len(rows)
            stats["built"] += 1
            stats["windows_written"] += len(rows)
        pending.clear()
        if on_progress:
            on_progress(f"windows: {stats['built'] + stats['unchanged']}/{len(pages)} pages")

    for path in pages:
        data = path.read_bytes()
        digest = hashlib.sha256(data + f"|{WINDOWS_VERSION}|{SECTIONING}|{size}|{overlap}".encode()).hexdigest()
        if current_hash(conn, layout, path.name) == digest:
            stats["unchanged"] += 1
            continue
        try:
            parsed = parse_file(path)
        except Exception as e:  # noqa: BLE001 - a bad page is reported, not fatal
            stats["failed"].append({"path": str(path), "reason": f"{type(e).__name__}: {e}"})
            continue
        rows = window_rows(path.name, page_text(parsed), size, overlap)
        if not rows:
            stats["failed"].append({"path": str(path), "reason": "no text"})
            continue
        rec = DocumentRecord(doc_id=path.name, source_uri=path.resolve().as_uri(), title=parsed.title,
                             content_hash=digest,
                             metadata={"format": "windows", "size": size, "overlap": overlap})
        pending.append((rec, rows))
        if sum(len(r) for _, r in pending) >= batch_windows:
            flush()
    flush()
    # rows written here bypass ingest, which recounts the lexical word weights after
    # every run; without the recount a lexical/hybrid window baseline weighs every word 1
    if stats["built"] or term_stats_behind(conn, layout):
        stats["term_stats_words"] = refresh_term_stats(conn, layout)
    stats["embed_seconds"] = round(stats["embed_seconds"], 1)
    stats["windows_stored"] = conn.execute(f"SELECT count(*) FROM {layout.tables['sections']}").fetchone()[0]
    return stats

