"""Render the Jinja SQL templates under ``sql/templates`` for one dialect.

The templates are the single source of onetrip's SQL. Python renders them with
psycopg binds (``%(name)s``) and runs the result; ``onetrip sql render`` writes
the same templates with quoted psql variables (``:'name'``, cast to their type) or Oracle binds
(``:name``) into ``sql/postgres``, ``sql/oracle`` and ``sql/citus`` for DBAs.

Rules that keep the output safe and predictable:
- StrictUndefined: a missing template variable is an error, not an empty string.
- Identifiers come only from a validated `Layout`; they are never user text.
- Values are never rendered: templates can only emit bind placeholders via
  ``param(name, kind)``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jinja2

from .context import ROLE_BITS
from .identifiers import quote_ident, validate_identifier
from .layout import DEFAULT_DIM, MAX_DIM, VECTOR_TYPES, Layout  # noqa: F401 (importable from here, as before)

Dialect = Literal["postgres", "oracle"]
BindStyle = Literal["psycopg", "psql", "oracle", "function"]


def templates_dir() -> Path:
    """Where the .sql.j2 files live: inside the wheel, or in the source checkout."""
    packaged = Path(__file__).with_name("sql_templates")
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "sql" / "templates"
    if source.is_dir():
        return source
    raise FileNotFoundError(f"SQL templates not found in {packaged} or {source}")


#: The text search configuration of the tsv column and of query words. Fixed, not a Layout field: a table
#: built with another one would be searched with this one (a Retriever reads its layout from the catalog).
TEXT_CONFIG = "english"


def _param_renderer(binds: BindStyle, dialect: Dialect, vector_type: str = "vector", function: str = ""):
    """Return ``param(name, kind)``: the placeholder for one bind value.

    Inside a PL/pgSQL function body a parameter is qualified by the function's name: a
    column of the same name (one added to sections later, say) can then never stand in for
    it, as it would under ``#variable_conflict use_column``. An Oracle SQL macro's
    parameters are substituted by their bare names."""

    def param(name: str, kind: str = "text") -> str:
        validate_identifier(name, "bind parameter name")
        if binds == "function":  # inside a function body: the parameter's own name
            return f"{function}.{name}" if dialect == "postgres" and function else name
        if binds == "psycopg":
            # an array of vectors is sent in binary (%b): psycopg's text list dumper formats
            # every float through pgvector's text dumper, ~0.7 ms per 384-d query vector
            ph = f"%({name})b" if kind == "vector[]" else f"%({name})s"
        elif binds == "psql":
            # quoted, then cast: psql pastes a bare :k as it is, so -v k='1; DROP TABLE ...' would run;
            # a number given as text is read by its type, anything else is an error naming the value.
            # float8, not numeric: -v dense_weight=1 would otherwise be an integer, 1 / (60 + rank) is 0
            ph = f":'{name}'"
            if kind in ("int", "float") and dialect == "postgres":
                ph += "::integer" if kind == "int" else "::float8"
        else:
            ph = f":{name}"
        if dialect == "postgres" and kind == "vector":
            return f"{ph}::{vector_type}"
        if dialect == "postgres" and kind == "vector[]":
            return f"{ph}::{vector_type}[]"
        if dialect == "postgres" and kind in ("text[]", "jsonb"):
            return f"{ph}::{kind}"
        return ph

    return param


class _Dispatcher:
    """dbt-style dispatch: ``dispatch.distance`` is ``<dialect>__distance``."""

    def __init__(self, module: Any, dialect: Dialect) -> None:
        self._module = module
        self._dialect = dialect

    def __getattr__(self, name: str) -> Any:
        macro = getattr(self._module, f"{self._dialect}__{name}", None)
        if macro is None:
            raise jinja2.UndefinedError(f"no macro {self._dialect}__{name} in macros.sql.j2")
        return macro


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )


EDITIONS = {"postgres": "PostgreSQL", "oracle": "Oracle Database 23ai"}

#: Filter switches a template understands; which are on changes the SQL shape,
#: their values are always binds.
FILTER_KEYS = ("collections", "principals", "doc_ids", "source_prefix", "metadata")


def _raise(message: str) -> None:
    """A template's refusal of an option it cannot render (e.g. halfvec for Oracle): a bad value, so a
    ValueError (the CLI's one-line exit 2), not jinja2's TemplateError."""
    raise ValueError(message)


def render(
    name: str,
    *,
    layout: Layout = Layout(),
    dialect: Dialect = "postgres",
    binds: BindStyle | None = None,
    header: bool = False,
    **options: Any,
) -> str:
    """Render template ``name`` (without ``.sql.j2``) to SQL text.

    ``options`` are the per-call switches a template reads (include_parent, ...);
    they change the statement's shape, never its values.
    """
    if dialect not in EDITIONS:
        raise ValueError(f"unknown dialect {dialect!r}: expected one of {sorted(EDITIONS)}")
    if binds is None:
        binds = "psycopg" if dialect == "postgres" else "oracle"
    env = _environment()
    base: dict[str, Any] = {
        "dialect": dialect,
        "edition": EDITIONS[dialect],
        "dim": layout.dim,
        "schema": layout.schema,
        "schema_q": quote_ident(layout.schema) if layout.schema else None,
        "prefix": layout.prefix,
        "text_config": TEXT_CONFIG,
        "t": layout.tables,
        "names": layout.names,
        "header": header,
        "param": _param_renderer(binds, dialect, layout.vector_type, layout.names["retrieve_function_name"]),
        "vector_type": layout.vector_type,
        "partition": layout.partition,
        "partitions": layout.partitions,
        "hnsw_m": layout.hnsw_m,
        "hnsw_ef_construction": layout.hnsw_ef_construction,
        "binds": binds,
        # onetrip's own statements, which psycopg prepares: the templates hide bind values the planner
        # could count (OFFSET 0 fences) so that a prepared statement keeps one generic plan
        "prepared": binds == "psycopg",
        "many": False,
        "filters": {key: bool((options.get("filters") or {}).get(key)) for key in FILTER_KEYS},
        "mode": "dense",
        "k_bucket": None,
        "k_exact": False,
        "hit_rank": True,
        "role_bits": ROLE_BITS,
        "raise": _raise,
    }
    macros = env.get_template("macros.sql.j2").make_module(base)
    options.pop("filters", None)
    context = {**base, "dispatch": _Dispatcher(macros, dialect), **options}
    sql = env.get_template(f"{name}.sql.j2").render(context)
    return sql.strip() + "\n"
