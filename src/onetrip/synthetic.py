"""Synthetic corpora with a real heading hierarchy and clustered embeddings.

For tests and benchmarks: topic -> document -> section, where each section's
vector is its document's vector plus noise and each document's vector is its
topic's centroid plus noise. Clustered, unlike uniform noise, so HNSW behaves
as it does on real embeddings (neighbors are meaningful, recall is not trivial).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from .sections import Section
from .store import DocumentRecord
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


def query_vectors(n: int, *, dim: int = 384, n_topics: int = 8, seed: int = 1) -> np.ndarray:
    """Clustered query vectors (same construction as documents, different seed)."""
    rng = np.random.default_rng(seed)
    topics = _unit(rng.standard_normal((n_topics, dim)).astype(np.float32))
    picks = topics[rng.integers(n_topics, size=n)]
    return _unit(picks + 0.7 * _unit(rng.standard_normal((n, dim)).astype(np.float32))).astype(np.float32)


def corpus_query_vectors(docs: list[SyntheticDocument], n: int, *, seed: int = 1) -> np.ndarray:
    """Queries near actual sections of a corpus: a random section's vector plus noise."""
    rng = np.random.default_rng(seed)
    allv = np.concatenate([d.embeddings for d in docs])
    idx = rng.integers(len(allv), size=n)
    dim = allv.shape[1]
    return _unit(allv[idx] + 0.8 * _unit(rng.standard_normal((n, dim)).astype(np.float32))).astype(np.float32)


def bulk_load(conn, layout, docs: list[SyntheticDocument], *, maintenance_work_mem: str = "512MB") -> dict[str, float]:
    """Load a synthetic corpus fast: one COPY per table, HNSW built after the load.

    For tests and benchmarks only (no per-document atomicity, no skip-unchanged):
    dropping the index first and building it once is several times faster than
    maintaining it row by row. Returns seconds spent copying and indexing.
    """
    import json
    import time

    from psycopg import sql

    from .schema import init_schema
    from .store import SECTION_COLUMNS, copy_types, passage_tokens, write_section_rows

    init_schema(conn, layout)
    t = layout.tables
    hnsw = layout.names["hnsw_index"]
    indexdef = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = %s AND tablename = %s "
        "AND schemaname = coalesce(%s, current_schema())",
        (hnsw.strip('"'), layout.prefix + "sections", layout.schema)).fetchone()[0]
    indexdef = indexdef.replace(" ON ONLY ", " ON ")  # a partitioned table's index covers its partitions
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(
            sql.SQL(f"{layout.schema}.{hnsw}" if layout.schema else hnsw)))
        with conn.cursor() as cur:
            with cur.copy(sql.SQL(
                "COPY {} (doc_id, source_uri, title, revision, content_hash, collection, acl, metadata, "
                "token_count, section_count) FROM STDIN").format(sql.SQL(t["documents"]))) as copy:
                for d in docs:
                    r = d.record
                    copy.write_row((r.doc_id, r.source_uri, r.title, 1, r.content_hash, r.collection,
                                    None if r.acl is None else list(r.acl), json.dumps(dict(r.metadata)),
                                    sum(s.token_count for s in d.sections), len(d.sections)))
            with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
                    sql.SQL(t["sections"]), sql.SQL(", ").join(sql.Identifier(c) for c in SECTION_COLUMNS))) as copy:
                copy.set_types(copy_types(layout))
                for d in docs:
                    write_section_rows(copy, layout, d.record, d.sections, d.embeddings,
                                       passage_tokens(d.record.doc_id, d.sections))
    copied = time.perf_counter() - t0
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem)))
        conn.execute(indexdef)
    conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(t["sections"])))
    return {"copy_seconds": copied, "index_seconds": time.perf_counter() - t0}
