"""The retrieval API: `Retriever` (search, assemble, search_many, explain) and its options.

Each call sends ONE statement rendered from ``sql/templates/`` (the hits CTE in
``hits_cte.sql.j2``, the per-hit query in ``retrieve_query.sql.j2``, the context
assembly in ``assemble.sql.j2``): `Retriever.search` renders it for the options of
the call (k, parent, neighbors, filters, mode), binds the query embedding and k,
and sends it. The options change the SQL text (cached per shape), never the
number of statements. Also here: `Filters`, `Expansion`, `HybridOptions`,
`CONTEXT_DEFAULT`, the result dataclasses (`Hit`, `SectionRecord`), snapshots
and the lost-connection handling.
"""

from __future__ import annotations

import json
import numbers
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import pq

from .connection import check_row_factory, connect
from .context import Context, Passage, roles_of
from .embedders import (
    Embedder,
    SentenceTransformerEmbedder,
    as_vector,
    check_embedder,
    check_embedder_object,
    check_length,
    check_recorded_probe,
    embedder_dim,
    embedder_name,
    embedder_probe,
    nan_distance_error,
)
from .errors import ConnectionLostError, DimensionMismatchError, QueryTooLargeError, missing_table_error
from .layout import Layout
from .schema import layout_query, read_layout
from .sections import MAX_LEVEL
from .store import MAX_PARTS, check_text, nul_in, recorded_record
from .templates import render

if TYPE_CHECKING:
    from .explain import Explained

MAX_K = 1000
#: search's k when none is given; with ``assemble=True``, `assemble_k` decides
SEARCH_K = 5
#: Index-scan LIMIT buckets for prepared statements (see hits_cte.sql.j2): k stays a bind,
#: applied after the bucket, unless k is a bucket itself; then the bucket LIMIT alone is k.
#: 4, 5, 8, 16 are the k that search and assemble use by default (5; 4/8/16 at 1,000/2,000/4,000
#: tokens), 10 the benchmarks'.
K_BUCKETS = (4, 5, 8, 10, 16, 20, 50, 100, 200, 500, 1000)


def k_bucket(k: int) -> int:
    """The smallest bucket >= k: a handful of statement shapes, each with a reusable generic plan."""
    return next(b for b in K_BUCKETS if b >= k)
MAX_BUDGET = 1_000_000


@dataclass(frozen=True)
class Filters:
    """Who may see what, applied to hits AND to every row an expansion adds.

    collections    tenant/collection names a row must belong to
    principals     the caller's principals/groups; a row is readable when its
                   acl is NULL (public) or shares one of them. None = no access
                   check (a trusted caller); an empty tuple = public rows only
    doc_ids        restrict to these documents
    source_prefix  documents whose source URI starts with this
    metadata       documents whose metadata contains this JSON object (jsonb @>)
    """

    collections: tuple[str, ...] | None = None
    principals: tuple[str, ...] | None = None
    doc_ids: tuple[str, ...] | None = None
    source_prefix: str | None = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("collections", "principals", "doc_ids"):
            value = getattr(self, name)
            if value is None:
                continue
            try:  # materialised first: a generator would be used up by the check below
                values = tuple(value) if not isinstance(value, str) else None
            except TypeError:
                values = None
            if values is None or not all(isinstance(v, str) for v in values):
                raise TypeError(f"filter {name} must be a list of strings, got {value!r}")
            for v in values:
                check_text(v, f"filter {name}")
            object.__setattr__(self, name, values)
        if self.source_prefix is not None:
            if not isinstance(self.source_prefix, str):
                raise TypeError(f"filter source_prefix must be a string, got {self.source_prefix!r}")
            check_text(self.source_prefix, "filter source_prefix")
        if self.metadata is not None:
            if not isinstance(self.metadata, dict):
                raise TypeError(f"filter metadata must be a JSON object (dict), got {type(self.metadata).__name__}")
            try:  # what jsonb accepts: no NaN or Infinity, no NUL, not nested past Python's recursion limit
                encoded = json.dumps(self.metadata, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as e:
                raise ValueError(f"filter metadata is not a JSON object jsonb can hold: {e}") from None
            # "\\u0000": a NUL, or a backslash before "u0000" (a path, a regex): only the first fails
            if "\\u0000" in encoded and (where := nul_in(json.loads(encoded))) is not None:
                raise ValueError(f"filter metadata {where} holds a NUL character, which PostgreSQL's jsonb cannot store")
            if "\\ud" in encoded:  # a lone surrogate ("\\ud800" in JSON): jsonb refuses it, naming no filter
                check_text(json.dumps(self.metadata, ensure_ascii=False), "filter metadata")

    @property
    def shape(self) -> tuple[str, ...]:
        """Which predicates are on: this, not the values, selects the SQL text."""
        on = []
        for key in ("collections", "principals", "doc_ids", "source_prefix", "metadata"):
            if getattr(self, key) is not None:
                on.append(key)
        return tuple(on)

    def params(self) -> dict[str, Any]:
        from psycopg.types.json import Jsonb

        out: dict[str, Any] = {}
        for key in ("collections", "principals", "doc_ids"):
            if getattr(self, key) is not None:
                out[key] = list(getattr(self, key))
        if self.source_prefix is not None:
            out["source_prefix"] = self.source_prefix
        if self.metadata is not None:
            out["metadata"] = Jsonb(self.metadata)
        return out


NO_FILTERS = Filters()


def check_query_text(text: str, what: str = "the query text") -> str:
    """A query text that can be embedded and searched, or a ValueError naming what is wrong."""
    if not text.strip():
        raise ValueError(f"{what} is empty")
    return check_text(text, what)


def as_filters(filters: Filters | dict[str, Any] | None) -> Filters:
    """Accept a Filters, a plain dict of the same fields, or None; unknown keys are an error."""
    if filters is None:
        return NO_FILTERS
    if isinstance(filters, Filters):
        return filters
    if isinstance(filters, dict):
        unknown = set(filters) - set(Filters.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown filter key(s) {sorted(unknown)}; known: {sorted(Filters.__dataclass_fields__)}")
        return Filters(**filters)
    raise TypeError(f"filters must be a Filters or a dict, got {type(filters).__name__}")


@dataclass(slots=True)
class SectionRecord:
    """A section as returned by a search: enough to cite it and to read it.

    Not frozen on purpose: a frozen dataclass sets each field through
    object.__setattr__, which made building ~40 of these per search cost more
    than the database round trip it follows (benchmarks/latency). Treat as read-only.
    """

    doc_id: str
    section_id: str
    sequence_index: int
    heading_level: int
    heading: str
    heading_path: tuple[str, ...]
    content: str
    parent_section_id: str | None = None
    anchor: str | None = None
    token_count: int | None = None
    revision: int | None = None  # the document revision that last wrote this section (it may be an earlier one)


@dataclass(slots=True)
class Hit:
    """One search hit with its parent and its neighbors in document order.

    ``parent``/``prev``/``next`` are None at a boundary (a root section, the
    first or last section of a document) or when that expansion was not asked for.
    """

    rank: int
    distance: float | None  # cosine distance to the query (None in lexical mode)
    section: SectionRecord
    parent: SectionRecord | None = None
    prev: SectionRecord | None = None
    next: SectionRecord | None = None
    score: float | None = None  # fused RRF score in hybrid/lexical mode


@lru_cache(maxsize=256)
def retrieval_sql(layout: Layout, *, parent: bool = True, neighbors: bool = True,
                  filters: tuple[str, ...] = (), mode: str = "dense", bucket: int | None = None,
                  exact: bool = False, many: bool = False) -> str:
    """The statement `Retriever.search` sends for these options (psycopg binds).

    Without the DBA editions' hit_rank column: `hits_from_rows` ranks the hits.
    ``exact``: k equals ``bucket`` (see `scan_bucket`), so the scan's LIMIT is k itself.
    ``many``: several queries (`Retriever.search_many`), in any mode.
    """
    return render(
        "retrieve_many" if many else "retrieve",
        layout=layout,
        include_parent=parent,
        include_neighbors=neighbors,
        filters=dict.fromkeys(filters, True),
        mode=mode,
        k_bucket=bucket,
        k_exact=exact,
        hit_rank=False,
        many=many,
    )


MODES = ("dense", "lexical", "hybrid")
#: What the ``mode`` option accepts: a mode above, or "auto" (the default; see `resolve_mode`).
MODE_CHOICES = ("auto", *MODES)


def resolve_mode(mode: str, has_text: bool) -> str:
    """The mode a call runs in: "auto" is hybrid when the query text is at hand, else dense.

    Why hybrid for text: on the PostgreSQL manual it found more of the evidence
    than dense search on the tuning and the held-out questions alike
    (benchmarks/results/quality_mode_*.md), for ~3 ms more per call, less than
    embedding the query text costs. A bare embedding can only be searched densely.
    """
    if mode == "auto":
        return "hybrid" if has_text else "dense"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODE_CHOICES}, got {mode!r}")
    return mode


#: The largest weight HybridOptions takes: far past any that changes a ranking (at 1e9 one list or word
#: outweighs every other), and far below what PostgreSQL's float8 overflows at in the lexical score
#: (tf_weight=1e308, say, had failed the statement with 'value out of range: overflow', naming no option).
MAX_WEIGHT = 1e9
_WEIGHT_WHY = " (a larger one ranks no differently, and past ~1e300 PostgreSQL's float8 arithmetic overflows)"
#: HybridOptions.rrf_k's and rare_term_sections' bounds: past PostgreSQL's integer the server refuses the bind.
MAX_RRF_K = 1_000_000
PG_INT_MAX = 2_147_483_647

# HybridOptions.tf_weight=None per mode (benchmarks/quality/lexical_grid.py, both question sets)
TF_WEIGHT_DEFAULT = {"lexical": 2.0, "hybrid": 0.0}


@dataclass(frozen=True)
class HybridOptions:
    """Reciprocal Rank Fusion of the dense (HNSW) and lexical (full-text) candidate lists.

    score = dense_weight / (rrf_k + dense_rank) + lexical_weight / (rrf_k + lexical_rank);
    each list holds the top ``candidates`` (at least k). The lexical list ranks sections by
    the summed idf of the query's stemmed words they hold (any word may match;
    weights from the term_stats table), plus ``term_weight`` when an exact
    technical term of the query (max_connections, pg_stat_activity) is among the
    section's terms. Words in more than ``max_term_share`` of the sections and
    in more than ``rare_term_sections`` are skipped: they match nearly
    everything, cost the most to scan and say the least.

    ``tf_weight`` lets a word that a section repeats count more: its idf is
    multiplied by 1 + tf_weight * (s(tf) - 1), where s is ts_rank's saturating
    term frequency (1, 1.25, 1.36, ... up to 1.64 for a word seen 1, 2, 3, ...
    times). None means the mode's default: 2.0 in lexical mode, 0 (presence
    only) in hybrid mode. Measured on both evidence-coverage sets
    (benchmarks/quality/lexical_grid.py): it lifts lexical mode's section
    recall@10 from 0.52/0.54 to 0.60/0.60 (tuning/held-out) but not hybrid's,
    where the dense list already ranks the sections that repeat a word.

    Defaults chosen on the evidence-coverage sets (benchmarks/quality, tuning and
    held-out questions, section recall@10 of the fused list): lexical_weight 0.3
    keeps the dense ranking in front and lets rare exact words lift a section.
    """

    candidates: int = 50
    rrf_k: int = 60
    dense_weight: float = 1.0
    lexical_weight: float = 0.3
    term_weight: float = 10.0
    max_term_share: float = 0.03
    rare_term_sections: int = 100
    tf_weight: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int) \
                or not 1 <= self.candidates <= MAX_K:
            raise ValueError(f"candidates must be an integer from 1 to {MAX_K}, got {self.candidates!r}")
        # bounded: past PostgreSQL's integer, the server refused the bind (a 400-digit rrf_k had reached it, and the
        # HTTP service's 422 named no field and echoed the number); a million already flattens 1,000 ranks
        if isinstance(self.rrf_k, bool) or not isinstance(self.rrf_k, int) or not 1 <= self.rrf_k <= MAX_RRF_K:
            raise ValueError(f"rrf_k must be an integer from 1 to {MAX_RRF_K}, got {self.rrf_k!r:.40}")
        for name in ("dense_weight", "lexical_weight", "term_weight", "tf_weight"):
            v = getattr(self, name)
            if v is None and name == "tf_weight":  # the mode's default
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
                what = "None or a non-negative number" if name == "tf_weight" else "a non-negative number"
                raise ValueError(f"{name} must be {what}, got {v!r}")
            if v > MAX_WEIGHT:
                raise ValueError(f"{name} must be at most {MAX_WEIGHT:g}, got {v!r}{_WEIGHT_WHY}")
        v = self.max_term_share
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ValueError(f"max_term_share must be a number from 0 to 1, got {v!r}")
        v = self.rare_term_sections
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= PG_INT_MAX:
            raise ValueError(f"rare_term_sections must be an integer from 0 to {PG_INT_MAX}, got {v!r:.40}")

    def params(self, k: int, mode: str = "hybrid") -> dict[str, Any]:
        """The statement's binds for ``mode``; weights that would score every hit 0 are refused, since the
        order would then be doc_id's alone (lexical mode has no distance to fall back on)."""
        if mode == "lexical" and self.lexical_weight == 0:
            raise ValueError("lexical_weight=0 in lexical mode scores every hit 0 and leaves them in doc_id order: "
                             "give it a positive weight (in lexical mode it only scales the scores)")
        if mode == "hybrid" and self.lexical_weight == 0 and self.dense_weight == 0:
            raise ValueError("dense_weight and lexical_weight are both 0: every hit would score 0 and come in "
                             "doc_id order; give either a positive weight")
        tf = self.tf_weight if self.tf_weight is not None else TF_WEIGHT_DEFAULT.get(mode, 0.0)
        return {"candidates": max(self.candidates, k), "rrf_k": self.rrf_k, "dense_weight": float(self.dense_weight),
                "lexical_weight": float(self.lexical_weight), "term_weight": float(self.term_weight),
                "max_term_share": float(self.max_term_share), "rare_term_sections": self.rare_term_sections,
                "tf_weight": float(tf)}


NEIGHBOR_SCOPES = ("any", "parent")
MAX_NEIGHBORS = 50
#: how far ancestors and a section's subtree are followed: as deep as the parsers nest (sections.MAX_LEVEL); at
#: 32, a chain of 40 nested DocBook sections lost its top ancestors and its deepest subsections without a word
MAX_DEPTH = MAX_LEVEL


@dataclass(frozen=True)
class Expansion:
    """Which sections an assembled context adds around each hit (combinable).

    neighbors       +/-N sections by sequence_index (0 = none)
    neighbor_scope  "any": cross section boundaries; "parent": stay inside the hit's parent section
    parent          the direct parent section
    ancestors       the whole chain up to the root (up to a section the filters hide: not past it)
    section         the hit's section with all its parts and its subtree
    document        the whole document, only when it has at most ``document_max_tokens``

    The field defaults are the per-hit expansion of `Retriever.search` (parent +
    previous/next section). `Retriever.assemble` called without any expansion
    option uses `CONTEXT_DEFAULT` instead.
    """

    parent: bool = True
    neighbors: int = 1
    neighbor_scope: str = "any"
    ancestors: bool = False
    section: bool = False
    document: bool = False
    document_max_tokens: int = 2000

    def __post_init__(self) -> None:
        for name in ("parent", "ancestors", "section", "document"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.neighbors, bool):
            object.__setattr__(self, "neighbors", int(self.neighbors))
        if not isinstance(self.neighbors, int) or not 0 <= self.neighbors <= MAX_NEIGHBORS:
            raise ValueError(f"neighbors must be an integer from 0 to {MAX_NEIGHBORS}, got {self.neighbors!r}")
        if self.neighbor_scope not in NEIGHBOR_SCOPES:
            raise ValueError(f"neighbor_scope must be one of {NEIGHBOR_SCOPES}, got {self.neighbor_scope!r}")
        if isinstance(self.document_max_tokens, bool) or not isinstance(self.document_max_tokens, int) \
                or self.document_max_tokens < 0:
            raise ValueError(f"document_max_tokens must be a non-negative integer, got {self.document_max_tokens!r}")


#: What `Retriever.assemble` adds around each hit unless told otherwise: the parent and the
#: section subtree (the hit's section, its split parts and everything below it). Tuned on
#: the evidence-coverage set in dense mode on the manual's earlier cut
#: (benchmarks/results/quality_mode_dense.md): with k = budget/250 it scored 57.4/71.5/80.1%
#: at 1,000/2,000/4,000 tokens, parent + +/-1 neighbors 54.8/69.2/78.8%. In the shipped auto
#: mode on the current cut (quality.md) they are less than one question's weight (3.8 points)
#: apart: 56.7/70.2/82.7% against 55.4/72.1/80.1%; it was not re-tuned there.
#: The budget's priority keeps it cheap: the subtree only fills what hits and parents leave.
CONTEXT_DEFAULT = Expansion(parent=True, neighbors=0, section=True)


def context_expansion(expand: Expansion | None = None, **options: Any) -> Expansion:
    """An assembled context's expansion: ``expand``, else ``Expansion(**options)``, else CONTEXT_DEFAULT.

    Keywords mean what the same fields of an Expansion mean (``neighbors=2`` is
    ``Expansion(neighbors=2)``: parent + +/-2); only a call that names no expansion
    at all gets the tuned default.
    """
    if expand is not None and options:
        raise TypeError("give expansion options either as expand=Expansion(...) or as keywords, not both")
    if expand is not None:
        if not isinstance(expand, Expansion):
            raise TypeError(f"expand must be an Expansion, got {type(expand).__name__}")
        return expand
    unknown = set(options) - {f.name for f in fields(Expansion)}
    if unknown:  # named as search() names them, not as Expansion.__init__'s TypeError
        raise TypeError(f"unexpected options {sorted(unknown)} (an assembled context takes k, max_tokens, filters, "
                        "mode, text, hybrid, expand, and Expansion's fields as keywords)")
    return Expansion(**options) if options else CONTEXT_DEFAULT


@lru_cache(maxsize=256)
def assemble_sql(layout: Layout, expansion: Expansion, *, budget: bool, filters: tuple[str, ...] = (),
                 mode: str = "dense", bucket: int | None = None, exact: bool = False) -> str:
    """The one statement `Retriever.assemble` sends for these options (psycopg binds)."""
    return render("assemble", layout=layout, **assemble_template_options(expansion, budget=budget),
                  filters=dict.fromkeys(filters, True), mode=mode, k_bucket=bucket, k_exact=exact)


def assemble_template_options(expansion: Expansion, *, budget: bool) -> dict[str, Any]:
    """assemble.sql.j2's options for an expansion (also what renders sql/postgres/assemble.sql)."""
    return {"parent": expansion.parent, "ancestors": expansion.ancestors, "neighbors": expansion.neighbors > 0,
            "neighbor_scope": expansion.neighbor_scope, "section": expansion.section,
            "document": expansion.document, "budget": budget, "max_depth": MAX_DEPTH, "max_neighbors": MAX_NEIGHBORS,
            "max_parts": MAX_PARTS}


_PASSAGE_COLS = ("doc_id", "section_id", "sequence_index", "heading_level", "heading", "heading_path", "anchor",
                 "content", "token_count", "context_tokens", "role_bits", "best_rank", "doc_rank", "distance")


@lru_cache(maxsize=64)
def _passage_mapper(names: tuple[str, ...]) -> Any:
    """A row -> Passage function for one result shape (positions resolved once, as for hits)."""
    ix = {n: i for i, n in enumerate(names)}
    (doc, sid, seq, level, heading, path, anchor, content, tokens, ctx, bits, best, doc_rank,
     dist_i) = (ix[c] for c in _PASSAGE_COLS)
    rev = ix.get("revision")

    def to_passage(row: tuple) -> Passage:  # indexed field by field, as `_record_mapper` (faster)
        dist = row[dist_i]
        if dist is not None and dist != dist:
            raise nan_distance_error(row[doc], row[sid])
        return Passage(row[doc], row[sid], row[seq], row[level], row[heading] or "", tuple(row[path] or ()),
                       row[anchor], row[content], row[tokens], row[ctx], roles_of(row[bits]), int(row[best]),
                       int(row[doc_rank]), None if dist is None else float(dist), None if rev is None else row[rev])

    return to_passage


def bare_hits(names: tuple[str, ...], rows: list[tuple]) -> list[Hit]:
    """Map hit-only rows (a bare top-K: the hit columns and distance, in rank order) to Hits without context."""
    to_record = _record_mapper(names)
    dist = names.index("distance")
    return [Hit(i, None if r[dist] is None else float(r[dist]), to_record(r)) for i, r in enumerate(rows, 1)]


#: `assemble` without k: one hit per this many tokens of budget (k=8 at the default 2,000).
#: A fixed k=10 filled a 1,000-token budget with hits and left no room for their
#: context, and left a 4,000-token one short of hits: on the tuning set, with the
#: default expansion in dense mode, k = budget/250 scored 57.4/71.5/80.1% evidence coverage at
#: 1,000/2,000/4,000 tokens where k=10 scored 49.7/71.5/76.6% (benchmarks/results/quality_mode_dense.md,
#: the earlier cut; in auto mode on the current cut, quality.md, k=10 scores 57.1/72.4/84.6%
#: against 56.7/70.2/82.7%: less than one question's weight apart, not re-tuned).
TOKENS_PER_HIT = 250
#: `assemble` without k and without a budget.
ASSEMBLE_K_UNBUDGETED = 10


def assemble_k(k: int | None, max_tokens: int | None) -> int:
    """The number of hits of an assembled context: ``k`` if given, else one per TOKENS_PER_HIT of budget."""
    if k is not None:
        return check_k(k)
    if max_tokens is None:
        return ASSEMBLE_K_UNBUDGETED
    return min(MAX_K, max(1, max_tokens // TOKENS_PER_HIT))


def check_k(k: object) -> int:
    """``k`` as an int: any integer type (a NumPy one too: ``np.int64`` had been refused), not a bool."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")
    return int(k)


ITERATIVE_SCANS = ("off", "strict_order", "relaxed_order")


def session_settings(ef_search: int | None, iterative_scan: str | None,
                     max_scan_tuples: int | None) -> dict[str, str]:
    """Validated pgvector settings for a retrieval connection.

    They are set once per connection (at Retriever creation, or by a pool's
    configure hook), never per query, so they cost no round trip on the hot
    path. Iterative index scans (pgvector 0.8) keep filtered searches at K
    results: the HNSW scan goes on past ef_search until K rows pass the filter
    or max_scan_tuples is reached. Without a filter they return the same rows
    but cost up to ~0.1 ms per query (benchmarks/latency/cost_split.py, 10k-1M
    sections): pass iterative_scan="off" when no search is ever filtered.
    """
    out: dict[str, str] = {}
    if ef_search is not None:
        if isinstance(ef_search, bool) or not isinstance(ef_search, int) or not 1 <= ef_search <= 1000:
            raise ValueError(f"ef_search must be an integer from 1 to 1000, got {ef_search!r}")
        out["hnsw.ef_search"] = str(ef_search)
    if iterative_scan is not None:
        if iterative_scan not in ITERATIVE_SCANS:
            raise ValueError(f"iterative_scan must be one of {ITERATIVE_SCANS}, got {iterative_scan!r}")
        out["hnsw.iterative_scan"] = str(iterative_scan)
    if max_scan_tuples is not None:
        # pgvector's range: a value past it had been dropped by the server for the default, silently
        if isinstance(max_scan_tuples, bool) or not isinstance(max_scan_tuples, int) or \
                not 1 <= max_scan_tuples <= 2**31 - 1:
            raise ValueError(f"max_scan_tuples must be an integer from 1 to 2147483647, got {max_scan_tuples!r}")
        out["hnsw.max_scan_tuples"] = str(max_scan_tuples)
    return out


class _DefaultStr(str):
    """A default a retriever can tell apart from the same value passed (``is``): over a pool, a setting asked for
    is checked against the pool's, and asking for the default value is asking (it had been dropped silently)."""


class _DefaultInt(int):
    """`_DefaultStr` for integers."""


#: `Retriever`'s and `AsyncRetriever.create`'s defaults (shown as the plain values), not asked of a pool's retriever.
DEFAULT_ITERATIVE_SCAN: str = _DefaultStr("relaxed_order")
DEFAULT_MAX_SCAN_TUPLES: int = _DefaultInt(20000)
#: What `Retriever`, `make_pool` and their async twins set when given no settings.
DEFAULT_SETTINGS = session_settings(None, "relaxed_order", 20000)


def asked_settings(ef_search: int | None, iterative_scan: str | None,
                   max_scan_tuples: int | None) -> dict[str, str]:
    """The settings a retriever's caller asked for by name (its defaults left out), which a pool must have."""
    return session_settings(ef_search, None if iterative_scan is DEFAULT_ITERATIVE_SCAN else iterative_scan,
                            None if max_scan_tuples is DEFAULT_MAX_SCAN_TUPLES else max_scan_tuples)
#: The attribute `make_pool` / `make_async_pool` record their connections' settings under.
POOL_SETTINGS = "onetrip_settings"


def settings_of_pool(pool: Any, asked: dict[str, str]) -> dict[str, str]:
    """The settings a pool's connections run with (pgvector's, and `make_pool`'s statement_timeout), which a
    retriever over it reports.

    A pool's connections are configured when the pool opens them (`make_pool`),
    and a retriever could only change them with a statement per search: a setting
    asked of the retriever (`asked_settings`: given by name, even at its default
    value) that the pool's connections do not have is refused, not silently
    dropped. {} for a pool not made by `make_pool` (its own configure decides; any
    setting asked is refused).
    """
    own = getattr(pool, POOL_SETTINGS, None)
    if any(own is None or own.get(name) != value for name, value in asked.items()):
        raise ValueError(
            "a pool's connections get their pgvector settings when the pool opens them: pass ef_search, "
            "iterative_scan and max_scan_tuples to onetrip.make_pool / make_async_pool, not to the retriever"
            + (f" (this pool's: {own})" if own is not None else " (this pool was not made by make_pool)"))
    return dict(own) if own is not None else {}


def check_connection_kind(conn: Any, *, asynchronous: bool) -> None:
    """Refuse a connection of the other flavour (or any non-DSN object) by name, before it is read as a DSN."""
    if conn is None or isinstance(conn, str):
        return
    kind = type(conn).__name__
    if asynchronous:
        sync = isinstance(conn, psycopg.Connection) or kind == "ConnectionPool"
        raise TypeError("AsyncRetriever.create needs a psycopg AsyncConnection, an AsyncConnectionPool, a DSN or "
                        f"None; got {kind}" + (" (a sync one: use onetrip.Retriever)" if sync else ""))
    hint = (" (an async one: use `await onetrip.AsyncRetriever.create(...)`)"
            if isinstance(conn, psycopg.AsyncConnection) or kind == "AsyncConnectionPool" else "")
    raise TypeError(f"Retriever needs a psycopg Connection, a ConnectionPool, a DSN or None; got {kind}{hint}")


def settings_statement(settings: dict[str, str]) -> tuple[str, dict[str, str]]:
    """ONE statement that sets all session settings (set_config with binds, not one SET each)."""
    names = list(settings)
    exprs = ", ".join(f"set_config(%(n{i})s, %(v{i})s, false)" for i in range(len(names)))
    params = {**{f"n{i}": n for i, n in enumerate(names)}, **{f"v{i}": settings[n] for i, n in enumerate(names)}}
    return f"SELECT {exprs}", params


def apply_settings(conn: psycopg.Connection, settings: dict[str, str]) -> None:
    """Set the session's pgvector settings once, in one statement."""
    if settings:
        conn.execute(*settings_statement(settings))


@dataclass(frozen=True)
class Plan:
    """One retrieval call, planned before any I/O: the statement, its binds, what to embed.

    Sync and async retrievers share everything but the I/O: plan, then embed
    (outside any transaction, once), then execute ONE statement, then map rows.
    """

    kind: str                      # "search" | "assemble" | "search_many"
    statement: str
    params: dict[str, Any]
    embed: str | None = None       # text to embed (None: nothing, or `vector` already given)
    vector: Any = None             # a given query embedding, validated later against the layout
    needs_vector: bool = False
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


def as_hybrid(hybrid: HybridOptions | dict[str, Any] | None) -> HybridOptions:
    """Accept a HybridOptions, a plain dict of its fields, or None (the defaults)."""
    if hybrid is None:
        return HybridOptions()
    if isinstance(hybrid, HybridOptions):
        return hybrid
    if isinstance(hybrid, dict):
        unknown = set(hybrid) - set(HybridOptions.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown hybrid option(s) {sorted(unknown)}; known: "
                             f"{sorted(HybridOptions.__dataclass_fields__)}")
        return HybridOptions(**hybrid)
    raise TypeError(f"hybrid must be a HybridOptions or a dict, got {type(hybrid).__name__}")


def hybrid_json(raw: dict[str, Any]) -> dict[str, Any]:
    """A JSON "hybrid" object (HTTP's, `--hybrid`'s) with its integral numbers of integer fields as int: 60.0 is an
    integer to JSON Schema, as k's 2.0 is to the HTTP service; `--hybrid '{"rrf_k": 60.0}'` had been refused
    where HTTP took the same object (found by review)."""
    ints = {f.name for f in fields(HybridOptions) if f.type == "int"}
    return {name: int(v) if name in ints and isinstance(v, float) and v.is_integer() else v for name, v in raw.items()}


def check_flag(value: Any, name: str) -> bool:
    """search's parent/neighbors: True or False (1 or 0), never a window size or a string."""
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return bool(value)
    hint = " (a +/-N window is assemble's: assemble(..., neighbors=N))" if name == "neighbors" else ""
    raise ValueError(f"{name} must be True or False, got {value!r}{hint}")


def check_hybrid_mode(mode: str, hybrid: Any) -> None:
    """Refuse hybrid options with mode="dense", where they would change nothing (as text= is refused).

    "auto" takes them and uses them when it runs hybrid or lexical: an adapter
    configured once may be asked with a bare embedding, which runs dense.
    """
    if mode == "dense" and hybrid is not None:
        raise ValueError("dense mode searches the embedding alone: hybrid=... is for mode='hybrid' or 'lexical' "
                         "(or 'auto'; drop it, or choose one of those)")


def _query_side(query: Any, k: int, mode: str, text: str | None,
                hybrid: HybridOptions | None) -> tuple[str, dict, Any, Any, bool]:
    """The mode the call runs in ("auto" resolved), the binds for the query text side, and what the
    embedding will be made from."""
    check_hybrid_mode(mode, hybrid)
    mode = resolve_mode(mode, isinstance(query, str) or text is not None)
    if mode == "dense" and text is not None:  # it had been ignored silently (HTTP refuses the same request)
        raise ValueError("dense mode searches the embedding alone: text=... is for mode='hybrid' or 'lexical' "
                         "(drop it, or choose one of those)")
    params: dict[str, Any] = {"k": k}
    if mode in ("lexical", "hybrid"):
        qtext = text if text is not None else (query if isinstance(query, str) else None)
        if qtext is None:
            raise ValueError(f"{mode} mode needs the query text: pass text=... with an embedding")
        if not isinstance(qtext, str):
            raise TypeError("the query text must be a string")
        check_query_text(qtext)
        from .store import technical_terms

        params.update(query_text=qtext, query_terms=technical_terms(qtext), **as_hybrid(hybrid).params(k, mode))
    needs_vector = mode in ("dense", "hybrid")
    embed, vector = None, None
    if needs_vector:
        if isinstance(query, str):
            embed = check_query_text(query)
        else:  # None: a cached plan's, bound to each call's vector (bind_vector)
            vector = query
    return mode, params, embed, vector, needs_vector


def scan_bucket(mode: str, k: int, params: dict[str, Any]) -> tuple[int | None, bool]:
    """The constant LIMIT of the statement's HNSW scan: k's bucket (dense), the candidates' (hybrid), none (lexical).

    And whether that LIMIT is k itself (dense, k a bucket): the statement then
    needs no second, exact LIMIT.
    """
    if mode == "dense":
        bucket = k_bucket(k)
        return bucket, bucket == k
    return (k_bucket(params["candidates"]) if mode == "hybrid" else None), False


def plan_search(layout: Layout, query: Any, k: int = SEARCH_K, *, parent: bool = True, neighbors: bool = True,
                filters: Filters | dict[str, Any] | None = None, mode: str = "auto", text: str | None = None,
                hybrid: HybridOptions | None = None) -> Plan:
    """Validate a per-hit search and build its one statement."""
    k = check_k(k)
    parent, neighbors = check_flag(parent, "parent"), check_flag(neighbors, "neighbors")
    flt = as_filters(filters)
    mode, params, embed, vector, needs = _query_side(query, k, mode, text, hybrid)
    bucket, exact = scan_bucket(mode, k, params)
    statement = retrieval_sql(layout, parent=parent, neighbors=neighbors, filters=flt.shape, mode=mode,
                              bucket=bucket, exact=exact)
    return Plan("search", statement, {**params, **flt.params()}, embed, vector, needs,
                options={"parent": parent, "neighbors": neighbors})


def plan_assemble(layout: Layout, query: Any, k: int | None = None, *, expand: Expansion | None = None,
                  max_tokens: int | None = 2000, filters: Filters | dict[str, Any] | None = None,
                  mode: str = "auto", text: str | None = None, hybrid: HybridOptions | None = None,
                  **expansion: Any) -> Plan:
    """Validate an assembled-context call and build its one statement (k=None: see `assemble_k`)."""
    exp = context_expansion(expand, **expansion)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or not 1 <= max_tokens <= MAX_BUDGET):
        raise ValueError(f"max_tokens must be an integer from 1 to {MAX_BUDGET}, got {max_tokens!r}")
    k = assemble_k(k, max_tokens)
    flt = as_filters(filters)
    mode, params, embed, vector, needs = _query_side(query, k, mode, text, hybrid)
    params.update(flt.params())
    if exp.neighbors:
        params["neighbors"] = exp.neighbors
    if exp.document:
        params["document_max_tokens"] = exp.document_max_tokens
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    bucket, exact = scan_bucket(mode, k, params)
    statement = assemble_sql(layout, exp, budget=max_tokens is not None, filters=flt.shape, mode=mode,
                             bucket=bucket, exact=exact)
    options = {"k": k, "mode": mode, **{f: getattr(exp, f) for f in exp.__dataclass_fields__}}
    return Plan("assemble", statement, params, embed, vector, needs, max_tokens, options)


def bind_vector(plan: Plan, vector: np.ndarray | None, dim: int) -> dict[str, Any]:
    """The plan's binds with the query embedding added (validated against the table's dimension)."""
    if not plan.needs_vector:
        return plan.params
    vec = vector if vector is not None else plan.vector
    if vec is None:  # a text's: the embedder's embed_query gave None (the caller's text was not None)
        raise TypeError("the embedder's embed_query returned None" if plan.embed is not None else
                        "the query must be a text or an embedding, got None")
    vec = as_vector(vec, dim, check_finite=False)
    return {**plan.params, "query_embedding": vec}  # dumped by onetrip.psycopg_adapters.Float32VectorDumper


#: The section columns of a search result row, in SectionRecord's field order.
_RECORD_COLS = ("doc_id", "section_id", "sequence_index", "heading_level", "heading", "heading_path", "content",
                "parent_section_id", "anchor", "token_count")


@lru_cache(maxsize=128)
def _record_mapper(names: tuple[str, ...]) -> Any:
    """A row -> SectionRecord function for one result shape, column positions resolved once.

    Mapping tuples by position instead of dict rows by name is measurable on
    the hot path (benchmarks/latency).
    """
    ix = {n: i for i, n in enumerate(names)}
    doc, sid, seq, level, heading, path, content, parent, anchor, tokens = (ix[c] for c in _RECORD_COLS)
    rev = ix.get("revision")

    # indexing each field (closure constants) is ~100 ns per row faster than itemgetter + unpacking
    def to_record(row: tuple) -> SectionRecord:
        return SectionRecord(row[doc], row[sid], row[seq], row[level], row[heading] or "", tuple(row[path] or ()),
                             row[content], row[parent], row[anchor], row[tokens], None if rev is None else row[rev])

    return to_record


def hits_from_rows(names: tuple[str, ...], rows: list[tuple], *, parent: bool = True,
                   neighbors: bool = True) -> list[Hit]:
    """Link retrieve.sql's rows (each section once: hits and context rows, in any order) into Hits.

    A hit's parent is the returned row with its ``parent_section_id``, its
    neighbors the rows at ``sequence_index`` -1/+1 of the same document: the
    statement returns exactly those (when asked for and visible), so a missing
    key means a boundary or a filtered-out section, and the Hit holds None.
    Sections shared by several hits are one SectionRecord object. Hits are
    ranked by score (descending), distance, doc_id, sequence_index: the order
    of the DBA editions' hit_rank (ties on doc_id aside, under a non-C collation).
    """
    return _hits_linker(names, parent, neighbors)(rows)


@lru_cache(maxsize=128)
def _hits_linker(names: tuple[str, ...], parent: bool, neighbors: bool) -> Any:
    to_record = _record_mapper(names)
    ix = {n: i for i, n in enumerate(names)}
    dist_i, score_i = ix["distance"], ix.get("score")
    # a hit is a row with a score (lexical, hybrid) or a distance (dense); context rows have neither
    mark_i = dist_i if score_i is None else score_i

    # the statement's hit order (hit_rank's window in the DBA editions): score, distance, doc_id, sequence_index
    def by_rank(pair: tuple[tuple, SectionRecord]) -> tuple:
        row, rec = pair
        d = row[dist_i]
        return (0.0 if score_i is None else -row[score_i], 0.0 if d is None else d, rec.doc_id, rec.sequence_index)

    def link(rows: list[tuple]) -> list[Hit]:
        by_id: dict[tuple[str, str], SectionRecord] = {}
        by_seq: dict[tuple[str, int], SectionRecord] = {}
        ranked = []
        for row in rows:
            rec = to_record(row)
            by_id[rec.doc_id, rec.section_id] = rec
            by_seq[rec.doc_id, rec.sequence_index] = rec
            if row[mark_i] is not None:
                ranked.append((row, rec))
        ranked.sort(key=by_rank)  # the statement does not sort its rows
        hits = []
        for rank, (row, rec) in enumerate(ranked, 1):
            doc, seq, d = rec.doc_id, rec.sequence_index, row[dist_i]
            if d is not None and d != d:
                raise nan_distance_error(doc, rec.section_id)
            sc = None if score_i is None else row[score_i]
            hits.append(Hit(rank, None if d is None else float(d), rec,
                            by_id.get((doc, rec.parent_section_id)) if parent else None,
                            by_seq.get((doc, seq - 1)) if neighbors else None,
                            by_seq.get((doc, seq + 1)) if neighbors else None,
                            None if sc is None else float(sc)))
        return hits

    return link


def column_names(cur: Any) -> tuple[str, ...]:
    """The result's column names, read straight from the libpq result.

    ``cursor.description`` builds a `psycopg.Column` (with a type lookup) per
    column on every call: ~4 us each, 120 us for 30 columns, which was a third
    of onetrip's overhead over bare top-K (benchmarks/latency).
    """
    res = cur.pgresult
    if res is None:
        return ()
    enc = cur.connection.info.encoding
    return tuple(res.fname(i).decode(enc) for i in range(res.nfields))


_STATEMENT_COLUMNS: dict[str, tuple[str, ...]] = {}


def statement_columns(statement: str, cur: Any) -> tuple[str, ...]:
    """`column_names`, remembered per statement text: a statement's columns never change."""
    names = _STATEMENT_COLUMNS.get(statement)
    if names is None:
        names = column_names(cur)
        if len(_STATEMENT_COLUMNS) < 1024:
            _STATEMENT_COLUMNS[statement] = names
    return names


def vector_value_error(e: psycopg.errors.DataException) -> ValueError | None:
    """pgvector's refusal of a NaN/infinite query embedding as onetrip's ValueError (None: another error).

    `bind_vector` leaves this check to the server (it costs nothing there), and
    the statement fails before it reads anything.
    """
    msg = str(e)
    if "not allowed in vector" in msg:
        return ValueError(f"query embedding contains NaN or infinity ({msg.splitlines()[0]})")
    return None


def limit_error(e: psycopg.errors.ProgramLimitExceeded) -> QueryTooLargeError:
    """A query past one of PostgreSQL's limits (a query text too long for a tsvector) is bad input, not an outage.

    psycopg files ProgramLimitExceeded under OperationalError, which the HTTP
    service answers with 503 "database unavailable".
    """
    return QueryTooLargeError(f"the query is too large for PostgreSQL: {e.diag.message_primary or e}; shorten the "
                              "query text")


def adapter_error(error: psycopg.ProgrammingError) -> TypeError | None:
    """The error for a query vector psycopg could not send: a pooled connection without pgvector's adapters.

    `make_pool` / `make_async_pool` register them when the pool opens a connection, and `Retriever` on a
    connection it is given; a pool made otherwise, without them, had failed every dense and hybrid search with
    psycopg's "cannot adapt type 'ndarray' using placeholder '%s'", which does not say why. None for any
    other ProgrammingError (a server error has a SQLSTATE; this one is psycopg's own).
    """
    if error.sqlstate is None and str(error).startswith("cannot adapt type 'ndarray'"):
        return TypeError("this connection has no pgvector adapters, so the query vector cannot be sent: make "
                         "the pool with onetrip.make_pool / make_async_pool, or register them in its configure "
                         "hook (onetrip.psycopg_adapters.register_adapters / register_adapters_async)")
    return None


def statement_error(e: psycopg.Error, conn: Any = None) -> Exception:
    """The error to raise for a failed retrieval statement: onetrip's own where it knows the cause (a refused
    query vector, a missing table, a query past PostgreSQL's limits, a connection without pgvector's
    adapters), else ``e`` itself. The one mapping behind `statement_errors` and `_fetch`.

    onetrip's own error reads like a check made before sending; when the server refused the statement
    inside a transaction of the caller's (``conn`` without autocommit), it says that transaction is now
    aborted: its earlier writes are lost unless rolled back to a savepoint, and the next statement fails."""
    if isinstance(e, psycopg.errors.DataException):
        mapped = vector_value_error(e) or e
    elif isinstance(e, psycopg.errors.UndefinedTable):
        mapped = missing_table_error(e)
    elif isinstance(e, psycopg.errors.ProgramLimitExceeded):
        mapped = limit_error(e)
    elif isinstance(e, psycopg.ProgrammingError):
        mapped = adapter_error(e) or e
    else:
        return e
    if mapped is not e and conn is not None and conn.info.transaction_status == pq.TransactionStatus.INERROR \
            and conn not in IN_SNAPSHOT:
        mapped.args = (f"{mapped.args[0]} (the server refused the statement: the transaction open on this "
                       "connection is aborted, roll it back)", *mapped.args[1:])
    return mapped


def check_model(r: Any, embedder: Embedder) -> bool:
    """A retriever's check of the model it embeds text with, against the record it read when it was made (the
    name, then the probe: one embedding of `embedders.PROBE_TEXT`, made once per retriever). True once passed
    against the record the retriever still holds: a `refresh_embedder_record` under way meanwhile (the HTTP
    service's /health, another thread) replaced it, and the new record is checked on the next call."""
    record = r.recorded_embedders
    table = r.layout.tables["documents"]
    name = embedder_name(embedder)  # not a string: a TypeError, not a model check that reads no record
    check_embedder(record, embedder, table)  # by name: before the model loads (its dim, its probe)
    # the dimension before the probe: a model also named as the recorded one but making vectors of another size
    # had been told its vectors differ ('another version or fine-tune?'); ingest calls it a dimension mismatch
    dim = embedder_dim(embedder)
    if dim != r.layout.dim:
        raise DimensionMismatchError(f"embedder {name} makes {dim}-d vectors but the sections table "
                                     f"{r.layout.tables['sections']} stores {r.layout.vector_type}({r.layout.dim})")
    probe = r.recorded_probe
    if probe is not None:
        if r._probe is False:
            r._probe = embedder_probe(embedder)
        check_recorded_probe(probe, r._probe, embedder, table)
    return r.recorded_embedders is record


POOL_CHECK_DEADLINE = 2.0
"""Seconds a call that found a pooled connection lost waits for the pool's check of its idle ones (`check_pool`).
A healthy check costs one round trip per idle connection; an idle connection whose server or network stopped
answering (not closed) would hold the check, and with it the caller's error, for as long as TCP takes to give up."""


def check_pool(pool: Any, deadline: float | None = None) -> None:
    """``pool.check()`` in a thread, waited for ``deadline`` seconds at most (`POOL_CHECK_DEADLINE`).

    The check first takes every idle connection out of the pool (no I/O), then
    tries each: the wait covers that first step, so the next call gets no
    connection that died in the same restart; an idle connection that hangs
    keeps only the thread, which ends when its connection answers or fails.
    """
    def run() -> None:
        try:
            pool.check()
        except Exception:  # noqa: BLE001 - a closed pool, say: the call that found the loss raises its own error
            pass

    t = threading.Thread(target=run, name="onetrip-pool-check", daemon=True)
    t.start()
    t.join(POOL_CHECK_DEADLINE if deadline is None else deadline)


def connection_lost(e: psycopg.Error, *, pooled: bool, reopens: bool = False) -> ConnectionLostError:
    """A statement's error on a connection now closed, as ConnectionLostError naming the cause.

    psycopg's own said "terminating connection due to administrator command"
    with a `LINE 5: FROM sections s` pointer under it, as if the statement were
    at fault, and on the next call "the connection is closed". Only called on
    the error path, once the connection is known broken (closed, but not by
    close(): that one keeps psycopg's "the connection is closed"). ``reopens``:
    the connection was the retriever's own (made from a DSN), which its next
    call replaces; else (not pooled) it was the caller's, which it keeps.
    """
    cause = (str(e).strip().splitlines() or [""])[0]
    when = f"({cause})"
    if e.sqlstate is None and cause == "the connection is closed":  # psycopg's, sending nothing: lost before
        when = "before this call (the call that found it out said why)"
    if pooled:
        advice = ("the pool drops it and checks its idle connections, so the next call gets a working one once "
                  "the server answers")
    elif reopens:
        advice = "this retriever opens a new connection on its next call (this call's statement was not retried)"
    else:
        advice = ("the connection was given to this retriever, which keeps it: open a new one and make a new "
                  "retriever over it (one made from a DSN, or over a pool, onetrip.make_pool, replaces lost "
                  "connections by itself)")
    return ConnectionLostError(f"the connection to PostgreSQL was lost {when}: the server ended the session (a "
                               f"restart, pg_terminate_backend, an idle timeout) or the network dropped it; {advice}",
                               cause)


@contextmanager
def lost_connection_errors(conn: psycopg.Connection, pool: Any,
                           forget: Callable[[psycopg.Connection], None] | None = None) -> Iterator[None]:
    """psycopg's error on a connection that broke under the block as ConnectionLostError; over a pool, its idle
    connections are checked first (a restart kills them all). ``forget``: drops a connection of the retriever's
    own, so that its next call opens another (`Retriever._forget`). The search path does the same inline."""
    try:
        yield
    except psycopg.OperationalError as e:
        if not conn.broken:
            raise
        if pool is not None:
            check_pool(pool)
        elif forget is not None:
            forget(conn)
        raise connection_lost(e, pooled=pool is not None, reopens=forget is not None) from None


@contextmanager
def statement_errors(conn: Any = None) -> Iterator[None]:
    """A failed statement's error as `statement_error` maps it (`_fetch`, the measured hot path, calls that
    inline rather than entering a context manager per search)."""
    try:
        yield
    except psycopg.Error as e:
        raise statement_error(e, conn) from None


def _fetch(conn: psycopg.Connection, statement: str, params: dict[str, Any]) -> tuple[list[tuple], tuple[str, ...]]:
    """Send ONE statement; its rows and column names.

    Rows come back in binary format: the server skips formatting numbers and
    arrays as text and psycopg skips parsing them, 15-30 us less per search or
    assembled context at k=10 (same rows; benchmarks/latency corpora, paired).
    """
    with conn.cursor() as cur:
        try:
            cur.execute(statement, params, binary=True)
        except psycopg.Error as e:
            raise statement_error(e, conn) from None
        return cur.fetchall(), statement_columns(statement, cur)


def check_distance_range(plan: Plan, params: dict[str, Any], result: Any) -> Any:
    """The result, unless the query embedding's length is one pgvector's float32 distances cannot handle.

    Such an embedding (norm past ~1e19 or below ~1e-19) makes every cosine
    distance exactly 1.0 or 0.0, so its hits come in an arbitrary order, with no
    error from the server. `bind_vector` does not compute the norm up front (a
    numpy reduction on the hot path costs ~25 us after a socket wait); the norm
    is checked only when the first hit's distance is exactly 0 or 1.
    """
    vec = params.get("query_embedding")
    if vec is None or plan.kind == "search_many":  # search_many checks each embedding before it sends
        return result
    for item in result if plan.kind == "search" else result.passages:
        d = item.distance
        if d is not None:
            if d == 0.0 or d == 1.0:
                check_length(vec, "query embedding's length")
            break
    return result


def result_of(plan: Plan, names: tuple[str, ...], rows: list[tuple]) -> Any:
    """Map the statement's rows (tuples, with the cursor's column names) to Hits or a Context."""
    if plan.kind == "search":
        return hits_from_rows(names, rows, parent=plan.options["parent"], neighbors=plan.options["neighbors"])
    if plan.kind == "search_many":
        from .search_many import hits_by_query

        return hits_by_query(names, rows, plan.options["queries"], parent=plan.options["parent"],
                             neighbors=plan.options["neighbors"])
    to_passage = _passage_mapper(names)
    hits = int(rows[0][names.index("hit_count")]) if rows else 0
    return Context([to_passage(r) for r in rows], plan.max_tokens, hits, plan.options)


#: the options of `Retriever.search` without ``assemble=True``
SEARCH_OPTIONS = frozenset({"parent", "neighbors", "filters", "mode", "text", "hybrid"})


def _split_search_kwargs(kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    assemble = check_assemble_flag(kwargs.pop("assemble", False))
    if not assemble:
        check_search_options(kwargs)
    return assemble, kwargs


def check_assemble_flag(assemble: object) -> bool:
    """``assemble`` is True or False (any truthy value, "no" too, had meant True)."""
    if not isinstance(assemble, bool):
        raise TypeError(f"assemble must be True or False, got {type(assemble).__name__}")
    return assemble


def check_search_options(options: dict[str, Any]) -> None:
    extra = set(options) - SEARCH_OPTIONS
    if extra:
        raise TypeError(f"unexpected options {sorted(extra)} (search takes {sorted(SEARCH_OPTIONS)}; "
                        "the others need assemble=True)")


def take_connection(conn: psycopg.Connection) -> bool:
    """Take ``conn``'s psycopg lock for closing it, cancelling the call under way (another thread's) until it
    has ended, CANCEL_TIMEOUT at most. True when taken: release it only after the connection is closed.

    psycopg holds the lock from before it sends a statement until its results are read, so a free lock means
    no statement runs. libpq's ACTIVE status is set only once the statement is written: a close() in that
    moment had read IDLE, cancelled nothing, and left it running at the server. A cancel that reaches the
    server before the statement does is dropped there, hence the cancel again every CANCEL_RECHECK. And a
    call queued on the lock behind the cancelled one had sent its statement between the release and the
    close: with the lock held through the close, it finds the connection closed and sends nothing."""
    deadline = time.monotonic() + CANCEL_TIMEOUT
    while not conn.lock.acquire(blocking=False):
        try:
            conn.cancel_safe(timeout=max(deadline - time.monotonic(), 0.1))
        except psycopg.Error:  # the close goes on: the server ends the statement when it next writes to us
            return False
        if conn.lock.acquire(timeout=min(CANCEL_RECHECK, max(deadline - time.monotonic(), 0.0))):
            return True
        if time.monotonic() >= deadline:
            return False
    return True


#: seconds `Retriever.close` waits for a cancelled call to end (a server that does not answer)
CANCEL_TIMEOUT = 5.0
#: seconds between `Retriever.close`'s cancel requests while the call has not ended
CANCEL_RECHECK = 0.2


@dataclass(eq=False)
class _Pin:
    """A `Retriever.snapshot` block: its retriever, thread and connection, and whether it is still open."""

    retriever: Any
    thread: threading.Thread
    conn: psycopg.Connection
    open: bool = True


#: The `Retriever.snapshot` block this thread runs in, if any. A thread starts with a context of its own, or a
#: copy of another's, and an asyncio task with a copy of its thread's: `Retriever._pinned` compares the thread
#: and asks whether the block is still open.
_SNAPSHOT: ContextVar[_Pin | None] = ContextVar("onetrip_snapshot", default=None)
#: The connections (sync and async) inside a `snapshot` block, each with the number of blocks open on it (over
#: one connection, a block another thread or task opens joins the open one; the last to end commits): a
#: statement refused there aborts the blocks' own transaction, which they end, so its error does not tell the
#: caller to roll it back.
IN_SNAPSHOT: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def check_no_transaction(conn: Any) -> None:
    """A `snapshot` block's BEGIN needs a connection with no transaction of the caller's open: in one (a
    connection without autocommit that has run a statement) it failed, and the block's ROLLBACK then undid the
    caller's own work (found by review). An autocommit connection opens none of its own: one busy with another
    thread's or task's statement, or with a block's COMMIT waiting behind it, is not refused (it had been)."""
    if not conn.autocommit and conn.info.transaction_status in (pq.TransactionStatus.INTRANS,
                                                                pq.TransactionStatus.INERROR):
        raise ValueError("snapshot() opens a transaction of its own, and this connection is inside one of yours: "
                         "commit or roll it back first (or run search and assemble inside yours: at REPEATABLE READ "
                         "they read one state of the tables)")


def end_snapshot(conn: psycopg.Connection, failed: bool) -> None:
    """End a `Retriever.snapshot` transaction on ``conn``: COMMIT, or after an error (an interrupt during the
    BEGIN too: it may have begun the transaction) a ROLLBACK whose own error does not hide the first one."""
    if not failed:
        conn.execute("COMMIT")
    elif conn.info.transaction_status != pq.TransactionStatus.IDLE:  # in it, or busy with another call on it
        with suppress(Exception):  # a connection of its own must not stay in this transaction
            conn.execute("ROLLBACK")


class Retriever:
    """Search onetrip's sections table: top-K hits with parent and neighbors, one round trip.

    ``conn`` is a psycopg connection (used as is; autocommit recommended so a
    search is a single statement), a ``psycopg_pool.ConnectionPool`` (see
    `onetrip.pool.make_pool`, whose connections get the settings once), a DSN,
    or None for ``$ONETRIP_DSN`` / the embedded server. pgvector settings
    (ef_search, iterative scans) are set once per connection, never per query.

    A connection lost under a call (a server restart, pg_terminate_backend)
    makes that call raise ConnectionLostError; the statement is not retried.
    One the retriever opened (from a DSN or None) is then replaced on the next
    call by a new one with the same settings (``conn`` is None in between); a
    pool replaces its own; a psycopg connection you gave stays yours, and every
    later call raises until you make a retriever over a new one.
    """

    def __init__(
        self,
        conn: Any = None,
        *,
        schema: str | None = None,
        prefix: str = "",
        embedder: Embedder | None = None,
        ef_search: int | None = None,
        iterative_scan: str | None = DEFAULT_ITERATIVE_SCAN,
        max_scan_tuples: int | None = DEFAULT_MAX_SCAN_TUPLES,
    ) -> None:
        from psycopg_pool import ConnectionPool

        layout_query(schema, prefix)  # an invalid or hostile name is refused before anything is sent
        check_embedder_object(embedder)
        self.settings = session_settings(ef_search, iterative_scan, max_scan_tuples)
        self.pool: ConnectionPool | None = conn if isinstance(conn, ConnectionPool) else None
        if self.pool is not None:
            self.settings = settings_of_pool(self.pool, asked_settings(ef_search, iterative_scan, max_scan_tuples))
        elif not isinstance(conn, psycopg.Connection):
            check_connection_kind(conn, asynchronous=False)
        check_row_factory(conn)
        self._owns_conn = self.pool is None and not isinstance(conn, psycopg.Connection)
        self._dsn: str | None = conn if self._owns_conn else None  # what a lost connection is reopened from
        self._closed = False
        self._lock = threading.Lock()  # one reopened connection, whichever threads found it lost
        self._snapshot_lock = threading.Lock()  # `snapshot` over one connection: its blocks, BEGIN and COMMIT
        self.conn: psycopg.Connection | None = None
        opened = False  # a transaction this constructor opened on the caller's (non-autocommit) connection
        if self.pool is None:
            # a reader creates no extension (as AsyncRetriever.create): a database without it had been given one by
            # a search, which then failed 'run onetrip init' anyway (found by review)
            self.conn = connect(conn, create_extension=False) if self._owns_conn else conn
            opened = not self.conn.autocommit and self.conn.info.transaction_status == pq.TransactionStatus.IDLE
        try:
            if self.conn is not None:
                if not self._owns_conn:  # `connect` registered them on its own (a second time had cost a round
                    # trip, and an interrupt there left the connection open: it was outside this try)
                    from .psycopg_adapters import register_adapters

                    register_adapters(self.conn)
                apply_settings(self.conn, self.settings)
            with self._connection() as c:
                self.layout = read_layout(c, schema=schema, prefix=prefix)
                # read once here, so no search pays a statement for it; checked when a text is first embedded
                self.recorded_embedders, self.recorded_probe = recorded_record(c, self.layout)
        except BaseException:
            if self._owns_conn:
                if self.conn is not None:  # None: lost under the layout read (`_forget` closed it)
                    self.conn.close()
            elif opened:
                self.conn.rollback()
            raise
        if opened:  # end it: the settings stay with the session, and no lock is held for the caller
            self.conn.commit()
        self._embedder = embedder
        self._embedder_checked = False
        self._probe: list[float] | None | bool = False  # the embedder's probe, made once (False: not yet)
        self._plans: dict[tuple, Plan] = {}

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """The connection for a call off the hot path (explain, the embedder record); one lost under it is
        ConnectionLostError, the pool's idle ones checked, as `_execute` does inline for searches."""
        if self.pool is not None:
            pinned = self._pinned()
            with nullcontext(pinned) if pinned is not None else self.pool.connection() as c:
                with lost_connection_errors(c, self.pool):
                    yield c
        else:
            if _SNAPSHOT.get() is not None:  # in a snapshot block whose connection was lost: fail as it did
                self._check_block_connection(self.conn)  # (explain had read outside the block; found by review)
            conn = self.conn if self.conn is not None else self._reopen()
            with lost_connection_errors(conn, None, self._forget if self._owns_conn else None):
                yield conn

    def _forget(self, conn: psycopg.Connection) -> None:
        """Drop this retriever's own connection, found lost: its next call opens another (`_reopen`).

        Kept, it had failed every later call until the process made a new
        Retriever. A connection the caller gave is never replaced.
        """
        with self._lock:
            if self.conn is not conn:  # another thread found it lost first (and may have opened another since)
                return
            self.conn = None
        conn.close()

    def _reopen(self) -> psycopg.Connection:
        """A new connection for the one `_forget` dropped, set up as the first: `connect` (autocommit, pgvector's
        adapters; its errors name the server, e.g. ConnectionFailedError) and this retriever's settings."""
        with self._lock:
            if self.conn is None:
                if self._closed:
                    raise psycopg.OperationalError("the connection is closed (Retriever.close() was called)")
                conn = connect(self._dsn, create_extension=False)
                try:
                    apply_settings(conn, self.settings)
                except BaseException:
                    conn.close()
                    raise
                self.conn = conn
            return self.conn

    def refresh_embedder_record(self, conn: psycopg.Connection | None = None) -> list[str]:
        """Read again which model the stored documents were ingested with (read once when the retriever was made).

        For a long-lived retriever made before the first ingest, or after the
        documents were deleted and ingested with another model. The HTTP service
        calls it on every /health.
        """
        if conn is None:
            with self._connection() as c:
                return self.refresh_embedder_record(c)
        self.recorded_embedders, self.recorded_probe = recorded_record(conn, self.layout)
        self._embedder_checked = False
        return self.recorded_embedders

    @property
    def embedder(self) -> Embedder:
        """The embedder for text queries; the bundled model unless one was given.

        An EmbedderMismatchError if the stored documents were ingested with another model.
        """
        if self._embedder is None:
            self._embedder = SentenceTransformerEmbedder()
        if not self._embedder_checked:
            self._embedder_checked = check_model(self, self._embedder)
        return self._embedder

    def query_vector(self, query: str | Sequence[float] | np.ndarray) -> np.ndarray:
        """Embed a text query, or validate a given embedding's dimension."""
        if isinstance(query, str):
            return as_vector(self.embedder.embed_query(check_query_text(query)), self.layout.dim)
        return as_vector(query, self.layout.dim)

    def run(self, plan: Plan) -> Any:
        """Embed (if needed, before touching the database), then send the plan's ONE statement."""
        vector = self.embedder.embed_query(plan.embed) if plan.embed is not None else None
        return self._execute(plan, bind_vector(plan, vector, self.layout.dim))

    @contextmanager
    def snapshot(self) -> Iterator[Retriever]:
        """Run this thread's calls inside the block on one connection, in one REPEATABLE READ, read-only
        transaction: they read one state of the tables (BEGIN and COMMIT cost a round trip each).

        For a caller that needs two result shapes (hits and an assembled context: two statements) to agree:
        from two states, a re-ingest committed between them gives new hits and an old context. Over a pool,
        other threads' calls take connections of their own. Over one connection they share it, and so its
        snapshot: a block another thread opens meanwhile joins the open one, and the last block to end
        commits (a second BEGIN, then its COMMIT, had ended the first block's transaction; and a joined block
        had lost its snapshot when the first one ended). `AsyncRetriever.snapshot` is the same for tasks.
        """
        if self._pinned() is not None:  # nested: the outer block's snapshot
            yield self
            return
        # over one connection, the count of its blocks and their BEGIN and COMMIT, one thread at a time: a
        # block joining while the first one's BEGIN was on its way had read outside the transaction
        lock = self._snapshot_lock if self.pool is None else nullcontext()
        with self._connection() as conn:  # a connection lost under the block: ConnectionLostError
            with lock:
                blocks = IN_SNAPSHOT.get(conn, 0)
                if not blocks:
                    check_no_transaction(conn)
                    try:
                        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    except BaseException:
                        end_snapshot(conn, failed=True)
                        raise
                IN_SNAPSHOT[conn] = blocks + 1
            pin = _Pin(self, threading.current_thread(), conn)
            token = _SNAPSHOT.set(pin)
            failed = True
            try:
                yield self
                failed = False
            finally:
                pin.open = False
                _SNAPSHOT.reset(token)
                with lock:
                    left = IN_SNAPSHOT.pop(conn, 1) - 1
                    if left:
                        IN_SNAPSHOT[conn] = left
                    else:
                        end_snapshot(conn, failed)

    def _check_block_connection(self, conn: psycopg.Connection | None) -> None:
        """A call in this thread's snapshot block whose connection is gone (lost, then dropped; another thread may
        have opened a new one since) fails: on a new connection it had read outside the block's snapshot."""
        pinned = self._pinned()
        if pinned is None or pinned is conn:
            return
        if self._closed:
            raise psycopg.OperationalError("the connection is closed (Retriever.close() was called)")
        raise connection_lost(psycopg.OperationalError("the connection is closed"), pooled=False, reopens=True)

    def _pinned(self) -> psycopg.Connection | None:
        """The connection of this retriever's open `snapshot` block that this thread runs in. A thread that runs
        in a copy of the block's context (asyncio.to_thread, LangChain's executor), or an asyncio task made in
        the block that outlives it, inherits the context variable, not the block: it takes a connection of its
        own (a pooled one pinned to it had been used after the block gave it back to the pool, inside another
        caller's transaction; found by review), as `AsyncRetriever`'s tasks do."""
        pin = _SNAPSHOT.get()
        if pin is not None and pin.open and pin.retriever is self and pin.thread is threading.current_thread():
            return pin.conn
        return None

    def _execute(self, plan: Plan, params: dict[str, Any]) -> Any:
        # a plain connection is used directly: the _connection() context manager costs measurable
        # time on the hot path (benchmarks/latency), and only a pool needs one
        if self.pool is None:
            conn = self.conn
            if _SNAPSHOT.get() is not None:  # in a snapshot block (one context variable read, else nothing)
                self._check_block_connection(conn)
            if conn is None:  # lost by an earlier call (`_forget`): the one check a search pays for reopening
                conn = self._reopen()
            try:
                rows, names = _fetch(conn, plan.statement, params)
            except psycopg.OperationalError as e:
                if conn.broken:
                    if self._owns_conn:
                        self._forget(conn)
                    raise connection_lost(e, pooled=False, reopens=self._owns_conn) from None
                raise
        else:
            pinned = self._pinned()  # inside a `snapshot` block: its connection
            with nullcontext(pinned) if pinned is not None else self.pool.connection() as c:
                try:
                    rows, names = _fetch(c, plan.statement, params)
                except psycopg.OperationalError as e:
                    if c.broken:  # the others idle in the pool died with it, as a whole pool does in a restart:
                        check_pool(self.pool)  # without this, each one failed a call before the pool replaced it
                        raise connection_lost(e, pooled=True) from None
                    raise
        return check_distance_range(plan, params, result_of(plan, names, rows))

    def _cached_plan(self, kind: str, query: Any, k: Any, options: dict[str, Any]) -> Plan | None:
        """The plan of an embedding query (no text) in dense mode, made once per (kind, k, options).

        Every Python step between two round trips costs several times its
        isolated cost (the process wakes from a socket wait with cold caches),
        so repeated calls skip re-validating options already validated. None:
        not cacheable (a text query, lexical/hybrid mode, unhashable options such
        as a filters dict); the caller plans as usual.
        """
        if isinstance(query, str) or (k is not None and type(k) is not int) \
                or options.get("mode", "auto") not in ("auto", "dense") or "text" in options:
            return None
        try:
            # with each value's type: True == 1 and 1.0 == 1, so a key of values alone would let
            # max_tokens=True reuse the plan validated for max_tokens=1
            key = (kind, k, tuple(sorted((name, type(v), v) for name, v in options.items())) if options else ())
            plan = self._plans.get(key)
        except TypeError:
            return None
        if plan is None:
            plan = (plan_search if kind == "search" else plan_assemble)(self.layout, None, k, **options)
            if len(self._plans) < 256:
                self._plans[key] = plan
        return plan

    def search(self, query: str | Sequence[float] | np.ndarray, k: int | None = None, **options: Any) -> Any:
        """Top-``k`` sections for ``query`` (text or embedding), expanded in one statement.

        k=None: 5 hits (`SEARCH_K`). Options: parent=True, neighbors=True, filters=None,
        mode="auto"|"dense"|"lexical"|"hybrid" ("auto": hybrid for a text query or with
        ``text``, dense for a bare embedding), text=None (the query text, with an embedding),
        hybrid=HybridOptions(). Returns one `Hit` per hit, or with ``assemble=True`` a
        `Context`: the same as `assemble` with these arguments (k=None: its own default).
        """
        if options.keys() <= {"parent", "neighbors", "filters", "mode"}:
            plan = self._cached_plan("search", query, SEARCH_K if k is None else k, options)
            if plan is not None:
                return self._execute(plan, bind_vector(plan, query, self.layout.dim))
        assemble, options = _split_search_kwargs(dict(options))
        if assemble:  # k=None: assemble's own k (it had been search's 5, not one hit per 250 tokens of budget)
            return self.assemble(query, k, **options)
        return self.run(plan_search(self.layout, query, SEARCH_K if k is None else k, **options))

    def assemble(self, query: str | Sequence[float] | np.ndarray, k: int | None = None, **options: Any) -> Context:
        """A deduplicated, budgeted, document-ordered context for ``query``, in ONE statement.

        k=None: one hit per 250 tokens of ``max_tokens`` (8 at 2,000; 10 without a budget).
        Options: expand=Expansion(...) or its fields as keywords (parent, neighbors,
        neighbor_scope, ancestors, section, document, document_max_tokens; none given:
        CONTEXT_DEFAULT, the parent and the section subtree), max_tokens=2000
        (None: no budget), filters, mode, text, hybrid.
        """
        plan = self._cached_plan("assemble", query, k, options)
        if plan is not None:
            return self._execute(plan, bind_vector(plan, query, self.layout.dim))
        return self.run(plan_assemble(self.layout, query, k, **options))

    def search_many(self, queries: Sequence[str | Sequence[float] | np.ndarray], k: int | None = None, *, parent: bool = True,
                    neighbors: bool = True, filters: Filters | dict[str, Any] | None = None, mode: str = "auto",
                    texts: Sequence[str] | None = None,
                    hybrid: HybridOptions | dict[str, Any] | None = None) -> list[list[Hit]]:
        """Top-``k`` hits of each query, each with its parent and neighbors: ONE statement for all of them.

        One list of `Hit` per query, in the order given; each list is what
        ``search(query, k, mode=..., ...)`` returns for that query (k=None:
        `search`'s default, 5). Queries are
        texts (embedded one by one, before the statement) or embeddings; at
        most 100. ``texts``: each query's text, with embeddings (as `search`'s
        ``text=``). mode="auto": hybrid when each query's text is at hand (every
        query a text, or ``texts``), else dense.
        """
        from .search_many import plan_many, resolve_many

        queries, mode, texts = resolve_many(queries, mode, texts, hybrid)
        vectors = None if mode == "lexical" else self._query_vectors(queries)
        plan, query, options = plan_many(self.layout, queries, vectors, k, mode=mode, texts=texts, hybrid=hybrid,
                                         parent=parent, neighbors=neighbors, filters=filters)
        if plan is None:
            return [self.search(query, k, **options)]
        return self._execute(plan, plan.params)

    def _query_vectors(self, queries: list[str | Sequence[float] | np.ndarray]) -> list[np.ndarray]:
        """search_many's (checked) queries: texts embedded, every vector validated (naming a wrong one by position)."""
        from .search_many import query_vectors

        return query_vectors([self.embedder.embed_query(q) if isinstance(q, str) else q for q in queries],
                             self.layout.dim)

    def explain(self, query: str | Sequence[float] | np.ndarray, k: int | None = None, *, assemble: bool = False,
                kind: str = "analyze", **options: Any) -> Explained:
        """The server's plan for the ONE statement `search` (or with ``assemble=True``, `assemble`) sends.

        Same arguments as those calls (k=None: their own default). ``kind``:
        "analyze" (the default) runs the statement once, read-only, and the plan
        shows actual rows, times and buffers; "plan" only plans it for these
        values; "generic" (PostgreSQL 16+) plans it for any values, the plan a
        prepared statement may reuse (repeated calls are prepared).
        """
        from .explain import explain_statement, plan_to_explain

        plan = plan_to_explain(self.layout, query, k, assemble=assemble, kind=kind, options=options)
        vector = self.embedder.embed_query(plan.embed) if plan.embed is not None else None
        params = bind_vector(plan, vector, self.layout.dim)
        with self._connection() as c:
            return explain_statement(c, plan, params, self.layout, kind=kind)

    def explain_many(self, queries: Sequence[str | Sequence[float] | np.ndarray], k: int | None = None, *,
                     kind: str = "analyze", parent: bool = True, neighbors: bool = True,
                     filters: Filters | dict[str, Any] | None = None, mode: str = "auto",
                     texts: Sequence[str] | None = None,
                     hybrid: HybridOptions | dict[str, Any] | None = None) -> Explained:
        """The server's plan for the ONE statement `search_many` sends for these arguments.

        ``kind`` as in `explain`. The plan shows one HNSW scan under a nested
        loop over the queries: `Explained.vector_index_scans` names it once.
        One query: search's own statement, as `search_many` sends it.
        """
        from .explain import check_kind, explain_statement
        from .search_many import plan_many, resolve_many

        check_kind(kind)
        queries, mode, texts = resolve_many(queries, mode, texts, hybrid)
        vectors = None if mode == "lexical" else self._query_vectors(queries)
        plan, query, options = plan_many(self.layout, queries, vectors, k, mode=mode, texts=texts, hybrid=hybrid,
                                         parent=parent, neighbors=neighbors, filters=filters)
        if plan is None:
            return self.explain(query, k, kind=kind, **options)
        with self._connection() as c:
            return explain_statement(c, plan, plan.params, self.layout, kind=kind)

    def __deepcopy__(self, memo: dict) -> Retriever:
        """Itself: a handle on a connection (or pool), which a deep copy of a structure holding it (LangChain's
        ``model_copy(deep=True)``) shares rather than duplicates."""
        return self

    def close(self) -> None:
        """Close the connection this retriever opened, after which its calls raise; over a connection or pool
        you gave, do nothing (they stay yours to close, and the retriever keeps working over them).

        A statement running on it (another thread's call) is cancelled first: closing the socket alone
        left it running on the server, holding its locks and a backend, until it ended of itself."""
        if self._owns_conn:
            with self._lock:
                self._closed = True
                conn, self.conn = self.conn, None  # later calls: "close() was called" (`_reopen`)
                if conn is not None:
                    taken = False
                    try:
                        taken = take_connection(conn)
                    finally:
                        try:
                            conn.close()
                        finally:
                            if taken:
                                conn.lock.release()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
