"""`onetrip serve` end to end: a real uvicorn server on loopback, a real HTTP client, the test database.

The server runs in a background thread (uvicorn on a pre-bound 127.0.0.1 socket)
with the deterministic HashEmbedder injected; the one CLI test starts
`onetrip serve` as a subprocess with the bundled model.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from onetrip import Expansion, Filters, HybridOptions, Retriever, init_schema  # noqa: E402
from onetrip.cli import context_to_json  # noqa: E402
from onetrip.cli import hit_to_json as hit_json  # noqa: E402
from onetrip.http_service import ServiceConfig, create_app  # noqa: E402
from onetrip.ingest import ingest_paths  # noqa: E402
from onetrip.layout import Layout  # noqa: E402
from onetrip.retrieve import context_expansion  # noqa: E402

from .embedders import HashEmbedder, LoopWatchingEmbedder, linked_model_copy  # noqa: E402

PAD = " This sentence is padding so that the section is not merged into its neighbour as a tiny one."
DOCS = {
    "connections.md": f"""# Connections and Authentication

## Connection Settings

The server setting max_connections determines the maximum number of concurrent connections.{PAD}

### Reserved slots

superuser_reserved_connections slots are kept for superusers.{PAD}

## Monitoring

Query pg_stat_activity to see one row per server process.{PAD}
""",
    "cooking.md": f"""# Cooking

## Pasta

Boil water, add salt, cook the pasta for nine minutes.{PAD}

## Bread

Knead the dough and let it rise for an hour.{PAD}
""",
}
SECRET = f"""# Salaries

## Bands

The salary bands for 2026 are confidential and kept for HR only.{PAD}
"""


@pytest.fixture
def corpus(db, tmp_path) -> Layout:
    """Two public documents, one readable by principal "hr" only (collection "private")."""
    layout = init_schema(db, Layout(dim=384))
    pub, sec = tmp_path / "public", tmp_path / "secret"
    pub.mkdir()
    sec.mkdir()
    for name, text in DOCS.items():
        (pub / name).write_text(text)
    (sec / "salaries.md").write_text(SECRET)
    rep = ingest_paths(db, [pub], layout=layout, embedder=HashEmbedder())
    assert rep.new == 2 and not rep.failed
    rep = ingest_paths(db, [sec], layout=layout, embedder=HashEmbedder(), collection="private", acl=("hr",))
    assert rep.new == 1
    return layout


@contextmanager
def serving(dsn: str, embedder_factory: Any = HashEmbedder, **options: Any) -> Iterator[str]:
    """A real uvicorn server for ``ServiceConfig(dsn, **options)``; yields its base URL."""
    app = create_app(ServiceConfig(dsn=dsn, **options), embedder_factory=embedder_factory)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the server did not start (see its log above)"
        assert time.monotonic() < deadline, "the server took over 30 s to start"
        time.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "the server did not shut down"


@contextmanager
def serving_one_backend(db: psycopg.Connection, dsn: str, name: str, **options: Any) -> Iterator[tuple[str, Any]]:
    """`serving` with a pool of one connection, and that connection's backend as `statement_log.watch` takes it:
    what a request sends is counted at the server. The /health call makes the retriever (reads the layout)."""
    app_name = f"onetrip-{name}-{os.getpid()}"
    with serving(dsn, pool_size=1, application_name=app_name, **options) as base:
        assert call(base, "GET", "/health")[0] == 200
        (pid,) = db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app_name,)).fetchone()
        yield base, SimpleNamespace(info=SimpleNamespace(backend_pid=pid))


def call(base: str, method: str, path: str, body: Any = None, *, token: str | None = None,
         raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """One HTTP request on a fresh connection: (status, decoded JSON body, headers)."""
    host, port = base.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    h = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    assert b"Traceback" not in payload
    return resp.status, json.loads(payload) if payload else None, {k.lower(): v for k, v in resp.getheaders()}


def search(base: str, body: Any, **kw: Any) -> tuple[int, Any]:
    status, data, _ = call(base, "POST", "/search", body, **kw)
    return status, data


def searches_at_once(base: str, body: Any, n: int) -> list[tuple[int, Any]]:
    """``n`` /search requests sent together, each from a thread of its own: their (status, body) as they came."""
    answers: list[tuple[int, Any]] = []
    threads = [threading.Thread(target=lambda: answers.append(search(base, body))) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def assert_error(status: int, data: Any, want_status: int, code: str, *words: str) -> None:
    assert status == want_status, data
    assert set(data) == {"error"} and data["error"]["code"] == code, data
    for w in words:
        assert w in data["error"]["message"], (w, data)


# ---------------------------------------------------------------- results


def python_api(db: psycopg.Connection, body: dict[str, Any], principals: tuple[str, ...] | None = ()) -> dict:
    """What the Python API returns for the same request (the expected HTTP response)."""
    r = Retriever(db, embedder=HashEmbedder())
    mode = body.get("mode", "auto")  # auto: hybrid when the query text is given
    q = body.get("embedding", body.get("query"))
    text = body.get("query") if "embedding" in body and mode in ("hybrid", "auto") else None
    # the context's: expand given (even {}) is an Expansion with its defaults; absent, the tuned default
    exp = Expansion(**body["expand"]) if "expand" in body else context_expansion()
    flt = Filters(principals=principals, **body.get("filters", {}))
    k = body.get("k")  # absent: 5 hits; the context takes one hit per 250 tokens of budget
    hit_exp = Expansion(**body.get("expand", {}))
    hybrid = {"hybrid": body["hybrid"]} if "hybrid" in body else {}
    out: dict[str, Any] = {}
    if body.get("hits", True):
        out["hits"] = [hit_json(h) for h in r.search(q, 5 if k is None else k, parent=hit_exp.parent,
                                                       neighbors=hit_exp.neighbors > 0, filters=flt, mode=mode,
                                                       text=text, **hybrid)]
    if body.get("context", True):
        out["context"] = context_to_json(r.assemble(q, k, expand=exp, max_tokens=body.get("max_tokens", 2000),
                                                    filters=flt, mode=mode, text=text, **hybrid))
    return out


REQUESTS = [
    {"query": "maximum number of concurrent connections"},
    {"query": "pasta", "k": 2, "hits": False},
    {"query": "maximum number of concurrent connections", "k": 2, "expand": {}},  # Expansion(): parent + ±1
    {"query": "bread dough", "k": 3, "context": False, "expand": {"parent": False, "neighbors": 0}},
    {"embedding": HashEmbedder().embed_query("reserved slots").tolist(), "k": 4, "max_tokens": 120,
     "expand": {"neighbors": 2, "neighbor_scope": "parent", "ancestors": True}},
    {"query": "max_connections", "mode": "hybrid", "k": 3, "filters": {"doc_ids": ["connections.md"]}},
    {"query": "pg_stat_activity server process", "mode": "lexical", "k": 2,
     "expand": {"section": True, "document": True, "document_max_tokens": 500}},
    {"query": "salt water", "embedding": HashEmbedder().embed_query("pasta").tolist(), "mode": "hybrid",
     "filters": {"collections": ["default"], "source_prefix": "", "metadata": {}}},
    {"query": "salt water", "embedding": HashEmbedder().embed_query("pasta").tolist(), "k": 2},  # auto: hybrid
    {"query": "salt water", "mode": "dense", "k": 2, "context": False},
    # HybridOptions, as the Python API takes them (the weights change the fused scores)
    {"query": "max_connections", "k": 3, "hybrid": {"lexical_weight": 3, "tf_weight": 1, "candidates": 5}},
    {"query": "pg_stat_activity server process", "mode": "lexical", "k": 2, "hybrid": {"tf_weight": 0}},
]


def test_results_equal_the_python_api(db, dsn, corpus):
    with serving(dsn) as base:
        for body in REQUESTS:
            status, data = search(base, body)
            assert status == 200, data
            assert data == python_api(db, body), body
            assert set(data) == {"hits", "context"} & {k for k in ("hits", "context") if body.get(k, True)}
        status, data = search(base, {"query": "connections", "k": 3})
        assert len(data["hits"]) == 3 and data["hits"][0]["rank"] == 1
        assert data["context"]["passages"] and data["context"]["text"].startswith("### ")
        assert data["context"]["tokens"] <= data["context"]["max_tokens"] == 2000


def test_each_shape_is_one_statement(db, dsn, corpus, statement_log):
    """Hits: one statement; context: one; both: two (one per shape), on one pooled connection, in one
    read-only REPEATABLE READ transaction (found by review: a re-ingest committed between the two had given
    new hits and an old context)."""
    with serving_one_backend(db, dsn, "test") as (base, backend):
        sent = []
        for shape in ({"hits": True, "context": False}, {"hits": False, "context": True}, {}):
            with statement_log.watch(backend) as w:
                assert search(base, {"query": "pasta", "k": 3, **shape})[0] == 200
            sent.append(w.statements)
        assert [len(s) for s in sent] == [1, 1, 4]
        assert sent[2][0] == "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" and sent[2][3] == "COMMIT", sent[2]


def test_health_stats_and_openapi(dsn, corpus):
    jsonschema = pytest.importorskip("jsonschema")
    with serving(dsn, max_k=20, max_tokens_cap=3000) as base:
        assert call(base, "GET", "/health")[:2] == (200, {"status": "ok"})
        status, spec, _ = call(base, "GET", "/openapi.json")
        assert status == 200 and spec["openapi"].startswith("3.1")
        post = spec["paths"]["/search"]["post"]
        assert post["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SearchRequest"}
        assert post["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SearchResponse"}
        schemas = spec["components"]["schemas"]
        req = schemas["SearchRequest"]
        assert set(req["properties"]) == {"query", "embedding", "k", "mode", "expand", "filters", "principals",
                                          "max_tokens", "hits", "context", "hybrid", "explain"}
        assert "explain" in schemas["SearchManyRequest"]["properties"]
        assert set(schemas["Hybrid"]["properties"]) == set(HybridOptions.__dataclass_fields__)
        assert req["properties"]["k"]["maximum"] == 20 and req["properties"]["max_tokens"]["maximum"] == 3000
        # a blank query is refused (422), and the schema says so (it had allowed any non-empty string)
        blank = jsonschema.Draft202012Validator({"components": spec["components"],
                                                 "$ref": "#/components/schemas/SearchRequest"})
        assert not blank.is_valid({"query": "   "}) and blank.is_valid({"query": " pasta "})
        assert call(base, "POST", "/search", {"query": "   "})[0] == 422
        assert {"/health", "/stats", "/openapi.json", "/documents"} <= set(spec["paths"])
        for path, method in (("/search", "post"), ("/search_many", "post"), ("/documents", "get")):
            assert "pool_exhausted" in spec["paths"][path][method]["responses"]["503"]["description"], path
        try:
            from openapi_spec_validator import validate
        except ImportError:
            pass
        else:
            validate(spec)  # a valid OpenAPI 3.1 document, not just a dict

        def validator(name: str) -> Any:
            return jsonschema.Draft202012Validator({"components": spec["components"],
                                                    "$ref": f"#/components/schemas/{name}"})

        for body in REQUESTS:
            validator("SearchRequest").validate(body)
            status, data = search(base, body)
            validator("SearchResponse").validate(data)
        status, data = search(base, {"query": "x", "k": 0})
        validator("Error").validate(data)
        status, data = documents(base)
        assert status == 200, data
        validator("DocumentList").validate(data)
        assert set(data["documents"][0]) == set(schemas["Document"]["properties"])
        status, data = documents(base, "limit=1")
        assert status == 200 and data["next_after"] == data["documents"][0]["doc_id"], data
        validator("DocumentList").validate(data)
        params = {q["name"]: q for q in spec["paths"]["/documents"]["get"]["parameters"]}
        assert set(params) == {"collection", "principals", "limit", "after"}
        assert (params["limit"]["schema"]["default"], params["limit"]["schema"]["maximum"]) == (1000, 10000)

        status, stats, _ = call(base, "GET", "/stats")
        assert status == 200 and stats["pool_max"] == 10
        assert 1 <= stats["pool"]["pool_size"] <= 10 and stats["responses"]["200"] >= len(REQUESTS)


# ---------------------------------------------------------------- bad input


def _nested(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth):
        out = {"a": out}
    return out


def test_null_is_a_field_left_out(db, dsn, corpus):
    """"k": null and "query": null had been read as absent, "max_tokens": null, "hits": null and filter
    values as 422s: now every null but principals' is a field left out."""
    with serving(dsn) as base:
        body = {"query": "pasta", "k": 2}
        nulls = {"embedding": None, "mode": None, "hits": None, "context": None,
                 "expand": {"neighbors": None}, "filters": {"collections": None, "metadata": None}}
        status, data = search(base, {**body, **nulls})
        assert status == 200, data
        assert data == python_api(db, {**body, "expand": {}})
        status, data, _ = call(base, "POST", "/search_many", {"queries": ["pasta"], "embeddings": None, "k": None})
        assert status == 200 and len(data["results"][0]["hits"]) == 5, data
        # where Python reads None as something a request may not ask for (no budget, no ACL check): a 422
        assert_error(*search(base, {**body, "max_tokens": None}), 422, "invalid_field", "null (no budget")
        assert_error(*search(base, {**body, "principals": None}), 422, "invalid_field", "null is not taken")


def test_the_model_check_embeds_its_probe_off_the_event_loop(dsn, corpus):
    """The retriever checks the service's model when a text is first embedded, embedding the probe sentence
    (documents ingested with a probe). embedder_of ran that check on the event loop, so its model call held up
    every other request; it runs in the worker thread that embeds the query, for /search and /search_many."""
    for path, body in (("/search", {"query": "pasta", "k": 1}), ("/search_many", {"queries": ["pasta"], "k": 1})):
        emb = LoopWatchingEmbedder()
        with serving(dsn, embedder_factory=lambda e=emb: e) as base:  # a new service: its retriever checks anew
            status, data, _ = call(base, "POST", path, body)
            assert status == 200, data
        assert emb.probe_on_loop == [False], path


def test_a_query_past_a_postgres_limit_names_its_field(dsn, corpus):
    """A query text whose tsvector passes PostgreSQL's 1 MB: 422 naming the field, as every other 422 does (it had
    named none). Found by the interfaces' parity review."""
    text = " ".join(f"w{i}x" for i in range(100_000))
    with serving(dsn, max_body=4 * 1024 * 1024) as base:
        status, data = search(base, {"query": text, "mode": "lexical"})
        assert_error(status, data, 422, "invalid_field", "too large for PostgreSQL")
        assert data["error"]["field"] == "query", data
        status, data, _ = call(base, "POST", "/search_many", {"queries": ["x", text], "mode": "lexical"})
        assert_error(status, data, 422, "invalid_field", "too large for PostgreSQL")
        assert data["error"]["field"] == "queries", data
        # each record's revision, as the Python API gives it (the hits' JSON had left it out; same review)
        status, data = search(base, {"query": "vacation days", "k": 1, "mode": "dense"})
        hit = data["hits"][0]
        assert status == 200 and hit["revision"] == 1, data
        assert all(r is None or r["revision"] == 1 for r in (hit["parent"], hit["prev"], hit["next"])), hit


def test_a_trailing_slash_an_encoded_body_and_a_charset_are_clear_4xx(dsn, corpus):
    """From the HTTP review: /search/ had been a bare 307 to a URL built from the Host header (before the token
    check, uncounted in /stats); a gzip body a 400 'not UTF-8', Content-Encoding: br on a plain body taken as
    plain; a charset=utf-16 body read as UTF-8."""
    import gzip

    with serving(dsn, token="s3cret") as base:
        auth = {"Authorization": "Bearer s3cret"}
        status, data, _ = call(base, "POST", "/search/", {"query": "pasta"}, headers={**auth, "Host": "evil.example"})
        assert_error(status, data, 404, "not_found", "/search/")
        raw = json.dumps({"query": "pasta"}).encode()
        for encoding, body in (("gzip", gzip.compress(raw)), ("br", raw)):
            status, data, _ = call(base, "POST", "/search", raw=body,
                                   headers={**auth, "Content-Encoding": encoding})
            assert_error(status, data, 415, "unsupported_media_type", f"Content-Encoding: {encoding}")
        status, data, _ = call(base, "POST", "/search", raw=raw,
                               headers={**auth, "Content-Type": "application/json; charset=utf-16"})
        assert_error(status, data, 415, "unsupported_media_type", "utf-16")
        for charset in ("utf-8", "UTF-8", '"utf-8"'):
            status, _, _ = call(base, "POST", "/search", raw=raw,
                                headers={**auth, "Content-Type": f"application/json; charset={charset}"})
            assert status == 200
        stats = call(base, "GET", "/stats", headers=auth)[1]
        assert stats["responses"].get("404") == 1 and stats["responses"].get("415") == 3, stats
        # an rrf_k past PostgreSQL's integer: refused before the database, naming the option (not echoing it)
        status, data, _ = call(base, "POST", "/search", {"query": "pasta", "hybrid": {"rrf_k": 10 ** 400}},
                               headers=auth)
        assert status == 422 and "rrf_k must be an integer from 1 to 1000000" in data["error"]["message"], data
        assert len(data["error"]["message"]) < 300, data


def test_bad_input_is_a_clear_4xx(dsn, corpus):
    with serving(dsn, max_k=50, max_tokens_cap=16000, max_body=64 * 1024) as base:
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "x", ')
        assert_error(status, data, 400, "malformed_json", "not valid JSON")
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "x", "k": NaN}')
        assert_error(status, data, 400, "malformed_json")
        status, data, _ = call(base, "POST", "/search", raw=b"\xff\xfe")
        assert_error(status, data, 400, "malformed_json", "UTF-8")
        status, data, _ = call(base, "POST", "/search", raw=b"")
        assert_error(status, data, 400, "malformed_json", "empty")
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "x", "filters": {"metadata": {"a": 1e400}}}')
        assert_error(status, data, 400, "malformed_json", "1e400 is outside a 64-bit float")  # json read it as inf
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "x", "k": 1, "k": 50}')
        assert_error(status, data, 400, "malformed_json", "'k' appears twice")  # had kept the last one
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "x", "filters": {"doc_ids": [], "doc_ids": ["a"]}}')
        assert_error(status, data, 400, "malformed_json", "'doc_ids' appears twice")
        status, data, _ = call(base, "POST", "/search", raw=b"query=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert_error(status, data, 415, "unsupported_media_type", "application/x-www-form-urlencoded")
        status, data, _ = call(base, "POST", "/search_many", raw=b'{"queries": ["x"]}', headers={"Content-Type": "text/plain"})
        assert_error(status, data, 415, "unsupported_media_type", "text/plain")
        for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
            status, data, _ = call(base, "POST", "/search", raw=b'{"query": "pasta", "k": 1}', headers={"Content-Type": ctype})
            assert status == 200, (ctype, data)

        cases = [
            ({"query": "x", "top_k": 3}, "unknown_field", ["top_k"]),
            ({"query": "x", "expand": {"parents": True}}, "unknown_field", ["parents"]),
            ({"query": "x", "k": 0}, "k_out_of_range", ["k", "0"]),
            ({"query": "x", "k": -3}, "k_out_of_range", ["k"]),
            ({"query": "x", "k": 51}, "k_out_of_range", ["50", "51"]),
            ({"query": "x", "k": "5"}, "invalid_field", ["k", "integer"]),
            ({"query": "x", "k": True}, "invalid_field", ["k"]),
            ({"query": "x", "k": 2.5}, "invalid_field", ["k", "integer"]),
            ({"query": "x", "k": 51.0}, "k_out_of_range", ["50", "51"]),  # a whole float is an integer ...
            ({"embedding": [0.1, 0.2, 0.3]}, "dimension_mismatch", ["3", "384"]),
            ({"embedding": [0.1, "a"]}, "invalid_field", ["embedding"]),
            ({"embedding": [1e39] * 384}, "invalid_field", ["embedding", "finite"]),
            ({"embedding": [10**400] + [0.0] * 383}, "invalid_field", ["embedding", "finite"]),
            # finite, but pgvector's float32 norm overflows: every distance was 1.0, in arbitrary order
            ({"embedding": [1e20] * 384}, "invalid_field", ["embedding", "normalise"]),
            ({"query": "x", "max_tokens": 16001}, "budget_too_large", ["16000"]),
            ({"query": "x", "max_tokens": 16001.0}, "budget_too_large", ["16000"]),  # had been invalid_field
            ({"query": "x", "max_tokens": 0}, "invalid_field", ["max_tokens"]),
            ({"query": "x", "filters": {"colections": ["a"]}}, "unknown_filter_key", ["colections"]),
            ({"query": "x", "filters": {"collections": "a"}}, "invalid_field", ["filters.collections"]),
            ({"query": "x", "filters": {"metadata": []}}, "invalid_field", ["filters.metadata"]),
            ({"query": "x", "filters": {"doc_ids": ["a\u0000b"]}}, "invalid_field", ["NUL"]),
            ({"query": "x", "filters": {"metadata": {"a": {"b": "\u0000"}}}}, "invalid_field", ["metadata.a.b"]),
            ({"query": "x", "filters": {"metadata": _nested(200)}}, "invalid_field", ["nested"]),
            ({"query": "a\ud800b"}, "invalid_field", ["Unicode"]),
            ({"query": "x", "mode": "fuzzy"}, "invalid_field", ["mode"]),
            ({"query": "   "}, "invalid_field", ["empty"]),
            ({"k": 3}, "missing_query", ["query"]),
            ({"embedding": [0.1] * 384, "mode": "lexical"}, "missing_query", ["lexical"]),
            ({"embedding": [0.1] * 384, "mode": "hybrid"}, "missing_query", ["hybrid"]),
            ({"query": "x", "embedding": [0.1] * 384, "mode": "dense"}, "invalid_field", ["hybrid"]),
            ({"embedding": [0.0] * 384}, "invalid_field", ["embedding", "all zeros"]),
            ({"query": "x", "expand": {"neighbors": 51}}, "invalid_field", ["expand.neighbors"]),
            ({"query": "x", "expand": {"neighbor_scope": "doc"}}, "invalid_field", ["neighbor_scope"]),
            ({"query": "x", "expand": {"parent": "yes"}}, "invalid_field", ["expand.parent"]),
            ({"query": "x", "expand": {"document_max_tokens": 2**40}}, "invalid_field", ["document_max_tokens"]),
            ({"query": "x", "hits": False, "context": False}, "nothing_requested", []),
            (["query", "x"], "invalid_field", ["object"]),
            ({"query": "x", "hybrid": {"rrf": 60}}, "unknown_field", ["rrf"]),
            ({"query": "x", "hybrid": {"lexical_weight": -1}}, "invalid_field", ["hybrid", "lexical_weight"]),
            ({"query": "x", "hybrid": {"candidates": 51}}, "k_out_of_range", ["hybrid.candidates", "50"]),
            ({"query": "x", "hybrid": [1]}, "invalid_field", ["hybrid", "object"]),
            ({"query": "x", "mode": "dense", "hybrid": {"tf_weight": 1}}, "invalid_field", ["hybrid", "densely"]),
            ({"embedding": [0.1] * 384, "hybrid": {"tf_weight": 1}}, "invalid_field", ["hybrid", "densely"]),
        ]
        for body, code, words in cases:
            status, data = search(base, body)
            assert_error(status, data, 422, code, *words)
            if code == "unknown_field":
                assert data["error"]["field"].endswith(words[0])
        status, data = search(base, {"embedding": [0.1, 0.2, 0.3]})
        assert (data["error"]["expected"], data["error"]["got"]) == (384, 3)

        big = json.dumps({"query": "x" * 70_000}).encode()
        status, data, _ = call(base, "POST", "/search", raw=big)
        assert_error(status, data, 413, "body_too_large", "65536")
        # Without Content-Length (chunked), the limit holds while reading.
        host, port = base.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/search", body=iter([big[i:i + 8192] for i in range(0, len(big), 8192)]),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 413 and json.loads(resp.read())["error"]["code"] == "body_too_large"
        conn.close()

        counted = call(base, "GET", "/stats")[1]["responses"]
        assert_error(*call(base, "GET", "/nowhere")[:2], 404, "not_found")
        assert_error(*call(base, "GET", "/search")[:2], 405, "method_not_allowed")
        # Starlette answers these outside the routes; /stats had not counted them
        now = call(base, "GET", "/stats")[1]["responses"]
        assert [now.get(c, 0) - counted.get(c, 0) for c in ("404", "405")] == [1, 1], (counted, now)
        # The service still answers after all that.
        assert search(base, {"query": "pasta", "k": 1})[0] == 200
        # ... as JSON Schema's "integer" (in /openapi.json) counts it: 2.0 had been 422 "must be an integer"
        status, data = search(base, {"query": "pasta", "k": 2.0, "max_tokens": 300.0, "expand": {"neighbors": 1.0}})
        assert status == 200 and len(data["hits"]) == 2, data
        # ... and so in "hybrid", whose integer fields had refused 60.0 (and named the library's cap, not the service's)
        whole = {"rrf_k": 60.0, "candidates": 10.0, "rare_term_sections": 3.0}
        status, data = search(base, {"query": "pasta", "k": 2, "mode": "hybrid", "hybrid": whole})
        assert status == 200 and data == search(base, {"query": "pasta", "k": 2, "mode": "hybrid",
                                                       "hybrid": {k: int(v) for k, v in whole.items()}})[1], data
        assert_error(*search(base, {"query": "x", "mode": "hybrid", "hybrid": {"candidates": 60.0}}), 422,
                     "k_out_of_range", "hybrid.candidates", "50")
        assert_error(*search(base, {"query": "x", "mode": "hybrid", "hybrid": {"rrf_k": 60.5}}), 422,
                     "invalid_field", "rrf_k must be an integer from 1 to 1000000")


# ---------------------------------------------------------------- token and principals


def test_a_value_the_database_refuses_is_422_invalid_value(db, dsn, tmp_path):
    """An embedding the library accepts (finite, of a sane length) but the column's type cannot hold (over
    halfvec's 65504) is refused by the server with a DataError: the client's value, a 422 naming it,
    not a 400 malformed request nor a 5xx."""
    layout = init_schema(db, Layout(dim=384, vector_type="halfvec"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cooking.md").write_text(DOCS["cooking.md"])
    assert ingest_paths(db, [docs], layout=layout, embedder=HashEmbedder()).new == 1
    with serving(dsn) as base:
        assert search(base, {"embedding": [0.05] * 384, "k": 2})[0] == 200  # the layout itself serves
        status, data = search(base, {"embedding": [1e5] + [0.0] * 383, "k": 2})
        assert_error(status, data, 422, "invalid_value", "halfvec")


def test_bearer_token(dsn, corpus):
    token = "s3cret-token"
    with serving(dsn, token=token) as base:
        assert call(base, "GET", "/health")[:2] == (200, {"status": "ok"})  # /health needs no token
        for path, method, body in (("/search", "POST", {"query": "pasta"}), ("/stats", "GET", None),
                                   ("/openapi.json", "GET", None), ("/documents", "GET", None)):
            status, data, headers = call(base, method, path, body)
            assert_error(status, data, 401, "unauthorized", "missing")
            assert headers["www-authenticate"] == "Bearer"
            assert_error(*call(base, method, path, body, token="wrong")[:2], 401, "unauthorized", "invalid")
            assert_error(*call(base, method, path, body, token=token + "x")[:2], 401, "unauthorized")
            assert_error(*call(base, method, path, body, headers={"Authorization": f"Basic {token}"})[:2],
                         401, "unauthorized")
            assert call(base, method, path, body, token=token)[0] == 200
        spec = call(base, "GET", "/openapi.json", token=token)[1]
        assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        # Auth comes before reading the body: no token, bad JSON -> 401, not 400.
        assert call(base, "POST", "/search", raw=b"{")[0] == 401
    with serving(dsn) as base:  # no token: every endpoint is open
        assert search(base, {"query": "pasta"})[0] == 200
        assert call(base, "GET", "/stats")[0] == 200
        assert call(base, "GET", "/openapi.json")[0] == 200
        assert "securitySchemes" not in call(base, "GET", "/openapi.json")[1]["components"]


def _docs(data: dict[str, Any]) -> set[str]:
    return {h["doc_id"] for h in data["hits"]} | {p["doc_id"] for p in data["context"]["passages"]}


def test_principals_policy(db, dsn, corpus):
    secret = {"query": "salary bands 2026", "k": 10, "filters": {"collections": ["private"]}}
    everything = {"query": "salary bands 2026", "k": 10}
    # Default: public rows only, and a request may not name principals.
    with serving(dsn) as base:
        status, data = search(base, secret)
        assert status == 200 and data["hits"] == [] and data["context"]["passages"] == []
        assert "salaries.md" not in _docs(search(base, everything)[1])
        assert_error(*search(base, {**secret, "principals": ["hr"]}), 403, "principals_not_allowed")
    # Operator principals apply to every request.
    with serving(dsn, principals=("hr",)) as base:
        data = search(base, secret)[1]
        assert _docs(data) == {"salaries.md"}
        assert data == python_api(db, secret, principals=("hr",))
        assert_error(*search(base, {**secret, "principals": ["eng"]}), 403, "principals_not_allowed")
    # Trusted request principals; a request without them gets the operator's (public only here).
    with serving(dsn, trust_request_principals=True) as base:
        assert _docs(search(base, {**secret, "principals": ["hr"]})[1]) == {"salaries.md"}
        assert _docs(search(base, {**secret, "principals": ["eng", "sales"]})[1]) == set()
        assert _docs(search(base, secret)[1]) == set()
        assert_error(*search(base, {**secret, "principals": "hr"}), 422, "invalid_field", "principals")
        assert_error(*search(base, {**secret, "principals": None}), 422, "invalid_field", "null is not taken")
    # No ACL check only when the operator says so.
    with serving(dsn, principals=None) as base:
        assert "salaries.md" in _docs(search(base, everything)[1])


def test_operator_principal_flags():
    from onetrip.http_service import operator_principals

    assert operator_principals(None, False) == ()
    assert operator_principals(["hr", "eng"], False) == ("hr", "eng")
    assert operator_principals(None, True) is None
    with pytest.raises(ValueError, match="contradict"):
        operator_principals(["hr"], True)
    with pytest.raises(ValueError):
        ServiceConfig(max_k=5000)
    with pytest.raises(ValueError):
        ServiceConfig(token=" ")


# ---------------------------------------------------------------- database trouble


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


def test_unreachable_database_is_503_not_a_crash():
    dsn = f"host=127.0.0.1 port={_closed_port()} dbname=nothing user=nobody connect_timeout=1"
    with serving(dsn, db_timeout=1.0) as base:  # it starts without the database (waiting, it had failed to)
        status, data, _ = call(base, "GET", "/health")
        assert_error(status, data, 503, "database_unavailable", "not answering")
        assert_error(*search(base, {"query": "pasta"}), 503, "database_unavailable")
        # Input errors are still reported as such, before any database work.
        assert_error(*search(base, {"query": "pasta", "k": 0}), 422, "k_out_of_range")
        assert call(base, "GET", "/stats")[0] == 200


class Stats:
    """GET /stats, counting its own requests: the service counts them among its 200s."""

    def __init__(self, base: str) -> None:
        self.base, self.calls = base, 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return call(self.base, "GET", "/stats")[1]

    def wait_for_pool(self, ready: Any, what: str) -> None:
        """Poll until ``ready(the pool's stats)``: where a step needs the pool to have opened a connection, which a
        request waits --db-timeout for at most (1 s in these tests), and a loaded machine may take longer to
        open. The deadline is a guard against hanging, not a timing assertion."""
        deadline = time.monotonic() + 120
        while not ready(pool := self()["pool"]):
            assert time.monotonic() < deadline, f"{what}: {pool}"
            time.sleep(0.05)


def fill_pool(dsn: str, base: str, size: int, stats: Stats) -> None:
    """Have the service's pool hold ``size`` open connections before a step that needs them all at once.

    The pool opens one when the service starts and more only while a request
    waits for one, up to --db-timeout: a request held on a lock while the pool
    opened the next connection had to get it within that second, or the step
    failed for timing alone. Here requests held on a lock make the pool grow,
    whatever they answer, until it holds ``size`` connections.
    """
    deadline = time.monotonic() + 120  # a guard against hanging, not a timing assertion
    while stats()["pool"]["pool_available"] < size:
        assert time.monotonic() < deadline, stats()
        with psycopg.connect(dsn) as locker:  # a transaction of its own: the lock stays until rollback
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            threads = [threading.Thread(target=search, args=(base, {"query": "pasta", "context": False}))
                       for _ in range(size)]
            for t in threads:
                t.start()
            # the pool counts a connection it is opening: wait till it opens all, or the requests gave up
            while stats()["pool"]["pool_size"] < size and any(t.is_alive() for t in threads):
                time.sleep(0.05)
            locker.rollback()
        for t in threads:
            t.join(60)
        stats.wait_for_pool(lambda pool: pool["pool_available"] >= size or pool["pool_size"] < size,
                            "the pool's connections never opened")


def test_lost_connection_is_503_then_recovers(db, dsn, corpus, terminate):
    """A pooled connection killed under the service: that request says 503 connection_lost, the next one works."""
    app_name = f"onetrip-kill-{os.getpid()}"
    with serving(dsn, pool_size=1, application_name=app_name) as base:
        stats = Stats(base)
        assert search(base, {"query": "pasta"})[0] == 200
        assert terminate(application_name=app_name) == 1
        assert_error(*search(base, {"query": "pasta"}), 503, "connection_lost", "administrator command")
        # the pool's replacement opened (the next request would wait --db-timeout, 5 s, for it)
        stats.wait_for_pool(lambda pool: pool["pool_available"] >= 1, "the replacement never opened")
        assert search(base, {"query": "pasta"})[0] == 200
        # GET /documents alike (it had said database_unavailable, leaving the pool's idle connections unchecked)
        assert terminate(application_name=app_name) == 1
        assert_error(*documents(base), 503, "connection_lost", "administrator command")
        stats.wait_for_pool(lambda pool: pool["pool_available"] >= 1, "the replacement never opened")
        assert documents(base)[0] == 200


def test_health_after_a_restart_answers_for_the_database_not_for_a_stale_connection(db, dsn, corpus, terminate):
    """After every pooled connection died (a database restart), /health had said 503 database_unavailable, "the
    database is not answering", once per stale connection (up to --pool-size times) while the database answered:
    a probe took a healthy database for down. It now reports the lost one to the pool and checks once more."""
    app_name = f"onetrip-health-{os.getpid()}"
    with serving(dsn, pool_size=2, application_name=app_name) as base:
        stats = Stats(base)
        fill_pool(dsn, base, 2, stats)
        assert call(base, "GET", "/health")[0] == 200
        assert terminate(application_name=app_name) == 2  # both idle pooled connections, as in a restart
        status, body = call(base, "GET", "/health")[:2]
        assert status == 200, body
        assert call(base, "GET", "/health")[0] == 200


def test_more_requests_than_the_pool_wait_then_get_pool_exhausted_and_lost_connections_are_replaced(
        db, dsn, corpus, terminate):
    """Requests past --pool-size wait --db-timeout for a connection, then got 503 'the database is not answering
    (PoolTimeout)' while the database answered every statement: now 503 pool_exhausted, naming both options.
    And when every pooled connection dies at once (a restart), each idle one had failed a request before the pool
    replaced it; the request that finds one lost says so and the pool checks the others: the next one is served."""
    app_name = f"onetrip-busy-{os.getpid()}"

    def waiting_on_the_lock() -> int:
        return db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                          "AND wait_event_type = 'Lock'", (app_name,)).fetchone()[0]

    with serving(dsn, pool_size=2, db_timeout=1.0, statement_timeout=120.0, application_name=app_name) as base:
        stats = Stats(base)
        fill_pool(dsn, base, 2, stats)  # both held requests below get a connection at once
        before, counted_from = stats()["responses"], stats.calls
        assert search(base, {"query": "pasta"})[0] == 200
        held: list[int] = []
        with psycopg.connect(dsn) as locker:  # a transaction of its own: the lock stays until rollback
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            threads = [threading.Thread(target=lambda: held.append(search(base, {"query": "pasta",
                                                                                 "context": False})[0]))
                       for _ in range(2)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 30  # a guard against hanging, not a timing assertion
            while waiting_on_the_lock() < 2:  # both pooled connections are taken, their statements blocked
                assert time.monotonic() < deadline, "the requests' statements never reached the lock"
                time.sleep(0.05)
            assert_error(*search(base, {"query": "pasta"}), 503, "pool_exhausted", "all 2 database connections",
                         "--pool-size", "--db-timeout")
            assert_error(*call(base, "GET", "/health")[:2], 503, "pool_exhausted")
            locker.rollback()
        for t in threads:
            t.join(60)
        assert held == [200, 200]  # the waiting requests were served once the lock went
        assert terminate(application_name=app_name) == 2  # both idle pooled connections, as in a restart
        assert_error(*search(base, {"query": "pasta", "context": False}), 503, "connection_lost")
        # the pool checked the other idle one (dropped: without the check it would still be counted available)
        # and opens a replacement, which the next request would otherwise have to get within --db-timeout
        stats.wait_for_pool(lambda pool: pool["pool_available"] >= 1, "the replacement never opened")
        assert search(base, {"query": "pasta"})[0] == 200  # two statements, each on a working connection
        after = stats()["responses"]
        since = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        # 200s too: the /stats requests from the one that read `before` to the one before this (each is counted
        # after it answers)
        assert since == {"200": 4 + stats.calls - counted_from, "503": 3}, (since, stats.calls)


def allow_connections_to(db: psycopg.Connection, dsn: str, allow: bool) -> None:
    """ALTER DATABASE (the test's) ALLOW_CONNECTIONS: new sessions refused, as by a server that is down; run from
    another database, as a session may not refuse its own."""
    from psycopg import conninfo

    with psycopg.connect(conninfo.make_conninfo(dsn, dbname="postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(db.info.dbname), sql.SQL("true" if allow else "false")))


@contextmanager
def every_pooled_connection_busy(db: psycopg.Connection, dsn: str, base: str, app_name: str,
                                 pool_size: int) -> Iterator[list[int]]:
    """``pool_size`` searches held on a lock of the sections table, each on a pooled connection, until the block
    ends; then their statuses (the pool has grown to its size by then)."""
    held: list[int] = []
    with psycopg.connect(dsn) as locker:  # a transaction of its own: the lock stays until rollback
        locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
        threads = [threading.Thread(target=lambda: held.append(search(base, {"query": "pasta",
                                                                             "context": False})[0]))
                   for _ in range(pool_size)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30  # a guard against hanging, not a timing assertion
        while db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                         "AND wait_event_type = 'Lock'", (app_name,)).fetchone()[0] < pool_size:
            assert time.monotonic() < deadline, "the requests' statements never reached the lock"
            time.sleep(0.05)
        try:
            yield held
        finally:
            locker.rollback()
            for t in threads:
                t.join(60)


def test_while_the_database_refuses_connections_every_timed_out_request_says_so(db, dsn, corpus, terminate):
    """Whether the pool's connections were busy or could not be opened was read from the pool's failed attempts
    since the last look, which the first request to look used up: of requests timing out together in an outage
    one said database_unavailable and the others pool_exhausted ("raise --pool-size"), as did any that came
    between the pool's reconnect attempts. Now the service says database_unavailable until a connection opens
    again or /health passes; then a pool held by a lock is pool_exhausted again."""
    app_name = f"onetrip-outage-{os.getpid()}"

    def allow_connections(allow: bool) -> None:
        allow_connections_to(db, dsn, allow)

    def stats() -> dict[str, Any]:
        return polled()["pool"]

    with serving(dsn, pool_size=2, db_timeout=1.0, statement_timeout=120.0, application_name=app_name) as base:
        polled = Stats(base)
        fill_pool(dsn, base, 2, polled)
        assert stats()["pool_size"] == 2
        allow_connections(False)  # as a server that is down
        try:
            refused_before = stats().get("connections_errors", 0)
            assert terminate(application_name=app_name) == 2
            assert_error(*search(base, {"query": "pasta", "context": False}), 503, "connection_lost")
            # the pool's first attempt to replace them has been refused: else a request timing out before it
            # was (a slow machine) saw a full pool and no failed attempt, busy by every sign the service has
            polled.wait_for_pool(lambda pool: pool.get("connections_errors", 0) > refused_before,
                                 "the pool never tried to reopen a connection")
            together = searches_at_once(base, {"query": "pasta"}, 3)
            together.append(search(base, {"query": "pasta"}))
            assert [data["error"]["code"] for _, data in together] == ["database_unavailable"] * 4, together
            assert stats()["pool_size"] == 2  # the pool counts the two it keeps trying to open
        finally:
            allow_connections(True)
        deadline = time.monotonic() + 60  # the pool's next attempts (1, 2, 4 ... s apart); a guard, not a timing
        while call(base, "GET", "/health")[0] != 200 or stats()["pool_available"] < 2:  # both reopened
            assert time.monotonic() < deadline, stats()
            time.sleep(0.1)
        with every_pooled_connection_busy(db, dsn, base, app_name, 2) as held:
            assert_error(*search(base, {"query": "pasta"}), 503, "pool_exhausted", "all 2 database connections")
        assert held == [200, 200]


def test_requests_while_the_database_is_down_at_start_share_one_attempt_to_reach_it(db, dsn, corpus, monkeypatch):
    """Found by review: each request made its own attempt to create the retriever, one after another under a
    lock, so with the database down the n-th of n requests sent together got its 503 after n times --db-timeout
    (health probes timed out). They now wait for one attempt and share its answer (counted, not timed)."""
    from onetrip import AsyncRetriever

    attempts: list[int] = []
    create = AsyncRetriever.create

    async def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        return await create(*args, **kwargs)

    monkeypatch.setattr(AsyncRetriever, "create", counted)
    allow_connections_to(db, dsn, False)
    try:
        with serving(dsn, pool_size=1, db_timeout=1.0, application_name=f"onetrip-shared-{os.getpid()}") as base:
            Stats(base).wait_for_pool(lambda pool: pool.get("connections_errors", 0) >= 1,
                                      "the pool never tried to open a connection")
            together = searches_at_once(base, {"query": "pasta"}, 6)
            assert [data["error"]["code"] for _, data in together] == ["database_unavailable"] * 6, together
            assert len(attempts) < 6, attempts  # one each, in turn, had been 6
            allow_connections_to(db, dsn, True)
            deadline = time.monotonic() + 60  # the pool's next attempts; a guard, not a timing
            while search(base, {"query": "pasta"})[0] != 200:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        allow_connections_to(db, dsn, True)


def test_a_service_started_while_the_database_refused_connections_tells_busy_from_down_once_it_answers(
        db, dsn, corpus):
    """The connection attempts that failed before the database answered made a full pool of one say
    database_unavailable when it was only busy, as long as no new connection opened (none does in a full
    pool) and no /health passed."""
    app_name = f"onetrip-late-{os.getpid()}"
    allow_connections_to(db, dsn, False)
    try:
        with serving(dsn, pool_size=1, db_timeout=1.0, statement_timeout=120.0, application_name=app_name) as base:
            # a refused attempt counted first: a request timing out before the pool's first attempt was refused
            # (a slow machine) saw a pool of its full size and no failure, busy by every sign the service has
            Stats(base).wait_for_pool(lambda pool: pool.get("connections_errors", 0) >= 1,
                                      "the pool never tried to open a connection")
            assert_error(*search(base, {"query": "pasta"}), 503, "database_unavailable")
            allow_connections_to(db, dsn, True)
            deadline = time.monotonic() + 60  # the pool's next attempt (1, 2, 4 ... s on); a guard, not a timing
            while search(base, {"query": "pasta"})[0] != 200:
                assert time.monotonic() < deadline
            with every_pooled_connection_busy(db, dsn, base, app_name, 1) as held:
                assert_error(*search(base, {"query": "pasta"}), 503, "pool_exhausted")
            assert held == [200]
    finally:
        allow_connections_to(db, dsn, True)


class Gate:
    """A TCP front for the test's server whose new connections are forwarded, refused (closed at once) or held
    unanswered (``mode``): a database that answers, refuses, or does not answer, switched at will."""

    def __init__(self, dsn: str) -> None:
        from psycopg import conninfo

        params = conninfo.conninfo_to_dict(dsn)
        host, port = str(params.get("host") or "localhost"), int(params.get("port") or 5432)
        self.target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.mode = "forward"
        self.held: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.dsn = conninfo.make_conninfo(dsn, host="127.0.0.1", port=self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            if self.mode == "refuse":
                client.close()
            elif self.mode == "hold":
                self.held.append(client)
            else:
                server = socket.socket(socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET)
                server.connect(self.target)
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        for c in self.held:
            c.close()


def test_a_connection_attempt_under_way_is_not_taken_for_the_database_answering_again(db, dsn, corpus, terminate):
    """psycopg_pool counts a connection attempt when it starts (connections_num) and its failure when it ends
    (connections_errors), and the service took attempts minus failures for the connections opened: an attempt
    under way looked like one opened, the database answering again, so a request that timed out then, while the
    database refused or did not answer, said pool_exhausted ('raise --pool-size') instead of database_unavailable.
    Seen as a flaky outage test: the pool's retry a second after a refusal was under way as requests timed out.
    Here an attempt is held unanswered to be under way for sure."""
    app_name = f"onetrip-attempt-{os.getpid()}"
    gate = Gate(dsn)
    try:
        with serving(gate.dsn, pool_size=1, db_timeout=1.0, statement_timeout=120.0,
                     application_name=app_name) as base:
            stats = Stats(base)
            stats.wait_for_pool(lambda pool: pool["pool_available"] >= 1, "the pool's connection never opened")
            assert search(base, {"query": "pasta"})[0] == 200
            gate.mode = "refuse"
            assert terminate(application_name=app_name) == 1
            assert_error(*search(base, {"query": "pasta", "context": False}), 503, "connection_lost")
            stats.wait_for_pool(lambda pool: pool.get("connections_errors", 0) >= 1, "no attempt was refused")
            assert_error(*search(base, {"query": "pasta"}), 503, "database_unavailable")
            gate.mode = "hold"  # the pool's next attempt (1, 2, 4 ... s on) waits for an answer (5 s connect_timeout)
            stats.wait_for_pool(lambda pool: gate.held, "the pool made no new attempt")
            assert_error(*search(base, {"query": "pasta"}), 503, "database_unavailable")
            gate.mode = "forward"
            for c in gate.held:
                c.close()
            deadline = time.monotonic() + 120  # a guard against hanging, not a timing
            while call(base, "GET", "/health")[0] != 200:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert search(base, {"query": "pasta"})[0] == 200
    finally:
        gate.close()


def test_a_lock_timeout_or_a_cancelled_statement_is_named(db, dsn, corpus):
    """lock_timeout (a role's or database's setting) had been 503 'the database is not answering
    (LockNotAvailable)', and a statement cancelled by pg_cancel_backend 503 statement_timeout."""
    app_name = f"onetrip-cancel-{os.getpid()}"

    def cancel_when_blocked() -> None:
        deadline = time.monotonic() + 30
        while not db.execute("SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = %s "
                             "AND wait_event_type = 'Lock'", (app_name,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the request's statement never reached the lock"
            time.sleep(0.05)

    with serving(dsn, pool_size=1, statement_timeout=120.0, application_name=app_name) as base:
        assert search(base, {"query": "pasta"})[0] == 200
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            canceller = threading.Thread(target=cancel_when_blocked)
            canceller.start()
            assert_error(*search(base, {"query": "pasta"}), 503, "statement_cancelled", "user request")
            canceller.join(60)
            locker.rollback()
        assert search(base, {"query": "pasta"})[0] == 200
    db.execute(sql.SQL("ALTER DATABASE {} SET lock_timeout = '100ms'").format(
        sql.Identifier(db.info.dbname)))  # this test's own database: new sessions get it
    with serving(dsn, pool_size=1, statement_timeout=120.0) as base:
        assert search(base, {"query": "pasta"})[0] == 200
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            assert_error(*search(base, {"query": "pasta"}), 503, "lock_timeout", "lock_timeout")
            locker.rollback()
        assert search(base, {"query": "pasta"})[0] == 200


def test_a_blocked_statement_is_cancelled_and_gives_its_connection_back(db, dsn, corpus):
    """A search waiting on a lock held elsewhere had pinned its pooled connection until the lock went,
    so every later request, /health too, got 503 from the pool; statement_timeout cancels it."""
    with serving(dsn, pool_size=1, statement_timeout=1.0, db_timeout=30.0) as base:
        assert search(base, {"query": "pasta"})[0] == 200
        with psycopg.connect(dsn) as locker:  # a transaction of its own: the lock stays until rollback
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            # the statement's timeout, not the 30 s pool wait (that would be pool_exhausted)
            assert_error(*search(base, {"query": "pasta"}), 503, "statement_timeout", "statement timeout")
            assert_error(*search(base, {"query": "pasta"}), 503, "statement_timeout")  # the connection came back
            locker.rollback()
        assert search(base, {"query": "pasta"})[0] == 200
        stats = call(base, "GET", "/stats")[1]
        assert stats["responses"]["503"] == 2, stats
    with pytest.raises(ValueError, match="statement_timeout must be a positive number"):
        ServiceConfig(dsn=dsn, statement_timeout=0)


def test_a_client_that_leaves_mid_body_is_not_an_internal_error(dsn, corpus, caplog):
    """starlette's ClientDisconnect had been logged with a stack trace as an internal error and counted as a 500."""
    with serving(dsn) as base:
        host, port = base.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 12\r\n\r\n{\"query\": 1")  # 11 of the 12 bytes, then gone
        deadline = time.monotonic() + 10
        while (stats := call(base, "GET", "/stats")[1])["responses"].get("499") is None:
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        assert "500" not in stats["responses"], stats
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize("path, body", [("/search", {"query": "pasta"}),
                                        ("/search_many", {"queries": ["pasta", "dessert"]}),
                                        ("/health", None)])  # had been a 503 after --db-timeout (a review)
def test_a_client_that_leaves_gets_its_statement_cancelled(db, dsn, corpus, path, body):
    """The statement of a request whose client has gone had run on (here: waiting on a lock) until it ended or
    statement_timeout cut it, holding its pooled connection for nobody; it is cancelled on the server now."""
    def waiting() -> list[tuple]:  # (its text is cut at 1 kB, before the batch statement names the table)
        return db.execute("SELECT pid, state FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                          "AND pid <> pg_backend_pid()").fetchall()

    with serving(dsn, pool_size=1, statement_timeout=120.0) as base:
        assert search(base, {"query": "pasta"})[0] == 200
        host, port = base.split(":")
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE sections, documents IN ACCESS EXCLUSIVE MODE")
            raw = b"" if body is None else json.dumps(body).encode()
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(f"{'GET' if body is None else 'POST'} {path} HTTP/1.1\r\nHost: x\r\n"
                             f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
                deadline = time.monotonic() + 20
                while not waiting():  # the statement is on the server, blocked by the lock
                    assert time.monotonic() < deadline, "the request's statement never reached the lock"
                    time.sleep(0.05)
            deadline = time.monotonic() + 10  # the client has gone: the statement goes too, the lock still held
            while waiting():
                assert time.monotonic() < deadline, "the statement kept running after its client left"
                time.sleep(0.05)
            deadline = time.monotonic() + 10  # the statement is gone from the server a moment before its
            while "499" not in (stats := call(base, "GET", "/stats")[1])["responses"]:  # request is counted
                assert time.monotonic() < deadline, stats
                time.sleep(0.05)
            assert stats["responses"].get("499") == 1 and "500" not in stats["responses"], stats
            assert stats["pool"].get("pool_size", 1) == 1
            locker.rollback()
        assert call(base, "GET" if body is None else "POST", path, body)[0] == 200  # the one pooled connection
        # came back, usable


def test_missing_schema_is_503_then_recovers(db, dsn):
    with serving(dsn, db_timeout=2.0) as base:
        status, data, _ = call(base, "GET", "/health")
        assert_error(status, data, 503, "schema_missing", "onetrip init")
        assert_error(*search(base, {"query": "pasta"}), 503, "schema_missing")
        assert_error(*documents(base), 503, "schema_missing")
        init_schema(db, Layout(dim=384))
        assert call(base, "GET", "/health")[:2] == (200, {"status": "ok"})
        status, data = search(base, {"query": "pasta"})
        assert status == 200 and data["hits"] == []
        assert documents(base) == (200, {"documents": [], "next_after": None})


# ---------------------------------------------------------------- the CLI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_cli_serve_subprocess(db, dsn, tmp_path):
    """`onetrip serve` as an operator runs it: their own model folder, token from the environment, SIGINT to stop.

    The documents are ingested with that model (a copy of the bundled one under another
    name): the service refuses to embed a question with another model than the documents'
    (test_embedder_record.py), so answering at all shows `--model` reached the service."""
    from onetrip import SentenceTransformerEmbedder

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    model = linked_model_copy(tmp_path / "my-minilm")
    assert ingest_paths(db, [docs], layout=init_schema(db, Layout(dim=384)),
                        embedder=SentenceTransformerEmbedder(str(model))).new == 2
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ONETRIP_TOKEN": "tok"}
    proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "serve", "--dsn", dsn, "--port", str(port),
                             "--model", str(model), "--max-k", "7", "--no-access-log", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if call(base, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "onetrip serve did not become healthy"
            time.sleep(0.3)
        status, data = search(base, {"query": "Why is the pasta salty?", "k": 2}, token="tok")
        assert status == 200 and len(data["hits"]) == 2
        assert data["hits"][0]["doc_id"] == "cooking.md"
        assert search(base, {"query": "x"})[0] == 401
        assert_error(*search(base, {"query": "x", "k": 8}, token="tok"), 422, "k_out_of_range", "7")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_log_config_takes_every_level_uvicorn_does():
    """uvicorn's 'trace' is no level of Python's logging: run(log_level="trace") had failed before serving."""
    import logging.config

    from onetrip.http_service import log_config

    for level in ("critical", "error", "warning", "info", "debug", "trace"):
        config = log_config(level)
        logging.config.dictConfig(config)
        assert config["loggers"]["onetrip"]["level"] == ("DEBUG" if level == "trace" else level.upper())
    logging.config.dictConfig(log_config("warning"))


def _serve_without_database(*flags: str) -> subprocess.Popen:
    """`onetrip serve` over a DSN nothing answers (a closed port): it starts, and /health says 503."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "serve", "--port", str(port), "--dsn",
                             "host=127.0.0.1 port=1 dbname=x connect_timeout=1", "--db-timeout", "1", *flags],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    proc.port = port  # type: ignore[attr-defined]
    deadline = time.monotonic() + 240  # a generous deadline on a loaded machine, not a timing check
    while True:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            status = call(f"127.0.0.1:{port}", "GET", "/health")[0]
        except OSError:
            status = None  # not listening yet
        if status is not None:
            assert status == 503, status  # up, and no database to answer
            return proc
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"onetrip serve did not start: {proc.communicate()[0][-2000:]}")
        time.sleep(0.3)


def test_cli_serve_logs_its_own_lines_at_the_log_level_given():
    """Only uvicorn's loggers were configured: the service's own lines went to Python's last-resort handler,
    so a client leaving mid-request (logged at info, the README says) never showed, and at --log-level critical
    the pool's reconnect warnings still printed, unformatted, for as long as the database was down."""
    proc = _serve_without_database()  # --log-level info, the default
    try:
        with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as sock:
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            time.sleep(0.5)
        deadline = time.monotonic() + 10
        while call(f"127.0.0.1:{proc.port}", "GET", "/stats")[1]["responses"].get("499") is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert "INFO:     client disconnected during POST /search" in out, out
    assert "WARNING:  database unavailable" in out, out  # formatted as uvicorn's own lines

    proc = _serve_without_database("--log-level", "critical", "--no-access-log")
    time.sleep(2)  # reconnect attempts, each a warning
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=30)[0]
    assert "database unavailable" not in out and "error connecting" not in out, out


def test_a_stop_ends_the_service_while_a_client_holds_a_half_sent_body():
    """Found by review: after SIGTERM the service waited for every open connection, and a client that never
    finished sending its body held it open for as long as it liked (a container's stop then SIGKILLs it). It
    waits --shutdown-timeout for open requests, then cancels them and exits 0."""
    proc = _serve_without_database("--shutdown-timeout", "1")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"query\":")
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=60)[0]  # the client still holds its connection open
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("onetrip serve did not stop while a client held a half-sent body") from None
        answer = sock.recv(65536).decode()
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "cancelled: the service stopped before it ended" in out, out
    assert answer.startswith("HTTP/1.1 503") and '"code":"shutting_down"' in answer, answer


def test_a_request_the_stop_cancels_has_its_statement_cancelled_on_the_server(db, dsn, corpus):
    """Found by review: a request still waiting (on a lock) when --shutdown-timeout ran out was cancelled, but
    the pool closed and the loop ended while psycopg was still opening its cancel request, so over TCP its
    statement kept running with its transaction open. The stop now waits for the cancelled requests to end.
    The database is reached through a 20 ms delay proxy, so that cancel request takes a while."""
    import uvicorn

    from benchmarks.latency.delay_proxy import DelayProxy, proxied_dsn, upstream_from_dsn
    from onetrip.http_service import answering_503_when_stopped

    name = f"onetrip-stop-{os.getpid()}"
    with DelayProxy(upstream_from_dsn(dsn), 20.0) as proxy:
        inner = create_app(
            ServiceConfig(dsn=proxied_dsn(dsn, proxy.host, proxy.port), application_name=name, statement_timeout=None),
            embedder_factory=HashEmbedder)
        app = answering_503_when_stopped(inner)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        base = f"127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)
        assert call(base, "GET", "/health")[0] == 200
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE sections IN ACCESS EXCLUSIVE MODE")
            answers: list[Any] = []
            client = threading.Thread(target=lambda: answers.append(search(base, {"query": "connections"})))
            client.start()
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'"
            while db.execute(waiting, (name,)).fetchone()[0] == 0:
                assert time.monotonic() < deadline, "the search never reached the server"
                time.sleep(0.05)
            server.should_exit = True
            thread.join(60)
            client.join(60)
            assert not thread.is_alive() and answers and answers[0][0] == 503, answers
            assert inner.state.service.statuses[503] == 1  # counted among the responses, as every other answer
            assert db.execute(waiting, (name,)).fetchone()[0] == 0, "the cancelled request's statement still runs"
            locker.rollback()
        sock.close()


def test_cli_serve_starts_within_db_timeout_when_the_database_never_answers():
    """Found by review: the check before listening waited as long as the DSN's connect_timeout, so a server that
    accepts connections and never answers, with connect_timeout=0 (wait for ever), kept the service from ever
    listening. It waits --db-timeout at most; then the service starts and says 503."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # accepts (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "serve", "--port", str(port), "--db-timeout", "1",
                             "--dsn", f"host=127.0.0.1 port={silent.getsockname()[1]} dbname=x connect_timeout=0"],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120  # a generous deadline on a loaded machine, not a timing check
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                status = call(f"127.0.0.1:{port}", "GET", "/health")[0]
                break
            except OSError:
                assert time.monotonic() < deadline, "onetrip serve never listened"
                time.sleep(0.3)
        assert status == 503
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
        silent.close()
    assert proc.returncode == 0 and "the service starts and answers 503" in out, out


def test_cli_serve_refuses_a_dsn_value_libpq_refuses_before_it_starts():
    """Found by review: `onetrip serve --dsn '...port=99999'` started, its pool retried the DSN for ever and every
    request got 503 "the database is not answering"; every other command says InvalidDsnError (exit 2). The
    service opens one connection before it listens: such a DSN fails the start, naming the value and not the
    password, while a database that does not answer still starts the service (`_serve_without_database`)."""
    for dsn in ("host=127.0.0.1 port=99999 password=hunter2", "host=127.0.0.1 port=1 sslmode=bogus password=hunter2"):
        res = subprocess.run([sys.executable, "-m", "onetrip.cli", "serve", "--dsn", dsn, "--port", str(_free_port())],
                             capture_output=True, text=True, timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert res.returncode == 2 and "the DSN has a value libpq refuses" in res.stderr, res.stderr
        assert "hunter2" not in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_wrong_method_says_which_methods_the_path_takes(dsn):
    """RFC 9110: a 405 carries Allow. The service's error body had replaced Starlette's response, header and all."""
    with serving(dsn) as base:
        for method, path, allowed in (("GET", "/search", "POST"), ("DELETE", "/health", "HEAD, GET"),
                                      ("POST", "/documents", "HEAD, GET")):
            status, data, headers = call(base, method, path)
            assert_error(status, data, 405, "method_not_allowed", "(allowed: ")
            methods = {m.strip() for m in headers.get("allow", "").split(",")}  # Starlette's order varies
            assert methods == set(allowed.split(", ")), headers
            assert methods == {m.strip() for m in data["error"]["message"].split("(allowed: ")[1].rstrip(")").split(",")}


def test_cli_serve_rejects_contradictory_flags():
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "serve", "--dsn", "host=/nonexistent",
                          "--no-acl", "--principal", "hr"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "contradict" in res.stderr


def test_cli_serve_refuses_a_bad_table_name_before_it_starts():
    """Found by the CLI review: serve had started with --prefix 'T-' and answered every request, /health too,
    500 with a traceback in its log; every other command refuses the name at once (exit 2, one line)."""
    from onetrip import InvalidIdentifierError

    for flag, bad in (("--prefix", "T-"), ("--schema", "Bad Schema"), ("--prefix", 'x"; drop table t; --')):
        res = subprocess.run([sys.executable, "-m", "onetrip.cli", "serve", "--dsn", "host=/nonexistent", flag, bad],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "is not allowed" in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    with pytest.raises(InvalidIdentifierError):
        ServiceConfig(dsn="host=/nonexistent", prefix="T-")


def test_cli_serve_refuses_a_model_folder_that_is_not_there(tmp_path):
    """Before it connects or listens: a missing --model is exit 2, naming the flag, not a traceback at startup."""
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "serve", "--dsn", "host=/nonexistent",
                          "--model", str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "--model" in res.stderr and "is not a folder" in res.stderr and "Traceback" not in res.stderr



# ---------------------------------------------------------------- /search_many


MANY_REQUESTS = [
    {"queries": ["maximum number of concurrent connections", "pasta", "bread dough"], "k": 3},
    {"embeddings": [HashEmbedder().embed_query("reserved slots").tolist(),
                    HashEmbedder().embed_query("salt water").tolist()],
     "k": 2, "expand": {"parent": False, "neighbors": 0}},
    {"queries": ["salaries", "connections"], "filters": {"doc_ids": ["connections.md", "salaries.md"]}},
    {"queries": ["max_connections", "pasta water"], "k": 2, "mode": "lexical"},
    {"queries": ["max_connections", "pasta water"], "k": 2, "mode": "dense"},
    # both: the embeddings are the queries' own (here deliberately of other texts), the texts feed the word list
    {"queries": ["max_connections", "pasta water"], "k": 2,
     "embeddings": [HashEmbedder().embed_query("reserved slots").tolist(), HashEmbedder().embed_query("bread").tolist()]},
    {"queries": ["max_connections", "pasta water"], "k": 2, "hybrid": {"lexical_weight": 3}},
]


def test_search_many_equals_the_python_api_in_one_statement(db, dsn, corpus, statement_log):
    jsonschema = pytest.importorskip("jsonschema")
    r = Retriever(db, embedder=HashEmbedder())
    with serving_one_backend(db, dsn, "many") as (base, backend):
        spec = call(base, "GET", "/openapi.json")[1]

        def validator(name: str) -> Any:
            return jsonschema.Draft202012Validator({"components": spec["components"],
                                                    "$ref": f"#/components/schemas/{name}"})

        for body in MANY_REQUESTS:
            validator("SearchManyRequest").validate(body)
            with statement_log.watch(backend) as w:
                status, data, _ = call(base, "POST", "/search_many", body)
            assert status == 200, data
            assert len(w.statements) == 1 and w.statements[0].startswith("WITH queries AS")
            validator("SearchManyResponse").validate(data)
            texts = body.get("queries") if "embeddings" in body else None  # None, or the embeddings' texts
            queries = [np.asarray(e, np.float32) for e in body["embeddings"]] if "embeddings" in body else body["queries"]
            exp = body.get("expand", {})
            want = r.search_many(queries, body.get("k", 5), parent=exp.get("parent", True), texts=texts,
                                 neighbors=exp.get("neighbors", 1) > 0, mode=body.get("mode", "auto"),
                                 filters=Filters(principals=(), **body.get("filters", {})), hybrid=body.get("hybrid"))
            # texts search hybrid by default (a fused score), embeddings dense, as /search does
            hybrid = "queries" in body and body.get("mode", "auto") in ("auto", "hybrid", "lexical")
            assert all((h["score"] is not None) == hybrid for res in data["results"] for h in res["hits"])
            shown = texts or [q if isinstance(q, str) else None for q in queries]
            assert data == {"results": [{"query": q, "hits": [hit_json(h) for h in hits]}
                                        for q, hits in zip(shown, want)]}
        # the secret document stays hidden: public principals only
        assert all(h["doc_id"] != "salaries.md" for res in call(base, "POST", "/search_many", MANY_REQUESTS[2])[1]
                   ["results"] for h in res["hits"])


def test_search_many_bad_input_names_the_item(dsn, corpus):
    good = HashEmbedder().embed_query("pasta").tolist()
    cases = [
        ({}, 422, "missing_query", "or both (hybrid)"),
        ({"queries": ["a", "b"], "embeddings": [good]}, 422, "invalid_field", "1 embeddings for 2 queries"),
        ({"queries": ["a"], "embeddings": [good], "mode": "dense"}, 422, "invalid_field", "not both"),
        ({"queries": ["a"], "embeddings": [good], "mode": "lexical"}, 422, "invalid_field", "no embeddings"),
        ({"queries": ["q"] * 101}, 422, "invalid_field", "1 to 100 items, got 101"),
        ({"queries": "pasta"}, 422, "invalid_field", "got a string"),
        ({"queries": ["pasta", "  "]}, 422, "invalid_field", "queries[1]: is empty"),
        ({"embeddings": [good, good[:10]]}, 422, "dimension_mismatch", "embeddings[1] has 10 dimensions"),
        ({"embeddings": [good, [0.0] * 384]}, 422, "invalid_field", "embeddings[1]: is all zeros"),
        ({"queries": ["pasta"], "mode": "fuzzy"}, 422, "invalid_field", "mode: must be one of"),
        ({"embeddings": [good], "mode": "hybrid"}, 422, "missing_query", "hybrid mode needs the queries as texts"),
        ({"embeddings": [good], "mode": "lexical"}, 422, "missing_query", "lexical mode needs the queries"),
        ({"queries": ["pasta"], "rank": 3}, 422, "unknown_field", "rank"),
        ({"queries": ["pasta"], "k": 51}, 422, "k_out_of_range", "from 1 to 50"),
        ({"queries": ["pasta"], "expand": {"neighbors": 2}}, 422, "invalid_field", "expand.neighbors"),
        ({"queries": ["pasta"], "principals": ["hr"]}, 403, "principals_not_allowed", "--trust-request-principals"),
    ]
    with serving(dsn) as base:
        for body, want_status, code, words in cases:
            status, data, _ = call(base, "POST", "/search_many", body)
            assert_error(status, data, want_status, code, words)


def test_pgvector_settings_reach_the_pooled_connections(db, dsn, corpus, statement_log):
    """serve --ef-search / --iterative-scan / --max-scan-tuples: set once on each pooled connection."""
    app_name = f"onetrip-settings-{os.getpid()}"
    start = statement_log.path.stat().st_size
    with serving(dsn, pool_size=1, application_name=app_name, ef_search=77, iterative_scan="strict_order",
                 max_scan_tuples=5000) as base:
        assert call(base, "GET", "/health")[0] == 200
        (pid,) = db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                            (app_name,)).fetchone()
        assert search(base, {"query": "pasta", "k": 3})[0] == 200
    with statement_log.path.open("rb") as f:
        f.seek(start)
        mine = [line for line in f.read().decode("utf-8", "replace").splitlines() if f"[{pid}]" in line]
    sent = "\n".join(line for line in mine if "hnsw." in line)  # the statement's parameters (DETAIL line)
    for name, value in (("hnsw.ef_search", "77"), ("hnsw.iterative_scan", "strict_order"),
                        ("hnsw.max_scan_tuples", "5000")):
        assert re.search(rf"= '{re.escape(name)}', \$(\d+) = '{value}'", sent), sent
    with pytest.raises(ValueError, match="ef_search must be an integer"):
        ServiceConfig(dsn=dsn, ef_search=0)


def test_the_budget_cap_is_inclusive_and_bounds_the_default(dsn, corpus):
    """An operator's cap below the default budget is the default; a budget equal to the cap is allowed."""
    with serving(dsn, max_tokens_cap=1000) as base:
        status, data = search(base, {"query": "pasta", "hits": False})
        assert status == 200 and data["context"]["max_tokens"] == 1000, data
        status, data = search(base, {"query": "pasta", "hits": False, "max_tokens": 1000})
        assert status == 200 and data["context"]["max_tokens"] == 1000, data
        status, data = search(base, {"query": "pasta", "hits": False, "max_tokens": 1001})
        assert status == 422 and data["error"]["code"] == "budget_too_large", data


# ---------------------------------------------------------------- GET /documents


def documents(base: str, query: str = "", **kw: Any) -> tuple[int, Any]:
    status, data, _ = call(base, "GET", "/documents" + (f"?{query}" if query else ""), **kw)
    return status, data


def _listed(data: dict[str, Any]) -> list[str]:
    return [d["doc_id"] for d in data["documents"]]


def test_documents_lists_what_the_principals_may_read(db, dsn, corpus):
    """GET /documents is `onetrip documents --json` for the principals a search would read with: the
    secret document is listed only to a caller that may read it (and 'private' holds nothing else)."""
    from onetrip import list_documents
    from onetrip.cli import document_to_json

    public = ["connections.md", "cooking.md"]
    with serving(dsn) as base:  # default: public documents only
        status, data = documents(base)
        assert status == 200, data
        assert data == {"documents": [document_to_json(d) for d in list_documents(db, corpus, principals=())],
                        "next_after": None}
        assert _listed(data) == public
        assert _listed(documents(base, "collection=private")[1]) == []
        assert_error(*documents(base, "principals=hr"), 403, "principals_not_allowed")
    with serving(dsn, principals=("hr",)) as base:
        assert _listed(documents(base)[1]) == public + ["salaries.md"]
        (doc,) = documents(base, "collection=private")[1]["documents"]
        assert (doc["doc_id"], doc["collection"], doc["acl"], doc["revision"]) == ("salaries.md", "private", ["hr"], 1)
        assert doc == document_to_json(list_documents(db, corpus, collection="private")[0])
    with serving(dsn, trust_request_principals=True) as base:
        assert _listed(documents(base, "principals=hr")[1]) == public + ["salaries.md"]
        assert _listed(documents(base, "principals=eng&principals=hr&collection=private")[1]) == ["salaries.md"]
        assert _listed(documents(base, "principals=eng&principals=sales")[1]) == public
        assert _listed(documents(base)[1]) == public  # no principals: the operator's (public only)
    with serving(dsn, principals=None) as base:  # --no-acl
        assert _listed(documents(base)[1]) == public + ["salaries.md"]


def test_documents_bad_input_is_a_clear_4xx(db, dsn, corpus):
    with serving(dsn, trust_request_principals=True) as base:
        assert_error(*documents(base, "colection=private"), 422, "unknown_field", "colection", "collection")
        assert_error(*documents(base, "collection=a&collection=b"), 422, "invalid_field", "collection", "once")
        assert_error(*documents(base, "collection=a%00b"), 422, "invalid_field", "collection", "NUL")
        assert_error(*documents(base, "principals=a%00b"), 422, "invalid_field", "principals[0]", "NUL")
        status, data, _ = call(base, "GET", "/documents", {"collection": "private"})
        assert_error(status, data, 400, "bad_request", "takes no body", "query parameters")
        assert_error(*call(base, "POST", "/documents", {})[:2], 405, "method_not_allowed")
        assert _listed(documents(base, "collection=")[1]) == []  # a collection named "": none


def all_pages(base: str, limit: int, query: str = "") -> tuple[list[list[str]], list[Any]]:
    """Every page of GET /documents, each asked after the previous one's next_after: (doc_ids, next_afters)."""
    from urllib.parse import quote

    ids: list[list[str]] = []
    cursors: list[Any] = []
    after = ""
    for _ in range(20):
        status, data = documents(base, f"limit={limit}{after}{query}")
        assert status == 200 and set(data) == {"documents", "next_after"}, data
        ids.append(_listed(data))
        cursors.append(data["next_after"])
        if data["next_after"] is None:
            return ids, cursors
        assert data["next_after"] == ids[-1][-1]
        after = f"&after={quote(data['next_after'])}"
    raise AssertionError(f"no last page: {ids}")


def test_documents_pages_by_doc_id_with_next_after(db, dsn, corpus, tmp_path):
    """?limit=N&after=ID pages through every readable document once, in doc_id order; next_after is null
    exactly on the last page (one row more was read), and only ever a document the caller was shown."""
    for name in ("a b.md", "zeta.md"):
        (tmp_path / name).write_text(f"# {name}\n\nMore text about {name}.{PAD}\n")
    assert ingest_paths(db, [tmp_path / "a b.md", tmp_path / "zeta.md"], layout=corpus,
                        embedder=HashEmbedder()).new == 2
    public = ["a b.md", "connections.md", "cooking.md", "zeta.md"]
    everyone = ["a b.md", "connections.md", "cooking.md", "salaries.md", "zeta.md"]
    with serving(dsn) as base:  # public only
        assert _listed(documents(base)[1]) == public  # the default page (1000) holds them all
        assert all_pages(base, 2) == ([public[:2], public[2:]], [public[1], None])
        assert all_pages(base, 1) == ([[d] for d in public], public[:3] + [None])
        assert all_pages(base, 3, "&collection=default")[0] == [public[:3], public[3:]]
        assert documents(base, "limit=2&after=zeta.md")[1] == {"documents": [], "next_after": None}
        # after a hidden doc_id: as after any string that sorts there; salaries.md never a cursor nor listed
        assert _listed(documents(base, "limit=1&after=salaries.md")[1]) == ["zeta.md"]
        assert _listed(documents(base, "after=cooking.md")[1]) == ["zeta.md"]
    with serving(dsn, principals=("hr",)) as base:
        pages, cursors = all_pages(base, 2)
        assert pages == [everyone[:2], everyone[2:4], everyone[4:]] and cursors == [everyone[1], everyone[3], None]
        assert all_pages(base, 2, "&collection=private") == ([["salaries.md"]], [None])
    with serving(dsn, trust_request_principals=True) as base:
        assert all_pages(base, 4, "&principals=hr")[0] == [everyone[:4], everyone[4:]]
        assert all_pages(base, 4, "&principals=eng")[0] == [public]


def test_documents_page_is_one_statement(db, dsn, corpus, statement_log):
    with serving_one_backend(db, dsn, "docs") as (base, backend):
        for query in ("limit=1", "limit=1&after=connections.md", "limit=5&after=cooking.md"):
            with statement_log.watch(backend) as w:
                assert documents(base, query)[0] == 200
            assert len(w.statements) == 1 and "LIMIT" in w.statements[0], (query, w.statements)


def test_documents_bad_limit_or_after_is_a_422_naming_it(db, dsn, corpus):
    with serving(dsn) as base:
        for bad in ("0", "-1", "10001", "two", "1.5", "+5", "%205", "1_000", "%D9%A5", ""):
            assert_error(*documents(base, f"limit={bad}"), 422, "invalid_field", "limit", "from 1 to 10000")
        assert_error(*documents(base, "limit=1&limit=2"), 422, "invalid_field", "limit", "once")
        assert_error(*documents(base, "after=a&after=b"), 422, "invalid_field", "after", "once")
        assert_error(*documents(base, "after=a%00b"), 422, "invalid_field", "after", "NUL")
        assert_error(*documents(base, "limt=2"), 422, "unknown_field", "limt", "limit", "after")
        status, data = documents(base, "limit=0")
        assert data["error"]["field"] == "limit"
        assert _listed(documents(base, "limit=10000")[1]) == ["connections.md", "cooking.md"]


def test_a_search_only_role_lists_no_documents_with_a_403_naming_the_table(db, dsn, corpus):
    """A service whose database role may read sections and term_stats only (a search-only role, as the README's
    least-privilege setup grants) searched fine but answered GET /documents with 500 internal_error."""
    role = "onetrip_http_searcher"
    db.execute(f"DROP ROLE IF EXISTS {role}")
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        db.execute(f"GRANT SELECT ON sections, term_stats TO {role}")
        with serving(psycopg.conninfo.make_conninfo(dsn, user=role)) as base:
            assert search(base, {"query": "pasta"})[0] == 200
            assert_error(*documents(base), 403, "permission_denied", "permission denied for table documents")
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


def test_tables_dropped_under_the_service_are_503_schema_missing(db, dsn, corpus):
    """/search had answered 500 internal_error once the tables it had read were dropped."""
    with serving(dsn) as base:
        assert search(base, {"query": "pasta"})[0] == 200
        db.execute("DROP TABLE documents, sections CASCADE")
        assert_error(*search(base, {"query": "pasta"}), 503, "schema_missing", "onetrip init")
        assert_error(*documents(base), 503, "schema_missing", "onetrip init")


def test_health_is_503_schema_missing_without_the_word_weights_table(db, dsn, corpus):
    """Found by the upgrade review: on a store made before term_stats, /health said ok while every /search in
    the default mode was 503 schema_missing; /health now reads that table too, and names the fix."""
    with serving(dsn) as base:
        assert call(base, "GET", "/health")[0] == 200
        db.execute("DROP TABLE term_stats")
        status, data, _ = call(base, "GET", "/health")
        assert_error(status, data, 503, "schema_missing", "term_stats")
        assert "onetrip init" in data["error"]["message"]
        assert_error(*search(base, {"query": "pasta"}), 503, "schema_missing")
        assert search(base, {"query": "pasta", "mode": "dense"})[0] == 200  # what does not need it still works


def test_health_does_not_ask_for_read_rights_on_the_word_weights_table(db, dsn, corpus):
    """Found by the review of the check above: it read term_stats, so a role without SELECT on it got 403
    permission_denied from /health, which answers 200 or 503 only (README, serve --help, OpenAPI). It now asks
    whether the table is there."""
    role = f"onetrip_health_{os.getpid()}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        db.execute(f"GRANT SELECT ON sections, documents TO {role}")
        with serving(psycopg.conninfo.make_conninfo(dsn, user=role)) as base:
            assert call(base, "GET", "/health")[:2] == (200, {"status": "ok"})
            assert search(base, {"query": "pasta", "mode": "dense"})[0] == 200
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


# ---------------------------------------------------------------- "explain"


def test_explain_is_the_plan_of_each_statement_the_request_sends(db, dsn, corpus, statement_log):
    """"explain" answers with `onetrip search --explain --json`'s object for each shape's statement, in ONE
    EXPLAIN statement each, with the request's filters and principals bound; results need no extra statement."""
    from onetrip.cli import explained_to_json

    r = Retriever(db, embedder=HashEmbedder())
    with serving_one_backend(db, dsn, "explain", trust_request_principals=True) as (base, backend):
        flt = {"collections": ["private"], "metadata": {"a": 1}}
        body = {"query": "salary bands", "k": 3, "filters": flt, "principals": ["eng"]}
        with statement_log.watch(backend) as w:
            status, data = search(base, {**body, "explain": "plan"})
        assert status == 200, data
        assert len(w.statements) == 2 and all(s.startswith("EXPLAIN WITH") for s in w.statements)
        want = Filters(principals=("eng",), collections=("private",), metadata={"a": 1})
        q = HashEmbedder().embed_query("salary bands")
        assert data == {"explain": {
            "hits": explained_to_json(r.explain(q, 3, kind="plan", filters=want, text="salary bands")),
            "context": explained_to_json(r.explain(q, 3, assemble=True, kind="plan", filters=want,
                                                   text="salary bands", expand=context_expansion(),
                                                   max_tokens=2000))}}
        for ex in data["explain"].values():  # the ACL and the filters are in the statement explained
            assert ex["params"]["principals"] == ["eng"] and ex["params"]["collections"] == ["private"]
            assert ex["params"]["metadata"] == {"a": 1}
            assert "acl && " in ex["statement"]
        status, data = search(base, {"query": "pasta", "k": 2, "hits": False, "explain": True})  # true: analyze
        assert status == 200 and set(data) == {"explain"} and set(data["explain"]) == {"context"}
        ex = data["explain"]["context"]
        assert ex["kind"] == "analyze" and "actual time" in ex["plan"] and ex["params"]["principals"] == []
        with statement_log.watch(backend) as w:  # explain off: the results, one statement per shape as before
            status, data = search(base, {"query": "pasta", "k": 2, "explain": False})
        assert status == 200 and set(data) == {"hits", "context"} and len(w.statements) == 4  # BEGIN, COMMIT
        assert not any(s.startswith("EXPLAIN") for s in w.statements)

        many = {"queries": ["pasta", "bread"], "k": 2, "explain": "plan", "principals": ["hr"]}
        with statement_log.watch(backend) as w:
            status, data, _ = call(base, "POST", "/search_many", many)
        assert status == 200, data
        assert len(w.statements) == 1 and w.statements[0].startswith("EXPLAIN WITH queries AS")
        assert data == {"explain": explained_to_json(r.explain_many(["pasta", "bread"], 2, kind="plan",
                                                                    filters=Filters(principals=("hr",))))}
        jsonschema = pytest.importorskip("jsonschema")
        spec = call(base, "GET", "/openapi.json")[1]
        assert "Taken" in spec["components"]["schemas"]["SearchRequest"]["properties"]["explain"]["description"]

        def validate(name: str, value: Any) -> None:
            jsonschema.Draft202012Validator({"components": spec["components"],
                                             "$ref": f"#/components/schemas/{name}"}).validate(value)

        validate("SearchManyRequest", many)
        validate("SearchManyResponse", data)
        validate("SearchRequest", {**body, "explain": "plan"})
        if db.info.server_version >= 160000:
            validate("SearchResponse", search(base, {**body, "explain": "generic"})[1])
        else:  # EXPLAIN (GENERIC_PLAN) is PostgreSQL 16+ (an ONETRIP_TEST_DSN server)
            assert_error(*search(base, {**body, "explain": "generic"}), 422, "invalid_field", "explain",
                         "PostgreSQL 16")


def test_explain_is_refused_where_the_acl_limits_the_caller(db, dsn, corpus):
    """A plan counts the rows the ACL removed: for a public-only caller the GIN scan of "salary" found the
    secret document's sections (0 hits, 'Rows Removed by Filter: 2'). Only callers the ACL does not bind
    (--no-acl, trusted request principals) may ask for one."""
    db.execute("SET enable_seqscan = off")  # index scans, as on a table of more than these few rows
    public = Retriever(db, embedder=HashEmbedder())
    for word, hidden in (("salary", 2), ("zebra", 0)):
        assert public.search(word, 3, mode="lexical", filters=Filters(principals=())) == []
        plan = public.explain(word, 3, mode="lexical", filters=Filters(principals=())).plan
        assert re.search(rf"Bitmap Index Scan on sections_tsv_gin .*actual .* rows={hidden}(?:\.00)? loops", plan), plan
    assert "Rows Removed by Filter: 2" in public.explain("salary", 3, mode="lexical",
                                                         filters=Filters(principals=())).plan
    body = {"query": "salary", "mode": "lexical", "k": 3, "explain": "analyze"}
    many = {"queries": ["salary"], "mode": "lexical", "explain": True}
    for options in ({}, {"principals": ("hr",)}):
        with serving(dsn, **options) as base:
            assert_error(*search(base, body), 403, "explain_not_allowed", "ACL")
            assert_error(*call(base, "POST", "/search_many", many)[:2], 403, "explain_not_allowed")
            assert search(base, {**body, "explain": False})[0] == 200
            spec = call(base, "GET", "/openapi.json")[1]
            assert "Refused" in spec["components"]["schemas"]["SearchRequest"]["properties"]["explain"]["description"]
    with serving(dsn, principals=None) as base:
        status, data = search(base, body)
        assert status == 200 and "principals" not in data["explain"]["hits"]["params"]  # no ACL check at all
        assert call(base, "POST", "/search_many", many)[0] == 200
        for bad in ("verbose", 1, "ANALYZE", ["plan"]):
            assert_error(*search(base, {**body, "explain": bad}), 422, "invalid_field", "explain", "generic")
            assert_error(*call(base, "POST", "/search_many", {**many, "explain": bad})[:2], 422, "invalid_field",
                         "explain")
        assert_error(*search(base, {**body, "k": 51}), 422, "k_out_of_range")  # the same caps as a search


def test_review_findings_surrogate_keys_empty_tokens_long_limits_context_k_and_health(db, dsn, corpus, monkeypatch):
    """Found by a review of the service:
    - an unknown key holding a lone surrogate ("\\ud800") made the error response itself fail: plain-text 500;
    - an empty --token or $ONETRIP_TOKEN started a service without a token (one space was refused);
    - a non-ASCII token could never match (headers are read as Latin-1), nor one with spaces at either end;
    - GET /documents?limit= with 4,300 digits or more was a 500 (int() refuses such strings);
    - with k absent, a 16,000-token budget asked for 64 hits past --max-k 50;
    - /health said 200 after the tables were dropped, while /search said 503 schema_missing."""
    from onetrip.http_service import token_from_env

    monkeypatch.delenv("ONETRIP_TOKEN", raising=False)
    for token in ("", " ", " padded", "p\u00e4ssw\u00f6rd", "tab\there"):
        with pytest.raises(ValueError, match="bearer token"):
            ServiceConfig(dsn=dsn, token=token_from_env(token))
    monkeypatch.setenv("ONETRIP_TOKEN", "")
    with pytest.raises(ValueError, match="bearer token is empty"):
        ServiceConfig(dsn=dsn, token=token_from_env(None))
    monkeypatch.delenv("ONETRIP_TOKEN")
    assert token_from_env(None) is None  # neither given: no token, as before
    with serving(dsn, max_tokens_cap=16000, principals=None) as base:  # no ACL: explain is allowed
        raw = b'{"query": "pasta", "\\ud800": 1}'
        status, data, headers = call(base, "POST", "/search", raw=raw)
        assert_error(status, data, 422, "unknown_field", "\\ud800")
        assert headers["content-type"] == "application/json"
        status, data, _ = call(base, "POST", "/search", raw=b'{"query": "pasta", "filters": {"\\udfff": 1}}')
        assert status == 422 and data["error"]["code"] == "unknown_filter_key", data
        for limit in ("0" * 5000 + "5", "9" * 5000):
            assert_error(*documents(base, f"limit={limit}"), 422, "invalid_field")
        status, data = search(base, {"query": "pasta", "hits": False, "max_tokens": 16000, "explain": "plan"})
        assert status == 200 and data["explain"]["context"]["params"]["k"] == 50, data
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE term_stats, section_history, sections, documents")
        assert_error(*call(base, "GET", "/health")[:2], 503, "schema_missing", "onetrip init")


def test_max_k_below_search_k_caps_requests_without_k(dsn, corpus):
    """A review served --max-k 2: k=3 was refused, yet a request without k got search's 5 hits (/search and
    /search_many), and /openapi.json said maximum 2, default 5."""
    with serving(dsn, max_k=2) as base:
        status, data = search(base, {"query": "pasta", "context": False})
        assert status == 200 and len(data["hits"]) == 2, data
        status, data, _ = call(base, "POST", "/search_many", {"queries": ["pasta", "bread"]})
        assert status == 200 and [len(r["hits"]) for r in data["results"]] == [2, 2], data
        assert_error(*search(base, {"query": "pasta", "k": 3}), 422, "k_out_of_range")
        schemas = call(base, "GET", "/openapi.json")[1]["components"]["schemas"]
        assert schemas["SearchManyRequest"]["properties"]["k"]["default"] == 2
        assert "default 2 for hits" in schemas["SearchRequest"]["properties"]["k"]["description"]
    with serving(dsn) as base:  # the usual cap, 50: search's 5
        status, data = search(base, {"query": "pasta", "context": False})
        assert status == 200 and len(data["hits"]) == 5, data


def test_the_pools_per_request_lines_stay_out_of_the_info_log():
    """psycopg_pool logs every checkout and return at info: six lines a request at the default --log-level,
    which --no-access-log did not stop. At info the pool logs warnings and above; at debug, everything."""
    from onetrip.http_service import log_config

    assert log_config("info")["loggers"]["psycopg.pool"]["level"] == "WARNING"
    assert log_config("info")["loggers"]["onetrip"]["level"] == "INFO"
    assert log_config("debug")["loggers"]["psycopg.pool"]["level"] == "DEBUG"
    assert log_config("error")["loggers"]["psycopg.pool"]["level"] == "ERROR"
