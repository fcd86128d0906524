"""Several queries at once: one `search_many` statement against one `search` per query.

    python -m benchmarks.latency.many_queries --size 100000 --n 1,2,4,8 --rtt-ms 0,1,2
    python -m benchmarks.latency.many_queries --manual --n 1,2,4,8 --rtt-ms 0,1,2   # hybrid, real questions

An agent that splits a question into n sub-queries pays n round trips with
`Retriever.search`; `Retriever.search_many` sends ONE statement for all of
them (an HNSW scan per query inside it, context rows read once). Two variants,
the same n query vectors each time, interleaved set by set in random order
after a warm-up, each set's pages read first on a direct connection (the
latency benchmark's CacheWarmer), on connections through its delay proxy:

    M  Retriever.search_many(queries, k)           1 statement
    S  [Retriever.search(q, k) for q in queries]    n statements, n round trips

Both return the same hits with parents and neighbors: checked on every set
(the run fails otherwise). Statement counts are by construction here; the
tests count them at the server (tests/test_search_many.py). The corpus is the
latency benchmark's synthetic clustered one (384-d, HNSW ef_construction 200),
loaded if missing. Writes benchmarks/results/many_queries.{json,md,png} with
every raw timing; medians and S/M ratios are quoted with the corpus size, k and
the proxy's achieved RTT (a `SELECT 1` ping through it).

--manual: the PostgreSQL 15 manual as `benchmarks.ingest_manual` loads it
(prefix pg15_), the questions of the evidence-coverage sets as queries, and
hybrid search (the default for text): M is search_many(embeddings, texts=...),
S is search(embedding, text=...) per query, so neither embeds inside the timing
(the embeddings are made once, before). Writes many_queries_manual_hybrid.*.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.args import (
    HelpFormatter, run_cli, ef_construction, int_list, int_range, nonneg_int, output_folder, positive_int, rtts,
    synthetic_size,
)
from benchmarks.latency.corpus import MANUAL_PREFIX, bench_layout, ensure_loaded, manual_missing
from benchmarks.latency.delay_proxy import DelayProxyProcess, measure_rtt
from benchmarks.latency.variants import CacheWarmer
from benchmarks.quality.metrics import question_texts
from benchmarks.versions import server_label
from onetrip.connection import connect, resolve_dsn
from onetrip.retrieve import MAX_K, Retriever
from onetrip.schema import hnsw_build_options
from onetrip.search_many import MAX_QUERIES
from onetrip.synthetic import corpus_query_vectors, generate
from onetrip.layout import Layout


def measure(dsn: str, layout: Layout, sets: list[np.ndarray], k: int, warmup: int,
            warm_dsn: str, texts: list[list[str]] | None = None) -> dict[str, list[float]]:
    """Milliseconds per set for M and S, interleaved in random order; the first `warmup` sets untimed.

    Each set's pages are read first, untimed, on a direct connection (the latency
    benchmark's CacheWarmer): otherwise whichever variant ran a set first paid for
    copying its pages into shared_buffers (the 100k corpus does not fit).
    With ``texts`` (one list per set), both variants search hybrid with the
    embeddings and their texts; the warm-up is a hybrid search of each query.
    """
    many = Retriever(dsn, schema=layout.schema, prefix=layout.prefix)
    single = Retriever(dsn, schema=layout.schema, prefix=layout.prefix)
    warmer = CacheWarmer(warm_dsn, layout, k)
    direct = Retriever(warm_dsn, schema=layout.schema, prefix=layout.prefix) if texts is not None else None
    times: dict[str, list[float]] = {"M": [], "S": []}
    rng = random.Random(0)
    try:
        for i, qs in enumerate(sets):
            ts = texts[i] if texts is not None else None
            for j, q in enumerate(qs):
                warmer.warm(q)
                if direct is not None and ts is not None:
                    direct.search(q, k=k, text=ts[j])
            got: dict[str, Any] = {}
            order = ["M", "S"]
            rng.shuffle(order)
            for v in order:
                t0 = time.perf_counter()
                if ts is None:
                    got[v] = many.search_many(list(qs), k=k) if v == "M" else [single.search(q, k=k) for q in qs]
                elif v == "M":
                    got[v] = many.search_many(list(qs), k=k, texts=ts)
                else:
                    got[v] = [single.search(q, k=k, text=t) for q, t in zip(qs, ts)]
                dt = (time.perf_counter() - t0) * 1000
                if i >= warmup:
                    times[v].append(dt)
            if got["M"] != got["S"]:
                raise SystemExit(f"set {i}: search_many and search returned different hits")
    finally:
        many.close()
        single.close()
        warmer.conn.close()
        if direct is not None:
            direct.close()
    return times


def report(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    corpus = (f"the PostgreSQL 15 manual, {m['sections']:,} sections, questions of the evidence-coverage sets "
              f"as queries, hybrid search (embeddings made before the timing, sent with their texts)"
              if m.get("corpus") == "manual" else
              f"{m['sections']:,} sections (synthetic, clustered, 384-d, HNSW ef_construction "
              f"{m['ef_construction']}), dense search")
    lines = ["# Several queries: one statement (search_many) vs one search per query", "",
             f"{corpus}, k = {m['k']} per query, each hit with its parent and ±1 neighbors; "
             f"{m['sets']} timed sets per row after {m['warmup']} untimed, M and S interleaved in random order; "
             f"{m['server']}; {m['cores']} cores; {m['date']}. p50 in ms per set of n queries.", "",
             "| n queries | added RTT | achieved RTT | M search_many (1 statement) | S search × n (n statements) "
             "| S/M | M per query |", "|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        lines.append(f"| {r['n']} | {r['added_rtt_ms']:g} ms | {r['achieved_rtt_ms']:.2f} ms | {r['p50_ms']['M']:.2f} "
                     f"| {r['p50_ms']['S']:.2f} | {r['ratio_S_over_M']:.2f} | {r['p50_ms']['M'] / r['n']:.2f} |")
    lines += ["", "Both variants returned identical hits, parents and neighbors on every set. With n = 1 "
              "search_many sends search's own statement, so that row compares a statement with itself: its "
              "S/M is this machine's noise. From n = 2 on, M saves n − 1 round trips, while each query's HNSW "
              "scan and context rows cost about what they cost in search."]
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rtts = sorted({r["added_rtt_ms"] for r in doc["results"]})
    fig, axes = plt.subplots(1, len(rtts), figsize=(4.2 * len(rtts), 3.6), sharey=False, squeeze=False)
    for ax, rtt in zip(axes[0], rtts):
        rows = [r for r in doc["results"] if r["added_rtt_ms"] == rtt]
        ns = [r["n"] for r in rows]
        ax.plot(ns, [r["p50_ms"]["M"] for r in rows], "o-", label="M: search_many (1 statement)")
        ax.plot(ns, [r["p50_ms"]["S"] for r in rows], "s--", label="S: search × n (n statements)")
        ax.set_title(f"+{rtt:g} ms RTT (achieved {rows[0]['achieved_rtt_ms']:.2f})")
        ax.set_xlabel("queries per set (n)")
        ax.set_ylabel("p50 ms per set")
        ax.set_xticks(ns)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    m = doc["meta"]
    what = "the PostgreSQL manual, hybrid" if m.get("corpus") == "manual" else "dense"
    fig.suptitle(f"{m['sections']:,} sections ({what}), k={m['k']} per query, parent + ±1 neighbors", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.latency.many_queries",
                                 description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    ap.add_argument("--size", type=synthetic_size, default="100000",
                    help="synthetic corpus size in sections (100000 or 100k; ignored with --manual)")
    ap.add_argument("--n", type=int_list(1, MAX_QUERIES), default="1,2,4,8",
                    help=f"comma list of queries per set (search_many takes 1 to {MAX_QUERIES})")
    ap.add_argument("--k", type=int_range(1, MAX_K), default=10, help="top-K per query")
    ap.add_argument("--sets", type=positive_int, default=200, help="timed sets per (n, RTT) row")
    ap.add_argument("--warmup", type=nonneg_int, default=20, help="untimed sets run first")
    ap.add_argument("--rtt-ms", type=rtts, default="0,1,2",
                    help="comma list of added RTTs in ms (>= 0) through the delay proxy")
    ap.add_argument("--seed", type=int, default=0, help="corpus, query and set seed")
    ap.add_argument("--ef-construction", type=ef_construction, default=200,
                    help="HNSW ef_construction of the synthetic corpus (the manual's index is ingest's)")
    ap.add_argument("--out", type=output_folder, default="benchmarks/results", help="output folder for many_queries*.json, .md and .png")
    ap.add_argument("--manual", action="store_true",
                    help="the ingested PostgreSQL manual (prefix pg15_) with real questions, hybrid search")
    ap.add_argument("--questions", default="../shared/eval/pgdocs_tuning.jsonl,"
                    "benchmarks/quality/validation/administration.jsonl,benchmarks/quality/validation/reference.jsonl,"
                    "benchmarks/quality/validation/sql_language.jsonl",
                    help="--manual: comma list of question files (JSON lines with a 'question' field)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not args.manual and args.k >= args.size:
        ap.error(f"--k {args.k} must be smaller than the corpus ({args.size} sections)")
    ns = args.n
    question_files = [Path(f) for f in args.questions.split(",") if f.strip()]
    questions: list[str] = []
    if args.manual:
        missing = [str(f) for f in question_files if not f.is_file()]
        if missing or not question_files:
            ap.error(f"--questions: no such file: {', '.join(missing)}" if missing else "--questions: no files given")
        try:  # read as the quality benchmark reads them; a malformed line had been a traceback naming no file
            questions = [q for f in question_files for q in question_texts(f)]
        except ValueError as e:
            ap.error(str(e))
        if len(questions) < max(ns):
            ap.error(f"--n {max(ns)} needs at least {max(ns)} questions; the --questions files hold {len(questions)}")
    dsn = resolve_dsn(args.dsn)
    if args.manual:
        layout = Layout(prefix=MANUAL_PREFIX)
        with connect(dsn) as conn:  # before the model loads
            why = manual_missing(conn, MANUAL_PREFIX)
        if why:
            ap.error(why)
        from onetrip.embedders import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
        qvecs = np.stack([embedder.embed_query(q) for q in questions])
    else:
        layout = bench_layout(args.size, args.seed, hnsw_ef_construction=args.ef_construction)
    with connect(dsn) as conn:
        server = server_label(conn)
        if args.manual:
            args.size = conn.execute(f"SELECT count(*) FROM {layout.table('sections')}").fetchone()[0]
        else:
            docs = list(generate(args.size, dim=384, seed=args.seed))
            ensure_loaded(conn, docs, layout, log=print)
        # the index as built: the manual's is ingest's (--ef-construction builds only the synthetic corpus)
        built = hnsw_build_options(conn, layout)
        hnsw_m, hnsw_efc = built[0][1:] if built else (None, None)
    results = []
    for added in args.rtt_ms:
        with DelayProxyProcess.from_dsn(dsn, added) as proxy:
            pdsn = proxy.dsn(dsn)
            achieved = measure_rtt(pdsn, 200)["median_ms"]
            for n in ns:
                total = args.sets + args.warmup
                set_texts = None
                if args.manual:  # each set: n different questions, drawn in a seeded random order
                    rng = random.Random(args.seed + 31 + n)
                    picks = [rng.sample(range(len(questions)), n) for _ in range(total)]
                    sets = [qvecs[p] for p in picks]
                    set_texts = [[questions[j] for j in p] for p in picks]
                else:
                    vecs = corpus_query_vectors(docs, total * n, seed=args.seed + 31 + n)
                    sets = [vecs[i * n:(i + 1) * n] for i in range(total)]
                times = measure(pdsn, layout, sets, args.k, args.warmup, warm_dsn=dsn, texts=set_texts)
                p50 = {v: statistics.median(t) for v, t in times.items()}
                r = {"n": n, "added_rtt_ms": added, "achieved_rtt_ms": round(achieved, 4),
                     "p50_ms": {v: round(x, 4) for v, x in p50.items()},
                     "p95_ms": {v: round(float(np.percentile(t, 95)), 4) for v, t in times.items()},
                     "ratio_S_over_M": round(p50["S"] / p50["M"], 3), "statements": {"M": 1, "S": n},
                     "raw_ms": {v: [round(x, 4) for x in t] for v, t in times.items()}}
                print(f"[n={n}, +{added:g} ms, achieved {achieved:.2f}] M {p50['M']:.2f} ms, S {p50['S']:.2f} ms, "
                      f"S/M {r['ratio_S_over_M']:.2f}")
                results.append(r)
    doc = {"meta": {"sections": args.size, "corpus": "manual" if args.manual else "synthetic",
                    "mode": "hybrid" if args.manual else "dense", "k": args.k, "sets": args.sets,
                    "warmup": args.warmup,
                    "hnsw_m": hnsw_m, "ef_construction": hnsw_efc, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "cores": os.cpu_count(), "server": server},
           "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "many_queries_manual_hybrid" if args.manual else "many_queries"
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    md = report(doc)
    (out / f"{stem}.md").write_text(md)
    plot(doc, out / f"{stem}.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.latency.many_queries"))
