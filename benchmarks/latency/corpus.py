"""Benchmark corpora: synthetic, clustered, loaded once per (size, seed) and reused.

Each corpus lives in its own onetrip table layout (``Layout(prefix="bench<n>_s<seed>_")``)
so sizes never mix and the library's own schema, indexes and retrieval SQL apply
unchanged. Loading is one binary COPY per table inside one transaction, and the
HNSW index is built only AFTER the rows are in (far faster than maintaining the
graph row by row), with the library's own index definition (read back from the
catalog after `init_schema`, so it cannot drift from `schema.sql.j2`).

A corpus is reused, not reloaded, when its tables hold exactly the expected
documents and sections and the HNSW index is valid. The corpus itself is
deterministic in (size, seed), so regenerating it (cheap compared to loading)
gives the same query vectors a previous run used.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from onetrip.synthetic import SyntheticDocument, bulk_load, corpus_query_vectors, generate, hnsw_indexdef
from onetrip.layout import Layout
from onetrip.templates import render

DEFAULT_DIM = 384
DEFAULT_MAINTENANCE_WORK_MEM = "1GB"


def schema_fingerprint(layout: Layout) -> str:
    """Identifies the library's schema: a corpus loaded under another schema is reloaded, not reused."""
    import hashlib

    return hashlib.sha256(render("schema", layout=layout).encode()).hexdigest()[:16]


def bench_layout(n_sections: int | str, seed: int, dim: int = DEFAULT_DIM, **options: Any) -> Layout:
    """The table layout holding the corpus of this size and seed.

    The plain layout (no ``options``) is shared by the latency and the scale
    benchmarks; halfvec or partitioned layouts (``vector_type=``, ``partitions=``)
    get a prefix of their own.
    """
    short = {"vector_type": "", "partitions": "p", "hnsw_m": "m", "hnsw_ef_construction": "efc"}
    tag = "".join(f"_{short[k]}{v}" for k, v in sorted(options.items()) if v != Layout.__dataclass_fields__[k].default)
    return Layout(dim=dim, prefix=f"bench{corpus_tag(n_sections)}_s{int(seed)}{tag}_", **options)


def corpus_tag(corpus: int | str) -> str:
    """A synthetic corpus is named by its size; the real one is "manual"."""
    if corpus == MANUAL:
        return MANUAL
    return str(int(corpus))


#: The real corpus: the PostgreSQL 15 manual as ``python -m benchmarks.ingest_manual`` ingested it.
MANUAL = "manual"
MANUAL_PREFIX = "pg15_"
#: the HTML pages of Debian's postgresql-doc-15 (its html/*.html), one document each
MANUAL_PAGES = 1167


def manual_missing(conn: psycopg.Connection, prefix: str = MANUAL_PREFIX) -> str | None:
    """Why the ingested manual cannot be used (its sections table is missing), or None.

    The benchmark CLIs ask before any corpus runs; `manual_corpus` raises it.
    """
    table = Layout(prefix=prefix).tables["sections"]
    if not _regclass(conn, table):
        return f"no table {table}: ingest the manual first (python -m benchmarks.ingest_manual)"
    return None


def manual_corpus(conn: psycopg.Connection, prefix: str = MANUAL_PREFIX) -> list[SyntheticDocument]:
    """The ingested manual as a benchmark corpus: its real sections and their stored MiniLM embeddings.

    Every variant (LlamaIndex's tables included) is then loaded from the same
    rows, exactly as for a synthetic corpus, so the manual's own tables are only read.
    """
    from pgvector.psycopg import register_vector

    from onetrip.sections import Section
    from onetrip.store import DocumentRecord

    layout = Layout(prefix=prefix)
    t = layout.tables
    why = manual_missing(conn, prefix)
    if why:
        raise RuntimeError(why)
    register_vector(conn)
    docs: dict[str, DocumentRecord] = {
        r[0]: DocumentRecord(r[0], r[1], r[2], r[3], r[4] or {})
        for r in conn.execute(sql.SQL("SELECT doc_id, source_uri, title, content_hash, metadata FROM {} ORDER BY doc_id")
                              .format(sql.SQL(t["documents"])))
    }
    if len(docs) < MANUAL_PAGES:  # an interrupted ingest had run as "the PostgreSQL 15 manual" without a word; a
        # warning, not a refusal: a part of the manual is a corpus too (the tests ingest one page)
        print(f"warning: {t['documents']} holds {len(docs)} of the manual's {MANUAL_PAGES} pages (an interrupted "
              "ingest? python -m benchmarks.ingest_manual stores the rest); the run goes on with what is stored",
              file=sys.stderr)
    rows = conn.execute(sql.SQL(
        "SELECT doc_id, section_id, parent_section_id, sequence_index, heading_level, heading, heading_path, content, "
        "token_count, anchor, embedding FROM {} ORDER BY doc_id, sequence_index").format(sql.SQL(t["sections"]))).fetchall()
    out: list[SyntheticDocument] = []
    for doc_id, group in itertools.groupby(rows, key=lambda r: r[0]):
        g = list(group)
        sections = [Section(r[1], r[2], r[3], r[4], r[5] or "", tuple(r[6] or ()), r[7], r[8], r[9]) for r in g]
        emb = np.stack([np.asarray(r[10].to_numpy(), dtype=np.float32) for r in g])
        out.append(SyntheticDocument(docs[doc_id], sections, emb))
    if not out:
        raise RuntimeError(f"{t['sections']} is empty: ingest the manual first (python -m benchmarks.ingest_manual)")
    return out


def manual_queries(docs: list[SyntheticDocument], n: int, seed: int, questions: list[str] | None = None) -> np.ndarray:
    """Real text queries for the manual, embedded with onetrip's default model.

    The tuning questions first (when given), then "how do I use <heading>"
    questions built from the headings of randomly chosen sections.
    """
    from onetrip.embedders import SentenceTransformerEmbedder

    rng = np.random.default_rng(seed + 1)
    sections = [s for d in docs for s in d.sections if s.heading]
    texts = list(questions or [])[:n]
    while len(texts) < n:
        s = sections[int(rng.integers(len(sections)))]
        texts.append(f"How do I use {s.heading} ({' > '.join(s.heading_path[:-1][-2:])})?")
    return np.asarray(SentenceTransformerEmbedder().embed_documents(texts), dtype=np.float32)


def generate_corpus(n_sections: int, seed: int, dim: int = DEFAULT_DIM) -> list[SyntheticDocument]:
    """topic -> document -> section corpus with exactly ``n_sections`` sections."""
    docs = list(generate(n_sections, dim=dim, seed=seed))
    made = sum(len(d.sections) for d in docs)
    if made != n_sections:  # generate() stops exactly at n_sections; guard the assumption
        raise RuntimeError(f"synthetic corpus has {made} sections, expected {n_sections}")
    return docs


def query_set(docs: list[SyntheticDocument], n: int, seed: int) -> np.ndarray:
    """``n`` query vectors near real sections of the corpus (onetrip.synthetic.corpus_query_vectors)."""
    return corpus_query_vectors(docs, n, seed=seed + 1)


@dataclass
class LoadInfo:
    layout_prefix: str
    sections: int
    documents: int
    reused: bool
    copy_s: float | None = None
    index_build_s: float | None = None
    analyze_s: float | None = None
    maintenance_work_mem: str | None = None
    hnsw_indexdef: str | None = None
    table_bytes: int | None = None
    hnsw_index_bytes: int | None = None
    max_parallel_maintenance_workers: int | None = None  # the build's (None: a note from before it was kept)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _regclass(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def _hnsw_index_valid(conn: psycopg.Connection, layout: Layout) -> bool:
    row = conn.execute(
        """SELECT i.indisvalid
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = to_regclass(%s) AND c.relname = %s""",
        (layout.tables["sections"], layout.prefix + "sections_embedding_hnsw"),
    ).fetchone()
    return bool(row and row[0])


def corpus_is_loaded(conn: psycopg.Connection, layout: Layout, n_sections: int, n_documents: int) -> bool:
    """True when this layout already holds exactly this corpus, indexed."""
    t = layout.tables
    if not (_regclass(conn, t["sections"]) and _regclass(conn, t["documents"])):
        return False
    n_s = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t["sections"]))).fetchone()[0]
    n_d = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t["documents"]))).fetchone()[0]
    return n_s == n_sections and n_d == n_documents and _hnsw_index_valid(conn, layout)


def _sizes(conn: psycopg.Connection, layout: Layout) -> tuple[int, int]:
    row = conn.execute(
        "SELECT pg_total_relation_size(to_regclass(%s)), pg_relation_size(to_regclass(%s))",
        (layout.tables["sections"], f"{layout.prefix}sections_embedding_hnsw"),
    ).fetchone()
    return int(row[0]), int(row[1])


def ensure_loaded(
    conn: psycopg.Connection,
    docs: list[SyntheticDocument],
    layout: Layout,
    *,
    maintenance_work_mem: str = DEFAULT_MAINTENANCE_WORK_MEM,
    reload: bool = False,
    log=print,
) -> LoadInfo:
    """Load ``docs`` into ``layout`` unless that exact corpus is already there.

    ``conn`` must be an autocommit connection (onetrip.connect gives one), ideally
    direct rather than through the delay proxy.
    """
    n_sections = sum(len(d.sections) for d in docs)
    fingerprint = schema_fingerprint(layout)
    if not reload and corpus_is_loaded(conn, layout, n_sections, len(docs)):
        previous = read_load_note(conn, layout.tables["sections"]) or {}
        if previous.get("schema_fingerprint") == fingerprint:
            table_b, index_b = _sizes(conn, layout)
            log(f"  corpus {layout.prefix}: reusing {n_sections} sections already loaded")
            info = LoadInfo(layout.prefix, n_sections, len(docs), True, table_bytes=table_b, hnsw_index_bytes=index_b)
            for key in ("copy_s", "index_build_s", "analyze_s", "maintenance_work_mem", "hnsw_indexdef",
                        "max_parallel_maintenance_workers"):
                setattr(info, key, previous.get(key))  # how long the load that made these tables took
            return info
        log(f"  corpus {layout.prefix}: loaded under another onetrip schema (or by an older benchmark); loading again")

    t = layout.tables
    log(f"  corpus {layout.prefix}: loading {n_sections} sections in {len(docs)} documents")
    drop = [t[name] for name in ("sections", "documents", "section_history") if name in t]
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(", ").join(sql.SQL(x) for x in drop)))
    loaded = bulk_load(conn, layout, docs, maintenance_work_mem=maintenance_work_mem, vacuum=True)
    copy_s, index_s, analyze_s = loaded["copy_seconds"], loaded["index_seconds"], loaded["analyze_seconds"]
    indexdef = hnsw_indexdef(conn, layout)
    log(f"  corpus {layout.prefix}: COPY {copy_s:.1f} s, HNSW build {index_s:.1f} s "
        f"(maintenance_work_mem={maintenance_work_mem}), VACUUM ANALYZE {analyze_s:.1f} s")
    table_b, index_b = _sizes(conn, layout)
    workers = int(conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0])
    info = LoadInfo(
        layout.prefix, n_sections, len(docs), False, copy_s, index_s, analyze_s, maintenance_work_mem,
        indexdef, table_b, index_b, workers,
    )
    write_load_note(conn, t["sections"], {**info.as_dict(), "schema_fingerprint": fingerprint})
    return info


def write_load_note(conn: psycopg.Connection, table: str, note: dict[str, Any]) -> None:
    """Keep the load's timings with the table (as its comment), so a reusing run can report them."""
    text = json.dumps({"onetrip_bench_load": note}, default=str)
    conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.SQL(table), sql.Literal(text)))


def read_load_note(conn: psycopg.Connection, table: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", (table,)).fetchone()
    try:
        return json.loads(row[0])["onetrip_bench_load"] if row and row[0] else None
    except (ValueError, KeyError, TypeError):
        return None
