"""Render the Jinja SQL templates under ``sql/templates`` for one dialect.

The templates are the single source of onetrip's SQL. Python renders them with
psycopg binds (``%(name)s``) and runs the result; ``onetrip sql render`` writes
the same templates with psql variables (``:'name'``) or Oracle binds
(``:name``) into ``sql/postgres``, ``sql/oracle`` and ``sql/citus`` for DBAs.

Rules that keep the output safe and predictable:
- StrictUndefined: a missing template variable is an error, not an empty string.
- Identifiers come only from a validated `Layout`; they are never user text.
- Values are never rendered: templates can only emit bind placeholders via
  ``param(name, kind)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jinja2

from .context import ROLE_BITS
from .identifiers import quote_ident, validate_identifier, validate_prefix

Dialect = Literal["postgres", "oracle"]
BindStyle = Literal["psycopg", "psql", "oracle", "function"]

DEFAULT_DIM = 384
MAX_DIM = 16000  # pgvector's hard limit for the vector type
VECTOR_TYPES = ("vector", "halfvec")


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


@dataclass(frozen=True)
class Layout:
    """Where onetrip's tables live and how wide their embeddings are."""

    dim: int = DEFAULT_DIM
    schema: str | None = None
    prefix: str = ""
    vector_type: str = "vector"   # "halfvec": 16-bit floats, half the table and index size
    partitions: int = 0           # > 0: sections hash-partitioned by doc_id into this many partitions
    # HNSW build parameters (pgvector's defaults). A larger ef_construction builds a better graph:
    # on the clustered 100k benchmark corpus recall@10 at ef_search=100 goes 0.89 -> 1.00 with
    # ef_construction 200, for a build about 2x as long (benchmarks/results/scale.md).
    hnsw_m: int = 16
    hnsw_ef_construction: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 1 <= self.dim <= MAX_DIM:
            raise ValueError(f"embedding dimension must be an integer from 1 to {MAX_DIM}, got {self.dim!r}")
        if self.vector_type not in VECTOR_TYPES:
            raise ValueError(f"vector_type must be one of {VECTOR_TYPES}, got {self.vector_type!r}")
        if self.vector_type == "halfvec" and self.dim > 4000:
            raise ValueError(f"halfvec HNSW indexes support up to 4000 dimensions, got {self.dim}")
        if self.vector_type == "vector" and self.dim > 2000:
            raise ValueError(f"vector HNSW indexes support up to 2000 dimensions (use halfvec), got {self.dim}")
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or not 0 <= self.partitions <= 1024:
            raise ValueError(f"partitions must be an integer from 0 to 1024, got {self.partitions!r}")
        for name, value, low, high in (("hnsw_m", self.hnsw_m, 2, 100),
                                       ("hnsw_ef_construction", self.hnsw_ef_construction, 4, 1000)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")
        if self.hnsw_ef_construction < 2 * self.hnsw_m:
            raise ValueError(f"hnsw_ef_construction must be at least 2 * hnsw_m = {2 * self.hnsw_m} "
                             f"(pgvector's rule), got {self.hnsw_ef_construction}")
        if self.schema is not None:
            validate_identifier(self.schema, "schema name")
        validate_prefix(self.prefix)

    def partition(self, i: int) -> str:
        """Name of hash partition ``i`` of the sections table."""
        return self.table(f"sections_p{i}")

    def table(self, base: str) -> str:
        """Schema-qualified, quoted name of one of onetrip's tables."""
        name = quote_ident(validate_identifier(self.prefix + base, "table name"))
        return f"{quote_ident(self.schema)}.{name}" if self.schema else name

    def qualified(self, base: str) -> str:
        """Schema-qualified name for a function or view."""
        name = self.object_name(base)
        return f"{quote_ident(self.schema)}.{name}" if self.schema else name

    def object_name(self, base: str) -> str:
        """Unqualified name for an index or constraint (they live in the table's schema)."""
        return quote_ident(validate_identifier(self.prefix + base, "object name"))

    @property
    def names(self) -> dict[str, str]:
        return {
            "documents_pk": self.object_name("documents_pkey"),
            "sections_pk": self.object_name("sections_pkey"),
            "sections_doc_fk": self.object_name("sections_doc_id_fkey"),
            "seq_index": self.object_name("sections_doc_seq_key"),
            "parent_index": self.object_name("sections_doc_parent_idx"),
            "hnsw_index": self.object_name("sections_embedding_hnsw"),
            "retrieve_function": self.qualified("retrieve_sections"),
            "collection_index": self.object_name("sections_collection_idx"),
            "tsv_index": self.object_name("sections_tsv_gin"),
            "terms_index": self.object_name("sections_terms_gin"),
            "term_stats_pk": self.object_name("term_stats_pkey"),
            "section_history_pk": self.object_name("section_history_pkey"),
            "principals_function": self.qualified("current_principals"),
            "sections_policy": self.object_name("sections_acl_read"),
            "documents_policy": self.object_name("documents_acl_read"),
        }

    @property
    def tables(self) -> dict[str, str]:
        return {"documents": self.table("documents"), "sections": self.table("sections"),
                "section_history": self.table("section_history"), "term_stats": self.table("term_stats")}


def _param_renderer(binds: BindStyle, dialect: Dialect, vector_type: str = "vector"):
    """Return ``param(name, kind)``: the placeholder for one bind value."""

    def param(name: str, kind: str = "text") -> str:
        validate_identifier(name, "bind parameter name")
        if binds == "function":  # inside a function body: the parameter's own name
            return name
        if binds == "psycopg":
            # an array of vectors is sent in binary (%b): psycopg's text list dumper formats
            # every float through pgvector's text dumper, ~0.7 ms per 384-d query vector
            ph = f"%({name})b" if kind == "vector[]" else f"%({name})s"
        elif binds == "psql":
            ph = f":{name}" if kind in ("int", "float") else f":'{name}'"
            if kind == "float" and dialect == "postgres":
                ph += "::float8"  # -v dense_weight=1 would be an integer: 1 / (60 + rank) is then 0
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
        "param": _param_renderer(binds, dialect, layout.vector_type),
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
