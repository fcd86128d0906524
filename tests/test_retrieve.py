"""The one-round-trip query against a real PostgreSQL + pgvector."""

from __future__ import annotations

import asyncio

import numpy as np
import psycopg
import pytest

from onetrip import DimensionMismatchError, Retriever, SchemaMissingError, init_schema
from onetrip.layout import Layout
from onetrip.retrieve import retrieval_sql
from onetrip.store import replace_document
from onetrip.synthetic import corpus_query_vectors, generate

from .reference import multi_call_search


def load(db, n_sections: int, *, seed: int = 0, layout: Layout = Layout(dim=32)):
    init_schema(db, layout)
    docs = list(generate(n_sections, dim=layout.dim, seed=seed, sections_per_doc=(3, 25)))
    for d in docs:
        replace_document(db, layout, d.record, d.sections, d.embeddings)
    return docs


LAYOUTS = {
    "plain": Layout(dim=32),
    "partitioned": Layout(dim=32, partitions=4),
    "halfvec": Layout(dim=32, vector_type="halfvec"),
}


@pytest.fixture
def corpus(db):
    return load(db, 600)


@pytest.mark.parametrize("layout_name", list(LAYOUTS))
def test_single_statement_equals_multi_call_reference(db, layout_name, statement_log):
    layout = LAYOUTS[layout_name]
    corpus = load(db, 600, layout=layout)
    r = Retriever(db)
    assert (r.layout.partitions, r.layout.vector_type) == (layout.partitions, layout.vector_type)
    queries = corpus_query_vectors(corpus, 60, seed=7)
    levels = set()
    compared = 0
    for q in queries:
        k = int(np.random.default_rng(int(q[0] * 1e6) % 2**32).integers(1, 12))
        with statement_log.watch(db) as w:
            got = r.search(q, k=k)
        assert len(w.statements) == 1
        want = multi_call_search(db, "sections", q, k, layout.vector_type)
        assert len(got) == len(want) == k
        for g, w in zip(got, want):
            assert g.section == w.section
            assert g.distance == pytest.approx(w.distance, abs=1e-6)
            assert g.parent == w.parent
            assert g.prev == w.prev
            assert g.next == w.next
            levels.add(g.section.heading_level)
            compared += 1
    assert compared >= 60  # every query compared at least one hit (k >= 1)
    assert levels >= {1, 2, 3}, "the corpus must exercise a real 3-level hierarchy"


def test_one_statement_per_search(db, corpus, statement_log):
    r = Retriever(db)
    q = corpus_query_vectors(corpus, 3, seed=3)
    for parent, neighbors in [(True, True), (True, False), (False, True), (False, False)]:
        with statement_log.watch(db) as w:
            hits = r.search(q[0], k=7, parent=parent, neighbors=neighbors)
        assert len(hits) == 7
        assert len(w.statements) == 1, w.statements
        assert w.statements[0].lstrip().startswith("WITH nearest AS (")


def test_options_change_sql_not_statement_count(db, corpus, statement_log):
    layout = Retriever(db).layout
    full = retrieval_sql(layout, parent=True, neighbors=True)
    bare = retrieval_sql(layout, parent=False, neighbors=False)
    assert "context_keys AS" in full and "context_keys AS" not in bare
    r = Retriever(db)
    with statement_log.watch(db) as w:
        hits = r.search(corpus_query_vectors(corpus, 1)[0], k=5, parent=False, neighbors=False)
    assert len(w.statements) == 1, w.statements
    assert len(hits) == 5 and all(h.parent is None and h.prev is None and h.next is None for h in hits)


def test_boundaries(db, corpus):
    r = Retriever(db)
    doc = corpus[0]
    by_seq = {s.sequence_index: s for s in doc.sections}
    last = len(doc.sections) - 1
    # Querying with a section's own vector makes it the top hit.
    first_hit = r.search(doc.embeddings[0], k=1)[0]
    assert (first_hit.section.doc_id, first_hit.section.sequence_index) == (doc.record.doc_id, 0)
    assert first_hit.prev is None and first_hit.next.section_id == by_seq[1].section_id
    assert first_hit.parent is None  # the first section is a root (level 1)
    last_hit = r.search(doc.embeddings[last], k=1)[0]
    assert last_hit.section.sequence_index == last and last_hit.next is None
    assert last_hit.prev.sequence_index == last - 1


def test_hit_whose_neighbor_is_also_a_hit(db, corpus):
    r = Retriever(db)
    doc = corpus[1]
    q = doc.embeddings[2] + doc.embeddings[3]
    hits = r.search(q / np.linalg.norm(q), k=2)
    seqs = sorted(h.section.sequence_index for h in hits if h.section.doc_id == doc.record.doc_id)
    assert seqs == [2, 3], "the query between sections 2 and 3 no longer finds both (the test corpus changed?)"
    a, b = sorted(hits, key=lambda h: h.section.sequence_index)
    assert a.next.section_id == b.section.section_id and b.prev.section_id == a.section.section_id
    assert a.next is b.section and b.prev is a.section  # sent once, one record for both roles
    assert len(hits) == 2


def test_each_section_is_sent_once(db, corpus):
    """The statement returns the hits and then only the context rows no hit already carries."""
    from onetrip.retrieve import column_names, hits_from_rows, plan_search

    r = Retriever(db)
    per_hit_rows = context_rows = 0
    for q in corpus_query_vectors(corpus, 40, seed=21):
        plan = plan_search(r.layout, q, 10)
        with db.cursor() as cur:
            cur.execute(plan.statement, {**plan.params, "query_embedding": q})
            rows = cur.fetchall()
            names = column_names(cur)
        keys = [(row[names.index("doc_id")], row[names.index("section_id")]) for row in rows]
        assert len(keys) == len(set(keys)), "a section came back twice"
        want = multi_call_search(db, "sections", q, 10)
        hit_keys = {(h.section.doc_id, h.section.section_id) for h in want}
        related = {(h.section.doc_id, x.section_id) for h in want for x in (h.parent, h.prev, h.next) if x}
        assert set(keys) == hit_keys | related
        # the hits (a distance) first as planned, then the context rows (none); no hit_rank column:
        # the client ranks by (distance, doc_id, sequence_index), in whatever order the rows come
        assert "hit_rank" not in names
        assert all(row[names.index("distance")] is not None for row in rows[:10])
        assert all(row[names.index("distance")] is None for row in rows[10:])
        hits = hits_from_rows(names, rows)
        assert [h.rank for h in hits] == list(range(1, 11))
        assert [(h.section.doc_id, h.section.section_id) for h in hits] == \
            [(h.section.doc_id, h.section.section_id) for h in want]
        assert hits == r.search(q, k=10) == hits_from_rows(names, rows[::-1])
        per_hit_rows += sum(1 for h in want for x in (h.parent, h.prev, h.next) if x)
        context_rows += len(rows) - 10
    # what one-row-per-hit columns would have repeated (shared parents, hits that neighbor hits)
    assert context_rows < per_hit_rows


def test_k_larger_than_table_and_empty_table(db):
    layout = Layout(dim=32)
    init_schema(db, layout)
    r = Retriever(db)
    assert r.search(np.ones(32, np.float32), k=10) == []
    load(db, 12, seed=5)
    total = db.execute("SELECT count(*) FROM sections").fetchone()[0]
    hits = r.search(np.ones(32, np.float32), k=1000)
    assert len(hits) == total
    dists = [h.distance for h in hits]
    assert dists == sorted(dists)


def test_partitioned_plan_merges_local_hnsw_scans(db):
    layout = Layout(dim=32, partitions=4)
    docs = list(generate(3000, dim=32, seed=11))
    from onetrip.synthetic import bulk_load

    bulk_load(db, layout, docs)
    assert db.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'sections'::regclass").fetchone()[0] == 4
    r = Retriever(db)
    from pgvector import Vector

    q = Vector(docs[0].embeddings[0])
    plan = "\n".join(row[0] for row in db.execute("EXPLAIN " + retrieval_sql(r.layout), {"query_embedding": q, "k": 10}))
    cte = plan.split("CTE hits", 1)[1].split("->  Nested Loop", 1)[0]
    assert "Merge Append" in cte and cte.count("Index Scan using sections_p") == 4, plan
    hits = r.search(docs[0].embeddings[0], k=10)
    assert hits[0].section.doc_id == docs[0].record.doc_id and hits[0].section.sequence_index == 0


def test_explain_uses_hnsw_inside_the_cte(db):
    load(db, 3000, seed=11)
    db.execute("ANALYZE sections")
    r = Retriever(db)
    q = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    stmt = retrieval_sql(r.layout)
    from pgvector import Vector

    plan = "\n".join(row[0] for row in db.execute("EXPLAIN " + stmt, {"query_embedding": Vector(q), "k": 10}))
    cte = plan.split("CTE hits", 1)[1].split("->  Nested Loop", 1)[0] if "CTE hits" in plan else ""
    assert "Index Scan using sections_embedding_hnsw" in cte, plan
    assert "Order By: (embedding <=>" in cte, plan
    assert "Seq Scan on sections" not in cte, plan


def test_ordering_by_similarity_expression_would_lose_the_index(db):
    """Guards the pitfall the template avoids: ORDER BY 1 - distance gets a Seq Scan."""
    load(db, 3000, seed=11)
    db.execute("ANALYZE sections")
    from pgvector import Vector

    q = Vector(np.random.default_rng(0).standard_normal(32).astype(np.float32))
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT section_id FROM sections ORDER BY 1 - (embedding <=> %s) DESC LIMIT 10", (q,)))
    assert "Seq Scan" in plan and "hnsw" not in plan


def test_wrong_dimension_is_a_clear_error(db, corpus):
    r = Retriever(db)
    with pytest.raises(DimensionMismatchError, match="has 31 dimensions but the sections table stores vector\\(32\\)"):
        r.search(np.ones(31, np.float32))
    # longer too (a mutation review: a check for shorter ones alone passed every test; the server then said
    # "different vector dimensions 33 and 32")
    with pytest.raises(DimensionMismatchError, match="has 33 dimensions but the sections table stores vector\\(32\\)"):
        r.search(np.ones(33, np.float32))
    with pytest.raises(ValueError, match="k must be between 1"):
        r.search(np.ones(32, np.float32), k=0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_query_embedding_is_a_clear_error(db, corpus, bad):
    """The hot path leaves the NaN check to pgvector at bind time; the caller still gets a ValueError."""
    r = Retriever(db)
    q = np.ones(32, np.float32)
    q[5] = bad
    for call in (lambda: r.search(q, k=3), lambda: r.search(q, k=3), lambda: r.assemble(q, k=3),
                 lambda: r.search(q, k=3, parent=False)):  # cached plan twice, assemble, uncached shape
        with pytest.raises(ValueError, match="NaN or infinity"):
            call()
    assert len(r.search(np.ones(32, np.float32), k=3)) == 3  # the connection is still usable


def test_all_zero_query_embedding_is_a_clear_error(db, corpus):
    """pgvector answers a zero-length query with NaN distances; the caller gets a ValueError instead."""
    r = Retriever(db)
    z = np.zeros(32, np.float32)
    for call in (lambda: r.search(z, k=3), lambda: r.search(z, k=3), lambda: r.assemble(z, k=3),
                 lambda: r.query_vector(z)):
        with pytest.raises(ValueError, match="length zero"):
            call()
    assert len(r.search(np.ones(32, np.float32), k=3)) == 3


def test_missing_schema_is_a_clear_error(db):
    with pytest.raises(SchemaMissingError, match="run `onetrip init`"):
        Retriever(db)
    with pytest.raises(SchemaMissingError, match="other_sections"):
        Retriever(db, prefix="other_")


def test_a_retriever_creates_no_extension_and_says_to_run_init(db, dsn):
    """Retriever(dsn) on a database without pgvector created the extension, a reader's side effect, then
    failed 'run onetrip init' on the tables; AsyncRetriever.create said so without creating it. Found by review."""
    import asyncio

    from onetrip import AsyncRetriever, ServerRequirementError

    db.execute("DROP EXTENSION vector")
    said = "the vector extension is not created in this database: run `onetrip init`"
    with pytest.raises(ServerRequirementError, match=said):
        Retriever(dsn)
    with pytest.raises(ServerRequirementError, match=said):
        asyncio.run(AsyncRetriever.create(dsn))
    assert db.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone()[0] == 0


def test_tables_of_an_older_onetrip_are_a_clear_error(db):
    """Tables without parent_sequence_index (before the each-section-once key set) name the fix."""
    init_schema(db, Layout(dim=32))
    db.execute("ALTER TABLE section_history DROP COLUMN parent_sequence_index")
    db.execute("ALTER TABLE sections DROP COLUMN parent_sequence_index")
    with pytest.raises(SchemaMissingError, match="lacks column parent_sequence_index.*onetrip init --recreate"):
        Retriever(db)
    with pytest.raises(SchemaMissingError, match="parent_sequence_index"):
        init_schema(db, Layout(dim=32))


def test_a_table_without_a_column_the_statements_read_is_named_when_the_retriever_is_made(db, dsn):
    """Every column is checked in the one catalog read: without context_tokens, `assemble` had failed
    later with a raw UndefinedColumn (a traceback in `onetrip search --assemble`)."""
    init_schema(db, Layout(dim=32))
    db.execute("ALTER TABLE sections DROP COLUMN context_tokens, DROP COLUMN collection")
    with pytest.raises(SchemaMissingError, match="lacks columns context_tokens, collection .*--recreate"):
        Retriever(db)

    from onetrip import AsyncRetriever

    async def create() -> None:
        await AsyncRetriever.create(dsn)

    with pytest.raises(SchemaMissingError, match="lacks columns context_tokens, collection"):
        asyncio.run(create())


def test_init_twice_is_harmless_and_dim_mismatch_is_refused(db):
    init_schema(db, Layout(dim=32))
    init_schema(db, Layout(dim=32))
    with pytest.raises(DimensionMismatchError, match="already exists as vector\\(32\\)"):
        init_schema(db, Layout(dim=64))


def test_two_inits_of_a_new_layout_at_once_both_succeed(db, dsn):
    """Two first ingests (or `onetrip init`s) into a new prefix at once: both sessions' CREATE ... IF NOT EXISTS
    found no table and one failed on a catalog index (UniqueViolation on pg_type_typname_nsp_index, in 7 of 20
    calls). They now wait for each other, and the second finds everything made."""
    import threading

    failures: list[str] = []
    for i in range(6):
        layout = Layout(dim=8, prefix=f"twin{i}_")
        barrier = threading.Barrier(2)

        def init() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                barrier.wait()
                try:
                    init_schema(conn, layout)
                except Exception as e:  # noqa: BLE001 - collected, then asserted as a whole
                    failures.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=init) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    assert db.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'twin%_sections'").fetchone()[0] == 6


def test_init_names_another_vector_type_or_partitioning_before_touching_the_tables(db, dsn):
    """The schema script's index on another column type had failed with a raw DatatypeMismatch (a traceback)."""
    init_schema(db, Layout(dim=32))
    with pytest.raises(DimensionMismatchError, match="already exists as vector\\(32\\); cannot initialise it as halfvec"):
        init_schema(db, Layout(dim=32, vector_type="halfvec"))
    with pytest.raises(ValueError, match="sections already exists without partitions; cannot initialise it with 4 "
                                         "hash partitions .*Give --partitions 0"):
        init_schema(db, Layout(dim=32, partitions=4))
    init_schema(db, Layout(dim=16, prefix="p_", partitions=2, vector_type="halfvec"))
    with pytest.raises(ValueError, match="p_sections already exists with 2 hash partitions; cannot initialise it "
                                         "without partitions"):
        init_schema(db, Layout(dim=16, prefix="p_", vector_type="halfvec"))
    assert init_schema(db, Layout(dim=16, prefix="p_", partitions=2, vector_type="halfvec")).partitions == 2

    from .test_cli import onetrip

    res = onetrip("init", "--dim", "32", "--vector-type", "halfvec", dsn=dsn)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "cannot initialise it as halfvec(32)" in res.stderr
    res = onetrip("init", "--dim", "16", "--prefix", "p_", "--partitions", "2", "--vector-type", "halfvec",
                  "--hnsw-m", "24", dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert "p_sections (halfvec(16), 2 partitions)" in res.stdout
    assert "kept the existing HNSW index p_sections_embedding_hnsw (m=16, ef_construction=64)" in res.stderr
    res = onetrip("init", "--dim", "16", "--prefix", "p_", "--partitions", "2", "--vector-type", "halfvec", dsn=dsn)
    assert res.returncode == 0 and "note" not in res.stderr  # no HNSW flag given: nothing asked to change


def test_init_schema_returns_the_hnsw_options_the_index_was_built_with(db):
    """init_schema had returned the HNSW options asked for (or Layout's defaults), not the existing index's, which
    it keeps (found by review); partitioned tables too."""
    for kw in ({}, {"partitions": 2}):
        built = init_schema(db, Layout(dim=8, prefix="h_" if not kw else "hp_", hnsw_m=24, hnsw_ef_construction=96,
                                       **kw))
        assert (built.hnsw_m, built.hnsw_ef_construction) == (24, 96)
        again = init_schema(db, Layout(dim=8, prefix="h_" if not kw else "hp_", **kw))  # asks pgvector's defaults
        assert (again.hnsw_m, again.hnsw_ef_construction) == (24, 96)
    # options set on the index that break pgvector's rule (ALTER INDEX does not check it) had made init fail on
    # Layout's own check of the values read back (found by review): the asked ones are reported
    db.execute("ALTER INDEX h_sections_embedding_hnsw SET (m = 60)")
    broken = init_schema(db, Layout(dim=8, prefix="h_", hnsw_m=20, hnsw_ef_construction=80))
    assert (broken.hnsw_m, broken.hnsw_ef_construction) == (20, 80)  # not Layout's defaults (second review)


def test_a_table_of_a_partitions_name_is_refused_before_anything_is_made(db, dsn):
    """CREATE TABLE IF NOT EXISTS ... PARTITION OF skipped a partition whose name another table had: init committed a
    sections table without that remainder, said it had 2 of 3 partitions, and ingest then failed for every document
    hashing there (found by review)."""
    from onetrip.errors import ForeignTableError

    db.execute("CREATE TABLE q_sections_p1 (id int, note text)")
    with pytest.raises(ForeignTableError, match="q_sections_p1 exists but is not a partition of q_sections"):
        init_schema(db, Layout(dim=16, prefix="q_", partitions=3))
    assert db.execute("SELECT to_regclass('q_sections'), to_regclass('q_documents')").fetchone() == (None, None)
    db.execute("DROP TABLE q_sections_p1")
    assert init_schema(db, Layout(dim=16, prefix="q_", partitions=3)).partitions == 3
    assert init_schema(db, Layout(dim=16, prefix="q_", partitions=3)).partitions == 3  # its own partitions: fine


def test_a_retriever_ends_the_transaction_it_opened_on_a_callers_connection(db, dsn):
    """Without autocommit, its settings and reads had left the caller's connection in a transaction:
    a later rollback undid ef_search, and the catalog and documents locks stayed held."""
    init_schema(db, Layout(dim=8))
    with psycopg.connect(dsn) as conn:  # psycopg's default: no autocommit
        Retriever(conn, ef_search=123)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        conn.rollback()
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("123",)
        conn.rollback()
        conn.execute("SELECT 1")  # the caller's own transaction: left to the caller
        Retriever(conn, ef_search=77)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        with pytest.raises(SchemaMissingError):
            Retriever(conn, prefix="missing_")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    async def on_async_connection() -> tuple:
        from onetrip import AsyncRetriever

        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await AsyncRetriever.create(conn, ef_search=321)
            status = conn.info.transaction_status
            await conn.rollback()
            cur = await conn.execute("SHOW hnsw.ef_search")
            return status, await cur.fetchone()

    assert asyncio.run(on_async_connection()) == (psycopg.pq.TransactionStatus.IDLE, ("321",))


def test_a_lost_connection_is_named_on_that_call_and_after(db, dsn, corpus, terminate):
    """A backend killed under a retriever (a restart, pg_terminate_backend) had surfaced as psycopg's
    AdminShutdown, whose second line pointed at 'LINE 5: FROM sections s' as if the statement were wrong, then
    as 'the connection is closed'; both calls now raise ConnectionLostError, the first naming the server's cause.
    A connection the caller gave stays the caller's: never replaced, every later call says it is lost. A
    connection its owner closed keeps psycopg's own error: nothing was lost."""
    from onetrip import AsyncRetriever, ConnectionLostError, connect

    q = corpus_query_vectors(corpus, 1, seed=9)[0]
    given = connect(dsn)
    r = Retriever(given)
    assert r.search(q, k=3)
    assert terminate(pid=given.info.backend_pid) == 1
    with pytest.raises(ConnectionLostError, match=r"lost \(terminating connection due to administrator command\)"
                                                  r".*given to this retriever, which keeps it") as lost:
        r.search(q, k=3)
    assert lost.value.cause == "terminating connection due to administrator command"
    with pytest.raises(ConnectionLostError, match="lost before this call"):
        r.assemble(q, k=3)
    with pytest.raises(ConnectionLostError, match="lost before this call"):
        r.explain(q, k=3, kind="plan")
    assert r.conn is given
    r.close()
    closed = Retriever(dsn)
    closed.conn.close()
    with pytest.raises(psycopg.OperationalError, match="the connection is closed") as by_owner:
        closed.search(q, k=3)
    assert not isinstance(by_owner.value, ConnectionLostError)

    async def on_async_connection() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as given:
            r = await AsyncRetriever.create(given)
            assert await r.search(q, k=3)
            assert terminate(pid=given.info.backend_pid) == 1
            seen = []
            for _ in range(2):
                with pytest.raises(ConnectionLostError) as e:
                    await r.search_many([q, q], k=3)
                seen.append(str(e.value))
            assert r.conn is given
            return seen

    first, second = asyncio.run(on_async_connection())
    assert "administrator command" in first and "given to this retriever" in first
    assert "lost before this call" in second


def test_a_retriever_from_a_dsn_reopens_its_lost_connection_on_the_next_call(db, dsn, corpus, terminate):
    """A Retriever made from a DSN kept its connection after the server ended it (a restart, pg_terminate_backend,
    an idle timeout): every later call failed until the process made a new Retriever. The call that finds it
    lost still raises ConnectionLostError (its statement is not retried); the next one, whatever entry it is,
    opens a new connection set up as the first (autocommit, pgvector's adapters, the retriever's settings) and
    answers as before. A retriever closed meanwhile stays closed."""
    from onetrip import ConnectionLostError

    q, q2 = corpus_query_vectors(corpus, 2, seed=9)
    r = Retriever(dsn, ef_search=77, iterative_scan="strict_order")
    calls = {
        "search": lambda: r.search(q, k=3),
        "assemble": lambda: r.assemble(q, k=3, max_tokens=600),
        "search_many": lambda: r.search_many([q, q2], k=3),
        "explain": lambda: (lambda ex: (ex.statement, ex.vector_index_scans))(r.explain(q, k=3, kind="plan")),
        "explain_many": lambda: (lambda ex: (ex.statement, ex.vector_index_scans))(
            r.explain_many([q, q2], k=3, kind="plan")),
        "refresh_embedder_record": r.refresh_embedder_record,
    }
    want = {name: call() for name, call in calls.items()}
    assert want["search"] and want["assemble"].passages and all(want["search_many"])
    for name, call in calls.items():
        pid = r.conn.info.backend_pid
        assert terminate(pid=pid) == 1
        with pytest.raises(ConnectionLostError, match=r"administrator command.*opens a new connection on its next"):
            call()
        assert r.conn is None, name
        assert call() == want[name], name
        assert r.conn.info.backend_pid != pid and r.conn.autocommit, name
        settings = r.conn.execute("SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan'), "
                                  "current_setting('hnsw.max_scan_tuples')").fetchone()
        assert settings == ("77", "strict_order", "20000"), name
    assert terminate(pid=r.conn.info.backend_pid) == 1
    with pytest.raises(ConnectionLostError):
        r.search(q, k=3)
    r.close()
    with pytest.raises(psycopg.OperationalError, match=r"closed \(Retriever.close\(\) was called\)"):
        r.search(q, k=3)
    assert r.conn is None


def test_a_retriever_that_cannot_reopen_its_connection_says_why_and_tries_again_on_the_next_call(
        db, dsn, corpus, terminate):
    """The new connection is opened as `connect` opens one: a server that refuses it is a ConnectionFailedError
    naming the server and its reason (not 'lost' again), and the call after that tries again."""
    from onetrip import ConnectionFailedError, ConnectionLostError

    q = corpus_query_vectors(corpus, 1, seed=12)[0]
    role = "onetrip_reopen_role"
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        db.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        r = Retriever(psycopg.conninfo.make_conninfo(dsn, user=role))
        want = r.search(q, k=3)
        db.execute(f"ALTER ROLE {role} NOLOGIN")
        assert terminate(pid=r.conn.info.backend_pid) == 1
        with pytest.raises(ConnectionLostError):
            r.search(q, k=3)
        for _ in range(2):
            with pytest.raises(ConnectionFailedError, match=rf"could not connect to PostgreSQL at .*{role}.*not "
                                                            "permitted to log in") as refused:
                r.search(q, k=3)
            assert type(refused.value) is ConnectionFailedError and r.conn is None
        db.execute(f"ALTER ROLE {role} LOGIN")
        assert r.search(q, k=3) == want
        r.close()
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


def test_an_async_retriever_from_a_dsn_reopens_its_lost_connection_on_the_next_call(db, dsn, corpus, terminate):
    """As the sync test: each entry of an AsyncRetriever made from a DSN raises ConnectionLostError on the call
    that finds its connection lost, and the next call opens a new one with the retriever's settings."""
    from onetrip import AsyncRetriever, ConnectionLostError

    q, q2 = corpus_query_vectors(corpus, 2, seed=10)

    async def main() -> None:
        r = await AsyncRetriever.create(dsn, ef_search=77, iterative_scan="strict_order")

        async def plan_of(ex: object) -> tuple:
            ex = await ex
            return ex.statement, ex.vector_index_scans

        calls = {
            "search": lambda: r.search(q, k=3),
            "assemble": lambda: r.assemble(q, k=3, max_tokens=600),
            "search_many": lambda: r.search_many([q, q2], k=3),
            "explain": lambda: plan_of(r.explain(q, k=3, kind="plan")),
            "explain_many": lambda: plan_of(r.explain_many([q, q2], k=3, kind="plan")),
            "refresh_embedder_record": r.refresh_embedder_record,
        }
        want = {name: await call() for name, call in calls.items()}
        assert want["search"] and want["assemble"].passages and all(want["search_many"])
        for name, call in calls.items():
            pid = r.conn.info.backend_pid
            assert terminate(pid=pid) == 1
            with pytest.raises(ConnectionLostError, match=r"administrator command.*opens a new connection on its"):
                await call()
            assert r.conn is None, name
            assert await call() == want[name], name
            assert r.conn.info.backend_pid != pid and r.conn.autocommit, name
            cur = await r.conn.execute("SELECT current_setting('hnsw.ef_search'), "
                                       "current_setting('hnsw.iterative_scan'), current_setting('hnsw.max_scan_tuples')")
            assert await cur.fetchone() == ("77", "strict_order", "20000"), name
        assert terminate(pid=r.conn.info.backend_pid) == 1
        with pytest.raises(ConnectionLostError):
            await r.search(q, k=3)
        await r.close()
        with pytest.raises(psycopg.OperationalError, match=r"AsyncRetriever.close\(\) was called"):
            await r.search(q, k=3)

    asyncio.run(main())


def test_an_async_retriever_closed_while_it_reopens_keeps_no_connection(db, dsn, corpus, terminate, monkeypatch):
    """close() from one task while another task's call was opening the new connection found no connection to
    close; the reopen then stored its new one, which stayed open, and every call after close() answered on it.
    The reopen is held right after it connected (the real connection), close() runs, then it goes on."""
    from onetrip import AsyncRetriever, ConnectionLostError, async_retrieve

    q = corpus_query_vectors(corpus, 1, seed=13)[0]
    real_connect = async_retrieve.connect_async

    async def main() -> None:
        connected, proceed = asyncio.Event(), asyncio.Event()
        opened: list[psycopg.AsyncConnection] = []

        async def held_connect(dsn_: str | None) -> psycopg.AsyncConnection:
            conn = await real_connect(dsn_)
            opened.append(conn)
            connected.set()
            await proceed.wait()
            return conn

        r = await AsyncRetriever.create(dsn)
        assert terminate(pid=r.conn.info.backend_pid) == 1
        with pytest.raises(ConnectionLostError):
            await r.search(q, k=3)
        monkeypatch.setattr(async_retrieve, "connect_async", held_connect)
        reopening = asyncio.create_task(r.search(q, k=3))
        await connected.wait()
        await r.close()
        proceed.set()
        with pytest.raises(psycopg.OperationalError, match=r"AsyncRetriever.close\(\) was called"):
            await reopening
        assert r.conn is None and opened[0].closed
        with pytest.raises(psycopg.OperationalError, match=r"AsyncRetriever.close\(\) was called"):
            await r.search(q, k=3)

    asyncio.run(main())


def test_explain_on_a_lost_connection_is_named_as_a_search_is(db, dsn, corpus, terminate):
    """explain (the HTTP service's "explain" too) had kept psycopg's AdminShutdown after a backend was killed,
    where search said ConnectionLostError; over a pool, the idle connections are checked, so the next call
    works. Sync and async."""
    from onetrip import AsyncRetriever, ConnectionLostError, make_async_pool, make_pool

    q = corpus_query_vectors(corpus, 1, seed=11)[0]
    r = Retriever(dsn)
    assert terminate(pid=r.conn.info.backend_pid) == 1
    with pytest.raises(ConnectionLostError, match="administrator command"):
        r.explain(q, k=3, kind="plan")
    r.close()
    name = "onetrip_lost_explain"
    pool = make_pool(psycopg.conninfo.make_conninfo(dsn, application_name=name), min_size=2, max_size=2)
    try:
        pool.wait()
        r = Retriever(pool)
        assert terminate(application_name=name) == 2
        with pytest.raises(ConnectionLostError, match="the pool drops it"):
            r.explain_many([q, q], k=3, kind="plan")
        assert "Index Scan" in r.explain(q, k=3, kind="plan").plan
    finally:
        pool.close()

    async def on_async() -> str:
        pool = make_async_pool(psycopg.conninfo.make_conninfo(dsn, application_name=name), min_size=2, max_size=2)
        await pool.open(wait=True)
        try:
            r = await AsyncRetriever.create(pool)
            assert terminate(application_name=name) == 2
            with pytest.raises(ConnectionLostError, match="administrator command"):
                await r.explain(q, k=3, kind="plan")
            return (await r.explain(q, k=3, kind="plan")).plan
        finally:
            await pool.close()

    assert "Index Scan" in asyncio.run(on_async())


def test_schema_and_prefix_layouts_are_isolated(db):
    a = Layout(dim=8, schema="tenant_a", prefix="kb_")
    init_schema(db, a)
    init_schema(db, Layout(dim=8))
    tables = {r[0] for r in db.execute(
        "SELECT schemaname || '.' || tablename FROM pg_tables WHERE tablename LIKE '%%sections'")}
    assert {"tenant_a.kb_sections", "public.sections"} <= tables
    r = Retriever(db, schema="tenant_a", prefix="kb_")
    assert r.layout.dim == 8 and r.search(np.ones(8), k=3) == []


def test_prepared_statement_reuses_a_generic_plan_that_uses_hnsw(db):
    """Replanning every call costs more than the query (measured in benchmarks/latency).

    With the index scan's LIMIT a constant bucket (k stays a bind; or k itself,
    when k is a bucket), the plan cache settles on one generic plan, and that
    plan still uses the index.
    """
    load(db, 3000, seed=11)
    db.execute("ANALYZE sections")
    r = Retriever(db)
    qs = np.random.default_rng(3).standard_normal((12, 32)).astype(np.float32)
    for q in qs:
        for k in (7, 10):  # bucket 10 with the exact LIMIT k after it; k = 10, the bucket alone
            r.search(q, k=k)
            r.assemble(q, k=k, max_tokens=1000)
    stats = db.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    ours = [s for s in stats if s[0].startswith("WITH")]
    assert len(ours) == 4 and all(g > 0 for _, g, _ in ours), stats
    assert sum("LIMIT $" in s for s, _, _ in ours) == 2  # only the k=7 statements bind k
    lit = "[" + ",".join(f"{x:.6f}" for x in qs[0]) + "]"
    plan = _prepare_generic(db, retrieval_sql(r.layout, bucket=10), {"query_embedding": lit, "k": 7})
    assert "Index Scan using sections_embedding_hnsw" in plan, plan


#: the sections table of onetrip's first commit (295ac80), which an older onetrip left
FIRST_SECTIONS_DDL = """CREATE TABLE sections (doc_id text NOT NULL, section_id text NOT NULL, parent_section_id text,
    sequence_index integer NOT NULL, heading_level smallint NOT NULL, heading text, heading_path text[] DEFAULT '{}'
    NOT NULL, anchor text, content text NOT NULL, token_count integer NOT NULL, embedding vector(32) NOT NULL,
    metadata jsonb DEFAULT '{}' NOT NULL, PRIMARY KEY (doc_id, section_id))"""


def test_tables_from_an_older_version_are_named_not_half_migrated(db):
    db.execute(FIRST_SECTIONS_DDL)
    with pytest.raises(SchemaMissingError, match=r"older onetrip and lacks column\(s\) .*context_tokens.*--recreate"):
        init_schema(db, Layout(dim=32))
    from onetrip.schema import drop_schema

    drop_schema(db, Layout(dim=32))
    assert init_schema(db, Layout(dim=32)).dim == 32


def test_another_applications_tables_of_onetrips_names_are_neither_used_nor_dropped(db):
    """Found by review: with the default empty prefix, any table named sections was taken for an older
    onetrip's, and the advised `init --recreate` dropped it with CASCADE (its rows, a view on it, a foreign
    key to it); a documents table was never checked, so `delete` deleted from another application's."""
    from onetrip import ForeignTableError, OnetripError
    from onetrip.schema import drop_schema

    db.execute("CREATE TABLE sections (id int PRIMARY KEY, title text)")
    db.execute("INSERT INTO sections VALUES (1, 'precious')")
    db.execute("CREATE VIEW v AS SELECT * FROM sections")
    for call in (lambda: init_schema(db, Layout(dim=32)), lambda: Retriever(db), lambda: drop_schema(db, Layout())):
        with pytest.raises(ForeignTableError, match="sections exists but is not onetrip's: it has no columns "
                                                    "doc_id, section_id, parent_section_id, sequence_index and 8 "
                                                    "more of onetrip's.*another --prefix or --schema"):
            call()
    assert db.execute("SELECT title FROM v").fetchall() == [("precious",)]
    db.execute("DROP VIEW v; DROP TABLE sections")
    db.execute("CREATE TABLE documents (doc_id text PRIMARY KEY, owner text)")
    with pytest.raises(ForeignTableError, match="documents exists .* no columns source_uri, title, revision, "
                                                "content_hash and 4 more of onetrip's"):
        init_schema(db, Layout(dim=32))
    assert db.execute("SELECT to_regclass('sections')").fetchone()[0] is None  # nothing made beside it
    db.execute("DROP TABLE documents")
    # term_stats had been told by its lexeme column alone: an application's word table passed for onetrip's,
    # init said ready and `init --recreate` dropped it with its rows; section_history likewise by three columns
    for table, ddl, lacking in (("term_stats", "lexeme text PRIMARY KEY, freq bigint", "sections, share, idf"),
                                ("section_history", "doc_id text, section_id text, revision int",
                                 "parent_section_id, sequence_index, heading_level, heading and 10 more")):
        db.execute(f"CREATE TABLE {table} ({ddl})")
        for call in (lambda: init_schema(db, Layout(dim=32)), lambda: drop_schema(db, Layout())):
            with pytest.raises(ForeignTableError, match=f"{table} exists but is not onetrip's: .* {lacking}"):
                call()
        assert db.execute("SELECT to_regclass('sections')").fetchone()[0] is None
        db.execute(f"DROP TABLE {table}")
    # onetrip's own tables: a view on them is named, nothing dropped; a documents column lacking is named
    init_schema(db, Layout(dim=32))
    db.execute("CREATE VIEW mine AS SELECT doc_id FROM sections")
    with pytest.raises(OnetripError, match="not dropped: other objects depend on them .*view mine depends"):
        drop_schema(db, Layout(dim=32))
    db.execute("DROP VIEW mine; ALTER TABLE documents DROP COLUMN acl")
    with pytest.raises(SchemaMissingError, match=r"documents was created by an older onetrip .* lacks column "
                                                 r"documents\.acl"):
        Retriever(db)
    with pytest.raises(SchemaMissingError, match=r"documents\.acl"):
        init_schema(db, Layout(dim=32))
    drop_schema(db, Layout(dim=32))
    assert db.execute("SELECT to_regclass('sections'), to_regclass('documents')").fetchone() == (None, None)


def test_an_application_table_with_a_few_of_onetrips_columns_is_not_taken_for_an_older_onetrips(db):
    """Found by review: three columns had told onetrip's tables, so an application's documents (doc_id, source_uri,
    content_hash, owner) was "created by an older onetrip", and the advised `init --recreate` dropped its rows;
    four of section_history's adopted a foreign table; a view or composite type of sections' name was called an
    older onetrip's, and `--recreate` failed with WrongObjectType."""
    from onetrip import ForeignTableError
    from onetrip.schema import drop_schema

    db.execute("CREATE TABLE documents (doc_id text PRIMARY KEY, source_uri text, content_hash text, owner text)")
    db.execute("INSERT INTO documents VALUES ('keep', 'u', 'h', 'alice')")
    for call in (lambda: init_schema(db, Layout(dim=32)), lambda: drop_schema(db, Layout(dim=32))):
        with pytest.raises(ForeignTableError, match="documents exists but is not onetrip's: it has no columns title, "
                                                    "revision, metadata, token_count and 2 more"):
            call()
    assert db.execute("SELECT owner FROM documents").fetchall() == [("alice",)]
    assert db.execute("SELECT to_regclass('sections')").fetchone()[0] is None
    db.execute("DROP TABLE documents")
    init_schema(db, Layout(dim=32))  # onetrip's own tables have every column the check asks for
    drop_schema(db, Layout(dim=32))
    db.execute("CREATE TABLE section_history (doc_id text, section_id text, revision int, archived_at timestamptz, "
               "note text)")
    with pytest.raises(ForeignTableError, match="section_history exists but is not onetrip's: it has no columns "
                                                "parent_section_id, "):
        init_schema(db, Layout(dim=32))
    db.execute("DROP TABLE section_history")
    db.execute(FIRST_SECTIONS_DDL.replace("CREATE TABLE sections", "CREATE TABLE app_sections"))
    for ddl, kind in (("CREATE VIEW sections AS SELECT * FROM app_sections", "a view"),
                      ("CREATE TYPE sections AS (doc_id text, section_id text, embedding vector(32))",
                       "a composite type")):
        db.execute(ddl)
        for call in (lambda: init_schema(db, Layout(dim=32)), lambda: drop_schema(db, Layout(dim=32))):
            with pytest.raises(ForeignTableError, match=f"sections exists but is {kind}, not onetrip's table"):
                call()
        db.execute(f"DROP {ddl.split()[1]} sections")
    assert db.execute("SELECT to_regclass('documents')").fetchone()[0] is None  # nothing made beside them
    # a type that is no relation (an enum) of a table's name, an index of a primary key's: the server's words,
    # named (they had been a raw DuplicateObject / DuplicateTable)
    for ddl, said in (("CREATE TYPE sections AS ENUM ('a')", 'type "sections" already exists'),
                      ("CREATE INDEX documents_pkey ON app_sections (doc_id)", 'relation "documents_pkey" already')):
        db.execute(ddl)
        with pytest.raises(ForeignTableError, match=f"{said}.*: onetrip cannot make its table or constraint"):
            init_schema(db, Layout(dim=32))
        db.execute(f"DROP {ddl.split()[1]} {ddl.split()[2]}")
        assert db.execute("SELECT to_regclass('documents')").fetchone()[0] is None


def test_an_index_name_another_relation_holds_is_refused_not_skipped(db):
    """Found by review: CREATE INDEX IF NOT EXISTS skipped a name an application's index (or any relation) held,
    and init said ready with sections lacking its HNSW, sequence or full-text index: every search scanned the
    whole table. Now init names the holder and makes nothing."""
    from onetrip import ForeignTableError

    db.execute("CREATE TABLE app (x int, y int)")
    db.execute("CREATE INDEX sections_embedding_hnsw ON app (x)")
    with pytest.raises(ForeignTableError, match="sections_embedding_hnsw is an index on app, not an index of sections"):
        init_schema(db, Layout(dim=32))
    assert db.execute("SELECT to_regclass('sections'), to_regclass('documents')").fetchone() == (None, None)
    db.execute("DROP INDEX sections_embedding_hnsw; CREATE SEQUENCE q_sections_tsv_gin")
    with pytest.raises(ForeignTableError, match="q_sections_tsv_gin is a sequence, not an index of q_sections"):
        init_schema(db, Layout(dim=32, prefix="q_"))
    db.execute("DROP SEQUENCE q_sections_tsv_gin")
    for layout in (Layout(dim=32), Layout(dim=32, prefix="q_", partitions=2)):
        init_schema(db, layout)
        init_schema(db, layout)  # a second run finds its own indexes
        indexes = {r[0] for r in db.execute("SELECT indexrelid::regclass::text FROM pg_index "
                                            "WHERE indrelid = %s::regclass", (layout.tables["sections"],))}
        assert {layout.prefix + n for n in ("sections_embedding_hnsw", "sections_doc_seq_key",
                                            "sections_tsv_gin")} <= indexes, indexes


def _prepare_generic(db, statement: str, values: dict) -> str:
    """EXPLAIN of the statement's generic plan: PREPARE with a typed $n for each psycopg placeholder."""
    import re

    names: list[str] = []

    def number(m: re.Match) -> str:
        if m[1] not in names:
            names.append(m[1])
        return f"${names.index(m[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, statement)
    kinds = {float: "float8", int: "int4", str: "text", list: "text[]"}
    types = ", ".join("vector" if n == "query_embedding" else kinds[type(values[n])] for n in names)
    literal = {list: lambda v: "{" + ",".join(v) + "}"}
    args = [literal.get(type(values[n]), str)(values[n]) for n in names]
    db.execute("SET plan_cache_mode = force_generic_plan")
    db.execute(f"PREPARE g ({types}) AS " + text)
    try:
        quoted = ", ".join(db.execute("SELECT quote_literal(%s::text)", (a,)).fetchone()[0] for a in args)
        return "\n".join(row[0] for row in db.execute(f"EXPLAIN EXECUTE g({quoted})"))
    finally:
        db.execute("DEALLOCATE g")
        db.execute("RESET plan_cache_mode")


def test_hybrid_generic_plan_scans_hnsw(db):
    """The vector scan's LIMIT is a constant bucket, the generic plan uses HNSW.

    With LIMIT $candidates there, the generic plan psycopg switches to from the
    6th call estimated 10% of the table and read the manual's sections with a
    Seq Scan: 20-23 ms per hybrid call against 4-5 ms (benchmarks/quality).
    """
    import re

    from onetrip.retrieve import plan_search

    load(db, 3000, seed=11)
    r = Retriever(db)
    q = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    plan = plan_search(r.layout, q, 7, mode="hybrid", text="topic section words")
    scan = plan.statement[plan.statement.index("nearest AS"):plan.statement.index("dense AS")]
    assert re.search(r"ORDER BY s\.embedding <=> %\(query_embedding\)s\S*\s+LIMIT 50\b", scan), scan
    values = {**plan.params, "query_embedding": "[" + ",".join(f"{x:.6f}" for x in q) + "]"}
    assert "Index Scan using sections_embedding_hnsw" in _prepare_generic(db, plan.statement, values)
