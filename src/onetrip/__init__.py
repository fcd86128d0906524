"""onetrip: structure-aware retrieval on PostgreSQL + pgvector, in one round trip."""

from .async_retrieve import AsyncRetriever
from .connection import connect, resolve_dsn
from .pool import make_async_pool, make_pool
from .embedders import Embedder, PrecomputedEmbedder, SentenceTransformerEmbedder
from .errors import (
    ConnectionFailedError,
    ConnectionLostError,
    DimensionMismatchError,
    EmbedderMismatchError,
    ForeignTableError,
    IngestInterruptedError,
    InputDocumentError,
    InvalidDsnError,
    InvalidIdentifierError,
    OnetripError,
    SchemaMissingError,
    ServerRequirementError,
)
from .context import Context, Passage, render_context
from .explain import Explained
from .retrieve import CONTEXT_DEFAULT, Expansion, Filters, Hit, HybridOptions, Retriever, SectionRecord
from .schema import init_schema, read_layout
from .ingest import IngestReport, ingest_paths
from .store import DocumentInfo, delete_document, list_documents, refresh_term_stats
from .layout import Layout

__all__ = [
    "AsyncRetriever",
    "make_async_pool",
    "make_pool",
    "ConnectionFailedError",
    "ConnectionLostError",
    "Context",
    "CONTEXT_DEFAULT",
    "Expansion",
    "Explained",
    "Filters",
    "Passage",
    "render_context",
    "DimensionMismatchError",
    "EmbedderMismatchError",
    "ForeignTableError",
    "DocumentInfo",
    "Embedder",
    "Hit",
    "HybridOptions",
    "IngestInterruptedError",
    "IngestReport",
    "InputDocumentError",
    "InvalidDsnError",
    "InvalidIdentifierError",
    "Layout",
    "OnetripError",
    "PrecomputedEmbedder",
    "Retriever",
    "SchemaMissingError",
    "SectionRecord",
    "SentenceTransformerEmbedder",
    "ServerRequirementError",
    "connect",
    "delete_document",
    "ingest_paths",
    "init_schema",
    "list_documents",
    "read_layout",
    "refresh_term_stats",
    "resolve_dsn",
]
__version__ = "0.1.0"
