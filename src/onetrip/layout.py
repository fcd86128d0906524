"""Where onetrip's tables live: schema, table-name prefix, embedding width and type, partitions.

A `Layout` is the only source of the identifiers the SQL templates render; every
name is validated and quoted here, so no caller text reaches SQL unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass

from .identifiers import quote_ident, validate_identifier, validate_prefix, validate_schema

DEFAULT_DIM = 384
MAX_DIM = 16000  # pgvector's hard limit for the vector type
VECTOR_TYPES = ("vector", "halfvec")


@dataclass(frozen=True)
class Layout:
    """Where onetrip's tables live and how wide their embeddings are."""

    dim: int = DEFAULT_DIM
    schema: str | None = None
    prefix: str = ""
    vector_type: str = "vector"   # "halfvec": 16-bit floats, half the table and index size
    partitions: int = 0           # > 0: sections hash-partitioned by doc_id into this many partitions
    # HNSW build parameters (pgvector's defaults). A larger ef_construction builds a better graph: on
    # the clustered 1M benchmark corpus recall@10 at ef_search=200 goes 0.887 -> 0.906 and at 400
    # 0.895 -> 0.955 with ef_construction 200, for a build of 384 s instead of 369 s
    # (benchmarks/results/scale.md; 2 parallel maintenance workers).
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
            validate_schema(self.schema)
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
            "retrieve_function_name": self.object_name("retrieve_sections"),  # unqualified: its PL/pgSQL label
            "collection_index": self.object_name("sections_collection_idx"),
            "tsv_index": self.object_name("sections_tsv_gin"),
            "terms_index": self.object_name("sections_terms_gin"),
            "term_stats_pk": self.object_name("term_stats_pkey"),
            "section_history_pk": self.object_name("section_history_pkey"),
            "principals_function": self.qualified("current_principals"),
            "sections_policy": self.object_name("sections_acl_read"),
            "documents_policy": self.object_name("documents_acl_read"),
            "acl_predicate_function": self.qualified("acl_read_predicate"),  # Oracle's VPD policy function
        }

    @property
    def tables(self) -> dict[str, str]:
        return {"documents": self.table("documents"), "sections": self.table("sections"),
                "section_history": self.table("section_history"), "term_stats": self.table("term_stats")}
