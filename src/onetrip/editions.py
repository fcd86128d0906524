"""The rendered SQL editions that DBAs copy: ``sql/postgres``, ``sql/oracle`` and ``sql/citus``.

Each file is a template from ``sql/templates`` rendered with a header and the
edition's bind syntax (psql variables for PostgreSQL, ``:name`` for Oracle).
Every statement rendered is parsed by sqlglot (`check_edition`, with
`onetrip.sqlcheck`'s pgvector and Oracle 23ai dialects) before anyone gets it.
`write_editions` writes them; `stale_files` reports stale checked-in files.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .retrieve import CONTEXT_DEFAULT, MAX_K, assemble_template_options
from .errors import InvalidIdentifierError
from .identifiers import check_oracle_identifier
from .layout import Layout
from .templates import Dialect, render

#: ef_search pinned by the PostgreSQL function wrapper (pgvector's default is 40).
DEFAULT_EF_SEARCH = 100

#: The rendered assemble.sql: the library's default context (retrieve.CONTEXT_DEFAULT), with a budget.
ASSEMBLE_DEFAULT = assemble_template_options(CONTEXT_DEFAULT, budget=True)

FULL_EXPANSION = {
    "include_parent": True,
    "include_neighbors": True,
}


@dataclass(frozen=True)
class EditionFile:
    name: str  # file name inside the edition folder
    template: str
    options: dict


def edition_files(dialect: Dialect) -> list[EditionFile]:
    """What each edition holds."""
    files = [
        EditionFile("schema.sql", "schema", {}),
        EditionFile("retrieve.sql", "retrieve", FULL_EXPANSION),
    ]
    if dialect == "postgres":
        files.append(EditionFile("retrieve_function.sql", "retrieve_function",
                                 {**FULL_EXPANSION, "ef_search": DEFAULT_EF_SEARCH, "binds": "function", "max_k": MAX_K,
                                  "filters": {"collections": True, "principals": True}}))
        files.append(EditionFile("retrieve_hybrid.sql", "retrieve", {**FULL_EXPANSION, "mode": "hybrid"}))
        files.append(EditionFile("retrieve_many.sql", "retrieve_many", {**FULL_EXPANSION, "many": True}))
        files.append(EditionFile("retrieve_many_hybrid.sql", "retrieve_many",
                                 {**FULL_EXPANSION, "many": True, "mode": "hybrid"}))
        files.append(EditionFile("assemble.sql", "assemble", dict(ASSEMBLE_DEFAULT)))
        files.append(EditionFile("rls.sql", "rls", {}))
    else:
        # the filters of the PostgreSQL function, as JSON-array parameters (see the file's header); retrieve.sql
        # stays unfiltered in both editions
        files.append(EditionFile("retrieve_macro.sql", "retrieve_macro",
                                 {**FULL_EXPANSION, "binds": "function",
                                  "filters": {"collections": True, "principals": True}}))
        files.append(EditionFile("assemble.sql", "assemble", dict(ASSEMBLE_DEFAULT)))
        # the PostgreSQL file's options; the query embeddings are one JSON array in a CLOB (see its header)
        files.append(EditionFile("retrieve_many.sql", "retrieve_many", {**FULL_EXPANSION, "many": True}))
        # postgres/rls.sql's policy as a Virtual Private Database policy (DBMS_RLS)
        files.append(EditionFile("rls.sql", "rls_vpd", {}))
    return files


EDITION_DIALECT = {"postgres": "postgres", "oracle": "oracle", "citus": "postgres"}


def function_query(text: str) -> str:
    """The query a rendered PL/pgSQL function returns: what follows ``RETURN QUERY`` in its
    ``$function$`` body, up to the statement's semicolon (the body of an SQL function as a whole)."""
    body = text.split("$function$")[1]
    if "RETURN QUERY" not in body:
        return body
    return textwrap.dedent(body.split("RETURN QUERY\n", 1)[1].rsplit(";", 1)[0]) + "\n"


def render_edition(edition: str, layout: Layout = Layout()) -> dict[str, str]:
    """File name -> SQL text for one edition (postgres, oracle, citus)."""
    if edition not in EDITION_DIALECT:
        raise ValueError(f"unknown edition {edition!r}: expected one of {sorted(EDITION_DIALECT)}")
    dialect = EDITION_DIALECT[edition]
    if dialect == "oracle" and layout.schema:
        check_oracle_identifier(layout.schema, "schema name")
    if layout.schema:
        check_checkable_schema(layout.schema, dialect)
    default_binds = "psql" if dialect == "postgres" else "oracle"
    out = {}
    files = ([EditionFile("schema.sql", "citus_schema", {})] if edition == "citus" else edition_files(dialect))  # type: ignore[arg-type]
    for f in files:
        options = dict(f.options)
        binds = options.pop("binds", default_binds)
        out[f.name] = render(f.template, layout=layout, dialect=dialect, binds=binds, header=True, **options)
    check_edition(edition, out)
    return out


def no_oracle_edition(layout: Layout) -> str | None:
    """Why the Oracle edition cannot be rendered for ``layout`` (None if it can): for `sql render --dialect all`,
    which then renders the others and says why, as rendering it by name is an error saying so."""
    if layout.vector_type != "vector" or layout.partitions:
        return "halfvec storage or hash partitions (--vector-type, --partitions)"
    if layout.schema:
        try:
            check_oracle_identifier(layout.schema, "schema name")
            check_checkable_schema(layout.schema, "oracle")
        except InvalidIdentifierError:
            return f"schema {layout.schema!r}"
    return None


def check_checkable_schema(schema: str, dialect: str) -> None:
    """InvalidIdentifierError if sqlglot, which checks every rendered statement, cannot read ``schema`` as a name.

    PostgreSQL takes a schema called ``describe`` or ``qualify`` (onetrip runs on it), but sqlglot reads such
    words as keywords: the check then failed with a parse error naming neither the schema nor the cause.
    """
    import sqlglot
    from sqlglot import exp

    from .sqlcheck import dialect_for

    try:
        tree = sqlglot.parse_one(f"SELECT s.a FROM {schema}.sections s", dialect=dialect_for(dialect))
        readable = {t.db for t in tree.find_all(exp.Table)} == {schema}
    except sqlglot.errors.SqlglotError:
        readable = False
    if not readable:
        raise InvalidIdentifierError(
            f"schema name {schema!r} is a keyword to sqlglot, which checks every statement of the SQL editions: "
            f"they cannot be rendered for it (onetrip itself runs on it); render them for another schema name"
        )


def check_edition(edition: str, files: Mapping[str, str]) -> int:
    """Parse every statement of a rendered edition with sqlglot and check that generating it again keeps
    every vector operator and Oracle construct; the number of statements checked.

    Raises `SqlValidationError` naming the file. A PostgreSQL function's dollar-quoted body is parsed as a
    query of its own; psql variables are read as binds.
    """
    from .sqlcheck import (SqlValidationError, check_oracle_roundtrip, check_roundtrip, parse_statements,
                           psql_vars_to_binds)

    checked = 0
    quiet = logging.getLogger("sqlglot")  # it warns on every DDL it keeps as an opaque command
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for name, text in files.items():
            try:
                if EDITION_DIALECT[edition] == "oracle":
                    checked += len(check_oracle_roundtrip(text))
                    continue
                if "$function$" in text:  # the CREATE FUNCTION as a whole, then its body's query
                    checked += len(parse_statements(text, "postgres"))
                    text = function_query(text)
                checked += len(check_roundtrip(psql_vars_to_binds(text)))
            except Exception as e:  # the checks' own errors, or sqlglot's (ParseError, TokenError)
                why = str(e) if isinstance(e, SqlValidationError) else f"{type(e).__name__}: {e}"
                raise SqlValidationError(f"{edition}/{name}: {why}") from e
    finally:
        quiet.setLevel(level)
    return checked


def write_editions(out_dir: Path, editions: list[str], layout: Layout = Layout()) -> list[Path]:
    """Render (and check) every edition first, then write their files under ``out_dir/<edition>/``: an edition
    that cannot be rendered for this layout leaves nothing written, not the editions before it."""
    rendered = {d: render_edition(d, layout) for d in editions}
    written = []
    for d, files in rendered.items():
        folder = out_dir / d
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = folder / name
            path.write_text(text)
            written.append(path)
    return written


def stale_files(sql_dir: Path, layout: Layout = Layout()) -> list[str]:
    """Checked-in files that differ from a fresh default rendering (empty = up to date)."""
    stale = []
    for d in EDITION_DIALECT:
        for name, text in render_edition(d, layout).items():
            path = sql_dir / d / name
            if not path.exists() or path.read_text() != text:
                stale.append(f"{d}/{name}")
    return stale
