"""Create onetrip's tables and read back how an existing installation is laid out."""

from __future__ import annotations

import psycopg

from .errors import DimensionMismatchError, SchemaMissingError
from .templates import Layout, render


def init_schema(conn: psycopg.Connection, layout: Layout = Layout()) -> Layout:
    """Create extension, tables and indexes; harmless to run again.

    Runs in one transaction, so a failure leaves nothing half-created. If the
    tables already exist with another embedding dimension, that is an error
    rather than a silent mismatch.
    """
    script = render("schema", layout=layout)
    with conn.transaction():
        conn.execute(script)  # no params: sent as one multi-statement script
    existing = read_layout(conn, schema=layout.schema, prefix=layout.prefix)
    if (existing.dim, existing.vector_type) != (layout.dim, layout.vector_type):
        raise DimensionMismatchError(
            f"{layout.tables['sections']}.embedding already exists as {existing.vector_type}({existing.dim}); "
            f"cannot initialise it as {layout.vector_type}({layout.dim}). Use another --prefix or --schema."
        )
    return existing


def read_layout(conn: psycopg.Connection, *, schema: str | None = None, prefix: str = "") -> Layout:
    """Return the Layout of an initialised installation; the dimension is read from the table.

    Raises SchemaMissingError naming the table when `onetrip init` has not run.
    """
    probe = Layout(dim=1, schema=schema, prefix=prefix)  # validates names; dim is a placeholder
    table = probe.tables["sections"]
    row = conn.execute(
        """
        SELECT a.atttypmod, format_type(a.atttypid, a.atttypmod)
          FROM pg_attribute a
         WHERE a.attrelid = to_regclass(%s)
           AND a.attname = 'embedding'
           AND NOT a.attisdropped
        """,
        (table,),
    ).fetchone()
    if row is None:
        raise SchemaMissingError(
            f"table {table} (with an embedding column) does not exist in this database; run `onetrip init` first"
        )
    typmod, typename = row
    if typmod is None or typmod <= 0:
        raise SchemaMissingError(f"{table}.embedding is {typename}, without a fixed dimension")
    vector_type = str(typename).split("(", 1)[0]
    parts = conn.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(%s)", (table,)
    ).fetchone()[0]
    return Layout(dim=int(typmod), schema=schema, prefix=prefix, vector_type=vector_type, partitions=int(parts))
