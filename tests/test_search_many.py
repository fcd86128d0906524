"""Retriever.search_many: several queries, one statement, each query's result equal to its own search."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from onetrip import AsyncRetriever, DimensionMismatchError, Filters, HybridOptions, Retriever, init_schema
from onetrip.retrieve import _fetch
from onetrip.search_many import MAX_QUERIES, plan_search_many
from onetrip.store import replace_document
from onetrip.synthetic import corpus_query_vectors, generate
from onetrip.layout import Layout

from .embedders import HashEmbedder
from .conftest import psql_binary

LAYOUT = Layout(dim=32)


@pytest.fixture
def corpus(db):
    init_schema(db, LAYOUT)
    docs = list(generate(3000, dim=32, seed=21, sections_per_doc=(3, 25)))
    for d in docs:
        replace_document(db, LAYOUT, d.record, d.sections, d.embeddings)
    db.execute("ANALYZE sections")
    return docs


@pytest.mark.parametrize("k", [7, 10])  # 7: the bucket's scan then LIMIT k; 10: a bucket itself
def test_one_statement_and_each_result_equals_its_own_search(db, corpus, statement_log, k):
    r = Retriever(db)
    queries = corpus_query_vectors(corpus, 6, seed=22)
    with statement_log.watch(db) as w:
        many = r.search_many(list(queries), k=k)
    assert len(w.statements) == 1 and w.statements[0].startswith("WITH queries AS")
    assert len(many) == 6
    for q, hits in zip(queries, many):
        assert hits == r.search(q, k=k)  # same hits, ranks, distances, parents and neighbors
        assert len(hits) == k
    assert r.search_many(queries, k=k) == many  # a 2-d array: one query per row
    with statement_log.watch(db) as w:
        one = r.search_many([queries[0]], k=k)  # one query: search's own (prepared, generic-plan) statement
    assert one == [many[0]] and len(w.statements) == 1 and "queries AS" not in w.statements[0]


def test_repeated_calls_reuse_one_generic_plan(db, corpus):
    """psycopg prepares the statement from the 6th call; the planner must not re-plan it every time.

    unnest() of a visible array is estimated at its length, which made every
    custom plan look cheaper than the generic one (0 generic plans in 95 calls,
    ~0.6 ms of planning each); the array sits behind an OFFSET 0 fence.
    """
    r = Retriever(db)
    sets = corpus_query_vectors(corpus, 60, seed=28).reshape(20, 3, 32)
    for qs in sets:  # prepared from the 6th call; PostgreSQL then tries 5 custom plans before the generic one
        r.search_many(list(qs), k=7)
    (generic, custom), = db.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH queries%'")
    assert generic >= 5 and custom <= 5, (generic, custom)


def test_a_section_shared_by_several_queries_is_read_once(db, corpus):
    """Two queries whose hits are two sections apart share the section between them as a neighbor."""
    doc = next(d for d in corpus if len(d.sections) >= 6)
    queries = [doc.embeddings[1], doc.embeddings[3], doc.embeddings[1]]  # the third repeats the first
    r = Retriever(db)
    plan = plan_search_many(r.layout, queries, 1)
    rows, names = _fetch(db, plan.statement, plan.params)
    keyed = [(row[names.index("doc_id")], row[names.index("sequence_index")]) for row in rows
             if row[names.index("query_ord")] is None]
    assert len(keyed) == len(set(keyed))  # context rows: each section once for all queries
    a, b, c = r.search_many(queries, k=1)
    assert a[0].section.sequence_index == 1 and b[0].section.sequence_index == 3
    assert a[0].next is b[0].prev and a[0].next.sequence_index == 2  # one record object, read once
    assert c == a


def test_filters_apply_to_every_query_and_row(db, corpus):
    r = Retriever(db)
    queries = list(corpus_query_vectors(corpus, 5, seed=23))
    chosen = tuple(d.record.doc_id for d in corpus[:40])
    flt = Filters(doc_ids=chosen)
    many = r.search_many(queries, k=5, filters=flt)
    for q, hits in zip(queries, many):
        assert hits == r.search(q, k=5, filters=flt)
        for h in hits:
            for rec in (h.section, h.parent, h.prev, h.next):
                assert rec is None or rec.doc_id in chosen


def test_texts_and_embeddings_mixed_and_no_expansion(db, corpus):
    r = Retriever(db, embedder=HashEmbedder(32))
    vec = corpus_query_vectors(corpus, 1, seed=24)[0]
    got = r.search_many(["first question", vec, "second question"], k=4, parent=False, neighbors=False)
    assert got == [r.search("first question", k=4, mode="dense", parent=False, neighbors=False),
                   r.search(vec, k=4, parent=False, neighbors=False),
                   r.search("second question", k=4, mode="dense", parent=False, neighbors=False)]
    assert all(h.parent is None and h.prev is None and h.next is None for hits in got for h in hits)


@pytest.mark.parametrize("parent, neighbors", [(False, True), (True, False)])
def test_parent_and_neighbors_each_on_its_own(db, corpus, parent, neighbors):
    """Only neighbors, or only the parent: each query's hits link what its own search links, and nothing else
    (the flags are read separately when the rows are linked: prev/next by neighbors, parent by parent)."""
    r = Retriever(db)
    queries = list(corpus_query_vectors(corpus, 4, seed=29))
    got = r.search_many(queries, k=5, parent=parent, neighbors=neighbors)
    assert got == [r.search(q, k=5, parent=parent, neighbors=neighbors) for q in queries]
    hits = [h for hs in got for h in hs]
    if neighbors:
        assert any(h.next is not None for h in hits) and any(h.prev is not None for h in hits)
        assert all(h.parent is None for h in hits)
    else:
        assert any(h.parent is not None for h in hits)
        assert all(h.prev is None and h.next is None for h in hits)


def test_bad_queries_are_named_before_any_statement(db, corpus, statement_log):
    r = Retriever(db)
    good = np.ones(32, np.float32)
    with statement_log.watch(db) as w:
        with pytest.raises(ValueError, match="from 1 to"):
            r.search_many([])
        with pytest.raises(ValueError, match=f"got {MAX_QUERIES + 1}"):
            r.search_many([good] * (MAX_QUERIES + 1))
        with pytest.raises(TypeError, match="list of query texts or embeddings"):
            r.search_many(good)
        with pytest.raises(DimensionMismatchError, match=r"query 1: .*16 dimensions.*vector\(32\)"):
            r.search_many([good, np.ones(16, np.float32)])
        with pytest.raises(DimensionMismatchError, match=r"query 1: .*33 dimensions.*vector\(32\)"):
            r.search_many([good, np.ones(33, np.float32)])
        with pytest.raises(ValueError, match="query 2: .*all zeros"):
            r.search_many([good, good, np.zeros(32, np.float32)])
        with pytest.raises(ValueError, match="query 0: .*NaN"):
            r.search_many([np.full(32, np.nan, np.float32)])
    assert w.statements == []


def test_k_none_is_searchs_default_for_one_query_or_several(db, dsn, corpus):
    """Found by review: search_many([v], None) took search's default and search_many([v, v], None) was a
    TypeError; explain_many and the async twins alike."""
    queries = list(corpus_query_vectors(corpus, 2, seed=23))
    r = Retriever(db)
    assert r.search_many(queries, None) == r.search_many(queries, 5) and len(r.search_many(queries, None)[1]) == 5
    assert r.search_many(queries[:1], None) == r.search_many(queries[:1], 5)
    assert r.explain_many(queries, None, kind="plan").statement == r.explain_many(queries, 5, kind="plan").statement

    async def main():
        async with await AsyncRetriever.create(dsn) as ar:
            return await ar.search_many(queries, None)

    assert asyncio.run(main()) == r.search_many(queries, 5)


def test_async_search_many_is_one_statement_and_equals_sync(db, dsn, corpus, statement_log):
    queries = list(corpus_query_vectors(corpus, 4, seed=25))
    want = Retriever(db, embedder=HashEmbedder(32)).search_many(queries + ["a text"], k=6)

    async def main():
        async with await AsyncRetriever.create(dsn, embedder=HashEmbedder(32)) as ar:
            pid = ar.conn.info.backend_pid
            got = await ar.search_many(queries + ["a text"], k=6)
            return pid, got

    before = statement_log.path.stat().st_size
    pid, got = asyncio.run(main())
    assert got == want
    with statement_log.path.open("rb") as f:
        f.seek(before)
        lines = f.read().decode("utf-8", "replace").splitlines()
    mine = [line for line in lines if f"[{pid}] LOG:" in line]
    assert len(mine) >= 2  # create's own statements (settings, layout), then the search
    assert mine[-1].endswith("WITH queries AS MATERIALIZED (")  # the last one, and the only search statement
    assert sum("queries AS MATERIALIZED" in line for line in mine) == 1


@pytest.mark.parametrize("layout", [Layout(dim=32, vector_type="halfvec"), Layout(dim=32, partitions=4)],
                         ids=["halfvec", "partitioned"])
def test_other_layouts(db, layout):
    """halfvec casts the vector array server-side; a partitioned table scans each partition's HNSW per query."""
    from onetrip.synthetic import bulk_load

    init_schema(db, layout)
    docs = list(generate(1500, dim=32, seed=26))
    bulk_load(db, layout, docs)
    r = Retriever(db)
    queries = list(corpus_query_vectors(docs, 3, seed=27))
    assert r.search_many(queries, k=5) == [r.search(q, k=5) for q in queries]
    if layout.vector_type == "halfvec":
        # a length within float32's range whose 16-bit numbers are all 0: search says the distance is NaN, and
        # search_many had returned NaN distances in an arbitrary order
        tiny = queries[1] / np.linalg.norm(queries[1]) * 1e-9
        with pytest.raises(ValueError, match="undefined \\(NaN\\).*too small for a halfvec table"):
            r.search(tiny, k=5)
        with pytest.raises(ValueError, match="^query 1: the distance to section .* undefined \\(NaN\\)"):
            r.search_many([queries[0], tiny], k=5)


# --- text queries: lexical and hybrid batched, "auto" hybrid when every query is a text ---------------------------

DEMO = Path(__file__).resolve().parents[1] / "src" / "onetrip" / "demo_corpus"
TEXT_QUERIES = ["max_connections", "how long should the pasta cook", "what does pg_stat_activity show",
                "espresso machine descaling", "the of and",  # stop words only: no lexical candidate at all
                "identity column GENERATED ALWAYS sequence", "travel insurance claim"]


@pytest.fixture
def text_kb(db, tmp_path):
    from onetrip.ingest import ingest_paths

    from .test_hybrid import DOCS

    init_schema(db)
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    for f in DEMO.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    return Retriever(db, embedder=HashEmbedder())


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("k", [3, 8])
def test_text_modes_are_one_statement_and_equal_their_own_search(text_kb, statement_log, mode, k):
    r = text_kb
    with statement_log.watch(r.conn) as w:
        many = r.search_many(TEXT_QUERIES, k=k, mode=mode)
    assert w.statements == ["WITH queries AS MATERIALIZED ("]  # the log's first line of the one statement
    assert "query_words" in plan_search_many(r.layout, None if mode == "lexical" else [np.ones(384)] * 7, k,
                                             mode=mode, texts=TEXT_QUERIES).statement
    for q, hits in zip(TEXT_QUERIES, many):
        assert hits == r.search(q, k=k, mode=mode), q  # same hits, ranks, scores, distances, parents, neighbors
        assert all(h.score is not None for h in hits)
    stop_words = many[TEXT_QUERIES.index("the of and")]
    if mode == "lexical":
        assert stop_words == []
    else:  # hybrid: the dense list alone, in the dense order
        dense = r.search("the of and", k=k, mode="dense")
        assert len(stop_words) == k and [h.section for h in stop_words] == [h.section for h in dense]
    assert any(len(hits) == k for hits in many)


def test_auto_is_hybrid_for_texts_and_dense_when_any_query_is_an_embedding(text_kb, statement_log):
    r = text_kb
    assert r.search_many(TEXT_QUERIES[:3], k=4) == r.search_many(TEXT_QUERIES[:3], k=4, mode="hybrid")
    assert all(h.score is not None for hits in r.search_many(TEXT_QUERIES[:3], k=4) for h in hits)
    vec = HashEmbedder().embed_query("a bare embedding")
    mixed = r.search_many([TEXT_QUERIES[0], vec], k=4)
    assert mixed == [r.search(TEXT_QUERIES[0], k=4, mode="dense"), r.search(vec, k=4)]
    assert all(h.score is None for hits in mixed for h in hits)
    with statement_log.watch(r.conn) as w:
        one = r.search_many([TEXT_QUERIES[0]], k=4)  # one text: search's own hybrid statement
    assert one == [r.search(TEXT_QUERIES[0], k=4)] and len(w.statements) == 1
    assert "queries AS" not in w.statements[0] and all(h.score is not None for h in one[0])
    assert r.search_many([TEXT_QUERIES[2]], k=4, mode="lexical") == [r.search(TEXT_QUERIES[2], k=4, mode="lexical")]
    # embeddings with their texts (search's text=): hybrid by default, the same hits as the texts alone
    vecs = [HashEmbedder().embed_query(t) for t in TEXT_QUERIES[:3]]
    assert r.search_many(vecs, k=4, texts=TEXT_QUERIES[:3]) == r.search_many(TEXT_QUERIES[:3], k=4)
    assert r.search_many(vecs, k=4, texts=TEXT_QUERIES[:3], mode="lexical") == \
        r.search_many(TEXT_QUERIES[:3], k=4, mode="lexical")
    # dense mode refuses texts, as search(embedding, text=..., mode="dense") refuses its text (both had
    # dropped them silently)
    with pytest.raises(ValueError, match="dense mode searches the embeddings alone"):
        r.search_many(vecs, k=4, texts=TEXT_QUERIES[:3], mode="dense")
    with statement_log.watch(r.conn) as w:
        with pytest.raises(ValueError, match="texts must be a list of 3 query texts"):
            r.search_many(vecs, texts=TEXT_QUERIES[:2])
        with pytest.raises(TypeError, match=r"texts\[1\]: the query text must be a string"):
            r.search_many(vecs, texts=["a", vecs[0], "b"])
        with pytest.raises(ValueError, match=r"texts\[0\]"):
            r.search_many(vecs, texts=["  ", "a", "b"])
        with pytest.raises(ValueError, match=r"query 1: hybrid mode needs the query text, got an embedding"):
            r.search_many([TEXT_QUERIES[0], vec], mode="hybrid")
        with pytest.raises(ValueError, match=r"query 0: lexical mode needs the query text"):
            r.search_many([vec, TEXT_QUERIES[0]], mode="lexical")
        with pytest.raises(ValueError, match="mode must be one of"):
            r.search_many(TEXT_QUERIES[:2], mode="fuzzy")
        with pytest.raises(ValueError, match="unknown hybrid option"):
            r.search_many(TEXT_QUERIES[:2], hybrid={"candidate": 3})
    assert w.statements == []


def test_text_batches_take_filters_and_hybrid_options(text_kb):
    r = text_kb
    flt = Filters(doc_ids=("connections.md", "espresso-machine-manual.md"))
    opts = HybridOptions(candidates=6, rrf_k=10, lexical_weight=1.0, tf_weight=1.0)
    for mode in ("hybrid", "lexical"):
        many = r.search_many(TEXT_QUERIES, k=5, mode=mode, filters=flt, hybrid=opts)
        for q, hits in zip(TEXT_QUERIES, many):
            assert hits == r.search(q, k=5, mode=mode, filters=flt, hybrid=opts), (mode, q)
            for h in hits:
                for rec in (h.section, h.parent, h.prev, h.next):
                    assert rec is None or rec.doc_id in flt.doc_ids


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_text_batches_cut_each_lexical_list_at_candidates_as_one_search_does(text_kb, mode):
    """candidates is inclusive in a batch as in one search: each query's lexical list holds its top `candidates`
    sections (the batch cuts by row_number, one search by LIMIT). Small lists make the cut decide the hits."""
    r = text_kb
    for k in (1, 2, 3):  # candidates is at least k: lists of exactly k
        opts = HybridOptions(candidates=k)
        many = r.search_many(TEXT_QUERIES, k=k, mode=mode, hybrid=opts)
        single = [r.search(q, k=k, mode=mode, hybrid=opts) for q in TEXT_QUERIES]
        assert many == single, (mode, k)
        assert max(len(hits) for hits in many) == k


def test_text_batches_filter_the_sections_found_by_a_technical_term(text_kb):
    """A batch's exact technical terms are a lexical list of their own (a GIN scan on terms): the caller's
    filters must hold there too, or a term names a section of a document the caller excluded."""
    r = text_kb
    flt = Filters(doc_ids=("cooking.md",))
    queries = ["max_connections pasta", "what does pg_stat_activity show"]
    for mode in ("hybrid", "lexical"):
        many = r.search_many(queries, k=5, mode=mode, filters=flt)
        assert many[0], mode  # pasta is in cooking.md
        for q, hits in zip(queries, many):
            assert hits == r.search(q, k=5, mode=mode, filters=flt), (mode, q)
            for h in hits:
                for rec in (h.section, h.parent, h.prev, h.next):
                    assert rec is None or rec.doc_id == "cooking.md", (mode, q, rec.doc_id)


def test_text_batches_reuse_one_generic_plan(text_kb):
    """As the dense batch: prepared from the 6th call, its generic plan reused, its results unchanged."""
    r = text_kb
    first = r.search_many(TEXT_QUERIES[:3], k=4)
    for i in range(12):
        qs = [TEXT_QUERIES[(i + j) % len(TEXT_QUERIES)] for j in range(3)]
        got = r.search_many(qs, k=4)
        assert got == [r.search(q, k=4) for q in qs]
    assert r.search_many(TEXT_QUERIES[:3], k=4) == first
    (generic, custom), = r.conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE 'WITH queries%' AND statement LIKE '%query_words%'").fetchall()
    assert generic >= 2 and custom <= 5, (generic, custom)


def test_async_text_batch_equals_sync(text_kb, dsn):
    want = text_kb.search_many(TEXT_QUERIES, k=4)

    async def main():
        async with await AsyncRetriever.create(dsn, embedder=HashEmbedder()) as ar:
            return (await ar.search_many(TEXT_QUERIES, k=4),
                    await ar.search_many(TEXT_QUERIES, k=4, mode="lexical"),
                    await ar.explain_many(TEXT_QUERIES[:2], k=4))

    got, lexical, explained = asyncio.run(main())
    assert got == want
    assert lexical == text_kb.search_many(TEXT_QUERIES, k=4, mode="lexical")
    assert "query_words" in explained.statement and "Planning Time" in explained.plan


def test_psql_runs_the_hybrid_batch_edition_as_is(text_kb, dsn):
    """sql/postgres/retrieve_many_hybrid.sql in psql: each query's hits are search_many's (and search's)."""
    import csv
    import io
    import subprocess

    from onetrip.store import technical_terms

    r = text_kb
    texts = TEXT_QUERIES[:4]
    vecs = [HashEmbedder().embed_query(t) for t in texts]

    def arr(items: list[str]) -> str:
        return "{" + ",".join('"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"' for x in items) + "}"

    lits = ["[" + ",".join(f"{x:.8f}" for x in v) + "]" for v in vecs]
    opts = HybridOptions().params(3, "hybrid")
    sql = Path(__file__).resolve().parents[1] / "sql" / "postgres" / "retrieve_many_hybrid.sql"
    terms = [" ".join(technical_terms(t)) for t in texts]

    def psql_rows(embeddings: str, query_texts: str, query_terms: str) -> list[dict[str, str]]:
        """The file's rows, run as its header says, for these array literals."""
        out = subprocess.run(
            [psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "--csv", "-d", dsn, "-v", "k=3",
             "-v", f"query_embeddings={embeddings}", "-v", f"query_texts={query_texts}",
             "-v", f"query_terms={query_terms}",
             *[a for name, value in opts.items() for a in ("-v", f"{name}={value}")], "-f", str(sql)],
            check=True, capture_output=True, text=True).stdout
        return list(csv.DictReader(io.StringIO(out)))

    rows = psql_rows(arr(lits), arr(texts), arr(terms))
    api = r.search_many(vecs, k=3, texts=texts)
    assert api == [r.search(v, k=3, text=t) for v, t in zip(vecs, texts)]
    for n, hits in enumerate(api, 1):
        mine = sorted((row for row in rows if row["query_ord"] == str(n)), key=lambda row: int(row["hit_rank"]))
        assert [(row["doc_id"], row["section_id"]) for row in mine] == \
            [(h.section.doc_id, h.section.section_id) for h in hits]
        assert [float(row["score"]) for row in mine] == pytest.approx([h.score for h in hits], rel=1e-9)
    context = [(row["doc_id"], row["section_id"]) for row in rows if not row["query_ord"]]
    assert len(context) == len(set(context))  # each context row once, for all queries
    related = {(h.section.doc_id, x.section_id) for hits in api for h in hits for x in (h.parent, h.prev, h.next) if x}
    hit_keys = {(h.section.doc_id, h.section.section_id) for hits in api for h in hits}
    assert set(context) == related - hit_keys
    # found by review: a NULL embedding's dense list was `candidates` rows in no order, each adding a dense share to
    # the fused score; now that query ranks on its words alone: rank r's score is lexical_weight / (rrf_k + r)
    rows = psql_rows(f"{{\"{lits[0]}\",NULL}}", arr(texts[:2]), arr(terms[:2]))
    first = sorted((row for row in rows if row["query_ord"] == "1"), key=lambda row: int(row["hit_rank"]))
    assert [(row["doc_id"], row["section_id"]) for row in first] == \
        [(h.section.doc_id, h.section.section_id) for h in api[0]]
    worded = sorted((row for row in rows if row["query_ord"] == "2"), key=lambda row: int(row["hit_rank"]))
    assert len(worded) == 3 and all(row["distance"] == "" for row in worded)
    lexical_weight, rrf_k = float(opts["lexical_weight"]), float(opts["rrf_k"])
    assert [float(row["score"]) for row in worded] == pytest.approx([lexical_weight / (rrf_k + r) for r in (1, 2, 3)])
    # and a NULL text ranks on its embedding alone, as the header says: its hits are a dense search's
    rows = psql_rows(arr(lits[:2]), f"{{{arr(texts[:1])[1:-1]},NULL}}", f"{{{arr(terms[:1])[1:-1]},NULL}}")
    embedded = sorted((row for row in rows if row["query_ord"] == "2"), key=lambda row: int(row["hit_rank"]))
    assert [(row["doc_id"], row["section_id"]) for row in embedded] == \
        [(h.section.doc_id, h.section.section_id) for h in r.search(vecs[1], k=3, mode="dense")]
    dense_weight = float(opts["dense_weight"])
    assert [float(row["score"]) for row in embedded] == pytest.approx([dense_weight / (rrf_k + r) for r in (1, 2, 3)])
