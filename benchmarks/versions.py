"""The database versions a benchmark result records beside its figures.

A figure measured on another PostgreSQL or pgvector (a new HNSW build, another
planner) is not comparable, so every result file names both, as the latency
benchmark's ``meta.versions`` does.
"""

from __future__ import annotations

from typing import Any


def server_versions(conn: Any) -> dict[str, str | None]:
    """``{"postgresql": ..., "pgvector": ...}`` of the server ``conn`` talks to (pgvector None if not installed)."""
    row = conn.execute("SELECT current_setting('server_version'), "
                       "(SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
    return {"postgresql": row[0], "pgvector": row[1]}


def server_label(conn: Any) -> str:
    """``"PostgreSQL 18.3, pgvector 0.8.2"``: the one-line form a result's ``meta.server`` holds."""
    v = server_versions(conn)
    return f"PostgreSQL {v['postgresql']}, pgvector {v['pgvector']}"
