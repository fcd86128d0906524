"""Several queries in ONE statement: each query's top-K hits with their parents and neighbors.

Why: an agent that splits a question into sub-queries (multi-query retrieval,
query decomposition) pays a round trip per sub-query with `search`. Here every
query gets its own HNSW scan inside one statement (a lateral subquery, the
query vector a parameter of the scan), and the context rows are read once for
all of them: a section that is the parent or neighbor of hits of several
queries comes back once. Dense search only: the lexical side of hybrid search
is one query's word list, and is not batched here.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .embedders import as_vector
from .errors import DimensionMismatchError
from .retrieve import (Hit, Plan, _record_mapper, as_filters, check_flag, check_k, check_query_text, k_bucket,
                       retrieval_sql)
from .templates import Layout

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


def plan_search_many(layout: Layout, vectors: Sequence[np.ndarray], k: int = 5, *, parent: bool = True,
                     neighbors: bool = True, filters: Any = None) -> Plan:
    """The one statement for several query embeddings (already validated by `query_vectors`)."""
    k = check_k(k)
    parent, neighbors = check_flag(parent, "parent"), check_flag(neighbors, "neighbors")
    flt = as_filters(filters)
    statement = retrieval_sql(layout, parent=parent, neighbors=neighbors, filters=flt.shape,
                              mode="dense", bucket=k_bucket(k), many=True)
    params = {"k": k, "query_embeddings": list(vectors), **flt.params()}
    return Plan("search_many", statement, params, options={"parent": parent, "neighbors": neighbors,
                                                           "queries": len(vectors)})


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
    ord_i, dist_i = ix["query_ord"], ix["distance"]

    def link(rows: list[tuple], queries: int) -> list[list[Hit]]:
        by_id: dict[tuple[str, str], Any] = {}
        by_seq: dict[tuple[str, int], Any] = {}
        ranked: list[list[tuple]] = [[] for _ in range(queries)]
        for row in rows:
            rec = to_record(row)
            by_id[rec.doc_id, rec.section_id] = rec
            by_seq[rec.doc_id, rec.sequence_index] = rec
            if row[ord_i] is not None:
                ranked[row[ord_i] - 1].append((row[dist_i], rec.doc_id, rec.sequence_index, rec))
        out = []
        for group in ranked:
            group.sort(key=lambda t: t[:3])  # the statement's order: distance, doc_id, sequence_index
            out.append([Hit(rank, float(d), rec,
                            by_id.get((doc, rec.parent_section_id)) if parent else None,
                            by_seq.get((doc, seq - 1)) if neighbors else None,
                            by_seq.get((doc, seq + 1)) if neighbors else None)
                        for rank, (d, doc, seq, rec) in enumerate(group, 1)])
        return out

    return link
