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


LAYOUT_QUERY = """
    SELECT a.atttypmod,
           format_type(a.atttypid, a.atttypmod),
           (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = a.attrelid)
      FROM pg_attribute a
     WHERE a.attrelid = to_regclass(%s)
       AND a.attname = 'embedding'
       AND NOT a.attisdropped
"""


def layout_query(schema: str | None, prefix: str) -> tuple[str, tuple[str]]:
    """The catalog query (and its bind) that `layout_from_row` reads; shared by sync and async."""
    probe = Layout(dim=1, schema=schema, prefix=prefix)  # validates names; dim is a placeholder
    return LAYOUT_QUERY, (probe.tables["sections"],)


def layout_from_row(row: tuple | None, schema: str | None, prefix: str) -> Layout:
    """The Layout of an initialised installation, from `layout_query`'s row; a clear error if absent."""
    table = Layout(dim=1, schema=schema, prefix=prefix).tables["sections"]
    if row is None:
        raise SchemaMissingError(
            f"table {table} (with an embedding column) does not exist in this database; run `onetrip init` first"
        )
    typmod, typename, parts = row
    if typmod is None or typmod <= 0:
        raise SchemaMissingError(f"{table}.embedding is {typename}, without a fixed dimension")
    vector_type = str(typename).split("(", 1)[0]
    return Layout(dim=int(typmod), schema=schema, prefix=prefix, vector_type=vector_type, partitions=int(parts))


def read_layout(conn: psycopg.Connection, *, schema: str | None = None, prefix: str = "") -> Layout:
    """Return the Layout of an initialised installation; dimension, vector type and partitions are read.

    Raises SchemaMissingError naming the table when `onetrip init` has not run.
    """
    return layout_from_row(conn.execute(*layout_query(schema, prefix)).fetchone(), schema, prefix)
