"""Where B's and F's time over the floor goes: iterative scan, result size, expansion SQL, row mapping.

    python -m benchmarks.latency.cost_split --sizes 10000,100000,1000000

The latency benchmark shows B (Retriever.search: hits + parent + +/-1) costs
0.15-0.4 ms more than A (bare top-K) per call. This splits that difference,
on a direct connection (no proxy: the RTT is the same for both and only hides
the cost) with hot caches, nine steps interleaved query by query:

    A       bare top-K, pgvector's session defaults (the latency benchmark's A)
    A_iter  the same statement with the settings Retriever applies per connection
            (hnsw.iterative_scan = relaxed_order, hnsw.max_scan_tuples)
    B_sql   Retriever's statement without those settings, raw tuples
    B_iter  the same with the settings, raw tuples
    B       Retriever.search: statement, settings and mapping to Hit objects
    F_iter  the assembled-context statement (parent + +/-1, 2,000-token budget;
            the latency benchmark's F) with the settings, raw tuples
    F       Retriever.assemble: that statement and mapping to a Context

    A_work  A plus a fixed amount of pure server computation (a count over
            generate_series), returning A's rows: a yardstick, not a variant
    A_bytes A_iter with each hit's content padded so the result is as large
            (in bytes on the wire) as B_iter's on average: what B's wider
            result costs alone (a yardstick, not a variant)

and reports the medians and their differences: iterative scan (A_iter - A),
the wider result (A_bytes - A_iter), the expansion work itself (B_iter -
A_bytes) and client-side mapping (B - B_iter); for the assembled context, its
statement (F_iter - A_iter) and mapping (F - F_iter). Each query is first run once, untimed, on a
separate connection with A's and B's statements (the latency benchmark's
CacheWarmer), so every step finds its pages in shared_buffers. The
corpora are the latency/scale benchmarks' (synthetic, clustered, 384-d, HNSW
ef_construction 200), loaded if missing.

``--rtt-ms direct,1`` (the default) runs the split twice: on a direct connection
and through the latency benchmark's delay proxy at +1 ms. The second shows what
the latency benchmark's B/A is made of, and A_work - A in both shows whether
the machine inflates server work that follows an idle wait (the same SQL and
rows; on the 2-core VMs used here it ranged from 0.9x to 1.6x at +1 ms
between runs and corpus sizes). Writes cost_split.{json,md} to --out
(default benchmarks/results).
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

from benchmarks.args import (
    HelpFormatter, run_cli, ef_construction, int_range, nonneg_int, output_folder, positive_int, rtts_or_direct,
    synthetic_sizes,
)
from benchmarks.latency.corpus import bench_layout, ensure_loaded
from benchmarks.latency.delay_proxy import DelayProxyProcess, measure_rtt
from benchmarks.latency.variants import BareTopK, CacheWarmer, OnetripAssembled, OnetripSingle
from benchmarks.versions import server_label
from onetrip.connection import connect, resolve_dsn
from onetrip.retrieve import MAX_K, Retriever, bind_vector, plan_assemble, plan_search, statement_columns
from onetrip.synthetic import corpus_query_vectors, generate
from onetrip.layout import Layout

STEPS = ("A", "A_iter", "B_sql", "B_iter", "B", "A_work", "A_bytes", "F_iter", "F")

#: generate_series length of A_work's server-side computation (~0.1-0.2 ms on the machines here)
WORK_ROWS = 2000


def with_server_work(statement: str, rows: int = WORK_ROWS) -> str:
    """The bare top-K statement with ``rows`` steps of pure computation added, same rows returned."""
    head, sep, tail = statement.partition(" FROM ")
    if not sep:
        raise ValueError("expected a SELECT ... FROM statement")
    return f"{head}, (SELECT count(*) FROM generate_series(1, {int(rows)})) AS work FROM {tail}"


def padded_content(statement: str, pad_chars: int) -> str:
    """The bare top-K statement with ``pad_chars`` spaces appended to each row's content."""
    out = statement.replace("content,", f"content || repeat(' ', {int(pad_chars)}) AS content,", 1)
    if out == statement:
        raise ValueError("expected a 'content,' column in the statement")
    return out


def wire_bytes(cur: Any) -> int:
    """The result's size in the protocol: every value's bytes plus each DataRow's header and lengths."""
    res = cur.pgresult
    if res is None:
        return 0
    values = sum(len(res.get_value(r, c) or b"") for r in range(res.ntuples) for c in range(res.nfields))
    return values + res.ntuples * (7 + 4 * res.nfields)


def pad_for_bytes(conn: psycopg.Connection, b_statement: str, params: Callable[[np.ndarray], dict[str, Any]],
                  a_statement: str, queries: np.ndarray, k: int) -> int:
    """Characters to add to each of A's k contents so its result matches B's mean size on the wire."""
    sizes: dict[str, list[int]] = {"A": [], "B": []}
    with conn.cursor() as cur:
        for q in queries:
            cur.execute(b_statement, params(q), binary=True)
            sizes["B"].append(wire_bytes(cur))
            cur.execute(a_statement, {"q": q}, binary=True)
            sizes["A"].append(wire_bytes(cur))
    return max(0, round((statistics.fmean(sizes["B"]) - statistics.fmean(sizes["A"])) / k))


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
            warm_dsn: str | None = None) -> tuple[dict[str, list[float]], int]:
    """Interleaved timings of every step on connections to ``dsn``; ``warm_dsn`` (default ``dsn``) warms.

    Also returns A_bytes' padding, characters per hit.
    """
    warmer = CacheWarmer(warm_dsn or dsn, layout, k)
    conns = [warmer.conn] + [connect(dsn) for _ in range(9)]
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
        fplan = plan_assemble(layout, queries[0], k, max_tokens=2000, expand=OnetripAssembled.EXPANSION)

        def fparams(q: np.ndarray) -> dict[str, Any]:
            return bind_vector(fplan, q, layout.dim)

        retriever_settings(conns[8], layout)
        f_iter = raw_fetch(conns[8], fplan.statement, fparams)
        f = OnetripAssembled(conns[9], layout, k)
        # A_bytes: A_iter's hits padded to B_iter's mean result size (set below, once it is measured)
        retriever_settings(conns[7], layout)
        a_bytes = BareTopK(conns[7], layout, k)
        run = {"A": a.run, "A_iter": a_iter.run, "B_sql": b_sql, "B_iter": b_iter, "B": b.run, "A_work": a_work.run,
               "A_bytes": a_bytes.run, "F_iter": f_iter, "F": f.run}

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
            packed = {(p.doc_id, p.section_id) for p in f.run(q).passages}
            if {(row[0], row[1]) for row in f_iter(q)} != packed:  # assemble.sql: doc_id, section_id, ...
                raise RuntimeError("F_iter returned other passages than F")
        pad = pad_for_bytes(conns[4], plan.statement, params, a_iter.sql, queries[:20], k)
        a_bytes.sql = padded_content(a_bytes.sql, pad)

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
        return times, pad
    finally:
        for c in conns:
            c.close()


def summarize(times: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {s: statistics.median(v) for s, v in times.items()}

    def us(x: str, y: str) -> float:
        return round((p50[x] - p50[y]) * 1000, 1)

    return {
        "p50_ms": {s: round(v, 4) for s, v in p50.items()},
        "split_us": {
            "iterative_scan": us("A_iter", "A"),
            "expansion_sql_and_transfer": us("B_iter", "A_iter"),
            "wider_result": us("A_bytes", "A_iter"),
            "expansion_work": us("B_iter", "A_bytes"),
            "mapping_to_hits": us("B", "B_iter"),
            "iterative_scan_on_B_sql": us("B_iter", "B_sql"),
            "B_minus_A": us("B", "A"),
            "server_work_yardstick": us("A_work", "A"),
            "F_statement": us("F_iter", "A_iter"),
            "F_mapping": us("F", "F_iter"),
            "F_minus_A": us("F", "A"),
        },
    }


def _condition(r: dict[str, Any]) -> str:
    if r.get("added_rtt_ms") is None:
        return "direct"
    return f"+{r['added_rtt_ms']:g} ms (achieved {r['achieved_rtt_ms']:.2f} ms)"


def report(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        f"## Cost split: B (onetrip) and F (assembled context) over A (bare top-K), k={m['k']}",
        "",
        f"{m['date']}; {m['cores']} cores; {m['server']}; {m['queries']} queries per size and connection, all "
        "steps interleaved per query in random order, hot cache; medians in ms, differences in µs. "
        "`direct`: no proxy; `+d ms`: through benchmarks/latency/delay_proxy.py, as the latency benchmark runs.",
        "",
        "| sections | connection | " + " | ".join(STEPS) + " |",
        "|---|---|" + "---|" * len(STEPS),
    ]
    for r in doc["results"]:
        lines.append(f"| {r['sections']:,} | {_condition(r)} | " + " | ".join(f"{r['p50_ms'][x]:.3f}" for x in STEPS)
                     + " |")
    lines += [
        "",
        "| sections | connection | iterative scan (A_iter−A) | wider result (A_bytes−A_iter) | "
        "expansion work (B_iter−A_bytes) | mapping (B−B_iter) | B−A (B/A) | F statement (F_iter−A_iter) | "
        "F mapping (F−F_iter) | F−A (F/A) | server work yardstick (A_work−A) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        p, s = r["p50_ms"], r["split_us"]
        cells = [f"{s[x]:.0f}" for x in ("iterative_scan", "wider_result", "expansion_work", "mapping_to_hits")]
        cells.append(f"{s['B_minus_A']:.0f} ({p['B'] / p['A']:.2f})")
        cells += [f"{s['F_statement']:.0f}", f"{s['F_mapping']:.0f}", f"{s['F_minus_A']:.0f} ({p['F'] / p['A']:.2f})",
                  f"{s['server_work_yardstick']:.0f}"]
        lines.append(f"| {r['sections']:,} | {_condition(r)} | " + " | ".join(cells) + " |")
    pad_of = {r["sections"]: r["pad_chars"] for r in reversed(doc["results"]) if "pad_chars" in r}  # each size
    pads = ", ".join(f"{n:,}: {c} characters per hit" for n, c in sorted(pad_of.items()))  # (any row: it had
    # named the direct rows' only, so a run without --rtt-ms direct printed "on average ()")
    lines += ["", "A_iter, B_iter, A_bytes and F_iter run with Retriever's per-connection settings "
              "(hnsw.iterative_scan = relaxed_order, hnsw.max_scan_tuples); A and B_sql with pgvector's "
              "defaults. A_bytes is A_iter with each hit's content padded so its result is as large on the "
              f"wire as B_iter's, on average ({pads}): the same 10 rows, so B_iter − A_bytes is the expansion "
              "itself (the context rows' count, their reads and the statement's other plan nodes). F is the "
              "latency benchmark's F: parent + ±1 neighbors, 2,000-token budget. A_work is A plus "
              f"a count over generate_series(1, {WORK_ROWS}) on the server, the same rows mapped the same way: "
              "the same server work costs what that column shows on each connection, so its ratio between "
              "a proxied and the direct row is how much this machine inflates server time after an idle wait. "
              "Differences of medians are not medians of differences: read them to ±10–30 µs.", ""]
    return "\n".join(lines)


def measure_condition(dsn: str, layout: Layout, queries: np.ndarray, args: argparse.Namespace,
                      added_rtt_ms: float | None) -> dict[str, Any]:
    """One split on a direct connection (None) or through the delay proxy at +added_rtt_ms."""
    if added_rtt_ms is None:
        times, pad = measure(dsn, layout, queries, args.k, args.warmup)
        rtt: dict[str, Any] = {}
    else:
        with DelayProxyProcess.from_dsn(dsn, added_rtt_ms) as proxy:
            pdsn = proxy.dsn(dsn)
            rtt = {"achieved_rtt_ms": round(measure_rtt(pdsn, 200)["median_ms"], 4)}
            times, pad = measure(pdsn, layout, queries, args.k, args.warmup, warm_dsn=dsn)
    raw = {s: [round(t, 4) for t in v] for s, v in times.items()}
    return {**rtt, "pad_chars": pad, **summarize(times), "raw_ms": raw}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.latency.cost_split", description=__doc__.splitlines()[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    ap.add_argument("--sizes", type=synthetic_sizes, default="10000",
                    help="synthetic corpus sizes in sections, comma-separated (10000,100000 or 10k,1m)")
    ap.add_argument("--k", type=int_range(1, MAX_K), default=10, help="top-K per query")
    ap.add_argument("--queries", type=positive_int, default=800, help="timed queries per size and connection")
    ap.add_argument("--warmup", type=nonneg_int, default=30, help="untimed queries run first")
    ap.add_argument("--seed", type=int, default=0, help="corpus and query seed")
    ap.add_argument("--ef-construction", type=ef_construction, default=200, help="HNSW ef_construction of the corpora")
    ap.add_argument("--rtt-ms", type=rtts_or_direct, default="direct,1",
                    help="comma list: 'direct' (no proxy) and/or added RTTs in ms (>= 0) through the delay proxy")
    ap.add_argument("--out", type=output_folder, default="benchmarks/results", help="output folder for cost_split.json and .md")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    conditions = args.rtt_ms

    dsn = resolve_dsn(args.dsn)
    results = []
    with connect(dsn) as conn:
        server = server_label(conn)
        for n in args.sizes:
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
                    "server": server,
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
    raise SystemExit(run_cli(main, "benchmarks.latency.cost_split"))
