"""Growth curve on one machine: load, index, size, recall and latency as the corpus grows.

    python -m benchmarks.scale.run --sizes 10000,100000,300000,1000000 [--layouts vector,halfvec,partitioned]

For each corpus size (synthetic, clustered topic -> document -> section, 384-d)
and storage layout (plain `vector`, `halfvec`, hash-partitioned by doc_id) it
reports:
- load time (binary COPY) and HNSW build time, with maintenance_work_mem and
  the parallel maintenance workers used;
- table and index sizes;
- recall@k of the HNSW search against exact search (numpy brute force over the
  float32 vectors) at each --ef ef_search (default 40 / 100 / 200 / 400 / 1000),
  with that setting's median bare top-K latency on a direct connection;
- p50/p95 of bare top-K (A) and the product query (B: Retriever.search, parent
  and +/-1 neighbors) at 0 and 1 ms added RTT through the delay proxy (--rtts,
  0 and/or 1: the report's columns), the two interleaved query by query.
Writes scale.json, scale.md and scale.png to --out (default benchmarks/results). Corpora are
reused between runs (same size, seed and layout), so sizes can be added later.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.args import (
    HelpFormatter, run_cli, choice_list, ef_construction, int_list, int_range, memory_size, nonneg_int, positive_int,
    rtts_among, synthetic_sizes,
)
from benchmarks.latency.corpus import bench_layout, ensure_loaded
from benchmarks.latency.delay_proxy import DelayProxyProcess, measure_rtt
from benchmarks.latency.variants import BareTopK, CacheWarmer, OnetripSingle
from benchmarks.versions import server_versions
from onetrip.connection import connect, resolve_dsn
from onetrip.retrieve import MAX_K
from onetrip.synthetic import corpus_query_vectors, generate
from onetrip.layout import Layout

LAYOUTS: dict[str, dict[str, Any]] = {
    "vector": {},
    "halfvec": dict(vector_type="halfvec"),
    "partitioned": dict(partitions=8),
}


def layout_for(n: int, name: str, seed: int, ef_construction: int = 64) -> Layout:
    """With pgvector's default build (ef_construction 64) the plain layout is the latency benchmark's table."""
    return bench_layout(n, seed, **LAYOUTS[name], hnsw_ef_construction=ef_construction)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def sizes(conn: Any, layout: Layout) -> dict[str, int]:
    """Heap (+TOAST) size of sections and the size of its HNSW index, partitions included."""
    rel = layout.tables["sections"]
    rows = conn.execute(
        """WITH rels AS (SELECT %s::regclass AS r UNION ALL
                         SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass)
           SELECT sum(pg_table_size(r)),
                  (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0)
                     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
                    WHERE i.indrelid IN (SELECT r FROM rels) AND a.amname = 'hnsw'),
                  (SELECT coalesce(sum(pg_indexes_size(r)), 0) FROM rels)
             FROM rels""", (rel, rel)).fetchone()
    return {"table_bytes": int(rows[0]), "hnsw_bytes": int(rows[1]), "all_indexes_bytes": int(rows[2])}


def exact_topk(emb: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Indices of the exact k nearest rows by cosine (vectors are unit length), in chunks."""
    out = []
    for q in queries:
        scores = emb @ q
        idx = np.argpartition(-scores, k)[:k]
        out.append(idx[np.argsort(-scores[idx])])
    return np.array(out)


#: B's statement shape, recorded per row: rows measured before it changed are marked in the report.
B_QUERY = "each section once, one (doc_id, sequence_index) key set; A with LIMIT k in its text"


def run_size(conn: Any, dsn: str, n: int, name: str, args: argparse.Namespace, log=print) -> dict[str, Any]:
    layout = layout_for(n, name, args.seed, args.ef_construction)
    t0 = time.perf_counter()
    docs = list(generate(n, dim=384, seed=args.seed))
    gen_s = time.perf_counter() - t0
    keys = [(d.record.doc_id, s.section_id) for d in docs for s in d.sections]
    emb = np.concatenate([d.embeddings for d in docs]).astype(np.float32)
    result: dict[str, Any] = {"sections": n, "layout": name, "k": args.k, "ef_construction": args.ef_construction,
                              "b_query": B_QUERY, "measured": time.strftime("%Y-%m-%d"),
                              # rows of several runs (and machines) share one file whose meta is the last run's
                              "server": server_versions(conn), "cores": os.cpu_count(),
                              "documents": len(docs), "generate_s": round(gen_s, 1)}
    mwm = args.maintenance_work_mem
    load = ensure_loaded(conn, docs, layout, maintenance_work_mem=mwm, log=log)
    # the build's settings, as the load note keeps them (a reused table's are its builder's, not this run's)
    result.update(load_reused=load.reused, copy_s=round(load.copy_s or float("nan"), 1),
                  hnsw_build_s=round(load.index_build_s or float("nan"), 1),
                  maintenance_work_mem=load.maintenance_work_mem or "?",
                  max_parallel_maintenance_workers=load.max_parallel_maintenance_workers,
                  queries=args.queries, warmup=args.warmup, recall_queries=args.recall_queries,
                  **sizes(conn, layout))
    log(f"[{n} {name}] copy {result['copy_s']} s, HNSW {result['hnsw_build_s']} s, "
        f"table {result['table_bytes'] / 2**20:.0f} MiB, hnsw {result['hnsw_bytes'] / 2**20:.0f} MiB")

    # Recall@k vs exact, and bare top-K latency, per ef_search (direct connection).
    queries = corpus_query_vectors(docs, args.recall_queries, seed=args.seed + 7)
    truth = exact_topk(emb, queries, args.k)
    truth_keys = [{keys[i] for i in row} for row in truth]
    recall: dict[str, Any] = {}
    bare = BareTopK(conn, layout, args.k)
    for ef in args.ef:
        conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        conn.execute("SET hnsw.iterative_scan = off")
        # first pass: the answers (and the pages they need, read into shared_buffers); second pass: timed
        got = [{(h.section.doc_id, h.section.section_id) for h in bare.run(q)} for q in queries]
        times_ms = []
        for q in queries:
            t = time.perf_counter()
            bare.run(q)
            times_ms.append((time.perf_counter() - t) * 1000)
        r = float(np.mean([len(g & t) / args.k for g, t in zip(got, truth_keys)]))
        recall[str(ef)] = {"recall": round(r, 4), "bare_p50_ms": round(statistics.median(times_ms), 3)}
        log(f"[{n} {name}] ef_search={ef}: recall@{args.k} {r:.3f}, bare top-K p50 {statistics.median(times_ms):.2f} ms")
    conn.execute("RESET hnsw.ef_search")
    conn.execute("RESET hnsw.iterative_scan")
    result["recall"] = recall

    # A vs B through the proxy, interleaved, at each RTT (default ef_search).
    lat_queries = corpus_query_vectors(docs, args.queries + args.warmup, seed=args.seed + 11)
    latency: dict[str, Any] = {}
    with DelayProxyProcess.from_dsn(dsn, 0.0) as proxy:
        pdsn = proxy.dsn(dsn)
        a_conn, b_conn = connect(pdsn), connect(pdsn)
        a, b = BareTopK(a_conn, layout, args.k), OnetripSingle(b_conn, layout, args.k)
        warmer = CacheWarmer(dsn, layout, args.k)
        for rtt in args.rtts:
            proxy.set_delay_ms(rtt)
            achieved = measure_rtt(pdsn, n=100)["median_ms"]
            ta: list[float] = []
            tb: list[float] = []
            order = random.Random(args.seed + int(rtt * 10))
            for i, q in enumerate(lat_queries):
                pair = [(a, ta), (b, tb)]
                order.shuffle(pair)
                warmer.warm(q)  # untimed, direct: both run on a hot cache (see CacheWarmer)
                for v, sink in pair:
                    t = time.perf_counter()
                    v.run(q)
                    if i >= args.warmup:
                        sink.append((time.perf_counter() - t) * 1000)
            latency[str(rtt)] = {
                "achieved_rtt_ms": round(achieved, 3),
                "A_p50": round(statistics.median(ta), 3), "A_p95": round(pct(ta, 95), 3),
                "B_p50": round(statistics.median(tb), 3), "B_p95": round(pct(tb, 95), 3),
                "B_over_A": round(statistics.median(tb) / statistics.median(ta), 3),
                "paired_B_over_A": round(statistics.median([y / x for x, y in zip(ta, tb)]), 3),
                "raw_A_ms": [round(x, 4) for x in ta], "raw_B_ms": [round(x, 4) for x in tb],
                "load_avg_1m": os.getloadavg()[0],
            }
            log(f"[{n} {name}] +{rtt} ms (achieved {achieved:.2f}): A p50 {statistics.median(ta):.2f}, "
                f"B p50 {statistics.median(tb):.2f}, B/A {latency[str(rtt)]['B_over_A']}")
        a_conn.close()
        b_conn.close()
        warmer.close()
    result["latency"] = latency
    return result


def write_report(results: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> str:
    lines = [f"## Scale: growth curve on one machine (k={meta['k']})", "",
             f"{meta['date']}; {meta['cores']} cores; {meta['server']}; synthetic clustered 384-d corpora; "
             f"{per_row(results, 'queries', meta)} interleaved A/B queries per RTT, "
             f"{per_row(results, 'recall_queries', meta)} recall queries; "
             "latency is client wall time per query, hot cache (each query is run once, untimed, by A and B on a "
             "direct connection just before its timed pair).", "",
             "| sections | layout | ef_construction | COPY s | HNSW build s | table MiB | HNSW MiB "
             f"| recall@{meta['k']} ef={' / '.join(map(str, meta['ef']))} "
             f"| bare p50 ms at ef {'/'.join(map(str, meta['ef']))} | A p50/p95 0 ms | B p50/p95 0 ms | A p50/p95 +1 ms | B p50/p95 +1 ms "
             "| B/A +1 ms | measured, achieved RTT ms at 0 / +1 |", "|" + "---|" * 15]
    for r in results:
        rec = " / ".join(f"{r['recall'][e]['recall']:.3f}" if e in r["recall"] else "–" for e in map(str, meta["ef"]))
        bare = " / ".join(f"{r['recall'][e]['bare_p50_ms']:.2f}" if e in r["recall"] else "–"
                          for e in map(str, meta["ef"]))
        l0, l1 = r["latency"].get("0.0") or r["latency"].get("0"), r["latency"].get("1.0") or r["latency"].get("1")

        def rtt(x: dict | None) -> str:
            return "–" if not x or x.get("achieved_rtt_ms") is None else f"{x['achieved_rtt_ms']:.2f}"

        def pp(x: dict | None, v: str) -> str:
            return "–" if not x else f"{x[v + '_p50']:.2f} / {x[v + '_p95']:.2f}"

        lines.append(f"| {r['sections']:,} | {r['layout']} | {r.get('ef_construction', 64)} | {r['copy_s']} | {r['hnsw_build_s']} | "
                     f"{r['table_bytes'] / 2**20:.0f} | {r['hnsw_bytes'] / 2**20:.0f} | {rec} | {bare} | "
                     f"{pp(l0, 'A')} | {pp(l0, 'B')} | {pp(l1, 'A')} | {pp(l1, 'B')} | "
                     f"{(l1 or {}).get('B_over_A', '–')}{'' if r.get('b_query') == B_QUERY else ' †'} | "
                     f"{r.get('measured', '?')}, {rtt(l0)} / {rtt(l1)} |")
    lines += ["", f"{build_settings(results)}; HNSW m=16 and the ef_construction of each row (64 is pgvector's "
              "default). Recall is against exact search "
              "(numpy, float32) with hnsw.iterative_scan off; B/A is measured at pgvector's default "
              "ef_search 40, the setting onetrip runs with. Rows measured on different days may come from "
              "different machines: compare ratios within a day, and read the achieved RTT (the proxy's "
              "SELECT 1 ping) as a sign of the machine's speed."]
    if any(r.get("b_query") != B_QUERY for r in results):
        lines += ["", "† measured with an earlier product query (one row per hit with parent_*/prev_*/next_* "
                  "columns, or separate parent and neighbor key sets) and an A whose bound LIMIT was re-planned "
                  "on every call (~45 us slower); the other rows with the current B (one (doc_id, "
                  "sequence_index) key set, each section once, sql/README.md) and the fast A. Re-run that size "
                  "and layout to update the row."]
    text = "\n".join(lines) + "\n"
    (out / "scale.md").write_text(text)
    return text


def per_row(results: list[dict[str, Any]], field: str, meta: dict[str, Any]) -> str:
    """A count the rows were measured with (``queries``, ``recall_queries``): one number when all rows share it,
    else the most common, then the rows measured otherwise. Rows of a run before rows kept their own count
    take the file's (that run's) value; their timed queries are counted from their raw timings."""
    def value(r: dict[str, Any]) -> Any:
        if field in r:
            return r[field]
        raw = next(iter(r.get("latency", {}).values()), {}).get("raw_A_ms")
        return len(raw) if field == "queries" and raw else meta.get(field, "?")

    rows: dict[Any, list[str]] = {}
    for r in results:
        rows.setdefault(value(r), []).append(f"{r['sections']:,} {r['layout']}")
    if not rows:
        return str(meta.get(field, "?"))
    usual = max(rows, key=lambda k: len(rows[k]))
    others = [f"{k} for {', '.join(v)}" for k, v in rows.items() if k != usual]
    return f"{usual}" + (f" ({'; '.join(others)})" if others else "")


def build_settings(results: list[dict[str, Any]]) -> str:
    """The HNSW builds' memory and workers: the most common setting, then the rows built otherwise (a
    reused table keeps the setting of the run that built it)."""
    rows: dict[str, list[str]] = {}
    for r in results:
        workers = r.get("max_parallel_maintenance_workers")
        setting = (f"maintenance_work_mem={r.get('maintenance_work_mem', '?')}, "
                   f"{'?' if workers is None else workers} parallel maintenance workers")
        rows.setdefault(setting, []).append(f"{r['sections']:,} {r['layout']}")
    if not rows:
        return "no rows"
    usual = max(rows, key=lambda k: len(rows[k]))
    others = [f"{k} for {', '.join(v)}" for k, v in rows.items() if k != usual]
    return f"HNSW builds with {usual}" + (f" ({'; '.join(others)})" if others else "")


def series_note(rows: list[dict[str, Any]], rtt: str) -> str:
    """What a latency line of the plot needs beside its p50s, as the table has it: B/A per size, the
    proxy's achieved RTT and the day each row was measured (rows of other days may be another machine)."""
    lat = [r["latency"][rtt] for r in rows]
    ratios = " / ".join(f"{x['B_over_A']:.3f}" for x in lat)
    lo, hi = (f"{f(x['achieved_rtt_ms'] for x in lat):.2f}" for f in (min, max))
    achieved = lo if lo == hi else f"{lo}–{hi}"
    days = " / ".join(dict.fromkeys(str(r.get("measured", "?")) for r in rows))
    return f"B/A {ratios}; achieved {achieved} ms; {days}"


def plot(results: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 7.5))
    series = sorted({(r["layout"], r.get("ef_construction", 64)) for r in results})
    for name, efc in series:
        rs = sorted((r for r in results if (r["layout"], r.get("ef_construction", 64)) == (name, efc)),
                    key=lambda r: r["sections"])
        xs = [r["sections"] for r in rs]
        tag = f"{name} efc{efc}"
        rtt = "1.0"  # the plot's RTT (the table has +0 ms too)
        if all(rtt in r["latency"] for r in rs):
            ax1.plot(xs, [r["latency"][rtt]["A_p50"] for r in rs], "o-", label=f"A bare, {tag}")
            ax1.plot(xs, [r["latency"][rtt]["B_p50"] for r in rs], "s-",
                     label=f"B onetrip, {tag}, {series_note(rs, rtt)}")
        style = {"vector": "-", "halfvec": "--", "partitioned": "-."}.get(name, ":")
        for i, ef in enumerate(meta["ef"]):
            pts = [(x, r["recall"][str(ef)]["recall"]) for x, r in zip(xs, rs) if str(ef) in r["recall"]]
            if pts:  # colour = ef_search, line = layout, x markers = pgvector's default build
                ax2.plot(*zip(*pts), ("x" if efc == 64 else "o") + style, color=f"C{i}",
                         label=f"{tag}, ef_search={ef}")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("sections")
        ax.grid(True, alpha=0.3)
    # below the axes: the 1M points sit where a legend inside would go
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax1.set_ylabel("p50 latency, ms")
    ax1.set_title(f"A and B p50 at +1 ms added RTT vs corpus size (k={meta['k']})\n"
                  "1 statement per query each; B's label: B/A, achieved RTT, day measured", fontsize=9)
    ax2.set_ylabel(f"recall@{meta['k']} vs exact")
    ax2.set_title("HNSW recall vs corpus size")
    fig.tight_layout()
    fig.savefig(out / "scale.png", dpi=110)


def read_scale_json(path: Path) -> dict[str, Any]:
    """A scale.json of this benchmark, or SystemExit(2) naming the file (a wrong file had ended in a traceback)."""
    try:
        doc = json.loads(path.read_text())
        if not (isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and {"k", "ef"} <= doc["meta"].keys()
                and isinstance(doc.get("results"), list)
                and all(isinstance(r, dict) and {"sections", "layout", "recall", "latency"} <= r.keys()
                        for r in doc["results"])):
            raise ValueError("no 'meta' with k and ef, or 'results' rows without sections, layout, recall and "
                             "latency")
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
        print(f"python -m benchmarks.scale.run: error: {path}: not a readable scale.json of this benchmark "
              f"({why})", file=sys.stderr)
        raise SystemExit(2) from None
    return doc


def replot(out: Path, source: Path | None = None) -> None:
    """Redraw scale.md and scale.png from scale.json (``source``, else out/scale.json) without measuring again."""
    doc = read_scale_json(source or out / "scale.json")
    out.mkdir(parents=True, exist_ok=True)
    write_report(doc["results"], doc["meta"], out)
    plot(doc["results"], doc["meta"], out)


def key(r: dict[str, Any]) -> tuple[int, str, int]:
    """A result row's identity (rows from before ef_construction was an option were built with 64)."""
    return r["sections"], r["layout"], r.get("ef_construction", 64)


#: The added RTTs (ms) the report and the plot have columns for; other values would be measured and then not shown.
REPORTED_RTTS = (0.0, 1.0)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale.run", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    ap.add_argument("--sizes", type=synthetic_sizes, default="10000,100000",
                    help="synthetic corpus sizes in sections, comma-separated (10000,100000 or 10k,1m)")
    ap.add_argument("--layouts", type=choice_list(LAYOUTS), default="vector,halfvec",
                    help=f"storage layouts, comma-separated, among {','.join(LAYOUTS)}")
    ap.add_argument("--k", type=int_range(1, MAX_K), default=10, help="top-K (recall@k and the latency queries)")
    ap.add_argument("--ef", type=int_list(1, 1000), default="40,100,200,400,1000",
                    help="hnsw.ef_search values (1..1000) for the recall columns, comma-separated")
    ap.add_argument("--rtts", type=rtts_among(REPORTED_RTTS), default="0,1",
                    help="added RTTs in ms through the delay proxy: 0 and/or 1 (the report's columns)")
    ap.add_argument("--queries", type=positive_int, default=200, help="timed A/B query pairs per RTT")
    ap.add_argument("--warmup", type=nonneg_int, default=20, help="untimed A/B query pairs per RTT, run first")
    ap.add_argument("--recall-queries", type=positive_int, default=100, help="queries for recall and bare latency")
    ap.add_argument("--seed", type=int, default=0, help="corpus and query seed")
    ap.add_argument("--maintenance-work-mem", type=memory_size, default="4GB",
                    help="maintenance_work_mem for the HNSW builds")
    ap.add_argument("--ef-construction", type=ef_construction, default=200,
                    help="HNSW ef_construction of every layout (pgvector's default 64 gives "
                         "recall@10 0.78-0.93 at 1M on this corpus; 64 reuses the latency benchmark's tables)")
    ap.add_argument("--out", default="benchmarks/results", help="output folder for scale.json, .md and .png "
                    "(rows already in its scale.json are kept)")
    ap.add_argument("--replot", action="store_true", help="only redraw scale.md/.png from scale.json")
    ap.add_argument("--from-json", default=None, help="with --replot: the scale.json to redraw (default: the one "
                    "in --out), e.g. benchmarks/results/scale.json redrawn into a scratch --out")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.from_json and not args.replot:  # it had been ignored: a full measurement started
        ap.error("--from-json is read only with --replot (it names the scale.json to redraw)")
    if args.k >= min(args.sizes):
        ap.error(f"--k {args.k} must be smaller than the smallest corpus ({min(args.sizes)} sections)")
    if args.replot:
        replot(Path(args.out), Path(args.from_json) if args.from_json else None)
        return 0
    out = Path(args.out)
    dsn = resolve_dsn(args.dsn)
    previous: list[dict[str, Any]] = []
    if (out / "scale.json").exists():
        doc = read_scale_json(out / "scale.json")
        if doc["meta"]["k"] != args.k:  # one k per report: its recall and latency columns are at that k
            ap.error(f"{out / 'scale.json'} holds rows measured at k={doc['meta']['k']}: "
                     f"give another --out for k={args.k}")
        previous = doc["results"]
        for r in previous:  # rows from before rows kept their counts: the file's meta is the run that made them
            for field in ("queries", "recall_queries"):
                if field not in r and field in doc["meta"] and not (field == "queries" and r.get("latency")):
                    r[field] = doc["meta"][field]
    results = {key(r): r for r in previous}
    with connect(dsn) as conn:
        out.mkdir(parents=True, exist_ok=True)
        server = conn.execute("SELECT version()").fetchone()[0].split(" on ")[0]
        pgv = conn.execute("SELECT extversion FROM pg_extension WHERE extname='vector'").fetchone()[0]
        for n in args.sizes:
            for name in args.layouts:
                r = run_size(conn, dsn, n, name, args)
                results[key(r)] = r
                meta = {"k": args.k, "ef": args.ef, "queries": args.queries, "recall_queries": args.recall_queries,
                        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(),
                        "server": f"{server}, pgvector {pgv}", "maintenance_work_mem": args.maintenance_work_mem,
                        "ef_construction": args.ef_construction}
                ordered = sorted(results.values(), key=lambda r: (r["layout"], -r.get("ef_construction", 64), r["sections"]))
                (out / "scale.json").write_text(json.dumps({"meta": meta, "results": ordered}, indent=1))
                print(write_report(ordered, meta, out))
                plot(ordered, meta, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.scale.run"))
