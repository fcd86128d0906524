"""Ingest the whole PostgreSQL 15 HTML manual and report where the time goes.

    python -m benchmarks.ingest_manual [--dsn DSN] [--manual DIR] [--prefix pg15_]

Reports pages, sections, seconds spent parsing, embedding and loading, and
sections per second; writes benchmarks/results/ingest_manual.json (--out: another .json file, or a
folder to write ingest_manual.json into). The target
is under 10 minutes on 2 cores. Runs into its own table prefix so it does not
disturb other data; --fresh drops that prefix's tables first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from benchmarks.args import output_file, run_cli
from benchmarks.pgdoc import find_manual
from benchmarks.versions import server_versions


def output_path(out: str) -> Path:
    """Where --out writes (`benchmarks.args.output_file`): a .json path, or ingest_manual.json in a folder."""
    return output_file(out, "ingest_manual.json")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ingest_manual", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--manual", default=None, help="folder of the manual's *.html (default: download)")
    ap.add_argument("--prefix", default="pg15_")
    ap.add_argument("--fresh", action="store_true", help="drop this prefix's tables first")
    ap.add_argument("--out", default="benchmarks/results/ingest_manual.json",
                    help="the result file (*.json), or a folder to write ingest_manual.json into, as the other "
                         "benchmarks' --out (default benchmarks/results/ingest_manual.json)")
    args = ap.parse_args(argv)
    out = output_path(args.out)

    import torch

    from onetrip.connection import connect
    from onetrip.embedders import SentenceTransformerEmbedder
    from onetrip.ingest import ingest_paths
    from onetrip.layout import Layout
    from onetrip.schema import init_schema

    try:
        html = find_manual(args.manual)
    except FileNotFoundError as e:
        ap.error(str(e))
    pages = sorted(html.glob("*.html"))
    layout = Layout(prefix=args.prefix)
    with connect(args.dsn) as conn:  # before the model loads: a DSN that does not answer fails at once
        embedder = SentenceTransformerEmbedder()
        if args.fresh:
            from onetrip.schema import drop_schema

            drop_schema(conn, layout)
        init_schema(conn, layout)
        t0 = time.perf_counter()
        report = ingest_paths(conn, [html], layout=layout, embedder=embedder, force=args.fresh)
        wall = time.perf_counter() - t0
        n_sections = conn.execute(f"SELECT count(*) FROM {layout.tables['sections']}").fetchone()[0]
        server = server_versions(conn)
    result = {
        "pages": len(pages), "wall_seconds": round(wall, 1), "sections_written": report.sections,
        "sections_stored": n_sections, **report.as_dict(),
        "sections_per_second": round(report.sections / wall, 1) if wall else None,
        "model": embedder.name, "torch_threads": torch.get_num_threads(), "cores": os.cpu_count(),
        "python": platform.python_version(), "server": server, "date": time.strftime("%Y-%m-%d"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "failed"}, indent=2))
    for f in report.failed:
        print("failed:", f)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "benchmarks.ingest_manual"))
