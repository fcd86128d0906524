"""Exceptions that name their cause.

Every error onetrip raises on purpose derives from `OnetripError`, so callers can
catch one type; the subclasses say which input was wrong.
"""

from __future__ import annotations


class OnetripError(Exception):
    """Base class for errors raised by onetrip on purpose."""


class InvalidIdentifierError(OnetripError, ValueError):
    """A schema, table prefix or other SQL identifier failed validation."""


class DimensionMismatchError(OnetripError, ValueError):
    """An embedding's length differs from the dimension the schema was built with."""


class EmbedderMismatchError(OnetripError, ValueError):
    """Text would be embedded with another model than the stored sections were (same dimension or not)."""


class ConnectionFailedError(OnetripError, ConnectionError):
    """The database could not be reached (DSN wrong, server down, timeout)."""


class ConnectionLostError(ConnectionFailedError):
    """A connection broke under a statement: the server ended the session (a restart, pg_terminate_backend,
    an idle timeout) or the network dropped it. ``cause``: the server's or libpq's one-line reason."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


class IngestInterruptedError(ConnectionLostError):
    """`ingest_paths` stopped because its connection was lost; ``report`` counts what was done before.

    Each document stored before is committed whole; the one being written and the rest were not written.
    """

    def __init__(self, message: str, cause: str = "", report: object = None) -> None:
        super().__init__(message, cause)
        self.report = report


class InvalidDsnError(ConnectionFailedError, ValueError):
    """The DSN is not a connection string libpq can read (bad input: CLI exit 2); its password is not shown."""


class ServerRequirementError(OnetripError):
    """The server lacks something onetrip needs (pgvector, a minimum version)."""


class SchemaMissingError(OnetripError):
    """The sections/documents tables are not there: run `onetrip init` first."""


class ForeignTableError(OnetripError, ValueError):
    """A table has onetrip's name but not onetrip's key columns, or is no table: another application's
    ``sections`` or ``documents`` (the default prefix is empty). Or another relation holds the name of an index
    `init` makes. onetrip neither writes, reads nor drops it."""


class QueryTooLargeError(OnetripError, ValueError):
    """A query text past one of PostgreSQL's limits (its tsvector over 1 MB): bad input, not an outage."""


class InputDocumentError(OnetripError, ValueError):
    """A document could not be read or parsed (empty, binary, bad UTF-8, missing)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def missing_table_error(e: Exception | str) -> SchemaMissingError:
    """A missing onetrip table as SchemaMissingError naming the fix (term_stats: added after the first release)."""
    msg = str(e).splitlines()[0]
    if "term_stats" in msg:
        return SchemaMissingError(f"{msg}: lexical and hybrid search read word weights from it, which onetrip "
                                  "versions before it did not create; run `onetrip init` (adds the table, keeps "
                                  "your data), then `onetrip refresh-term-stats`")
    return SchemaMissingError(f"{msg}; run `onetrip init` first")
