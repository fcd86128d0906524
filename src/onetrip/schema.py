"""Create onetrip's tables and read back how an existing installation is laid out."""

from __future__ import annotations

import psycopg

from .errors import DimensionMismatchError, SchemaMissingError
from .layout import Layout
from .templates import render


def required_columns() -> tuple[str, ...]:
    """The sections columns this version writes and reads: every one must exist."""
    from .store import SECTION_COLUMNS

    return (*SECTION_COLUMNS, "tsv")


def missing_columns(conn: psycopg.Connection, layout: Layout) -> list[str]:
    """Columns this version needs that an existing sections table lacks (empty if none, or no table)."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
        (layout.tables["sections"],),
    ).fetchall()
    if not rows:
        return []
    have = {r[0] for r in rows}
    return [c for c in required_columns() if c not in have]


def drop_schema(conn: psycopg.Connection, layout: Layout) -> None:
    """Drop onetrip's tables for this layout, data included (for `onetrip init --recreate`)."""
    t = layout.tables
    with conn.transaction():
        conn.execute(f"DROP TABLE IF EXISTS {t['term_stats']}, {t['section_history']}, {t['sections']}, "
                     f"{t['documents']} CASCADE")


def init_schema(conn: psycopg.Connection, layout: Layout = Layout()) -> Layout:
    """Create extension, tables and indexes; harmless to run again.

    Runs in one transaction, so a failure leaves nothing half-created. If the
    tables already exist with another embedding dimension, or were created by
    an older onetrip without columns this version needs, that is an error
    naming the cause rather than a silent mismatch.
    """
    missing = missing_columns(conn, layout)
    if missing:
        raise SchemaMissingError(
            f"{layout.tables['sections']} was created by an older onetrip and lacks column(s) {', '.join(missing)}; "
            "run `onetrip init --recreate` (drops onetrip's tables and their data) or use another --prefix/--schema"
        )
    _check_existing(_existing_layout(conn, layout), layout)  # before the script: its indexes would fail on another type
    script = render("schema", layout=layout)
    with conn.transaction():
        conn.execute(script)  # no params: sent as one multi-statement script
    existing = read_layout(conn, schema=layout.schema, prefix=layout.prefix)
    _check_existing(existing, layout)  # another init may have created it in between
    return existing


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
           (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = a.attrelid),
           ARRAY(SELECT c
                   FROM unnest(%s::text[]) WITH ORDINALITY AS needed (c, n)
                  WHERE NOT EXISTS (SELECT 1
                                      FROM pg_attribute p
                                     WHERE p.attrelid = a.attrelid
                                       AND p.attname = c
                                       AND NOT p.attisdropped)
                  ORDER BY n)
      FROM pg_attribute a
     WHERE a.attrelid = to_regclass(%s)
       AND a.attname = 'embedding'
       AND NOT a.attisdropped
"""


def layout_query(schema: str | None, prefix: str) -> tuple[str, tuple[str]]:
    """The catalog query (and its bind) that `layout_from_row` reads; shared by sync and async."""
    probe = Layout(dim=1, schema=schema, prefix=prefix)  # validates names; dim is a placeholder
    return LAYOUT_QUERY, (list(required_columns()), probe.tables["sections"])


def layout_from_row(row: tuple | None, schema: str | None, prefix: str) -> Layout:
    """The Layout of an initialised installation, from `layout_query`'s row; a clear error if absent."""
    table = Layout(dim=1, schema=schema, prefix=prefix).tables["sections"]
    if row is None:
        raise SchemaMissingError(
            f"table {table} (with an embedding column) does not exist in this database; run `onetrip init` first"
        )
    typmod, typename, parts, missing = row
    if missing:  # one catalog read names them all, so no statement fails later on a missing column
        raise SchemaMissingError(
            f"{table} was created by an older onetrip (or altered) and lacks column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} (the retrieval statements read them); run `onetrip init --recreate` (drops "
            "onetrip's tables and their data) and ingest again, or use another --prefix/--schema"
        )
    if typmod is None or typmod <= 0:
        raise SchemaMissingError(f"{table}.embedding is {typename}, without a fixed dimension")
    vector_type = str(typename).split("(", 1)[0]
    return Layout(dim=int(typmod), schema=schema, prefix=prefix, vector_type=vector_type, partitions=int(parts))


def read_layout(conn: psycopg.Connection, *, schema: str | None = None, prefix: str = "") -> Layout:
    """Return the Layout of an initialised installation; dimension, vector type and partitions are read.

    Raises SchemaMissingError naming the table when `onetrip init` has not run.
    """
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
