"""Bounded HTTP load test of `onetrip serve`, from a second process, on loopback only.

    python -m benchmarks.load_http                       # 20 clients x 30 s, embedded server
    python -m benchmarks.load_http --dsn postgresql://... --clients 50 --duration 60

What it does, and why:
1. Loads a corpus into its own tables (prefix ``load_`` by default, so a
   user's tables are untouched): the bundled demo corpus embedded with the bundled
   model, plus synthetic sections (default 20,000) so the HNSW index and the
   expansion joins work on a table of realistic size. Re-runs reuse it.
2. Starts ``onetrip serve`` as a SUBPROCESS on 127.0.0.1 with a random bearer
   token, a unique application_name and ``--pool-size`` connections, and waits
   for /health. The service, not this process, embeds text queries.
3. Runs ``--clients`` concurrent keep-alive clients (httpx, one event loop) for
   ``--duration`` seconds, each sending POST /search with the next question of
   a fixed list; no request starts after the deadline. Bounded: at most 200
   clients, 600 s and ``--max-requests`` requests.
4. Meanwhile samples, every ``--sample-every`` s, the server's /stats (psycopg_pool
   pool_size / pool_available / requests_waiting) and, on a separate
   connection, how many backends in pg_stat_activity carry the service's
   application_name: the independent check that the pool never exceeded its size.
5. Writes ``<out>.json`` (config, every figure, the samples) and ``<out>.md``.

Exit status 1 when any request failed or the pool exceeded its size.
This is a benchmark, not a test: nothing in the test suite runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.args import int_range, nonneg_int, output_file, positive_int, positive_number, run_cli
from onetrip.retrieve import MAX_K

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "onetrip" / "demo_corpus"
HOST = "127.0.0.1"  # loopback only, by design
MAX_CLIENTS, MAX_DURATION = 200, 600.0

QUESTIONS = [
    "Is tennis elbow covered by the travel insurance?",
    "How often should I descale the espresso machine?",
    "Can help desk staff work from home?",
    "What does the travel insurance exclude?",
    "How do I clean the milk frother?",
    "Who approves remote work requests?",
    "Are pre-existing medical conditions covered?",
    "What water should I use in the espresso machine?",
    "How many days per week can I work remotely?",
    "How do I make a claim after an accident abroad?",
    "Why is my espresso too bitter?",
    "What equipment does the company provide for home office?",
    "Is skiing covered as a sport?",
    "How long does the machine take to heat up?",
    "Do I need to be reachable during core hours?",
    "What is the maximum amount covered for medical costs?",
    "Is cancellation because of illness covered?",
    "What grind size should I use for espresso?",
    "Can I work from another country?",
    "What should I do if the pump makes noise?",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def prepare_corpus(dsn: str, prefix: str, synthetic: int) -> dict[str, Any]:
    """Demo corpus (real model) + synthetic sections in the ``prefix`` tables; reused when already there."""
    from onetrip.connection import connect
    from onetrip.embedders import SentenceTransformerEmbedder
    from onetrip.ingest import ingest_paths
    from onetrip.layout import Layout
    from onetrip.schema import init_schema
    from onetrip.synthetic import bulk_load, generate

    with connect(dsn) as conn:
        layout = init_schema(conn, Layout(dim=384, prefix=prefix))
        t = layout.tables
        have = conn.execute(f"SELECT count(*) FROM {t['sections']} WHERE doc_id LIKE 'syn%'").fetchone()[0]
        if have not in (0, synthetic):  # kept, a run of --synthetic 5000 had measured the 1,000 of an earlier one
            raise SystemExit(f"python -m benchmarks.load_http: error: the {prefix} tables hold {have} synthetic "
                             f"sections, not --synthetic {synthetic}: give another --prefix, or drop them "
                             f"(DROP TABLE {t['sections']}, {t['documents']} CASCADE)")
        if synthetic and have == 0:
            print(f"loading {synthetic} synthetic sections into {t['sections']} ...", file=sys.stderr)
            bulk_load(conn, layout, list(generate(synthetic, dim=384, seed=7, doc_prefix="syn")))
        report = ingest_paths(conn, [DEMO], layout=layout, embedder=SentenceTransformerEmbedder())
        if report.failed:
            raise SystemExit(f"demo corpus failed to ingest: {report.failed}")
        sections, docs = conn.execute(f"SELECT count(*), count(DISTINCT doc_id) FROM {t['sections']}").fetchone()
        pg = conn.execute("SHOW server_version").fetchone()[0]
        vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    return {"sections": int(sections), "documents": int(docs), "postgres": pg, "pgvector": vec}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to see where the CPUs went."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def start_service(args: argparse.Namespace, dsn: str, port: int, token: str, app_name: str) -> subprocess.Popen:
    from onetrip.http_service import DEFAULT_MAX_K  # serve's own cap; a larger -k raises it for this service

    cmd = [sys.executable, "-m", "onetrip.cli", "serve", "--dsn", dsn, "--prefix", args.prefix,
           "--host", HOST, "--port", str(port), "--pool-size", str(args.pool_size),
           "--max-k", str(max(args.k, DEFAULT_MAX_K)),  # -k past serve's default cap had failed the warm-up
           "--application-name", app_name, "--no-access-log", "--log-level", "warning"]
    env = {**os.environ, "ONETRIP_TOKEN": token, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def wait_healthy(client: Any, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"onetrip serve exited with {proc.returncode}:\n{proc.stderr.read() if proc.stderr else ''}")
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except Exception:
            pass
        await asyncio.sleep(0.25)
    raise SystemExit("onetrip serve did not become healthy in time")


def distinct(body: dict[str, Any], n: Any) -> dict[str, Any]:
    """A text request made unlike any before it (its number appended), so the service embeds every one: the
    embedder keeps its last 1,024 query vectors, and the 20 questions repeated had been answered from that
    cache after the warm-up. A precomputed embedding is sent as it is."""
    if "embedding" in body:
        return body
    return {**body, "query": f"{body['query']} ({n})"}


def request_bodies(args: argparse.Namespace) -> list[dict[str, Any]]:
    shape = {"both": {}, "hits": {"context": False}, "context": {"hits": False}}[args.shape]
    base = {"k": args.k, "mode": args.mode, **shape}
    if args.payload == "text":  # made distinct per request by `distinct`
        return [{**base, "query": q} for q in QUESTIONS]
    from onetrip.embedders import SentenceTransformerEmbedder

    vectors = SentenceTransformerEmbedder().embed_documents(QUESTIONS)
    extra = (lambda q: {"query": q}) if args.mode == "hybrid" else (lambda q: {})
    return [{**base, "embedding": [float(x) for x in v], **extra(q)} for q, v in zip(QUESTIONS, vectors)]


async def run_load(args: argparse.Namespace, base_url: str, token: str, dsn: str, app_name: str,
                   proc: subprocess.Popen) -> dict[str, Any]:
    import httpx
    import psycopg

    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=args.clients + 2, max_keepalive_connections=args.clients + 2)
    bodies = request_bodies(args)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=60.0) as client:
        await wait_healthy(client, proc)
        for body in bodies:  # warm-up: every request shape once, each must succeed
            r = await client.post("/search", json=distinct(body, "warm-up"))
            if r.status_code != 200:
                raise SystemExit(f"warm-up request failed: {r.status_code} {r.text[:500]}")

        latencies: list[float] = []
        errors: Counter[str] = Counter()
        samples: list[dict[str, Any]] = []
        started = {"n": 0}
        stop = asyncio.Event()
        t0 = time.perf_counter()
        deadline = t0 + args.duration

        async def worker(i: int) -> None:
            j = i
            while time.perf_counter() < deadline and started["n"] < args.max_requests:
                started["n"] += 1
                body = distinct(bodies[j % len(bodies)], started["n"])
                j += 1
                s = time.perf_counter()
                try:
                    r = await client.post("/search", json=body)
                    if r.status_code == 200:
                        latencies.append(time.perf_counter() - s)
                    else:
                        errors[f"HTTP {r.status_code}: {r.text[:200]}"] += 1
                except Exception as e:  # counted, never hidden
                    errors[f"{type(e).__name__}: {e}"[:200]] += 1

        async def sampler() -> None:
            mon = await psycopg.AsyncConnection.connect(dsn, autocommit=True, application_name="onetrip-load-monitor")
            try:
                while not stop.is_set():
                    cur = await mon.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                            (app_name,))
                    backends = (await cur.fetchone())[0]
                    st = (await client.get("/stats")).json()["pool"]
                    samples.append({"t": round(time.perf_counter() - t0, 3), "backends": int(backends),
                                    "pool_size": st.get("pool_size"), "pool_available": st.get("pool_available"),
                                    "requests_waiting": st.get("requests_waiting")})
                    try:
                        await asyncio.wait_for(stop.wait(), args.sample_every)
                    except asyncio.TimeoutError:
                        pass
            finally:
                await mon.close()

        load_before, cpu_before = os.getloadavg(), _cpu_seconds(proc.pid)
        sampling = asyncio.create_task(sampler())
        await asyncio.gather(*(worker(i) for i in range(args.clients)))
        elapsed = time.perf_counter() - t0
        service_cpu = _cpu_seconds(proc.pid) - cpu_before
        stop.set()
        await sampling
        server_stats = (await client.get("/stats")).json()
    return {"latencies": latencies, "errors": errors, "samples": samples, "elapsed": elapsed,
            "server_stats": server_stats, "service_cpu_s": service_cpu,
            "loadavg": {"before": load_before, "after": os.getloadavg()}}


def summarize(args: argparse.Namespace, corpus: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    lat_ms = np.asarray(raw["latencies"]) * 1000
    samples = raw["samples"]
    in_use = [s["pool_size"] - s["pool_available"] for s in samples if s["pool_size"] is not None]
    max_backends = max((s["backends"] for s in samples), default=0)
    max_pool = max((s["pool_size"] or 0 for s in samples), default=0)
    n_err = sum(raw["errors"].values())
    pct = (lambda p: round(float(np.percentile(lat_ms, p)), 2)) if len(lat_ms) else (lambda p: None)
    return {
        "benchmark": "load_http",
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "postgres": corpus["postgres"], "pgvector": corpus["pgvector"],
                    "loadavg_1m_before": round(raw["loadavg"]["before"][0], 2),
                    "loadavg_1m_after": round(raw["loadavg"]["after"][0], 2)},
        "service_cpu_seconds": round(raw["service_cpu_s"], 2),
        "config": {"clients": args.clients, "duration_s": args.duration, "pool_size": args.pool_size,
                   "k": args.k, "mode": args.mode, "shape": args.shape, "payload": args.payload,
                   "distinct_texts": args.payload == "text", "synthetic_sections": args.synthetic,
                   "statements_per_request": 2 if args.shape == "both" else 1,
                   "prefix": args.prefix, "corpus_sections": corpus["sections"],
                   "corpus_documents": corpus["documents"], "host": HOST},
        "requests_ok": int(len(lat_ms)),
        "errors": n_err,
        "error_kinds": dict(raw["errors"]),
        "elapsed_s": round(raw["elapsed"], 3),
        "throughput_rps": round(len(lat_ms) / raw["elapsed"], 2),
        "latency_ms": {"mean": round(float(lat_ms.mean()), 2) if len(lat_ms) else None,
                       "p50": pct(50), "p95": pct(95), "p99": pct(99),
                       "max": round(float(lat_ms.max()), 2) if len(lat_ms) else None},
        "pool": {"size": args.pool_size, "samples": len(samples), "max_backends_pg_stat_activity": max_backends,
                 "max_pool_size_reported": max_pool, "max_in_use": max(in_use, default=0),
                 "max_requests_waiting": max((s["requests_waiting"] or 0 for s in samples), default=0),
                 "within_size": max_backends <= args.pool_size and max_pool <= args.pool_size},
        "server_stats_at_end": raw["server_stats"],
        "samples": samples,
    }


def markdown(res: dict[str, Any]) -> str:
    c, lat, pool = res["config"], res["latency_ms"], res["pool"]
    lines = [
        "# onetrip serve: HTTP load test",
        "",
        f"{res['when']} — `python -m benchmarks.load_http` — {res['machine']['cpus']} CPUs, "
        f"Python {res['machine']['python']}, PostgreSQL {res['machine']['postgres']}, "
        f"pgvector {res['machine']['pgvector']}.",
        "",
        f"{c['clients']} concurrent keep-alive clients for {c['duration_s']:g} s from a second process on "
        f"{c['host']}; `onetrip serve` (uvicorn, one process) with a pool of {c['pool_size']} connections; "
        f"POST /search with a text query (embedded by the service, bundled MiniLM on CPU; each request's "
        f"question made distinct by a number, so none is answered from the embedder's query cache) "
        f"k={c['k']}, mode={c['mode']}, shape={c['shape']} ({c['statements_per_request']} statement(s) per "
        f"request); corpus {c['corpus_sections']} sections in {c['corpus_documents']} documents."
        if c["payload"] == "text" else
        f"{c['clients']} concurrent keep-alive clients for {c['duration_s']:g} s from a second process on "
        f"{c['host']}; pool of {c['pool_size']}; POST /search with a precomputed embedding, k={c['k']}, "
        f"mode={c['mode']}, shape={c['shape']}; corpus {c['corpus_sections']} sections.",
        "",
        "| requests ok | errors | throughput | p50 | p95 | p99 | max |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {res['requests_ok']} | {res['errors']} | {res['throughput_rps']} req/s | {lat['p50']} ms | "
        f"{lat['p95']} ms | {lat['p99']} ms | {lat['max']} ms |",
        "",
        "| pool size | max backends (pg_stat_activity) | max pool_size (psycopg_pool) | max in use | "
        "max requests waiting | within size |",
        "|---:|---:|---:|---:|---:|:---:|",
        f"| {pool['size']} | {pool['max_backends_pg_stat_activity']} | {pool['max_pool_size_reported']} | "
        f"{pool['max_in_use']} | {pool['max_requests_waiting']} | {'yes' if pool['within_size'] else 'NO'} |",
        "",
        f"Pool sampled {pool['samples']} times. Latency is client-side, request sent to response read; "
        "client, service and PostgreSQL share the same CPUs. The service process used "
        f"{res['service_cpu_seconds']} CPU-seconds in {res['elapsed_s']} s; 1-minute load average "
        f"{res['machine']['loadavg_1m_before']} before, {res['machine']['loadavg_1m_after']} after "
        "(other work on the machine shows here).",
    ]
    if res["error_kinds"]:
        lines += ["", "Errors:", *[f"- {n} × {k}" for k, n in res["error_kinds"].items()]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.load_http", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    ap.add_argument("--prefix", default="load_", help="table prefix of the benchmark corpus (its own tables)")
    ap.add_argument("--synthetic", type=nonneg_int, default=20000, help="synthetic sections added to the demo corpus")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    ap.add_argument("--max-requests", type=positive_int, default=1_000_000, help="stop after this many requests")
    ap.add_argument("--pool-size", type=positive_int, default=10)
    ap.add_argument("-k", type=int_range(1, MAX_K), default=5)
    ap.add_argument("--mode", choices=["dense", "lexical", "hybrid"], default="dense")
    ap.add_argument("--shape", choices=["both", "hits", "context"], default="both")
    ap.add_argument("--payload", choices=["text", "embedding"], default="text",
                    help="send question text (the service embeds it) or precomputed embeddings")
    ap.add_argument("--sample-every", type=positive_number, default=0.2, help="pool sampling interval in seconds")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="output folder for load_http.json and load_http.md, as the other benchmarks' --out; "
                         "a path ending in .json names the JSON file (the .md goes beside it)")
    args = ap.parse_args(argv)
    if not 1 <= args.clients <= MAX_CLIENTS:
        ap.error(f"--clients must be from 1 to {MAX_CLIENTS}")
    if not 0 < args.duration <= MAX_DURATION:
        ap.error(f"--duration must be over 0 and at most {MAX_DURATION:g} s")
    if args.payload == "embedding" and args.mode == "lexical":
        ap.error("lexical mode needs text: use --payload text")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from onetrip.connection import resolve_dsn

    dsn = resolve_dsn(args.dsn)
    corpus = prepare_corpus(dsn, args.prefix, args.synthetic)
    port, token = _free_port(), secrets.token_urlsafe(24)
    app_name = f"onetrip-load-{os.getpid()}"
    proc = start_service(args, dsn, port, token, app_name)
    try:
        raw = asyncio.run(run_load(args, f"http://{HOST}:{port}", token, dsn, app_name, proc))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        if proc.returncode not in (0, -signal.SIGINT):
            print(f"onetrip serve exited with {proc.returncode}:\n{stderr}", file=sys.stderr)

    res = summarize(args, corpus, raw)
    out = output_file(args.out, "load_http.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    out.with_suffix(".md").write_text(md)
    print(md)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0 if res["errors"] == 0 and res["pool"]["within_size"] else 1


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.load_http"))
