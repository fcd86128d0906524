"""Retriever.explain: the plan of the exact statement a call sends, in one statement (real server)."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from onetrip import (AsyncRetriever, DimensionMismatchError, Explained, Filters, Retriever, SchemaMissingError,
                     ServerRequirementError, init_schema)
from onetrip.store import replace_document
from onetrip.synthetic import generate
from onetrip.layout import Layout


def load(db, n_sections: int) -> None:
    layout = Layout(dim=32)
    init_schema(db, layout)
    for d in generate(n_sections, dim=32, seed=11, sections_per_doc=(3, 25)):
        replace_document(db, layout, d.record, d.sections, d.embeddings)
    db.execute("ANALYZE sections")


def test_explain_is_the_search_statement_and_names_the_hnsw_scan(db, statement_log):
    load(db, 3000)
    r = Retriever(db)
    q = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    with statement_log.watch(db) as searched:
        r.search(q, k=10)
    with statement_log.watch(db) as explained:
        ex = r.explain(q, k=10)
    assert len(explained.statements) == 1  # EXPLAIN ANALYZE is itself one statement
    assert explained.statements[0] == "EXPLAIN (ANALYZE, BUFFERS) " + searched.statements[0]
    assert isinstance(ex, Explained) and ex.kind == "analyze" and ex.analyzed
    assert ex.vector_index_scans == ["sections_embedding_hnsw"], ex.plan
    assert "actual time" in ex.plan and "Execution Time" in ex.plan
    # the inlined query vector is shown as a placeholder, in the plan and in the binds
    assert "Order By: (embedding <=> '<query embedding>'::vector)" in ex.plan, ex.plan
    assert ex.params["query_embedding"] == "<query embedding: vector(32)>" and ex.params["k"] == 10
    assert ex.render().startswith("-- statement\n" + ex.statement)


def test_explain_assemble_with_filters_and_without_analyze(db, statement_log):
    load(db, 3000)
    r = Retriever(db)
    q = np.random.default_rng(1).standard_normal(32).astype(np.float32)
    flt = Filters(collections=("default",), principals=("alice",))
    with statement_log.watch(db) as w:
        ex = r.explain(q, 10, assemble=True, kind="plan", max_tokens=500, neighbors=1, filters=flt)
    assert len(w.statements) == 1 and w.statements[0].startswith("EXPLAIN WITH")
    assert ex.kind == "plan" and not ex.analyzed and "actual time" not in ex.plan
    assert ex.vector_index_scans == ["sections_embedding_hnsw"], ex.plan
    assert ex.params["max_tokens"] == 500 and ex.params["principals"] == ["alice"]
    # no k: each call's own default (search: 5; assemble: one hit per 250 tokens of the budget)
    assert r.explain(q, kind="plan").params["k"] == 5
    assert r.explain(q, assemble=True, kind="plan", max_tokens=1000).params["k"] == 4


def test_a_sequential_scan_plan_names_no_vector_index(db):
    """vector_index_scans is how a caller spots the 1000x pitfall: empty when the index is not used."""
    load(db, 3000)
    db.execute("SET enable_indexscan = off")
    ex = Retriever(db).explain(np.ones(32, np.float32), k=10)
    assert ex.vector_index_scans == [], ex.plan
    assert "Seq Scan on sections" in ex.plan  # the doc_seq index probes go too, so only seq scans remain


def test_async_explain_sends_the_same_statement(db, dsn):
    load(db, 500)
    q = np.random.default_rng(2).standard_normal(32).astype(np.float32)
    want = Retriever(db).explain(q, k=4, kind="plan")

    async def main() -> Explained:
        async with await AsyncRetriever.create(dsn) as ar:
            return await ar.explain(q, k=4, kind="plan")

    got = asyncio.run(main())
    assert got.statement == want.statement and got.params == want.params


def test_explain_names_a_missing_table(db):
    init_schema(db, Layout(dim=32))
    r = Retriever(db)
    db.execute("DROP TABLE sections CASCADE")
    with pytest.raises(SchemaMissingError, match="onetrip init"):
        r.explain(np.ones(32, np.float32), k=3)


def test_generic_plan_of_every_search_mode_types_its_binds(db, statement_log):
    """kind="generic": EXPLAIN (GENERIC_PLAN) with each bind typed as psycopg sends it, for any values."""
    load(db, 3000)
    from onetrip import refresh_term_stats

    refresh_term_stats(db, Layout(dim=32))
    r = Retriever(db)
    q = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    flt = Filters(collections=("default",), principals=("alice",), source_prefix="file:", metadata={"a": 1})
    if db.info.server_version < 160000:  # EXPLAIN (GENERIC_PLAN) is PostgreSQL 16+: refused before sending
        with pytest.raises(ServerRequirementError, match="PostgreSQL 16"):
            r.explain(q, kind="generic")
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16+")
    for kwargs in ({}, {"k": 7}, {"text": "alpha beta", "mode": "hybrid"}, {"text": "alpha", "mode": "lexical"},
                   {"filters": flt}, {"assemble": True, "ancestors": True, "neighbors": 2, "filters": flt}):
        with statement_log.watch(db) as w:
            ex = r.explain(q, **kwargs, kind="generic")
        assert len(w.statements) == 1 and w.statements[0].startswith("EXPLAIN (GENERIC_PLAN) WITH"), kwargs
        assert ex.kind == "generic" and re.search(r"\$\d", ex.plan) and "actual time" not in ex.plan, kwargs
    # the unfiltered dense statement, prepared and reused by repeated calls, keeps the HNSW scan
    assert r.explain(q, 10, kind="generic").vector_index_scans == ["sections_embedding_hnsw"]
    with pytest.raises(ValueError, match="kind must be one of"):
        r.explain(q, kind="verbose")


def test_explain_many_is_the_search_many_statement(db, statement_log):
    """explain_many: the ONE statement search_many sends, its binds and plan, in one EXPLAIN statement."""
    load(db, 3000)
    r = Retriever(db)
    qs = np.random.default_rng(4).standard_normal((3, 32)).astype(np.float32)
    flt = Filters(collections=("default",), principals=("alice",))
    with statement_log.watch(db) as searched:
        r.search_many(qs, k=4, filters=flt)
    with statement_log.watch(db) as explained:
        ex = r.explain_many(qs, k=4, filters=flt)
    assert len(explained.statements) == 1
    assert explained.statements[0] == "EXPLAIN (ANALYZE, BUFFERS) " + searched.statements[0]
    assert ex.kind == "analyze" and "actual time" in ex.plan
    # one HNSW scan node, run once per query under a nested loop over the queries
    assert ex.vector_index_scans == ["sections_embedding_hnsw"], ex.plan
    assert re.search(r"Index Scan using sections_embedding_hnsw .*loops=3", ex.plan), ex.plan
    assert ex.params["query_embeddings"] == "<3 query embeddings: vector(32)[]>" and ex.params["k"] == 4
    assert ex.params["principals"] == ["alice"]

    if db.info.server_version < 160000:  # EXPLAIN (GENERIC_PLAN) is PostgreSQL 16+: refused before sending
        with statement_log.watch(db) as w, pytest.raises(ServerRequirementError, match="PostgreSQL 16"):
            r.explain_many(qs, k=4, kind="generic", filters=flt)
        assert w.statements == []
        return
    with statement_log.watch(db) as w:
        generic = r.explain_many(qs, k=4, kind="generic", filters=flt)
    assert len(w.statements) == 1 and w.statements[0].startswith("EXPLAIN (GENERIC_PLAN) WITH")
    assert generic.kind == "generic" and re.search(r"\$\d", generic.plan) and "actual time" not in generic.plan
    # one query: search's own statement, as search_many sends it
    assert r.explain_many(qs[:1], k=4, kind="plan").statement == r.explain(qs[0], k=4, kind="plan").statement


def test_explain_many_refuses_bad_input_before_sending(db, statement_log):
    load(db, 200)
    r = Retriever(db)
    good = np.ones(32, np.float32)
    with statement_log.watch(db) as w:
        with pytest.raises(ValueError, match="kind must be one of"):
            r.explain_many([good, good], kind="verbose")
        with pytest.raises(DimensionMismatchError, match="query 1"):
            r.explain_many([good, np.ones(8, np.float32)])
        with pytest.raises(ValueError, match="from 1 to 100 queries"):
            r.explain_many([])
    assert w.statements == []


def test_async_explain_many_sends_the_same_statement(db, dsn):
    load(db, 500)
    qs = np.random.default_rng(5).standard_normal((2, 32)).astype(np.float32)
    flt = Filters(collections=("default",), doc_ids=("doc0000001",))
    want = Retriever(db).explain_many(qs, k=3, kind="plan", neighbors=False, filters=flt)

    async def main() -> Explained:
        async with await AsyncRetriever.create(dsn) as ar:
            return await ar.explain_many(qs, k=3, kind="plan", neighbors=False, filters=flt)

    got = asyncio.run(main())
    assert got.statement == want.statement and got.params == want.params and got.plan == want.plan
    assert got.params["doc_ids"] == ["doc0000001"]  # the filters are in the statement explained


def test_only_the_scan_that_orders_by_distance_is_named() -> None:
    """A node's detail lines end where the next node (its sibling, or its child) starts: a btree scan next to
    the HNSW scan, or above a node ordering by distance, is not credited with that Order By."""
    plan = "\n".join([
        "Nested Loop  (cost=0.29..20.00 rows=10 width=8)",
        "  ->  Index Scan using sections_pkey on sections p  (cost=0.29..8.30 rows=1 width=8)",
        "        Index Cond: (doc_id = 'a'::text)",
        "  ->  Index Scan using sections_embedding_hnsw on sections s  (cost=0.00..10.00 rows=10 width=8)",
        "        Order By: (embedding <=> '<query embedding>'::vector)",
        "  ->  Index Scan using sections_doc_seq on sections n  (cost=0.29..8.30 rows=1 width=8)",
        "        ->  Limit  (cost=0.00..1.00 rows=1 width=8)",
        "              Order By: (embedding <=> '<query embedding>'::vector)",
    ])
    assert Explained("", {}, plan, "plan").vector_index_scans == ["sections_embedding_hnsw"]
