"""sqlglot as a validator for the rendered SQL, with pgvector's operators intact.

Stock sqlglot reads pgvector's cosine operator ``<=>`` as MySQL's null-safe
equality and writes it back as ``IS NOT DISTINCT FROM`` -- silently changing the
query -- and cannot parse ``<#>`` or ``<+>`` at all. The ``PgVectorPostgres``
dialect below teaches the tokenizer those operators and maps each one to an
expression class of its own that is generated back as the same operator, so a
round trip through sqlglot is lossless. `check_roundtrip` proves it per
statement: it compares the vector operators before and after and refuses any
``IS NOT DISTINCT FROM`` that the source did not contain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.oracle import Oracle
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError
from sqlglot.tokens import TokenType

from .errors import OnetripError


class SqlValidationError(OnetripError):
    """A rendered statement failed to parse, or sqlglot would have changed it."""


class CosineDistance(exp.Expression, exp.Binary):
    """pgvector ``a <=> b``."""


class NegativeInnerProduct(exp.Expression, exp.Binary):
    """pgvector ``a <#> b``."""


class L1Distance(exp.Expression, exp.Binary):
    """pgvector ``a <+> b``."""


# Token types that the Postgres tokenizer never produces, borrowed as carriers.
_TOKENS = {
    "<=>": (TokenType.DOTCARET, CosineDistance),
    "<#>": (TokenType.DCOLONQMARK, NegativeInnerProduct),
    "<+>": (TokenType.COLON_GT, L1Distance),
}


class PgVectorPostgres(Postgres):
    """PostgreSQL dialect that knows pgvector's distance operators."""

    class Tokenizer(Postgres.Tokenizer):
        KEYWORDS = {**Postgres.Tokenizer.KEYWORDS, **{op: tok for op, (tok, _) in _TOKENS.items()}}

    class Parser(Postgres.Parser):
        FACTOR = {**Postgres.Parser.FACTOR, **{tok: cls for tok, cls in _TOKENS.values()}}

    class Generator(Postgres.Generator):
        TRANSFORMS = {
            **Postgres.Generator.TRANSFORMS,
            **{cls: (lambda op: lambda self, e: self.binary(e, op))(op) for op, (_, cls) in _TOKENS.items()},
        }


_VECTOR_OPS = re.compile(r"<=>|<#>|<\+>|<->")
_NULLSAFE = re.compile(r"IS\s+NOT\s+DISTINCT\s+FROM", re.IGNORECASE)


def dialect_for(name: str) -> type[sqlglot.Dialect]:
    """The sqlglot dialect class used for one of onetrip's editions."""
    if name == "postgres":
        return PgVectorPostgres
    if name == "oracle":
        return Oracle
    raise ValueError(f"unknown dialect {name!r}: expected 'postgres' or 'oracle'")


def _strip_comments_and_strings(sql: str) -> str:
    sql = re.sub(r"'(?:[^']|'')*'", "''", sql)
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"/\*.*?\*/", "", sql, flags=re.DOTALL)


@dataclass(frozen=True)
class CheckedStatement:
    """One statement as rendered, with sqlglot's parse of it."""

    sql: str
    tree: exp.Expression
    roundtrip: str | None  # PostgreSQL only: sqlglot's regeneration of the tree


def parse_statements(sql: str, dialect: str) -> list[CheckedStatement]:
    """Parse every statement in ``sql``; raise SqlValidationError naming the failure.

    Statements sqlglot can only keep as an opaque ``Command`` (it has no grammar
    for them, e.g. Oracle's CREATE VECTOR INDEX) are accepted but flagged by
    their type, so callers can pin exactly which ones those are.
    """
    d = dialect_for(dialect)
    try:
        trees = sqlglot.parse(sql, read=d)
    except ParseError as e:
        raise SqlValidationError(f"{dialect} SQL does not parse: {e}") from e
    pieces = [p for p in split_statements(sql, dialect)]
    trees = [t for t in trees if t is not None]
    if len(pieces) != len(trees):
        raise SqlValidationError(
            f"{dialect} SQL: split into {len(pieces)} statements but sqlglot parsed {len(trees)}"
        )
    out = []
    for piece, tree in zip(pieces, trees):
        regenerated = tree.sql(dialect=d) if dialect == "postgres" else None
        out.append(CheckedStatement(piece, tree, regenerated))
    return out


def split_statements(sql: str, dialect: str = "postgres") -> list[str]:
    """Split a script on top-level semicolons using sqlglot's tokenizer.

    Dollar-quoted function bodies and string literals stay whole.
    """
    d = dialect_for(dialect)
    tokens = d().tokenize(sql)
    statements: list[str] = []
    start = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            piece = sql[start : tok.start].strip()
            if _strip_comments_and_strings(piece).strip():
                statements.append(piece)
            start = tok.end + 1
    tail = sql[start:].strip()
    if _strip_comments_and_strings(tail).strip():
        statements.append(tail)
    return statements


def check_roundtrip(sql: str) -> list[CheckedStatement]:
    """Parse PostgreSQL SQL and prove sqlglot keeps every vector operator as written."""
    checked = parse_statements(sql, "postgres")
    for st in checked:
        assert st.roundtrip is not None
        if isinstance(st.tree, exp.Command):
            continue
        before = _VECTOR_OPS.findall(_strip_comments_and_strings(st.sql))
        after = _VECTOR_OPS.findall(_strip_comments_and_strings(st.roundtrip))
        if before != after:
            raise SqlValidationError(
                f"sqlglot changed the vector operators {before} into {after} in: {st.sql[:200]}"
            )
        if len(_NULLSAFE.findall(st.roundtrip)) > len(_NULLSAFE.findall(st.sql)):
            raise SqlValidationError(f"sqlglot introduced IS NOT DISTINCT FROM in: {st.sql[:200]}")
    return checked


_PSQL_VAR = re.compile(r"(?<![:\w]):(?:'([a-z_][a-z0-9_]*)'|\"([a-z_][a-z0-9_]*)\"|([a-z_][a-z0-9_]*))")


def psql_vars_to_binds(sql: str) -> str:
    """Turn psql variables (``:'name'``, ``:name``) into ``%(name)s`` binds.

    sqlglot has no grammar for psql's client-side interpolation; the rendered
    psql edition is checked after this substitution, which changes nothing else.
    Casts (``::vector``) are left alone by the look-behind.
    """
    return _PSQL_VAR.sub(lambda m: "%(" + (m.group(1) or m.group(2) or m.group(3)) + ")s", sql)
