"""Several queries in ONE statement: each query's top-K hits with their parents and neighbors.

Why: an agent that splits a question into sub-queries (multi-query retrieval,
query decomposition) pays a round trip per sub-query with `search`. Here every
query gets its own HNSW scan inside one statement (a lateral subquery, the
query vector a parameter of the scan), and the context rows are read once for
all of them: a section that is the parent or neighbor of hits of several
queries comes back once. Every mode of `search` is batched: dense (the HNSW
scan per query), lexical (each query's words, one GIN scan per query and word)
and hybrid (both lists per query, fused per query); "auto" is hybrid when every
query is a text, as `search` is for one text.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .embedders import as_vector, nan_distance_error
from .errors import DimensionMismatchError
from .retrieve import (MODES, SEARCH_K, Hit, HybridOptions, Plan, _record_mapper, as_filters, as_hybrid, check_flag,
                       check_hybrid_mode, check_k, check_query_text, k_bucket, resolve_mode, retrieval_sql)
from .layout import Layout

#: At most this many queries per statement: each is one HNSW scan, and the result holds k hits of each.
MAX_QUERIES = 100


def check_queries(queries: object) -> list[Any]:
    """The queries as a list (a 2-d array: one query per row), or a ValueError/TypeError naming what is wrong."""
    if isinstance(queries, np.ndarray) and queries.ndim == 2:
        queries = list(queries)
    if isinstance(queries, (str, bytes, np.ndarray)) or not isinstance(queries, Sequence):
        raise TypeError("queries must be a list of query texts or embeddings, or a 2-d array with one "
                        "embedding per row (for one query, use search)")
    if not 1 <= len(queries) <= MAX_QUERIES:
        raise ValueError(f"give from 1 to {MAX_QUERIES} queries, got {len(queries)}")
    for i, q in enumerate(queries):
        if isinstance(q, str):
            check_query_text(q, f"query {i}: the query text")
        elif q is None:
            raise TypeError(f"query {i}: a query must be a text or an embedding, got None")
    return list(queries)


def query_vectors(vectors: Sequence[Any], dim: int) -> list[np.ndarray]:
    """Each query embedding validated, naming the query (from 0) that is wrong."""
    out = []
    for i, v in enumerate(vectors):
        try:
            out.append(as_vector(v, dim))
        except DimensionMismatchError as e:
            raise DimensionMismatchError(f"query {i}: {e}") from None
        except ValueError as e:
            raise ValueError(f"query {i}: {e}") from None
    return out


def resolve_many(queries: object, mode: str = "auto", texts: Sequence[str] | None = None,
                 hybrid: HybridOptions | dict[str, Any] | None = None) -> tuple[list[Any], str, list[str] | None]:
    """The checked queries, the mode they run in and each query's text for the lexical side (None: dense).

    Each query's text is ``texts[i]`` when given (embeddings with their texts,
    as `search`'s ``text=``), else the query itself when every query is a text.
    "auto" is hybrid when the texts are at hand, else dense. Lexical and hybrid
    without them are refused, naming the first query that is an embedding.
    """
    queries = check_queries(queries)
    check_hybrid_mode(mode, hybrid)
    all_text = all(isinstance(q, str) for q in queries)
    mode = resolve_mode(mode, texts is not None or all_text)  # checks mode too
    if mode == "dense":
        if texts is not None:  # as search(..., text=..., mode="dense"): refused, not silently unused
            raise ValueError("dense mode searches the embeddings alone: texts=... is for mode='hybrid' or "
                             "'lexical' (drop it, or choose one of those)")
        return queries, mode, None
    if texts is not None:
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence) or len(texts) != len(queries):
            raise ValueError(f"texts must be a list of {len(queries)} query texts, one per query")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}]: the query text must be a string, got {type(t).__name__}")
            check_query_text(t, f"texts[{i}]")
        return queries, mode, list(texts)
    if not all_text:
        i = next(i for i, q in enumerate(queries) if not isinstance(q, str))
        raise ValueError(f"query {i}: {mode} mode needs the query text, got an embedding "
                         "(give texts=[...] with the embeddings, or mode='dense')")
    return queries, mode, queries


def plan_many(layout: Layout, queries: list[Any], vectors: list[np.ndarray] | None, k: int | None, *, mode: str,
              texts: list[str] | None, hybrid: HybridOptions | dict[str, Any] | None,
              **options: Any) -> tuple[Plan | None, Any, dict[str, Any]]:
    """What `search_many` / `explain_many` send for `resolve_many`'s result: (plan, None, {}) for a batch, or
    (None, query, search options) for a batch of one, which goes through `search`'s own statement, prepared
    with one generic plan (~1 ms less than the batch's statement for one query).

    ``options``: parent, neighbors, filters. k=None is `search`'s default for one query or several (a batch had
    refused None, which one query took: found by review).
    """
    k = SEARCH_K if k is None else k
    if len(queries) > 1:
        return plan_search_many(layout, vectors, k, mode=mode, texts=texts, hybrid=hybrid, **options), None, {}
    if mode == "dense":
        assert vectors is not None
        return None, vectors[0], options
    assert texts is not None
    if mode == "lexical":
        return None, texts[0], {**options, "mode": "lexical", "hybrid": hybrid}
    assert vectors is not None
    return None, vectors[0], {**options, "mode": "hybrid", "text": texts[0], "hybrid": hybrid}


def plan_search_many(layout: Layout, vectors: Sequence[np.ndarray] | None, k: int = SEARCH_K, *, parent: bool = True,
                     neighbors: bool = True, filters: Any = None, mode: str = "dense",
                     texts: Sequence[str] | None = None, hybrid: HybridOptions | dict[str, Any] | None = None) -> Plan:
    """The one statement for several queries: embeddings (already validated by `query_vectors`; dense, hybrid)
    and/or texts (lexical, hybrid), one per query in the same order."""
    from .store import technical_terms

    k = check_k(k)
    parent, neighbors = check_flag(parent, "parent"), check_flag(neighbors, "neighbors")
    flt = as_filters(filters)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    params: dict[str, Any] = {"k": k}
    n = 0
    if mode != "lexical":
        if vectors is None:
            raise ValueError(f"{mode} mode needs the query embeddings")
        params["query_embeddings"] = list(vectors)
        n = len(vectors)
    bucket = k_bucket(k) if mode == "dense" else None
    if mode != "dense":
        if texts is None or (mode == "hybrid" and len(texts) != n):
            raise ValueError(f"{mode} mode needs one query text per query")
        texts = [check_query_text(t, f"query {i}: the query text") for i, t in enumerate(texts)]
        opts = as_hybrid(hybrid).params(k, mode)
        # one string per query (a term has no spaces): the arrays keep one type whatever the terms,
        # so psycopg prepares one statement (an empty list would be sent untyped)
        params.update(query_texts=texts, query_terms=[" ".join(technical_terms(t)) for t in texts], **opts)
        if mode == "hybrid":
            bucket = k_bucket(opts["candidates"])
        n = len(texts)
    statement = retrieval_sql(layout, parent=parent, neighbors=neighbors, filters=flt.shape,
                              mode=mode, bucket=bucket, many=True)
    return Plan("search_many", statement, {**params, **flt.params()},
                options={"parent": parent, "neighbors": neighbors, "queries": n, "mode": mode})


def hits_by_query(names: tuple[str, ...], rows: list[tuple], queries: int, *, parent: bool = True,
                  neighbors: bool = True) -> list[list[Hit]]:
    """Link the statement's rows into one list of Hits per query, in the order the queries were given.

    As `onetrip.retrieve.hits_from_rows`, with the hits of query n marked by
    query_ord = n (from 1). Every section comes back once except a section that
    is a hit of several queries (one row per query); parents and neighbors are
    looked up among all rows, so a context section shared by hits of several
    queries is one SectionRecord object.
    """
    return _linker(names, parent, neighbors)(rows, queries)


@lru_cache(maxsize=32)
def _linker(names: tuple[str, ...], parent: bool, neighbors: bool) -> Any:
    to_record = _record_mapper(names)
    ix = {n: i for i, n in enumerate(names)}
    ord_i, dist_i, score_i = ix["query_ord"], ix["distance"], ix.get("score")

    def link(rows: list[tuple], queries: int) -> list[list[Hit]]:
        by_id: dict[tuple[str, str], Any] = {}
        by_seq: dict[tuple[str, int], Any] = {}
        ranked: list[list[tuple]] = [[] for _ in range(queries)]
        for row in rows:
            rec = to_record(row)
            by_id[rec.doc_id, rec.section_id] = rec
            by_seq[rec.doc_id, rec.sequence_index] = rec
            if row[ord_i] is not None:
                d = row[dist_i]
                if d is not None and d != d:  # a halfvec table: a tiny embedding passes its checks, then is all 0
                    raise ValueError(f"query {row[ord_i] - 1}: {nan_distance_error(rec.doc_id, rec.section_id)}")
                sc = None if score_i is None else row[score_i]
                # the statement's order: score (lexical, hybrid), distance, doc_id, sequence_index
                ranked[row[ord_i] - 1].append((0.0 if sc is None else -sc, 0.0 if d is None else d,
                                               rec.doc_id, rec.sequence_index, d, sc, rec))
        out = []
        for group in ranked:
            group.sort(key=lambda t: t[:4])
            out.append([Hit(rank, None if d is None else float(d), rec,
                            by_id.get((doc, rec.parent_section_id)) if parent else None,
                            by_seq.get((doc, seq - 1)) if neighbors else None,
                            by_seq.get((doc, seq + 1)) if neighbors else None,
                            None if sc is None else float(sc))
                        for rank, (_, _, doc, seq, d, sc, rec) in enumerate(group, 1)])
        return out

    return link
