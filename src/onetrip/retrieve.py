"""The Python face of the one-round-trip query in ``sql/templates/retrieve.sql.j2``.

`Retriever.search` renders the template for the options of the call (k, parent,
neighbors), binds the query embedding and k, and sends ONE statement. The
options change the SQL text (cached per shape), never the number of statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from psycopg.rows import dict_row

from .connection import connect
from .embedders import Embedder, SentenceTransformerEmbedder, as_vector
from .schema import read_layout
from .templates import Layout, render

MAX_K = 1000


@dataclass(frozen=True)
class SectionRecord:
    """A section as returned by a search: enough to cite it and to read it."""

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


@dataclass(frozen=True)
class Hit:
    """One search hit with its parent and its neighbors in document order.

    ``parent``/``prev``/``next`` are None at a boundary (a root section, the
    first or last section of a document) or when that expansion was not asked for.
    """

    rank: int
    distance: float
    section: SectionRecord
    parent: SectionRecord | None = None
    prev: SectionRecord | None = None
    next: SectionRecord | None = None


_ROLES = (("parent", "p"), ("prev", "pv"), ("next", "nx"))


@lru_cache(maxsize=64)
def retrieval_sql(layout: Layout, *, parent: bool = True, neighbors: bool = True) -> str:
    """The statement `Retriever.search` sends for these options (psycopg binds)."""
    related = [(r, a) for r, a in _ROLES if (r == "parent" and parent) or (r != "parent" and neighbors)]
    return render(
        "retrieve",
        layout=layout,
        related=related,
        include_parent=parent,
        include_neighbors=neighbors,
    )


def _related(row: dict[str, Any], role: str, doc_id: str) -> SectionRecord | None:
    sid = row.get(f"{role}_id")
    if sid is None:
        return None
    return SectionRecord(
        doc_id=doc_id,
        section_id=sid,
        sequence_index=row[f"{role}_sequence_index"],
        heading_level=row[f"{role}_heading_level"],
        heading=row[f"{role}_heading"] or "",
        heading_path=tuple(row[f"{role}_heading_path"] or ()),
        content=row[f"{role}_content"],
    )


def hit_from_row(rank: int, row: dict[str, Any]) -> Hit:
    """Map one result row (named columns) to a typed Hit."""
    section = SectionRecord(
        doc_id=row["doc_id"],
        section_id=row["section_id"],
        sequence_index=row["sequence_index"],
        heading_level=row["heading_level"],
        heading=row["heading"] or "",
        heading_path=tuple(row["heading_path"] or ()),
        content=row["content"],
        parent_section_id=row["parent_section_id"],
        anchor=row["anchor"],
        token_count=row["token_count"],
    )
    return Hit(
        rank=rank,
        distance=float(row["distance"]),
        section=section,
        parent=_related(row, "parent", section.doc_id),
        prev=_related(row, "prev", section.doc_id),
        next=_related(row, "next", section.doc_id),
    )


def check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")
    return k


class Retriever:
    """Search onetrip's sections table: top-K hits with parent and neighbors, one round trip.

    ``conn`` is a psycopg connection (used as is; autocommit recommended so a
    search is a single statement), a DSN, or None for ``$ONETRIP_DSN`` / the
    embedded server. ``ef_search`` is set once for the session, not per query.
    """

    def __init__(
        self,
        conn: psycopg.Connection | str | None = None,
        *,
        schema: str | None = None,
        prefix: str = "",
        embedder: Embedder | None = None,
        ef_search: int | None = None,
    ) -> None:
        self._owns_conn = not isinstance(conn, psycopg.Connection)
        self.conn: psycopg.Connection = connect(conn) if self._owns_conn else conn  # type: ignore[arg-type]
        if not self._owns_conn:
            from .connection import register_adapters

            register_adapters(self.conn)
        self.layout = read_layout(self.conn, schema=schema, prefix=prefix)
        self._embedder = embedder
        if ef_search is not None:
            if isinstance(ef_search, bool) or not isinstance(ef_search, int) or not 1 <= ef_search <= 1000:
                raise ValueError(f"ef_search must be an integer from 1 to 1000, got {ef_search!r}")
            self.conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")

    @property
    def embedder(self) -> Embedder:
        """The embedder for text queries; the bundled model unless one was given."""
        if self._embedder is None:
            self._embedder = SentenceTransformerEmbedder()
        return self._embedder

    def query_vector(self, query: str | Sequence[float] | np.ndarray) -> np.ndarray:
        """Embed a text query, or validate a given embedding's dimension."""
        if isinstance(query, str):
            if not query.strip():
                raise ValueError("the query text is empty")
            return as_vector(self.embedder.embed_query(query), self.layout.dim)
        return as_vector(query, self.layout.dim)

    def search(
        self,
        query: str | Sequence[float] | np.ndarray,
        k: int = 5,
        *,
        parent: bool = True,
        neighbors: bool = True,
    ) -> list[Hit]:
        """Top-``k`` sections for ``query`` (text or embedding), expanded in one statement."""
        k = check_k(k)
        vec = self.query_vector(query)
        statement = retrieval_sql(self.layout, parent=parent, neighbors=neighbors)
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, {"query_embedding": Vector(vec), "k": k})
            rows = cur.fetchall()
        return [hit_from_row(i + 1, r) for i, r in enumerate(rows)]

    def close(self) -> None:
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
