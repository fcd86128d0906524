"""EXPLAIN of the exact statement a search, assemble or search_many call sends, with the same binds.

Why: the mistakes that cost ~1000x in pgvector (ordering by an expression the
HNSW index cannot serve, a query vector that is not a bind, a filter that
starves the index scan) show only in the plan. A DBA checks the plan of the
statement onetrip actually runs, on their data, instead of a hand-made copy.
EXPLAIN is itself one statement: explaining a call costs one round trip too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .errors import ServerRequirementError
from .layout import Layout
from .retrieve import (SEARCH_K, Plan, check_assemble_flag, check_search_options, plan_assemble, plan_search,
                       statement_errors)

#: an index scan line, then (a few lines on) its "Order By: (<col> <=> ...)" line: a vector index answers the ORDER BY
_INDEX_SCAN = re.compile(r"Index Scan using (\S+) on ")
_VECTOR_ORDER = re.compile(r"Order By: \(.*(<=>|<->|<#>)")
#: the query embedding as the plan prints it (a custom plan inlines the bind): hundreds of numbers per line
_VECTOR_LITERAL = re.compile(r"'\[[-+0-9.eE, ]{200,}\]'")
#: search_many's array of query embeddings, should a plan print it: '{"[...]","[...]"}'
_VECTOR_ARRAY_LITERAL = re.compile(r"'\{\"\[[-+0-9.eE, ]{200,}\]\"(?:,\"\[[-+0-9.eE, ]{200,}\]\")*\}'")


@dataclass(frozen=True)
class Explained:
    """A call's statement, its binds and the server's plan for them.

    ``params`` and ``plan`` show the query embedding as a placeholder, not its
    hundreds of numbers (the plan of these values prints it inline). The
    statement is the one psycopg sends (``%(name)s`` placeholders). onetrip's
    repeated calls run it as a prepared statement, which PostgreSQL may plan
    once for any values (a generic plan): ``kind == "generic"`` shows that plan.
    """

    statement: str
    params: dict[str, Any]
    plan: str
    kind: str  # "analyze" (EXPLAIN ANALYZE, BUFFERS), "plan" (EXPLAIN) or "generic" (EXPLAIN (GENERIC_PLAN))

    @property
    def analyzed(self) -> bool:
        """Whether the statement ran: the plan has actual rows, times and buffers."""
        return self.kind == "analyze"

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
        how = {"analyze": "EXPLAIN (ANALYZE, BUFFERS)", "plan": "EXPLAIN", "generic": "EXPLAIN (GENERIC_PLAN)"}
        return f"-- statement\n{self.statement}\n-- binds\n{binds}\n-- {how[self.kind]}\n{self.plan}"


_QUERY = "'<query embedding>'"
_QUERIES = "'<query embeddings>'"


def _shown(params: dict[str, Any], dim: int) -> dict[str, Any]:
    """The binds with the query embedding(s) as a placeholder instead of their numbers."""
    def show(name: str, value: Any) -> Any:
        if name == "query_embedding":
            return f"<query embedding: vector({dim})>"
        if name == "query_embeddings":
            return f"<{len(value)} query embeddings: vector({dim})[]>"
        return value

    return {k: show(k, v) for k, v in params.items()}


def _shown_plan(text: str) -> str:
    return _VECTOR_ARRAY_LITERAL.sub(_QUERIES, _VECTOR_LITERAL.sub(_QUERY, text))


#: a bind's SQL type for EXPLAIN (GENERIC_PLAN), which sends no values: psycopg's type for each Python value
_PARAM_TYPES = {bool: "boolean", int: "int8", float: "float8", str: "text", list: "text[]", tuple: "text[]",
                dict: "jsonb", Jsonb: "jsonb"}


def _generic_sql(plan: Plan, params: dict[str, Any], vector_type: str) -> str:
    """The statement with each ``%(name)s`` (or ``%(name)b``) as a typed ``$n`` (one $n per name, as psycopg numbers them)."""
    numbers: dict[str, int] = {}

    def placeholder(m: re.Match[str]) -> str:
        name = m.group(1)
        n = numbers.setdefault(name, len(numbers) + 1)
        value = params[name]
        if name == "query_embedding":
            kind = vector_type
        elif name == "query_embeddings":  # search_many's array, sent in binary
            kind = vector_type + "[]"
        elif type(value) in _PARAM_TYPES:
            kind = _PARAM_TYPES[type(value)]
        else:
            raise TypeError(f"explain(kind='generic') cannot type the bind {name!r} ({type(value).__name__})")
        return f"${n}::{kind}"

    return re.sub(r"%\((\w+)\)[sbt]", placeholder, plan.statement).replace("%%", "%")


KINDS = ("analyze", "plan", "generic")


def check_kind(kind: str) -> str:
    """``kind`` if it is one of KINDS: checked before anything is embedded or sent."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def plan_to_explain(layout: Layout, query: Any, k: int | None, *, assemble: bool, kind: str,
                    options: dict[str, Any]) -> Plan:
    """The plan `search` (or `assemble`) makes for these arguments; ``kind`` checked before anything is embedded."""
    check_kind(kind)
    if check_assemble_flag(assemble):
        return plan_assemble(layout, query, k, **options)
    check_search_options(options)  # (an unknown one had failed naming plan_search, an internal function)
    return plan_search(layout, query, SEARCH_K if k is None else k, **options)


def _sql(plan: Plan, params: dict[str, Any], kind: str, vector_type: str, server_version: int) -> str:
    if kind == "generic":
        if server_version < 160000:
            raise ServerRequirementError(
                f"kind='generic' needs PostgreSQL 16+ (EXPLAIN (GENERIC_PLAN)); this server is {server_version}")
        return "EXPLAIN (GENERIC_PLAN) " + _generic_sql(plan, params, vector_type)
    return ("EXPLAIN (ANALYZE, BUFFERS) " if kind == "analyze" else "EXPLAIN ") + plan.statement


def explain_statement(conn: psycopg.Connection, plan: Plan, params: dict[str, Any], layout: Layout, *,
                      kind: str = "analyze") -> Explained:
    """EXPLAIN the plan's statement, in ONE statement.

    kind: "analyze" runs it with these binds and times it; "plan" plans it for
    these binds; "generic" plans it for any values, as a prepared statement may.
    """
    sql = _sql(plan, params, kind, layout.vector_type, conn.info.server_version)
    with statement_errors(conn), conn.cursor() as cur:
        cur.execute(sql, None if kind == "generic" else params, prepare=False)
        text = "\n".join(row[0] for row in cur.fetchall())
    return Explained(plan.statement, _shown(params, layout.dim), _shown_plan(text), kind)


async def explain_statement_async(conn: psycopg.AsyncConnection, plan: Plan, params: dict[str, Any], layout: Layout,
                                  *, kind: str = "analyze") -> Explained:
    """`explain_statement` on an async connection."""
    sql = _sql(plan, params, kind, layout.vector_type, conn.info.server_version)
    with statement_errors(conn):
        async with conn.cursor() as cur:
            await cur.execute(sql, None if kind == "generic" else params, prepare=False)
            text = "\n".join(row[0] for row in await cur.fetchall())
    return Explained(plan.statement, _shown(params, layout.dim), _shown_plan(text), kind)
