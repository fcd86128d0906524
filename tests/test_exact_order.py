"""Rows from a relaxed-order HNSW scan are sorted by their real distance before any LIMIT or rank.

pgvector's iterative scans in relaxed_order (what Retriever sets on every
connection) return rows slightly out of distance order once the scan goes past
ef_search (40) rows. PostgreSQL 17+ treats an index scan's rows, and a
materialized CTE's, as already sorted by distance, so `ORDER BY distance` over
them was skipped: the bucketed k took the scan's first k rows, and the hybrid
dense list and assemble's hit ranks followed the scan's order. On the
PostgreSQL manual, 10 of 64 questions got a different hybrid top 10.
"""

from __future__ import annotations

import pytest

from onetrip import Retriever, init_schema
from onetrip.layout import Layout
from onetrip.synthetic import bulk_load, corpus_query_vectors, generate

LAYOUT = Layout(dim=32)


@pytest.fixture(scope="module")
def docs():
    return list(generate(4000, dim=32, seed=41, sections_per_doc=(3, 25)))


@pytest.fixture
def r(db, docs):
    init_schema(db, LAYOUT)
    bulk_load(db, LAYOUT, docs)
    return Retriever(db)


def key(h) -> tuple[str, str]:
    return h.section.doc_id, h.section.section_id


def test_a_bucketed_k_keeps_the_nearest_rows_of_the_scan(r, docs):
    """k=45 scans LIMIT 50 (its bucket), like k=50: its hits are the 45 nearest of those 50."""
    queries = corpus_query_vectors(docs, 60, seed=42)
    for q in queries:
        scan = r.search(q, k=50, parent=False, neighbors=False)  # the bucket itself: the scan's 50 rows
        nearest = sorted(scan, key=lambda h: (h.distance, h.section.doc_id, h.section.sequence_index))[:45]
        got = r.search(q, k=45, parent=False, neighbors=False)
        assert [key(h) for h in got] == [key(h) for h in nearest]
    many = r.search_many(list(queries[:8]), k=45, parent=False, neighbors=False)
    assert many == [r.search(q, k=45, parent=False, neighbors=False) for q in queries[:8]]


def test_assembled_hit_ranks_follow_the_distance(r, docs):
    for q in corpus_query_vectors(docs, 30, seed=43):
        ctx = r.assemble(q, k=45, max_tokens=None, parent=False, neighbors=0)
        hits = sorted((p for p in ctx.passages if "hit" in p.roles), key=lambda p: p.best_rank)
        assert [p.best_rank for p in hits] == list(range(1, 46))
        dist = [p.distance for p in hits]
        assert dist == sorted(dist)


def test_the_hybrid_dense_list_is_ranked_by_distance(r, docs):
    """The fused score of a section only the dense list holds is 1 / (rrf_k + its rank by distance)."""
    for q in corpus_query_vectors(docs, 30, seed=44):
        dense = r.search(q, k=50, parent=False, neighbors=False)
        rank = {key(h): i for i, h in
                enumerate(sorted(dense, key=lambda h: (h.distance, h.section.doc_id, h.section.section_id)), 1)}
        # a text no section holds: the lexical list is empty and the fused order is the dense one
        hybrid = r.search(q, k=40, text="zzyzzx", mode="hybrid", parent=False, neighbors=False)
        assert len(hybrid) == 40
        for h in hybrid:
            assert h.score == pytest.approx(1.0 / (60 + rank[key(h)]), rel=1e-12), key(h)


def test_equal_distances_break_ties_by_document_and_position(db, docs):
    """Sections with one embedding tie on distance; the statement orders them by (doc_id, sequence_index),
    so which of them make the top k does not depend on the scan's or the sort's order (k=2 and 3 scan
    their bucket, 4 rows: the four tied ones)."""
    import dataclasses

    import numpy as np

    small = [dataclasses.replace(d, embeddings=d.embeddings.copy()) for d in docs[:60]]
    tied = [(d, i) for d in small[10:40:10] for i in (0, len(d.sections) - 1)][:4]  # 4 sections, 2-3 documents
    v = np.random.default_rng(44).standard_normal(32).astype(np.float32)
    v /= np.linalg.norm(v)  # a vector of its own: no other section is at distance 0
    for d, i in tied:
        d.embeddings[i] = v
    init_schema(db, LAYOUT)
    bulk_load(db, LAYOUT, small[::-1])  # stored in the reverse of the expected order
    r = Retriever(db)
    nearest = r.search(v, k=4, parent=False, neighbors=False)
    expected = sorted((d.record.doc_id, d.sections[i].sequence_index) for d, i in tied)
    assert sorted((h.section.doc_id, h.section.sequence_index) for h in nearest) == expected  # the scan's 4
    assert np.allclose([h.distance for h in nearest], 0, atol=1e-6)
    for k in (2, 3):
        got = [(h.section.doc_id, h.section.sequence_index) for h in r.search(v, k=k, parent=False, neighbors=False)]
        assert got == expected[:k], k
        ctx = r.assemble(v, k=k, max_tokens=None, parent=False, neighbors=0)
        ranked = sorted((p for p in ctx.passages if p.is_hit), key=lambda p: p.best_rank)
        assert [(p.doc_id, p.sequence_index) for p in ranked] == expected[:k]
        assert r.search_many([v, v], k=k, parent=False, neighbors=False)[1] == \
            r.search(v, k=k, parent=False, neighbors=False)


def test_the_dba_function_ranks_equal_distances_as_the_api_does(db, dsn, docs):
    """The DBA editions number the hits themselves (hit_rank); tied distances must go by (doc_id, sequence_index)
    there too, or a DBA's rank 1 is the API's rank 4 (the API ranks its rows in the client)."""
    import dataclasses
    import subprocess
    from pathlib import Path

    import numpy as np

    from .conftest import psql_binary

    small = [dataclasses.replace(d, embeddings=d.embeddings.copy()) for d in docs[:60]]
    tied = [(d, i) for d in small[10:40:10] for i in (0, len(d.sections) - 1)][:4]
    v = np.random.default_rng(45).standard_normal(32).astype(np.float32)
    v /= np.linalg.norm(v)
    for d, i in tied:
        d.embeddings[i] = v
    init_schema(db, LAYOUT)
    bulk_load(db, LAYOUT, small[::-1])
    function = Path(__file__).resolve().parents[1] / "sql" / "postgres" / "retrieve_function.sql"
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(function)],
                   check=True, capture_output=True)
    expected = sorted((d.record.doc_id, d.sections[i].sequence_index) for d, i in tied)
    rows = db.execute("SELECT hit_rank, doc_id, sequence_index FROM retrieve_sections(%s::vector(32), 4) "
                      "WHERE hit_rank IS NOT NULL ORDER BY hit_rank", (str(v.tolist()),)).fetchall()
    assert [(d, s) for _, d, s in rows] == expected
    api = Retriever(db).search(v, k=4, parent=False, neighbors=False)
    assert [(h.rank, h.section.doc_id, h.section.sequence_index) for h in api] == rows
