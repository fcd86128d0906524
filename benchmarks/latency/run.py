"""Latency benchmark: one statement (onetrip) vs multi-call retrieval, under added network RTT.

    python -m benchmarks.latency.run --sizes 10000,100000 --k 10 --rtts 0,0.5,1,2,5 --queries 200

For each corpus size: generate the synthetic clustered corpus (or reuse one
already loaded for this size and seed), put a TCP delay proxy in front of the
server, and for each added RTT level measure the achieved RTT (SELECT 1), warm
up, then run every variant on every query, interleaved in a fresh random order
per query. B, C, C2 and D must return identical content for every query run,
or the run fails (exit 1). Statements per query are counted at the server from
its ``log_statement = all`` log, on separate connections, so logging never
slows the timed connections.

Writes, per size, to --out: ``latency_n<size>_k<k>.json`` (every raw timing +
metadata), ``.md`` (the tables, also printed) and ``.png`` (p50 vs added RTT). The name
does not carry ``--hnsw-ef-construction`` (a run with another value replaces the file); the
table's first paragraph and the JSON's ``corpus`` say which index was timed.
See benchmarks/latency/variants.py for what A..E do.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector

from onetrip.connection import connect, resolve_dsn
from onetrip.retrieve import bare_hits, column_names, hits_from_rows

from ..args import (
    choice_list, ef_construction, memory_size_or_auto, nonneg_int, output_folder, positive_int, rtts as _rtts, run_cli,
    sizes as _sizes,
)
from ..quality.metrics import question_texts
from ..versions import server_versions
from . import corpus as corpus_mod
from . import report
from .delay_proxy import DelayProxy, DelayProxyProcess, measure_rtt, proxied_dsn, upstream_from_dsn
from .variants import (
    ROUND_TRIPS, VARIANT_LABELS, CacheWarmer, OnetripSingle, build_variants, diff_hits, has_revision, hit_ids, related_ids,
    topk_sql,
)

DEFAULT_RTTS = (0.0, 0.5, 1.0, 2.0, 5.0)
MULTI_CALL = ("C", "C2", "D")  # compared with B for identical content
PRIME_RUNS = 7  # > psycopg's prepare_threshold (5): counted queries run prepared, as timed ones do


EXTRA_VARIANTS = ("F", "Af", "G", "H")


def extra_variants(text: str) -> list[str]:
    """--extra: names among EXTRA_VARIANTS, no repeats, or '' for none (an unknown name had failed with a KeyError
    after the corpus load, and F,F timed F twice per query into one list)."""
    return choice_list(EXTRA_VARIANTS)(text) if text.strip() else []


def log(msg: str) -> None:
    print(msg, flush=True)


# -- CLI ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.latency.run",
        description="Latency of onetrip's one-statement retrieval vs multi-call retrieval under added network RTT.",
    )
    ap.add_argument("--dsn", help="PostgreSQL DSN (default: onetrip's resolve_dsn(): $ONETRIP_DSN or the embedded server)")
    ap.add_argument("--sizes", type=_sizes, default=[10_000],
                    help="corpora: synthetic sizes in sections (10000,100000 or 10k,1m) and/or 'manual' "
                         "(the ingested PostgreSQL 15 manual, see --manual-prefix; default 10000). Below about "
                         "2,500 sections PostgreSQL rightly reads the table whole rather than the HNSW index, so "
                         "A and B there measure a sequential scan: use such sizes for smoke runs only")
    ap.add_argument("--manual-prefix", default=corpus_mod.MANUAL_PREFIX,
                    help="table prefix of the ingested manual (default pg15_, as benchmarks.ingest_manual uses)")
    ap.add_argument("--questions", type=Path, default=Path("../shared/eval/pgdocs_tuning.jsonl"),
                    help="manual corpus: JSONL of questions used as the first queries (heading questions fill up; "
                         "default ../shared/eval/pgdocs_tuning.jsonl)")
    ap.add_argument("--k", type=positive_int, default=10, help="top-K (default 10)")
    ap.add_argument("--rtts", type=_rtts, default=list(DEFAULT_RTTS), help="added RTT levels in ms (default 0,0.5,1,2,5)")
    ap.add_argument("--queries", type=positive_int, default=200, help="timed queries per RTT level (default 200)")
    ap.add_argument("--warmup", type=nonneg_int, default=20, help="warm-up queries per RTT level, every variant (default 20)")
    ap.add_argument("--out", type=output_folder, default="benchmarks/results",
                    help="output folder (default benchmarks/results)")
    ap.add_argument("--skip-e", action="store_true", help="skip variant E (LlamaIndex)")
    ap.add_argument("--extra", type=extra_variants, default="F,Af,G,H",
                    help="extra onetrip variants timed in the same interleaved run: F assembled, Af/G filtered, "
                         "H hybrid (default: all; '' for none)")
    ap.add_argument("--e-queries", type=positive_int, default=None,
                    help="run E on only the first N queries of each level (--skip-e: none)")
    ap.add_argument("--hnsw-ef-construction", type=ef_construction, default=None,
                    help="HNSW ef_construction of the corpus tables (default: pgvector's 64; the scale "
                         "benchmark builds with 200, and --hnsw-ef-construction 200 reuses its tables)")
    ap.add_argument("--seed", type=int, default=0, help="corpus, query and ordering seed (default 0)")
    ap.add_argument("--dim", type=positive_int, default=corpus_mod.DEFAULT_DIM, help="embedding dimension (default 384)")
    ap.add_argument("--count-queries", type=positive_int, default=10, help="queries per variant in the statement-count pass (default 10)")
    ap.add_argument("--rtt-samples", type=positive_int, default=200, help="SELECT 1 pings per RTT measurement (default 200)")
    ap.add_argument("--diag-queries", type=nonneg_int, default=30,
                    help="queries for the A-vs-B cost breakdown (EXPLAIN ANALYZE, result size, mapping cost) on a "
                         "direct connection, at most 30 (0: skip; default 30)")
    ap.add_argument("--maintenance-work-mem", type=memory_size_or_auto, default="auto",
                    help="for the HNSW builds (default auto: sized to the corpus, 256MB..8GB)")
    ap.add_argument("--only-diagnostics", action="store_true",
                    help="skip the timed levels: only the A-vs-B breakdown, on a direct connection "
                         "(writes diagnostics_n<size>_k<k>.json/.md)")
    ap.add_argument("--reload", action="store_true",
                    help="load the corpora (and LlamaIndex's tables) again even when already loaded")
    ap.add_argument("--proxy", choices=("process", "thread"), default="process",
                    help="run the delay proxy in a child process (default) or a thread of this process")
    ap.add_argument("--statement-log", type=Path, default=None,
                    help="server log file to count statements in (default: found from the server)")
    return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.statement_log is not None and not args.statement_log.is_file():  # given: a typo is not "counting
        ap.error(f"--statement-log {args.statement_log}: no such file")  # unavailable" in a run that exits 0
    if corpus_mod.MANUAL in args.sizes and args.questions and args.questions.is_file():
        try:  # read again by load_corpus; a malformed line had been a traceback after the earlier sizes ran
            question_texts(args.questions)
        except ValueError as e:
            ap.error(str(e))
    return args


def auto_maintenance_work_mem(n: int, dim: int) -> str:
    """Enough for pgvector to build the HNSW graph in memory (vectors + neighbor lists)."""
    need_mb = n * (dim * 4 + 16 * 2 * 8 + 200) * 2.0 / 2**20
    mb = int(min(8192, max(256, 2 ** math.ceil(math.log2(max(need_mb, 1))))))
    return f"{mb}MB"


# -- statement counting at the server ------------------------------------------------------------

_LOG_LINE = re.compile(r"\[(\d+)\][^\n]*?\bLOG:  (statement|execute [^:]*): (.*)$")


class ServerLog:
    """Statements per backend pid from a server log written with log_statement = all."""

    def __init__(self, path: Path, settle_s: float = 0.0) -> None:
        self.path = path
        self.settle_s = settle_s  # with logging_collector on, lines reach the file a little later

    def mark(self) -> int:
        return self.path.stat().st_size

    def since(self, mark: int, pids: set[int]) -> list[str]:
        if self.settle_s:
            time.sleep(self.settle_s)
        with self.path.open("rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", "replace")
        out = []
        for line in text.splitlines():
            m = _LOG_LINE.search(line)
            if m and int(m.group(1)) in pids:
                out.append(m.group(3))
        return out


def find_server_log(conn: psycopg.Connection, override: Path | None) -> tuple[ServerLog | None, str | None]:
    """The server's log file, when this process can read it; else (None, why)."""
    if override is not None:
        return (ServerLog(override), None) if override.is_file() else (None, f"{override} is not a file")
    try:
        datadir = conn.execute("SHOW data_directory").fetchone()[0]
        current = conn.execute("SELECT pg_current_logfile()").fetchone()[0]
        collector = conn.execute("SHOW logging_collector").fetchone()[0] == "on"
    except psycopg.Error as e:
        return None, f"cannot locate the server log ({type(e).__name__}: {e}); pass --statement-log"
    candidates = []
    if current:
        candidates.append(Path(current) if os.path.isabs(current) else Path(datadir) / current)
    candidates.append(Path(datadir) / "log")  # pgserver: pg_ctl -l <pgdata>/log
    for c in candidates:
        if c.is_file() and os.access(c, os.R_OK):
            return ServerLog(c, 0.1 if collector else 0.0), None
    return None, f"no readable server log at {', '.join(map(str, candidates))}; pass --statement-log"


def _statement_kind(text: str) -> str:
    words = text.strip().split()
    if not words:
        return "?"
    w = words[0].upper()
    if w == "SET" and len(words) > 2 and words[1].upper() == "LOCAL":
        return "SET LOCAL"
    return w


def count_statements(
    pdsn: str, layout: Any, k: int, names: list[str], vectors: np.ndarray, server_log: ServerLog,
    admin: psycopg.Connection, e_factory: Any | None,
) -> dict[str, Any]:
    """Per-query statement counts for each variant, on separate logging connections."""
    out: dict[str, Any] = {}
    prime, counted = vectors[:PRIME_RUNS], vectors[PRIME_RUNS:]
    md_names = [n for n in names if n != "E"]
    cvariants: dict[str, Any] = build_variants(pdsn, layout, k, names=md_names, log_statements=True, tag="-count")
    if "E" in names and e_factory is not None:
        cvariants["E"] = e_factory(application_name="onetrip-bench-E-count", log_statements=True)
    try:
        for name, v in cvariants.items():
            for vec in prime:
                v.run(vec)
            if name == "E":
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (v.application_name,)
                ).fetchall()
                pids = {r[0] for r in rows}
                conn_ok = True
            else:
                pids = set(v.backend_pids())
                conn_ok = v.conn.execute("SHOW log_statement").fetchone()[0] == "all"
            if not conn_ok:
                return {"unavailable": "log_statement could not be set to 'all' for the counting connections"}
            per_query, expected, kinds = [], [], collections.Counter()
            example: list[str] = []
            for vec in counted:
                mark = server_log.mark()
                r = v.run(vec)
                stmts = server_log.since(mark, pids)
                per_query.append(len(stmts))
                expected.append(v.expected_statements(r) if name != "E" else None)
                kinds.update(_statement_kind(s) for s in stmts)
                if not example:
                    example = [s[:160] for s in stmts]
            out[name] = {
                "per_query": per_query, "expected": expected, "kinds": dict(kinds.most_common()),
                "example_query_statements": example, "pids": sorted(pids),
            }
    finally:
        for v in cvariants.values():
            v.close()
    return {"variants": out}


# -- cost breakdown of B over A -------------------------------------------------------------------


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def library_statement(dsn: str, layout: Any, k: int, vec: np.ndarray) -> tuple[str, dict[str, Any]]:
    """The SQL text and settings of B: what ``Retriever.search`` sends, captured on a side connection.

    Captured rather than re-rendered, so the diagnostics test exactly the statement the
    benchmark timed, whatever options the library's search passes to its template.
    """
    seen: list[Any] = []

    class Recording(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            seen.append(query)
            return super().execute(query, params, **kw)

    with connect(dsn) as c:
        c.cursor_factory = Recording
        b = OnetripSingle(c, layout, k)
        b.run(vec)
        settings = dict(getattr(b.retriever, "settings", {}) or {})
    query = seen[-1]
    return (query if isinstance(query, str) else query.as_string(None)), settings


def diagnostics(dsn: str, layout: Any, k: int, vectors: np.ndarray) -> dict[str, Any]:
    """Server planning/execution (EXPLAIN ANALYZE), result bytes, fetch and mapping time of A and B."""
    conn = connect(dsn)
    try:
        b_sql, _ = library_statement(dsn, layout, k, vectors[0])
        sqls = {
            "A": (topk_sql(layout, k, revision=has_revision(conn, layout)), "q", False),
            "B": (b_sql, "query_embedding", True),
            # Not a benchmark variant: B's statement with k written into the SQL text instead of
            # bound, to test whether PostgreSQL's plan cache can then reuse a generic plan.
            "B_literal_k": (b_sql.replace("%(k)s", str(int(k))), "query_embedding", False),
        }
        out: dict[str, Any] = {"n": len(vectors)}
        for name, (sql, qname, bind_k) in sqls.items():
            plan_ms, exec_ms, nbytes, fetch_ms, map_ms = [], [], [], [], []
            with connect(dsn) as own:  # own connection: its own prepared-statement counters
                for vec in vectors:
                    params: dict[str, Any] = {qname: Vector(vec)}
                    if bind_k:
                        params["k"] = k
                    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0][0]
                    plan_ms.append(plan["Planning Time"])
                    exec_ms.append(plan["Execution Time"])
                    with own.cursor() as cur:
                        for _ in range(PRIME_RUNS):  # steady state: prepared, as in the timed run
                            cur.execute(sql, params)
                            cur.fetchall()
                        t0 = time.perf_counter()
                        cur.execute(sql, params)
                        rows = cur.fetchall()
                        fetch_ms.append((time.perf_counter() - t0) * 1000)
                        res = cur.pgresult
                        assert res is not None
                        nbytes.append(sum(len(res.get_value(r, c) or b"")
                                          for r in range(res.ntuples) for c in range(res.nfields)))
                        names = column_names(cur)
                    reps = 20
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        if name != "A":  # B's shape: each section once, linked into Hits
                            hits_from_rows(names, rows)
                        else:
                            bare_hits(names, rows)
                    map_ms.append((time.perf_counter() - t0) * 1000 / reps)
                plans = own.execute(
                    "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements "
                    "WHERE statement NOT LIKE '%%pg_type%%'"
                ).fetchone()
            out[name] = {
                "planning_ms": _median(plan_ms), "execution_ms": _median(exec_ms), "result_bytes": _median(nbytes),
                "fetch_ms": _median(fetch_ms), "map_ms": _median(map_ms),
                "generic_plans": int(plans[0] or 0), "custom_plans": int(plans[1] or 0),
            }
        return out
    finally:
        conn.close()


def _versions(conn: psycopg.Connection) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def pkg(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        **server_versions(conn),
        "psycopg": psycopg.__version__,
        "libpq": str(psycopg.pq.version()),
        "pgvector-python": pkg("pgvector"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _server_settings(conn: psycopg.Connection) -> dict[str, str]:
    out = {}
    conn.execute("SELECT '[1]'::vector")  # loads pgvector in this session, so its hnsw.* settings exist
    for s in ("shared_buffers", "work_mem", "effective_cache_size", "jit", "max_parallel_maintenance_workers",
              "max_parallel_workers_per_gather", "plan_cache_mode", "hnsw.ef_search", "hnsw.iterative_scan"):
        try:
            out[s] = conn.execute(f"SHOW {s}").fetchone()[0]
        except psycopg.Error:
            out[s] = "?"
    return out


def _git_state() -> dict[str, Any]:
    """The commit, and which library files differ from it (the run used the working tree)."""
    root = Path(__file__).resolve().parents[2]
    out: dict[str, Any] = {"commit": None, "modified": None}
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        out["commit"] = r.stdout.strip() or None
        r = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src", "sql"],
                           capture_output=True, text=True, timeout=5)
        out["modified"] = [line[3:] for line in r.stdout.splitlines()]
    except Exception:
        pass
    return out


def _machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "platform": platform.platform()}


def result_name(n: int | str) -> str:
    """latency_n10000_k10.json for a synthetic corpus, latency_manual_k10.json for the manual."""
    return corpus_mod.MANUAL if n == corpus_mod.MANUAL else f"n{n}"


class _Proxy:
    """The delay proxy, thread or child process, with the calls the benchmark needs."""

    def __init__(self, dsn: str, mode: str) -> None:
        up = upstream_from_dsn(dsn)
        self.mode = mode
        self.impl = (DelayProxyProcess(up) if mode == "process" else DelayProxy(up)).start()
        self.dsn = proxied_dsn(dsn, self.impl.host, self.impl.port)

    def set_delay_ms(self, d: float) -> None:
        self.impl.set_delay_ms(d)

    def lateness(self) -> dict[str, float]:
        return dict(self.impl.lateness_stats())

    def stop(self) -> None:
        self.impl.stop()


def corpus_label(n: int | str) -> str:
    return "the PostgreSQL 15 manual" if n == corpus_mod.MANUAL else f"{n:,} synthetic sections"


def load_corpus(
    args: argparse.Namespace, dsn: str, n: int | str, count: int,
) -> tuple[list[Any], np.ndarray, dict[str, Any] | None]:
    """The corpus's documents, ``count`` query vectors (synthetic, or the ingested manual) and, for the
    manual, where its queries came from (the result records it: a missing --questions file changes them)."""
    if n != corpus_mod.MANUAL:
        docs = corpus_mod.generate_corpus(n, args.seed, args.dim)
        return docs, corpus_mod.query_set(docs, count, args.seed), None
    with connect(dsn) as conn:
        docs = corpus_mod.manual_corpus(conn, args.manual_prefix)
    questions: list[str] = []
    found = bool(args.questions and args.questions.is_file())
    if found:
        questions = question_texts(args.questions)
    elif args.questions:
        log(f"  --questions {args.questions}: no such file; the manual's queries are all heading questions")
    used = min(len(questions), count)
    info = {"questions_file": str(args.questions) if args.questions else None, "found": found,
            "from_file": used, "from_headings": count - used}
    return docs, corpus_mod.manual_queries(docs, count, args.seed, questions), info


def run_size(args: argparse.Namespace, dsn: str, n: int | str, meta: dict[str, Any], e_error: str | None) -> tuple[dict[str, Any], bool]:
    """Benchmark one corpus; returns (result document, content check passed)."""
    k, seed, dim = args.k, args.seed, args.dim
    q, w, c = args.queries, args.warmup, args.count_queries
    log(f"\n=== corpus: {corpus_label(n)}, k={k} ===")
    t0 = time.perf_counter()
    docs, vectors, queries_info = load_corpus(args, dsn, n, q + w + PRIME_RUNS + c)
    n_sections = sum(len(d.sections) for d in docs)
    log(f"  {n_sections:,} sections in {len(docs):,} documents ({time.perf_counter() - t0:.1f} s)")
    timed_vecs, warm_vecs, count_vecs = vectors[:q], vectors[q:q + w], vectors[q + w:]
    layout = corpus_mod.bench_layout(n, seed, dim, **({"hnsw_ef_construction": args.hnsw_ef_construction}
                                                      if args.hnsw_ef_construction else {}))
    mwm = auto_maintenance_work_mem(n_sections, dim) if args.maintenance_work_mem == "auto" else args.maintenance_work_mem
    use_e = not args.skip_e and e_error is None and not args.only_diagnostics
    direct = connect(dsn)
    e_load: dict[str, Any] | None = None
    try:
        load = corpus_mod.ensure_loaded(direct, docs, layout, maintenance_work_mem=mwm, reload=args.reload, log=log)
        if use_e:
            from . import llamaindex_peer

            try:
                e_load = llamaindex_peer.ensure_loaded(
                    dsn, direct, docs, n, seed, dim, maintenance_work_mem=mwm, reload=args.reload, log=log)
            except Exception as ex:  # keep A..D going; say exactly why E did not run
                e_error = f"loading LlamaIndex tables failed: {type(ex).__name__}: {ex}"
                log(f"  E disabled: {e_error}")
                use_e = False
        n_docs = len(docs)
    finally:
        direct.close()
    del docs
    gc.collect()
    gc.freeze()  # keep the collector from walking long-lived objects during timed runs

    corpus_info = {"corpus": corpus_mod.corpus_tag(n), "sections": n_sections, "documents": n_docs, "seed": seed, "dim": dim, "layout_prefix": layout.prefix,
                   "hnsw_m": layout.hnsw_m, "hnsw_ef_construction": layout.hnsw_ef_construction,
                   "load": load.as_dict(), **({"queries": queries_info} if queries_info else {})}
    if args.only_diagnostics:
        return run_diagnostics_only(args, dsn, layout, meta, corpus_info, timed_vecs)

    names = ["A", "B", "C", "C2", "D"] + args.extra + (["E"] if use_e else [])
    doc: dict[str, Any] = {
        "meta": meta,
        "corpus": corpus_info,
        "e_load": e_load,
        "e_error": e_error if not args.skip_e else "skipped (--skip-e)",
        "queries_per_level": q,
        "warmup_per_level": w,
        "e_queries_per_level": min(args.e_queries or q, q) if use_e else None,
        "variants": {v: {"label": VARIANT_LABELS[v],
                         "round_trips": ROUND_TRIPS.get(v, "one per statement (psycopg2, no pipelining)")}
                     for v in names},
        "levels": [],
    }

    proxy = _Proxy(dsn, args.proxy)
    variants: dict[str, Any] = {}
    admin = connect(dsn)
    ok = True
    mismatches: list[dict[str, Any]] = []
    compared = identical = 0
    overlaps: list[float] = []
    rel_equal = rel_total = 0
    try:
        pdsn = proxy.dsn
        variants = build_variants(pdsn, layout, k, names=[n for n in names if n != "E"])
        e_factory = None
        if use_e:
            from . import llamaindex_peer

            def e_factory(**kw: Any) -> Any:
                return llamaindex_peer.LlamaIndexPeer(pdsn, n, seed, dim, k, **kw)

            try:
                variants["E"] = e_factory()
                variants["E"].run(warm_vecs[0] if len(warm_vecs) else timed_vecs[0])
            except Exception as ex:
                doc["e_error"] = f"LlamaIndex peer failed: {type(ex).__name__}: {ex}"
                log(f"  E disabled: {doc['e_error']}")
                variants.pop("E", None)
                names.remove("E")
                doc["variants"].pop("E", None)
                use_e = False
                e_factory = None

        b_sql, b_settings = library_statement(dsn, layout, k, count_vecs[0])
        doc["variants"]["B"]["sql"] = b_sql
        doc["variants"]["B"]["retriever_session_settings"] = b_settings
        doc["variants"]["A"]["sql"] = variants["A"].sql

        # Statement counts (separate connections with log_statement=all, at 0 added RTT).
        proxy.set_delay_ms(0.0)
        server_log, why = find_server_log(admin, args.statement_log)
        if server_log is None or c < 1:
            doc["statement_counts"] = {"unavailable": why or "--count-queries 0"}
        else:
            try:
                doc["statement_counts"] = count_statements(
                    pdsn, layout, k, names, count_vecs, server_log, admin, e_factory)
            except psycopg.errors.InsufficientPrivilege as ex:
                doc["statement_counts"] = {"unavailable": f"log_statement needs superuser: {ex}"}
        counts = doc["statement_counts"].get("variants", {})
        for name, cnt in counts.items():
            if name != "E" and cnt["per_query"] != cnt["expected"]:
                ok = False
                log(f"  STATEMENT COUNT MISMATCH {name}: server {cnt['per_query']} != client {cnt['expected']}")
        for name in names:
            if name in counts:
                log(f"  statements/query {name}: {counts[name]['per_query']}")

        rng = random.Random(seed)
        e_limit = doc["e_queries_per_level"] or 0
        peer_table = None
        if "E" in variants:
            from . import llamaindex_peer

            peer_table = llamaindex_peer.peer_tables(n, seed).vector_table
        warmer = CacheWarmer(dsn, layout, k, peer_table, hybrid="H" in names)
        doc["hot_cache"] = ("before its timed runs each query is run once, untimed, on a direct connection by A's and "
                            "B's statements" + (", H's hybrid search" if "H" in names else "")
                            + (" and by a vector search on E's table" if peer_table else ""))
        for d in args.rtts:
            proxy.set_delay_ms(d)
            gc.collect()
            rtt = measure_rtt(pdsn, args.rtt_samples, direct=dsn)
            log(f"  added RTT {d:g} ms: SELECT 1 p50 {rtt['median_ms']:.3f} ms via proxy "
                f"({rtt['direct_median_ms']:.3f} ms direct, +{rtt['added_median_ms']:.3f})")
            for vec in warm_vecs:
                order = names[:]
                rng.shuffle(order)
                for name in order:
                    variants[name].run(vec)
            proxy.lateness()  # reset: report the timed part only
            load_start = os.getloadavg()
            raw: dict[str, list[float | None]] = {v: [] for v in names}
            order_log: list[list[str]] = []
            t_level = time.perf_counter()
            for i, vec in enumerate(timed_vecs):
                order = [v for v in names if v != "E" or i < e_limit]
                rng.shuffle(order)
                order_log.append(order)
                warmer.warm(vec)  # untimed, direct: every variant then runs on a hot cache
                results: dict[str, Any] = {}
                for name in order:
                    fn = variants[name].run
                    t0 = time.perf_counter_ns()
                    results[name] = fn(vec)
                    raw[name].append((time.perf_counter_ns() - t0) / 1e6)
                # content checks, outside the timed region
                compared += 1
                bad = False
                for name in MULTI_CALL:
                    diff = diff_hits(results["B"], results[name])
                    if diff is not None:
                        bad = True
                        if len(mismatches) < 50:
                            mismatches.append({"rtt_ms": d, "query": i, "variant": name, "diff": diff})
                # A returns exact distance ties in index order; B breaks them by (doc_id, sequence_index)
                a_sorted = sorted(results["A"], key=lambda h: (h.distance, h.section.doc_id, h.section.sequence_index))
                a_ids, b_ids = hit_ids(a_sorted), hit_ids(results["B"])
                if a_ids != b_ids:
                    bad = True
                    if len(mismatches) < 50:
                        mismatches.append({"rtt_ms": d, "query": i, "variant": "A", "diff": "A's hits differ from B's"})
                identical += not bad
                if "E" in results:
                    ans = variants["E"].answer(results["E"])
                    common = set(b_ids) & set(ans.hit_ids)
                    overlaps.append(len(common) / max(1, len(b_ids)))
                    brel = related_ids(results["B"])
                    for h in common:
                        rel_total += 1
                        rel_equal += brel[h] == ans.related.get(h)
            elapsed = time.perf_counter() - t_level
            lateness = proxy.lateness()
            stats = {v: report.summarize([x for x in raw[v] if x is not None]) for v in names if raw[v]}
            level = {
                "added_rtt_ms": d, "rtt": rtt, "proxy_lateness_us": lateness, "elapsed_s": elapsed,
                # other work on this machine during the level (1/5/15-min load averages; 2 cores)
                "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                "raw_ms": raw, "order": order_log, "stats": stats,
            }
            level["ratios"] = report.ratios(level)
            doc["levels"].append(level)
            log("    " + "  ".join(f"{v} p50 {stats[v]['p50']:.2f}" for v in names if v in stats)
                + f"   B/A {level['ratios']['B/A']['p50']:.3f}  ({elapsed:.0f} s)")

        if args.diag_queries > 0:
            log("  diagnostics: EXPLAIN ANALYZE, result size, mapping cost (direct connection)")
            doc["diagnostics"] = diagnostics(dsn, layout, k, timed_vecs[: min(30, args.diag_queries)])
            prepared = []
            for name in ("A", "B", "C", "D"):
                rows = variants[name].conn.execute(
                    "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements "
                    "WHERE statement NOT LIKE '%%pg_type%%' ORDER BY prepare_time"
                ).fetchall()
                for g, cst, stmt in rows:
                    prepared.append({"variant": name, "generic_plans": g, "custom_plans": cst, "statement": stmt[:120]})
            doc["diagnostics"]["prepared"] = prepared
    finally:
        for v in variants.values():
            try:
                v.close()
            except Exception:
                pass
        admin.close()
        proxy.stop()
        gc.unfreeze()

    doc["checks"] = {
        "compared_queries": compared,
        "identical_queries": identical,
        "mismatches": mismatches,
        "e_overlap": {
            "queries": len(overlaps),
            "mean_overlap": statistics.fmean(overlaps) if overlaps else None,
            "min_overlap": min(overlaps) if overlaps else None,
            "related_equal_fraction": rel_equal / rel_total if rel_total else None,
        } if overlaps else None,
    }
    if mismatches:
        ok = False
        log(f"  CONTENT MISMATCH in {compared - identical} of {compared} query runs; first: {mismatches[0]}")
    return doc, ok


def run_diagnostics_only(
    args: argparse.Namespace, dsn: str, layout: Any, meta: dict[str, Any], corpus_info: dict[str, Any],
    timed_vecs: np.ndarray,
) -> tuple[dict[str, Any], bool]:
    """--only-diagnostics: the A-vs-B breakdown (server plan and execution, size, mapping), no timed levels."""
    n_diag = max(1, min(args.diag_queries or len(timed_vecs), len(timed_vecs), 30))
    log(f"  diagnostics only: EXPLAIN ANALYZE etc. on {n_diag} queries")
    try:
        diag = diagnostics(dsn, layout, args.k, timed_vecs[:n_diag])
    finally:
        gc.unfreeze()
    return {"kind": "diagnostics", "meta": meta, "corpus": corpus_info, "diagnostics": diag}, True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    if corpus_mod.MANUAL in args.sizes:  # before any corpus runs or --out is created
        with connect(dsn) as conn:
            why = corpus_mod.manual_missing(conn, args.manual_prefix)
        if why:
            build_parser().error(why)
    e_error: str | None = None
    if not args.skip_e:
        from . import llamaindex_peer

        e_error = llamaindex_peer.available()
        if e_error:
            log(f"E (LlamaIndex) unavailable: {e_error}; running A..D only")
    with connect(dsn) as conn:
        versions = _versions(conn)
        settings = _server_settings(conn)
        prepare_threshold = conn.prepare_threshold
    if not args.skip_e and e_error is None:
        from . import llamaindex_peer

        versions.update(llamaindex_peer.versions())
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "k": args.k,
        "rtts_ms": args.rtts,
        "seed": args.seed,
        "machine": {**_machine(), "loadavg_at_start": os.getloadavg()},
        "versions": versions,
        "server": settings,
        "prepare_threshold": prepare_threshold,
        "proxy": f"benchmarks.latency.delay_proxy ({args.proxy}), TCP on 127.0.0.1 in front of the server",
        "argv": sys.argv[1:] if argv is None else list(argv),
        "git": _git_state(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    all_ok = True
    reports = []
    for n in args.sizes:
        doc, ok = run_size(args, dsn, n, meta, e_error)
        all_ok &= ok
        if args.only_diagnostics:
            stem = args.out / f"diagnostics_{result_name(n)}_k{args.k}"
            md = report.diagnostics_document_markdown(doc)
        else:
            stem = args.out / f"latency_{result_name(n)}_k{args.k}"
            md = report.markdown(doc)
            report.plot(doc, stem.with_suffix(".png"))
        stem.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        stem.with_suffix(".md").write_text(md)
        reports.append(md)
        log(f"  wrote {stem}.json, .md" + ("" if args.only_diagnostics else ", .png"))
    print()
    print("\n".join(reports))
    if not all_ok:
        print("FAILED: variants disagree (content or statement counts); see the messages above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.latency.run"))
