"""Framework adapters (LangChain, LlamaIndex) and the framework-free part they share.

This package imports neither framework: ``onetrip.integrations.langchain`` and
``onetrip.integrations.llamaindex`` do, and are installed with the extras
``onetrip[langchain]`` / ``onetrip[llamaindex]``. What lives here turns one
onetrip call (ONE statement: hits + parents + neighbors, or an assembled
context) into framework-neutral `Item`s, so both adapters return the same
texts, ids, scores and metadata.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..async_retrieve import AsyncRetriever
from ..connection import resolve_dsn
from ..context import Context, Passage, passage_header, render_context
from ..embedders import check_embedder_object
from ..retrieve import (CONTEXT_DEFAULT, MAX_BUDGET, MODE_CHOICES, Expansion, Filters, Hit, HybridOptions, Retriever,
                        SectionRecord, as_filters, as_hybrid, check_hybrid_mode, check_k, resolve_mode)

CONTENTS = ("section", "expanded")

__all__ = ["CONTENTS", "Item", "Query", "Source", "default_embedder", "hit_item", "passage_item", "shared_source",
           "to_items"]


@dataclass(frozen=True)
class Item:
    """One result, before it becomes a LangChain Document or a LlamaIndex node."""

    id: str                  # "doc_id#section_id": stable across calls, unique per result
    text: str
    metadata: dict[str, Any]
    score: float | None      # similarity (1 - distance) in dense mode, RRF score in hybrid/lexical
    relations: dict[str, str | None]  # parent/prev/next/source ids, for frameworks that link nodes


def item_id(doc_id: str, section_id: str) -> str:
    return f"{doc_id}#{section_id}"


def _score(mode: str, distance: float | None, rrf: float | None) -> float | None:
    """Higher is better, as both frameworks expect: similarity for dense, the fused score otherwise."""
    if mode == "dense":
        return None if distance is None else 1.0 - distance
    return rrf


def _related_text(rec: SectionRecord) -> str:
    return f"{passage_header(rec.doc_id, rec.anchor, rec.heading_path)}\n{rec.content}"


def hit_item(hit: Hit, *, mode: str, content: str) -> Item:
    """A per-hit result; ``content="expanded"`` puts parent, prev, hit, next into the text.

    Expanded text follows reading order (sequence_index) with one heading-path
    separator per section, and lists a section once when it is both the parent
    and the previous section. ``content="section"`` keeps the hit's own text
    and carries the related sections' text in metadata instead, also once: when the
    previous section is the parent (a first subsection), ``prev_content`` and
    ``prev_heading_path`` are None and ``prev_section_id`` equals ``parent_section_id``.
    """
    s = hit.section
    related = {"parent": hit.parent, "prev": hit.prev, "next": hit.next}
    meta: dict[str, Any] = {
        "doc_id": s.doc_id,
        "section_id": s.section_id,
        "sequence_index": s.sequence_index,
        "heading": s.heading,
        "heading_level": s.heading_level,
        "heading_path": list(s.heading_path),
        "anchor": s.anchor,
        "revision": s.revision,
        "rank": hit.rank,
        "distance": hit.distance,
        "score": _score(mode, hit.distance, hit.score),
    }
    # ids of the related sections that came back: None at a boundary, when not asked for, or
    # when the filters hide it (a hidden parent leaves no trace, not even its id)
    for role, rec in related.items():
        meta[f"{role}_section_id"] = rec.section_id if rec else None
    if content == "section":
        for role, rec in related.items():
            # a first subsection's previous section is its parent: its text is parent_content already
            # (a prompt that shows the metadata, as LlamaIndex's does, would show it twice)
            shown = rec is not None and not (role == "prev" and hit.parent is not None
                                             and rec.section_id == hit.parent.section_id)
            meta[f"{role}_content"] = rec.content if shown else None
            meta[f"{role}_heading_path"] = list(rec.heading_path) if shown else None
        text = s.content
    else:
        seen: dict[str, SectionRecord] = {}
        for rec in (hit.parent, hit.prev, s, hit.next):
            if rec is not None:
                seen.setdefault(rec.section_id, rec)
        text = "\n\n".join(_related_text(r) for r in sorted(seen.values(), key=lambda r: r.sequence_index))
    relations = {"source": s.doc_id, **{role: item_id(s.doc_id, rec.section_id) if rec else None
                                        for role, rec in related.items()}}
    return Item(item_id(s.doc_id, s.section_id), text, meta, meta["score"], relations)


def passage_item(p: Passage, *, mode: str, content: str) -> Item:
    """An assembled-context passage; ``content="expanded"`` prefixes its heading-path separator,
    so joining the texts with blank lines gives ``Context.render()``, which does not repeat it for a part
    that continues the passage before it (`onetrip.context.continues`)."""
    meta: dict[str, Any] = {
        "doc_id": p.doc_id,
        "section_id": p.section_id,
        "sequence_index": p.sequence_index,
        "heading": p.heading,
        "heading_level": p.heading_level,
        "heading_path": list(p.heading_path),
        "anchor": p.anchor,
        "revision": p.revision,
        "roles": list(p.roles),
        "best_rank": p.best_rank,
        "doc_rank": p.doc_rank,
        "distance": p.distance,
        # assemble returns no fused score: only a dense hit passage has one
        "score": _score(mode, p.distance, None) if p.is_hit else None,
        "token_count": p.token_count,
        "context_tokens": p.context_tokens,
    }
    text = render_context([p]) if content == "expanded" else p.content
    return Item(item_id(p.doc_id, p.section_id), text, meta, meta["score"], {"source": p.doc_id})


@dataclass(frozen=True)
class Query:
    """What every call of an adapter asks onetrip for (validated once, at construction).

    ``expand`` picks the related sections. Per-hit results (the default) carry the
    parent and the +/-1 neighbors (``Expansion(parent=..., neighbors=0|1)``);
    wider expansions (ancestors, section, document, neighbors > 1) need
    ``assembled=True``, which returns the deduplicated, ``max_tokens``-budgeted
    context in reading order instead of one result per hit (without ``expand``:
    `onetrip.retrieve.CONTEXT_DEFAULT`, the parent and the section subtree).
    """

    k: int = 5
    mode: str = "auto"
    content: str = "expanded"
    assembled: bool = False
    expand: Expansion | None = None
    filters: Filters | None = None
    max_tokens: int | None = 2000
    hybrid: HybridOptions | None = None

    def __post_init__(self) -> None:
        check_k(self.k)
        if type(self.assembled) is not bool:  # "no" would be truthy: an assembled context nobody asked for
            raise TypeError(f"assembled must be True or False, got {self.assembled!r}")
        if self.expand is not None and not isinstance(self.expand, Expansion):
            raise TypeError(f"expand must be an Expansion, got {type(self.expand).__name__}")
        if self.hybrid is not None and not isinstance(self.hybrid, HybridOptions):
            raise TypeError(f"hybrid must be a HybridOptions, got {type(self.hybrid).__name__}")
        if self.mode not in MODE_CHOICES:
            raise ValueError(f"mode must be one of {MODE_CHOICES}, got {self.mode!r}")
        check_hybrid_mode(self.mode, self.hybrid)
        if self.content not in CONTENTS:
            raise ValueError(f"content must be one of {CONTENTS}, got {self.content!r}")
        mt = self.max_tokens
        if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= MAX_BUDGET):
            raise ValueError(f"max_tokens must be an integer from 1 to {MAX_BUDGET} (or None: no budget), got {mt!r}")
        exp = self.expand
        if exp is not None and not self.assembled:
            wide = exp.ancestors or exp.section or exp.document or exp.neighbors > 1 or exp.neighbor_scope != "any"
            if wide:
                raise ValueError("ancestors/section/document, neighbors > 1 and neighbor_scope need assembled=True; "
                                 "a per-hit result carries the parent and the +/-1 neighbors")

    @classmethod
    def build(cls, *, filters: Filters | dict[str, Any] | None = None,
              principals: Sequence[str] | None = None, **fields: Any) -> Query:
        """Accept filters, expand and hybrid as dicts (as a model dump or a JSON config gives them) and
        ``principals`` as a shortcut for ``Filters.principals``."""
        if isinstance(fields.get("expand"), dict):
            unknown = set(fields["expand"]) - set(Expansion.__dataclass_fields__)
            if unknown:  # a ValueError, as for filters and hybrid: the LangChain adapter's is a ValidationError
                raise ValueError(f"unknown expand key(s) {sorted(unknown)}; known: "
                                 f"{sorted(Expansion.__dataclass_fields__)}")
            fields["expand"] = Expansion(**fields["expand"])
        if isinstance(fields.get("hybrid"), dict):
            fields["hybrid"] = as_hybrid(fields["hybrid"])
        flt = as_filters(filters)
        if principals is not None:
            if isinstance(principals, str):
                raise TypeError("principals must be a list of strings, not one string")
            if flt.principals is not None:
                raise ValueError("give principals either in filters or as principals=, not both")
            flt = dataclasses.replace(flt, principals=tuple(principals))
        return cls(filters=flt if flt.shape else None, **fields)

    def call(self, query: Any, text: str | None = None) -> tuple[str, dict[str, Any]]:
        """The Retriever/AsyncRetriever method and keyword options for one call on ``query``.

        ``text`` is the query text when the query is given as an embedding (lexical/hybrid need it).
        The options carry the mode the call runs in ("auto" resolved), which the items' scores follow.
        """
        mode = resolve_mode(self.mode, isinstance(query, str) or text is not None)
        common: dict[str, Any] = {"mode": mode, "filters": self.filters}
        if text is not None and mode != "dense":
            common["text"] = text
        if self.hybrid is not None and mode != "dense":  # "auto" with a bare embedding runs dense
            common["hybrid"] = self.hybrid
        if self.assembled:
            return "assemble", {**common, "expand": self.expand or CONTEXT_DEFAULT, "max_tokens": self.max_tokens}
        exp = self.expand or Expansion()
        return "search", {**common, "parent": exp.parent, "neighbors": exp.neighbors > 0}


def to_items(result: list[Hit] | Context, query: Query, mode: str) -> list[Item]:
    """Hits in rank order, or an assembled context's passages in reading order (``mode``: the one the call ran in)."""
    if isinstance(result, Context):
        return [passage_item(p, mode=mode, content=query.content) for p in result.passages]
    return [hit_item(h, mode=mode, content=query.content) for h in result]


class Source:
    """The onetrip retrievers behind an adapter: given instances, or made from a DSN on first use.

    Sync calls use a `Retriever`, async calls an `AsyncRetriever` (never the
    sync one in a thread, which would hold a worker thread per in-flight query).
    From a DSN each is created lazily, so a sync-only user never opens an async
    connection. An async connection belongs to the event loop it was made in:
    each running loop gets its own (two loops at once, e.g. LlamaIndex running a
    second loop in a thread, had closed each other's); those of loops that have
    closed are closed when a new loop makes its own, or by `aclose`. Use
    `shared_source` for adapters made from a DSN, so adapters made again with the
    same fields share it. A lost connection fails the call that finds it, and the
    retriever made from the DSN opens another on its next call; the Source keeps
    that retriever (closing it had failed the calls other threads or tasks had
    under way on it with "Retriever.close() was called").
    """

    def __init__(self, retriever: Retriever | None = None, async_retriever: AsyncRetriever | None = None,
                 dsn: str | None = None, *, embedder: Any = None, schema: str | None = None,
                 prefix: str = "") -> None:
        if retriever is None and async_retriever is None and dsn is None:
            dsn = resolve_dsn(None)  # as Retriever(None): $ONETRIP_DSN, else the embedded server
        # each in its own keyword: an AsyncRetriever given as `retriever` had been taken, and then every sync call
        # failed with "'coroutine' object is not iterable" and every async one claimed it had only a sync Retriever
        if retriever is not None and not isinstance(retriever, Retriever):
            hint = (" (an AsyncRetriever: pass it as async_retriever=...)" if isinstance(retriever, AsyncRetriever)
                    else "")
            raise TypeError(f"retriever must be an onetrip.Retriever, got {type(retriever).__name__}{hint}")
        if async_retriever is not None and not isinstance(async_retriever, AsyncRetriever):
            hint = " (a sync Retriever: pass it as retriever=...)" if isinstance(async_retriever, Retriever) else ""
            raise TypeError(f"async_retriever must be an onetrip.AsyncRetriever, got "
                            f"{type(async_retriever).__name__}{hint}")
        check_embedder_object(embedder)  # a model folder's path had failed at the first search, deep inside
        self.retriever = retriever
        self.given_async = async_retriever
        self.dsn = dsn
        self.options = {"embedder": embedder, "schema": schema, "prefix": prefix}
        if embedder is None and retriever is None and async_retriever is None:
            # from a DSN the retrievers share one model (90 MB, ~2 s to load), and so do all such Sources
            self.options["embedder"] = default_embedder()
        self._lock = threading.Lock()
        self._owned_sync = False
        self._by_loop: dict[asyncio.AbstractEventLoop, AsyncRetriever] = {}
        self._making: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._latest: AsyncRetriever | None = None

    def __deepcopy__(self, memo: dict) -> Source:
        """Itself: the adapter's connections, which a deep copy of a structure holding it (LangChain's
        ``model_copy(deep=True)``) shares rather than duplicates."""
        return self

    @property
    def async_retriever(self) -> AsyncRetriever | None:
        """The given AsyncRetriever, else the one made for the running event loop (outside a loop: the
        last one made, None after `aclose`)."""
        if self.given_async is not None:
            return self.given_async
        try:
            return self._by_loop.get(asyncio.get_running_loop())
        except RuntimeError:
            return self._latest

    def sync(self) -> Retriever:
        r = self.retriever  # read once: another adapter sharing this Source may close (and clear) it meanwhile
        if r is None:
            with self._lock:  # `batch` calls from worker threads: make ONE connection, not one each
                r = self.retriever
                if r is None:
                    if self.dsn is None:
                        raise TypeError("sync calls need a Retriever or a dsn (this adapter has only an "
                                        "AsyncRetriever)")
                    r = self.retriever = Retriever(self.dsn, **self.options)
                    self._owned_sync = True
        return r

    async def async_(self) -> AsyncRetriever:
        if self.given_async is not None:
            return self.given_async
        if self.dsn is None:  # a TypeError: LlamaIndex's asyncio_run rewrites any RuntimeError's message
            raise TypeError("async calls need an AsyncRetriever or a dsn (this adapter has only a "
                            "sync Retriever, and will not run it in a thread)")
        loop = asyncio.get_running_loop()
        mine = self._by_loop.get(loop)
        if mine is not None:
            return mine
        with self._lock:  # connections of loops that have closed: close them (a plain close waits on nothing)
            stale = [(lp, r) for lp, r in self._by_loop.items() if lp.is_closed()]
            for lp, _ in stale:
                del self._by_loop[lp]
            for lp in [lp for lp in self._making if lp.is_closed()]:
                del self._making[lp]
            making = self._making.setdefault(loop, asyncio.Lock())
        for _, r in stale:
            await r.close()
        # the calls of one loop wait for its first to connect: a burst of 120 first calls had each opened a
        # connection (then closed all but one), past the server's max_connections
        async with making:
            mine = self._by_loop.get(loop)
            if mine is None:
                mine = await AsyncRetriever.create(self.dsn, **self.options)
                with self._lock:
                    self._by_loop[loop] = mine
            self._latest = mine
            return mine

    def search(self, query: Any, q: Query, text: str | None = None) -> list[Item]:
        """One sync call; ``query`` is text (embedded by onetrip's embedder) or an embedding."""
        method, options = q.call(query, text)
        result = getattr(self.sync(), method)(query, q.k, **options)
        return to_items(result, q, options["mode"])

    async def asearch(self, query: Any, q: Query, text: str | None = None) -> list[Item]:
        """One async call, on the AsyncRetriever."""
        method, options = q.call(query, text)
        result = await getattr(await self.async_(), method)(query, q.k, **options)
        return to_items(result, q, options["mode"])

    def close(self) -> None:
        """Close the sync connection this Source opened (given instances stay open)."""
        with self._lock:
            if self._owned_sync and self.retriever is not None:
                self.retriever.close()
                self.retriever, self._owned_sync = None, False

    async def aclose(self) -> None:
        """Close the async connection this Source opened for the running event loop, and those of loops that
        have closed (a connection another running loop is using is left to it); given instances stay open."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = [(lp, r) for lp, r in self._by_loop.items() if lp is loop or lp.is_closed()]
            for lp, r in mine:
                del self._by_loop[lp]
                if self._latest is r:
                    self._latest = None
        for _, r in mine:
            await r.close()


#: Sources made from a DSN, by (dsn, schema, prefix, embedder): an adapter made again with the same fields
#: (LangChain's configurable_fields makes one per call) shares the model and connections instead of loading
#: the model again and leaving a connection open each time. Kept while an adapter holds them.
_SHARED: weakref.WeakValueDictionary[tuple, Source] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()
_DEFAULT_EMBEDDER: list[Any] = []
_EMBEDDER_LOCK = threading.Lock()


def default_embedder() -> Any:
    """The bundled model, loaded once per process for every adapter made from a DSN without an embedder."""
    with _EMBEDDER_LOCK:
        if not _DEFAULT_EMBEDDER:
            from ..embedders import SentenceTransformerEmbedder

            _DEFAULT_EMBEDDER.append(SentenceTransformerEmbedder())
        return _DEFAULT_EMBEDDER[0]


def shared_source(retriever: Retriever | None, async_retriever: AsyncRetriever | None, dsn: str | None, *,
                  embedder: Any = None, schema: str | None = None, prefix: str = "") -> Source:
    """A `Source` for an adapter: given retrievers are used as they are; from a DSN, one Source per
    (dsn, schema, prefix, embedder) while an adapter holding it is alive (`close` on one closes the shared
    connections, which the next call opens again)."""
    if retriever is None and async_retriever is None and dsn is None:
        dsn = resolve_dsn(None)  # shared as the DSN it names
    if retriever is not None or async_retriever is not None:
        return Source(retriever, async_retriever, dsn, embedder=embedder, schema=schema, prefix=prefix)
    key = (dsn, schema, prefix, None if embedder is None else id(embedder))
    with _SHARED_LOCK:
        src = _SHARED.get(key)
        if src is not None and (embedder is None or src.options["embedder"] is embedder):
            return src
    src = Source(None, None, dsn, embedder=embedder, schema=schema, prefix=prefix)
    with _SHARED_LOCK:
        return _SHARED.setdefault(key, src)
