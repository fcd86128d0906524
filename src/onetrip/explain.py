"""EXPLAIN of the exact statement a search or assemble call sends, with the same binds.

Why: the mistakes that cost ~1000x in pgvector (ordering by an expression the
HNSW index cannot serve, a query vector that is not a bind, a filter that
starves the index scan) show only in the plan. A DBA checks the plan of the
statement onetrip actually runs, on their data, instead of a hand-made copy.
EXPLAIN is itself one statement: explaining a call costs one round trip too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from .errors import missing_table_error
from .retrieve import Plan, vector_value_error

#: an index scan line, then (a few lines on) its "Order By: (<col> <=> ...)" line: a vector index answers the ORDER BY
_INDEX_SCAN = re.compile(r"Index Scan using (\S+) on ")
_VECTOR_ORDER = re.compile(r"Order By: \(.*(<=>|<->|<#>)")
#: the query embedding as the plan prints it (a custom plan inlines the bind): hundreds of numbers per line
_VECTOR_LITERAL = re.compile(r"'\[[-+0-9.eE, ]{200,}\]'")


@dataclass(frozen=True)
class Explained:
    """A call's statement, its binds and the server's plan for them.

    ``params`` and ``plan`` show the query embedding as a placeholder, not its
    hundreds of numbers (the plan of these values prints it inline).
    With ``analyzed`` the statement ran (EXPLAIN ANALYZE): the plan has actual
    rows and times. The statement is the one psycopg sends (``%(name)s``
    placeholders). onetrip's repeated calls use a prepared statement, which
    PostgreSQL may run with a generic plan; this is the plan for these values.
    """

    statement: str
    params: dict[str, Any]
    plan: str
    analyzed: bool

    @property
    def vector_index_scans(self) -> list[str]:
        """Names of the indexes whose scan orders by vector distance (the HNSW scan), in plan order.

        Empty for a dense or hybrid call means the planner chose a sequential
        scan and a sort: fine on a small table, a problem on a large one.
        """
        names: list[str] = []
        lines = self.plan.splitlines()
        for i, line in enumerate(lines):
            m = _INDEX_SCAN.search(line)
            if not m:
                continue
            depth = len(line) - len(line.lstrip())
            for detail in lines[i + 1:]:  # the node's own detail lines are indented deeper than it
                if detail.strip().startswith("->") or len(detail) - len(detail.lstrip()) <= depth:
                    break
                if _VECTOR_ORDER.search(detail):
                    names.append(m.group(1))
                    break
        return names

    def render(self) -> str:
        """The statement, its binds and the plan, as SQL comments and text a DBA can paste."""
        binds = "\n".join(f"--   {k} = {v!r}" for k, v in self.params.items())
        kind = "EXPLAIN (ANALYZE, BUFFERS)" if self.analyzed else "EXPLAIN"
        return f"-- statement\n{self.statement}\n-- binds\n{binds}\n-- {kind}\n{self.plan}"


_QUERY = "'<query embedding>'"


def _shown(params: dict[str, Any], dim: int) -> dict[str, Any]:
    return {k: (f"<query embedding: vector({dim})>" if k == "query_embedding" else v) for k, v in params.items()}


@contextmanager
def _named_errors() -> Iterator[None]:
    """A bad query vector or a missing table as onetrip's errors, as a search call raises them."""
    try:
        yield
    except psycopg.errors.DataException as e:
        raise (vector_value_error(e) or e) from None
    except psycopg.errors.UndefinedTable as e:
        raise missing_table_error(e) from None


def _sql(plan: Plan, analyze: bool) -> str:
    return ("EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN ") + plan.statement


def explain_statement(conn: psycopg.Connection, plan: Plan, params: dict[str, Any], dim: int, *,
                      analyze: bool = True) -> Explained:
    """EXPLAIN (with ANALYZE: run and time) the plan's statement with these binds: ONE statement."""
    with _named_errors(), conn.cursor() as cur:
        cur.execute(_sql(plan, analyze), params, prepare=False)
        text = "\n".join(row[0] for row in cur.fetchall())
    return Explained(plan.statement, _shown(params, dim), _VECTOR_LITERAL.sub(_QUERY, text), analyze)


async def explain_statement_async(conn: psycopg.AsyncConnection, plan: Plan, params: dict[str, Any], dim: int, *,
                                  analyze: bool = True) -> Explained:
    """`explain_statement` on an async connection."""
    with _named_errors():
        async with conn.cursor() as cur:
            await cur.execute(_sql(plan, analyze), params, prepare=False)
            text = "\n".join(row[0] for row in await cur.fetchall())
    return Explained(plan.statement, _shown(params, dim), _VECTOR_LITERAL.sub(_QUERY, text), analyze)
