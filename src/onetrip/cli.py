"""The onetrip command: the library's features as subcommands (README, "CLI", maps each to its function).

    onetrip init                 create tables and indexes (idempotent)          init_schema
    onetrip ingest PATH...       parse, embed and load documents                 ingest_paths
    onetrip search "question"    top-K hits with parent and neighbors            Retriever.search
      several questions            ... all in one statement                      Retriever.search_many
      --assemble                   one budgeted context                          Retriever.assemble
      --explain                    the statement, its binds and its plan         Retriever.explain(_many)
    onetrip refresh-term-stats   recount lexical word weights, merge GIN pending refresh_term_stats
    onetrip documents            list the stored documents                       list_documents
    onetrip delete DOC_ID...     delete documents and their sections             delete_document
    onetrip prune                delete archived revisions                       store.prune_history
    onetrip sql render           write the PostgreSQL / Oracle / Citus SQL editions
    onetrip demo                 the README's main job, on the embedded server
    onetrip serve                the HTTP service                                http_service.create_app
    onetrip embedded             run the embedded PostgreSQL, print its DSN and a psql line, until stopped

Every command but `embedded` takes --schema and --prefix, and all but `sql render` and `embedded` --dsn
(default $ONETRIP_DSN, else the embedded server); ingest, search and serve take --model
(default $ONETRIP_MODEL, else the bundled all-MiniLM-L6-v2). Errors are printed as one line naming
the cause, with exit status 2 (bad input), 3 (ingest: a file failed; delete: an
id was not stored; prune --doc-id: no archived revisions) or 1 (anything else). Ctrl-C exits 130 and SIGTERM
143 (`serve`: 0, stopped as asked), both after unwinding, so the embedded server is stopped (`sigterm_unwinds`).
"""

from __future__ import annotations

import argparse
import json
import re
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import OnetripError

if TYPE_CHECKING:
    from .explain import Explained

DEMO_QUESTIONS = [
    "Is tennis elbow covered by the travel insurance?",
    "How often should I descale the espresso machine?",
    "Can help desk staff work from home?",
]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: $ONETRIP_DSN, else the embedded server)")
    p.add_argument("--schema", default=None, help="schema of onetrip's tables (default: search_path)")
    p.add_argument("--prefix", default="", help="table name prefix (default: none)")


def _pgvector_settings(p: argparse.ArgumentParser) -> None:
    """The per-connection pgvector settings of `Retriever` / `make_async_pool`, for `search` and `serve`."""
    g = p.add_argument_group("pgvector settings (set once per connection)")
    g.add_argument("--ef-search", type=int, default=None,
                   help="hnsw.ef_search, the HNSW candidate list (default: the server's, 40 unless changed); "
                        "raise it for recall on large tables or with large -k")
    g.add_argument("--iterative-scan", choices=["relaxed_order", "strict_order", "off", "server"],
                   default="relaxed_order",
                   help="hnsw.iterative_scan (default relaxed_order: filtered searches still return k hits); "
                        "server: leave the server's setting (iterative_scan=None)")
    g.add_argument("--max-scan-tuples", type=int, default=20000,
                   help="hnsw.max_scan_tuples, where an iterative scan stops (default 20000); raise it when a "
                        "selective filter returns fewer than k hits")


def _given(value: str) -> str:
    """An argparse type refusing "" (exit 2): an unset variable in `--out "$DIR"` had written to the current
    folder, in `--model "$MODEL"` embedded with the default model (found by review)."""
    if not value:
        raise argparse.ArgumentTypeError("empty (an unset variable?): give a folder, or leave the option out for "
                                         "its default")
    return value


def _model_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="FOLDER", type=_given,
                   help="sentence-transformers model folder to embed with (default: $ONETRIP_MODEL, else the "
                        "bundled all-MiniLM-L6-v2); ingest records its name, and search must use the same")


def _embedder(args: argparse.Namespace) -> Any:
    """The embedder --model / $ONETRIP_MODEL names (loaded on first use), else the bundled model.

    Commands without --model (the demo) always use the bundled model.
    """
    from .embedders import SentenceTransformerEmbedder

    if not hasattr(args, "model"):
        return SentenceTransformerEmbedder()
    folder = args.model or os.environ.get("ONETRIP_MODEL") or None
    if folder is None:
        return SentenceTransformerEmbedder()
    if not Path(folder).expanduser().is_dir():
        source = "--model" if args.model else "$ONETRIP_MODEL"
        raise ValueError(f"{source} {folder!r} is not a folder: give the folder of a sentence-transformers "
                         "model saved on this machine (models are never downloaded)")
    return SentenceTransformerEmbedder(str(Path(folder).expanduser()))


def _search_embedder(args: argparse.Namespace) -> Any:
    """`_embedder`, except for lexical search, which embeds nothing (so a bad --model does not stop it)."""
    return None if args.mode == "lexical" else _embedder(args)


def _settings_of(args: argparse.Namespace) -> dict[str, Any]:
    return {"ef_search": args.ef_search,
            "iterative_scan": None if args.iterative_scan == "server" else args.iterative_scan,
            "max_scan_tuples": args.max_scan_tuples}


NO_RECOUNT_HELP = ("leave the lexical word weights (term_stats) as they are: the next ingest run, or "
                   "`onetrip refresh-term-stats`, recounts them (it reads every section: ~6 s at a million)")


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (the README's promise for every CLI error), not after the
    whole usage block (16 lines for `search`); subcommands' parsers are of this class too (add_subparsers)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse's, with arguments no parser took named by the subcommand they follow (argparse names
        the top parser, whose --help does not list the subcommand's options)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(ns).error(f"unrecognized arguments: {' '.join(extras)}")
        return ns

    def _chosen(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost subcommand's parser ``ns`` was parsed by (``onetrip sql render``'s, ...)."""
        parser: argparse.ArgumentParser = self
        while True:
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            chosen = sub.choices.get(getattr(ns, sub.dest, None)) if sub is not None else None
            if chosen is None:
                return parser
            parser = chosen


#: Commands whose name is shorter than the library call they make: each also answers to that call's name
#: (`onetrip list-documents` is `onetrip documents`, as `list_documents` is what it runs).
LIBRARY_NAMES = {"init": "init-schema", "ingest": "ingest-paths", "documents": "list-documents",
                 "delete": "delete-document", "prune": "prune-history"}


#: Retriever calls that `search` makes with a flag or several questions, each also a command of its own name:
#: `onetrip assemble "q"` is `search "q" --assemble`, `explain` is `search --explain`, `search-many` is `search`
#: with several questions (one too: search_many's output, a list of {query, hits}), `explain-many` is
#: `search-many --explain` (explain_many, for one question too)
SEARCH_CALLS = ("search-many", "assemble", "explain", "explain-many")

#: what `search --explain` / `explain --kind` take: Retriever.explain's kinds
EXPLAIN_KINDS = ("analyze", "plan", "generic")


def _as_search(args: argparse.Namespace) -> argparse.Namespace:
    """`search`'s arguments for a command named after the Retriever call it makes (SEARCH_CALLS).

    `search-many` is search_many whatever the number of questions (``args.many``): with one question it had
    been `search`, whose --json shape (a list of hits) is not search_many's (a list of {query, hits}).
    """
    args.many = args.command in ("search-many", "explain-many")
    if args.command == "assemble":
        args.assemble = True
    elif args.command in ("explain", "explain-many") and args.explain is None:
        if len(args.query) > 1 and args.query[-1] in EXPLAIN_KINDS:
            # `onetrip explain "q" generic` had explained two questions, "q" and "generic", by EXPLAIN ANALYZE
            raise ValueError(f"{args.query[-1]!r} is read as a second question; for that kind of plan give "
                             f"--kind {args.query[-1]} (with --kind given, every word is a question)")
        args.explain = "analyze"
    args.command = "search"
    return args


def _command(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand that also answers to its library call's name; either way ``args.command`` is ``name``."""
    p = sub.add_parser(name, aliases=[LIBRARY_NAMES[name]], **kwargs)
    p.set_defaults(command=name)
    return p


def build_parser() -> _Parser:
    parser = _Parser(prog="onetrip", description=__doc__.split("\n\n")[0])
    from . import __version__

    parser.add_argument("--version", action="version", version=f"onetrip {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(sub, "init", help="create the schema (safe to run twice)")
    _common(p)
    p.add_argument("--dim", type=int, default=None,
                   help="embedding dimension (default: the existing table's, else 384, MiniLM)")
    p.add_argument("--recreate", action="store_true",
                   help="drop onetrip's tables (and their data) first, e.g. after an incompatible upgrade; "
                        "made again with the dimension, vector type and partitions they had, unless flags say "
                        "otherwise")
    _layout_options(p)
    # not given: the existing table's (`cmd_init`); a plain `init` on halfvec or 768-d tables had been refused
    p.set_defaults(partitions=None, vector_type=None)

    p = _command(sub, "ingest", help="ingest Markdown, HTML, reStructuredText and text files or folders")
    _common(p)
    p.add_argument("paths", nargs="+", help="files or folders")
    p.add_argument("--force", action="store_true", help="re-ingest even when the content hash is unchanged")
    p.add_argument("--collection", default="default", help="collection (tenant) of these documents")
    p.add_argument("--acl", default=None, help="comma-separated principals allowed to read (default: everyone)")
    p.add_argument("--keep-history", action="store_true", help="archive superseded revisions (audit)")
    p.add_argument("--doc-id-prefix", default="", metavar="PREFIX",
                   help="put PREFIX before each document id (the path relative to the folder given), so that "
                        "files of the same relative path from two folders or tenants stay two documents")
    p.add_argument("--no-recount", action="store_true",
                   help=f"{NO_RECOUNT_HELP}, for frequent small runs into a large table")
    p.add_argument("--delete-missing", action="store_true",
                   help="delete the stored documents whose files, under a folder given, are gone (renamed, moved "
                        "or deleted); without it they are listed and stay searchable")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _model_option(p)

    p = sub.add_parser("search", aliases=list(SEARCH_CALLS), help="search and print hits with parent and neighbors "
                       "(search-many: search_many's output, for one question too; assemble: as --assemble; "
                       "explain: as --explain; explain-many: search-many's statement explained)")
    _common(p)
    p.set_defaults(many=False)  # `search-many`: True (_as_search)
    p.add_argument("query", nargs="+",
                   help="the question; several questions are searched in ONE statement "
                        "(Retriever.search_many), with -k, --mode, the parent/neighbor flags and the filters")
    p.add_argument("-k", type=int, default=None,
                   help="number of hits (default 5; with --assemble, one per 250 tokens of --max-tokens)")
    p.add_argument("--no-parent", action="store_true", help="do not fetch parent sections")
    p.add_argument("--no-neighbors", action="store_true", help="do not fetch previous/next sections")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    # --kind: Retriever.explain's keyword, so `onetrip explain q --kind plan` is explain(q, kind="plan")
    p.add_argument("--explain", "--kind", nargs="?", const="analyze", choices=EXPLAIN_KINDS,
                   default=None,
                   help="print the statement this search sends (several queries: search_many's), its binds and "
                        "its plan instead of the results (--kind is the same option, by explain()'s keyword): "
                        "analyze (default; EXPLAIN ANALYZE, BUFFERS: runs it once, read-only), plan (EXPLAIN), "
                        "generic (the plan for any values, as a prepared statement may reuse it; PostgreSQL 16+)")
    p.add_argument("--mode", choices=["auto", "dense", "lexical", "hybrid"], default="auto",
                   help="dense: embedding similarity; lexical: the query's words, rare ones weighted most; "
                        "hybrid: both, fused by reciprocal rank; auto (default): hybrid, as the query is text")
    p.add_argument("--hybrid", metavar="JSON",
                   help="the lexical side's and the fusion's options (onetrip.HybridOptions) as a JSON object, "
                        "e.g. '{\"tf_weight\": 1, \"candidates\": 100}'; as HTTP's \"hybrid\"")
    _model_option(p)
    g = p.add_argument_group("filters (applied to hits and to every added section)")
    g.add_argument("--collection", action="append", help="only this collection (repeatable)")
    g.add_argument("--principal", action="append", help="the caller's principal/group (repeatable)")
    g.add_argument("--public-only", action="store_true",
                   help="only sections readable by everyone (no ACL): Filters(principals=()); not with --principal")
    g.add_argument("--doc-id", action="append", help="only this document (repeatable)")
    g.add_argument("--source-prefix", help="only documents whose source URI starts with this")
    g.add_argument("--metadata", help="only documents whose metadata contains this JSON object")
    _pgvector_settings(p)
    a = p.add_argument_group(
        "assembled context (--assemble)",
        "-k defaults to one hit per 250 tokens of --max-tokens. Expansion: with none of the flags below, the "
        "parent and the section subtree (onetrip.CONTEXT_DEFAULT); with any, parent + +/-1 neighbors changed by "
        "the flags given (onetrip.Expansion).")
    a.add_argument("--assemble", action="store_true", help="print one deduplicated, budgeted context")
    a.add_argument("--max-tokens", type=_budget, default=None, help="token budget (default 2000; none: no budget)")
    a.add_argument("--neighbors", type=int, default=None, help="neighbor window N")
    a.add_argument("--neighbor-scope", choices=["any", "parent"], default=None)
    a.add_argument("--ancestors", action="store_true", help="add the chain of ancestors")
    a.add_argument("--section", action=argparse.BooleanOptionalAction, default=None,
                   help="add the hit's whole section subtree")
    a.add_argument("--document", action="store_true", help="add whole documents under --document-max-tokens")
    a.add_argument("--document-max-tokens", type=int, default=None, help="document size gate (default 2000)")

    p = sub.add_parser("refresh-term-stats",
                       help="recount the words lexical and hybrid search weight by, and merge the word indexes' "
                            "pending entries (ingest does both itself)")
    _common(p)

    p = _command(sub, "documents", help="list the stored documents (revision, sections, tokens)")
    _common(p)
    p.add_argument("--collection", default=None, help="only this collection")
    p.add_argument("--principal", action="append",
                   help="only documents this principal/group may read, as search's --principal (repeatable; "
                        "without it: every document)")
    p.add_argument("--public-only", action="store_true",
                   help="only documents readable by everyone (no ACL): list_documents(principals=[]); "
                        "not with --principal")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="at most N documents (a page; default: all); when more follow, stderr says "
                        "'next page: --after=DOC_ID'")
    p.add_argument("--after", default=None, metavar="DOC_ID",
                   help="only documents whose doc_id sorts after this one (the previous page's last)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = _command(sub, "delete", help="delete documents and their sections (by doc_id, as `documents` lists them)")
    _common(p)
    p.add_argument("doc_ids", nargs="+", metavar="DOC_ID", help="document id(s)")
    p.add_argument("--keep-history", action="store_true", help="archive the deleted sections first (audit)")
    p.add_argument("--no-recount", action="store_true",
                   help=f"{NO_RECOUNT_HELP}; the deleted sections' words count until then")

    p = _command(sub, "prune", help="delete archived revisions")
    _common(p)
    p.add_argument("--keep", type=int, default=0, help="archived revisions to keep per document (default 0)")
    p.add_argument("--doc-id", help="prune this document's archived revisions only")

    p = sub.add_parser("sql", help="SQL editions for DBAs")
    sql_sub = p.add_subparsers(dest="sql_command", required=True)
    r = sql_sub.add_parser("render", help="write the rendered SQL editions")
    r.add_argument("--dialect", choices=["postgres", "oracle", "citus", "all"], default="all")
    _layout_options(r)
    r.add_argument("--dim", type=int, default=384)
    r.add_argument("--schema", default=None)
    r.add_argument("--prefix", default="")
    r.add_argument("--out", default="sql", type=_given, help="output folder (default: ./sql)")
    r.add_argument("--stdout", action="store_true", help="print instead of writing files")

    p = sub.add_parser("demo", help="ingest the bundled sample corpus (tables prefixed demo_) and answer sample questions")
    _common(p)
    p.set_defaults(prefix="demo_")
    for action in p._actions:  # the shared --prefix help says "default: none"
        if action.dest == "prefix":
            action.help = "table name prefix (default: demo_)"

    p = sub.add_parser("serve", help="serve search over HTTP (POST /search, /search_many, each with \"explain\"; "
                                     "GET /documents, /health, /stats, /openapi.json)",
                       description=SERVE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token", default=None,
                   help="bearer token required on every endpoint but /health (default: $ONETRIP_TOKEN; "
                        "prefer the variable, a flag shows in the process list)")
    p.add_argument("--max-body", type=int, default=64 * 1024, help="largest request body in bytes (default 65536)")
    p.add_argument("--max-k", type=int, default=50, help="largest k a request may ask for (default 50)")
    p.add_argument("--max-tokens-cap", type=int, default=16000,
                   help="largest token budget a request may ask for (default 16000)")
    _model_option(p)
    p.add_argument("--pool-size", type=int, default=10, help="database connections at most (default 10)")
    p.add_argument("--db-timeout", type=float, default=5.0,
                   help="seconds to wait for a database connection before answering 503 (default 5)")
    p.add_argument("--statement-timeout", type=float, default=10.0,
                   help="seconds a statement may run before the server cancels it and the request gets 503 "
                        "statement_timeout, so a search blocked by a lock does not pin its connection "
                        "(default 10; 0: no limit)")
    g = p.add_argument_group("principals (ACL): see above")
    g.add_argument("--principal", action="append", help="principal used for every request (repeatable)")
    g.add_argument("--trust-request-principals", action="store_true",
                   help="take principals from the request's \"principals\" field")
    g.add_argument("--no-acl", action="store_true", help="no ACL check at all (every row readable)")
    _pgvector_settings(p)
    p.add_argument("--application-name", default="onetrip-serve",
                   help="application_name of the pool's connections, as pg_stat_activity shows it")
    p.add_argument("--shutdown-timeout", type=float, default=5.0,
                   help="seconds a stop (SIGTERM, Ctrl-C) waits for open requests before it cancels them "
                        "(default 5)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-access-log", action="store_true", help="do not log each request")

    sub.add_parser("embedded", help="run the embedded PostgreSQL in the foreground and print how to connect "
                                    "(its DSN, a psql command line) until Ctrl-C or SIGTERM",
                   description=EMBEDDED_DESCRIPTION)
    return parser


def _layout_options(p: argparse.ArgumentParser) -> None:
    """The table layout choices of `onetrip.templates.Layout`, for `init` and `sql render`."""
    p.add_argument("--partitions", type=int, default=0,
                   help="hash-partition sections by doc_id into N partitions, each with its own HNSW index")
    p.add_argument("--vector-type", choices=["vector", "halfvec"], default="vector",
                   help="halfvec: 16-bit embeddings, about half the index size")
    # default None (Layout's 16 / 64): `init` tells a flag given from one left out
    p.add_argument("--hnsw-m", type=int, default=None, help="HNSW m (default 16, pgvector's)")
    p.add_argument("--hnsw-ef-construction", type=int, default=None,
                   help="HNSW ef_construction (default 64, pgvector's; 200 builds a higher-recall graph)")


def _layout(args: argparse.Namespace, dim: int = 384) -> Any:
    from .layout import Layout

    # the layout options exist on init and sql render only; other commands take Layout's defaults
    options = {k: getattr(args, k) for k in ("partitions", "vector_type", "hnsw_m", "hnsw_ef_construction")
               if getattr(args, k, None) is not None}
    return Layout(dim=dim, schema=args.schema, prefix=args.prefix, **options)


def hit_to_json(hit: Any) -> dict[str, Any]:
    """The --json shape of one hit (also used by the HTTP service)."""

    def related(rec: Any) -> dict[str, Any] | None:
        if rec is None:
            return None
        return {"section_id": rec.section_id, "sequence_index": rec.sequence_index,
                "heading_path": list(rec.heading_path), "content": rec.content, "revision": rec.revision}

    s = hit.section
    # revision: each record's, as the Python API and context passages give it (the JSON had left it out)
    return {
        "rank": hit.rank, "distance": hit.distance, "score": hit.score, "doc_id": s.doc_id, "section_id": s.section_id,
        "sequence_index": s.sequence_index, "heading_path": list(s.heading_path), "anchor": s.anchor,
        "content": s.content, "revision": s.revision, "parent": related(hit.parent), "prev": related(hit.prev),
        "next": related(hit.next),
    }


NOTHING_INGESTED = "is anything ingested? try `onetrip ingest PATH`"


def _no_hits_hint(filters: Any, mode: str) -> str:
    """Why a search came back empty, as far as its options tell: "is anything ingested?" alone had been printed
    for a search whose filters passed nothing, or whose lexical words matched nothing, on a full table."""
    principal = "public_only" if filters.principals == () else "principal"  # `_principals`: () is --public-only
    given = [f"--{name.replace('_', '-')}" for name, flag in (
        ("collection", filters.collections), (principal, filters.principals), ("doc_id", filters.doc_ids),
        ("source_prefix", filters.source_prefix), ("metadata", filters.metadata)) if flag is not None]
    if given:
        uri = ("; stored sources are URIs: a file's is file:///path" if filters.source_prefix is not None
               and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", filters.source_prefix) else "")
        return f"no section passed the filters ({', '.join(given)}){uri}, or nothing is ingested here"
    if mode == "lexical":
        return "no section holds a word of the query (lexical mode), or nothing is ingested here"
    return NOTHING_INGESTED


def _path(section: Any) -> str:
    """A section's heading path on one line, shown harmlessly (`_shown`)."""
    return _shown(" > ".join(section.heading_path), line=True)


def _print_hits(hits: list[Any], console: Any, hint: str = NOTHING_INGESTED) -> None:
    from rich.panel import Panel
    from rich.text import Text

    if not hits:
        console.print(f"no hits: {hint}", markup=False)
        return

    def snippet(text: str, n: int = 300) -> str:
        text = _shown(" ".join(text.split()))
        if not text:  # said, not an empty line after the colon; usually its subsections hold the text, but
            return "(a heading with no text of its own)"  # a leaf can be empty too (`<h2>` left open in HTML)
        return text if len(text) <= n else text[: n - 1] + "…"

    for hit in hits:
        s = hit.section
        body = Text()
        if hit.parent is not None:
            body.append("parent  ", style="bold cyan")
            body.append(_path(hit.parent) + "\n", style="cyan")
        if hit.prev is not None:
            body.append("prev    ", style="dim")
            body.append(f"{_path(hit.prev) or '(preface)'}: {snippet(hit.prev.content, 120)}\n",
                        style="dim")
        # the hit's own heading path leads its text, as prev/next do: in the panel's title alone a terminal of
        # 80 columns cut it to its first words, and the output no longer said which section was hit
        body.append("hit     ", style="bold")
        body.append(_path(s) or "(preface)", style="bold")
        body.append(": " + snippet(s.content) + "\n")
        if hit.next is not None:
            body.append("next    ", style="dim")
            body.append(f"{_path(hit.next) or '(preface)'}: {snippet(hit.next.content, 120)}",
                        style="dim")
        # lexical hits have no distance, dense ones no score; hybrid ones both, ranked by the score
        how = ", ".join(f"{name} {v:.4g}" for name, v in (("score", hit.score), ("distance", hit.distance))
                        if v is not None)
        # a Text, not a str: rich reads a str title as markup, and a doc id holding '[bold]' was shown
        # altered, one holding '[/]' ended the command in a MarkupError traceback
        title = Text(f"#{hit.rank}  ({how})  {_shown(s.doc_id, line=True)}")
        console.print(Panel(body, title=title, title_align="left"))


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_AND_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _shown(text: object, *, line: bool = False) -> str:
    """Text from documents, file names or a query as a terminal shows it harmlessly: C0 and C1 control characters
    as ``\\x1b``. An ESC from a page (``&#27;[2J`` in HTML) had cleared the screen, set the window title or the
    clipboard through `search` and `documents` (found by review). With ``line`` (a field of a one-line record:
    an id, a path) newlines and tabs too. --json keeps the text as stored (JSON escapes it)."""
    return (_CONTROLS_AND_BREAKS if line else _CONTROLS).sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _plain(text: str) -> Any:
    """``text`` as rich shows it literally (a query, a doc id): a str is read as markup."""
    from rich.text import Text

    return Text(text)


def _markup_escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def cmd_init(args: argparse.Namespace) -> int:
    from .connection import connect
    from .identifiers import quote_ident
    from .schema import drop_schema, existing_shape, hnsw_build_options, init_schema

    # names, HNSW options and a --dim given checked before connecting (or starting the embedded server); a --dim
    # past vector's 2000 with no --vector-type is checked again once the table's type is known
    given_type = args.vector_type
    if given_type is None and args.dim is not None and args.dim > 2000:
        args.vector_type = "halfvec"
    probe = _layout(args, 1 if args.dim is None else args.dim)
    args.vector_type = given_type
    with connect(args.dsn) as conn:
        # a flag left out keeps what the existing table has: "safe to run twice" without repeating the flags it
        # was made with (that had been a DimensionMismatchError), and --recreate makes again what it drops
        existing = existing_shape(conn, probe)
        for name in ("vector_type", "partitions"):
            if getattr(args, name) is None and existing is not None:
                setattr(args, name, getattr(existing, name))
        layout = _layout(args, args.dim if args.dim is not None else existing.dim if existing is not None else 384)
        if args.recreate:
            drop_schema(conn, layout)
        made = init_schema(conn, layout)
        # only flags given: a plain `init` on an index built with other options is not asking to change them
        asked = {"m": args.hnsw_m, "ef_construction": args.hnsw_ef_construction}
        kept = [(name, m, ef) for name, m, ef in hnsw_build_options(conn, layout)
                if any(v is not None and v != built for v, built in zip(asked.values(), (m, ef)))]
    parts = f", {made.partitions} partitions" if made.partitions else ""
    print(f"schema ready: {layout.tables['documents']}, {layout.tables['sections']} "
          f"({made.vector_type}({made.dim}){parts})")
    for name, m, ef in kept:
        index = f"{quote_ident(layout.schema)}.{quote_ident(name)}" if layout.schema else quote_ident(name)
        print(f"onetrip: note: kept the existing HNSW index {index} (m={m}, ef_construction={ef}); --hnsw-m and "
              "--hnsw-ef-construction apply when an index is built: DROP INDEX it and run init again to rebuild it",
              file=sys.stderr)
    return 0


def _ingest(args: argparse.Namespace, paths: list[str], force: bool, no_progress: bool,
            rebuild_outdated: bool = False) -> Any:
    """Ingest paths; with rebuild_outdated, tables from an older onetrip are dropped and rebuilt.

    Only the demo passes rebuild_outdated: its demo_ tables hold nothing but the
    bundled corpus, so rebuilding them loses nothing. Anyone else's tables get the
    SchemaMissingError that names `onetrip init --recreate`.
    """
    import psycopg
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .connection import connect
    from .errors import InputDocumentError, SchemaMissingError
    from .ingest import SUFFIXES, ingest_paths, is_there, plan_files, unreadable
    from .schema import drop_schema, hnsw_build_options, init_schema, missing_columns, read_layout

    doc_id = _doc_id_maker(getattr(args, "doc_id_prefix", ""))
    planned = plan_files(paths, doc_id)  # two files for one doc_id: refused before any table is made
    total = len(planned)
    missing = [p for p, _, _ in planned if not is_there(p)]  # (out of reach: there, reported failed by ingest)
    if planned and len(missing) == total:  # a typo: say so at once (exit 2), not after loading the model
        n = total - 1
        more = f" (nor the other {n} path{'s' if n > 1 else ''} given)" if n else ""
        raise InputDocumentError(str(missing[0]), f"{unreadable(missing[0])}{more}; nothing was ingested")
    if not planned:
        print(f"onetrip: note: no files to ingest in {', '.join(map(str, paths))} (read are "
              f"{', '.join(sorted(SUFFIXES))}; hidden files and folders are skipped)", file=sys.stderr)
    embedder = _embedder(args)
    console = Console(stderr=True)
    with connect(args.dsn) as conn:
        try:  # tables made by `onetrip init --vector-type/--partitions/--dim` are ingested into as they are
            layout = read_layout(conn, schema=args.schema, prefix=args.prefix)
            existed = True
        except SchemaMissingError:  # none yet (created below for the model's dimension), or an older onetrip's
            layout = _layout(args, embedder.dim)
            existed = False
        if rebuild_outdated and missing_columns(conn, layout):
            console.print(f"{layout.tables['sections']} predates this onetrip; rebuilding the demo tables",
                          markup=False)
            drop_schema(conn, layout)
        indexed = bool(hnsw_build_options(conn, layout)) if existed else True
        try:
            layout = init_schema(conn, layout)
        except psycopg.errors.InsufficientPrivilege:
            # a writer role (rows, not DDL) over tables an owner made had been refused with 'permission denied
            # for schema public' by init's CREATE ... IF NOT EXISTS: ingest into them as they are (one
            # transaction, rolled back: nothing was created); a role that cannot make missing tables still fails
            if not existed:
                raise
        if not indexed and (built := hnsw_build_options(conn, layout)):
            # the tables were there and their HNSW index was not (dropped for a bulk load, say): init's script
            # built it, with the defaults, since the options it had were dropped with it; say so
            name, m, ef = built[0]
            print(f"onetrip: note: {layout.tables['sections']} had no HNSW index; built {name} with m={m}, "
                  f"ef_construction={ef} before loading (to choose others: DROP INDEX it, then `onetrip init "
                  "--hnsw-m/--hnsw-ef-construction`; for a bulk load, load first: schema.sql's header)",
                  file=sys.stderr)
        with Progress(
            TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("docs"),
            TextColumn("{task.fields[sections]} sections, {task.fields[rate]:.1f}/s"),
            TimeElapsedColumn(), console=console, disable=no_progress or not console.is_terminal,
        ) as progress:
            task = progress.add_task("ingest", total=total, sections=0, rate=0.0)
            latest: list[Any] = []  # the report as the last file left it, for an interrupt's message

            def on_progress(path: str, rep: Any) -> None:
                latest[:] = [rep]
                done = rep.new + rep.changed + rep.unchanged + len(rep.failed)
                rate = rep.sections / rep.seconds if rep.seconds else 0.0
                progress.update(task, completed=done, sections=rep.sections, rate=rate)

            try:
                report = ingest_paths(conn, paths, layout=layout, embedder=embedder, force=force,
                                      on_progress=on_progress, doc_id=doc_id,
                                      collection=getattr(args, "collection", "default"),  # "" is refused
                                      acl=_acl(getattr(args, "acl", None)),
                                      keep_history=getattr(args, "keep_history", False),
                                      recount=not getattr(args, "no_recount", False),
                                      delete_missing=getattr(args, "delete_missing", False))
            except (KeyboardInterrupt, Terminated):
                progress.stop()
                _say_interrupted(latest[0] if latest else None, total)
                raise
    return report


def _say_interrupted(rep: Any, total: int) -> None:
    """What an ingest stopped by Ctrl-C or SIGTERM had stored: it had exited 130 or 143 without a word (found
    by review). Each document is committed whole or not at all, so the next run finishes the job."""
    done = 0 if rep is None else rep.new + rep.changed + rep.unchanged + len(rep.failed)
    stored = "" if rep is None else f" ({rep.new} new and {rep.changed} changed documents stored)"
    print(f"onetrip: interrupted after {done} of {total} files{stored}; each document is stored whole or not "
          "at all, so run the same command again to finish (the files already stored are skipped as unchanged)",
          file=sys.stderr)


def _statement_timeout(seconds: float) -> float | None:
    """--statement-timeout: 0 is no limit."""
    if not seconds >= 0:
        raise ValueError(f"--statement-timeout must be 0 (no limit) or a positive number of seconds, got {seconds}")
    return seconds or None


def _principals(args: argparse.Namespace) -> tuple[str, ...] | None:
    """--principal / --public-only as the library's principals: None (no check), () (public rows only), or names."""
    if args.public_only and args.principal:
        raise ValueError("--public-only and --principal contradict each other: give one or the other")
    _note_commas(args.principal)
    return () if args.public_only else (tuple(args.principal) if args.principal else None)


def _note_commas(principals: list[str] | None) -> None:
    """`ingest --acl hr,staff` names two principals, `--principal hr,staff` one (a name may hold a comma): said
    on stderr, since the mirror of --acl had silently found nothing."""
    for p in principals or ():
        names = [x.strip() for x in p.split(",") if x.strip()]
        if "," in p and names:  # ('hr,' too: --acl hr, stores hr; not ',', which names no one)
            print(f"onetrip: note: --principal {p!r} is one principal; for several, repeat it: "
                  + " ".join(f"--principal {shlex.quote(x)}" for x in names), file=sys.stderr)


def _codec(name: str | None) -> str | None:
    """An encoding's codec name (Python names a Latin-1 stdout iso8859-1, its encoder's errors latin-1)."""
    import codecs

    try:
        return codecs.lookup(name or "").name
    except LookupError:
        return name


def _stdout_cannot_take(e: ValueError) -> bool:
    """Whether ``e`` is stdout's encoding failing on the output (an ASCII or Latin-1 terminal), not a bad value:
    the encodings compared by codec (8-bit code pages report 'charmap'). onetrip encodes nothing else but
    UTF-8, whose errors are bad input."""
    out = _codec(getattr(sys.stdout, "encoding", None))
    return isinstance(e, UnicodeEncodeError) and out != "utf-8" and _codec(e.encoding) in (out, "charmap")


def _utf8_stdout() -> bool:
    """Whether stdout takes any text: --json writes characters as they are then, else as \\u escapes (an ASCII or
    Latin-1 stdout had failed search --json with UnicodeEncodeError, exit 2, as if the input were bad)."""
    return _codec(getattr(sys.stdout, "encoding", None)) == "utf-8"


def _doc_id_maker(prefix: str) -> Any:
    """`ingest.doc_id_for`, with --doc-id-prefix before it."""
    from .ingest import doc_id_for

    if not prefix:
        return doc_id_for
    if prefix != prefix.strip() or "\x00" in prefix:
        raise ValueError(f"--doc-id-prefix {prefix!r}: no leading or trailing spaces, no NUL")
    try:  # an argument in another encoding: each file had been reported as a file name that is not UTF-8
        prefix.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"--doc-id-prefix {prefix!r} is not valid UTF-8 (the shell passed bytes of "
                         "another encoding): give it in UTF-8") from None
    return lambda path, root: prefix + doc_id_for(path, root)


def _acl(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    acl = tuple(p.strip() for p in text.split(",") if p.strip())
    if not acl:
        raise ValueError("--acl needs at least one principal (omit it for public documents)")
    return acl


def cmd_prune(args: argparse.Namespace) -> int:
    """Exit 3 when --doc-id names a document with no archived revisions (a typo, as `delete`'s unknown ids)."""
    from .connection import connect
    from .schema import read_layout
    from .store import has_history, is_stored, prune_history

    with connect(args.dsn) as conn:
        layout = read_layout(conn, schema=args.schema, prefix=args.prefix)
        if args.doc_id is not None and not has_history(conn, layout, args.doc_id):
            why = ("" if is_stored(conn, layout, args.doc_id)
                   else " and is not a stored document (`onetrip documents` lists them)")
            print(f"pruned nothing: {args.doc_id} has no archived revisions{why}", file=sys.stderr)
            return 3
        n = prune_history(conn, layout, keep=args.keep, doc_id=args.doc_id)
    which = f"of {args.doc_id}" if args.doc_id is not None else "per document"
    print(f"pruned {_count(n, 'archived section row')} (kept {_count(args.keep, 'revision')} {which})")
    return 0


def document_to_json(d: Any) -> dict[str, Any]:
    """The JSON shape of a `DocumentInfo` (also used by the HTTP service's GET /documents)."""
    return {**d.__dict__, "acl": None if d.acl is None else list(d.acl), "parse_warnings": list(d.parse_warnings),
            "ingested_at": d.ingested_at.isoformat()}


def cmd_documents(args: argparse.Namespace) -> int:
    """stdout is the listing alone (with --json the same JSON list with or without --limit); whether another
    page follows goes to stderr, as the count does: 'next page: --after=DOC_ID'."""
    from .connection import connect
    from .schema import read_layout
    from .store import MAX_LIST_LIMIT, check_page, list_documents

    limit, after = check_page(args.limit, args.after)  # before connecting, and before the +1 below
    with connect(args.dsn) as conn:
        # one row more than the page: whether a next page follows, in the same statement
        docs = list_documents(conn, read_layout(conn, schema=args.schema, prefix=args.prefix),
                              collection=args.collection, principals=_principals(args),
                              limit=None if limit is None else min(limit + 1, MAX_LIST_LIMIT), after=after)
    more = limit is not None and len(docs) > limit
    docs = docs[:limit]
    if args.json:
        print(json.dumps([document_to_json(d) for d in docs], indent=2))
    else:
        for d in docs:
            acl = "everyone" if d.acl is None else ",".join(d.acl)
            warned = f"\twarning: {_shown(d.parse_warnings[0], line=True)}" if d.parse_warnings else ""  # cut short
            print(f"{_shown(d.doc_id, line=True)}\trevision {d.revision}\t{_count(d.section_count, 'section')}\t"
                  f"{_count(d.token_count, 'token')}\t"
                  f"collection {_shown(d.collection, line=True)}\tacl {_shown(acl, line=True)}\t"
                  f"{d.ingested_at:%Y-%m-%d %H:%M}\tembedder {_shown(d.embedder or '-', line=True)}{warned}")
        print(_count(len(docs), "document"), file=sys.stderr)
    if more:
        after = _shown(shlex.quote(docs[-1].doc_id), line=True)
        print(f"next page: --after={after}", file=sys.stderr)  # '=': an id may start with -
    return 0


def _count(n: int, noun: str) -> str:
    """Say "1 section" and "2 sections": the listing is for people (scripts read --json)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cmd_delete(args: argparse.Namespace) -> int:
    """Exit 0 when every id was stored and is now gone, 3 when some were not stored (the others are deleted)."""
    from .connection import connect
    from .schema import read_layout
    from .store import delete_document, refresh_term_stats

    with connect(args.dsn) as conn:
        layout = read_layout(conn, schema=args.schema, prefix=args.prefix)
        doc_ids = list(dict.fromkeys(args.doc_ids))  # each once, in the order given
        missing = [d for d in doc_ids if not delete_document(conn, layout, d, keep_history=args.keep_history)]
        deleted = len(doc_ids) - len(missing)
        # said before the recount: each deletion has committed, so an error in the recount (a term_stats
        # table missing) must not read as if nothing had been deleted
        print(f"deleted {_count(deleted, 'document')}" + (" (sections archived)" if args.keep_history and deleted
                                                          else ""), flush=True)
        if deleted and not args.no_recount:  # else the mark each deletion committed has the next ingest recount
            refresh_term_stats(conn, layout)  # the deleted sections' words no longer count
    if deleted and args.no_recount:
        print(RECOUNT_LEFT, file=sys.stderr)
    for d in missing:
        print(f"  not stored: {d}", file=sys.stderr)
    return 3 if missing else 0


RECOUNT_LEFT = ("onetrip: note: lexical word weights not recounted (--no-recount): the next ingest run, or "
                "`onetrip refresh-term-stats`, recounts them")


def cmd_refresh_term_stats(args: argparse.Namespace) -> int:
    from .connection import connect
    from .schema import read_layout
    from .store import refresh_term_stats

    with connect(args.dsn) as conn:
        layout = read_layout(conn, schema=args.schema, prefix=args.prefix)
        n = refresh_term_stats(conn, layout)
    print(f"counted {n} distinct words in {layout.tables['sections']}")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    report = _ingest(args, args.paths, args.force, args.json)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        rate = report.sections / report.seconds if report.seconds else 0.0
        why = [f"{report.access_only} only in collection/ACL"] if report.access_only else []
        if report.recut:  # an upgrade re-cut unchanged files: say why they were embedded again
            why.append(f"{report.recut} re-cut: stored by an onetrip that cut files differently")
        access = f" ({'; '.join(why)})" if why else ""
        # sections whose text was stored already keep their vector: say how many, or the rate would puzzle
        kept = f"{report.reused} kept their stored vector; " if report.reused else ""
        print(f"documents: {report.new} new, {report.changed} changed{access}, {report.unchanged} unchanged, "
              f"{len(report.failed)} failed; {_count(report.sections, 'section')} in {report.seconds:.1f}s ({kept}"
              f"{rate:.1f}/s; parse {report.parse_seconds:.1f}s, embed {report.embed_seconds:.1f}s, "
              f"load {report.load_seconds:.1f}s)")
        for path, reason in report.failed:
            print(f"  failed: {_shown(path, line=True)}: {_shown(reason, line=True)}", file=sys.stderr)
    if report.words_behind:
        print(RECOUNT_LEFT, file=sys.stderr)
    for path, warning in report.warnings:  # stored, but parsing lost part of it (a truncated file)
        print(f"onetrip: warning: {_shown(path, line=True)}: {_shown(warning, line=True)}", file=sys.stderr)
    for path in report.made_public:  # a run without --acl over documents stored with one: say so
        print(f"onetrip: note: {_shown(path, line=True)} had an ACL and is now readable by everyone (no --acl given)",
              file=sys.stderr)
    replaced = dict(report.replaced)
    moved = dict(report.moved)
    for path, old in report.moved:  # one doc_id is one document, whatever the collection: say it moved
        if path not in replaced:
            print(f"onetrip: note: {_shown(path, line=True)}: its document moved from collection {old!r} to "
                  f"{args.collection!r}",
                  file=sys.stderr)
    for path, other in report.replaced:  # one doc_id, two files: the other one's text is no longer stored
        where = f" in collection {moved[path]!r}" if path in moved else ""
        print(f"onetrip: note: {_shown(path, line=True)} replaced the document stored{where} from another file, which "
              f"is still there ({_shown(other, line=True)}): a document's id is its path relative to the folder "
              "given; --doc-id-prefix keeps both", file=sys.stderr)
    _print_gone(report, args.delete_missing)
    return 0 if not report.failed else 3


def _print_gone(report: Any, delete_missing: bool) -> None:
    """Stored documents whose files are gone from a folder given: deleted (--delete-missing), or named."""
    deleted = set(report.deleted)
    if deleted:
        print(f"onetrip: note: deleted {_count(len(deleted), 'document')} whose files are gone:", file=sys.stderr)
        for did, path in report.gone:
            if did in deleted:
                print(f"  deleted: {_shown(did, line=True)} (was {_shown(path, line=True)})", file=sys.stderr)
    elsewhere = set(report.deleted_elsewhere)
    if elsewhere:  # delete_document found nothing to delete: it had said "stored again", which was untrue
        print(f"onetrip: note: {_count(len(elsewhere), 'document')} whose files are gone had been deleted by another "
              "writer meanwhile:", file=sys.stderr)
        for did, path in report.gone:
            if did in elsewhere:
                print(f"  deleted meanwhile: {_shown(did, line=True)} (was {_shown(path, line=True)})", file=sys.stderr)
    kept = [(d, p) for d, p in report.gone if d not in deleted and d not in elsewhere]
    if kept:
        how = ("stored again from another file meanwhile, so not deleted" if delete_missing else
               "they stay searchable: `onetrip delete ID ...`, or ingest again with --delete-missing")
        print(f"onetrip: note: {_count(len(kept), 'stored document')} came from files that are gone (renamed, "
              f"moved or deleted); {how}:", file=sys.stderr)
        for did, path in kept:
            print(f"  gone: {_shown(did, line=True)} (was {_shown(path, line=True)})", file=sys.stderr)


def _budget(text: str) -> int | str:
    """--max-tokens: a number, or "none" for no budget (the library's max_tokens=None)."""
    if text.strip().lower() == "none":
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or none, got {text!r}") from None


def _hybrid(args: argparse.Namespace) -> dict[str, Any]:
    """``hybrid=`` for the call when --hybrid is given (checked by the library: unknown names are named)."""
    if args.hybrid is None:
        return {}
    try:
        options = json.loads(args.hybrid)
    except json.JSONDecodeError as e:
        raise ValueError(f"--hybrid is not valid JSON: {e}") from e
    if not isinstance(options, dict):
        raise ValueError(f"--hybrid must be a JSON object such as '{{\"tf_weight\": 1}}', got {args.hybrid}")
    from .retrieve import as_hybrid, hybrid_json

    return {"hybrid": as_hybrid(hybrid_json(options))}


def _filters(args: argparse.Namespace) -> Any:
    from .retrieve import Filters

    try:
        metadata = json.loads(args.metadata) if args.metadata else None
    except json.JSONDecodeError as e:
        raise ValueError(f"--metadata is not valid JSON: {e}") from e
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"--metadata must be a JSON object such as '{{\"team\": \"hr\"}}', got {args.metadata}")
    return Filters(
        collections=tuple(args.collection) if args.collection else None,
        principals=_principals(args),
        doc_ids=tuple(args.doc_id) if args.doc_id else None,
        source_prefix=args.source_prefix,
        metadata=metadata,
    )


def context_to_json(ctx: Any) -> dict[str, Any]:
    """The JSON shape of an assembled context (also used by the HTTP service)."""
    return {
        "tokens": ctx.tokens, "max_tokens": ctx.max_tokens, "hits": ctx.hits,
        "passages": [
            {"doc_id": p.doc_id, "section_id": p.section_id, "sequence_index": p.sequence_index,
             "heading_path": list(p.heading_path), "anchor": p.anchor, "roles": list(p.roles),
             "best_rank": p.best_rank, "doc_rank": p.doc_rank, "distance": p.distance,
             "revision": p.revision, "context_tokens": p.context_tokens, "content": p.content}
            for p in ctx.passages
        ],
        "text": ctx.render(),
    }


def explained_to_json(ex: Explained) -> dict[str, Any]:
    """The JSON shape of an `Explained` (also used by the HTTP service's "explain"); a metadata filter's
    bind (psycopg's Jsonb) shows as its JSON object."""
    from psycopg.types.json import Jsonb

    def plain(value: Any) -> Any:
        if isinstance(value, Jsonb):
            return value.obj
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value if value is None or isinstance(value, (str, int, float, bool, dict)) else repr(value)

    return {"statement": ex.statement, "params": {k: plain(v) for k, v in ex.params.items()}, "plan": ex.plan,
            "kind": ex.kind, "vector_index_scans": ex.vector_index_scans}


def _print_explained(ex: Explained, as_json: bool) -> None:
    if as_json:
        print(json.dumps(explained_to_json(ex), indent=2))
    else:
        print(_shown(ex.render()))


def _stdout_console() -> Any:
    """A rich Console on stdout whose closed pipe (`| head`) ends the command as a print's does (`_run`: exit
    141, quietly); rich's own exits 1, which the CLI keeps for errors, each with a message."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return PipeConsole()


def cmd_search(args: argparse.Namespace) -> int:
    from .retrieve import Retriever

    flt = _filters(args)
    hybrid = _hybrid(args)
    if hybrid and args.mode == "dense":  # as the library refuses text= there: options that would change nothing
        raise ValueError("--hybrid is for hybrid and lexical mode (--mode dense searches the embedding alone)")
    assemble_only = [flag for flag, given in (
        ("--max-tokens", args.max_tokens is not None), ("--neighbors", args.neighbors is not None),
        ("--neighbor-scope", args.neighbor_scope is not None), ("--ancestors", args.ancestors),
        ("--[no-]section", args.section is not None), ("--document", args.document),
        ("--document-max-tokens", args.document_max_tokens is not None)) if given]
    if args.neighbors is not None and args.no_neighbors:  # one had silently won (0)
        raise ValueError(f"--neighbors {args.neighbors} and --no-neighbors contradict each other: give one")
    many = args.many or len(args.query) > 1  # search_many's (search-many: with one question too)
    if assemble_only and not args.assemble:
        raise ValueError(f"{', '.join(assemble_only)} shape the assembled context: "
                         + ("`onetrip assemble QUESTION` assembles one" if many else "add --assemble")
                         + " (search's hits take --no-parent / --no-neighbors)")
    if many:
        if args.assemble and args.many:
            what = "explain-many explains search_many's statement" if args.explain else \
                "search-many returns each question's hits"
            raise ValueError(f"{what}, not an assembled context: `onetrip assemble QUESTION` assembles one")
        if args.assemble:
            raise ValueError("several queries are searched together without --assemble: give one query to "
                             "assemble a context")
        with Retriever(args.dsn, schema=args.schema, prefix=args.prefix, embedder=_search_embedder(args),
                       **_settings_of(args)) as r:
            if args.explain:
                _print_explained(r.explain_many(args.query, **({} if args.k is None else {"k": args.k}),
                                                kind=args.explain, parent=not args.no_parent,
                                                neighbors=not args.no_neighbors, filters=flt, mode=args.mode,
                                                **hybrid),
                                 args.json)
                return 0
            many = r.search_many(args.query, **({} if args.k is None else {"k": args.k}),
                                 parent=not args.no_parent, neighbors=not args.no_neighbors, filters=flt,
                                 mode=args.mode, **hybrid)
        if args.json:
            print(json.dumps([{"query": q, "hits": [hit_to_json(h) for h in hits]}
                              for q, hits in zip(args.query, many)], indent=2, ensure_ascii=not _utf8_stdout()))
        else:
            console = _stdout_console()
            for q, hits in zip(args.query, many):
                console.rule(_plain(q))  # the query as typed, not as markup
                _print_hits(hits, console, _no_hits_hint(flt, args.mode))
        return 0
    args.query = args.query[0]
    with Retriever(args.dsn, schema=args.schema, prefix=args.prefix, embedder=_search_embedder(args),
                       **_settings_of(args)) as r:
        if args.assemble:
            # only the options given: none at all means the library's default context
            given = {"parent": False if args.no_parent else None,
                     "neighbors": 0 if args.no_neighbors else args.neighbors,
                     "neighbor_scope": args.neighbor_scope, "ancestors": args.ancestors or None,
                     "section": args.section, "document": args.document or None,
                     "document_max_tokens": args.document_max_tokens}
            budget = {None: 2000, "none": None}.get(args.max_tokens, args.max_tokens)
            options = {"max_tokens": budget, "filters": flt, "mode": args.mode, **hybrid,
                       **{name: v for name, v in given.items() if v is not None}}
        else:
            options = {"parent": not args.no_parent, "neighbors": not args.no_neighbors, "filters": flt,
                       "mode": args.mode, **hybrid}
        if args.explain:
            _print_explained(r.explain(args.query, args.k, assemble=args.assemble, kind=args.explain, **options),
                             args.json)
            return 0
        if args.assemble:
            ctx = r.assemble(args.query, k=args.k, **options)
            if args.json:
                print(json.dumps(context_to_json(ctx), indent=2, ensure_ascii=not _utf8_stdout()))
            else:
                print(_shown(ctx.render()))
                budget = "no budget" if ctx.max_tokens is None else f"{ctx.max_tokens}"
                print(f"\n-- {_count(len(ctx.passages), 'passage')}, {ctx.tokens}/{budget} tokens", file=sys.stderr)
            return 0
        hits = r.search(args.query, **({} if args.k is None else {"k": args.k}),  # none: search's own default
                        **options)
    if args.json:
        print(json.dumps([hit_to_json(h) for h in hits], indent=2, ensure_ascii=not _utf8_stdout()))
    else:
        _print_hits(hits, _stdout_console(), _no_hits_hint(flt, args.mode))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from .editions import check_checkable_schema, no_oracle_edition, render_edition, write_editions

    layout = _layout(args, args.dim)
    editions = ["postgres", "oracle", "citus"] if args.dialect == "all" else [args.dialect]
    if args.dialect == "all" and layout.schema:  # a schema no edition takes fails before a note on one of them
        check_checkable_schema(layout.schema, "postgres")
    if args.dialect == "all" and (why := no_oracle_edition(layout)):
        editions.remove("oracle")  # all that apply: asked for by name (--dialect oracle), it is an error naming why
        print(f"onetrip: note: no Oracle edition for {why} (`--dialect oracle` says why): rendering the "
              "PostgreSQL and Citus editions", file=sys.stderr)
    if args.stdout:
        for d in editions:
            for name, text in render_edition(d, layout).items():
                print(f"-- ===== {d}/{name} =====\n{text}")
        return 0
    for path in write_editions(Path(args.out), editions, layout):
        print(f"wrote {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .retrieve import Retriever

    corpus = Path(__file__).with_name("demo_corpus")
    # The demo's tables hold only the bundled corpus, so outdated ones are rebuilt;
    # with another --prefix they are the user's and get the usual error instead.
    report = _ingest(args, [str(corpus)], False, True, rebuild_outdated=args.prefix == "demo_")
    console = _stdout_console()
    recut = f" ({report.recut} re-cut by this onetrip)" if report.recut else ""
    console.print(f"[bold]demo corpus[/]: {report.new} new, {report.changed} changed{recut}, "
                  f"{report.unchanged} unchanged, {len(report.failed)} failed documents "
                  f"({report.sections} sections written)")
    if report.failed:
        for p, reason in report.failed:
            console.print("[red]failed[/] " + _markup_escape(_shown(f"{p}: {reason}", line=True)))
        return 1
    with Retriever(args.dsn, schema=args.schema, prefix=args.prefix) as r:
        for q in DEMO_QUESTIONS:
            console.rule(f"[bold]{q}")
            _print_hits(r.search(q, k=2), console)
    return 0


SERVE_DESCRIPTION = """Serve search over HTTP (Starlette under uvicorn), one AsyncRetriever over a connection pool.

  POST /search        {query | embedding, k, mode, expand, filters, principals, max_tokens, hits, context,
                       hybrid, explain}
                      -> {"hits": [...], "context": {...}}; one SQL statement per shape asked for
  POST /search_many   {queries | embeddings | both, k, mode, expand, filters, principals, hybrid, explain}
                      -> {"results": [{"query", "hits"}, ...]}; one SQL statement for all the queries
                      "explain": "analyze" | "plan" | "generic" (true: analyze), as `search --explain --json`:
                      -> {"explain": {"hits": {...}, "context": {...}}} (/search_many: {"explain": {...}}), each
                      the plan of the statement the request would send instead of its results; only with
                      --no-acl or --trust-request-principals (else 403: plans count rows the ACL hides)
  GET  /documents     ?collection=C&principals=P...&limit=N&after=ID: {"documents": [...], "next_after"}, a
                      page (limit: default 1000, at most 10000) of `documents --json`, only those the
                      request's principals may read (the ones a search would use); next_after: the id to
                      ask after= for the next page, null on the last
  GET  /health        200 {"status": "ok"} or 503 (no token needed)
  GET  /stats         pool statistics;  GET /openapi.json  the API's schemas

Principals (which ACL-protected rows a request may read), in this order:
  --trust-request-principals  use the request's "principals" (requests without it get the setting below);
                              without this flag a request that sends "principals" is refused (403)
  --principal P               these principals for every request (repeatable)
  --no-acl                    no ACL check at all (explicit opt-in)
  (none of these)             public rows only (acl IS NULL)

With a token (--token or $ONETRIP_TOKEN) every endpoint but /health needs
"Authorization: Bearer <token>". A database that does not answer gives 503s, not a failed start."""


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        return _serve(args)
    # after uvicorn's graceful shutdown, or before it started (the embedded server's start, the imports, the
    # database check): 0, as after Ctrl-C (which uvicorn swallows once it serves; a Ctrl-C before, during the
    # database check's wait, had been 130); a service manager (systemd) takes a stop that exits 143 for a failure
    except (Terminated, KeyboardInterrupt):
        return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from . import http_service
    except ImportError as e:
        raise OnetripError(f"onetrip serve needs Starlette and uvicorn ({e}): pip install 'onetrip[serve]'") from e
    from .connection import resolve_dsn

    _note_commas(args.principal)
    cfg = http_service.ServiceConfig(
        dsn=resolve_dsn(args.dsn), schema=args.schema, prefix=args.prefix,
        token=http_service.token_from_env(args.token), max_body=args.max_body, max_k=args.max_k,
        max_tokens_cap=args.max_tokens_cap, pool_size=args.pool_size, db_timeout=args.db_timeout,
        statement_timeout=_statement_timeout(args.statement_timeout),
        principals=http_service.operator_principals(args.principal, args.no_acl),
        trust_request_principals=args.trust_request_principals, application_name=args.application_name,
        **_settings_of(args),
    )
    embedder = _embedder(args)
    http_service.run(cfg, host=args.host, port=args.port, log_level=args.log_level,
                     access_log=not args.no_access_log, embedder_factory=lambda: embedder,
                     shutdown_timeout=args.shutdown_timeout)
    return 0


EMBEDDED_DESCRIPTION = """Run onetrip's embedded PostgreSQL ($ONETRIP_HOME/pgdata) in the foreground and print how to
connect to it: its DSN (database onetrip, the one every onetrip command uses) and a psql command line
(pgserver's own psql), e.g. to run the SQL editions (sql/README.md). Other onetrip commands share the server
meanwhile. Ctrl-C or SIGTERM stops it (unless another onetrip process still uses it) and exits 0. Nothing to run
when $ONETRIP_DSN names your own server (exit 2)."""


def cmd_embedded(args: argparse.Namespace) -> int:
    """The embedded server in the foreground: every other command stops it when it exits, so psql had none."""
    import time

    try:  # a stop during this import (numpy, psycopg: a quarter second) is exit 0 as any later one
        from .connection import ENV_DSN, connect, embedded_data_dir, embedded_dsn, embedded_psql, embedded_running
    except (KeyboardInterrupt, Terminated):
        return 0
    if os.environ.get(ENV_DSN, "").strip():  # blank is unset, as every other command reads it (resolve_dsn)
        raise ValueError(f"${ENV_DSN} is set, so onetrip uses that server and runs no embedded one: connect to "
                         f"it directly (unset {ENV_DSN} to run the embedded server)")
    # a stop asked for at any point from here is exit 0, as the README says: one that arrived while the lines
    # below were being written (a caller that signals on reading the first) had left through Terminated, 143
    try:
        dsn = embedded_dsn()
        pgdata = embedded_data_dir()
        with connect(dsn) as conn:  # creates the vector extension, as the first onetrip command would
            row = conn.execute("SELECT current_setting('server_version'), extversion FROM pg_extension "
                               "WHERE extname = 'vector'").fetchone()
        version, vector = row if row else ("?", "?")
        print(f"onetrip's embedded PostgreSQL {version} (pgvector {vector}) is running on {pgdata}; Ctrl-C or "
              "SIGTERM stops it")
        print(f"DSN:  {dsn}")
        print(f"psql: {shlex.quote(str(embedded_psql()))} {shlex.quote(dsn)}", flush=True)
        while embedded_running(pgdata):
            time.sleep(1)
    except (KeyboardInterrupt, Terminated):
        return 0
    print(f"onetrip: error: the embedded PostgreSQL stopped (stopped by someone else, or failed: its log is "
          f"{pgdata / 'log'})", file=sys.stderr)
    return 1


COMMANDS = {"init": cmd_init, "ingest": cmd_ingest, "search": cmd_search, "sql": cmd_sql, "demo": cmd_demo,
            "prune": cmd_prune, "refresh-term-stats": cmd_refresh_term_stats, "serve": cmd_serve,
            "documents": cmd_documents, "delete": cmd_delete, "embedded": cmd_embedded}


class Terminated(SystemExit):
    """SIGTERM, raised where the command was (as Ctrl-C raises KeyboardInterrupt); exit status 143 = 128 + 15."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within it, SIGTERM (`kill`, systemd, `docker stop`) raises Terminated instead of killing the process.

    Python's default for SIGTERM ends the process at once: no `finally`, no atexit, so pgserver never removed
    the process from the embedded server's pgdata/.handle_pids.json and no later onetrip process stopped that
    server. Unwinding rolls back a document being written (one transaction each) and lets pgserver stop the
    server at exit. uvicorn (`serve`) catches SIGTERM itself, shuts down gracefully, then raises it again with
    the handler it found: this one. A SIGTERM the parent set to be ignored stays ignored.
    """
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_interrupted = threading.Event()  # set by `sigint_recorded`'s handler


def _record_sigint(signum: int, frame: Any) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


@contextmanager
def sigint_recorded() -> Iterator[None]:
    """Within it, Ctrl-C raises KeyboardInterrupt as Python's default handler does, and is remembered: an
    interrupt inside a C extension's import (numpy's, in the first half second of a command) surfaces as an
    ImportError ("PyCapsule_Import could not import module ...") that `_run` would print as an error with
    numpy's advice to reinstall, where the user pressed Ctrl-C (exit 130). A handler the parent set stays."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _interrupted.clear()
    previous = signal.signal(signal.SIGINT, _record_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.option_names = _option_names(parser, args)
    with sigterm_unwinds(), sigint_recorded():
        return _run(args)


def _option_names(parser: _Parser, args: argparse.Namespace) -> dict[str, str]:
    """Each of the command's options by the library's name for it (dest: "max_k" -> "--max-k"), for `_in_cli_words`:
    the innermost subcommand's (`sql render`'s)."""
    return {a.dest: a.option_strings[0] for a in parser._chosen(args)._actions if a.option_strings}


def _in_cli_words(message: str, args: argparse.Namespace) -> str:
    """A library error as the command line says it: "max_k must be ..." names `--max-k`, and "query 0: ..." of
    `search-many` (search_many's list index) the question as typed, counted from 1."""
    names = getattr(args, "option_names", {})
    if (m := re.match(r"(\w+) (?:must|is|has) ", message)) and m[1] in names:
        message = names[m[1]] + message[m.end(1):]
    elif (m := re.match(r"query (\d+): ", message)) and len(getattr(args, "query", None) or ()) > int(m[1]):
        message = f"question {int(m[1]) + 1}: " + message[m.end():]
    # only there: further on a message may quote what the user typed (a path, a JSON key, a DSN), which a
    # rewrite of every option's name had changed ("/tmp/x/--keep-history.md", "['--ef-search']"; found by review)
    return message


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command in SEARCH_CALLS:
            args = _as_search(args)
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, not at exit: a closed pipe must reach the handler below, not "Exception ignored"
        return code
    except KeyboardInterrupt:
        return 130
    except Terminated as e:
        return e.code
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly, as cat does, not with a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush of stdout at exit would raise again
        return 141  # 128 + SIGPIPE, what a shell reports for a program the pipe killed
    except ValueError as e:  # the library's own checks of a value (identifiers and documents included)
        if _stdout_cannot_take(e):  # the output, not the input: exit 1 (it had been 2, "bad input")
            print(f"onetrip: error: stdout's encoding ({sys.stdout.encoding}) cannot write {e.object[e.start:e.end]!a}"
                  " of the output: set PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or use --json", file=sys.stderr)
            return 1
        print(f"onetrip: error: {_shown(_in_cli_words(str(e), args))}", file=sys.stderr)
        return 2
    except Exception as e:
        if _interrupted.is_set():  # what an interrupt turned into (an import it cut short): the interrupt
            return 130
        code = report_error("onetrip", e)
        if code is None:
            raise
        return code


def report_error(prog: str, e: BaseException) -> int | None:
    """Print ``<prog>: error: <why>`` for onetrip's and the database's errors and return the exit code
    (2 for a bad value, 1 otherwise; 1 for a file or folder the command could not read or write); None for
    any other exception, which keeps its traceback.

    The one mapping behind `onetrip` and the benchmark scripts (`benchmarks.args.run_cli`).
    """
    import psycopg

    if isinstance(e, OnetripError):
        print(f"{prog}: error: {_shown(e)}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    if isinstance(e, psycopg.Error):  # a lost connection, a timeout, a read-only server
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"{prog}: error: PostgreSQL: {type(e).__name__}: {first} (what a command had committed "
              "before it stays stored)", file=sys.stderr)
        return 1
    if isinstance(e, OSError):  # a file or folder a command writes or reads: `sql render --out` a file, say
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    return None


if __name__ == "__main__":
    sys.exit(main())
