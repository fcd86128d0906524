"""Synthetic corpora with a real heading hierarchy and clustered embeddings.

For tests and benchmarks: topic -> document -> section, where each section's
vector is its document's vector plus noise and each document's vector is its
topic's centroid plus noise. Clustered, unlike uniform noise, so HNSW behaves
as it does on real embeddings (neighbors are meaningful, recall is not trivial).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import psycopg
from psycopg import sql

from .sections import Section
from .schema import init_schema
from .store import DocumentRecord, copy_documents, refresh_term_stats
from .layout import Layout
from .tokens import count_tokens_batch


@dataclass(frozen=True)
class SyntheticDocument:
    record: DocumentRecord
    sections: list[Section]
    embeddings: np.ndarray


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def heading_tree(rng: np.random.Generator, n_sections: int, max_level: int = 3) -> list[int]:
    """Levels for n sections in document order: starts at 1, never jumps down more than one level."""
    levels = [1]
    for _ in range(n_sections - 1):
        prev = levels[-1]
        choices = [lv for lv in range(1, max_level + 1) if lv <= prev + 1]
        weights = np.array([1.0 if lv < prev else 2.0 if lv == prev else 2.5 for lv in choices])
        levels.append(int(rng.choice(choices, p=weights / weights.sum())))
    return levels


def generate(
    n_sections: int,
    *,
    dim: int = 384,
    sections_per_doc: tuple[int, int] = (5, 40),
    n_topics: int | None = None,
    seed: int = 0,
    doc_prefix: str = "doc",
) -> Iterator[SyntheticDocument]:
    """Yield documents until ``n_sections`` sections have been produced."""
    rng = np.random.default_rng(seed)
    n_topics = n_topics or max(4, int(np.sqrt(n_sections / 20)))
    topics = _unit(rng.standard_normal((n_topics, dim)).astype(np.float32))
    made = 0
    d = 0
    while made < n_sections:
        n = int(min(rng.integers(sections_per_doc[0], sections_per_doc[1] + 1), n_sections - made))
        topic = int(rng.integers(n_topics))
        doc_vec = _unit(topics[topic] + 0.5 * _unit(rng.standard_normal(dim).astype(np.float32)))
        levels = heading_tree(rng, n)
        doc_id = f"{doc_prefix}{d:07d}"
        sections: list[Section] = []
        stack: list[tuple[int, str, str]] = []  # (level, section_id, heading)
        for i, level in enumerate(levels):
            while stack and stack[-1][0] >= level:
                stack.pop()
            parent = stack[-1][1] if stack else None
            sid = f"s{i}"
            heading = f"Topic {topic} doc {d} section {i}"
            path = tuple(h for _, _, h in stack) + (heading,)
            content = f"Body of {doc_id} section {i} (level {level}, topic {topic}). " * 3
            sections.append(Section(sid, parent, i, level, heading, path, content, 40, sid))
            stack.append((level, sid, heading))
        counts = count_tokens_batch([s.content for s in sections])
        sections = [replace(s, token_count=c) for s, c in zip(sections, counts)]
        noise = _unit(rng.standard_normal((n, dim)).astype(np.float32))
        emb = _unit(doc_vec[None, :] + 0.6 * noise).astype(np.float32)
        h = hashlib.sha256(f"{seed}:{doc_id}:{n}".encode()).hexdigest()
        record = DocumentRecord(doc_id, f"synthetic://{doc_id}", f"Synthetic document {d}", h, {"topic": topic})
        yield SyntheticDocument(record, sections, emb)
        made += n
        d += 1


def corpus_query_vectors(docs: list[SyntheticDocument], n: int, *, seed: int = 1) -> np.ndarray:
    """Queries near actual sections of a corpus: a random section's vector plus noise."""
    rng = np.random.default_rng(seed)
    allv = np.concatenate([d.embeddings for d in docs])
    idx = rng.integers(len(allv), size=n)
    dim = allv.shape[1]
    return _unit(allv[idx] + 0.8 * _unit(rng.standard_normal((n, dim)).astype(np.float32))).astype(np.float32)


def bulk_load(conn: psycopg.Connection, layout: Layout, docs: list[SyntheticDocument], *,
              maintenance_work_mem: str = "512MB", vacuum: bool = False) -> dict[str, float]:
    """Load a synthetic corpus fast: one COPY per table, HNSW built after the load.

    For tests and benchmarks only (no per-document atomicity, no skip-unchanged):
    dropping the index first and building it once is several times faster than
    maintaining it row by row. The rows are `onetrip.store.copy_documents`'s,
    the same as ingestion writes. Ends with ANALYZE of the sections, or with
    ``vacuum`` VACUUM (ANALYZE) of both tables (benchmarks: the visibility map
    is then set, as on a settled table), then the lexical word counts
    (`refresh_term_stats`). Returns seconds spent in each step.
    """
    init_schema(conn, layout)
    indexdef = hnsw_indexdef(conn, layout)
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.SQL(layout.qualified("sections_embedding_hnsw"))))
        copy_documents(conn, layout, ((d.record, d.sections, d.embeddings) for d in docs))
    t1 = time.perf_counter()
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem)))
        conn.execute(indexdef)
    t2 = time.perf_counter()
    tables = ("sections", "documents") if vacuum else ("sections",)
    for table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}" if vacuum else "ANALYZE {}").format(
            sql.SQL(layout.tables[table])))
    t3 = time.perf_counter()
    refresh_term_stats(conn, layout)
    return {"copy_seconds": t1 - t0, "index_seconds": t2 - t1, "analyze_seconds": t3 - t2,
            "term_stats_seconds": time.perf_counter() - t3}


def hnsw_indexdef(conn: psycopg.Connection, layout: Layout) -> str:
    """The HNSW index's CREATE INDEX as `init_schema` made it, to rebuild it after a bulk load.

    Read back from the catalog so it cannot drift from schema.sql.j2; on a
    partitioned table it is rewritten to cover the partitions, not ``ON ONLY``
    the parent.
    """
    name = layout.qualified("sections_embedding_hnsw")
    row = conn.execute("SELECT pg_get_indexdef(to_regclass(%s))", (name,)).fetchone()
    if row is None or not row[0]:
        raise RuntimeError(f"no HNSW index {name}: run init_schema first")
    return row[0].replace(" ON ONLY ", " ON ")
