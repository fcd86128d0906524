"""Bad query arguments: a clear ValueError/TypeError naming the argument, before any statement is sent.

Each case was found by probing the API (values PostgreSQL or pgvector would refuse,
or silently misread); the one-statement tests elsewhere cover the good calls.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from onetrip import DimensionMismatchError, Filters, HybridOptions, Retriever, init_schema
from onetrip.store import replace_document
from onetrip.synthetic import generate
from onetrip.layout import Layout

from .embedders import HashEmbedder

DIM = 384


@pytest.fixture
def r(db):
    layout = Layout(dim=DIM)
    init_schema(db, layout)
    for d in generate(200, dim=DIM, seed=5, sections_per_doc=(3, 12)):
        replace_document(db, layout, d.record, d.sections, d.embeddings)
    db.execute("ANALYZE sections")
    return Retriever(db, embedder=HashEmbedder(DIM))


def vec(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def test_values_postgres_cannot_hold_are_refused_before_sending(r, db, statement_log):
    v = vec()
    cases = [
        (ValueError, "metadata", dict(filters={"metadata": {"a": float("nan")}})),
        (ValueError, "metadata", dict(filters={"metadata": {"a": float("inf")}})),
        (ValueError, "NUL", dict(filters={"metadata": {"a": "x\x00"}})),
        (ValueError, "doc_ids holds a NUL", dict(filters={"doc_ids": ["a\x00"]})),
        (ValueError, "source_prefix holds a NUL", dict(filters={"source_prefix": "a\x00"})),
        (ValueError, "query text holds a NUL", dict(mode="lexical", text="max\x00connections")),
        (ValueError, "not valid Unicode", dict(mode="hybrid", text="a\ud800b")),
        (TypeError, "list of strings", dict(filters={"collections": 5})),
    ]
    nested: dict = {}
    for _ in range(5000):
        nested = {"a": nested}
    cases.append((ValueError, "metadata", dict(filters={"metadata": nested})))
    with statement_log.watch(db) as w:
        for exc, words, kwargs in cases:
            with pytest.raises(exc, match=words):
                r.search(v, 3, **kwargs)
        with pytest.raises(ValueError, match="not valid Unicode"):
            r.search("a\ud800b", 3, mode="dense")  # would reach the tokenizer
    assert w.statements == []


def test_filters_from_a_generator_keep_their_values(r):
    """The type check used up a generator before tuple() ran: the filter was silently empty."""
    doc = r.search(vec(1), 1)[0].section.doc_id
    flt = Filters(doc_ids=(d for d in [doc]), collections=iter(["default"]))
    assert flt.doc_ids == (doc,) and flt.collections == ("default",)
    hits = r.search(vec(1), 3, filters=flt)
    assert hits and {h.section.doc_id for h in hits} == {doc}


def test_search_many_refuses_a_blank_or_missing_query(r, db, statement_log):
    with statement_log.watch(db) as w:
        with pytest.raises(ValueError, match="query 1: the query text is empty"):
            r.search_many(["tennis", "   "])
        with pytest.raises(TypeError, match="query 1: a query must be a text or an embedding"):
            r.search_many([vec(), None])
    assert w.statements == []


def test_a_query_past_a_postgres_limit_is_bad_input(r):
    """to_tsvector's 1 MB limit: psycopg files the error under OperationalError (the HTTP service's 503)."""
    text = " ".join(f"w{i}x" for i in range(100_000))
    from onetrip import QueryTooLargeError

    with pytest.raises(QueryTooLargeError, match="too large for PostgreSQL"):  # a ValueError too
        r.search(text, 3, mode="lexical")


def test_hybrid_options_and_expansion_flags_are_checked(r):
    v = vec(2)
    for bad in (dict(rrf_k=True), dict(candidates=True), dict(candidates=0)):
        with pytest.raises(ValueError):
            HybridOptions(**bad)
    # past PostgreSQL's integer the server refused the bind, naming no option (found by the HTTP review)
    with pytest.raises(ValueError, match="rrf_k must be an integer from 1 to 1000000"):
        HybridOptions(rrf_k=10 ** 400)
    with pytest.raises(ValueError, match="rare_term_sections must be an integer from 0 to 2147483647"):
        HybridOptions(rare_term_sections=2 ** 31)
    assert HybridOptions(rrf_k=1_000_000, rare_term_sections=2 ** 31 - 1).rrf_k == 1_000_000
    assert r.search(v, 3, mode="hybrid", text="section body", hybrid={"rrf_k": 1_000_000, "rare_term_sections": 2 ** 31 - 1})
    # a plain dict of HybridOptions fields is accepted, like filters
    assert r.search(v, 3, mode="hybrid", text="section body", hybrid={"candidates": 20})
    with pytest.raises(ValueError, match="unknown hybrid option"):
        r.search(v, 3, mode="hybrid", text="section body", hybrid={"candidate": 20})
    with pytest.raises(TypeError, match="hybrid must be a HybridOptions"):
        r.search(v, 3, mode="hybrid", text="section body", hybrid=5)
    # search's parent/neighbors are flags: a window size or a string was read as True
    for bad in (2, -1, 3.5, "0", None):
        with pytest.raises(ValueError, match="neighbors must be True or False"):
            r.search(v, 3, neighbors=bad)
    with pytest.raises(ValueError, match="parent must be True or False"):
        r.search(v, 3, parent=[])
    with pytest.raises(ValueError, match="neighbors must be True or False"):
        r.search_many([v, vec(3)], 3, neighbors=2)
    # assemble's flags: ancestors="no" had turned ancestors on
    for name, bad in (("ancestors", "no"), ("document", "false"), ("parent", []), ("section", 1)):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            r.assemble(v, 3, **{name: bad})
    for bad in (None, 3.5, "1"):
        with pytest.raises(ValueError, match="neighbors must be an integer"):
            r.search(v, 3, assemble=True, neighbors=bad)
    assert r.search(v, 3, assemble=True, neighbors=True).passages  # True: the +/-1 window


def test_validation_does_not_depend_on_the_plan_cache(r):
    """True == 1 and 1.0 == 1: a cache keyed by values alone let max_tokens=True reuse max_tokens=1's plan."""
    v = vec(4)
    r.assemble(v, 3, max_tokens=1)
    with pytest.raises(ValueError, match="max_tokens must be an integer"):
        r.assemble(v, 3, max_tokens=True)
    r.assemble(v, 3, max_tokens=300)
    with pytest.raises(ValueError, match="max_tokens must be an integer"):
        r.assemble(v, 3, max_tokens=300.0)
    r.search(v, 3, parent=True)
    with pytest.raises(ValueError, match="parent must be True or False"):
        r.search(v, 3, parent=1.0)


def test_embeddings_that_are_not_numbers_or_out_of_range(r):
    v = vec(5)
    for bad, exc, words in ((["a"] * DIM, TypeError, "sequence of numbers"),
                            ([[0.1] * 3, [0.2] * 2], TypeError, "sequence of numbers"),
                            ({"a": 1}, TypeError, "sequence of numbers"),
                            (np.ones(DIM, dtype=complex), TypeError, "real numbers"),
                            (np.ones(DIM, dtype=bool), TypeError, "real numbers"),
                            (np.ones((1, DIM), np.float32), DimensionMismatchError, "one vector")):
        with pytest.raises(exc, match=words):
            r.query_vector(bad)
    with pytest.raises(TypeError, match="got None"):
        r.search(None, 3)
    # a text the embedder gives None for: the embedder is named, not the caller's query (found by review)
    real = r.embedder.embed_query
    r.embedder.embed_query = lambda text: None
    try:
        for call in (r.search, r.assemble):
            with pytest.raises(TypeError, match="^the embedder's embed_query returned None$"):
                call("some text", 3)
    finally:
        r.embedder.embed_query = real
    # finite, but past what pgvector's float32 norm handles: every distance was 1.0 (or 0.0)
    for scale in (1e20, 1e-22):
        with pytest.raises(ValueError, match="normalise it"):
            r.query_vector(v * scale)
        with pytest.raises(ValueError, match="query 0: .*normalise it"):
            r.search_many([v * scale, v], 3)
    # search and assemble send it as given (no norm on the hot path) and refuse the result when every distance
    # came back 1.0 or 0.0 (at 1e-22 pgvector's distances are still right, so that one is searched)
    for w in (v * 1e20, v * 1e-30):
        for call in (lambda: r.search(w, 3), lambda: r.search(w, 3, parent=False, neighbors=False),
                     lambda: r.assemble(w, 3), lambda: r.search(w, 3, text="words", mode="hybrid")):
            with pytest.raises(ValueError, match="normalise it"):
                call()
    # a length pgvector still handles is searched as it is, with the same hits as the unit vector
    long = r.search(v * 1e12, 5)
    assert [h.section.section_id for h in long] == [h.section.section_id for h in r.search(v, 5)]
    # an exact duplicate of a stored vector has distance 0.0 and is fine
    first = r.search(v, 1)[0].section
    stored = r.conn.execute("SELECT embedding FROM sections WHERE doc_id = %s AND section_id = %s",
                            (first.doc_id, first.section_id)).fetchone()[0]
    dup = r.search(stored.to_numpy(), 1)[0]
    assert dup.section == first and dup.distance < 1e-6
    torch = pytest.importorskip("torch")
    t = torch.tensor(v, requires_grad=True)
    assert np.array_equal(r.query_vector(t), v)  # detached, not an autograd error


def test_async_search_refuses_a_degenerate_length_too(r, dsn):
    from onetrip import AsyncRetriever

    async def run() -> None:
        ar = await AsyncRetriever.create(dsn)
        try:
            with pytest.raises(ValueError, match="normalise it"):
                await ar.search(vec(5) * 1e20, 3)
            with pytest.raises(ValueError, match="normalise it"):
                await ar.assemble(vec(5) * 1e-30, 3)
            assert len(await ar.search(vec(5) * 1e12, 3)) == 3
        finally:
            await ar.close()

    asyncio.run(run())


def test_a_text_in_dense_mode_and_an_unknown_assemble_option_are_named(r, db, dsn, statement_log):
    """search(emb, text=..., mode="dense") had dropped the text silently (HTTP refuses the same request);
    assemble(q, foo=1) had raised "Expansion.__init__() got an unexpected keyword argument"."""
    with statement_log.watch(db) as w:
        with pytest.raises(ValueError, match="dense mode searches the embedding alone: text=... is for"):
            r.search(vec(), 3, mode="dense", text="words")
        with pytest.raises(ValueError, match="dense mode searches the embedding alone"):
            r.assemble(vec(), 3, mode="dense", text="words")
        with pytest.raises(ValueError, match="dense mode searches the embeddings alone: texts=... is for"):
            r.search_many([vec(), vec(1)], 3, mode="dense", texts=["a", "b"])
        with pytest.raises(TypeError, match=r"unexpected options \['foo'\] \(an assembled context takes"):
            r.assemble(vec(), 3, foo=1)
        # hybrid options, as text: the CLI and HTTP refused them in dense mode, the library ignored them
        opts = HybridOptions(candidates=7)
        for call in (lambda: r.search(vec(), 3, mode="dense", hybrid=opts),
                     lambda: r.assemble(vec(), 3, mode="dense", hybrid={"candidates": 7}),
                     lambda: r.search_many([vec(), vec(1)], 3, mode="dense", hybrid=opts),
                     lambda: r.search_many([vec()], 3, mode="dense", hybrid=opts)):
            with pytest.raises(ValueError, match="dense mode searches the embedding alone: hybrid=... is for"):
                call()
    assert w.statements == []
    # "auto" takes them: used when it runs hybrid (a text), unused when a bare embedding runs dense
    assert r.search(vec(), 3, hybrid=opts) == r.search(vec(), 3, mode="dense")

    from onetrip import AsyncRetriever

    async def run() -> None:
        ar = await AsyncRetriever.create(dsn, embedder=HashEmbedder(DIM))
        try:
            for call in (lambda: ar.search(vec(), 3, mode="dense", hybrid=opts),
                         lambda: ar.search_many([vec(), vec(1)], 3, mode="dense", hybrid=opts)):
                with pytest.raises(ValueError, match="hybrid=... is for"):
                    await call()
        finally:
            await ar.close()

    asyncio.run(run())
    assert r.search(vec(), 3, mode="hybrid", text="words") and r.search(vec(), 3, mode="dense")


def test_the_bundled_model_loads_once_however_many_threads_ask_first(monkeypatch):
    """functools.cached_property lost its lock in Python 3.12: concurrent first embeds each loaded the model."""
    import threading
    import time

    from onetrip.embedders import SentenceTransformerEmbedder

    e = SentenceTransformerEmbedder()
    loads = []

    def slow_load():
        loads.append(threading.get_ident())
        time.sleep(0.2)
        return object()

    monkeypatch.setattr(e, "_load", slow_load)
    got = []
    threads = [threading.Thread(target=lambda: got.append(e.model)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len({id(m) for m in got}) == 1


def test_a_weight_float8_cannot_sum_is_named(r, db, statement_log):
    """tf_weight=1e308 (or term_weight=1e303) had failed the statement with PostgreSQL's 'value out of range:
    overflow' (NumericValueOutOfRange; over HTTP a 422 naming no field, on the CLI exit 1 as a database error)."""
    text = "section body text"
    with statement_log.watch(db) as w:
        for name in ("tf_weight", "term_weight", "dense_weight", "lexical_weight"):
            with pytest.raises(ValueError, match=f"{name} must be at most 1e\\+09, got 1e\\+308"):
                r.search(text, 3, mode="lexical" if name in ("tf_weight", "term_weight") else "hybrid",
                         hybrid={name: 1e308})
    assert w.statements == []
    top = {n: 1e9 for n in ("tf_weight", "term_weight", "dense_weight", "lexical_weight")}
    assert r.search(text, 3, mode="lexical", hybrid=top) and r.search(text, 3, mode="hybrid", hybrid=top)


def test_a_backslash_u0000_in_a_metadata_filter_is_text_not_a_nul(r, db):
    """The NUL check looked for the six characters \\u0000 in the filter's JSON: a value holding a backslash
    before "u0000" (a Windows path, a regex) was refused as 'contains a NUL character', and could not be searched."""
    from dataclasses import replace as with_

    d = next(generate(3, dim=DIM, seed=9, sections_per_doc=(3, 3), doc_prefix="win"))
    path = "C:\\u0000\\logs"
    replace_document(db, Layout(dim=DIM), with_(d.record, metadata={"path": path}), d.sections, d.embeddings)
    hits = r.search(vec(4), 3, filters={"metadata": {"path": path}})
    assert hits and {h.section.doc_id for h in hits} == {d.record.doc_id}
    with pytest.raises(ValueError, match=r"filter metadata value 'a'\[1\] holds a NUL character"):
        r.search(vec(4), 3, filters={"metadata": {"a": ["ok", "x\x00"]}})


def test_text_that_is_not_unicode_is_named_before_the_server_sees_it():
    """A lone surrogate (a JSON "\\ud800" escape, a non-UTF-8 argv) in a metadata filter had reached jsonb and come
    back as 'invalid input syntax for type json', naming no filter; in --collection or --acl every file of an
    ingest had failed on its own with a UnicodeEncodeError."""
    from onetrip import Filters
    from onetrip.store import _json_object, check_access_values

    with pytest.raises(ValueError, match="filter metadata is not valid Unicode"):
        Filters(metadata={"a": "\ud800"})
    assert Filters(metadata={"path": "C:\\udir"}).metadata == {"path": "C:\\udir"}  # a backslash and 'udir' is fine
    with pytest.raises(ValueError, match="^metadata is not valid Unicode"):
        _json_object({"title": "x\udcff"})
    with pytest.raises(ValueError, match="^collection is not valid Unicode"):
        check_access_values("t\udcffnant", None)
    with pytest.raises(ValueError, match="^acl principal is not valid Unicode"):
        check_access_values("default", ["hr", "\udcff"])


def test_a_refused_query_vector_says_when_it_aborted_the_callers_transaction(r, db, dsn):
    """A NaN query embedding is refused by the server, and the ValueError read like a check made before sending:
    on a connection without autocommit the caller's transaction was aborted with it, and a commit afterwards
    silently rolled the caller's own writes back (found by review). The error now says so; on an autocommit
    connection there is no transaction to speak of."""
    from onetrip import AsyncRetriever, connect
    from onetrip.async_retrieve import connect_async

    bad = vec()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity") as plain:
        r.search(bad, k=3)
    assert "aborted" not in str(plain.value)
    with connect(dsn, autocommit=False) as conn:
        own = Retriever(conn, embedder=HashEmbedder(DIM))
        conn.execute("SELECT 1")  # the caller's transaction, open
        for call in (lambda: own.search(bad, k=3), lambda: own.assemble(bad, k=3)):
            with pytest.raises(ValueError, match=r"NaN or infinity .*transaction open on this connection is "
                                                 r"aborted, roll it back"):
                call()
            conn.rollback()

    async def main() -> None:
        conn = await connect_async(dsn, autocommit=False)
        try:
            own = await AsyncRetriever.create(conn, embedder=HashEmbedder(DIM))
            await conn.execute("SELECT 1")
            with pytest.raises(ValueError, match="NaN or infinity .*aborted, roll it back"):
                await own.search(bad, k=3)
        finally:
            await conn.close()

    asyncio.run(main())


def test_search_with_assemble_is_assemble_and_its_flags_are_checked(r, db, dsn, statement_log):
    """A review of the API: search(q, assemble=True, max_tokens=4000) had used search's k=5, not assemble's one
    hit per 250 tokens (16), so it sent another statement than assemble() and explain(assemble=True); any truthy
    assemble ("no") meant True; explain(q, foo=1) named plan_search, an internal function; np.int64 k was refused."""
    from onetrip import AsyncRetriever

    q = vec(3)
    for budget in (2000, 4000):
        got = r.search(q, assemble=True, max_tokens=budget)
        assert got == r.assemble(q, max_tokens=budget) and got.options["k"] == budget // 250
    assert r.search(q, 3, assemble=True) == r.assemble(q, 3)

    async def run() -> None:
        ar = await AsyncRetriever.create(dsn, embedder=HashEmbedder(DIM))
        try:
            assert await ar.search(q, assemble=True, max_tokens=4000) == r.assemble(q, max_tokens=4000)
            assert await ar.search(q) == r.search(q, 5)
        finally:
            await ar.close()

    asyncio.run(run())
    assert r.search(q, np.int64(3)) == r.search(q, 3) and r.assemble(q, np.int32(3)) == r.assemble(q, 3)
    with statement_log.watch(db) as w:
        for bad in ("no", 1, None):
            with pytest.raises(TypeError, match="assemble must be True or False"):
                r.search(q, 3, assemble=bad)
            with pytest.raises(TypeError, match="assemble must be True or False"):
                r.explain(q, 3, assemble=bad, kind="plan")
        with pytest.raises(TypeError, match=r"unexpected options \['foo'\] \(search takes .*assemble=True"):
            r.explain(q, 3, foo=1, kind="plan")
        with pytest.raises(TypeError, match=r"unexpected options \['max_tokens'\]"):
            r.search(q, 3, max_tokens=100)
        with pytest.raises(TypeError, match="k must be an integer, got float"):
            r.search(q, 3.0)
    assert w.statements == []
