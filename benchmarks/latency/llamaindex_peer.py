"""Variant E: a real peer, LlamaIndex on the same PostgreSQL, used the way its docs show.

The same synthetic sections are loaded as LlamaIndex ``TextNode``s, with the
same embeddings and PREVIOUS / NEXT / PARENT relationships, into LlamaIndex's
own tables:

* ``PGVectorStore`` (llama-index-vector-stores-postgres): table
  ``data_bench<n>_s<seed>_li``, HNSW index (m=16, ef_construction=64,
  vector_cosine_ops: the same parameters as onetrip's) under the name
  PGVectorStore itself gives it, built after loading;
* ``PostgresDocumentStore`` (llama-index-storage-docstore-postgres): table
  ``data_bench<n>_s<seed>_lidoc``.

A query is ``VectorStoreIndex.from_vector_store(...).as_retriever(similarity_top_k=k)``
given the query embedding, then ``PrevNextNodePostprocessor(mode="both", num_nodes=1)``
(one docstore lookup per neighbor) and the hits' parents through the docstore
(``docstore.get_nodes`` of the distinct parent ids; one lookup per parent).
PGVectorStore is configured with ``hnsw_kwargs`` (its documented way to use an
HNSW index, ef_search=40 = pgvector's default, which onetrip also uses), so
each vector query also sends its ``SET hnsw.ef_search`` / ``SET LOCAL
enable_bitmapscan`` statements, in a transaction, exactly as the library does.

Both stores talk to PostgreSQL through SQLAlchemy + psycopg2 (their default
driver); their async engines are created (the classes require them) but never
used. Every connection goes to the DSN given, i.e. through the delay proxy
when timing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from onetrip.synthetic import SyntheticDocument

HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
HNSW_EF_SEARCH = 40  # pgvector's default, the value onetrip's Retriever runs with
LOAD_BATCH = 2000

REQUIREMENTS = (
    "llama-index-core",
    "llama-index-vector-stores-postgres",
    "llama-index-storage-docstore-postgres",
)


def available() -> str | None:
    """None when the LlamaIndex packages import, else why not."""
    try:
        import asyncpg  # noqa: F401
        import psycopg2  # noqa: F401
        import sqlalchemy  # noqa: F401
        from llama_index.core.postprocessor import PrevNextNodePostprocessor  # noqa: F401
        from llama_index.storage.docstore.postgres import PostgresDocumentStore  # noqa: F401
        from llama_index.vector_stores.postgres import PGVectorStore  # noqa: F401
    except Exception as e:  # ImportError, or a broken dependency
        return f"{type(e).__name__}: {e}"
    return None


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in (*REQUIREMENTS, "llama-index-storage-kvstore-postgres", "sqlalchemy", "psycopg2-binary", "asyncpg"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "not installed"
    return out


@dataclass(frozen=True)
class PeerTables:
    vector_index: str  # PGVectorStore's table_name; the table is data_<this>
    docstore_index: str  # PostgresKVStore's table_name; the table is data_<this>

    @property
    def vector_table(self) -> str:
        return f"data_{self.vector_index}"

    @property
    def docstore_table(self) -> str:
        return f"data_{self.docstore_index}"

    @property
    def hnsw_index(self) -> str:
        return f"{self.vector_table}_embedding_idx"  # the name PGVectorStore._create_hnsw_index uses


def peer_tables(corpus: int | str, seed: int) -> PeerTables:
    from .corpus import corpus_tag

    tag = corpus_tag(corpus)
    return PeerTables(f"bench{tag}_s{int(seed)}_li", f"bench{tag}_s{int(seed)}_lidoc")


def node_id(doc_id: str, section_id: str) -> str:
    return f"{doc_id}:{section_id}"


def make_nodes(doc: SyntheticDocument, *, with_embeddings: bool) -> list[Any]:
    """One TextNode per section, with PREVIOUS / NEXT / PARENT relationships."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    doc_id = doc.record.doc_id
    secs = doc.sections
    nodes = []
    for i, s in enumerate(secs):
        rel: dict[Any, Any] = {}
        if i > 0:
            rel[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=node_id(doc_id, secs[i - 1].section_id))
        if i + 1 < len(secs):
            rel[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=node_id(doc_id, secs[i + 1].section_id))
        if s.parent_section_id is not None:
            rel[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=node_id(doc_id, s.parent_section_id))
        nodes.append(TextNode(
            id_=node_id(doc_id, s.section_id),
            text=s.content,
            metadata={
                "onetrip_doc_id": doc_id, "section_id": s.section_id, "sequence_index": s.sequence_index,
                "heading_level": s.level, "heading": s.heading, "heading_path": list(s.heading_path),
            },
            relationships=rel,
            embedding=doc.embeddings[i].tolist() if with_embeddings else None,
        ))
    return nodes


def _engines(dsn: str, application_name: str, log_statements: bool) -> tuple[Any, Any]:
    """SQLAlchemy engines (psycopg2 sync, asyncpg async) for a libpq DSN.

    The sync engine connects with psycopg2 from the DSN itself (a creator), so a
    Unix-socket DSN works as well as the proxy's TCP one. The async engine is
    required by the LlamaIndex classes but this benchmark never uses it.
    """
    import psycopg2
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy import URL, create_engine
    from sqlalchemy.ext.asyncio import create_async_engine

    extra: dict[str, str] = {"application_name": application_name}
    if log_statements:
        extra["options"] = "-c log_statement=all"

    def creator() -> Any:
        return psycopg2.connect(dsn, **extra)

    engine = create_engine("postgresql+psycopg2://", creator=creator)
    p = conninfo_to_dict(dsn)
    host = str(p.get("host") or "localhost")
    query = {"host": host} if host.startswith("/") else {}
    url = URL.create(
        "postgresql+asyncpg", username=p.get("user"), password=p.get("password") or None,
        host=None if query else host, port=int(p["port"]) if p.get("port") and not query else None,
        database=p.get("dbname"), query=query,
    )
    return engine, create_async_engine(url)


def _dispose(*engines: Any) -> None:
    for e in engines:
        try:
            # an AsyncEngine's dispose() is a coroutine; its sync_engine's is not (and it never connected)
            getattr(e, "sync_engine", e).dispose()
        except Exception:
            pass


def _count(conn: Any, sql: str, *args: Any) -> int:
    return int(conn.execute(sql, args or None).fetchone()[0])


def loaded(conn: Any, tables: PeerTables, n_sections: int) -> bool:
    """True when LlamaIndex's tables hold exactly this corpus (checked with a psycopg connection)."""
    for t in (tables.vector_table, tables.docstore_table):
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (t,)).fetchone()[0]:
            return False
    valid = conn.execute(
        "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)", (tables.hnsw_index,)
    ).fetchone()
    if not (valid and valid[0]):
        return False
    n_vec = _count(conn, f'SELECT count(*) FROM "{tables.vector_table}"')
    n_doc = _count(conn, f'SELECT count(*) FROM "{tables.docstore_table}" WHERE namespace = %s', "docstore/data")
    return n_vec == n_sections and n_doc == n_sections


def ensure_loaded(
    dsn: str,
    conn: Any,
    docs: list[SyntheticDocument],
    corpus: int | str,
    seed: int,
    dim: int,
    *,
    maintenance_work_mem: str,
    reload: bool = False,
    log=print,
) -> dict[str, Any]:
    """Load the corpus into LlamaIndex's tables with LlamaIndex's own write path, unless it is there.

    ``conn`` is a direct psycopg autocommit connection used for checks, DDL and
    the index build; the rows go in through ``PGVectorStore.add`` and
    ``PostgresDocumentStore.add_documents``.
    """
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore
    from llama_index.vector_stores.postgres import PGVectorStore

    from .corpus import read_load_note, write_load_note

    tables = peer_tables(corpus, seed)
    n_sections = sum(len(d.sections) for d in docs)
    info: dict[str, Any] = {"vector_table": tables.vector_table, "docstore_table": tables.docstore_table}
    if not reload and loaded(conn, tables, n_sections):
        log(f"  LlamaIndex tables {tables.vector_table}, {tables.docstore_table}: reusing")
        previous = read_load_note(conn, tables.vector_table) or {}
        info.update({k: previous[k] for k in ("load_s", "index_build_s") if k in previous})
        info["reused"] = True
        return info
    log(f"  LlamaIndex tables {tables.vector_table}, {tables.docstore_table}: loading {n_sections} nodes")
    conn.execute(f'DROP TABLE IF EXISTS "{tables.vector_table}", "{tables.docstore_table}" CASCADE')
    engine, aengine = _engines(dsn, "onetrip-bench-E-load", False)
    dengine, daengine = _engines(dsn, "onetrip-bench-E-load", False)
    try:
        store = PGVectorStore(engine=engine, async_engine=aengine, table_name=tables.vector_index, embed_dim=dim)
        docstore = PostgresDocumentStore(PostgresKVStore(table_name=tables.docstore_index, engine=dengine,
                                                         async_engine=daengine))
        t0 = time.perf_counter()
        batch: list[Any] = []
        for d in docs:
            batch.extend(make_nodes(d, with_embeddings=True))
            if len(batch) >= LOAD_BATCH:
                store.add(batch)
                # the docstore keeps nodes without their embedding, as an ingestion pipeline stores them
                docstore.add_documents([n.model_copy(update={"embedding": None}) for n in batch], batch_size=500)
                batch = []
        if batch:
            store.add(batch)
            docstore.add_documents([n.model_copy(update={"embedding": None}) for n in batch], batch_size=500)
        info["load_s"] = time.perf_counter() - t0
    finally:
        _dispose(engine, dengine)
    log(f"  LlamaIndex load {info['load_s']:.1f} s; building HNSW")
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute(f"SET LOCAL maintenance_work_mem = '{maintenance_work_mem}'")
        conn.execute(
            f'CREATE INDEX "{tables.hnsw_index}" ON public."{tables.vector_table}" USING hnsw (embedding vector_cosine_ops) '
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
        )
    info["index_build_s"] = time.perf_counter() - t0
    conn.execute(f'VACUUM (ANALYZE) "{tables.vector_table}"')
    conn.execute(f'VACUUM (ANALYZE) "{tables.docstore_table}"')
    info["reused"] = False
    info["maintenance_work_mem"] = maintenance_work_mem
    write_load_note(conn, tables.vector_table, info)
    log(f"  LlamaIndex HNSW build {info['index_build_s']:.1f} s")
    return info


@dataclass
class PeerAnswer:
    hit_ids: list[str]
    related: dict[str, tuple[str | None, str | None, str | None]]  # hit -> (parent, prev, next)


class LlamaIndexPeer:
    """Variant E. ``run`` is what gets timed; ``answer`` maps its result to ids afterwards."""

    name = "E"
    label = "E LlamaIndex PGVectorStore + docstore"

    def __init__(
        self, dsn: str, corpus: int | str, seed: int, dim: int, k: int, *,
        application_name: str = "onetrip-bench-E", log_statements: bool = False,
    ) -> None:
        from llama_index.core import VectorStoreIndex
        from llama_index.core.embeddings import MockEmbedding
        from llama_index.core.postprocessor import PrevNextNodePostprocessor
        from llama_index.storage.docstore.postgres import PostgresDocumentStore
        from llama_index.storage.kvstore.postgres import PostgresKVStore
        from llama_index.vector_stores.postgres import PGVectorStore

        self.k = k
        self.application_name = application_name
        tables = peer_tables(corpus, seed)
        self._engines = [*_engines(dsn, application_name, log_statements), *_engines(dsn, application_name, log_statements)]
        engine, aengine, dengine, daengine = self._engines
        self.vector_store = PGVectorStore(
            engine=engine, async_engine=aengine, table_name=tables.vector_index, embed_dim=dim,
            hnsw_kwargs={
                "hnsw_m": HNSW_M, "hnsw_ef_construction": HNSW_EF_CONSTRUCTION,
                "hnsw_ef_search": HNSW_EF_SEARCH, "hnsw_dist_method": "vector_cosine_ops",
            },
        )
        self.docstore = PostgresDocumentStore(
            PostgresKVStore(table_name=tables.docstore_index, engine=dengine, async_engine=daengine)
        )
        # The embed model is never called: every query comes with its embedding.
        index = VectorStoreIndex.from_vector_store(self.vector_store, embed_model=MockEmbedding(embed_dim=dim))
        self.retriever = index.as_retriever(similarity_top_k=k)
        self.prev_next = PrevNextNodePostprocessor(docstore=self.docstore, num_nodes=1, mode="both")

    def run(self, vec: np.ndarray) -> tuple[list[Any], list[Any], list[Any]]:
        from llama_index.core.schema import QueryBundle

        hits = self.retriever.retrieve(QueryBundle(query_str="", embedding=vec.tolist()))
        with_neighbors = self.prev_next.postprocess_nodes(hits)
        parent_ids = list(dict.fromkeys(h.node.parent_node.node_id for h in hits if h.node.parent_node is not None))
        parents = self.docstore.get_nodes(parent_ids) if parent_ids else []
        return hits, with_neighbors, parents

    @staticmethod
    def answer(result: tuple[list[Any], list[Any], list[Any]]) -> PeerAnswer:
        hits, with_neighbors, parents = result
        got = {n.node.node_id for n in with_neighbors} | {p.node_id for p in parents}
        related = {}
        for h in hits:
            node = h.node
            p = node.parent_node.node_id if node.parent_node is not None else None
            pv = node.prev_node.node_id if node.prev_node is not None else None
            nx = node.next_node.node_id if node.next_node is not None else None
            related[node.node_id] = tuple(x if x in got else None for x in (p, pv, nx))
        return PeerAnswer([h.node.node_id for h in hits], related)  # type: ignore[arg-type]

    def close(self) -> None:
        _dispose(*self._engines)
