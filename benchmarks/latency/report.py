"""Summaries, Markdown tables and plots for the latency benchmark's results.

Works on the JSON document ``run.py`` writes (one per corpus size), so the
table (.md) and the plot (.png) can be rebuilt later from a checked-in result:

    python -m benchmarks.latency.report benchmarks/results/latency_n100000_k10.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from onetrip.layout import Layout

VARIANT_ORDER = ("A", "B", "C", "C2", "D", "E", "F", "Af", "G", "H")  # each one that ran: table, counts, plot
RATIOS = (("B", "A"), ("C", "B"), ("C2", "B"), ("D", "B"), ("E", "B"), ("F", "A"), ("G", "Af"), ("H", "B"))
COLORS = {"A": "#7f7f7f", "B": "#d62728", "C": "#1f77b4", "C2": "#17becf", "D": "#9467bd", "E": "#2ca02c",
          "F": "#ff7f0e", "Af": "#bcbd22", "G": "#8c564b", "H": "#e377c2"}



def corpus_title(doc: dict[str, Any]) -> str:
    """"10,000 sections" for a synthetic corpus, "PostgreSQL 15 manual (9,421 sections)" for the real one."""
    c = doc["corpus"]
    if c.get("corpus") == "manual":
        return f"PostgreSQL 15 manual ({c['sections']:,} sections)"
    return f"{c['sections']:,} sections"

def percentile(xs: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method), p in [0, 100]."""
    if not xs:
        return math.nan
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50": percentile(xs, 50),
        "p95": percentile(xs, 95),
        "p99": percentile(xs, 99),
        "mean": statistics.fmean(xs) if xs else math.nan,
        "min": min(xs) if xs else math.nan,
        "max": max(xs) if xs else math.nan,
    }


def ratios(level: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Ratios between variants at one RTT level, all from the same interleaved run.

    ``p50``: ratio of the medians; ``p95``: ratio of the 95th percentiles;
    ``paired_median``: median over queries of t_x(q) / t_y(q) (both ran on the
    same query, back to back in random order). All three over the queries both
    variants ran: E runs the first ``e_queries_per_level`` only, and E/B had
    divided E's median over those by B's over all (a benchmark runner's review:
    89 against 59 on the same queries, in a 5,000-section run at +1 ms).
    """
    out: dict[str, dict[str, float]] = {}
    raw = level["raw_ms"]
    for x, y in RATIOS:
        if x not in raw or y not in raw:
            continue
        both = [(a, b) for a, b in zip(raw[x], raw[y]) if a is not None and b is not None]
        xs, ys = [a for a, _ in both], [b for _, b in both]
        paired = [a / b for a, b in both if b > 0]
        out[f"{x}/{y}"] = {
            "p50": percentile(xs, 50) / percentile(ys, 50) if both else math.nan,
            "p95": percentile(xs, 95) / percentile(ys, 95) if both else math.nan,
            "paired_median": statistics.median(paired) if paired else math.nan,
        }
    return out


#: variants that send several statements per query (the rest send one)
MULTI_STATEMENT = frozenset({"C", "C2", "D", "E"})


def by_preceding(level: dict[str, Any], names: tuple[str, ...] = ("A", "B", "F")) -> dict[str, Any] | None:
    """p50 of each variant split by what ran just before it on the same query.

    Tests whether the many-statement variants (C, C2, D, E), interleaved between
    A and B, are what lifts B/A in the all-variant run: if they were, B/A over
    the queries where both A and B followed a one-statement variant would be
    lower. None when the level has no recorded order.
    """
    order, raw = level.get("order"), level["raw_ms"]
    if not order or any(n not in raw for n in names):
        return None

    def after_multi(i: int, name: str) -> bool:
        o = order[i]
        j = o.index(name)
        return j > 0 and o[j - 1] in MULTI_STATEMENT

    out: dict[str, Any] = {}
    for n in names:
        one = [raw[n][i] for i in range(len(order)) if not after_multi(i, n)]
        multi = [raw[n][i] for i in range(len(order)) if after_multi(i, n)]
        out[n] = {"after_one_statement_p50": statistics.median(one) if one else math.nan, "n_one": len(one),
                  "after_multi_statement_p50": statistics.median(multi) if multi else math.nan,
                  "n_multi": len(multi)}
    base = names[0]
    for n in names[1:]:
        clean = [i for i in range(len(order)) if not after_multi(i, base) and not after_multi(i, n)]
        out[f"{n}/{base}"] = {
            "both_after_one_statement_p50": statistics.median(raw[n][i] for i in clean)
            / statistics.median(raw[base][i] for i in clean) if clean else math.nan,
            "n": len(clean)}
    return out


def by_preceding_markdown(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for lv in doc["levels"]:
        r = by_preceding(lv)
        if r is None:
            continue
        if not lines:
            lines = ["", "By the variant that ran just before, on the same query (p50 in ms after a one-statement "
                     "variant / after one of C, C2, D, E; B/A and F/A over the queries where both followed a "
                     "one-statement variant, next to the whole run's):", "",
                     "| added RTT | A | B | F | B/A both after one statement (whole run) | F/A likewise (whole run) |",
                     "|---|---|---|---|---|---|"]
        cells = " | ".join(f"{_f(r[n]['after_one_statement_p50'])} / {_f(r[n]['after_multi_statement_p50'])}"
                           for n in ("A", "B", "F"))
        ratio_cells = " | ".join(
            f"{_f(r[x]['both_after_one_statement_p50'])} (n={r[x]['n']}; {_f(lv['ratios'][x]['p50'])})"
            for x in ("B/A", "F/A"))
        lines.append(f"| {lv['added_rtt_ms']:g} ms | {cells} | {ratio_cells} |")
    return lines


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def _short(sql: str, n: int = 28) -> str:
    one = " ".join(sql.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _stmt_cell(counts: dict[str, Any] | None, name: str) -> str:
    if not counts or name not in counts:
        return "–"
    c = counts[name]
    per = c.get("per_query") or []
    if not per:
        return "–"
    lo, hi = min(per), max(per)
    mean = statistics.fmean(per)
    return f"{lo}" if lo == hi else f"{mean:.1f} ({lo}–{hi})"


def variant_label(doc: dict[str, Any], v: str) -> str:
    """A variant's label with its statements per query counted at the server (the table's column heading)."""
    cell = _stmt_cell((doc.get("statement_counts") or {}).get("variants", {}), v)
    return doc["variants"][v]["label"] + ("" if cell == "–" else f" [{cell} stmts/query]")


def rtt_axis_label(doc: dict[str, Any]) -> str:
    """The plot's x-axis label: added RTT, and each level's achieved RTT (the proxy's SELECT 1 p50)."""
    achieved = [(lv.get("rtt") or {}).get("median_ms") for lv in doc["levels"]]
    if any(a is None for a in achieved):
        return "added network RTT (ms, delay proxy)"
    return ("added network RTT (ms, delay proxy)\nachieved (SELECT 1 p50 through it): "
            + " / ".join(f"{a:.2f}" for a in achieved) + " ms")


def queries_line(info: dict[str, Any], timed: int) -> str:
    """Where the manual's queries came from: the --questions file first, then heading questions."""
    if not info.get("found"):
        return (f"Queries: heading questions only ('How do I use <heading>?'): the questions file "
                f"`{info.get('questions_file')}` was not found.")
    n_file = info["from_file"]
    return (f"Queries: the first {min(n_file, timed)} of the {timed} timed queries are the questions of "
            f"`{info['questions_file']}`, the rest heading questions ('How do I use <heading>?').")


def hnsw_index(corpus: dict[str, Any]) -> str:
    """The corpus's HNSW build parameters: the result's name does not carry them (1M was built with
    ef_construction 200), so the table says them. Older results: read from the table prefix (``_efc200``)."""
    prefix = corpus.get("layout_prefix") or ""
    found = {key: re.search(rf"_{tag}(\d+)(?:_|$)", prefix)
             for key, tag in (("hnsw_m", "m"), ("hnsw_ef_construction", "efc"))}
    default = {"hnsw_m": Layout.hnsw_m, "hnsw_ef_construction": Layout.hnsw_ef_construction}
    value = {k: corpus.get(k, int(found[k].group(1)) if found[k] else default[k]) for k in default}
    return f"HNSW m={value['hnsw_m']}, ef_construction={value['hnsw_ef_construction']}"


def markdown(doc: dict[str, Any]) -> str:
    """The Markdown report for one corpus size."""
    meta = doc["meta"]
    k = meta["k"]
    variants = [v for v in VARIANT_ORDER if v in doc["variants"]]
    lines: list[str] = []
    lines.append(f"## Latency, {corpus_title(doc)}, k={k}")
    lines.append("")
    lines.append(
        f"{meta['date']}; {meta['machine']['cores']} cores; PostgreSQL {meta['versions']['postgresql']}, "
        f"pgvector {meta['versions']['pgvector']}, psycopg {meta['versions']['psycopg']}; "
        f"{doc['queries_per_level']} queries per RTT level (interleaved, random order per query), "
        f"{doc['warmup_per_level']} warm-up queries per level; psycopg prepare_threshold="
        f"{meta['prepare_threshold']} (default: every statement runs prepared after warm-up); "
        f"{hnsw_index(doc['corpus'])}, hnsw.ef_search={meta['server'].get('hnsw.ef_search')}; "
        f"proxy: {meta['proxy']}."
    )
    lines.append("")
    lines.append("A, C, C2 and D run with the server's pgvector settings. B, F, G and H run as `Retriever` runs, "
                 "with `hnsw.iterative_scan = relaxed_order` and `hnsw.max_scan_tuples = 20000` set once per "
                 "connection, so filtered searches still return k rows; what that costs an unfiltered query is "
                 "the `hnsw.iterative_scan` column of `python -m benchmarks.latency.cost_split` "
                 "(benchmarks/results/cost_split.md).")
    if "E" in doc["variants"] and doc.get("e_queries_per_level") not in (None, doc["queries_per_level"]):
        lines.append(f"E ran on the first {doc['e_queries_per_level']} queries of each level only.")
    lines.append("")
    lines.append("Latency per query in ms, p50 / p95 / p99 (client wall time: send, server, receive, map to objects)"
                 + ("; load avg: the machine's 1-minute load average at the end of the level (2 cores; other "
                    "processes' work shows here)." if any("loadavg_end" in lv for lv in doc["levels"]) else "."))
    lines.append("")
    with_load = any("loadavg_end" in lv for lv in doc["levels"])
    head = ("| added RTT | achieved RTT p50 | " + ("load avg | " if with_load else "")
            + " | ".join(variant_label(doc, v) for v in variants) + " |")
    lines.append(head)
    lines.append("|" + "---|" * (2 + with_load + len(variants)))
    for lv in doc["levels"]:
        rtt = lv["rtt"]
        cells = []
        for v in variants:
            s = lv["stats"].get(v)
            cells.append("–" if not s else f"{_f(s['p50'])} / {_f(s['p95'])} / {_f(s['p99'])}")
        load = ""
        if with_load:
            la = lv.get("loadavg_end")
            load = f"{_f(la[0], 1)} | " if la else "– | "
        lines.append(
            f"| {lv['added_rtt_ms']:g} ms | {_f(rtt['median_ms'], 3)} ms (+{_f(rtt.get('added_median_ms'), 3)}) | "
            + load + " | ".join(cells) + " |"
        )
    lines.append("")
    ratio_names = [f"{x}/{y}" for x, y in RATIOS if x in doc["variants"] and y in doc["variants"]]
    lines.append("Ratios of p50 latencies (same run; in brackets: median of per-query paired ratios).")
    lines.append("")
    lines.append("| added RTT | " + " | ".join(ratio_names) + " |")
    lines.append("|" + "---|" * (1 + len(ratio_names)))
    for lv in doc["levels"]:
        r = lv["ratios"]
        lines.append(
            f"| {lv['added_rtt_ms']:g} ms | "
            + " | ".join(f"{_f(r[x]['p50'])} ({_f(r[x]['paired_median'])})" if x in r else "–" for x in ratio_names)
            + " |"
        )
    lines.extend(by_preceding_markdown(doc))
    lines.append("")
    counts = doc.get("statement_counts") or {}
    lines.append("Statements per query counted at the server (`log_statement = all`, that backend's log lines), "
                 "round trips by construction:")
    lines.append("")
    lines.append("| variant | statements/query (server) | expected (client) | round trips |")
    lines.append("|---|---|---|---|")
    per_variant = counts.get("variants", {})
    for v in variants:
        c = per_variant.get(v, {})
        exp = c.get("expected") or []
        exp_s = "–" if not exp or any(e is None for e in exp) else (
            f"{min(exp)}" if min(exp) == max(exp) else f"{statistics.fmean(exp):.1f} ({min(exp)}–{max(exp)})")
        lines.append(f"| {doc['variants'][v]['label']} | {_stmt_cell(per_variant, v)} | {exp_s} | "
                     f"{doc['variants'][v].get('round_trips', '–')} |")
    if counts.get("unavailable"):
        lines.append("")
        lines.append(f"Statement counting unavailable: {counts['unavailable']}")
    if "E" in per_variant and per_variant["E"].get("kinds"):
        kinds = ", ".join(f"{k} {v}" for k, v in per_variant["E"]["kinds"].items())
        lines.append("")
        lines.append(f"E's statements over {len(per_variant['E']['per_query'])} counted queries, by kind: {kinds}.")
    lines.append("")
    checks = doc["checks"]
    lines.append(
        f"Content check: B, C, C2 and D returned identical hits, parents and neighbors for "
        f"{checks['identical_queries']} of {checks['compared_queries']} query runs"
        + (f" (MISMATCHES: {len(checks['mismatches'])})" if checks["mismatches"] else "") + "."
    )
    if "E" in doc["variants"] and checks.get("e_overlap"):
        e = checks["e_overlap"]
        lines.append(
            f"E vs B: mean hit overlap {_f(e['mean_overlap'] * 100, 1)}% (min {_f(e['min_overlap'] * 100, 0)}%), "
            f"parent/prev/next ids equal for {_f(e['related_equal_fraction'] * 100, 1)}% of the common hits."
        )
    c = doc["corpus"]
    load = c.get("load", {})
    reused = " (reused by this run; times of the run that loaded it)" if load.get("reused") else ""
    lines.append(
        f"Corpus: {c['sections']:,} sections in {c['documents']:,} documents{reused}; "
        f"binary COPY {_f(load.get('copy_s'), 1)} s, HNSW build {_f(load.get('index_build_s'), 1)} s "
        f"(maintenance_work_mem={load.get('maintenance_work_mem') or '–'}), VACUUM ANALYZE {_f(load.get('analyze_s'), 1)} s."
        + (f" Index: `{load['hnsw_indexdef']}`." if load.get("hnsw_indexdef") else "")
    )
    if c.get("queries"):
        lines.append(queries_line(c["queries"], doc["queries_per_level"]))
    el = doc.get("e_load")
    if el:
        reused = " (reused; times of the run that loaded them)" if el.get("reused") else ""
        lines.append(f"LlamaIndex tables{reused}: PGVectorStore.add + PostgresDocumentStore.add_documents "
                     f"{_f(el.get('load_s'), 1)} s, HNSW build {_f(el.get('index_build_s'), 1)} s.")
    if doc.get("e_error"):
        lines.append("")
        lines.append(f"E did not run: {doc['e_error']}")
    diag = doc.get("diagnostics")
    if diag:
        lines.extend(diagnostics_markdown(diag))
    lines.append("")
    return "\n".join(lines)


def diagnostics_markdown(diag: dict[str, Any]) -> list[str]:
    """Where B's time over A goes: server planning and execution, result size, fetch and mapping."""
    lines: list[str] = []
    lines.append("")
    lines.append("Where B's time over A goes (direct connection, no proxy; medians over "
                 f"{diag.get('n')} queries):")
    lines.append("")
    cols = [c for c in ("A", "B", "B_literal_k") if c in diag]
    names = {"A": "A", "B": "B", "B_literal_k": "B with every LIMIT written into the SQL (diagnostic, not a variant)"}
    lines.append("| | " + " | ".join(names[c] for c in cols) + " |")
    lines.append("|" + "---|" * (1 + len(cols)))
    for key, label in (
        ("planning_ms", "server planning time, ms (EXPLAIN ANALYZE: a fresh custom plan)"),
        ("execution_ms", "server execution time, ms (EXPLAIN ANALYZE)"),
        ("fetch_ms", "execute + fetch, ms (prepared statement, steady state, dict rows)"),
        ("map_ms", "Python: rows -> Hit objects, ms"),
        ("result_bytes", "result size, bytes"),
        ("generic_plans", "executions that reused a generic plan"),
        ("custom_plans", "executions that planned afresh (custom plan)"),
    ):
        digits = 0 if key in ("result_bytes", "generic_plans", "custom_plans") else 3
        lines.append(f"| {label} | " + " | ".join(_f(diag[c].get(key), digits) for c in cols) + " |")
    if diag.get("prepared"):
        lines.append("")
        lines.append("Prepared statements after the run (pg_prepared_statements on the timed connections): "
                     + "; ".join(f"{p['variant']} `{_short(p['statement'])}`: {p['generic_plans']} generic / "
                                 f"{p['custom_plans']} custom plans" for p in diag["prepared"]) + ".")
    return lines


def diagnostics_document_markdown(doc: dict[str, Any]) -> str:
    """The report of a --only-diagnostics run."""
    meta = doc["meta"]
    lines = [f"## B vs A cost breakdown and fix preview, {corpus_title(doc)}, k={meta['k']}", "",
             f"{meta['date']}; {meta['machine']['cores']} cores; PostgreSQL {meta['versions']['postgresql']}, "
             f"pgvector {meta['versions']['pgvector']}, psycopg {meta['versions']['psycopg']}."]
    lines.extend(diagnostics_markdown(doc["diagnostics"]))
    lines.append("")
    return "\n".join(lines)


def figure(doc: dict[str, Any]) -> Any:
    """The plot's matplotlib Figure: p50 latency vs added RTT, one line per variant (log y), p95 as a band.

    As the Markdown table: the x-axis label gives each level's achieved RTT, each legend entry the
    variant's statements per query counted at the server. The title is centred over the axes, which
    the legend leaves narrow: on one line, the manual's ran off the figure's left edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = doc["meta"]["k"]
    fig, ax = plt.subplots(figsize=(11.5, 5.0), dpi=120)
    xs = [lv["added_rtt_ms"] for lv in doc["levels"]]
    for v in VARIANT_ORDER:
        if v not in doc["variants"]:
            continue
        p50 = [lv["stats"].get(v, {}).get("p50", math.nan) for lv in doc["levels"]]
        p95 = [lv["stats"].get(v, {}).get("p95", math.nan) for lv in doc["levels"]]
        color = COLORS.get(v)
        ax.plot(xs, p50, marker="o", color=color, label=variant_label(doc, v), linewidth=2 if v == "B" else 1.5)
        ax.fill_between(xs, p50, p95, color=color, alpha=0.12, linewidth=0)
    ax.set_yscale("log")
    ax.set_xlabel(rtt_axis_label(doc))
    ax.set_ylabel("latency per query (ms, log scale)")
    ax.set_title(f"Retrieval with parent + ±1 neighbors\n{corpus_title(doc)}, k={k}; line: p50, band: p50–p95")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xticks(xs)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def plot(doc: dict[str, Any], path: Path) -> Path:
    """Writes :func:`figure` to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = figure(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.latency.report",
        description="Rebuild RESULT.md and RESULT.png from result JSON written by benchmarks.latency.run, "
                    "without measuring anything.")
    ap.add_argument("results", nargs="+", metavar="RESULT.json")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="write the .md and .png into DIR (default: beside each JSON file)")
    args = ap.parse_args(argv)
    missing = [a for a in args.results if not Path(a).is_file()]
    if missing:
        ap.error(f"no such result file: {', '.join(missing)}")
    out = None if args.out is None else Path(args.out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    docs = []
    for p in map(Path, args.results):  # all read and checked before anything is written
        try:
            doc = json.loads(p.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            ap.error(f"{p}: not JSON ({e})")
        if not isinstance(doc, dict) or ("variants" not in doc and doc.get("kind") != "diagnostics"):
            ap.error(f"{p}: not a result of benchmarks.latency.run (it has no 'variants')")
        docs.append((p, doc))
    for p, doc in docs:
        target = p if out is None else out / p.name
        if doc.get("kind") == "diagnostics":
            md = diagnostics_document_markdown(doc)
        else:
            md = markdown(doc)
            plot(doc, target.with_suffix(".png"))
        target.with_suffix(".md").write_text(md)
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
