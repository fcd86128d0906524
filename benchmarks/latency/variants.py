"""The retrieval strategies under test, A to E, and onetrip's other calls F, Af, G, H, on onetrip's own tables.

Every variant A-E answers the same question for one query vector: the top-K
sections, each with its parent and its previous/next sections. F, Af, G and H
(VARIANT_LABELS) time the assembled context, a filtered top-K, a filtered and a
hybrid onetrip search against their own floors. They differ only
in how many statements and round trips they spend doing it:

    A   bare top-K: one statement, no expansion (the floor)
    B   onetrip: ``Retriever(conn).search(vec, k=k)``, one statement
    C   hand-written multi-call: top-K, then ALL parents in one batched fetch,
        then ALL neighbors in one batched fetch: 3 statements, 3 round trips
    C2  C with the two follow-ups sent together in psycopg pipeline mode:
        3 statements, 2 round trips
    D   naive multi-call: top-K, then one statement per parent and per
        neighbor (1 + K + 2K, minus boundaries: root sections have no parent,
        a document's first section no previous one)

B, C, C2 and D build the very same `onetrip.retrieve.Hit` values, so their
answers can be compared for equality (`diff_hits`). A builds Hits without
parent/prev/next. Every variant owns its own connection (autocommit, psycopg's
default ``prepare_threshold`` of 5: each statement text is prepared
server-side from its 6th execution on, so after warm-up all of them run as
prepared statements). A, C, C2 and D fetch rows in binary format, as
Retriever does, so no variant pays for text formatting that another skips.

LlamaIndex (variant E) is in ``llamaindex_peer.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector

from onetrip.connection import connect
from onetrip.retrieve import Expansion, Hit, Retriever, SectionRecord, bare_hits, statement_columns
from onetrip.layout import Layout

HIT_COLS = (
    "doc_id, section_id, parent_section_id, sequence_index, heading_level, heading, heading_path, "
    "anchor, content, token_count"
)
# Section fields compared between variants (plus `revision` where the library returns it).
_SECTION_FIELDS = ("doc_id", "section_id", "sequence_index", "heading_level", "heading", "heading_path", "content",
                   "parent_section_id", "anchor", "token_count", "revision")
REL_COLS = "s.doc_id, s.section_id, s.sequence_index, s.heading_level, s.heading, s.heading_path, s.content"

VARIANT_LABELS = {
    "A": "A bare top-K (floor; LIMIT k written in the SQL, so its plan is cached)",
    "B": "B onetrip single statement",
    "C": "C batched multi-call (3 RT)",
    "C2": "C2 batched + pipeline (2 RT)",
    "D": "D naive 1+K+2K calls",
    "E": "E LlamaIndex PGVectorStore + docstore",
    "F": "F onetrip assembled context (parent + ±1 + dedup + 2000-token budget)",
    "Af": "Af bare filtered top-K (collection + ACL predicate)",
    "G": "G onetrip single statement, filtered (same predicate on every row)",
    "H": "H onetrip hybrid (full text + vector, RRF) single statement",
}
ROUND_TRIPS = {"A": "1", "B": "1", "C": "3", "C2": "2", "D": "1+K+2K-boundaries", "F": "1", "Af": "1", "G": "1",
               "H": "1"}
#: The filter used by Af and G: true for every synthetic row, so result sets stay comparable,
#: but evaluated on every row the statement returns (hits and, for G, expanded rows).
BENCH_FILTER = {"collections": ("default",), "principals": ("bench",)}


def has_revision(conn: psycopg.Connection, layout: Layout) -> bool:
    """Whether hits carry a revision: the library's SectionRecord has it and the table stores it."""
    if "revision" not in getattr(SectionRecord, "__dataclass_fields__", {}):
        return False
    row = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'revision' AND NOT attisdropped",
        (layout.tables["sections"],),
    ).fetchone()
    return row is not None


def topk_sql(layout: Layout, k: int, *, revision: bool = False) -> str:
    """A's statement, also the first call of C, C2 and D (the columns of B's hits).

    k is written into the SQL text, not bound: with ``LIMIT $k`` PostgreSQL's plan
    cache never reuses a generic plan (it estimates 10% of the table) and plans
    every call afresh, ~45 us per query. A is the floor, so it gets the fast form.
    """
    t = layout.tables["sections"]
    cols = HIT_COLS + (", revision" if revision else "")
    return (
        f"SELECT {cols}, embedding <=> %(q)s::{layout.vector_type} AS distance FROM {t} "
        f"ORDER BY embedding <=> %(q)s::{layout.vector_type} LIMIT {int(k)}"
    )


def parents_batch_sql(layout: Layout) -> str:
    t = layout.tables["sections"]
    return (
        f"SELECT {REL_COLS} FROM unnest(%(doc_ids)s::text[], %(section_ids)s::text[]) AS w(doc_id, section_id) "
        f"JOIN {t} s ON s.doc_id = w.doc_id AND s.section_id = w.section_id"
    )


def neighbors_batch_sql(layout: Layout) -> str:
    t = layout.tables["sections"]
    return (
        f"SELECT {REL_COLS} FROM unnest(%(doc_ids)s::text[], %(seqs)s::int[]) AS w(doc_id, sequence_index) "
        f"JOIN {t} s ON s.doc_id = w.doc_id AND s.sequence_index = w.sequence_index"
    )


def parent_one_sql(layout: Layout) -> str:
    t = layout.tables["sections"]
    return f"SELECT {REL_COLS} FROM {t} s WHERE s.doc_id = %s AND s.section_id = %s"


def neighbor_one_sql(layout: Layout) -> str:
    t = layout.tables["sections"]
    return f"SELECT {REL_COLS} FROM {t} s WHERE s.doc_id = %s AND s.sequence_index = %s"


# -- mapping rows to Hits (the same shapes Retriever.search returns) ------------------------


def _rel(row: Sequence[Any]) -> SectionRecord:
    """A related section as `Retriever.search` returns it (no parent/anchor/token fields)."""
    doc_id, section_id, seq, level, heading, path, content = row
    return SectionRecord(doc_id=doc_id, section_id=section_id, sequence_index=seq, heading_level=level,
                         heading=heading or "", heading_path=tuple(path or ()), content=content)


def _hit_section(r: Sequence[Any]) -> SectionRecord:
    doc_id, sid, parent_id, seq, level, heading, path, anchor, content, tokens = r[:10]
    extra = {"revision": r[10]} if len(r) > 11 else {}  # (..., revision, distance)
    return SectionRecord(doc_id=doc_id, section_id=sid, sequence_index=seq, heading_level=level,
                         heading=heading or "", heading_path=tuple(path or ()), content=content,
                         parent_section_id=parent_id, anchor=anchor, token_count=tokens, **extra)


def _sorted_topk(rows: list[tuple]) -> list[tuple]:
    # Retriever's statement orders by (distance, doc_id, sequence_index); do the same.
    return sorted(rows, key=lambda r: (r[-1], r[0], r[3]))


class Variant:
    """One strategy on its own connection. ``run`` is what gets timed."""

    name = "?"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int) -> None:
        self.conn = conn
        self.layout = layout
        self.k = k

    @property
    def label(self) -> str:
        return VARIANT_LABELS[self.name]

    def run(self, vec: np.ndarray) -> Any:
        raise NotImplementedError

    def hits(self, result: Any) -> list[Hit]:
        return result

    def backend_pids(self) -> list[int]:
        return [self.conn.info.backend_pid]

    def expected_statements(self, result: Any) -> int | None:
        """How many statements this call should have sent (cross-checked at the server)."""
        return None

    def close(self) -> None:
        self.conn.close()


class BareTopK(Variant):
    """A: the floor. The hit rows only, mapped to Hits the way Retriever maps its rows."""

    name = "A"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int) -> None:
        super().__init__(conn, layout, k)
        self.sql = topk_sql(layout, k, revision=has_revision(conn, layout))

    def run(self, vec: np.ndarray) -> list[Hit]:
        with self.conn.cursor() as cur:
            cur.execute(self.sql, {"q": vec}, binary=True)
            rows = cur.fetchall()
            names = statement_columns(self.sql, cur)
        return bare_hits(names, rows)

    def expected_statements(self, result: Any) -> int:
        return 1


class OnetripSingle(Variant):
    """B: exactly what the library does: ``Retriever(conn).search(vec, k=k)``."""

    name = "B"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int) -> None:
        super().__init__(conn, layout, k)
        self.retriever = Retriever(conn, schema=layout.schema, prefix=layout.prefix)

    def run(self, vec: np.ndarray) -> list[Hit]:
        return self.retriever.search(vec, k=self.k)

    def expected_statements(self, result: Any) -> int:
        return 1


class OnetripAssembled(OnetripSingle):
    """F: the assembled context, parent + +/-1 neighbors (issue: within 1.15x of bare top-K at 1 ms RTT, k=10).

    The expansion is named, not left to the library's default (CONTEXT_DEFAULT, the
    parent and the section subtree), so F measures the same statement across versions.
    """

    name = "F"
    EXPANSION = Expansion(parent=True, neighbors=1)

    def run(self, vec: np.ndarray) -> Any:
        return self.retriever.assemble(vec, k=self.k, max_tokens=2000, expand=self.EXPANSION)

    def hits(self, result: Any) -> list[Hit]:
        return []


class BareFilteredTopK(Variant):
    """Af: the filtered floor: bare top-K with the same visibility predicate as G."""

    name = "Af"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int) -> None:
        super().__init__(conn, layout, k)
        t = layout.tables["sections"]
        self.sql = (f"SELECT {HIT_COLS}, embedding <=> %(q)s::{layout.vector_type} AS distance FROM {t} "
                    "WHERE collection = ANY(%(c)s) AND (acl IS NULL OR acl && %(p)s) "
                    f"ORDER BY embedding <=> %(q)s::{layout.vector_type} LIMIT {int(k)}")

    def run(self, vec: np.ndarray) -> list[Hit]:
        with self.conn.cursor() as cur:
            cur.execute(self.sql, {"q": vec, "c": list(BENCH_FILTER["collections"]),
                                   "p": list(BENCH_FILTER["principals"])}, binary=True)
            rows = cur.fetchall()
            names = statement_columns(self.sql, cur)
        return bare_hits(names, rows)

    def expected_statements(self, result: Any) -> int:
        return 1


class OnetripFiltered(OnetripSingle):
    """G: B with filters; every returned row (hits, parents, neighbors) passes the predicate."""

    name = "G"

    def run(self, vec: np.ndarray) -> list[Hit]:
        return self.retriever.search(vec, k=self.k, filters=BENCH_FILTER)


class OnetripHybrid(OnetripSingle):
    """H: hybrid mode (dense + full text, RRF) with the same expansion, one statement."""

    name = "H"

    def run(self, vec: np.ndarray) -> list[Hit]:
        return self.retriever.search(vec, k=self.k, mode="hybrid", text="section level topic body")


class BatchedMultiCall(Variant):
    """C (and C2 with ``pipelined=True``): the best hand-written multi-call client."""

    name = "C"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int, *, pipelined: bool = False) -> None:
        super().__init__(conn, layout, k)
        self.pipelined = pipelined
        if pipelined:
            self.name = "C2"
        self.topk = topk_sql(layout, k, revision=has_revision(conn, layout))
        self.parents = parents_batch_sql(layout)
        self.neighbors = neighbors_batch_sql(layout)
        self._last_calls = 0

    def run(self, vec: np.ndarray) -> list[Hit]:
        conn = self.conn
        rows = _sorted_topk(conn.execute(self.topk, {"q": vec}, binary=True).fetchall())
        p_keys = list(dict.fromkeys((r[0], r[2]) for r in rows if r[2] is not None))
        n_keys = list(dict.fromkeys(
            [(r[0], r[3] - 1) for r in rows if r[3] > 0] + [(r[0], r[3] + 1) for r in rows]
        ))
        p_params = {"doc_ids": [d for d, _ in p_keys], "section_ids": [s for _, s in p_keys]}
        n_params = {"doc_ids": [d for d, _ in n_keys], "seqs": [s for _, s in n_keys]}
        calls = 1
        p_cur = n_cur = None
        if self.pipelined:
            with conn.pipeline():  # both follow-ups and one Sync leave together: one round trip
                if p_keys:
                    p_cur = conn.cursor()
                    p_cur.execute(self.parents, p_params, binary=True)
                if n_keys:
                    n_cur = conn.cursor()
                    n_cur.execute(self.neighbors, n_params, binary=True)
            p_rows = p_cur.fetchall() if p_cur is not None else []
            n_rows = n_cur.fetchall() if n_cur is not None else []
        else:
            p_rows = conn.execute(self.parents, p_params, binary=True).fetchall() if p_keys else []
            n_rows = conn.execute(self.neighbors, n_params, binary=True).fetchall() if n_keys else []
        calls += bool(p_keys) + bool(n_keys)
        self._last_calls = calls
        by_sid = {(r[0], r[1]): _rel(r) for r in p_rows}
        by_seq = {(r[0], r[2]): _rel(r) for r in n_rows}
        hits = []
        for rank, r in enumerate(rows, 1):
            doc_id, parent_id, seq = r[0], r[2], r[3]
            hits.append(Hit(
                rank, float(r[-1]), _hit_section(r),
                by_sid.get((doc_id, parent_id)) if parent_id is not None else None,
                by_seq.get((doc_id, seq - 1)), by_seq.get((doc_id, seq + 1)),
            ))
        return hits

    def expected_statements(self, result: list[Hit]) -> int:
        return self._last_calls


class NaiveMultiCall(Variant):
    """D: top-K, then one statement per parent and per neighbor, the way frameworks fetch them."""

    name = "D"

    def __init__(self, conn: psycopg.Connection, layout: Layout, k: int) -> None:
        super().__init__(conn, layout, k)
        self.topk = topk_sql(layout, k, revision=has_revision(conn, layout))
        self.parent = parent_one_sql(layout)
        self.neighbor = neighbor_one_sql(layout)
        self._last_calls = 0

    def run(self, vec: np.ndarray) -> list[Hit]:
        conn = self.conn
        rows = _sorted_topk(conn.execute(self.topk, {"q": vec}, binary=True).fetchall())
        calls = 1
        hits = []
        for rank, r in enumerate(rows, 1):
            doc_id, parent_id, seq = r[0], r[2], r[3]
            parent = prev = nxt = None
            if parent_id is not None:  # a root section has no parent: nothing to fetch
                row = conn.execute(self.parent, (doc_id, parent_id), binary=True).fetchone()
                calls += 1
                parent = _rel(row) if row else None
            if seq > 0:  # the first section of a document has no previous one
                row = conn.execute(self.neighbor, (doc_id, seq - 1), binary=True).fetchone()
                calls += 1
                prev = _rel(row) if row else None
            row = conn.execute(self.neighbor, (doc_id, seq + 1), binary=True).fetchone()  # may not exist
            calls += 1
            nxt = _rel(row) if row else None
            hits.append(Hit(rank, float(r[-1]), _hit_section(r), parent, prev, nxt))
        self._last_calls = calls
        return hits

    def expected_statements(self, result: list[Hit]) -> int:
        return self._last_calls


def open_connection(dsn: str, *, application_name: str, log_statements: bool = False) -> psycopg.Connection:
    """An onetrip connection (autocommit, pgvector adapters, default prepare_threshold)."""
    kwargs: dict[str, Any] = {"application_name": application_name}
    if log_statements:
        kwargs["options"] = "-c log_statement=all"
    return connect(dsn, **kwargs)


def build_variants(
    dsn: str, layout: Layout, k: int, *, names: Sequence[str] = ("A", "B", "C", "C2", "D"),
    log_statements: bool = False, tag: str = "",
) -> dict[str, Variant]:
    """One connection per variant to ``dsn`` (the proxied DSN when timing)."""
    out: dict[str, Variant] = {}
    try:
        for name in names:
            conn = open_connection(dsn, application_name=f"onetrip-bench-{name}{tag}", log_statements=log_statements)
            if name == "A":
                out[name] = BareTopK(conn, layout, k)
            elif name == "B":
                out[name] = OnetripSingle(conn, layout, k)
            elif name == "C":
                out[name] = BatchedMultiCall(conn, layout, k)
            elif name == "C2":
                out[name] = BatchedMultiCall(conn, layout, k, pipelined=True)
            elif name == "D":
                out[name] = NaiveMultiCall(conn, layout, k)
            elif name in EXTRA_VARIANTS:
                out[name] = EXTRA_VARIANTS[name](conn, layout, k)
            else:
                conn.close()
                raise ValueError(f"unknown variant {name!r}")
    except BaseException:
        for v in out.values():
            v.close()
        raise
    return out


EXTRA_VARIANTS: dict[str, type[Variant]] = {
    "F": OnetripAssembled, "Af": BareFilteredTopK, "G": OnetripFiltered, "H": OnetripHybrid,
}


# -- comparing answers -------------------------------------------------------------------


#: What the check compares of a parent or neighbor: what C and D fetch of one. B's rows carry more of it
#: (parent_section_id, anchor, token_count, revision), which C and D leave None, so those are not compared.
_RELATED_FIELDS = ("doc_id", "section_id", "sequence_index", "heading_level", "heading", "heading_path", "content")


def _rec_key(r: SectionRecord | None) -> tuple | None:
    return None if r is None else tuple(getattr(r, f) for f in _RELATED_FIELDS)


def _first_difference(x: tuple | None, y: tuple | None, fields: tuple[str, ...]) -> str:
    """Which field of two records differs, in words (the ids alone read as equal when the content differs)."""
    if x is None or y is None:
        return f"{'None' if y is None else f'{y[0]}/{y[1]}'} != {'None' if x is None else f'{x[0]}/{x[1]}'}"
    name = next(f for f, a, b in zip(fields, x, y) if a != b)
    i = fields.index(name)
    return f"{y[0]}/{y[1]}: {name} {str(y[i])[:60]!r} != {str(x[i])[:60]!r}"


def _section_key(r: SectionRecord) -> tuple:
    return tuple(getattr(r, f, None) for f in _SECTION_FIELDS)


def diff_hits(expected: list[Hit], got: list[Hit], *, tol: float = 1e-9) -> str | None:
    """None when both answers carry the same content, else the first difference, in words."""
    if len(expected) != len(got):
        return f"{len(got)} hits instead of {len(expected)}"
    for a, b in zip(expected, got):
        where = f"rank {a.rank}"
        if a.rank != b.rank:
            return f"{where}: rank {b.rank}"
        if abs(a.distance - b.distance) > tol:
            return f"{where}: distance {b.distance!r} != {a.distance!r}"
        if _section_key(a.section) != _section_key(b.section):
            return (f"{where}: hit "
                    f"{_first_difference(_section_key(a.section), _section_key(b.section), _SECTION_FIELDS)}")
        for role in ("parent", "prev", "next"):
            x, y = _rec_key(getattr(a, role)), _rec_key(getattr(b, role))
            if x != y:
                return f"{where} ({a.section.doc_id}/{a.section.section_id}): {role} " \
                       f"{_first_difference(x, y, _RELATED_FIELDS)}"
    return None


def hit_ids(hits: list[Hit]) -> list[str]:
    return [f"{h.section.doc_id}:{h.section.section_id}" for h in hits]


def related_ids(hits: list[Hit]) -> dict[str, tuple[str | None, str | None, str | None]]:
    """hit id -> (parent id, prev id, next id), ids as 'doc:section'."""

    def rid(r: SectionRecord | None) -> str | None:
        return None if r is None else f"{r.doc_id}:{r.section_id}"

    return {f"{h.section.doc_id}:{h.section.section_id}": (rid(h.parent), rid(h.prev), rid(h.next)) for h in hits}


class CacheWarmer:
    """Reads the pages one query will touch, on a direct connection, just before its timed runs.

    Why: PostgreSQL's shared_buffers (128 MB on the embedded server) cannot hold a
    large corpus (a 1M-section HNSW index is 1.9 GB), so whichever variant ran a
    query first paid for copying its pages in from the OS cache (~1,000 pages,
    several ms) and the second got them for free. Medians then flipped with the
    random order. Warming every query once with A's and B's statements (which
    cover the hits, parents and neighbors), H's hybrid search when H runs (its
    vector side reads more candidates than k, and its lexical side other pages)
    and the peer's own vector search makes the timed runs hot-cache for every
    variant alike. Without H's, H had paid for its own cold reads on the first
    RTT level: at 100k and 1M sections its p50 at +0 ms was 7.9 and 22.0 ms over
    that level's first 50 queries and 4.9 and 10.5 ms over its last 50.
    """

    def __init__(self, dsn: str, layout: Layout, k: int, peer_vector_table: str | None = None, *,
                 hybrid: bool = False) -> None:
        self.conn = connect(dsn)
        self.a = BareTopK(self.conn, layout, k)
        self.b = OnetripSingle(self.conn, layout, k)
        self.h = OnetripHybrid(self.conn, layout, k) if hybrid else None
        self.k = k
        self.peer_sql = (f'SELECT 1 FROM "{peer_vector_table}" ORDER BY embedding <=> %s::vector LIMIT %s'
                         if peer_vector_table else None)

    def warm(self, vec: np.ndarray) -> None:
        self.a.run(vec)
        self.b.run(vec)
        if self.h is not None:
            self.h.run(vec)
        if self.peer_sql:
            self.conn.execute(self.peer_sql, (Vector(vec), self.k)).fetchall()

    def close(self) -> None:
        self.conn.close()
