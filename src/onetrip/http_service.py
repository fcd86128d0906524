"""`onetrip serve`: the retriever over HTTP (Starlette under uvicorn).

Endpoints
    POST /search        top-K hits and/or the assembled, budgeted context for a query
    POST /search_many   several queries' top-K hits, in ONE statement
                        (both take "explain": the plan of the statement(s) they would send, not the results)
    GET  /documents     the stored documents the request's principals may read (`onetrip documents --json`),
                        a page at a time (?limit=, default 1000; ?after= the previous page's next_after)
    GET  /health        200 {"status": "ok"} when a pooled connection answers and the tables are there (with
                        "warnings" when the service's model is not the documents'); else 503 (no token needed)
    GET  /stats         pool statistics and request counts (to check the pool stays within its size)
    GET  /openapi.json  this API: request and response schemas of every endpoint

One `AsyncRetriever` over one `AsyncConnectionPool` (`onetrip.pool.make_async_pool`)
serves every request. The pool is opened at startup WITHOUT waiting for the
database, and the retriever (which reads the table layout) is created on the
first request that needs it, so a database that does not answer makes
/health and /search say 503 with a clear message instead of failing the start;
they recover by themselves when the database comes back.

Statements per request. Hits (each with its parent and ±1 neighbors) and the
assembled context (deduplicated, budgeted passages) are two different result
shapes made by two different statements; neither can be derived from the other
(the budget drops hits; passages do not say which hit they neighbor). So a
request costs one statement per shape it asks for: ``"hits": true,
"context": true`` (the default) is two statements run one after the other
on one pooled connection, in one read-only REPEATABLE READ transaction (BEGIN
and COMMIT: a round trip each) so both read one state of the tables; asking
for one shape is one statement. A text query is embedded ONCE per request (in a
worker thread) and the vector is used by both statements.

Principals (whose ACL rows a request may read), in this order:
    --trust-request-principals   the request's "principals" list is used (a
                                 caller that omits it gets the operator's setting below);
                                 without this flag a request carrying "principals" is refused (403)
    --principal P (repeatable)   these principals, for every request
    --no-acl                     no ACL check at all (explicit opt-in only)
    none of the above            public rows only (rows whose acl is NULL)

Explain. ``"explain": "analyze" | "plan" | "generic"`` (``true``: "analyze", as
``onetrip search --explain``) in a /search or /search_many body answers with
`Retriever.explain` / `explain_many`'s result as ``onetrip search --explain
--json`` prints it, for the statement each shape asked for would send: the same
parsing, caps, filters and principals, one EXPLAIN statement in its place. A
plan counts the rows each node read, ACL-hidden ones included ("Rows Removed by
Filter", an index scan's rows): on the tests' corpus, index scans preferred (as
on a large table), a public-only caller's lexical search for "salary" had 0
hits and its plan showed the word index finding 2 sections (the HR-only
document's) and then 'Rows Removed by Filter: 2', where "zebra" found 0: plans
tell who may not read a section whether it holds a word. Explain is therefore
refused (403 explain_not_allowed) unless the ACL does not bind the caller:
--no-acl, or --trust-request-principals (the caller may name any principals
anyway). GET /documents needs no such rule: it lists
the documents rows a search with the same principals may read (same ACL test).

Security. Binds 127.0.0.1 unless told otherwise. With a token (--token or
$ONETRIP_TOKEN) every endpoint but /health needs ``Authorization: Bearer
<token>`` (compared in constant time). Bodies over --max-body bytes get 413
before being read further; k and the token budget are capped (--max-k,
--max-tokens-cap). Every error is ``{"error": {"code", "message", ...}}`` with a
4xx/5xx status, never a stack trace (those go to the server log). A client that
leaves before its answer gets its running statement cancelled on the server
(`_while_connected`), so its pooled connection is not held for nobody.
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import json
import logging
import math
import os
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .async_retrieve import AsyncRetriever, read_layout_async
from .cli import context_to_json, document_to_json, explained_to_json, hit_to_json
from .embedders import Embedder, SentenceTransformerEmbedder, check_length
from .errors import (ConnectionFailedError, ConnectionLostError, DimensionMismatchError, EmbedderMismatchError,
                     OnetripError, QueryTooLargeError, SchemaMissingError, ServerRequirementError,
                     missing_table_error)
from .explain import KINDS as EXPLAIN_KINDS
from .retrieve import (MAX_BUDGET, MAX_K, MAX_NEIGHBORS, MAX_RRF_K, MAX_WEIGHT, MODE_CHOICES, NEIGHBOR_SCOPES,
                       PG_INT_MAX, SEARCH_K, TOKENS_PER_HIT, Expansion, assemble_k, Filters, HybridOptions, as_hybrid,
                       context_expansion, hybrid_json, resolve_mode, session_settings, statement_errors)
from .search_many import MAX_QUERIES
from .schema import layout_query
from .store import document_info, list_documents_query

log = logging.getLogger("onetrip.serve")

ENV_TOKEN = "ONETRIP_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_MAX_K = 50
DEFAULT_MAX_TOKENS_CAP = 16000
DEFAULT_MAX_TOKENS = 2000
DEFAULT_K = SEARCH_K  # search's own
DEFAULT_POOL_SIZE = 10
DEFAULT_DB_TIMEOUT = 5.0
#: a search takes milliseconds; one blocked this long (a lock held elsewhere) gives its connection back
DEFAULT_STATEMENT_TIMEOUT = 10.0
APPLICATION_NAME = "onetrip-serve"
#: seconds a stop (SIGTERM, Ctrl-C) waits for open requests before it cancels them: a client that never finished
#: sending its body had held the service open for as long as it liked (found by review), past a container's
#: or systemd's grace period, whose SIGKILL then skips the shutdown (the embedded server's stop among it)
DEFAULT_SHUTDOWN_TIMEOUT = 5.0
#: seconds the stop then waits for the requests it cancelled to end, their statements cancelled on the server
SHUTDOWN_DRAIN = 3.0

REQUEST_FIELDS = ("query", "embedding", "k", "mode", "expand", "filters", "principals", "max_tokens",
                  "hits", "context", "hybrid", "explain")
EXPAND_FIELDS = tuple(Expansion.__dataclass_fields__)
FILTER_FIELDS = ("collections", "doc_ids", "source_prefix", "metadata")
SEARCH_MANY_FIELDS = ("queries", "embeddings", "k", "mode", "expand", "filters", "principals", "hybrid", "explain")
DOCUMENTS_PARAMS = ("collection", "principals", "limit", "after")
#: GET /documents' page size without ?limit=, and the largest it takes: a document is 253 bytes of JSON with
#: one-letter titles and no embedder (more with real ones), so 100k documents had been one 25 MB response;
#: a page of 1000 is a few hundred kB, of 10000 a few MB
DEFAULT_DOCUMENTS_LIMIT = 1000
MAX_DOCUMENTS_LIMIT = 10000
HYBRID_FIELDS = tuple(HybridOptions.__dataclass_fields__)
SEARCH_MANY_EXPAND_FIELDS = ("parent", "neighbors")


@dataclass(frozen=True)
class ServiceConfig:
    """What the operator decides; requests can only narrow it."""

    dsn: str | None = None                      # None: $ONETRIP_DSN, else the embedded server
    schema: str | None = None
    prefix: str = ""
    token: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    max_k: int = DEFAULT_MAX_K
    max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP
    pool_size: int = DEFAULT_POOL_SIZE
    db_timeout: float = DEFAULT_DB_TIMEOUT      # seconds to wait for a pooled connection
    statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT  # seconds a statement may run; None: no limit
    principals: tuple[str, ...] | None = ()     # operator's principals: () public only, None no ACL check
    trust_request_principals: bool = False
    application_name: str = APPLICATION_NAME    # shows in pg_stat_activity
    ef_search: int | None = None                # pgvector settings of every pooled connection (Retriever's)
    iterative_scan: str | None = "relaxed_order"
    max_scan_tuples: int | None = 20000

    def __post_init__(self) -> None:
        def positive_int(name: str, hi: int | None = None) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1 or (hi is not None and v > hi):
                raise ValueError(f"{name} must be an integer from 1 to {hi}, got {v!r}" if hi else
                                 f"{name} must be a positive integer, got {v!r}")

        # the table names, as every other command checks them before it starts (a bad --prefix had started the
        # service, then answered every request, /health too, 500 with a traceback in the log)
        layout_query(self.schema, self.prefix)  # InvalidIdentifierError naming the name
        positive_int("max_k", MAX_K)
        positive_int("max_tokens_cap", MAX_BUDGET)
        positive_int("max_body")
        positive_int("pool_size")
        session_settings(self.ef_search, self.iterative_scan, self.max_scan_tuples)  # a bad value: ValueError now
        if not self.db_timeout > 0:
            raise ValueError(f"db_timeout must be positive, got {self.db_timeout!r}")
        from .pool import statement_timeout_setting

        statement_timeout_setting(self.statement_timeout)  # a bad value: ValueError now, not when the pool opens
        if self.token is not None and not self.token.strip():
            raise ValueError("the bearer token is empty (unset it to run without one)")
        if self.token is not None and (self.token != self.token.strip() or not self.token.isascii()
                                       or not self.token.isprintable()):
            # the header side is read as Latin-1 and stripped: such a token could never be matched
            raise ValueError("the bearer token must be printable ASCII without spaces at either end")
        if self.principals is not None:
            object.__setattr__(self, "principals", tuple(self.principals))

    @property
    def default_max_tokens(self) -> int:
        return min(DEFAULT_MAX_TOKENS, self.max_tokens_cap)


def operator_principals(principals: list[str] | None, no_acl: bool) -> tuple[str, ...] | None:
    """The --principal / --no-acl policy: explicit principals, no check only when asked, else public only."""
    if no_acl and principals:
        raise ValueError("--no-acl and --principal contradict each other: give one or the other")
    if no_acl:
        return None
    cleaned = tuple(p.strip() for p in principals or () if p.strip())
    if principals and not cleaned:
        raise ValueError("--principal needs a non-empty name")
    return cleaned


def _encodable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ApiError(Exception):
    """An error the client caused or should know about, with its HTTP status."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        # a lone surrogate from the request (a key "\\ud800" named in the message) cannot be encoded as UTF-8:
        # the response had become a plain-text 500, outside every handler
        message = _encodable(message)
        extra = {k: _encodable(v) if isinstance(v, str) else v for k, v in extra.items()}
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse({"error": {"code": self.code, "message": self.message, **self.extra}},
                            status_code=self.status, headers=headers)


# ---------------------------------------------------------------- request validation


@dataclass(frozen=True)
class SearchRequest:
    """A validated /search body."""

    query: str | None
    embedding: np.ndarray | None
    k: int | None  # None: hits use DEFAULT_K, the context one hit per 250 tokens of budget
    mode: str
    expand: Expansion
    filters: Filters
    max_tokens: int
    hits: bool
    context: bool
    hit_expand: Expansion = Expansion()  # the hits' parent/neighbors
    hybrid: HybridOptions | None = None   # the lexical side's and the fusion's options; None: the defaults
    explain: str | None = None            # an EXPLAIN kind: the plans of the statements, not their results


@dataclass(frozen=True)
class SearchManyRequest:
    """A validated /search_many body: several queries, one statement (mode resolved: hybrid for texts).

    Both queries and embeddings (hybrid): the embeddings are the queries' own, one per query.
    """

    queries: tuple[str, ...] | None
    embeddings: tuple[np.ndarray, ...] | None
    k: int
    mode: str
    parent: bool
    neighbors: bool
    filters: Filters
    hybrid: HybridOptions | None = None
    explain: str | None = None


@dataclass(frozen=True)
class DocumentsRequest:
    """A validated GET /documents query: `list_documents`' arguments."""

    collection: str | None
    principals: tuple[str, ...] | None
    limit: int = DEFAULT_DOCUMENTS_LIMIT
    after: str | None = None  # the previous page's next_after


def _invalid(field_name: str, message: str, code: str = "invalid_field") -> ApiError:
    return ApiError(422, code, f"{field_name}: {message}", field=field_name)


def _text(value: Any, name: str) -> str:
    """A string PostgreSQL will accept (no NUL, valid UTF-8), or a 422."""
    if not isinstance(value, str):
        raise _invalid(name, f"must be a string, got {_json_type(value)}")
    if "\x00" in value:
        raise _invalid(name, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(name, "is not valid Unicode (lone surrogate)") from None
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _int(value: Any, name: str, lo: int, hi: int, code: str = "invalid_field") -> int:
    """An integer field: 2.0 is one too, as JSON Schema's "integer" (which /openapi.json publishes) counts it and
    as some JSON encoders write it (it had been 422 "must be an integer" though the schema accepted it)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, f"must be an integer, got {_json_type(value)}")
    if not lo <= value <= hi:
        raise _invalid(name, f"must be from {lo} to {hi}, got {value}", code)
    return value


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(name, f"must be true or false, got {_json_type(value)}")
    return value


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _invalid(name, f"must be a list of strings, got {_json_type(value)}")
    return tuple(_text(v, f"{name}[{i}]") for i, v in enumerate(value))


MAX_JSON_DEPTH = 32


def _json_value(value: Any, name: str, depth: int = 0) -> Any:
    """Check every string inside a JSON value (jsonb refuses NUL too), and its nesting."""
    if depth > MAX_JSON_DEPTH:
        raise _invalid(name, f"is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        _text(value, name)
    elif isinstance(value, dict):
        for k, v in value.items():
            _text(k, f"{name} key")
            _json_value(v, f"{name}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _json_value(v, f"{name}[{i}]", depth + 1)
    return value


def _object(value: Any, name: str, known: tuple[str, ...], code: str = "unknown_field") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(name, f"must be a JSON object, got {_json_type(value)}")
    unknown = sorted(set(value) - set(known))
    if unknown:
        what = "filter key" if code == "unknown_filter_key" else "field"
        raise ApiError(422, code, f"unknown {what}(s) {', '.join(unknown)} in {name}; known: {', '.join(known)}",
                       field=f"{name}.{unknown[0]}" if name != "body" else unknown[0])
    # null is a field left out, except where the Python API reads None as something a request may not ask for
    if value.get("principals", ...) is None:  # None: no ACL check
        raise _invalid("principals", "must be a list of principals; null is not taken (leave it out for the "
                                     "service's own principals)")
    if name == "body" and value.get("max_tokens", ...) is None:  # None: no budget
        raise _invalid("max_tokens", "must be a number of tokens; null (no budget in the Python API) is not taken "
                                     "(leave it out for the default)")
    return {k: v for k, v in value.items() if v is not None}  # null is the same as leaving the field out


def _embedding(value: Any, name: str = "embedding") -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise _invalid(name, "must be a non-empty list of numbers")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _invalid(name, f"item {i} must be a number, got {_json_type(v)}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except OverflowError:
        raise _invalid(name, "contains a value that is not a finite 32-bit float") from None
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) > np.finfo(np.float32).max):
        raise _invalid(name, "contains a value that is not a finite 32-bit float")
    if not arr.any():
        raise _invalid(name, "is all zeros: its cosine distance to every section is undefined")
    try:
        check_length(arr, "its length")
    except ValueError as e:
        raise _invalid(name, str(e)) from None
    return arr.astype(np.float32)


def _principals(body: dict[str, Any], cfg: ServiceConfig) -> tuple[str, ...] | None:
    """The principals a request reads with: its own when the operator trusts them (else 403), or the operator's."""
    if "principals" not in body:
        return cfg.principals
    if not cfg.trust_request_principals:
        raise ApiError(403, "principals_not_allowed",
                       "this service does not take principals from requests (the operator sets them; "
                       "see --trust-request-principals)", field="principals")
    return _strings(body["principals"], "principals")


def _explain(body: dict[str, Any], cfg: ServiceConfig) -> str | None:
    """The body's "explain" as an EXPLAIN kind (None: search), refused where the ACL binds the caller.

    A plan counts the rows each node read before the ACL test removed them, so it
    would tell a caller limited by the ACL whether sections it may not read hold
    its query's words; with --no-acl or trusted request principals nothing is hidden from it.
    """
    value = body.get("explain", False)
    if value is True:
        value = "analyze"  # as `onetrip search --explain` with no kind
    if value is False:
        return None
    if not isinstance(value, str) or value not in EXPLAIN_KINDS:
        raise _invalid("explain", f"must be true, false or one of {', '.join(EXPLAIN_KINDS)}, got {value!r:.40}")
    if cfg.principals is not None and not cfg.trust_request_principals:
        raise ApiError(403, "explain_not_allowed",
                       "explain is refused where the ACL limits what a request reads: a plan counts the rows it "
                       "read, hidden ones included (the operator may use `onetrip search --explain`, or serve "
                       "with --no-acl or --trust-request-principals)", field="explain")
    return value


def _request_filters(body: dict[str, Any], cfg: ServiceConfig) -> Filters:
    """The body's filters and the principals it may read with (the operator's unless trusted)."""
    raw_flt = _object(body.get("filters", {}), "filters", FILTER_FIELDS, "unknown_filter_key")
    flt: dict[str, Any] = {}
    for name in ("collections", "doc_ids"):
        if raw_flt.get(name) is not None:
            flt[name] = _strings(raw_flt[name], f"filters.{name}")
    if raw_flt.get("source_prefix") is not None:
        flt["source_prefix"] = _text(raw_flt["source_prefix"], "filters.source_prefix")
    if raw_flt.get("metadata") is not None:
        if not isinstance(raw_flt["metadata"], dict):
            raise _invalid("filters.metadata", f"must be a JSON object, got {_json_type(raw_flt['metadata'])}")
        flt["metadata"] = _json_value(raw_flt["metadata"], "filters.metadata")
    try:
        return Filters(principals=_principals(body, cfg), **flt)
    except (TypeError, ValueError) as e:  # the library's own checks, after the ones above
        raise _invalid("filters", str(e)) from None


def _candidates_cap(cfg: ServiceConfig) -> int:
    """Most candidates a request's "hybrid" may ask for per list: the k cap, or the library's default if larger."""
    return max(cfg.max_k, HybridOptions().candidates)


def _hybrid(body: dict[str, Any], mode: str, cfg: ServiceConfig) -> HybridOptions | None:
    """The "hybrid" object as HybridOptions (None when absent); its candidate lists are capped as k is."""
    raw = body.get("hybrid")
    if raw is None:
        return None
    raw = _object(raw, "hybrid", HYBRID_FIELDS)
    if mode == "dense":  # as the library refuses text= in dense mode: options that would change nothing
        raise _invalid("hybrid", "is for hybrid and lexical mode; this request searches densely")
    raw = hybrid_json(raw)  # 60.0 an integer, as k's 2.0 is (`_int`)
    if "candidates" in raw:
        _int(raw["candidates"], "hybrid.candidates", 1, _candidates_cap(cfg), "k_out_of_range")
    try:
        return as_hybrid(raw)
    except (TypeError, ValueError) as e:
        raise _invalid("hybrid", str(e)) from None


def parse_search(body: Any, cfg: ServiceConfig) -> SearchRequest:
    """Validate a /search body against the operator's caps; every problem is a 4xx naming the field."""
    body = _object(body, "body", REQUEST_FIELDS)
    explain = _explain(body, cfg)
    query = _text(body["query"], "query") if body.get("query") is not None else None
    if query is not None and not query.strip():
        raise _invalid("query", "is empty")
    embedding = _embedding(body["embedding"]) if body.get("embedding") is not None else None
    mode = body.get("mode", "auto")
    if mode not in MODE_CHOICES:
        raise _invalid("mode", f"must be one of {', '.join(MODE_CHOICES)}, got {mode!r}")
    if query is None and embedding is None:
        raise ApiError(422, "missing_query", "give query (text) or embedding (a list of floats)", field="query")
    mode = resolve_mode(mode, query is not None)
    if mode == "lexical" and (query is None or embedding is not None):
        raise _invalid("query", "lexical mode takes the query text only (no embedding)", "missing_query")
    if mode == "hybrid" and query is None:
        raise _invalid("query", "hybrid mode needs the query text (with or without an embedding)", "missing_query")
    if mode == "dense" and query is not None and embedding is not None:
        raise _invalid("embedding", "dense mode takes query or embedding, not both (both are for hybrid)")
    k = None if body.get("k") is None else _int(body["k"], "k", 1, cfg.max_k, "k_out_of_range")
    max_tokens = body.get("max_tokens", cfg.default_max_tokens)
    if isinstance(max_tokens, float) and max_tokens.is_integer():  # as `_int` reads it: 16001.0 is over the cap too
        max_tokens = int(max_tokens)
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > cfg.max_tokens_cap:
        raise ApiError(422, "budget_too_large",
                       f"max_tokens: {max_tokens} is over this service's cap of {cfg.max_tokens_cap}",
                       field="max_tokens", cap=cfg.max_tokens_cap)
    max_tokens = _int(max_tokens, "max_tokens", 1, cfg.max_tokens_cap)

    raw_exp = _object(body.get("expand", {}), "expand", EXPAND_FIELDS)
    exp: dict[str, Any] = {}
    for name in ("parent", "ancestors", "section", "document"):
        if name in raw_exp:
            exp[name] = _bool(raw_exp[name], f"expand.{name}")
    if "neighbors" in raw_exp:
        exp["neighbors"] = _int(raw_exp["neighbors"], "expand.neighbors", 0, MAX_NEIGHBORS)
    if "neighbor_scope" in raw_exp:
        if raw_exp["neighbor_scope"] not in NEIGHBOR_SCOPES:
            raise _invalid("expand.neighbor_scope", f"must be one of {', '.join(NEIGHBOR_SCOPES)}")
        exp["neighbor_scope"] = raw_exp["neighbor_scope"]
    if "document_max_tokens" in raw_exp:
        exp["document_max_tokens"] = _int(raw_exp["document_max_tokens"], "expand.document_max_tokens", 0, MAX_BUDGET)

    filters = _request_filters(body, cfg)

    want_hits = _bool(body.get("hits", True), "hits")
    want_context = _bool(body.get("context", True), "context")
    if not (want_hits or want_context):
        raise ApiError(422, "nothing_requested", "hits and context are both false: ask for at least one",
                       field="hits")
    # expand given (even {}: Expansion's defaults, as the schema says): the same Expansion for hits (parent,
    # neighbors) and context; absent: hits carry parent + previous/next, the context the tuned CONTEXT_DEFAULT
    expansion = Expansion(**exp)
    return SearchRequest(query, embedding, k, mode, expansion if "expand" in body else context_expansion(), filters,
                         max_tokens, want_hits, want_context, expansion, _hybrid(body, mode, cfg), explain)


def parse_search_many(body: Any, cfg: ServiceConfig) -> SearchManyRequest:
    """Validate a /search_many body: queries (texts), embeddings, or both (hybrid), each named by its index when wrong."""
    body = _object(body, "body", SEARCH_MANY_FIELDS)
    explain = _explain(body, cfg)
    has_q, has_e = body.get("queries") is not None, body.get("embeddings") is not None
    if not (has_q or has_e):
        raise ApiError(422, "missing_query", "give queries (texts), embeddings (lists of floats), or both (hybrid)",
                       field="queries")
    queries = embeddings = None
    for name in ("queries", "embeddings"):
        items = body.get(name)
        if items is None:
            continue
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_QUERIES:
            got = f"{len(items)} items" if isinstance(items, list) else _json_type(items)
            raise _invalid(name, f"must be a list of 1 to {MAX_QUERIES} items, got {got}")
        if name == "queries":
            queries = tuple(_text(q, f"queries[{i}]") for i, q in enumerate(items))
            for i, q in enumerate(queries):
                if not q.strip():
                    raise _invalid(f"queries[{i}]", "is empty")
        else:
            embeddings = tuple(_embedding(v, f"embeddings[{i}]") for i, v in enumerate(items))
    if queries is not None and embeddings is not None and len(queries) != len(embeddings):
        raise _invalid("embeddings", f"give one embedding per query: {len(embeddings)} embeddings for "
                                     f"{len(queries)} queries")
    k = default_k(cfg) if body.get("k") is None else _int(body["k"], "k", 1, cfg.max_k, "k_out_of_range")
    mode = body.get("mode", "auto")
    if mode not in MODE_CHOICES:
        raise _invalid("mode", f"must be one of {', '.join(MODE_CHOICES)}, got {mode!r}")
    mode = resolve_mode(mode, has_q)
    if mode != "dense" and not has_q:
        raise _invalid("queries", f"{mode} mode needs the queries as texts (embeddings alone are searched densely)",
                       "missing_query")
    if mode == "lexical" and has_e:  # as /search
        raise _invalid("embeddings", "lexical mode takes the queries (texts) only, no embeddings")
    if mode == "dense" and has_q and has_e:
        raise _invalid("embeddings", "dense mode takes queries or embeddings, not both (both are for hybrid)")
    raw_exp = _object(body.get("expand", {}), "expand", SEARCH_MANY_EXPAND_FIELDS)
    parent = _bool(raw_exp.get("parent", True), "expand.parent")
    neighbors = _int(raw_exp.get("neighbors", 1), "expand.neighbors", 0, 1) > 0
    return SearchManyRequest(queries, embeddings, k, mode, parent, neighbors, _request_filters(body, cfg),
                             _hybrid(body, mode, cfg), explain)


def parse_documents(params: list[tuple[str, str]], cfg: ServiceConfig) -> DocumentsRequest:
    """Validate a GET /documents query string (``collection`` once, ``principals`` repeatable, as the CLI's
    --collection and --principal; ``limit`` and ``after`` once, as its --limit and --after); the principals
    as /search takes them."""
    unknown = sorted({name for name, _ in params} - set(DOCUMENTS_PARAMS))
    if unknown:
        raise ApiError(422, "unknown_field", f"unknown query parameter(s) {', '.join(unknown)}; known: "
                       f"{', '.join(DOCUMENTS_PARAMS)}", field=unknown[0])

    def once(name: str, what: str) -> str | None:
        values = [_text(v, name) for n, v in params if n == name]
        if len(values) > 1:
            raise _invalid(name, f"give it once, got {len(values)} ({what})")
        return values[0] if values else None

    collection = once("collection", "the listing takes one collection")
    raw_limit = once("limit", "one page size")
    after = once("after", "the previous page's next_after")
    limit = DEFAULT_DOCUMENTS_LIMIT
    if raw_limit is not None:  # digits only: int() had also taken ' 5', '+5', '1_000' and '٥'
        if not (raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 9) \
                or not 1 <= int(raw_limit) <= MAX_DOCUMENTS_LIMIT:  # 4,300 digits and more: int() raised
            raise _invalid("limit", f"must be an integer from 1 to {MAX_DOCUMENTS_LIMIT}, got {raw_limit!r:.40}")
        limit = int(raw_limit)
    principals = [v for name, v in params if name == "principals"]
    return DocumentsRequest(collection, _principals({"principals": principals} if principals else {}, cfg),
                            limit, after)


# ---------------------------------------------------------------- the service


#: /search's and /search_many's 403s
SEARCH_403 = ("principals given but not allowed; explain where the ACL limits the caller; the service's database "
              "role may not read a table (permission_denied)")
#: the 503s of an endpoint that sends statements (/search, /search_many, /documents), by their codes
DATABASE_503 = ("database unavailable, every pooled connection busy (pool_exhausted), the connection lost under "
                "the request, schema missing, or the statement timed out or was cancelled (statement_timeout, "
                "lock_timeout, statement_cancelled); or the service stopped before the request ended "
                "(shutting_down)")


def _unavailable(e: BaseException) -> ApiError:
    log.warning("database unavailable: %s", e)
    return ApiError(503, "database_unavailable",
                    f"the database is not answering ({type(e).__name__}); try again later")


def _db_unavailable_errors() -> tuple[type[BaseException], ...]:
    return (PoolTimeout, psycopg.OperationalError, ConnectionFailedError, OSError)


def _lost(e: ConnectionLostError) -> ApiError:
    """A pooled connection that broke under this request's statement; the pool has checked the others."""
    log.warning("database connection lost: %s", e.cause)
    return ApiError(503, "connection_lost", f"the connection to the database was lost during this request "
                    f"({e.cause}); try again")


def _cancelled(e: psycopg.errors.QueryCanceled) -> ApiError:
    """statement_timeout's cancel, or another one (pg_cancel_backend: 'due to user request'), named as such."""
    why = e.diag.message_primary or str(e).splitlines()[0]
    log.warning("statement cancelled: %s", why)
    if "statement timeout" in why:  # a lock held elsewhere, an overloaded server
        return ApiError(503, "statement_timeout", "the database did not answer within the service's statement "
                        "timeout; try again later")
    return ApiError(503, "statement_cancelled", f"the database cancelled this request's statement ({why}); "
                    "try again later")


def _lock_timeout(e: psycopg.errors.LockNotAvailable) -> ApiError:
    """lock_timeout (a role's or database's setting) passed: psycopg files it under OperationalError, which
    had made it 503 'the database is not answering (LockNotAvailable)'."""
    log.warning("lock timeout: %s", e.diag.message_primary or e)
    return ApiError(503, "lock_timeout", "the statement waited for a lock held elsewhere longer than the database's "
                    "lock_timeout; try again later")


def _connect_counts(pool: Any, stats: dict[str, int]) -> tuple[int, int]:
    """The pool's connection attempts so far: (failed, succeeded).

    Failed from psycopg_pool's get_stats; succeeded from `make_async_pool`'s own
    count of the connections it opened (`onetrip.pool.Opened`). Attempts minus
    failures had taken an attempt under way for a connection opened: a request
    timing out then, while the database refused connections or did not answer,
    read it as the database answering again and said pool_exhausted.
    """
    from .pool import POOL_OPENED

    return stats.get("connections_errors", 0), getattr(pool, POOL_OPENED).count


class Service:
    """The pool, the retriever (made on first use) and the embedder, for one app."""

    def __init__(self, cfg: ServiceConfig, embedder_factory: Callable[[], Embedder] | None = None) -> None:
        self.cfg = cfg
        self.embedder_factory = embedder_factory or SentenceTransformerEmbedder
        self.embedder: Embedder | None = None
        self.pool: Any = None
        self._retriever: AsyncRetriever | None = None
        self._creating: asyncio.Future[AsyncRetriever] | None = None  # the attempt requests wait for (`retriever`)
        self._model_warned: str | None = None  # the model mismatch last logged (`_model_warnings`)
        self.statuses: Counter[int] = Counter()
        # the pool's failed and successful connection attempts when last looked at, and whether the database
        # was then refusing connections (`_pool_timeout`)
        self._connects = (0, 0)
        self._connect_failing = False

    async def start(self) -> None:
        """Load the embedder (so the first request is not slow) and open the pool without waiting for it."""
        from .connection import resolve_dsn
        from .pool import make_async_pool

        self.embedder = await asyncio.to_thread(self.embedder_factory)
        await asyncio.to_thread(self.embedder.embed_query, "warm up")
        dsn = await asyncio.to_thread(resolve_dsn, self.cfg.dsn)
        self.pool = make_async_pool(dsn, min_size=1, max_size=self.cfg.pool_size, timeout=self.cfg.db_timeout,
                                    application_name=self.cfg.application_name, ef_search=self.cfg.ef_search,
                                    iterative_scan=self.cfg.iterative_scan, max_scan_tuples=self.cfg.max_scan_tuples,
                                    statement_timeout=self.cfg.statement_timeout)
        await self.pool.open(wait=False)

    async def close(self) -> None:
        if self._creating is not None:  # an attempt still running would make a retriever no one closes
            self._creating.cancel()
            with suppress(BaseException):
                await self._creating
        if self._retriever is not None:
            await self._retriever.close()
        if self.pool is not None:
            await self.pool.close()

    @contextmanager
    def _statement_errors(self, query_field: str | None = None) -> Iterator[None]:
        """A request's statement errors as API errors: 503 naming what the database did, 422 for a refused value
        (a query past PostgreSQL's limits names ``query_field``, the request's field of query texts)."""
        try:
            yield
        except psycopg.errors.QueryCanceled as e:
            raise _cancelled(e) from None
        except psycopg.errors.LockNotAvailable as e:
            raise _lock_timeout(e) from None
        except ConnectionLostError as e:
            raise _lost(e) from None
        except PoolTimeout as e:
            raise self._pool_timeout(e) from None
        except _db_unavailable_errors() as e:
            raise _unavailable(e) from None
        except SchemaMissingError as e:  # the tables were dropped after the service read them
            raise ApiError(503, "schema_missing", str(e)) from None
        except psycopg.errors.InsufficientPrivilege as e:  # a search-only role (no SELECT on documents): had been 500
            raise ApiError(403, "permission_denied", f"the service's database role may not do this "
                           f"({e.diag.message_primary or e}); the operator grants it, or serves with a role that "
                           "has it") from None
        except ServerRequirementError as e:  # "explain": "generic" on PostgreSQL before 16
            raise ApiError(422, "invalid_field", f"explain: {e}", field="explain") from None
        except psycopg.DataError as e:
            raise ApiError(422, "invalid_value",
                           f"the database refused a value of this request: {e.diag.message_primary or e}") from None
        except QueryTooLargeError as e:  # had named no field, where every other 422 names one
            raise ApiError(422, "invalid_field", str(e), field=query_field) from None
        except (ValueError, TypeError) as e:  # the library's own validation (plan_search / plan_assemble)
            raise ApiError(422, "invalid_field", str(e)) from None

    def _database_answered(self) -> None:
        """The database took a statement: connection attempts that failed before no longer mean it refuses."""
        self._connects, self._connect_failing = _connect_counts(self.pool, self.pool.get_stats()), False

    def _pool_timeout(self, e: PoolTimeout) -> ApiError:
        """No pooled connection within --db-timeout: every one busy (pool_exhausted), or none could be opened.

        psycopg_pool raises the same PoolTimeout for both, and the service had answered
        'the database is not answering' to a burst of more requests than --pool-size
        while the database answered every statement. Busy: the pool holds all its
        connections and the database is not refusing new ones; else it is not answering.

        Refusing: an attempt to open one failed since this was last looked at, or that
        was so then and only successful attempts (or a passing /health) came since. Only
        "failed since last looked at" had counted, and the first request to look used it
        up: of requests timing out together in an outage one said database_unavailable
        and the others pool_exhausted, as did each that came between the pool's reconnect
        attempts (1, 2, 4 ... s apart; the pool counts the connections it is replacing in
        its size). Counters do not tell which came last when both changed: then the
        failure counts, and the next connection opened or /health passed clears it.
        """
        stats = self.pool.get_stats()
        errors, opened = connects = _connect_counts(self.pool, stats)
        if errors > self._connects[0]:
            self._connect_failing = True
        elif opened > self._connects[1]:  # only successes since: the database takes connections again
            self._connect_failing = False
        self._connects = connects
        if self._connect_failing or stats.get("pool_size", 0) < self.cfg.pool_size:
            return _unavailable(e)
        log.warning("pool exhausted: all %d connections busy for %g s", self.cfg.pool_size, self.cfg.db_timeout)
        return ApiError(503, "pool_exhausted", f"all {self.cfg.pool_size} database connections of the service "
                        f"(--pool-size) stayed busy for {self.cfg.db_timeout:g} s (--db-timeout): more requests at "
                        "once than the pool serves, or statements held up (a lock, a slow server); try again later")

    async def retriever(self) -> AsyncRetriever:
        """The retriever, created on first use; a failure is retried by the next request.

        Requests that arrive while it is being created wait for that one attempt and share its outcome: each
        had made its own attempt in turn under a lock, so with the database down the n-th of them got its 503
        after n times --db-timeout (6 s for the 6th at 1 s; found by review). The attempt is shielded: a
        request whose client leaves does not cancel the others' attempt."""
        if self._retriever is not None:
            return self._retriever
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create_retriever())
            self._creating.add_done_callback(self._created)
        return await asyncio.shield(self._creating)

    def _created(self, attempt: asyncio.Future[AsyncRetriever]) -> None:
        """The attempt is over: the next request makes another if it failed (its error read here, so that one
        whose requests all left is not logged as never retrieved)."""
        self._creating = None
        if not attempt.cancelled():
            attempt.exception()

    async def _create_retriever(self) -> AsyncRetriever:
        try:
            self._retriever = await AsyncRetriever.create(
                self.pool, schema=self.cfg.schema, prefix=self.cfg.prefix, embedder=self.embedder)
            self._database_answered()  # failed connection attempts before do not count
        except SchemaMissingError as e:
            raise ApiError(503, "schema_missing", str(e)) from None
        except PoolTimeout as e:
            raise self._pool_timeout(e) from None
        except _db_unavailable_errors() as e:
            raise _unavailable(e) from None
        return self._retriever

    def embedder_of(self, r: AsyncRetriever) -> Embedder:
        """The service's embedder, once the retriever has checked it is the one the documents were ingested with."""
        try:
            return r.embedder
        except (EmbedderMismatchError, DimensionMismatchError) as e:  # another model, or one of another size
            raise ApiError(500, "embedder_mismatch", str(e)) from None

    def embed(self, r: AsyncRetriever, texts: Sequence[str]) -> list[Any]:
        """The texts' vectors; called in a worker thread, as `embedder_of` is in it: the retriever's first check
        of the model embeds its probe, which had run on the event loop, holding up every other request."""
        embed = self.embedder_of(r).embed_query
        return [embed(t) for t in texts]

    async def health(self) -> list[dict[str, str]]:
        """The database answers on a pooled connection; the warnings /health adds to its "ok". One found lost (a
        database restarted since it was pooled) is reported as such to the pool, which then checks the others,
        and the check is tried once more: it had said 503 "the database is not answering" once per stale
        connection (up to --pool-size times) to a probe, while the database answered and a search got 200."""
        r = await self.retriever()
        with self._statement_errors():
            try:
                await self._health_check(r)
            except ConnectionLostError:
                await self._health_check(r)  # a second loss is the answer (connection_lost)
        self._database_answered()
        return await self._model_warnings(r)

    async def _model_warnings(self, r: AsyncRetriever) -> list[dict[str, str]]:
        """Whether the service's model is the documents' (serve --model another): said in /health's body and
        logged once, where /health had said a bare ok while every search embedding a query text was 500 (found
        by review). Not a 503: a service whose clients send embeddings, or search lexically, needs no model."""
        try:
            await asyncio.to_thread(self.embedder_of, r)  # its probe embedded once per record read
        except ApiError as e:
            if self._model_warned != e.message:
                self._model_warned = e.message
                log.warning("%s: a search embedding its query text answers 500 embedder_mismatch", e.message)
            return [{"code": e.code, "message": f"{e.message}; a search that embeds its query text answers 500, "
                                                "one with an embedding or in lexical mode works"}]
        self._model_warned = None
        return []

    async def _health_check(self, r: AsyncRetriever) -> None:
        async with r._connection() as conn:  # a lost one: ConnectionLostError, the pool checked, as a search
            with statement_errors():
                # the tables are still there and still onetrip's (dropped ones had left /health at 200 while
                # /search said 503 schema_missing): the same catalog read a retriever starts with
                layout = await read_layout_async(conn, self.cfg.schema, self.cfg.prefix)
                # and the word weights a search in mode auto, lexical or hybrid reads (a store made before
                # term_stats had said ok while every default /search was 503 schema_missing); whether it is
                # there, not whether this role may read it: /health answers 200 or 503, never 403
                table = layout.tables["term_stats"]
                cur = await conn.execute("SELECT to_regclass(%s) IS NULL", (table,))
                if (await cur.fetchone() or (False,))[0]:
                    raise missing_table_error(f'relation "{table}" does not exist')
                # a round trip that also picks up the model documents ingested since the retriever was made
                await r.refresh_embedder_record(conn)

    async def search(self, req: SearchRequest) -> dict[str, Any]:
        """Embed once, then one statement per result shape asked for."""
        r = await self.retriever()
        dim = r.layout.dim
        vector = req.embedding
        if vector is not None and vector.shape[0] != dim:
            raise ApiError(422, "dimension_mismatch",
                           f"embedding has {vector.shape[0]} dimensions; expected {dim}",
                           field="embedding", expected=dim, got=int(vector.shape[0]))
        if vector is None and req.mode != "lexical":
            assert req.query is not None
            vector = np.asarray((await asyncio.to_thread(self.embed, r, [req.query]))[0], dtype=np.float32)
            if vector.shape != (dim,):
                raise ApiError(500, "embedder_mismatch",
                               f"the service's embedder makes {vector.shape[-1]}-d vectors but the table stores {dim}")
        query: Any = vector if vector is not None else req.query
        text = req.query if vector is not None and req.mode == "hybrid" else None
        common = {"filters": req.filters, "mode": req.mode, "text": text,
                  **({} if req.hybrid is None else {"hybrid": req.hybrid})}
        hit_options = {"parent": req.hit_expand.parent, "neighbors": req.hit_expand.neighbors > 0, **common}
        context_options = {"expand": req.expand, "max_tokens": req.max_tokens, **common}
        hit_k = default_k(self.cfg) if req.k is None else req.k
        # k absent: one hit per TOKENS_PER_HIT tokens of budget, within --max-k (a 16,000-token budget had
        # asked for 64 hits where a request's own k is refused past 50)
        context_k = req.k if req.k is not None else min(assemble_k(None, req.max_tokens), self.cfg.max_k)
        out: dict[str, Any] = {}
        with self._statement_errors("query"):
            if req.explain is not None:  # each shape's statement explained in its place: one EXPLAIN per shape
                plans: dict[str, Any] = {}
                if req.hits:
                    plans["hits"] = explained_to_json(await r.explain(query, hit_k, kind=req.explain, **hit_options))
                if req.context:
                    plans["context"] = explained_to_json(await r.explain(query, context_k, assemble=True,
                                                                         kind=req.explain, **context_options))
                return {"explain": plans}
            # both shapes (two statements) from one snapshot: a re-ingest committed between them had given new
            # hits and an old context
            async with r.snapshot() if req.hits and req.context else nullcontext():
                if req.hits:
                    out["hits"] = [hit_to_json(h) for h in await r.search(query, hit_k, **hit_options)]
                if req.context:
                    out["context"] = context_to_json(await r.assemble(query, context_k, **context_options))
        return out

    async def search_many(self, req: SearchManyRequest) -> dict[str, Any]:
        """Embed the texts (one worker thread; not for lexical mode), then ONE statement for all the queries."""
        r = await self.retriever()
        dim = r.layout.dim
        vectors: list[Any]
        if req.mode == "lexical":
            assert req.queries is not None
            vectors = list(req.queries)
        elif req.embeddings is not None:
            for i, v in enumerate(req.embeddings):
                if v.shape[0] != dim:
                    raise ApiError(422, "dimension_mismatch",
                                   f"embeddings[{i}] has {v.shape[0]} dimensions; expected {dim}",
                                   field=f"embeddings[{i}]", expected=dim, got=int(v.shape[0]))
            vectors = list(req.embeddings)
        else:
            assert req.queries is not None
            vectors = [np.asarray(v, dtype=np.float32)
                       for v in await asyncio.to_thread(self.embed, r, list(req.queries or ()))]
            if any(v.shape != (dim,) for v in vectors):
                raise ApiError(500, "embedder_mismatch",
                               f"the service's embedder makes {vectors[0].shape[-1]}-d vectors but the table "
                               f"stores {dim}")
        options = {"parent": req.parent, "neighbors": req.neighbors, "filters": req.filters, "mode": req.mode,
                   "hybrid": req.hybrid, "texts": list(req.queries) if req.mode == "hybrid" and req.queries else None}
        with self._statement_errors("queries"):
            if req.explain is not None:
                return {"explain": explained_to_json(await r.explain_many(vectors, req.k, kind=req.explain,
                                                                          **options))}
            results = await r.search_many(vectors, req.k, **options)
        texts = req.queries or (None,) * len(vectors)
        return {"results": [{"query": q, "hits": [hit_to_json(h) for h in hits]} for q, hits in zip(texts, results)]}

    async def documents(self, req: DocumentsRequest) -> dict[str, Any]:
        """A page of `list_documents` for the request's principals: ONE statement on a pooled connection.

        It reads one row more than the page, so ``next_after`` (the page's last doc_id) is null exactly when
        nothing follows: a last page is never an extra empty request. next_after is a listed document's id, so
        a cursor tells a caller nothing it was not shown.
        """
        r = await self.retriever()  # the layout (and a 503 schema_missing before there are tables)
        with self._statement_errors():
            q, params = list_documents_query(r.layout, collection=req.collection, principals=req.principals,
                                             limit=req.limit + 1, after=req.after)
            async with r._connection() as conn:  # lost under it: connection_lost, the pool checked, as a search
                with statement_errors():
                    cur = await conn.execute(q, params)
                    rows = await cur.fetchall()
        docs = [document_to_json(document_info(row)) for row in rows[:req.limit]]
        return {"documents": docs, "next_after": docs[-1]["doc_id"] if len(rows) > req.limit else None}

    def stats(self) -> dict[str, Any]:
        pool = self.pool.get_stats() if self.pool is not None else {}
        return {"pool": pool, "pool_max": self.cfg.pool_size,
                "responses": {str(k): v for k, v in sorted(self.statuses.items())}}


# ---------------------------------------------------------------- HTTP plumbing


def _authorize(request: Request, token: str | None) -> None:
    if token is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
    if not ok:
        raise ApiError(401, "unauthorized",
                       "missing bearer token" if not header else "invalid bearer token")


def _check_content_type(value: str | None) -> None:
    """A JSON media type, or none given; a form or text body is a 415 naming its type.

    ``curl -d`` sends application/x-www-form-urlencoded unless told otherwise: use
    ``curl --json`` or ``-H 'content-type: application/json'``.
    """
    if value is None:
        return
    media, _, params = value.partition(";")
    media = media.strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise ApiError(415, "unsupported_media_type",
                       f"the body is {media}; send JSON with Content-Type: application/json")
    charset = next((v.strip().strip('"').lower() for k, _, v in (p.partition("=") for p in params.split(";"))
                    if k.strip().lower() == "charset"), "utf-8")
    if charset not in ("utf-8", "utf8"):  # JSON is UTF-8 (RFC 8259): a utf-16 body had been read as UTF-8
        raise ApiError(415, "unsupported_media_type", f"the body is in {charset}; send JSON in UTF-8")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: {"k": 1, "k": 50} would silently keep the last k."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


T = TypeVar("T")


async def _while_connected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client leaves first: then ``work`` is cancelled and ClientDisconnect raised.

    Cancelling the task makes psycopg cancel the running statement on the server
    (and give its pooled connection back); without it, a search whose client had
    gone ran to its end or to statement_timeout, holding a connection nobody
    waited for. The body must have been read: this reads the request's next
    ASGI message, which after the body is the disconnect.
    """
    task = asyncio.ensure_future(work)

    async def left() -> bool:
        return (await request.receive())["type"] == "http.disconnect"  # another message: stop watching

    watcher = asyncio.ensure_future(left())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this request was cancelled itself (shutdown): cancel both
        task.cancel()
        watcher.cancel()
        # and wait for the work to end, psycopg's cancel of its statement sent: raised at once, the shutdown
        # had closed the pool and ended the loop under it, the statement left running (found by review)
        await asyncio.wait({task}, timeout=SHUTDOWN_DRAIN)
        raise
    if task.done() or watcher.cancelled() or watcher.exception() is not None or not watcher.result():
        watcher.cancel()
        return await task
    task.cancel()  # (had it just finished, there is still nobody to answer)
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:  # the statement failed as it was cancelled: nobody is there to tell
        log.debug("error while cancelling a request whose client left", exc_info=True)
    raise ClientDisconnect()


async def _read_json(request: Request, cap: int) -> Any:
    """The body as JSON, refusing more than ``cap`` bytes before reading them all."""
    _check_content_type(request.headers.get("content-type"))
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding != "identity":  # a gzip body had been a 400 'not UTF-8', and 'br' on a plain one taken as plain
        raise ApiError(415, "unsupported_media_type",
                       f"the body is sent with Content-Encoding: {encoding}; send it unencoded")
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ApiError(400, "bad_request", "Content-Length is not a number")
        if int(length) > cap:
            raise ApiError(413, "body_too_large", f"the body has {length} bytes; the limit is {cap}", limit=cap)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise ApiError(413, "body_too_large", f"the body is over the limit of {cap} bytes", limit=cap)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise ApiError(400, "malformed_json", "the body is empty; send a JSON object")

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def finite(text: str) -> float:  # 1e400 would otherwise be read as inf
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} is outside a 64-bit float")
        return value

    try:
        return json.loads(raw.decode("utf-8"), parse_constant=no_constants, parse_float=finite,
                          object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_json", "the body is not UTF-8") from None
    except (ValueError, RecursionError) as e:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {e}") from None


async def _no_body(request: Request) -> None:
    """Read a GET's body, which must be empty: its options are query parameters."""
    async for chunk in request.stream():
        if chunk:
            raise ApiError(400, "bad_request", f"{request.method} {request.url.path} takes no body; give its "
                           "options as query parameters")


Handler = Callable[[Request], Awaitable[Response]]


def create_app(cfg: ServiceConfig, *, embedder_factory: Callable[[], Embedder] | None = None) -> Starlette:
    """The ASGI app; ``embedder_factory`` replaces the bundled model (tests, other models)."""
    service = Service(cfg, embedder_factory)
    spec = openapi_document(cfg)

    def endpoint(fn: Handler, *, public: bool = False) -> Handler:
        """Auth, error mapping and counting for one route: JSON errors, never a stack trace."""

        async def run(request: Request) -> Response:
            try:
                if not public:
                    _authorize(request, cfg.token)
                response = await fn(request)
            except ApiError as e:
                response = e.response()
            except ClientDisconnect:  # the client left (before its body was read, or before its answer, whose
                # statement was then cancelled): nobody to answer, not our error
                log.info("client disconnected during %s %s", request.method, request.url.path)
                response = ApiError(499, "client_closed_request", "the client closed the connection").response()
            except Exception:
                log.exception("internal error on %s %s", request.method, request.url.path)
                response = ApiError(500, "internal_error", "internal error (see the server log)").response()
            service.statuses[response.status_code] += 1
            return response

        return run

    async def search(request: Request) -> Response:
        req = parse_search(await _read_json(request, cfg.max_body), cfg)
        return JSONResponse(await _while_connected(request, service.search(req)))

    async def search_many(request: Request) -> Response:
        req = parse_search_many(await _read_json(request, cfg.max_body), cfg)
        return JSONResponse(await _while_connected(request, service.search_many(req)))

    async def documents(request: Request) -> Response:
        req = parse_documents(request.query_params.multi_items(), cfg)
        await _no_body(request)  # read, so that _while_connected's next message is the client leaving
        return JSONResponse(await _while_connected(request, service.documents(req)))

    async def health(request: Request) -> Response:
        await _no_body(request)  # read, so that _while_connected's next message is the client leaving
        # a client that leaves is a 499, and its check stops waiting (a down database: --db-timeout for nobody)
        warnings = await _while_connected(request, service.health())
        return JSONResponse({"status": "ok", **({"warnings": warnings} if warnings else {})})

    async def stats(request: Request) -> Response:
        return JSONResponse(service.stats())

    async def openapi(request: Request) -> Response:
        return JSONResponse(spec)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        detail = f"{request.method} {request.url.path}: {exc.detail}"
        allow = (exc.headers or {}).get("Allow")
        if allow:  # RFC 9110: a 405 says which methods the resource takes (Starlette's header had been dropped)
            detail += f" (allowed: {allow})"
        response = ApiError(exc.status_code, code, detail).response()
        response.headers.update(exc.headers or {})
        service.statuses[response.status_code] += 1  # Starlette answers these outside `endpoint`
        return response

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        await service.start()
        try:
            yield
        finally:
            await service.close()

    app = Starlette(
        routes=[
            Route("/search", endpoint(search), methods=["POST"]),
            Route("/search_many", endpoint(search_many), methods=["POST"]),
            Route("/documents", endpoint(documents), methods=["GET"]),
            Route("/health", endpoint(health, public=True), methods=["GET"]),
            Route("/stats", endpoint(stats), methods=["GET"]),
            Route("/openapi.json", endpoint(openapi), methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    # a trailing slash is a JSON 404 like any unknown path: Starlette's default answered a bare 307 to a URL
    # built from the Host header, before the token check and outside /stats (found by the HTTP review)
    app.router.redirect_slashes = False
    app.state.service = service
    return app


def answering_503_when_stopped(app: Any) -> Callable[..., Awaitable[None]]:
    """``app`` as uvicorn runs it in `run`: a request its stop cancels (still open --shutdown-timeout after the
    stop, such as a client that never finished its body) gets 503 ``shutting_down`` if it has no answer yet,
    and one line in the log; uvicorn had logged each as an error with a traceback."""

    active: set[asyncio.Task[Any]] = set()  # the requests under way

    async def asgi(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope.get("type") == "lifespan":
            async def shutdown_after_requests() -> Any:
                # the pool is closed at shutdown only once the cancelled requests have ended (psycopg cancels
                # their statements on the server then): a request cancelled by the stop had left its statement
                # running, waiting on a lock with its transaction open, when the pool closed under it and the
                # loop's end interrupted psycopg's cancel request (found by review)
                message = await receive()
                if message.get("type") == "lifespan.shutdown" and active:
                    await asyncio.wait(set(active), timeout=SHUTDOWN_DRAIN)
                return message
            await app(scope, shutdown_after_requests, send)
            return
        task = asyncio.current_task()
        if task is not None:
            active.add(task)
        started = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await app(scope, receive, tracked)
        except asyncio.CancelledError:
            if scope.get("type") != "http":
                raise
            log.info("%s %s cancelled: the service stopped before it ended (--shutdown-timeout)",
                     scope.get("method"), scope.get("path"))
            if not started:
                with suppress(AttributeError):  # app as create_app makes it; /stats counts the 503 too
                    app.state.service.statuses[503] += 1
                with suppress(Exception):  # the client may be gone
                    await ApiError(503, "shutting_down", "the service is stopping; try again later")\
                        .response()(scope, receive, send)
        finally:
            active.discard(task)  # type: ignore[arg-type]

    return asgi


def check_listen(host: str, port: int) -> None:
    """An OnetripError unless this process can listen on host:port (tried and let go, as uvicorn binds it).

    uvicorn binds only after the startup (the model loaded, ~8 s), then logged the failure and exited with
    its own code 3, which onetrip's exit codes give to "some files or ids failed". A port outside 0-65535
    is a ValueError naming --port (70000 had passed this check and ended in uvicorn's OverflowError traceback).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"--port {port!r}: a TCP port is from 0 to 65535 (0: any free port)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OnetripError(f"cannot listen on {host}:{port}: {e.strerror} (--host)") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as e:
            raise OnetripError(f"cannot listen on {host}:{port}: {e.strerror or e} (another --port or --host)") \
                from None


def run(cfg: ServiceConfig, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, log_level: str = "info",
        access_log: bool = True, embedder_factory: Callable[[], Embedder] | None = None,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
    """Serve until interrupted (uvicorn: one process, one event loop)."""
    import logging.config

    import uvicorn

    from .connection import probe_dsn

    if not (isinstance(shutdown_timeout, (int, float)) and 0 <= shutdown_timeout < float("inf")):
        raise ValueError(f"--shutdown-timeout {shutdown_timeout!r}: a number of seconds, 0 or more")
    config = log_config(log_level)
    logging.config.dictConfig(config)  # before the warning below, which had gone to Python's last-resort handler
    check_listen(host, port)
    if cfg.token is None and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without a bearer token: anyone who can reach it can search", host)
    # one connection, opened and closed, waiting --db-timeout at most as a request would (a DSN's connect_timeout=0
    # had kept serve from ever listening): a DSN value libpq refuses (port=99999) fails the start (InvalidDsnError,
    # exit 2; the pool had retried it for ever, every request a 503 "not answering"); a server that does not
    # answer yet is logged, and the service starts, answering 503 until it does
    unreachable = None if cfg.dsn is None else probe_dsn(cfg.dsn, timeout=cfg.db_timeout)
    if unreachable is not None:
        log.warning("%s; the service starts and answers 503 until the database does", unreachable)
    # the model loads here, after the checks above and before serving, as `ingest` loads it: a folder that holds
    # no model (or a broken one) is the start's error (the CLI: one line, exit 2); loaded in the service's
    # startup it had been uvicorn's traceback and exit 3. The startup gets this embedder, loaded
    embedder = (embedder_factory or SentenceTransformerEmbedder)()
    embedder.dim  # noqa: B018
    app = answering_503_when_stopped(create_app(cfg, embedder_factory=lambda: embedder))
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=access_log, server_header=False,
                lifespan="on", log_config=config,
                timeout_graceful_shutdown=shutdown_timeout)  # type: ignore[arg-type]  # a float works: asyncio's


def default_k(cfg: ServiceConfig) -> int:
    """A request's hits when it names no k: search's own, but never past the operator's --max-k (a cap of 2 had
    refused k=3 and still given 5 hits to a request without k)."""
    return min(DEFAULT_K, cfg.max_k)


def log_config(log_level: str) -> dict[str, Any]:
    """uvicorn's logging setup with the service's own loggers (onetrip.*, psycopg's pool) added at ``log_level``.

    uvicorn configures only its own loggers: the service's lines went to Python's last-resort handler, which
    prints warnings and above whatever --log-level says (the pool's reconnect warnings at critical) and drops
    info (a client that left mid-request, which the README says is logged at info level)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    level = "DEBUG" if log_level.lower() == "trace" else log_level.upper()  # uvicorn's own TRACE is below DEBUG
    for name in ("onetrip", "psycopg.pool"):
        config["loggers"][name] = {"handlers": ["default"], "level": level, "propagate": False}
    if level == "INFO":  # the pool logs every checkout and return at info, six lines a request past
        config["loggers"]["psycopg.pool"]["level"] = "WARNING"  # --no-access-log; --log-level debug shows them
    return config


def token_from_env(token: str | None) -> str | None:
    """--token, else $ONETRIP_TOKEN (preferred: a flag shows in the process list). An empty one is kept, for
    ServiceConfig to refuse: `--token "$SECRET"` with SECRET unset had started a service without a token."""
    return token if token is not None else os.environ.get(ENV_TOKEN)


# ---------------------------------------------------------------- OpenAPI


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def openapi_document(cfg: ServiceConfig) -> dict[str, Any]:
    """The OpenAPI 3.1 description of this service, with the operator's caps in it."""
    strings = {"type": "array", "items": {"type": "string"}}
    revision = _nullable({"type": "integer", "description": "the document revision that last wrote this section"})
    related = {"type": "object", "additionalProperties": False,
               "required": ["section_id", "sequence_index", "heading_path", "content", "revision"],
               "properties": {"section_id": {"type": "string"}, "sequence_index": {"type": "integer"},
                              "heading_path": strings, "content": {"type": "string"}, "revision": revision}}
    hit = {
        "type": "object", "additionalProperties": False,
        "required": ["rank", "distance", "score", "doc_id", "section_id", "sequence_index", "heading_path",
                     "anchor", "content", "revision", "parent", "prev", "next"],
        "properties": {
            "rank": {"type": "integer", "minimum": 1},
            "distance": _nullable({"type": "number", "description": "cosine distance (null in lexical mode)"}),
            "score": _nullable({"type": "number", "description": "RRF score (hybrid and lexical modes)"}),
            "doc_id": {"type": "string"}, "section_id": {"type": "string"}, "sequence_index": {"type": "integer"},
            "heading_path": strings, "anchor": _nullable({"type": "string"}), "content": {"type": "string"},
            "revision": revision,
            "parent": _nullable(_ref("RelatedSection")), "prev": _nullable(_ref("RelatedSection")),
            "next": _nullable(_ref("RelatedSection")),
        },
    }
    passage = {
        "type": "object", "additionalProperties": False,
        "required": ["doc_id", "section_id", "sequence_index", "heading_path", "anchor", "roles", "best_rank",
                     "doc_rank", "distance", "revision", "context_tokens", "content"],
        "properties": {
            "doc_id": {"type": "string"}, "section_id": {"type": "string"}, "sequence_index": {"type": "integer"},
            "heading_path": strings, "anchor": _nullable({"type": "string"}),
            "roles": {"type": "array", "items": {"enum": ["hit", "parent", "ancestor", "neighbor", "section",
                                                          "document"]}},
            "best_rank": {"type": "integer"}, "doc_rank": {"type": "integer"},
            "distance": _nullable({"type": "number"}), "revision": _nullable({"type": "integer"}),
            "context_tokens": {"type": "integer"}, "content": {"type": "string"},
        },
    }
    context = {
        "type": "object", "additionalProperties": False, "required": ["tokens", "max_tokens", "hits", "passages", "text"],
        "properties": {"tokens": {"type": "integer", "description": "what the budget counted: the passages' "
                                  "context_tokens; text may cost less, as it does not repeat the header of a "
                                  "passage that continues the one before it"},
                       "max_tokens": _nullable({"type": "integer"}),
                       "hits": {"type": "integer", "description": "hits found before the budget"},
                       "passages": {"type": "array", "items": _ref("Passage")},
                       "text": {"type": "string", "description": "prompt-ready text of the passages"}},
    }
    expand = {
        "type": "object", "additionalProperties": False,
        "description": "Hits get parent and prev/next (±1) when parent / neighbors > 0; the context uses all of it. "
                       "The defaults below apply once expand is given; without expand the context adds the parent "
                       "and the section subtree (onetrip.CONTEXT_DEFAULT).",
        "properties": {
            "parent": {"type": "boolean", "default": True},
            "neighbors": {"type": "integer", "minimum": 0, "maximum": MAX_NEIGHBORS, "default": 1},
            "neighbor_scope": {"enum": list(NEIGHBOR_SCOPES), "default": "any"},
            "ancestors": {"type": "boolean", "default": False},
            "section": {"type": "boolean", "default": False},
            "document": {"type": "boolean", "default": False},
            "document_max_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_BUDGET, "default": 2000},
        },
    }
    filters = {
        "type": "object", "additionalProperties": False,
        "description": "Applied to hits and to every section an expansion adds.",
        "properties": {"collections": strings, "doc_ids": strings, "source_prefix": {"type": "string"},
                       "metadata": {"type": "object", "description": "documents whose metadata contains this"}},
    }
    defaults = HybridOptions()
    hybrid = {
        "type": "object", "additionalProperties": False,
        "description": "the lexical side's and the fusion's options (onetrip.HybridOptions), for hybrid and lexical "
                       "mode (a 422 in dense mode); each list holds at least k candidates",
        "properties": {
            "candidates": {"type": "integer", "minimum": 1, "maximum": _candidates_cap(cfg),
                           "default": defaults.candidates},
            "rrf_k": {"type": "integer", "minimum": 1, "maximum": MAX_RRF_K, "default": defaults.rrf_k},
            **{name: {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT, "default": getattr(defaults, name)}
               for name in ("dense_weight", "lexical_weight", "term_weight")},
            "max_term_share": {"type": "number", "minimum": 0, "maximum": 1, "default": defaults.max_term_share},
            "rare_term_sections": {"type": "integer", "minimum": 0, "maximum": PG_INT_MAX,
                                   "default": defaults.rare_term_sections},
            "tf_weight": _nullable({"type": "number", "minimum": 0, "maximum": MAX_WEIGHT,
                                    "description": "null: the mode's default (2 lexical, 0 hybrid)"}),
        },
    }
    explain_doc = {"anyOf": [{"type": "boolean"}, {"enum": list(EXPLAIN_KINDS)}], "default": False,
                   "description": "the plan of the statement(s) this request would send instead of their results, "
                                  "as `onetrip search --explain KIND --json` (true: analyze, which runs them; plan; "
                                  "generic: the plan for any values, PostgreSQL 16+). "
                                  + ("Taken: this service's ACL does not limit its callers." if
                                     cfg.principals is None or cfg.trust_request_principals else
                                     "Refused (403 explain_not_allowed) by this service: its ACL limits what a "
                                     "request reads, and a plan counts the rows it read, hidden ones included.")}
    explained = {
        "type": "object", "additionalProperties": False,
        "required": ["statement", "params", "plan", "kind", "vector_index_scans"],
        "description": "onetrip.Explained, as `onetrip search --explain --json` prints it",
        "properties": {
            "statement": {"type": "string", "description": "the statement as psycopg sends it (%(name)s binds)"},
            "params": {"type": "object", "description": "its binds; query embeddings as a placeholder"},
            "plan": {"type": "string", "description": "the server's EXPLAIN output (text format)"},
            "kind": {"enum": list(EXPLAIN_KINDS)},
            "vector_index_scans": {**strings, "description": "indexes whose scan orders by vector distance"},
        },
    }
    document = {
        "type": "object", "additionalProperties": False,
        "required": ["doc_id", "title", "source_uri", "collection", "acl", "revision", "section_count",
                     "token_count", "ingested_at", "embedder", "parse_warnings"],
        "description": "onetrip.DocumentInfo, as `onetrip documents --json` prints it",
        "properties": {
            "doc_id": {"type": "string"}, "title": _nullable({"type": "string"}), "source_uri": {"type": "string"},
            "collection": {"type": "string"},
            "acl": _nullable({**strings, "description": "principals that may read it; null: everyone"}),
            "revision": {"type": "integer"}, "section_count": {"type": "integer"},
            "token_count": {"type": "integer"}, "ingested_at": {"type": "string", "format": "date-time"},
            "embedder": _nullable({"type": "string"}), "parse_warnings": strings,
        },
    }
    documents = {"type": "object", "additionalProperties": False, "required": ["documents", "next_after"],
                 "properties": {"documents": {"type": "array", "items": _ref("Document"),
                                              "description": "a page, by doc_id"},
                                "next_after": _nullable({"type": "string", "description": (
                                    "the page's last doc_id when more documents follow: ask again with "
                                    "after=<this>; null on the last page")})}}
    principals_doc = ("the caller's principals; accepted only when the operator runs with "
                      "--trust-request-principals (else 403)" if cfg.trust_request_principals else
                      "refused (403): this service takes principals from its operator, not from requests")
    request = {
        "type": "object", "additionalProperties": False,
        "description": "query (text) or embedding; both only in hybrid (or auto) mode. Unknown fields are a 422; "
                       "a field set to null is the same as one left out (principals and max_tokens "
                       "excepted: null is a 422).",
        "properties": {
            "query": {"type": "string", "minLength": 1, "pattern": "\\S"},  # not blank either
            "embedding": {"type": "array", "items": {"type": "number"}, "minItems": 1,
                          "description": "a query embedding of the table's dimension"},
            "k": {"type": "integer", "minimum": 1, "maximum": cfg.max_k,
                  "description": f"number of hits; default {default_k(cfg)} for hits and, for the context, "
                                 f"one per {TOKENS_PER_HIT} tokens of max_tokens, at most {cfg.max_k}"},
            "mode": {"enum": list(MODE_CHOICES), "default": "auto",
                     "description": "auto: hybrid when query (text) is given, dense for an embedding alone"},
            "expand": _ref("Expand"),
            "filters": _ref("Filters"),
            "principals": {**strings, "description": principals_doc},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": cfg.max_tokens_cap,
                           "default": cfg.default_max_tokens, "description": "token budget of the context"},
            "hits": {"type": "boolean", "default": True, "description": "return per-hit rows (one statement)"},
            "context": {"type": "boolean", "default": True,
                        "description": "return the assembled context (one statement)"},
            "hybrid": _ref("Hybrid"),
            "explain": explain_doc,
        },
    }
    many_request = {
        "type": "object", "additionalProperties": False,
        "description": "queries (texts), embeddings, or both (hybrid, one embedding per query): every query's "
                       "top-k hits with parent and previous/next, in ONE statement (texts: hybrid search by "
                       "default, as /search). Unknown fields are a 422; null is the same as leaving a field "
                       "out (principals excepted: a 422).",
        "properties": {
            "queries": {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": "\\S"}, "minItems": 1,
                        "maxItems": MAX_QUERIES},
            "embeddings": {"type": "array", "minItems": 1, "maxItems": MAX_QUERIES,
                           "items": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
            "k": {"type": "integer", "minimum": 1, "maximum": cfg.max_k, "default": default_k(cfg),
                  "description": "hits per query"},
            "mode": {"enum": list(MODE_CHOICES), "default": "auto",
                     "description": "auto: hybrid when queries (texts) are given, dense for embeddings alone; "
                                    "lexical and hybrid need queries"},
            "expand": {"type": "object", "additionalProperties": False,
                       "properties": {"parent": {"type": "boolean", "default": True},
                                      "neighbors": {"type": "integer", "minimum": 0, "maximum": 1, "default": 1}}},
            "filters": _ref("Filters"),
            "principals": {**strings, "description": principals_doc},
            "hybrid": _ref("Hybrid"),
            "explain": explain_doc,
        },
    }
    many_response = {
        "type": "object", "additionalProperties": False,
        "oneOf": [{"required": ["results"]}, {"required": ["explain"]}],
        "properties": {"explain": _ref("Explained"),
                       "results": {"type": "array", "description": "one per query, in the order given",
                                   "items": {"type": "object", "additionalProperties": False,
                                             "required": ["query", "hits"],
                                             "properties": {"query": _nullable({"type": "string"}),
                                                            "hits": {"type": "array", "items": _ref("Hit")}}}}},
    }
    response = {
        "type": "object", "additionalProperties": False,
        "description": "hits and/or context, as asked for; with explain, only explain: each shape's plan",
        "properties": {"hits": {"type": "array", "items": _ref("Hit")}, "context": _ref("Context"),
                       "explain": {"type": "object", "additionalProperties": False,
                                   "properties": {"hits": _ref("Explained"), "context": _ref("Explained")}}},
    }
    error = {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"],
                                 "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                                "field": {"type": "string"}}}},
    }

    def err(description: str) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}

    def ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    secured = [{"bearer": []}] if cfg.token else []
    auth = {"401": err("missing or wrong bearer token")} if cfg.token else {}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "onetrip", "version": _version(),
                 "description": "Retrieval over PostgreSQL + pgvector: each result shape is one SQL statement."},
        "paths": {
            "/search": {"post": {
                "summary": "Top-k hits with parent/neighbors and/or an assembled, budgeted context",
                "security": secured,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("SearchRequest")}}},
                "responses": {
                    "200": ok(_ref("SearchResponse")),
                    "400": err("malformed JSON (also: a key twice in one object)"), **auth,
                    "403": err(SEARCH_403),
                    "413": err(f"body over {cfg.max_body} bytes"),
                    "415": err("a Content-Type other than JSON"),
                    "422": err("invalid request: unknown field, k or budget out of range, wrong embedding "
                               "dimension, unknown filter key"),
                    "503": err(DATABASE_503),
                },
            }},
            "/search_many": {"post": {
                "summary": "Several queries' top-k hits with parent/neighbors, in one SQL statement",
                "security": secured,
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("SearchManyRequest")}}},
                "responses": {
                    "200": ok(_ref("SearchManyResponse")),
                    "400": err("malformed JSON (also: a key twice in one object)"), **auth,
                    "403": err(SEARCH_403),
                    "413": err(f"body over {cfg.max_body} bytes"),
                    "415": err("a Content-Type other than JSON"),
                    "422": err("invalid request: unknown field, neither queries nor embeddings, not one embedding "
                               f"per query, more than {MAX_QUERIES} queries, k out of range, wrong embedding "
                               "dimension, a mode the given fields cannot run"),
                    "503": err(DATABASE_503),
                },
            }},
            "/documents": {"get": {
                "summary": "The stored documents the request's principals may read, by doc_id, a page at a time "
                           "(onetrip documents --limit/--after)",
                "security": secured,
                "parameters": [
                    {"name": "collection", "in": "query", "required": False, "schema": {"type": "string"},
                     "description": "only this collection"},
                    {"name": "principals", "in": "query", "required": False, "style": "form", "explode": True,
                     "schema": strings, "description": principals_doc + " (repeat the parameter for several)"},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_DOCUMENTS_LIMIT,
                                "default": DEFAULT_DOCUMENTS_LIMIT},
                     "description": "documents per page"},
                    {"name": "after", "in": "query", "required": False, "schema": {"type": "string"},
                     "description": "the previous page's next_after: documents whose doc_id sorts after it"},
                ],
                "responses": {
                    "200": ok(_ref("DocumentList")),
                    "400": err("a body (the options are query parameters)"), **auth,
                    "403": err("principals given but not allowed; the service's database role may not read "
                               "the documents table (permission_denied: a search-only role)"),
                    "422": err("unknown query parameter, collection, limit or after given twice, limit not an "
                               f"integer from 1 to {MAX_DOCUMENTS_LIMIT}, a NUL in a value"),
                    "503": err(DATABASE_503),
                },
            }},
            "/health": {"get": {
                "summary": "Is the database answering? (no token needed)", "security": [],
                "responses": {"200": ok({"type": "object", "properties": {
                    "status": {"const": "ok"},
                    # the service's model is not the documents' (embedder_mismatch): text searches answer 500
                    "warnings": {"type": "array", "items": {"type": "object", "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"}}}}}}),
                              "503": err("database unavailable, every pooled connection busy, connection lost, "
                                         "or schema missing")},
            }},
            "/stats": {"get": {
                "summary": "Pool statistics (psycopg_pool get_stats) and response counts by status",
                "security": secured,
                "responses": {"200": ok({"type": "object", "properties": {
                    "pool": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "pool_max": {"type": "integer"},
                    "responses": {"type": "object", "additionalProperties": {"type": "integer"}}}}), **auth},
            }},
            "/openapi.json": {"get": {"summary": "This document", "security": secured,
                                      "responses": {"200": ok({"type": "object"}), **auth}}},
        },
        "components": {"schemas": {
            "SearchRequest": request, "Expand": expand, "Filters": filters, "Hybrid": hybrid,
            "SearchResponse": response,
            "SearchManyRequest": many_request, "SearchManyResponse": many_response,
            "Hit": hit, "RelatedSection": related, "Context": context, "Passage": passage, "Error": error,
            "Explained": explained, "Document": document, "DocumentList": documents,
        }},
    }
    if cfg.token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def _version() -> str:
    from . import __version__

    return __version__


__all__ = ["ApiError", "ServiceConfig", "create_app", "openapi_document", "operator_principals", "parse_documents",
           "parse_search", "parse_search_many", "run", "token_from_env"]
