"""sqlglot as a validator for the rendered SQL, with pgvector's operators intact.

Stock sqlglot reads pgvector's cosine operator ``<=>`` as MySQL's null-safe
equality and writes it back as ``IS NOT DISTINCT FROM`` -- silently changing the
query -- and cannot parse ``<#>`` or ``<+>`` at all. The ``PgVectorPostgres``
dialect below teaches the tokenizer those operators and maps each one to an
expression class of its own that is generated back as the same operator, so a
round trip through sqlglot is lossless. `check_roundtrip` proves it per
statement: it compares the vector operators before and after and refuses any
``IS NOT DISTINCT FROM`` that the source did not contain.

Stock sqlglot's Oracle dialect cannot parse the Oracle Database 23ai edition
either (``VECTOR(384, FLOAT32)``, ``FETCH APPROX FIRST``, ``CREATE VECTOR
INDEX``). ``Oracle23ai`` adds a real grammar for each, generated back as
written, and `check_oracle_roundtrip` proves per statement that the
Oracle-specific constructs survive the round trip. Oracle scripts are SQL*Plus
scripts: `split_statements` keeps a PL/SQL block (ended by a line holding only
``/``) whole, and `extract_oracle_macro_query` pulls the query out of a SQL
macro's quoted return string so it can be parsed on its own (as
`extract_oracle_policy_predicate` does a VPD policy function's predicate).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.oracle import Oracle
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

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


# --------------------------------------------------------------------------- Oracle Database 23ai

#: Metrics accepted by VECTOR_DISTANCE and CREATE VECTOR INDEX ... DISTANCE (23ai SQL Reference).
VECTOR_METRICS = frozenset(
    {"COSINE", "DOT", "EUCLIDEAN", "EUCLIDEAN_SQUARED", "L2_SQUARED", "HAMMING", "MANHATTAN", "JACCARD"}
)
#: Element formats of the VECTOR data type (``*`` = any).
VECTOR_FORMATS = frozenset({"FLOAT32", "FLOAT64", "INT8", "BINARY"})
#: Storage of the VECTOR data type's optional third argument (23.7+).
VECTOR_STORAGE = frozenset({"DENSE", "SPARSE"})
#: ORGANIZATION clauses of CREATE VECTOR INDEX: HNSW (in-memory graph) and IVF (partitions).
VECTOR_ORGANIZATIONS = (("INMEMORY", "NEIGHBOR", "GRAPH"), ("NEIGHBOR", "PARTITIONS"))


class VectorDistance(exp.Expression, exp.Func):
    """Oracle ``VECTOR_DISTANCE(a, b[, metric])``; the metric is a keyword, kept as a Var, not a column."""

    arg_types = {"this": True, "expression": True, "metric": False}
    _sql_names = ["VECTOR_DISTANCE"]


class ApproxFetch(exp.Fetch):
    """Oracle 23ai ``FETCH APPROX[IMATE] FIRST|NEXT n ROW[S] ONLY [WITH TARGET ACCURACY ...]``.

    A subclass of Fetch, so code that looks for the row limit still finds it; the
    keywords are kept as written so the statement is generated back identically.
    """

    arg_types = {
        **exp.Fetch.arg_types,
        "approx": True,  # "APPROX" or "APPROXIMATE"
        "unit": False,  # "ROW" or "ROWS"
        "accuracy": False,  # WITH TARGET ACCURACY <n>
        "accuracy_parameters": False,  # WITH TARGET ACCURACY PARAMETERS (...)
    }


class CreateVectorIndex(exp.Expression):
    """Oracle 23ai ``CREATE VECTOR INDEX [IF NOT EXISTS] name ON table (col) [ORGANIZATION ...]
    [DISTANCE metric] [WITH TARGET ACCURACY n] [PARAMETERS (...)] [PARALLEL n]``."""

    arg_types = {
        "this": True,  # index name (Table, so schema.name works)
        "exists": False,
        "table": True,
        "expressions": True,  # indexed column(s)
        "organization": False,  # Var: "INMEMORY NEIGHBOR GRAPH" | "NEIGHBOR PARTITIONS"
        "distance": False,  # Var: metric
        "accuracy": False,
        "parameters": False,  # list of Var, one per comma-separated item
        "parallel": False,
    }


class _OracleTokenizer(Oracle.Tokenizer):
    # Oracle 23ai has pgvector's shorthand operators too (<-> is already Distance).
    KEYWORDS = {**Oracle.Tokenizer.KEYWORDS, **{op: tok for op, (tok, _) in _TOKENS.items() if op != "<+>"}}


class _OracleParser(Oracle.Parser):
    FACTOR = {**Oracle.Parser.FACTOR, **{tok: cls for op, (tok, cls) in _TOKENS.items() if op != "<+>"}}

    FUNCTION_PARSERS = {
        **Oracle.Parser.FUNCTION_PARSERS,
        "VECTOR_DISTANCE": lambda self: self._parse_vector_distance(),
    }

    def _parse_vector_metric(self) -> exp.Var:
        """A metric keyword; anything else (a typo, a column) is a parse error."""
        tok = self._curr
        if tok and tok.token_type in (TokenType.VAR, *self.ID_VAR_TOKENS) and tok.text.upper() in VECTOR_METRICS:
            self._advance()
            return exp.var(tok.text.upper())
        self.raise_error(f"Expected a vector distance metric ({', '.join(sorted(VECTOR_METRICS))})")
        return exp.var("")  # unreachable unless errors are collected

    def _parse_vector_distance(self) -> VectorDistance:
        this = self._parse_bitwise()
        if not self._match(TokenType.COMMA):
            self.raise_error("VECTOR_DISTANCE needs two vectors")
        expression = self._parse_bitwise()
        metric = self._parse_vector_metric() if self._match(TokenType.COMMA) else None
        if not self._match(TokenType.R_PAREN, advance=False):
            self.raise_error("Expecting ) after VECTOR_DISTANCE's arguments")
        return self.expression(VectorDistance(this=this, expression=expression, metric=metric))

    def _parse_types(
        self,
        check_func: bool = False,
        schema: bool = False,
        allow_identifiers: bool = True,
        with_collation: bool = False,
    ) -> exp.Expr | None:
        vector = self._parse_oracle_vector_type(check_func)
        if vector is not None:
            return vector
        return super()._parse_types(
            check_func=check_func, schema=schema, allow_identifiers=allow_identifiers, with_collation=with_collation
        )

    def _parse_oracle_vector_type(self, check_func: bool) -> exp.DataType | None:
        """``VECTOR(dim|*, [FLOAT32|FLOAT64|INT8|BINARY|*[, DENSE|SPARSE]])``.

        Stock sqlglot reads VECTOR's arguments Snowflake-style (element type
        first) and fails on ``384``. Only a first argument that is a number or
        ``*`` makes this a type; ``VECTOR('[1,2]', 2, FLOAT32)`` (the
        constructor function) is left to the normal function parsing.
        """
        cur, nxt = self._curr, self._next
        if not (cur and nxt and cur.token_type == TokenType.VECTOR and nxt.token_type == TokenType.L_PAREN):
            return None
        after = self._tokens[self._index + 2] if self._index + 2 < len(self._tokens) else None
        if after is None or after.token_type not in (TokenType.NUMBER, TokenType.STAR):
            return None
        index = self._index
        self._advance(3)
        dim: exp.Expr = exp.Star() if after.token_type == TokenType.STAR else exp.Literal.number(after.text)
        params = [exp.DataTypeParam(this=dim)]
        for allowed, what in ((VECTOR_FORMATS | {"*"}, "format"), (VECTOR_STORAGE, "storage")):
            if not self._match(TokenType.COMMA):
                break
            tok = self._curr
            if tok is None or tok.text.upper() not in allowed:
                self.raise_error(f"VECTOR {what} must be one of {', '.join(sorted(allowed))}")
                return None
            self._advance()
            params.append(exp.DataTypeParam(this=exp.Star() if tok.text == "*" else exp.var(tok.text.upper())))
        if not self._match(TokenType.R_PAREN):
            self.raise_error("Expecting ) to close VECTOR(...)")
            return None
        if check_func and not self._match(TokenType.STRING, advance=False):
            # In an expression, VECTOR(...) not followed by a string literal is a function call.
            self._retreat(index)
            return None
        return exp.DataType(this=exp.DType.VECTOR, expressions=params)

    def _parse_limit(
        self,
        this: exp.Expr | None = None,
        top: bool = False,
        skip_limit_token: bool = False,
    ) -> exp.Expr | None:
        cur, nxt = self._curr, self._next
        if (
            not skip_limit_token
            and cur
            and nxt
            and cur.token_type == TokenType.FETCH
            and nxt.text.upper() in ("APPROX", "APPROXIMATE")
        ):
            return self._parse_approx_fetch()
        return super()._parse_limit(this=this, top=top, skip_limit_token=skip_limit_token)

    def _parse_approx_fetch(self) -> ApproxFetch:
        self._advance()  # FETCH
        approx = self._curr.text.upper()
        self._advance()
        if not self._match_set((TokenType.FIRST, TokenType.NEXT)):
            self.raise_error("Expected FIRST or NEXT after FETCH APPROX")
        direction = self._prev.text.upper()
        count = None
        if not self._match_texts(("ROW", "ROWS"), advance=False):
            count = self._parse_field(tokens=self.FETCH_TOKENS)
        if not self._match_texts(("ROW", "ROWS")):
            self.raise_error("Expected ROW or ROWS in FETCH APPROX")
        unit = self._prev.text.upper()
        if not self._match_text_seq("ONLY"):
            self.raise_error("FETCH APPROX needs ROWS ONLY (WITH TIES / PERCENT are not approximate)")
        accuracy = parameters = None
        if self._match_text_seq("WITH", "TARGET", "ACCURACY"):
            if self._match_text_seq("PARAMETERS"):
                parameters = self._parse_oracle_parameters()
            else:
                accuracy = self._parse_field(tokens=self.FETCH_TOKENS)
                if accuracy is None:
                    self.raise_error("Expected a percentage after WITH TARGET ACCURACY")
        return self.expression(
            ApproxFetch(
                direction=direction,
                count=count,
                approx=approx,
                unit=unit,
                accuracy=accuracy,
                accuracy_parameters=parameters,
            )
        )

    def _parse_oracle_parameters(self) -> list[exp.Expr]:
        """``( item, item, ... )`` where each item is words and numbers, e.g. ``TYPE HNSW, NEIGHBORS 32``."""
        if not self._match(TokenType.L_PAREN):
            self.raise_error("Expected ( after PARAMETERS")
        items: list[exp.Expr] = []
        words: list[str] = []
        while self._curr and self._curr.token_type != TokenType.R_PAREN:
            if self._curr.token_type == TokenType.COMMA:
                if not words:
                    self.raise_error("Empty item in PARAMETERS (...)")
                items.append(exp.var(" ".join(words)))
                words = []
            elif self._curr.token_type == TokenType.L_PAREN:
                self.raise_error("Nested parentheses in PARAMETERS (...)")
            else:
                words.append(self._curr.text)
            self._advance()
        if not self._match(TokenType.R_PAREN) or not words:
            self.raise_error("Expected item and ) to close PARAMETERS (...)")
        items.append(exp.var(" ".join(words)))
        return items

    def _parse_create(self) -> exp.Create | exp.Command:
        cur, nxt = self._curr, self._next
        if cur and nxt and cur.text.upper() == "VECTOR" and nxt.token_type == TokenType.INDEX:
            return self._parse_create_vector_index()  # type: ignore[return-value]
        return super()._parse_create()

    def _parse_create_vector_index(self) -> CreateVectorIndex:
        self._advance(2)  # VECTOR INDEX
        exists = self._parse_exists(not_=True)
        name = self._parse_table_parts(schema=True)
        if not self._match(TokenType.ON):
            self.raise_error("Expected ON in CREATE VECTOR INDEX")
        table = self._parse_table_parts(schema=True)
        columns = self._parse_wrapped_csv(self._parse_column)
        organization = distance = accuracy = parameters = parallel = None
        if self._match_text_seq("ORGANIZATION"):
            for words in VECTOR_ORGANIZATIONS:
                if self._match_text_seq(*words):
                    organization = exp.var(" ".join(words))
                    break
            else:
                self.raise_error("Expected INMEMORY NEIGHBOR GRAPH or NEIGHBOR PARTITIONS after ORGANIZATION")
        if self._match_text_seq("DISTANCE"):
            distance = self._parse_vector_metric()
        if self._match_text_seq("WITH", "TARGET", "ACCURACY"):
            accuracy = self._parse_number()
            if accuracy is None:
                self.raise_error("Expected a percentage after WITH TARGET ACCURACY")
        if self._match_text_seq("PARAMETERS"):
            parameters = self._parse_oracle_parameters()
        if self._match_text_seq("PARALLEL"):
            parallel = self._parse_number() or exp.true()
        return self.expression(
            CreateVectorIndex(
                this=name,
                exists=exists,
                table=table,
                expressions=columns,
                organization=organization,
                distance=distance,
                accuracy=accuracy,
                parameters=parameters,
                parallel=parallel,
            )
        )


class _OracleGenerator(Oracle.Generator):
    def vectordistance_sql(self, e: VectorDistance) -> str:
        return self.func("VECTOR_DISTANCE", e.this, e.expression, e.args.get("metric"))

    def approxfetch_sql(self, e: ApproxFetch) -> str:
        count = self.sql(e, "count")
        count = f" {count}" if count else ""
        target = ""
        if e.args.get("accuracy_parameters"):
            target = f" WITH TARGET ACCURACY PARAMETERS ({self.expressions(e, key='accuracy_parameters', flat=True)})"
        elif e.args.get("accuracy"):
            target = f" WITH TARGET ACCURACY {self.sql(e, 'accuracy')}"
        return (
            f"{self.seg('FETCH')} {e.args['approx']} {e.args.get('direction') or 'FIRST'}{count}"
            f" {e.args.get('unit') or 'ROWS'} ONLY{target}"
        )

    def createvectorindex_sql(self, e: CreateVectorIndex) -> str:
        parts = ["CREATE VECTOR INDEX"]
        if e.args.get("exists"):
            parts.append("IF NOT EXISTS")
        parts += [self.sql(e, "this"), "ON", f"{self.sql(e, 'table')} ({self.expressions(e, flat=True)})"]
        if e.args.get("organization"):
            parts.append(f"ORGANIZATION {self.sql(e, 'organization')}")
        if e.args.get("distance"):
            parts.append(f"DISTANCE {self.sql(e, 'distance')}")
        if e.args.get("accuracy"):
            parts.append(f"WITH TARGET ACCURACY {self.sql(e, 'accuracy')}")
        if e.args.get("parameters"):
            parts.append(f"PARAMETERS ({self.expressions(e, key='parameters', flat=True)})")
        parallel = e.args.get("parallel")
        if parallel is not None:
            parts.append("PARALLEL" if isinstance(parallel, exp.Boolean) else f"PARALLEL {self.sql(parallel)}")
        return " ".join(parts)

    def lateral_op(self, expression: exp.Lateral) -> str:
        """CROSS APPLY / OUTER APPLY as written: stock sqlglot writes them as INNER / LEFT JOIN LATERAL."""
        apply = expression.args.get("cross_apply")
        if apply is None:
            return "LATERAL"
        return "CROSS APPLY" if apply else "OUTER APPLY"

    def lateral_sql(self, expression: exp.Lateral) -> str:
        """A lateral inline view's alias without AS, which Oracle refuses there (stock sqlglot writes AS)."""
        if expression.args.get("view") or expression.args.get("ordinality"):
            return super().lateral_sql(expression)
        alias = self.sql(expression, "alias")
        return f"{self.lateral_op(expression)} {self.sql(expression, 'this')}{' ' + alias if alias else ''}"

    # Custom classes are not in sqlglot's name registry, so dispatch goes through TRANSFORMS.
    TRANSFORMS = {
        **Oracle.Generator.TRANSFORMS,
        VectorDistance: vectordistance_sql,
        ApproxFetch: approxfetch_sql,
        CreateVectorIndex: createvectorindex_sql,
        CosineDistance: lambda self, e: self.binary(e, "<=>"),
        NegativeInnerProduct: lambda self, e: self.binary(e, "<#>"),
    }


class Oracle23ai(Oracle):
    """Oracle Database 23ai: VECTOR type, VECTOR_DISTANCE, FETCH APPROX, CREATE VECTOR INDEX."""

    Tokenizer = _OracleTokenizer
    Parser = _OracleParser
    Generator = _OracleGenerator


# --------------------------------------------------------------------------- parsing and checks

_VECTOR_OPS = re.compile(r"<=>|<#>|<\+>|<->")
_NULLSAFE = re.compile(r"IS\s+NOT\s+DISTINCT\s+FROM", re.IGNORECASE)


def dialect_for(name: str) -> type[sqlglot.Dialect]:
    """The sqlglot dialect class used for one of onetrip's editions."""
    if name == "postgres":
        return PgVectorPostgres
    if name == "oracle":
        return Oracle23ai
    raise ValueError(f"unknown dialect {name!r}: expected 'postgres' or 'oracle'")


# One pass, leftmost match first: an apostrophe inside a comment ("a document's")
# must not open a string, and "--" inside a string must not open a comment.
_LEXEMES = re.compile(
    r"(?P<qstr>(?<![\w$])[nN]?[qQ]'(?:\[.*?\]|\{.*?\}|\(.*?\)|<.*?>|(?P<qd>[^\s\[{(<]).*?(?P=qd))')"
    r"|(?P<str>'(?:[^']|'')*')"
    r"|(?P<line>--[^\n]*)"
    r"|(?P<hint>/\*\+.*?\*/)"
    r"|(?P<block>/\*.*?\*/)",
    re.DOTALL,
)


def _scrub(sql: str, keep_hints: bool = False) -> str:
    """Blank out string literals ('' left) and comments; optionally keep ``/*+ hints */``."""

    def repl(m: re.Match[str]) -> str:
        if m.group("qstr") or m.group("str"):
            return "''"
        if m.group("hint") and keep_hints:
            return m.group("hint")
        return " "

    return _LEXEMES.sub(repl, sql)


def _strip_comments_and_strings(sql: str) -> str:
    return _scrub(sql)


@dataclass(frozen=True)
class CheckedStatement:
    """One statement as rendered, with sqlglot's parse of it."""

    sql: str
    tree: exp.Expression
    roundtrip: str | None  # sqlglot's regeneration of the tree (PostgreSQL and Oracle)
    # True when sqlglot has no grammar for the statement and kept it as an opaque
    # exp.Command (e.g. CREATE EXTENSION, a PL/SQL block): nothing inside was checked.
    opaque: bool = False
    # For an Oracle SQL macro: the query in its quoted return string, parsed on its own; for a VPD policy
    # function, the predicate it returns, parsed as the WHERE of SELECT 1 FROM dual.
    inner: CheckedStatement | None = None


def parse_statements(sql: str, dialect: str) -> list[CheckedStatement]:
    """Parse every statement in ``sql``; raise SqlValidationError naming the failure.

    Statements sqlglot can only keep as an opaque ``Command`` (it has no grammar
    for them, e.g. PostgreSQL's CREATE EXTENSION or an Oracle PL/SQL block) are
    accepted but flagged with ``opaque``, so callers can pin exactly which ones
    those are. An Oracle SQL macro is opaque, but the query it returns is parsed
    (``inner``) and must parse.
    """
    if dialect == "oracle":
        return [_parse_oracle_piece(piece, is_plsql) for piece, is_plsql in _split_oracle(sql)]
    d = dialect_for(dialect)
    try:
        trees = sqlglot.parse(sql, read=d)
    except ParseError as e:
        raise SqlValidationError(f"{dialect} SQL does not parse: {e}") from e
    pieces = [p for p in split_statements(sql, dialect)]
    trees = [t for t in trees if t is not None and not isinstance(t, exp.Semicolon)]  # comment-only tails
    if len(pieces) != len(trees):
        raise SqlValidationError(
            f"{dialect} SQL: split into {len(pieces)} statements but sqlglot parsed {len(trees)}"
        )
    out = []
    for piece, tree in zip(pieces, trees):
        out.append(CheckedStatement(piece, tree, tree.sql(dialect=d), opaque=isinstance(tree, exp.Command)))
    return out


def _parse_oracle_piece(piece: str, is_plsql: bool) -> CheckedStatement:
    """One Oracle statement; a PL/SQL block becomes a Command without going near the SQL parser."""
    if is_plsql:
        first = Oracle23ai().tokenize(piece)[0]
        tree = exp.Command(this=first.text.upper(), expression=" " + piece[first.end + 1 :].strip())
        tree.add_comments(first.comments)
        inner = None
        code = _scrub(piece)  # the block without its strings and comments: what decides which kind it is
        if re.search(r"\bSQL_MACRO\b", code, re.IGNORECASE):
            query = extract_oracle_macro_query(piece)
            if query.endswith(";"):
                raise SqlValidationError(f"a SQL macro's query must not end with ';': {query[-120:]}")
            inner = _parse_oracle_piece(query, False)
            if inner.opaque:
                raise SqlValidationError(f"the query of a SQL macro is opaque to sqlglot: {query[:200]}")
        elif _POLICY_FUNCTION.search(code):
            predicate = extract_oracle_policy_predicate(piece)
            if ";" in _scrub(predicate):
                raise SqlValidationError(f"a policy predicate must be one condition, without ';': {predicate[:200]}")
            inner = _parse_oracle_piece(f"SELECT 1 FROM dual WHERE {predicate}", False)
            if inner.opaque or not isinstance(inner.tree, exp.Select):
                raise SqlValidationError(f"a policy function's predicate is not one condition: {predicate[:200]}")
        return CheckedStatement(piece, tree, tree.sql(dialect=Oracle23ai), opaque=True, inner=inner)
    try:
        trees = [t for t in sqlglot.parse(piece, read=Oracle23ai) if t is not None]
    except (ParseError, TokenError) as e:
        raise SqlValidationError(f"oracle SQL does not parse: {e}\nin: {piece[:300]}") from e
    if len(trees) != 1:
        raise SqlValidationError(f"oracle SQL: expected one statement, sqlglot parsed {len(trees)} in: {piece[:200]}")
    tree = trees[0]
    return CheckedStatement(piece, tree, tree.sql(dialect=Oracle23ai), opaque=isinstance(tree, exp.Command))


def split_statements(sql: str, dialect: str = "postgres") -> list[str]:
    """Split a script on top-level semicolons using sqlglot's tokenizer.

    Dollar-quoted function bodies and string literals stay whole. For Oracle the
    script is read as SQL*Plus does: a PL/SQL block (CREATE [OR REPLACE]
    FUNCTION/PROCEDURE/PACKAGE/TRIGGER/TYPE, DECLARE, BEGIN) runs up to a line
    holding only ``/`` and is one statement, whatever semicolons it contains.
    """
    if dialect == "oracle":
        return [piece for piece, _ in _split_oracle(sql)]
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


_PLSQL_UNITS = {"FUNCTION", "PROCEDURE", "PACKAGE", "TRIGGER", "TYPE"}


def _starts_plsql(tokens: list[Token], i: int) -> bool:
    """Does the statement starting at tokens[i] open a PL/SQL block (as SQL*Plus decides)?"""
    words = [t.text.upper() for t in tokens[i : i + 5]]
    if not words:
        return False
    if words[0] in ("DECLARE", "BEGIN"):
        return True
    if words[0] != "CREATE":
        return False
    rest = words[1:]
    if rest[:2] == ["OR", "REPLACE"]:
        rest = rest[2:]
    if rest[:1] in (["EDITIONABLE"], ["NONEDITIONABLE"]):
        rest = rest[1:]
    return bool(rest) and rest[0] in _PLSQL_UNITS


def _is_slash_line(sql: str, tok: Token) -> bool:
    """A ``/`` token alone on its line: SQL*Plus's "run the buffer"."""
    if tok.token_type != TokenType.SLASH:
        return False
    line_start = sql.rfind("\n", 0, tok.start) + 1
    line_end = sql.find("\n", tok.end + 1)
    return sql[line_start : line_end if line_end != -1 else len(sql)].strip() == "/"


def _split_oracle(sql: str) -> list[tuple[str, bool]]:
    """(statement, is_plsql) pairs of a SQL*Plus script; the ``/`` lines themselves are dropped."""
    try:
        tokens = Oracle23ai().tokenize(sql)
    except TokenError as e:
        raise SqlValidationError(f"oracle SQL does not tokenize: {e}") from e
    out: list[tuple[str, bool]] = []
    lines = sql.splitlines()  # as SQL*Plus reads the script (`_check_sqlplus_lines`)
    start = 0  # character offset where the current statement begins
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if _starts_plsql(tokens, i):
            j = next((k for k in range(i, len(tokens)) if _is_slash_line(sql, tokens[k])), None)
            if j is None:
                raise SqlValidationError(
                    f"PL/SQL block at line {tok.line} is not ended by a line holding only '/':"
                    f" SQL*Plus would never run it: {sql[tok.start : tok.start + 120]}"
                )
            out.append((sql[start : tokens[j].start].strip(), True))
            start, i = tokens[j].end + 1, j + 1
            continue
        # A plain statement: up to ';' or a '/' line (which runs an unterminated buffer).
        j = i
        while j < len(tokens) and tokens[j].token_type != TokenType.SEMICOLON and not _is_slash_line(sql, tokens[j]):
            j += 1
        if j == i and j < len(tokens) and _is_slash_line(sql, tokens[j]):
            raise SqlValidationError(
                f"line {tokens[j].line}: a '/' line after a statement ended by ';' makes SQL*Plus run it twice"
            )
        end = tokens[j].start if j < len(tokens) else len(sql)
        _check_sqlplus_lines(lines, tok.line, tokens[j].line if j < len(tokens) else tokens[-1].line + 1)
        piece = sql[start:end].strip()
        if _scrub(piece).strip():
            out.append((piece, False))
        start = tokens[j].end + 1 if j < len(tokens) else len(sql)
        i = j + 1
    tail = sql[start:].strip()
    if _scrub(tail).strip():
        out.append((tail, False))
    return out


def _check_sqlplus_lines(lines: list[str], first: int, last: int) -> None:
    """Refuse a line SQL*Plus would end a plain statement at before its ';' (lines ``first`` to ``last``, from 1).

    SQL*Plus reads a script line by line and does not parse SQL: a line ending in ';' runs the buffer even when
    that ';' sits in a ``--`` comment or a string, and (SQLBLANKLINES OFF, the default) a blank line ends the
    statement unrun. Either way the rest of the statement then runs as a broken statement of its own.
    """
    for n in range(first, min(last, len(lines) + 1)):
        text = lines[n - 1]
        if not text.strip():
            raise SqlValidationError(f"line {n}: a blank line inside a statement ends it in SQL*Plus")
        if text.rstrip().endswith(";"):
            raise SqlValidationError(
                f"line {n}: ends in ';' inside a statement (in a comment or a string), which SQL*Plus takes as the"
                f" statement's end: {text.strip()[:80]}"
            )


#: The signature Oracle requires of a Virtual Private Database policy function (DBMS_RLS.ADD_POLICY's
#: policy_function): two VARCHAR2 parameters, the object's schema and name, and a VARCHAR2 predicate.
_POLICY_FUNCTION = re.compile(
    r"\bFUNCTION\s+[\w.$#]+\s*\(\s*\w+\s+(?:IN\s+)?VARCHAR2\s*,\s*\w+\s+(?:IN\s+)?VARCHAR2\s*\)"
    r"\s*RETURN\s+VARCHAR2\b",
    re.IGNORECASE,
)


def extract_oracle_macro_query(sql: str) -> str:
    """The query text of an Oracle SQL macro: its ``RETURN q'~ ... ~'`` (or ``q'[ ... ]'``, ``'...'``) string.

    A SQL macro is PL/SQL, so sqlglot keeps it opaque; its query is what Oracle
    expands into the caller's statement, so that is what must be parsed.
    Raises SqlValidationError if ``sql`` is not a SQL macro returning one literal.
    """
    tokens = _tokens(sql)
    if not any(t.text.upper() == "SQL_MACRO" and t.token_type == TokenType.VAR for t in tokens):
        raise SqlValidationError("not a SQL macro (no SQL_MACRO clause)")
    return _returned_literal(tokens, "the SQL macro", "query")


def extract_oracle_policy_predicate(sql: str) -> str:
    """The predicate text a VPD policy function returns: its one ``RETURN q'~ ... ~'`` string.

    The function is PL/SQL, so sqlglot keeps it opaque; its predicate is what Oracle adds to every query of
    the protected table, so that is what must be parsed. Raises SqlValidationError if ``sql`` is not a
    policy function (see `_POLICY_FUNCTION`) returning one literal.
    """
    if not _POLICY_FUNCTION.search(_scrub(sql)):
        raise SqlValidationError("not a VPD policy function ((VARCHAR2, VARCHAR2) RETURN VARCHAR2)")
    return _returned_literal(_tokens(sql), "the policy function", "predicate")


def _tokens(sql: str) -> list[Token]:
    try:
        return Oracle23ai().tokenize(sql)
    except TokenError as e:
        raise SqlValidationError(f"oracle SQL does not tokenize: {e}") from e


def _returned_literal(tokens: list[Token], unit: str, what: str) -> str:
    """The one quoted string a PL/SQL function RETURNs; a built (concatenated) text cannot be checked."""
    strings = (TokenType.RAW_STRING, TokenType.STRING, TokenType.NATIONAL_STRING)
    found: list[str] = []
    for k in range(1, len(tokens)):
        prev, tok = tokens[k - 1], tokens[k]
        if prev.text.upper() == "RETURN" and tok.token_type in strings:
            after = tokens[k + 1] if k + 1 < len(tokens) else None
            if after is None or after.token_type != TokenType.SEMICOLON:
                raise SqlValidationError(
                    f"line {tok.line}: {unit} builds its {what} dynamically; only a literal can be checked"
                )
            found.append(tok.text)
    if len(found) != 1:
        raise SqlValidationError(f"expected one RETURN of a quoted {what} in {unit}, found {len(found)}")
    return found[0].strip()


def assert_vector_ops_kept(source: str, regenerated: str) -> None:
    """Raise SqlValidationError if the vector operators differ, or IS NOT DISTINCT FROM appeared."""
    before = _VECTOR_OPS.findall(_strip_comments_and_strings(source))
    after = _VECTOR_OPS.findall(_strip_comments_and_strings(regenerated))
    if before != after:
        raise SqlValidationError(f"sqlglot changed the vector operators {before} into {after} in: {source[:200]}")
    if len(_NULLSAFE.findall(_scrub(regenerated))) > len(_NULLSAFE.findall(_scrub(source))):
        raise SqlValidationError(f"sqlglot introduced IS NOT DISTINCT FROM in: {source[:200]}")


def check_roundtrip(sql: str) -> list[CheckedStatement]:
    """Parse PostgreSQL SQL and prove sqlglot keeps every vector operator as written."""
    checked = parse_statements(sql, "postgres")
    for st in checked:
        assert st.roundtrip is not None
        if isinstance(st.tree, exp.Command):
            continue
        assert_vector_ops_kept(st.sql, st.roundtrip)
    return checked


def _norm(text: str) -> str:
    """Upper case, whitespace collapsed, no blanks around ( ) , -- for comparing constructs."""
    text = re.sub(r"\s+", " ", text.upper()).strip()
    return re.sub(r"\s*([(),])\s*", r"\1", text)


_QUOTED = re.compile(r"'(?:[^']|'')*'" r'|"[^"]*"')


def _norm_keep_quoted(text: str) -> str:
    """`_norm` outside string literals and quoted identifiers, which keep their case and blanks: a JSON path
    ('$[*]?(@ == $p)') and a PASSING name ("p") are case-sensitive in Oracle."""

    def bare(part: str) -> str:
        return re.sub(r"\s*([(),])\s*", r"\1", re.sub(r"\s+", " ", part.upper()))

    out, at = [], 0
    for m in _QUOTED.finditer(text):
        out += [bare(text[at:m.start()]), m.group(0)]
        at = m.end()
    out.append(bare(text[at:]))
    return "".join(out).strip()


def _call_spans(sql: str, name: str) -> list[tuple[int, int]]:
    """(start, end) of every ``name(...)`` call with balanced parentheses (strings and comments masked)."""
    out = []
    for m in re.finditer(rf"\b{name}\s*\(", sql, re.IGNORECASE):
        depth, k = 0, m.end() - 1
        while k < len(sql):
            depth += {"(": 1, ")": -1}.get(sql[k], 0)
            if depth == 0:
                break
            k += 1
        out.append((m.start(), k + 1))
    return out


def _calls(sql: str, name: str) -> list[str]:
    """Every ``name(...)`` call with balanced parentheses (strings and comments already scrubbed)."""
    return [sql[a:b] for a, b in _call_spans(sql, name)]


_ORACLE_PATTERNS: dict[str, re.Pattern[str]] = {
    "VECTOR type": re.compile(r"\bVECTOR\s*\(\s*(?:\d+|\*)\s*(?:,\s*(?:\w+|\*)\s*){0,2}\)", re.IGNORECASE),
    "FETCH APPROX": re.compile(
        r"\bFETCH\s+APPROX(?:IMATE)?\s+(?:FIRST|NEXT)\b.*?\bROWS?\s+ONLY"
        r"(?:\s+WITH\s+TARGET\s+ACCURACY\s+(?:PARAMETERS\s*\([^)]*\)|\S+))?",
        re.IGNORECASE | re.DOTALL,
    ),
    "hint": re.compile(r"/\*\+.*?\*/", re.DOTALL),
    "IF NOT EXISTS": re.compile(r"\bIF\s+NOT\s+EXISTS\b", re.IGNORECASE),
    "ORGANIZATION": re.compile(
        r"\bORGANIZATION\s+(?:INMEMORY\s+NEIGHBOR\s+GRAPH|NEIGHBOR\s+PARTITIONS)\b", re.IGNORECASE
    ),
    "DISTANCE": re.compile(rf"\bDISTANCE\s+(?:{'|'.join(sorted(VECTOR_METRICS))})\b", re.IGNORECASE),
    "TARGET ACCURACY": re.compile(r"\bWITH\s+TARGET\s+ACCURACY\s+\S+", re.IGNORECASE),
    "vector operator": _VECTOR_OPS,
    # retrieve_many.sql's per-query search: CROSS APPLY must not come back as INNER JOIN LATERAL (and AS)
    "APPLY": re.compile(r"\b(?:CROSS|OUTER)\s+APPLY\b", re.IGNORECASE),
    "LATERAL": re.compile(r"\bLATERAL\b", re.IGNORECASE),
}
_BIND = re.compile(r"(?<![:\w]):([A-Za-z_][\w$#]*)")


def _json_calls(sql: str, name: str) -> list[str]:
    """Every ``name(...)`` call WITH its string literals (a JSON path is a literal that matters), comments
    dropped: the parentheses are matched on a copy whose strings are masked to the same length."""

    def keep(m: re.Match[str]) -> str:
        return m.group(0) if m.group("qstr") or m.group("str") else " " * len(m.group(0))

    def mask(m: re.Match[str]) -> str:
        return "'" + "x" * (len(m.group(0)) - 2) + "'" if m.group("qstr") or m.group("str") else " " * len(m.group(0))

    text = _LEXEMES.sub(keep, sql)
    return [text[a:b] for a, b in _call_spans(_LEXEMES.sub(mask, sql), name)]


def oracle_constructs(sql: str) -> dict[str, Counter[str]]:
    """The Oracle-specific constructs in ``sql`` (outside strings and comments), normalised and counted.

    JSON_TABLE and JSON_EXISTS calls (the SQL macro's collection and access filters) are kept with their
    string literals: a lost ERROR ON ERROR, PASSING clause or changed path is a changed filter; so are
    JSON_VALUE calls (assemble.sql's split-part numbers: path and RETURNING type). BIT_OR_AGG (assemble.sql)
    and TO_VECTOR are counted too: sqlglot must not rewrite them into other functions; so are CROSS / OUTER
    APPLY and LATERAL (retrieve_many.sql), which stock sqlglot writes as INNER / LEFT JOIN LATERAL."""
    text = _scrub(sql, keep_hints=True)
    found = {name: Counter(_norm(m.group(0)) for m in pat.finditer(text)) for name, pat in _ORACLE_PATTERNS.items()}
    found["hint"] = Counter(_norm(h[3:-2]) for h in _ORACLE_PATTERNS["hint"].findall(text))
    found["VECTOR_DISTANCE"] = Counter(_norm(c) for c in _calls(text, "VECTOR_DISTANCE"))
    # assemble.sql's role bits OR-ed by BIT_OR_AGG; and retrieve_many.sql's query vectors, made by TO_VECTOR
    # outside any VECTOR_DISTANCE
    for fn in ("BIT_OR_AGG", "TO_VECTOR"):
        found[fn] = Counter(_norm(c) for c in _calls(text, fn))
    for fn in ("JSON_TABLE", "JSON_EXISTS", "JSON_VALUE"):
        found[fn] = Counter(_norm_keep_quoted(c) for c in _json_calls(sql, fn))
    found["bind"] = Counter({b.upper(): 1 for b in _BIND.findall(_scrub(sql))})  # the set of names
    return found


def assert_oracle_constructs_kept(source: str, regenerated: str) -> None:
    """Raise SqlValidationError naming each Oracle-specific construct sqlglot dropped or rewrote."""
    before, after = oracle_constructs(source), oracle_constructs(regenerated)
    problems = [
        f"{name}: {dict(before[name])} became {dict(after[name])}" for name in before if before[name] != after[name]
    ]
    if len(_NULLSAFE.findall(_scrub(regenerated))) > len(_NULLSAFE.findall(_scrub(source))):
        problems.append("IS NOT DISTINCT FROM introduced")
    if problems:
        raise SqlValidationError("sqlglot changed Oracle constructs: " + "; ".join(problems) + f" in: {source[:200]}")


def check_oracle_roundtrip(sql: str) -> list[CheckedStatement]:
    """Parse Oracle 23ai SQL and prove each non-opaque statement (and each SQL macro's query)
    keeps its Oracle-specific constructs through sqlglot's regeneration."""
    checked = parse_statements(sql, "oracle")
    for st in checked:
        for target in (st, st.inner):
            if target is None or target.opaque:
                continue
            assert target.roundtrip is not None
            assert_oracle_constructs_kept(target.sql, target.roundtrip)
    return checked


_PSQL_VAR = re.compile(r"(?<![:\w]):(?:'([a-z_][a-z0-9_]*)'|\"([a-z_][a-z0-9_]*)\"|([a-z_][a-z0-9_]*))")


def psql_vars_to_binds(sql: str) -> str:
    """Turn psql variables (``:'name'``, ``:name``) into ``%(name)s`` binds.

    sqlglot has no grammar for psql's client-side interpolation; the rendered
    psql edition is checked after this substitution, which changes nothing else.
    Casts (``::vector``) are left alone by the look-behind.
    """
    return _PSQL_VAR.sub(lambda m: "%(" + (m.group(1) or m.group(2) or m.group(3)) + ")s", sql)
