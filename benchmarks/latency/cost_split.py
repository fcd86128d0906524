"""Where the product query's time over the floor goes: iterative scan, expansion SQL, row mapping.

    python -m benchmarks.latency.cost_split --sizes 10000,1000000

The latency benchmark shows B (Retriever.search: hits + parent + +/-1) costs
0.15-0.4 ms more than A (bare top-K) per call. This splits that difference,
on a direct connection (no proxy: the RTT is the same for both and only hides
the cost) with hot caches, five steps interleaved query by query:

    A       bare top-K, pgvector's session defaults (the latency benchmark's A)
    A_iter  the same statement with the settings Retriever applies per connection
            (hnsw.iterative_scan = relaxed_order, hnsw.max_scan_tuples)
    B_sql   Retriever's statement without those settings, raw tuples
    B_iter  the same with the settings, raw tuples
    B       Retriever.search: statement, settings and mapping to Hit objects

    A_work  A plus a fixed amount of pure server computation (a count over
            generate_series), returning A's rows: a yardstick, not a variant

and reports the medians and three differences: iterative scan
(A_iter - A), expansion in SQL plus the wider result (B_iter - A_iter) and
client-side mapping (B - B_iter). Each query is first run once, untimed, on a
separate connection with A's and B's statements (the latency benchmark's
CacheWarmer), so every step finds its pages in shared_buffers. The
corpora are the latency/scale benchmarks' (synthetic, clustered, 384-d, HNSW
ef_construction 200), loaded if missing.

``--rtt-ms direct,1`` (the default) runs the split twice: on a direct connection
and through the latency benchmark's delay proxy at +1 ms. The second shows what
the latency benchmark's B/A is made of, and A_work - A in both shows whether
the machine inflates server work that follows an idle wait (the same SQL and
rows; on the 2-core VMs used here it ranged from 0.9x to 1.35x at +1 ms
between runs and corpus sizes). Writes benchmarks/results/cost_split.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psycopg

from benchmarks.latency.corpus import bench_layout, ensure_loaded
from benchmarks.latency.delay_proxy import DelayProxyProcess, measure_rtt
from benchmarks.latency.variants import BareTopK, CacheWarmer, OnetripSingle
from onetrip.connection import connect, resolve_dsn
from onetrip.retrieve import Retriever, bind_vector, plan_search, statement_columns
from onetrip.synthetic import corpus_query_vectors, generate
from onetrip.templates import Layout

STEPS = ("A", "A_iter", "B_sql", "B_iter", "B", "A_work")

#: generate_series length of A_work's server-side computation (~0.1-0.2 ms on the machines here)
WORK_ROWS = 2000


def with_server_work(statement: str, rows: int = WORK_ROWS) -> str:
    """The bare top-K statement with ``rows`` steps of pure computation added, same rows returned."""
    head, sep, tail = statement.partition(" FROM ")
    if not sep:
        raise ValueError("expected a SELECT ... FROM statement")
    return f"{head}, (SELECT count(*) FROM generate_series(1, {int(rows)})) AS work FROM {tail}"


def raw_fetch(conn: psycopg.Connection, statement: str, params: Callable[[np.ndarray], dict[str, Any]]):
    """The statement's rows as tuples, nothing mapped: what the server and psycopg cost."""
    def run(q: np.ndarray) -> list[tuple]:
        with conn.cursor() as cur:
            cur.execute(statement, params(q), binary=True)  # as Retriever fetches
            return cur.fetchall()
    return run


def retriever_settings(conn: psycopg.Connection, layout: Layout) -> Retriever:
    """Apply Retriever's per-connection settings to conn: constructing one on it does exactly that."""
    return Retriever(conn, schema=layout.schema, prefix=layout.prefix)


def measure(dsn: str, layout: Layout, queries: np.ndarray, k: int, warmup: int, *,
            warm_dsn: str | None = None) -> dict[str, Any]:
    """Interleaved timings of every step on connections to ``dsn``; ``warm_dsn`` (default ``dsn``) warms."""
    warmer = CacheWarmer(warm_dsn or dsn, layout, k)
    conns = [warmer.conn] + [connect(dsn) for _ in range(6)]
    try:
        a = BareTopK(conns[1], layout, k)
        retriever_settings(conns[2], layout)
        a_iter = BareTopK(conns[2], layout, k)
        plan = plan_search(layout, queries[0], k)

        def params(q: np.ndarray) -> dict[str, Any]:
            return bind_vector(plan, q, layout.dim)

        b_sql = raw_fetch(conns[3], plan.statement, params)
        retriever_settings(conns[4], layout)
        b_iter = raw_fetch(conns[4], plan.statement, params)
        b = OnetripSingle(conns[5], layout, k)
        a_work = BareTopK(conns[6], layout, k)
        a_work.sql = with_server_work(a_work.sql)  # mapped like A, so A_work - A is the server work alone
        run = {"A": a.run, "A_iter": a_iter.run, "B_sql": b_sql, "B_iter": b_iter, "B": b.run, "A_work": a_work.run}

        # The steps must return the same sections, or the split compares different work.
        with conns[0].cursor() as cur:
            cur.execute(plan.statement, params(queries[0]))
            names = statement_columns(plan.statement, cur)
        key = itemgetter(names.index("doc_id"), names.index("section_id"))
        for q in queries[:5]:
            linked = {(s.doc_id, s.section_id) for h in b.run(q)
                      for s in (h.section, h.parent, h.prev, h.next) if s is not None}
            for name in ("B_sql", "B_iter"):
                got = {key(row) for row in run[name](q)}
                if got != linked:
                    raise RuntimeError(f"{name} returned other sections than B: {sorted(got ^ linked)[:5]}")
            bare = {(h.section.doc_id, h.section.section_id) for h in a.run(q)}
            if bare != {(h.section.doc_id, h.section.section_id) for h in a_iter.run(q)}:
                raise RuntimeError("A and A_iter returned different hits")

        times: dict[str, list[float]] = {s: [] for s in STEPS}
        for i, q in enumerate(queries):
            warmer.warm(q)  # A's and B's pages (hits, parents, neighbors) in shared_buffers, as in the latency run
            order = list(STEPS)
            random.shuffle(order)
            for name in order:
                t = time.perf_counter()
                run[name](q)
                dt = (time.perf_counter() - t) * 1000
                if i >= warmup:
                    times[name].append(dt)
        return times
    finally:
        for c in conns:
            c.close()


def summarize(times: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {s: statistics.median(v) for s, v in times.items()}
    return {
        "p50_ms": {s: round(v, 4) for s, v in p50.items()},
        "split_us": {
            "iterative_scan": round((p50["A_iter"] - p50["A"]) * 1000, 1),
            "expansion_sql_and_transfer": round((p50["B_iter"] - p50["A_iter"]) * 1000, 1),
            "mapping_to_hits": round((p50["B"] - p50["B_iter"]) * 1000, 1),
            "iterative_scan_on_B_sql": round((p50["B_iter"] - p50["B_sql"]) * 1000, 1),
            "B_minus_A": round((p50["B"] - p50["A"]) * 1000, 1),
            "server_work_yardstick": round((p50["A_work"] - p50["A"]) * 1000, 1),
        },
    }


def _condition(r: dict[str, Any]) -> str:
    if r.get("added_rtt_ms") is None:
        return "direct"
    return f"+{r['added_rtt_ms']:g} ms (achieved {r['achieved_rtt_ms']:.2f} ms)"


def report(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        f"## Cost split: B (onetrip) over A (bare top-K), k={m['k']}",
        "",
        f"{m['date']}; {m['cores']} cores; {m['server']}; {m['queries']} queries per size and connection, all "
        "steps interleaved per query in random order, hot cache; medians in ms, differences in µs. "
        "`direct`: no proxy; `+d ms`: through benchmarks/latency/delay_proxy.py, as the latency benchmark runs.",
        "",
        "| sections | connection | A | A_iter | B_sql | B_iter | B | A_work | iterative scan (A_iter−A) | "
        "expansion SQL + transfer (B_iter−A_iter) | mapping (B−B_iter) | B−A | server work yardstick (A_work−A) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        p, s = r["p50_ms"], r["split_us"]
        lines.append(
            f"| {r['sections']:,} | {_condition(r)} | " + " | ".join(f"{p[x]:.3f}" for x in STEPS)
            + f" | {s['iterative_scan']:.0f} | {s['expansion_sql_and_transfer']:.0f} | {s['mapping_to_hits']:.0f}"
            f" | {s['B_minus_A']:.0f} | {s['server_work_yardstick']:.0f} |")
    lines += ["", "A_iter and B_iter run with Retriever's per-connection settings (hnsw.iterative_scan = "
              "relaxed_order, hnsw.max_scan_tuples); A and B_sql with pgvector's defaults. A_work is A plus "
              f"a count over generate_series(1, {WORK_ROWS}) on the server, the same rows mapped the same way: "
              "the same server work costs what that column shows on each connection, so its ratio between "
              "a proxied and the direct row is how much this machine inflates server time after an idle wait. "
              "Differences of medians are not medians of differences: read them to ±10 µs.", ""]
    return "\n".join(lines)


def measure_condition(dsn: str, layout: Layout, queries: np.ndarray, args: argparse.Namespace,
                      added_rtt_ms: float | None) -> dict[str, Any]:
    """One split on a direct connection (None) or through the delay proxy at +added_rtt_ms."""
    if added_rtt_ms is None:
        times = measure(dsn, layout, queries, args.k, args.warmup)
        rtt: dict[str, Any] = {}
    else:
        with DelayProxyProcess.from_dsn(dsn, added_rtt_ms) as proxy:
            pdsn = proxy.dsn(dsn)
            rtt = {"achieved_rtt_ms": round(measure_rtt(pdsn, 200)["median_ms"], 4)}
            times = measure(pdsn, layout, queries, args.k, args.warmup, warm_dsn=dsn)
    return {**rtt, **summarize(times), "raw_ms": {s: [round(t, 4) for t in v] for s, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=800)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--rtt-ms", default="direct,1",
                    help="comma list: 'direct' and/or added RTTs in ms through the delay proxy")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    conditions = [None if c.strip() == "direct" else float(c) for c in args.rtt_ms.split(",")]

    dsn = resolve_dsn(args.dsn)
    results = []
    with connect(dsn) as conn:
        server = conn.execute("SELECT current_setting('server_version'), "
                              "(SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
        for n in (int(x) for x in args.sizes.split(",")):
            layout = bench_layout(n, args.seed, hnsw_ef_construction=args.ef_construction)
            docs = list(generate(n, dim=384, seed=args.seed))
            ensure_loaded(conn, docs, layout, log=print)
            queries = corpus_query_vectors(docs, args.queries + args.warmup, seed=args.seed + 11)
            del docs
            for added in conditions:
                r = {"sections": n, "added_rtt_ms": added, **measure_condition(dsn, layout, queries, args, added)}
                print(f"[{n}, {_condition(r)}] p50 ms " + ", ".join(f"{s} {v:.3f}" for s, v in r["p50_ms"].items())
                      + f"; split µs {r['split_us']}")
                results.append(r)
    doc = {"meta": {"k": args.k, "queries": args.queries, "warmup": args.warmup,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(),
                    "server": f"PostgreSQL {server[0]}, pgvector {server[1]}",
                    "ef_construction": args.ef_construction, "work_rows": WORK_ROWS},
           "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cost_split.json").write_text(json.dumps(doc, indent=1))
    md = report(doc)
    (out / "cost_split.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
