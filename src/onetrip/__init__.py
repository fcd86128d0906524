"""onetrip: structure-aware retrieval on PostgreSQL + pgvector, in one round trip.

The names below are imported when first used (PEP 562): `import onetrip.cli` (the `onetrip` command) loads
none of numpy, psycopg or the parsers before its argument parsing, so a Ctrl-C in the first half second of a
command is its clean exit 130, not a traceback from inside an import (found by review), and `--help` is quick.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers and IDEs; at run time, `__getattr__` imports them
    from .async_retrieve import AsyncRetriever  # noqa: F401
    from .connection import connect, resolve_dsn  # noqa: F401
    from .pool import PoolUnreachableError, make_async_pool, make_pool  # noqa: F401
    from .embedders import Embedder, PrecomputedEmbedder, SentenceTransformerEmbedder  # noqa: F401
    from .errors import (  # noqa: F401
        ConnectionFailedError, ConnectionLostError, DimensionMismatchError, EmbedderMismatchError,
        ForeignTableError, IngestInterruptedError, InputDocumentError, InvalidDsnError,
        InvalidIdentifierError, OnetripError, QueryTooLargeError, SchemaMissingError, ServerRequirementError,
    )
    from .context import Context, Passage, render_context  # noqa: F401
    from .explain import Explained  # noqa: F401
    from .retrieve import (  # noqa: F401
        CONTEXT_DEFAULT, Expansion, Filters, Hit, HybridOptions, Retriever, SectionRecord,
    )
    from .schema import init_schema, read_layout  # noqa: F401
    from .ingest import IngestReport, ingest_paths  # noqa: F401
    from .store import DocumentInfo, delete_document, list_documents, prune_history, refresh_term_stats  # noqa: F401
    from .layout import Layout  # noqa: F401

#: Each public name and the module (of this package) that defines it.
_EXPORTS = {
    "AsyncRetriever": "async_retrieve",
    "make_async_pool": "pool",
    "make_pool": "pool",
    "PoolUnreachableError": "pool",
    "ConnectionFailedError": "errors",
    "ConnectionLostError": "errors",
    "Context": "context",
    "CONTEXT_DEFAULT": "retrieve",
    "Expansion": "retrieve",
    "Explained": "explain",
    "Filters": "retrieve",
    "Passage": "context",
    "render_context": "context",
    "DimensionMismatchError": "errors",
    "EmbedderMismatchError": "errors",
    "ForeignTableError": "errors",
    "DocumentInfo": "store",
    "Embedder": "embedders",
    "Hit": "retrieve",
    "HybridOptions": "retrieve",
    "IngestInterruptedError": "errors",
    "IngestReport": "ingest",
    "InputDocumentError": "errors",
    "InvalidDsnError": "errors",
    "InvalidIdentifierError": "errors",
    "Layout": "layout",
    "OnetripError": "errors",
    "QueryTooLargeError": "errors",
    "PrecomputedEmbedder": "embedders",
    "Retriever": "retrieve",
    "SchemaMissingError": "errors",
    "SectionRecord": "retrieve",
    "SentenceTransformerEmbedder": "embedders",
    "ServerRequirementError": "errors",
    "connect": "connection",
    "delete_document": "store",
    "ingest_paths": "ingest",
    "init_schema": "schema",
    "list_documents": "store",
    "prune_history": "store",
    "read_layout": "schema",
    "refresh_term_stats": "store",
    "resolve_dsn": "connection",
}

__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # a submodule, as the eager imports bound them all: `import onetrip` then `onetrip.retrieve.CANCEL_TIMEOUT`
        # or `onetrip.psycopg_adapters.register_adapters` (a review: they had become AttributeErrors)
        # (an AttributeError for anything else, as hasattr and getattr's default expect: a dotted name, or a
        # submodule whose optional dependency is missing; `import onetrip.x` names that import error itself)
        if name.isidentifier() and not name.startswith("_"):
            try:
                if importlib.util.find_spec(f"{__name__}.{name}") is not None:
                    return importlib.import_module(f".{name}", __name__)
            except ImportError as e:
                raise AttributeError(f"module 'onetrip' has no attribute {name!r} ({e})") from e
        raise AttributeError(f"module 'onetrip' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
