"""Create onetrip's tables and read back how an existing installation is laid out."""

from __future__ import annotations

from dataclasses import replace

import psycopg

from .connection import require_autocommit, require_connection
from .errors import DimensionMismatchError, ForeignTableError, OnetripError, SchemaMissingError
from .layout import Layout
from .templates import render


def required_columns() -> tuple[str, ...]:
    """The sections columns this version writes and reads: every one must exist."""
    from .store import SECTION_COLUMNS

    return (*SECTION_COLUMNS, "tsv")


#: the columns every onetrip version gave its tables (sections and documents as the first commit, 295ac80, made
#: them; section_history and term_stats as they were first made): a table of that name without all of them is
#: another application's, which onetrip must neither fill, read as its own nor drop (the default prefix is empty:
#: `sections`). Three columns each had been the test, and an application's `documents (doc_id, source_uri,
#: content_hash, owner)` was called an older onetrip's, whose advised `init --recreate` dropped it with its rows
#: (found by review)
_FIRST_SECTIONS = ("doc_id", "section_id", "parent_section_id", "sequence_index", "heading_level", "heading",
                   "heading_path", "anchor", "content", "token_count", "embedding", "metadata")
IDENTITY_COLUMNS = {
    "sections": _FIRST_SECTIONS,
    "documents": ("doc_id", "source_uri", "title", "revision", "content_hash", "metadata", "token_count",
                  "section_count", "ingested_at"),
    "section_history": (*_FIRST_SECTIONS, "context_tokens", "revision", "collection", "acl", "archived_at"),
    # all four: an application's own `term_stats (lexeme, freq)` had passed for onetrip's (and been dropped)
    "term_stats": ("lexeme", "sections", "share", "idf"),
}

_COLUMNS_QUERY = """
    SELECT t.kind,
           c.relkind::text,
           ARRAY(SELECT a.attname::text
                   FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
      FROM unnest(%s::text[], %s::text[]) AS t (kind, name)
      JOIN pg_class c ON c.oid = to_regclass(t.name)
"""

#: what a relation holding one of onetrip's names is, by pg_class.relkind
_RELATION_KIND = {"r": "a table", "p": "a table", "v": "a view", "m": "a materialized view", "f": "a foreign table",
                  "c": "a composite type", "S": "a sequence", "i": "an index", "I": "an index"}


def existing_columns(conn: psycopg.Connection, layout: Layout) -> dict[str, set[str]]:
    """The columns of each of the layout's tables that exists, by kind ("sections", ...): one catalog read.
    ForeignTableError for a relation of a table's name that is no table: init had called a view "an older
    onetrip's", and the `init --recreate` it advised failed with WrongObjectType."""
    kinds = list(IDENTITY_COLUMNS)
    rows = conn.execute(_COLUMNS_QUERY, (kinds, [layout.tables[k] for k in kinds])).fetchall()
    for kind, relkind, _ in rows:
        if relkind not in ("r", "p"):
            what = _RELATION_KIND.get(relkind, f"no table (relkind {relkind})")
            raise ForeignTableError(f"{layout.tables[kind]} exists but is {what}, not onetrip's table: onetrip "
                                    "neither uses nor drops it; give another --prefix or --schema")
    return {kind: set(columns) for kind, _, columns in rows}


def foreign_table_error(table: str, lacking: list[str]) -> ForeignTableError:
    named = ", ".join(lacking[:4]) + (f" and {len(lacking) - 4} more of onetrip's" if len(lacking) > 4 else "")
    return ForeignTableError(
        f"{table} exists but is not onetrip's: it has no column{'s' if len(lacking) > 1 else ''} "
        f"{named}. onetrip neither uses nor drops it; give another --prefix or --schema")


def check_ours(columns: dict[str, set[str]], layout: Layout) -> None:
    """ForeignTableError for the first existing table that lacks onetrip's key columns."""
    for kind, have in columns.items():
        lacking = [c for c in IDENTITY_COLUMNS[kind] if c not in have]
        if lacking:
            raise foreign_table_error(layout.tables[kind], lacking)


def missing_columns(conn: psycopg.Connection, layout: Layout) -> list[str]:
    """Columns this version needs that the existing sections and documents tables lack (empty if none, or no
    tables), documents' named as documents.column; ForeignTableError if a table is not onetrip's at all."""
    from .store import DOCUMENT_COLUMNS

    columns = existing_columns(conn, layout)
    check_ours(columns, layout)
    missing = [c for c in required_columns() if "sections" in columns and c not in columns["sections"]]
    return missing + [f"{layout.tables['documents']}.{c}" for c in DOCUMENT_COLUMNS
                      if "documents" in columns and c not in columns["documents"]]


def drop_schema(conn: psycopg.Connection, layout: Layout) -> None:
    """Drop onetrip's tables for this layout, data included (for `onetrip init --recreate`).

    Only onetrip's: a table of the name without onetrip's key columns is refused (ForeignTableError), and
    nothing is dropped by CASCADE: a view or foreign key of someone else's on them is an error naming it."""
    require_autocommit(conn, "drop_schema")
    t = layout.tables
    with conn.transaction():
        check_ours(existing_columns(conn, layout), layout)
        try:  # the error leaves the transaction above, which rolls back
            conn.execute(f"DROP TABLE IF EXISTS {t['term_stats']}, {t['section_history']}, {t['sections']}, "
                         f"{t['documents']}")
        except psycopg.errors.DependentObjectsStillExist as e:
            detail = (e.diag.message_detail or "").replace("\n", "; ")
            raise OnetripError(f"onetrip's tables were not dropped: other objects depend on them ({detail}); "
                               "drop or change those first") from None


def init_schema(conn: psycopg.Connection, layout: Layout = Layout()) -> Layout:
    """Create extension, tables and indexes; harmless to run again.

    Runs in one transaction of its own (``conn`` in autocommit mode), so a
    failure leaves nothing half-created. If the
    tables already exist with another embedding dimension, vector type or
    partition count, or were created by an older onetrip without columns this
    version needs, that is an error naming the cause rather than a silent
    mismatch. An existing HNSW index is kept as it was built: the Layout returned
    carries the m and ef_construction stored on it (`hnsw_build_options`: what it
    was built with, unless ALTER INDEX ... SET changed them since; ``layout``'s when
    the table has several HNSW indexes or the stored pair breaks pgvector's rule),
    which may differ from ``layout``'s. To rebuild it with ``layout``'s: DROP INDEX
    it and init again.
    """
    require_autocommit(conn, "init_schema")
    missing = missing_columns(conn, layout)
    if missing:
        table = layout.tables["documents" if all("." in c for c in missing) else "sections"]
        raise SchemaMissingError(
            f"{table} was created by an older onetrip and lacks column(s) {', '.join(missing)}; "
            "run `onetrip init --recreate` (drops onetrip's tables and their data) or use another --prefix/--schema"
        )
    _check_existing(_existing_layout(conn, layout), layout)  # before the script: its indexes would fail on another type
    script = render("schema", layout=layout)
    with conn.transaction():
        # Two sessions' CREATE ... IF NOT EXISTS at once can both find no table and one fail on a catalog unique
        # index (pg_type_typname_nsp_index): inits wait for each other (the two-key lock space, apart from the
        # documents' one-key locks); the second then finds everything made.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), 0)", ("onetrip init_schema",))
        _check_partition_names(conn, layout)
        try:
            conn.execute(script)  # no params: sent as one multi-statement script
        except (psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable) as e:
            # a type (an enum) of a table's name, an index holding a primary key's name: the server's words; not
            # another clash (a `vector` type where the extension would go), which no prefix mends
            said = e.diag.message_primary or str(e)
            ours = {n.rsplit(".", 1)[-1].strip('"') for n in (*layout.tables.values(), *layout.names.values())}
            if not any(f'"{n}"' in said for n in ours):
                raise
            raise ForeignTableError(f"{said}: onetrip cannot make its table or constraint of that name; give "
                                    "another --prefix or --schema (nothing was made)") from None
        _check_index_names(conn, layout)
    existing = read_layout(conn, schema=layout.schema, prefix=layout.prefix)
    _check_existing(existing, layout)  # another init may have created it in between
    existing = replace(existing, hnsw_m=layout.hnsw_m, hnsw_ef_construction=layout.hnsw_ef_construction)
    built = {(m, ef) for _, m, ef in hnsw_build_options(conn, existing)}
    if len(built) == 1:  # the index's own options, not the ones asked for (reported as given, found by review)
        (m, ef), = built
        try:
            existing = replace(existing, hnsw_m=m, hnsw_ef_construction=ef)
        except ValueError:  # ALTER INDEX ... SET does not check pgvector's rule (ef_construction >= 2 * m): the
            pass  # index works, and init had failed on Layout's check of the values read back (found by review)
    return existing


#: the sections indexes the script makes with CREATE INDEX IF NOT EXISTS, which skips a name any relation of the
#: table's schema holds
_INDEXES = ("seq_index", "parent_index", "collection_index", "hnsw_index", "tsv_index", "terms_index")

_INDEX_OWNERS = """
    SELECT n.name, c.relkind::text, i.indrelid::regclass::text
      FROM unnest(%s::text[]) WITH ORDINALITY AS n (name, ord)
      JOIN pg_class s ON s.oid = to_regclass(%s)
      LEFT JOIN pg_class c ON c.relname = (parse_ident(n.name))[1] AND c.relnamespace = s.relnamespace
      LEFT JOIN pg_index i ON i.indexrelid = c.oid
     WHERE i.indrelid IS DISTINCT FROM s.oid
     ORDER BY n.ord
"""


def _check_index_names(conn: psycopg.Connection, layout: Layout) -> None:
    """Refuse (rolling the script back) when one of the sections table's indexes was not made because another
    relation holds its name: an application's index `sections_embedding_hnsw` on its own table had left the
    sections table without its HNSW index, and init said ready while every search scanned the whole table
    (found by review). Checked after the script, on what it made, so a name onetrip's own run made passes."""
    sections = layout.tables["sections"]
    taken = conn.execute(_INDEX_OWNERS, ([layout.names[k] for k in _INDEXES], sections)).fetchone()
    if taken:
        name, relkind, table = taken
        holder = (f"an index on {table}" if table else
                  _RELATION_KIND.get(relkind, f"a relation (relkind {relkind})") if relkind else "missing")
        raise ForeignTableError(
            f"{name} is {holder}, not an index of {sections}: onetrip cannot make its index of that name (its "
            "searches or writes would go without it); rename or drop that one, or give another --prefix or --schema")


def _check_partition_names(conn: psycopg.Connection, layout: Layout) -> None:
    """Refuse a table of a partition's name that is no partition of the sections table: the script's CREATE TABLE
    IF NOT EXISTS ... PARTITION OF skipped it, and committed a sections table without that remainder (every
    document hashing there then failed to store; found by review)."""
    if not layout.partitions:
        return
    names = [layout.partition(i) for i in range(layout.partitions)]
    taken = conn.execute(
        """SELECT p.name FROM unnest(%s::text[]) WITH ORDINALITY AS p (name, n)
            WHERE to_regclass(p.name) IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM pg_inherits i
                               WHERE i.inhrelid = to_regclass(p.name) AND i.inhparent = to_regclass(%s))
            ORDER BY p.n""", (names, layout.tables["sections"])).fetchall()
    if taken:
        raise ForeignTableError(
            f"{taken[0][0]} exists but is not a partition of {layout.tables['sections']}: onetrip neither uses nor "
            "drops it, and cannot make its partition of that name; give another --prefix or --schema")


def existing_shape(conn: psycopg.Connection, layout: Layout) -> Layout | None:
    """``layout`` with the embedding type, dimension and partition count of the existing sections table, whatever
    columns it lacks (what `onetrip init` keeps where no flag says otherwise, `--recreate` included); None when
    there is none, or its embedding is no vector or halfvec of a fixed dimension (`init_schema` names that).
    ForeignTableError first for a table of onetrip's names that is another application's: its column had been
    read as a layout, and an `embedding varchar` refused as "--vector-type ... got 'character varying'" (found
    by review)."""
    check_ours(existing_columns(conn, layout), layout)
    row = conn.execute(*layout_query(layout.schema, layout.prefix)).fetchone()
    if row is None or row[0] is None or row[0] <= 0:
        return None
    typmod, typename, parts = row[:3]
    vector_type = str(typename).split("(", 1)[0]
    if vector_type not in ("vector", "halfvec"):
        return None
    return replace(layout, dim=int(typmod), vector_type=vector_type, partitions=int(parts))


def _existing_layout(conn: psycopg.Connection, layout: Layout) -> Layout | None:
    """The Layout of the sections table if it exists (None if not yet)."""
    try:
        return read_layout(conn, schema=layout.schema, prefix=layout.prefix)
    except SchemaMissingError:
        return None  # not there yet, or without a fixed dimension (the script and read_layout name that)


def _check_existing(existing: Layout | None, layout: Layout) -> None:
    """An error naming the difference if the sections table exists with another column type or partitioning."""
    if existing is None:
        return
    table = layout.tables["sections"]
    if (existing.dim, existing.vector_type) != (layout.dim, layout.vector_type):
        raise DimensionMismatchError(
            f"{table}.embedding already exists as {existing.vector_type}({existing.dim}); "
            f"cannot initialise it as {layout.vector_type}({layout.dim}). Use another --prefix or --schema."
        )
    if existing.partitions != layout.partitions:
        def shape(n: int) -> str:
            return f"with {n} hash partitions" if n else "without partitions"

        raise ValueError(
            f"{table} already exists {shape(existing.partitions)}; cannot initialise it {shape(layout.partitions)} "
            f"(--partitions {layout.partitions}). Give --partitions {existing.partitions} to use it as it is, "
            "or use another --prefix or --schema."
        )


LAYOUT_QUERY = """
    SELECT a.atttypmod,
           format_type(a.atttypid, a.atttypmod),
           (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = r.rel),
           ARRAY(SELECT c
                   FROM unnest(%s::text[]) WITH ORDINALITY AS needed (c, n)
                  WHERE NOT EXISTS (SELECT 1
                                      FROM pg_attribute p
                                     WHERE p.attrelid = r.rel
                                       AND p.attname = c
                                       AND NOT p.attisdropped)
                  ORDER BY n),
           ARRAY(SELECT c
                   FROM unnest(%s::text[]) WITH ORDINALITY AS needed (c, n)
                  WHERE to_regclass(%s) IS NOT NULL
                    AND NOT EXISTS (SELECT 1
                                      FROM pg_attribute p
                                     WHERE p.attrelid = to_regclass(%s)
                                       AND p.attname = c
                                       AND NOT p.attisdropped)
                  ORDER BY n)
      FROM (SELECT to_regclass(%s) AS rel) r
      LEFT JOIN pg_attribute a
        ON a.attrelid = r.rel
       AND a.attname = 'embedding'
       AND NOT a.attisdropped
     WHERE r.rel IS NOT NULL
"""


def layout_query(schema: str | None, prefix: str) -> tuple[str, tuple]:
    """The catalog query (and its binds) that `layout_from_row` reads; shared by sync and async."""
    from .store import DOCUMENT_COLUMNS

    probe = Layout(dim=1, schema=schema, prefix=prefix)  # validates names; dim is a placeholder
    documents = probe.tables["documents"]
    return LAYOUT_QUERY, (list(required_columns()), list(DOCUMENT_COLUMNS), documents, documents,
                          probe.tables["sections"])


def layout_from_row(row: tuple | None, schema: str | None, prefix: str) -> Layout:
    """The Layout of an initialised installation, from `layout_query`'s row; a clear error if absent."""
    tables = Layout(dim=1, schema=schema, prefix=prefix).tables
    table = tables["sections"]
    if row is None:
        raise SchemaMissingError(f"table {table} does not exist in this database; run `onetrip init` first")
    typmod, typename, parts, missing, missing_documents = row
    for name, kind, lacking in ((table, "sections", missing), (tables["documents"], "documents", missing_documents)):
        if foreign := [c for c in IDENTITY_COLUMNS[kind] if c in lacking]:
            raise foreign_table_error(name, foreign)
    if missing or missing_documents:  # one catalog read names them all, so no statement fails later on one
        named = [*missing, *(f"{tables['documents']}.{c}" for c in missing_documents)]
        raise SchemaMissingError(
            f"{table if missing else tables['documents']} was created by an older onetrip (or altered) and lacks "
            f"column{'s' if len(named) > 1 else ''} {', '.join(named)} (the retrieval statements read them); run "
            "`onetrip init --recreate` (drops onetrip's tables and their data) and ingest again, or use another "
            "--prefix/--schema"
        )
    if typmod is None or typmod <= 0:
        raise SchemaMissingError(f"{table}.embedding is {typename}, without a fixed dimension")
    vector_type = str(typename).split("(", 1)[0]
    return Layout(dim=int(typmod), schema=schema, prefix=prefix, vector_type=vector_type, partitions=int(parts))


def read_layout(conn: psycopg.Connection, *, schema: str | None = None, prefix: str = "") -> Layout:
    """Return the Layout of an initialised installation; dimension, vector type and partitions are read
    (its HNSW fields are Layout's defaults: `hnsw_build_options` reads the index's, `init_schema` returns them).

    Raises SchemaMissingError naming the table when `onetrip init` has not run.
    """
    require_connection(conn, "read_layout")
    return layout_from_row(conn.execute(*layout_query(schema, prefix)).fetchone(), schema, prefix)


HNSW_OPTIONS_QUERY = """
    SELECT c.relname, coalesce(c.reloptions, '{}')
      FROM pg_index i
      JOIN pg_class c ON c.oid = i.indexrelid
      JOIN pg_am a ON a.oid = c.relam
     WHERE i.indrelid = to_regclass(%s) AND a.amname = 'hnsw'
"""


def hnsw_build_options(conn: psycopg.Connection, layout: Layout) -> list[tuple[str, int, int]]:
    """(index, m, ef_construction) of each HNSW index on the sections table, pgvector's defaults where unset.

    `init_schema` creates the index only if it is missing, so an existing one
    keeps the options it was built with; the CLI says so when they differ.
    """
    out = []
    for name, options in conn.execute(HNSW_OPTIONS_QUERY, (layout.tables["sections"],)).fetchall():
        opts = dict(o.split("=", 1) for o in options)
        out.append((name, int(opts.get("m", 16)), int(opts.get("ef_construction", 64))))
    return out
