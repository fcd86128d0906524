"""Grid over the lexical side's HybridOptions: section recall@K of the hits, and coverage of the default context.

    V=benchmarks/quality/validation
    python -m benchmarks.quality.lexical_grid --questions ../shared/eval/pgdocs_tuning.jsonl \
        $V/administration.jsonl,$V/reference.jsonl,$V/sql_language.jsonl \
        --grid tf_weight=0,0.5,1,2 [lexical_weight=0.2,0.3] [--mode lexical]

Why it exists: the hybrid weights are chosen on the evidence-coverage sets, and
the choice should be re-runnable. Each grid point runs every question once
through `Retriever.search` (bare hits, section recall@K against the cited
sections) and once per budget through `Retriever.assemble` with the shipped
defaults (evidence coverage), on the manual already ingested by
`benchmarks.quality.run` (prefix pg15_). Each --questions argument is one set
(comma-joined files are one set), scored separately, so a choice made on one
set can be read on the other. Writes lexical_grid_<mode>.json and .md; no
timing claims (one pass, noisy machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.args import ef_search, int_list, output_folder, positive_int, run_cli
from benchmarks.versions import server_versions
from benchmarks.quality.metrics import covered_pairs, load_question_files, mean, section_recall
from benchmarks.quality.run import load_rows, score_context
from onetrip.retrieve import MAX_BUDGET


def parse_grid(items: list[str]) -> list[dict[str, int | float]]:
    """``name=v1,v2`` items -> every combination, as HybridOptions keyword dicts (integers stay int).

    Each combination is checked by building its HybridOptions, so a bad name or value is an error before
    the model loads and the questions are embedded (it had been a traceback after)."""
    from onetrip.retrieve import HybridOptions

    fields = [f.name for f in dataclasses.fields(HybridOptions)]
    axes: list[tuple[str, list[int | float]]] = []
    for item in items:
        name, _, values = item.partition("=")
        name = name.strip()
        if not values.strip():
            raise ValueError(f"grid item {item!r} is not name=v1,v2,...")
        if name not in fields:
            raise ValueError(f"grid item {item!r}: {name!r} is no HybridOptions field ({', '.join(fields)})")
        try:
            axes.append((name, [int(v) if v.strip().isdigit() else float(v)
                                for v in values.split(",") if v.strip()]))
        except ValueError:
            raise ValueError(f"grid item {item!r}: the values must be numbers") from None
    names = [n for n, _ in axes]
    grid = [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]
    for point in grid:
        HybridOptions(**point)  # ValueError naming the field and value
    return grid


def set_names(arguments: list[str]) -> list[str]:
    """One name per --questions argument: its files' stems, '+'-joined; arguments whose stems are the same are
    named by the paths as given (two q3.jsonl in two folders had been one set, the other dropped unsaid)."""
    stems = ["+".join(Path(f).stem for f in arg.split(",")) for arg in arguments]
    names = [s if stems.count(s) == 1 else arg for s, arg in zip(stems, arguments)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--questions names the same set twice: {', '.join(repeated)}")
    return names


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    ap = argparse.ArgumentParser(prog="python -m benchmarks.quality.lexical_grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", nargs="+", required=True, metavar="FILE[,FILE]",
                    help="question sets; comma-joined files are one set")
    ap.add_argument("--grid", nargs="+", default=["tf_weight=0"], metavar="NAME=V1,V2",
                    help="HybridOptions fields and the values to try; every combination is one row "
                         "(default: tf_weight=0)")
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    ap.add_argument("--prefix", default="pg15_",
                    help="table prefix of the ingested manual (python -m benchmarks.ingest_manual; default pg15_)")
    ap.add_argument("--mode", default="hybrid", choices=("hybrid", "lexical"),
                    help="search mode the options are tried in (default hybrid)")
    ap.add_argument("--k", type=positive_int, default=10, help="hits for section recall@K")
    ap.add_argument("--budgets", type=int_list(1, MAX_BUDGET), default="1000,2000,4000",
                    help="comma-separated token budgets of the default context scored (default 1000,2000,4000)")
    ap.add_argument("--ef-search", type=ef_search, default=200, help="hnsw.ef_search for every query (default 200)")
    ap.add_argument("--out", type=output_folder, default="benchmarks/results",
                    help="folder for lexical_grid_MODE.json and .md (default benchmarks/results)")
    args = ap.parse_args(argv)
    try:  # a malformed question line names its FILE:LINE, as a bad argument (it had been a traceback)
        grid, names = parse_grid(args.grid), set_names(args.questions)
        # each --questions argument is one set; comma-joined files are scored as one set
        sets = {name: [q for q in load_question_files(arg.split(",")) if q.answerable]
                for name, arg in zip(names, args.questions)}
    except ValueError as e:
        ap.error(str(e))

    from onetrip.connection import connect
    from onetrip.embedders import SentenceTransformerEmbedder
    from onetrip.retrieve import HybridOptions, Retriever

    budgets = args.budgets
    conn = connect(args.dsn)
    embedder = SentenceTransformerEmbedder()
    r = Retriever(conn, prefix=args.prefix, embedder=embedder, ef_search=args.ef_search)
    anchors_of = {key: row["anchors"] for key, row in load_rows(conn, r.layout.tables["sections"]).items()}
    # keyed by text: two sets may reuse an id
    vectors = {q.question: r.query_vector(q.question) for qs in sets.values() for q in qs}

    results = []
    for point in grid:
        opts = replace(HybridOptions(), **point)
        row: dict[str, Any] = {"options": point}
        t0 = time.perf_counter()
        for name, qs in sets.items():
            rec, cov = [], {b: [] for b in budgets}
            for q in qs:
                hits = r.search(vectors[q.question], args.k, parent=False, neighbors=False, mode=args.mode,
                                text=q.question, hybrid=opts)
                got = covered_pairs(((h.section.doc_id, h.section.section_id) for h in hits), anchors_of)
                rec.append(section_recall(list(q.cited_pairs), got))
                for b in budgets:
                    ctx = r.assemble(vectors[q.question], max_tokens=b, mode=args.mode, text=q.question, hybrid=opts)
                    cov[b].append(score_context(q, ctx.passages, anchors_of)["coverage"])
            row[name] = {"questions": len(qs), f"recall@{args.k}": mean(rec),
                         "coverage": {str(b): mean(v) for b, v in cov.items()}}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = conn.execute(f"SELECT count(*) FROM {r.layout.tables['sections']}").fetchone()[0]
    doc = {"mode": args.mode, "k": args.k, "budgets": budgets, "prefix": args.prefix, "sections": sections,
           "ef_search": args.ef_search, "date": time.strftime("%Y-%m-%d %H:%M"), "server": server_versions(conn),
           "base_options": asdict(HybridOptions()), "results": results}
    (out / f"lexical_grid_{args.mode}.json").write_text(json.dumps(doc, indent=1))
    lines = [f"## Lexical options grid ({args.mode}; section recall@{args.k} of the hits; evidence coverage of "
             f"the default context at {' / '.join(map(str, budgets))} tokens)", "",
             "| options | " + " | ".join(f"{n} ({len(qs)} q) recall / coverage" for n, qs in sets.items()) + " |",
             "|---|" + "---|" * len(sets)]
    for row in results:
        cells = []
        for n in sets:
            s = row[n]
            cells.append(f"{s[f'recall@{args.k}']:.3f} / " + " / ".join(f"{100 * v:.1f}%" for v in s["coverage"].values()))
        lines.append("| " + ", ".join(f"{k}={v:g}" for k, v in row["options"].items()) + " | " + " | ".join(cells) + " |")
    (out / f"lexical_grid_{args.mode}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.quality.lexical_grid"))
