"""The CLI end to end on the test database, as a user runs it (real embedder, real server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from onetrip import Retriever

from .cli_forkserver import run_cli

DEMO = Path(__file__).resolve().parents[1] / "src" / "onetrip" / "demo_corpus"


def onetrip(*args: str, dsn: str | None = None, **env_vars: str) -> subprocess.CompletedProcess:
    """`python -m onetrip.cli ARGS [--dsn DSN]` in a process of its own (forked warm: tests/cli_forkserver.py)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env_vars}
    return run_cli([*args] + (["--dsn", dsn] if dsn else []), env=env, timeout=300)


def test_init_ingest_search_json(dsn, tmp_path):
    assert onetrip("init", dsn=dsn).returncode == 0
    assert onetrip("init", dsn=dsn).returncode == 0  # twice is harmless
    (tmp_path / "empty.md").write_text("")
    res = onetrip("ingest", str(DEMO), str(tmp_path / "empty.md"), "--json", dsn=dsn)
    assert res.returncode == 3, res.stderr  # one file failed: reported, batch completed
    summary = json.loads(res.stdout)
    assert summary["new"] == 3 and summary["failed"][0]["reason"].startswith("empty")
    again = json.loads(onetrip("ingest", str(DEMO), "--json", dsn=dsn).stdout)
    assert (again["new"], again["changed"], again["unchanged"]) == (0, 0, 3)

    res = onetrip("search", "Is tennis elbow covered?", "-k", "3", "--json", dsn=dsn)
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)
    assert len(hits) == 3
    for h in hits:
        assert {"doc_id", "section_id", "sequence_index", "heading_path", "content", "distance", "score",
                "parent", "prev", "next"} <= set(h)
        for rel in ("parent", "prev", "next"):
            assert h[rel] is None or {"section_id", "content"} <= set(h[rel])
    top = hits[0]
    assert top["doc_id"] == "travel-insurance-policy.md"
    assert "tennis elbow" in top["content"] or "tennis elbow" in (top["next"] or {}).get("content", "")

    ex = json.loads(onetrip("search", "Is tennis elbow covered?", "-k", "3", "--explain", "--json", dsn=dsn).stdout)
    assert ex["kind"] == "analyze" and ex["statement"].startswith("WITH") and "actual time" in ex["plan"]
    assert ex["params"]["query_text"] == "Is tennis elbow covered?" and ex["params"]["k"] == 3

    both = json.loads(onetrip("search", "Is tennis elbow covered?", "descaling", "-k", "2", "--json", dsn=dsn).stdout)
    assert [b["query"] for b in both] == ["Is tennis elbow covered?", "descaling"]
    dense = json.loads(onetrip("search", "Is tennis elbow covered?", "descaling", "-k", "2", "--mode", "dense",
                               "--json", dsn=dsn).stdout)
    with Retriever(dsn) as api:  # several queries: one statement, each as its own search (hybrid, as one query's)
        for b, d in zip(both, dense):
            assert [(h["section_id"], h["score"]) for h in b["hits"]] == \
                [(h.section.section_id, h.score) for h in api.search(b["query"], k=2)]
            assert [h["section_id"] for h in d["hits"]] == \
                [h.section.section_id for h in api.search(d["query"], k=2, mode="dense")]
    planned = json.loads(onetrip("search", "Is tennis elbow covered?", "descaling", "-k", "2", "--explain", "plan",
                                 "--mode", "dense", "--json", dsn=dsn).stdout)  # several queries: search_many's
    assert planned["kind"] == "plan" and "query_embeddings" in planned["statement"]
    assert planned["params"] == {"k": 2, "query_embeddings": "<2 query embeddings: vector(384)[]>"}
    planned = json.loads(onetrip("search", "Is tennis elbow covered?", "descaling", "--explain", "plan",
                                 "--json", dsn=dsn).stdout)  # hybrid: the texts and their terms are binds too
    assert "query_words" in planned["statement"]
    assert planned["params"]["query_texts"] == ["Is tennis elbow covered?", "descaling"]
    refused = onetrip("search", "a", "b", "--assemble", dsn=dsn)
    assert refused.returncode == 2 and "without --assemble" in refused.stderr
    tuned = json.loads(onetrip("search", "descaling", "-k", "2", "--ef-search", "200", "--iterative-scan", "off",
                               "--json", dsn=dsn).stdout)  # the pgvector settings, as Retriever(ef_search=...) takes them
    assert len(tuned) == 2
    # `server` leaves the server's own setting, as iterative_scan=None does (found by the parity review)
    from onetrip.cli import _settings_of, build_parser

    assert _settings_of(build_parser().parse_args(["search", "x", "--iterative-scan", "server"]))[
        "iterative_scan"] is None
    assert len(json.loads(onetrip("search", "descaling", "-k", "2", "--iterative-scan", "server", "--json",
                                  dsn=dsn).stdout)) == 2
    bad_ef = onetrip("search", "descaling", "--ef-search", "0", dsn=dsn)
    assert bad_ef.returncode == 2 and "error: --ef-search must be an integer from 1 to 1000" in bad_ef.stderr
    ignored = onetrip("search", "descaling", "--neighbors", "2", "--max-tokens", "500", dsn=dsn)  # no --assemble
    assert ignored.returncode == 2 and "--max-tokens, --neighbors shape the assembled context" in ignored.stderr

    text = onetrip("search", "descaling", "-k", "1", dsn=dsn)
    assert text.returncode == 0 and "Descaling" in text.stdout
    # lexical hits have a score and no distance: the text output shows what each hit has
    lexical = onetrip("search", "descaling", "-k", "1", "--mode", "lexical", dsn=dsn, COLUMNS="200")
    assert lexical.returncode == 0 and "Descaling" in lexical.stdout and "score" in lexical.stdout, lexical.stderr
    assert "distance" not in lexical.stdout
    bad_meta = onetrip("search", "descaling", "--metadata", "[1]", dsn=dsn)
    assert bad_meta.returncode == 2 and "--metadata must be a JSON object" in bad_meta.stderr
    assert "Traceback" not in bad_meta.stderr

    ctx = json.loads(onetrip("search", "Is tennis elbow covered?", "--assemble", "--max-tokens", "300",
                             "--ancestors", "--json", dsn=dsn).stdout)
    assert 0 < ctx["tokens"] <= 300 and ctx["text"].startswith("### ")
    ids = [(p["doc_id"], p["section_id"]) for p in ctx["passages"]]
    assert len(ids) == len(set(ids)) and any("hit" in p["roles"] for p in ctx["passages"])
    # no -k, no expansion flag: the library's defaults (k from the budget, CONTEXT_DEFAULT); a flag
    # means Expansion(flag), as in the Python API
    with Retriever(dsn) as api:
        for flags, options in (((), {}), (("--no-section",), {"section": False})):
            got = json.loads(onetrip("search", "Is tennis elbow covered?", "--assemble", "--max-tokens", "1000",
                                     *flags, "--json", dsn=dsn).stdout)
            want = api.assemble("Is tennis elbow covered?", max_tokens=1000, **options)
            assert got["hits"] == want.hits == 4
            assert [(p["doc_id"], p["section_id"], p["roles"]) for p in got["passages"]] == \
                [(p.doc_id, p.section_id, list(p.roles)) for p in want.passages]

    none = json.loads(onetrip("search", "tennis", "--collection", "elsewhere", "--json", dsn=dsn).stdout)
    assert none == []
    secret = tmp_path / "secret.md"
    secret.write_text("# Salaries\n\nThe salary bands for 2026 are confidential and stored here for HR only.\n")
    assert onetrip("ingest", str(secret), "--acl", "hr", "--collection", "private", dsn=dsn).returncode == 0
    q = ["search", "salary bands 2026", "--collection", "private", "--json"]
    assert json.loads(onetrip(*q, "--principal", "eng", dsn=dsn).stdout) == []
    assert json.loads(onetrip(*q, "--principal", "hr", dsn=dsn).stdout)[0]["doc_id"] == "secret.md"
    # --acl hr,staff names two principals, --principal hr,staff one (a name may hold a comma): it finds nothing,
    # and says why on stderr (the CLI review: the mirror of --acl had silently returned [])
    res = onetrip(*q, "--principal", "hr,staff", dsn=dsn)
    assert json.loads(res.stdout) == [] and "--principal 'hr,staff' is one principal" in res.stderr
    assert "--principal hr --principal staff" in res.stderr
    res = onetrip(*q, "--principal", "hr,", dsn=dsn)  # --acl hr, stores hr: say so here too; ',' names no one
    assert json.loads(res.stdout) == [] and "for several, repeat it: --principal hr\n" in res.stderr, res.stderr


def test_public_only_neighbor_conflict_prefix_encoding_and_json_on_an_ascii_stdout(dsn, tmp_path):
    """Found by the CLI review: Filters(principals=()) had no CLI spelling (now --public-only, search and
    documents); --neighbors N with --no-neighbors silently meant 0; a --doc-id-prefix in another encoding was
    reported as every file's name; search --json on an ASCII stdout failed with exit 2 as if the input were bad."""
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    secret = tmp_path / "secret.md"
    secret.write_text("# Salaries\n\nThe salary bands for 2026 are confidential and stored here for HR only.\n")
    assert onetrip("ingest", str(secret), "--acl", "hr", dsn=dsn).returncode == 0
    q = ["search", "salary bands 2026", "-k", "20", "--json"]
    assert "secret.md" in {h["doc_id"] for h in json.loads(onetrip(*q, dsn=dsn).stdout)}  # trusted: no check
    public = json.loads(onetrip(*q, "--public-only", dsn=dsn).stdout)
    assert public and "secret.md" not in {h["doc_id"] for h in public}
    docs = json.loads(onetrip("documents", "--public-only", "--json", dsn=dsn).stdout)
    assert docs and "secret.md" not in {d["doc_id"] for d in docs}
    for args, why in (((*q, "--public-only", "--principal", "hr"), "--public-only and --principal contradict"),
                      (("documents", "--public-only", "--principal", "hr"), "--public-only and --principal"),
                      (("search", "x", "--assemble", "--neighbors", "2", "--no-neighbors"),
                       "--neighbors 2 and --no-neighbors contradict")):
        res = onetrip(*args, dsn=dsn)
        assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([os.fsencode(sys.executable), b"-m", b"onetrip.cli", b"ingest", os.fsencode(DEMO),
                          b"--doc-id-prefix", b"caf\xe9/", b"--prefix", b"pfx_", b"--dsn", dsn.encode()],
                         capture_output=True, env=env, timeout=300)
    assert res.returncode == 2 and b"--doc-id-prefix" in res.stderr and b"not valid UTF-8" in res.stderr, res.stderr
    assert b"Traceback" not in res.stderr
    (tmp_path / "cafe.md").write_text("# Café Zürich\n\nThe café in Zürich serves crème brûlée.\n")
    assert onetrip("ingest", str(tmp_path / "cafe.md"), dsn=dsn).returncode == 0
    for encoding in ("ascii", "utf-8"):
        out = onetrip("search", "café Zürich crème", "--mode", "lexical", "-k", "1", "--json", dsn=dsn,
                      PYTHONIOENCODING=encoding)
        assert out.returncode == 0, out.stderr
        assert "crème brûlée" in json.loads(out.stdout)[0]["content"]
        assert out.stdout.isascii() == (encoding == "ascii")  # characters as they are where stdout takes them
    # text output that an ASCII stdout cannot take is exit 1 naming stdout's encoding, not 2 (bad input)
    (tmp_path / "dash.md").write_text("# Dash\n\nAn em dash \u2014 and a euro sign \u20ac in one line.\n")
    assert onetrip("ingest", str(tmp_path / "dash.md"), dsn=dsn).returncode == 0
    for args, encoding in ((("search", "café Zürich crème", "--mode", "lexical", "-k", "1"), "ascii"),
                           (("search", "café Zürich crème", "--mode", "lexical", "--assemble"), "ascii"),
                           (("search", "em dash euro sign", "--mode", "lexical", "-k", "1"), "latin-1"),
                           (("search", "em dash euro sign", "--mode", "lexical", "-k", "1"), "iso-8859-15")):
        out = onetrip(*args, dsn=dsn, PYTHONIOENCODING=encoding)  # Python names them iso8859-1, charmap, ...
        assert out.returncode == 1 and "stdout's encoding (" in out.stderr and "cannot write" in out.stderr, (
            args, encoding, out.stderr)
        assert "PYTHONIOENCODING=utf-8" in out.stderr and "Traceback" not in out.stderr


def test_text_output_names_each_hits_section_at_80_columns(dsn):
    """The hit's heading path was only in its panel's title, which an 80-column terminal cut to the path's
    first words ("travel-insurance-policy.md :: Harbor"): the output did not say which section was hit."""
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    res = onetrip("search", "Is tennis elbow covered?", "-k", "1", "--no-parent", "--no-neighbors", dsn=dsn,
                  COLUMNS="80")
    assert res.returncode == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    # the panel's lines, borders off, joined: rich wraps the body at spaces
    text = " ".join(line.strip("│╭╮╰╯─ ") for line in res.stdout.splitlines())
    with Retriever(dsn) as api:
        top = api.search("Is tennis elbow covered?", k=1)[0].section
    assert len(" > ".join(top.heading_path)) > 40  # longer than what the title had room for
    assert " > ".join(top.heading_path) in " ".join(text.split())


def test_no_hits_says_what_emptied_the_search(dsn):
    """A search whose filters passed nothing, on a full table, had printed "is anything ingested?" alone."""
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    res = onetrip("search", "tennis", "--collection", "elsewhere", dsn=dsn, COLUMNS="200")
    assert res.returncode == 0, res.stderr
    assert "no hits: no section passed the filters (--collection)" in res.stdout
    assert "is anything ingested" not in res.stdout
    res = onetrip("search", "zzzqqq", "--mode", "lexical", dsn=dsn, COLUMNS="200")
    assert res.returncode == 0 and "no hits: no section holds a word of the query (lexical mode)" in res.stdout


def test_serve_on_a_port_in_use_is_one_line_and_exit_1(dsn):
    """uvicorn had loaded the model, then logged the bind failure and exited 3, which onetrip's exit codes
    give to "some files or ids failed"."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = onetrip("serve", "--port", str(port), "--prefix", "demo_", dsn=dsn)
    assert res.returncode == 1, res.stderr
    assert f"onetrip: error: cannot listen on 127.0.0.1:{port}: " in res.stderr
    assert "Traceback" not in res.stderr and "Started server process" not in res.stderr


def test_serve_with_a_folder_that_is_not_a_model_says_what_ingest_says(dsn, tmp_path):
    """A --model folder that exists but holds no model (or a broken one) loaded in the service's startup, inside
    uvicorn: a ~58-line traceback and uvicorn's exit 3 (onetrip's "some files or ids failed"), where `ingest`
    says it in one line, exit 2. Found by review."""
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    empty = tmp_path / "notamodel"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "modules.json").write_text("{")
    for model in (empty, broken):
        ingested = onetrip("ingest", str(tmp_path / "a.md"), "--model", str(model), dsn=dsn)
        assert ingested.returncode == 2 and len(ingested.stderr.splitlines()) == 1, ingested.stderr
        served = onetrip("serve", "--port", "0", "--prefix", "demo_", "--model", str(model), dsn=dsn)
        assert served.returncode == 2, served.stderr
        assert served.stderr == ingested.stderr and str(model) in served.stderr


def test_bad_numbers_a_server_would_drop_or_a_socket_refuse_are_named_at_once(dsn, tmp_path):
    """--port 70000 had passed the early port check and ended, after the model loaded, in uvicorn's OverflowError
    traceback (--port -1 blamed --host); --max-scan-tuples past pgvector's 2147483647 was dropped by the server
    for its default 20000, silently; a --model folder with a broken JSON file named neither."""
    for port in ("70000", "-1"):
        res = onetrip("serve", "--port", port, "--prefix", "demo_", dsn=dsn)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip() == f"onetrip: error: --port {port}: a TCP port is from 0 to 65535 (0: any free port)"
    res = onetrip("search", "x", "--max-scan-tuples", "2147483648", dsn=dsn)
    assert res.returncode == 2 and "error: --max-scan-tuples must be an integer from 1 to 2147483647" in res.stderr, \
        res.stderr
    model = tmp_path / "model"
    model.mkdir()
    (model / "modules.json").write_text("{")
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    res = onetrip("ingest", str(tmp_path / "a.md"), "--model", str(model), dsn=dsn)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"onetrip: error: model {model}: {model / 'modules.json'} is not valid JSON: " in res.stderr, res.stderr


def test_doc_ids_and_queries_are_printed_as_written_not_as_markup(dsn, tmp_path):
    """The text output read doc ids and queries as rich markup: '[bold]x.md' was shown as 'x.md', and a '[/]'
    in a doc id or among several queries ended the command in a MarkupError traceback."""
    (tmp_path / "x.md").write_text("# Espresso\n\nDescale the espresso machine every month with citric acid.\n")
    for prefix in ("[bold]", "[/]"):
        assert onetrip("ingest", str(tmp_path), "--doc-id-prefix", prefix, dsn=dsn).returncode == 0
    res = onetrip("search", "descale espresso", "-k", "2", dsn=dsn, COLUMNS="200")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "[bold]x.md" in res.stdout and "[/]x.md" in res.stdout
    res = onetrip("search", "[/]", "[bold red]espresso", "-k", "1", dsn=dsn, COLUMNS="200")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "[bold red]espresso" in res.stdout


def test_control_characters_from_documents_reach_no_terminal(dsn, tmp_path):
    """Found by review: an ESC in a page (`&#27;[2J` in HTML, or in a file name) reached the terminal through the
    text output of `search`, `--assemble` and `documents`: it could clear the screen, set the window title or
    (OSC 52) the clipboard. The text output shows control characters as \\x1b; --json keeps the stored text."""
    (tmp_path / "w.html").write_text("<html><body><h1>Walrus &#27;]0;title&#7;</h1>"
                                     "<p>walrus &#27;[2J tusks &#13;over</p></body></html>")
    (tmp_path / "a\x1b[31mb\tc.md").write_text("# Walrus too\n\nA walrus file with a coloured name.\n")
    assert onetrip("ingest", str(tmp_path), dsn=dsn).returncode == 0
    for args in (("search", "walrus", "--mode", "lexical"), ("search", "walrus", "--mode", "lexical", "--assemble"),
                 ("documents",)):
        res = onetrip(*args, dsn=dsn, COLUMNS="200")
        assert res.returncode == 0, res.stderr
        assert not set(res.stdout + res.stderr) & {"\x1b", "\x07", "\r"}, (args, res.stdout)
        assert "\\x1b" in res.stdout, (args, res.stdout)
    assert "a\\x1b[31mb\\x09c.md\trevision 1" in res.stdout  # one line, its columns kept
    res = onetrip("search", "walrus", "--mode", "lexical", "--json", dsn=dsn)
    assert "\\u001b[2J" in res.stdout and json.loads(res.stdout)  # as stored, escaped by JSON


def test_ingest_refuses_an_empty_collection(dsn):
    """`--collection ""` (an unset "$TENANT", say) had been read as the default collection, moving documents
    stored in a tenant's collection there, while the README and the Python API refuse an empty collection."""
    res = onetrip("ingest", str(DEMO), "--collection", "", dsn=dsn)
    assert res.returncode == 2, res.stderr
    assert "onetrip: error: --collection must be a non-empty string" in res.stderr
    listed = onetrip("documents", "--json", dsn=dsn)
    assert listed.returncode == 1 or json.loads(listed.stdout) == []  # nothing stored (the tables may exist)


def test_errors_are_one_clear_line(dsn):
    res = onetrip("search", "x", "--prefix", "bad;name", dsn=dsn)
    assert res.returncode == 2 and "table prefix 'bad;name' is not allowed" in res.stderr
    assert "Traceback" not in res.stderr
    res = onetrip("search", "x", dsn="host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert res.returncode == 1 and "could not connect to PostgreSQL" in res.stderr
    res = onetrip("search", "x", dsn=dsn)
    assert res.returncode == 1 and "run `onetrip init` first" in res.stderr


def test_sql_render_writes_both_editions(tmp_path):
    res = onetrip("sql", "render", "--out", str(tmp_path), "--dim", "768", "--schema", "kb")
    assert res.returncode == 0, res.stderr
    pg = (tmp_path / "postgres" / "schema.sql").read_text()
    ora = (tmp_path / "oracle" / "schema.sql").read_text()
    assert "vector(768)" in pg and "kb.sections" in pg
    assert "VECTOR(768, FLOAT32)" in ora
    bad = onetrip("sql", "render", "--out", str(tmp_path), "--schema", "x;drop")
    assert bad.returncode == 2 and "schema name" in bad.stderr
    # an option the Oracle edition cannot render: asked for by name, one line, not a template traceback, and
    # nothing written; with the default --dialect all (as the README's synopsis writes it), the editions that
    # can (it had failed with exit 2 after writing postgres/ and an empty oracle/)
    out = tmp_path / "partitioned"
    bad = onetrip("sql", "render", "--out", str(out), "--dialect", "oracle", "--partitions", "2")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert bad.stderr.strip() == "onetrip: error: halfvec storage and hash partitioning are rendered for " \
                                 "the PostgreSQL and Citus editions only, not Oracle"
    assert not out.exists()
    res = onetrip("sql", "render", "--out", str(out), "--partitions", "2", "--vector-type", "halfvec")
    assert res.returncode == 0 and "no Oracle edition" in res.stderr, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["citus", "postgres"]
    assert "PARTITION BY HASH" in (out / "postgres" / "schema.sql").read_text()
    # a folder that cannot be made (--out names a file) had been FileExistsError/NotADirectoryError's traceback
    (tmp_path / "afile").write_text("")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        bad = onetrip("sql", "render", "--out", str(out), "--dialect", "postgres")
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("onetrip: error: [Errno ") \
            and str(tmp_path / "afile") in bad.stderr, bad.stderr


def test_init_layout_options_build_what_they_say(dsn):
    import psycopg

    res = onetrip("init", "--prefix", "lay_", "--partitions", "4", "--vector-type", "halfvec",
                  "--hnsw-ef-construction", "100", dsn=dsn)
    assert res.returncode == 0, res.stderr
    with psycopg.connect(dsn) as conn:
        parts = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'lay_sections'::regclass").fetchone()
        coltype = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                               "WHERE attrelid = 'lay_sections'::regclass AND attname = 'embedding'").fetchone()
        indexdef = conn.execute("SELECT pg_get_indexdef('lay_sections_embedding_hnsw'::regclass)").fetchone()
    assert parts[0] == 4 and coltype[0] == "halfvec(384)"
    assert "halfvec_cosine_ops" in indexdef[0] and "ef_construction='100'" in indexdef[0]
    # ingest and search use the tables as init made them (ingest had assumed vector(384), unpartitioned)
    ingested = onetrip("ingest", str(DEMO), "--prefix", "lay_", "--json", dsn=dsn)
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["new"] == 3
    found = json.loads(onetrip("search", "descaling", "--prefix", "lay_", "-k", "1", "--json", dsn=dsn).stdout)
    assert len(found) == 1 and "escal" in found[0]["content"]
    assert "HNSW" not in ingested.stderr
    # an index dropped (for a bulk load, say) is built again by ingest with the defaults, which it says: its
    # ef_construction=100 had been lost without a word
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX lay_sections_embedding_hnsw")
    again = onetrip("ingest", str(DEMO), "--prefix", "lay_", "--json", dsn=dsn)
    assert again.returncode == 0 and "lay_sections had no HNSW index; built lay_sections_embedding_hnsw with " \
        "m=16, ef_construction=64" in again.stderr, again.stderr
    bad = onetrip("init", "--prefix", "lay2_", "--hnsw-m", "40", "--hnsw-ef-construction", "64", dsn=dsn)
    assert bad.returncode == 2 and "--hnsw-ef-construction must be at least 2 * hnsw_m = 80" in bad.stderr
    with psycopg.connect(dsn) as conn:  # nothing was created for the rejected layout
        assert conn.execute("SELECT to_regclass('lay2_sections')").fetchone()[0] is None


def test_demo_rebuilds_its_own_outdated_tables_but_not_a_users(dsn):
    """An embedded data folder outlives upgrades: the demo's tables (bundled corpus only) are rebuilt,
    anyone else's tables get the error naming `onetrip init --recreate`."""
    import psycopg

    assert onetrip("init", "--prefix", "demo_", dsn=dsn).returncode == 0
    assert onetrip("init", "--prefix", "mine_", dsn=dsn).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for prefix in ("demo_", "mine_"):
            conn.execute(f"ALTER TABLE {prefix}section_history DROP COLUMN parent_sequence_index")
            conn.execute(f"ALTER TABLE {prefix}sections DROP COLUMN parent_sequence_index")
    res = onetrip("demo", dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert "rebuilding the demo tables" in res.stderr and "3 new" in res.stdout
    # the espresso answer's second hit is "Cleaning and maintenance", a heading whose text is all in its
    # subsections: its line says so, where it had ended at the colon
    shown = " ".join(res.stdout.replace("│", " ").split())
    assert "Cleaning and maintenance: (a heading with no text of its own)" in shown, res.stdout
    res = onetrip("ingest", str(DEMO), "--prefix", "mine_", dsn=dsn)
    assert res.returncode == 1 and "onetrip init --recreate" in res.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM mine_sections").fetchone() == (0,)


def test_the_cli_says_what_the_user_typed_and_takes_what_http_takes(dsn):
    """Found by the application-developer review: errors named the library's arguments (`max_k must ...`, `query 0`
    of the first question), the no-hits hint named --principal for --public-only, `--hybrid` refused the
    `{"rrf_k": 60.0}` HTTP takes, explain_many had no command, and a plain `init` on halfvec or partitioned
    tables was refused (`--recreate` made them again as plain vector(384), unpartitioned)."""
    res = onetrip("serve", "--max-k", "0", "--prefix", "demo_", dsn=dsn)
    assert res.returncode == 2 and "onetrip: error: --max-k must be an integer from 1 to" in res.stderr, res.stderr
    res = onetrip("serve", "--db-timeout", "0", "--prefix", "demo_", dsn=dsn)
    assert res.returncode == 2 and "onetrip: error: --db-timeout must be positive" in res.stderr, res.stderr
    assert onetrip("init", "--prefix", "acl_", dsn=dsn).returncode == 0
    assert onetrip("ingest", str(DEMO), "--prefix", "acl_", "--acl", "team", dsn=dsn).returncode == 0
    res = onetrip("search", "descaling", "", "--prefix", "acl_", dsn=dsn)
    assert res.returncode == 2 and "onetrip: error: question 2: the query text is empty" in res.stderr, res.stderr
    res = onetrip("search", "descaling", "--prefix", "acl_", "--public-only", dsn=dsn)
    assert res.returncode == 0 and "no hits: no section passed the filters (--public-only), or" in \
        " ".join(res.stdout.split()), res.stdout
    res = onetrip("search", "descaling", "--prefix", "acl_", "--source-prefix", str(DEMO), dsn=dsn)
    assert "(--source-prefix); stored sources are URIs: a file's is file:///path" in " ".join(res.stdout.split())
    found = onetrip("search", "descaling", "--prefix", "acl_", "--source-prefix", DEMO.as_uri(), "--json", dsn=dsn)
    assert json.loads(found.stdout), found.stderr  # the URI form finds them
    runs = [onetrip("search", "descaling", "-k", "2", "--prefix", "acl_", "--hybrid", f'{{"rrf_k": {n}}}', "--json",
                    dsn=dsn) for n in ("60.0", "60")]
    assert runs[0].returncode == 0 and runs[0].stdout == runs[1].stdout, runs[0].stderr
    res = onetrip("search", "descaling", "--prefix", "acl_", "--hybrid", '{"rrf_k": 60.5}', dsn=dsn)
    assert res.returncode == 2 and "rrf_k must be an integer" in res.stderr, res.stderr
    explained = [onetrip(*call, "--prefix", "acl_", "--json", dsn=dsn) for call in (
        ("explain-many", "descaling", "--kind", "plan"), ("search-many", "descaling", "--explain", "plan"))]
    assert explained[0].returncode == 0, explained[0].stderr
    # the same statement and binds (the plans' costs may differ: autovacuum can analyze the tables in between)
    shown, same = (json.loads(e.stdout) for e in explained)
    assert (shown["statement"], shown["params"]) == (same["statement"], same["params"]) and shown["plan"]
    assert shown["kind"] == "plan" and "descaling" in json.dumps(shown["params"]) and "unnest" in shown["statement"]

    made = onetrip("init", "--prefix", "hv_", "--vector-type", "halfvec", "--partitions", "2", dsn=dsn)
    assert made.returncode == 0, made.stderr
    again = onetrip("init", "--prefix", "hv_", dsn=dsn)
    assert again.returncode == 0 and "(halfvec(384), 2 partitions)" in again.stdout, again.stderr
    other = onetrip("init", "--prefix", "hv_", "--vector-type", "vector", dsn=dsn)
    assert other.returncode == 2 and "already exists as halfvec(384); cannot initialise it as vector(384)" in \
        other.stderr, other.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:  # an older onetrip's: --recreate makes the same shape
        conn.execute("ALTER TABLE hv_sections DROP COLUMN parent_sequence_index")
    remade = onetrip("init", "--prefix", "hv_", "--recreate", dsn=dsn)
    assert remade.returncode == 0 and "(halfvec(384), 2 partitions)" in remade.stdout, remade.stderr
    wider = onetrip("init", "--prefix", "hv_", "--recreate", "--dim", "8", dsn=dsn)  # a flag still says otherwise
    assert wider.returncode == 0 and "(halfvec(8), 2 partitions)" in wider.stdout, wider.stderr
    # a review: a dimension past vector's 2000 kept halfvec only when --vector-type was repeated; and another
    # application's table of the name was read as a layout ("--vector-type ... got 'character varying'")
    assert onetrip("init", "--prefix", "big_", "--dim", "3000", "--vector-type", "halfvec", dsn=dsn).returncode == 0
    for flags in ((), ("--dim", "3000")):
        res = onetrip("init", "--prefix", "big_", *flags, dsn=dsn)
        assert res.returncode == 0 and "(halfvec(3000))" in res.stdout, res.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE app_sections (id int, embedding varchar(200))")
    for flags in ((), ("--recreate",), ("--dim", "384", "--vector-type", "vector")):
        res = onetrip("init", "--prefix", "app_", *flags, dsn=dsn)
        assert res.returncode == 2 and "app_sections exists but is not onetrip's" in res.stderr, res.stderr
    # the option a message opens with named as typed, a subcommand's too; what the user typed, quoted further
    # on, is left as it is (a rewrite of every option name in a message had changed paths and JSON keys)
    res = onetrip("sql", "render", "--hnsw-m", "1", "--stdout")
    assert res.returncode == 2 and "error: --hnsw-m must" in res.stderr, res.stderr
    res = onetrip("search", "q", "--prefix", "acl_", "--hybrid", '{"ef_search": 5}', dsn=dsn)
    assert res.returncode == 2 and "unknown hybrid option(s) ['ef_search']" in res.stderr, res.stderr
    res = onetrip("ingest", "/nonexistent/keep_history.md", "--prefix", "acl_", dsn=dsn)
    assert res.returncode == 2 and "/nonexistent/keep_history.md" in res.stderr, res.stderr
    # a bad --dim is refused before connecting, as before init kept the table's layout
    for dim in ("0", "99999"):
        res = onetrip("init", "--dim", dim, "--dsn", "host=127.0.0.1 port=1 connect_timeout=2")
        assert res.returncode == 2 and "dimension" in res.stderr and "connect" not in res.stderr, res.stderr
    res = onetrip("explain-many", "q", "--assemble", "--prefix", "acl_", dsn=dsn)
    assert res.returncode == 2 and "explain-many explains search_many's statement, not an assembled" in res.stderr


def test_search_modes_and_refresh_term_stats(dsn):
    assert onetrip("init", dsn=dsn).returncode == 0
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    res = onetrip("refresh-term-stats", dsn=dsn)
    assert res.returncode == 0 and res.stdout.startswith("counted "), res.stderr
    with Retriever(dsn) as api:
        assert int(res.stdout.split()[1]) == api.conn.execute("SELECT count(*) FROM term_stats").fetchone()[0] > 0
        for mode in ("lexical", "hybrid"):
            got = json.loads(onetrip("search", "tennis elbow", "--mode", mode, "-k", "3", "--json", dsn=dsn).stdout)
            want = api.search("tennis elbow", k=3, mode=mode)
            assert got and [(h["doc_id"], h["section_id"]) for h in got] == \
                [(h.section.doc_id, h.section.section_id) for h in want]
        # --hybrid: HybridOptions as JSON (HTTP's "hybrid"); --max-tokens none: assemble without a budget
        tuned = {"lexical_weight": 3, "tf_weight": 1}
        got = json.loads(onetrip("search", "tennis elbow", "-k", "3", "--hybrid", json.dumps(tuned), "--json",
                                 dsn=dsn).stdout)
        want = api.search("tennis elbow", k=3, hybrid=tuned)
        assert [(h["section_id"], h["score"]) for h in got] == [(h.section.section_id, h.score) for h in want]
        assert [h.score for h in want] != [h.score for h in api.search("tennis elbow", k=3)]  # the weight counted
        ctx = json.loads(onetrip("search", "tennis elbow", "-k", "3", "--assemble", "--max-tokens", "none",
                                 "--json", dsn=dsn).stdout)
        unbudgeted = api.assemble("tennis elbow", k=3, max_tokens=None)
        assert ctx["max_tokens"] is None and ctx["tokens"] == unbudgeted.tokens > 0
        text = onetrip("search", "tennis elbow", "-k", "3", "--assemble", "--max-tokens", "none", dsn=dsn)
        n = len(unbudgeted.passages)
        assert text.returncode == 0, text.stderr
        passages = f"{n} passage{'' if n == 1 else 's'}"
        assert f"-- {passages}, {unbudgeted.tokens}/no budget tokens" in text.stderr, text.stderr
        top = api.assemble("tennis elbow", k=1, max_tokens=None).passages  # a budget the top hit alone fills
        fits = next(p.context_tokens for p in top if "hit" in p.roles)
        text = onetrip("search", "tennis elbow", "-k", "1", "--assemble", "--max-tokens", str(fits), dsn=dsn)
        assert text.returncode == 0 and f"-- 1 passage, {fits}/{fits} tokens" in text.stderr, text.stderr
    dense = onetrip("search", "tennis", "--mode", "dense", "--hybrid", '{"lexical_weight": 5}', dsn=dsn)
    assert dense.returncode == 2 and "--hybrid is for hybrid and lexical mode" in dense.stderr, dense.stderr
    bad = onetrip("search", "tennis", "--hybrid", '{"bogus": 1}', dsn=dsn)
    assert bad.returncode == 2 and "unknown hybrid option(s) ['bogus']" in bad.stderr, bad.stderr
    bad = onetrip("search", "tennis", "--assemble", "--max-tokens", "lots", dsn=dsn)
    assert bad.returncode == 2 and "expected a number of tokens or none, got 'lots'" in bad.stderr, bad.stderr


def test_a_reader_that_stops_early_gets_no_traceback(dsn):
    """`onetrip ... | head -1` had ended in a BrokenPipeError traceback (and exit 1). What rich prints (search's
    panels) ended in rich's own exit 1 with nothing said, an error's code without an error."""
    assert onetrip("init", dsn=dsn).returncode == 0
    cmds = [["sql", "render", "--stdout"], ["documents", "--json", "--dsn", dsn],
            ["search", "tennis", "--mode", "lexical", "--dsn", dsn]]
    for args in cmds:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered: flushed at exit too
        proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**env, "HF_HUB_OFFLINE": "1"})
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the first write: every write of the command meets a closed pipe
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141, err
        assert err == "", err


def test_version_is_pyprojects():
    import re

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)
    assert version is not None
    res = onetrip("--version")
    assert res.returncode == 0 and res.stdout == f"onetrip {version.group(1)}\n", res


def test_a_writer_role_without_ddl_rights_can_ingest_into_existing_tables(dsn, db, tmp_path):
    """`onetrip ingest` ran init's CREATE ... IF NOT EXISTS every time: a role with SELECT, INSERT, UPDATE and
    DELETE on the tables an owner made, but no CREATE on the schema, was refused with 'permission denied for
    schema public', naming a right ingest does not need. Tables it would have to make still need that right."""
    import uuid

    from psycopg import conninfo

    from onetrip import init_schema
    from onetrip.layout import Layout

    init_schema(db, Layout(prefix="w_"))
    role = f"writer_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        db.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON w_documents, w_sections, w_section_history, "
                   f"w_term_stats TO {role}")
        db.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
        (tmp_path / "note.md").write_text("# Note\n\nThe writer role stores this note about zebras.\n")
        as_writer = conninfo.make_conninfo(dsn, user=role)
        res = onetrip("ingest", str(tmp_path), "--prefix", "w_", "--json", dsn=as_writer)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["new"] == 1
        assert db.execute("SELECT doc_id FROM w_documents").fetchall() == [("note.md",)]
        res = onetrip("ingest", str(tmp_path), "--prefix", "other_", dsn=as_writer)  # no tables: init needs CREATE
        assert res.returncode == 1 and "permission denied for schema public" in res.stderr, res.stderr
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


def test_ingest_of_only_missing_paths_is_bad_input_and_touches_nothing(dsn, tmp_path):
    """Every path given missing (a typo): exit 2 at once, naming it, with no table made (it had loaded the model,
    made the tables and exited 3, the code for 'some files failed, the rest went through')."""
    res = onetrip("ingest", str(tmp_path / "nope.md"), str(tmp_path / "gone"), "--prefix", "typo_", dsn=dsn)
    assert res.returncode == 2, res.stderr
    assert f"{tmp_path / 'nope.md'}: no such file or directory (nor the other 1 path given); nothing was ingested" \
        in res.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('typo_sections')").fetchone()[0] is None
    (tmp_path / "a.md").write_text("# A\n\nSome text.\n")  # one path there: the run goes on, the missing one fails
    res = onetrip("ingest", str(tmp_path / "a.md"), str(tmp_path / "nope.md"), "--prefix", "typo_", "--json",
                  dsn=dsn)
    assert res.returncode == 3, res.stderr
    assert json.loads(res.stdout)["new"] == 1
    (tmp_path / "b.md").write_text("# B\n\nOther text.\n")  # one section: the human summary says it in the singular
    res = onetrip("ingest", str(tmp_path / "b.md"), "--prefix", "typo_", dsn=dsn)
    assert res.returncode == 0 and "1 new, 0 changed, 0 unchanged, 0 failed; 1 section in " in res.stdout, res.stdout
    (tmp_path / "empty").mkdir()
    res = onetrip("ingest", str(tmp_path / "empty"), "--prefix", "typo_", dsn=dsn)
    assert res.returncode == 0 and "note: no files to ingest in" in res.stderr and ".md" in res.stderr


def test_an_empty_path_is_bad_input_not_the_current_folder(dsn, db):
    """Path("") is "."; `onetrip ingest "$DOCS"` with DOCS unset had ingested whatever folder the shell was in
    (with --delete-missing, it would have deleted the documents stored from the real folder). Found by review."""
    from onetrip import ingest_paths
    from onetrip.errors import InputDocumentError

    res = onetrip("ingest", "", "--prefix", "empty_", dsn=dsn)
    assert res.returncode == 2, res.stderr
    assert "'': an empty path (an unset variable?)" in res.stderr and "nothing was ingested" in res.stderr
    assert db.execute("SELECT to_regclass('empty_sections')").fetchone()[0] is None
    from onetrip import Layout, init_schema

    from .embedders import HashEmbedder

    layout = init_schema(db, Layout(dim=384, prefix="empty_"))
    with pytest.raises(InputDocumentError, match="an empty path"):
        ingest_paths(db, [str(DEMO), ""], layout=layout, embedder=HashEmbedder())
    assert db.execute("SELECT count(*) FROM empty_documents").fetchone()[0] == 0


def test_the_filesystem_root_is_bad_input_not_walked(dsn, db):
    """`onetrip ingest "$DOCS/"` with DOCS unset is `onetrip ingest /`: it had walked the whole filesystem.
    Found by review."""
    from onetrip import Layout, ingest_paths, init_schema
    from onetrip.errors import InputDocumentError

    from .embedders import HashEmbedder

    res = onetrip("ingest", "/", "--prefix", "root_", dsn=dsn)
    assert res.returncode == 2, res.stderr
    assert "/: the filesystem root (an unset variable in \"$DOCS/\"?)" in res.stderr, res.stderr
    assert "nothing was ingested" in res.stderr and "Traceback" not in res.stderr
    layout = init_schema(db, Layout(dim=384, prefix="root_"))
    for root in ["//", "/.", "/tmp/..", Path("/")]:
        with pytest.raises(InputDocumentError, match="the filesystem root"):
            ingest_paths(db, [str(DEMO), root], layout=layout, embedder=HashEmbedder())
    assert db.execute("SELECT count(*) FROM root_documents").fetchone()[0] == 0


@pytest.mark.parametrize("args, names", [(("search", "x", "-k", "abc"), "argument -k: invalid int value: 'abc'"),
                                         (("ingest",), "the following arguments are required: paths"),
                                         (("sarch", "x"), "invalid choice: 'sarch'"),
                                         (("sql", "render", "--out", ""), "argument --out: empty (an unset variable?)"),
                                         (("search", "x", "--model", ""), "argument --model: empty (an unset")])
def test_a_usage_error_is_one_line_naming_it(args, names):
    """Found by the README review: "Errors are one line naming the cause", but argparse printed its whole
    usage block first (16 lines for `search -k abc`). Now one line, with where to read the options."""
    res = onetrip(*args)
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and names in res.stderr and "--help)" in res.stderr, res.stderr


@pytest.mark.parametrize("args, prog", [(("init", "--bogus"), "onetrip init"),
                                        (("sql", "render", "--bogus"), "onetrip sql render"),
                                        (("search", "x", "--json", "--bogus", "3"), "onetrip search")])
def test_an_unknown_argument_is_named_by_its_subcommand(args, prog):
    """Found by review: argparse names the top parser for arguments no parser took ("onetrip: error:
    unrecognized arguments: --bogus (see onetrip --help)"), whose help does not list the subcommand's options."""
    res = onetrip(*args)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"{prog}: error: unrecognized arguments: ") and f"(see {prog} --help)" in res.stderr


def test_the_command_imports_no_heavy_module_before_it_runs_and_every_public_name_resolves():
    """A review: `import onetrip` imported numpy, psycopg and the parsers, so a Ctrl-C in a command's first half
    second printed a traceback from inside those imports, before the command's own handler (exit 130) ran. The
    package now imports its public names when first used; each resolves to its module's object."""
    import ast
    import re

    import onetrip

    code = "import sys, onetrip.cli; print(sorted(m for m in ('numpy', 'psycopg', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "[]\n"
    # a review of that: the submodules stay reachable as attributes, as the README names them (a pool's
    # configure=onetrip.psycopg_adapters.register_adapters), in a fresh interpreter
    code = ("import onetrip; print(onetrip.psycopg_adapters.register_adapters.__name__, onetrip.retrieve.CANCEL_TIMEOUT,"
            " onetrip.sections.SECTIONING > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "register_adapters" and out.split()[2] == "True"
    for name in onetrip.__all__:
        module = __import__(f"onetrip.{onetrip._EXPORTS[name]}", fromlist=[name])
        assert getattr(onetrip, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        onetrip.nope  # noqa: B018
    # a review: dotted names had raised ModuleNotFoundError, so hasattr raised and getattr ignored its default
    assert getattr(onetrip, "x.y", "default") == "default" and not hasattr(onetrip, "retrieve.CANCEL_TIMEOUT")
    # the names type checkers read are the names it serves
    tree = ast.parse(Path(onetrip.__file__).read_text())
    typed = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1
             for a in node.names}
    assert typed == set(onetrip.__all__)
    # the writers the README names as onetrip's own are importable from it (found by review: prune_history was not)
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    listed = readme.split("The writers (", 1)[1].split(" and `onetrip.store`'s", 1)[0]
    writers = re.findall(r"`(\w+)`", listed)
    assert "prune_history" in writers and set(writers) <= set(onetrip.__all__), writers


def test_an_interrupted_ingest_says_what_it_stored_and_the_next_run_finishes(dsn, tmp_path, monkeypatch, capsys):
    """Found by review: Ctrl-C or SIGTERM during `onetrip ingest` exited 130/143 without a word on what was
    stored. The interrupt comes here as the second of three files is stored, as a Ctrl-C between files."""
    from onetrip import cli, ingest

    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nText of {name}.\n")
    real = ingest.ingest_paths

    def stopped(*args: Any, on_progress: Any = None, **kwargs: Any) -> Any:
        seen: list[str] = []

        def progress(path: str, rep: Any) -> None:
            on_progress(path, rep)
            seen.append(path)
            if len(seen) == 2:
                raise KeyboardInterrupt

        return real(*args, on_progress=progress, **kwargs)

    monkeypatch.setattr(ingest, "ingest_paths", stopped)
    assert cli.main(["ingest", str(tmp_path), "--prefix", "intr_", "--dsn", dsn]) == 130
    err = capsys.readouterr().err
    assert "onetrip: interrupted after 2 of 3 files (2 new and 0 changed documents stored); each document is " \
        "stored whole or not at all, so run the same command again" in " ".join(err.split()), err
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM intr_documents").fetchone() == (2,)
    monkeypatch.setattr(ingest, "ingest_paths", real)
    assert cli.main(["ingest", str(tmp_path), "--prefix", "intr_", "--dsn", dsn, "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["new"], done["unchanged"]) == (1, 2), done


def test_an_interrupt_that_an_import_turns_into_an_error_exits_130_quietly(monkeypatch, capsys):
    """A Ctrl-C inside a C extension's import (numpy's) surfaces as an ImportError ("PyCapsule_Import could not
    import module ..."), which the command had printed with numpy's advice to reinstall: it is the interrupt."""
    import signal

    from onetrip import cli

    def command(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            import time
            time.sleep(5)
        except KeyboardInterrupt:
            raise ImportError('PyCapsule_Import could not import module "datetime"') from None

    monkeypatch.setitem(cli.COMMANDS, "documents", command)
    assert cli.main(["documents"]) == 130
    assert capsys.readouterr().err == ""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back

    def failing(args):
        raise ImportError("a real import error")

    monkeypatch.setitem(cli.COMMANDS, "documents", failing)
    with pytest.raises(ImportError):  # without an interrupt, an ImportError is not taken for one
        cli.main(["documents"])


def test_commands_answer_to_their_library_calls_names(dsn):
    """`init`, `ingest`, `documents`, `delete` and `prune` also answer to init-schema, ingest-paths,
    list-documents, delete-document and prune-history: the functions they run (the guide: each library
    feature a CLI command with the same name)."""
    from onetrip.cli import LIBRARY_NAMES, build_parser

    assert onetrip("init-schema", dsn=dsn).returncode == 0
    assert json.loads(onetrip("ingest-paths", str(DEMO), "--json", dsn=dsn).stdout)["new"] == 3
    listed = onetrip("list-documents", "--json", dsn=dsn)
    assert listed.returncode == 0 and listed.stdout == onetrip("documents", "--json", dsn=dsn).stdout
    doc_id = json.loads(listed.stdout)[0]["doc_id"]
    res = onetrip("delete-document", doc_id, "--keep-history", dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert doc_id not in {d["doc_id"] for d in json.loads(onetrip("list-documents", "--json", dsn=dsn).stdout)}
    res = onetrip("prune-history", "--doc-id", doc_id, dsn=dsn)
    assert res.returncode == 0 and res.stdout.startswith("pruned "), res.stderr
    assert onetrip("prune-history", "--doc-id", doc_id, dsn=dsn).returncode == 3  # nothing archived now
    for name, alias in LIBRARY_NAMES.items():  # the command each runs is the canonical one
        assert build_parser().parse_args([alias, *(["x"] if name in ("ingest", "delete") else [])]).command == name


def test_retriever_calls_are_commands_of_their_names(dsn):
    """`onetrip assemble`, `explain` and `search-many` are `search` with --assemble, --explain and several
    questions: the Retriever calls they make, by name."""
    assert onetrip("init", dsn=dsn).returncode == 0
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    q = "Is tennis elbow covered?"
    got = onetrip("assemble", q, "--max-tokens", "300", "--json", dsn=dsn)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(onetrip("search", q, "--assemble", "--max-tokens", "300", "--json",
                                                        dsn=dsn).stdout)
    assert "passages" in json.loads(got.stdout)
    explained = json.loads(onetrip("explain", q, "-k", "3", "--json", dsn=dsn).stdout)
    searched = json.loads(onetrip("search", q, "-k", "3", "--explain", "--json", dsn=dsn).stdout)
    assert explained["kind"] == "analyze" and explained["statement"] == searched["statement"]
    plan = json.loads(onetrip("explain", q, "--explain", "plan", "--json", dsn=dsn).stdout)
    assert plan["kind"] == "plan"
    # explain(q, kind="plan") by its keyword's name: --kind had been refused ("unrecognized arguments")
    by_kind = json.loads(onetrip("explain", q, "--kind", "plan", "--json", dsn=dsn).stdout)
    assert by_kind["kind"] == "plan" and by_kind["statement"] == plan["statement"]
    # the kind as a bare word had been a second question, explained by EXPLAIN ANALYZE without a word
    res = onetrip("explain", q, "generic", "--json", dsn=dsn)
    assert res.returncode == 2 and "'generic' is read as a second question" in res.stderr
    assert "--kind generic" in res.stderr and not res.stdout
    two = json.loads(onetrip("explain", q, "plan", "--kind", "plan", "--json", dsn=dsn).stdout)  # asked for: two
    assert two["kind"] == "plan" and "query_embeddings" in two["statement"]
    many = onetrip("search-many", q, "What about dental care?", "-k", "2", "--json", dsn=dsn)
    assert many.returncode == 0 and many.stdout == onetrip("search", q, "What about dental care?", "-k", "2", "--json",
                                                           dsn=dsn).stdout
    res = onetrip("assemble", q, "What about dental care?", dsn=dsn)  # search's own refusal, not a new one
    assert res.returncode == 2 and "give one query to assemble a context" in res.stderr


def test_search_many_answers_in_its_shape_whatever_the_number_of_questions(dsn):
    """`onetrip search-many "q" --json` with one question printed `search`'s flat list of hits (its text output
    had no line naming the question, its --explain was `search`'s statement, and --assemble assembled): it ran
    `search`, since `search-many` was taken as `search` and only the number of questions chose search_many.
    `search` with one question keeps its own shape. Found by review."""
    assert onetrip("ingest", str(DEMO), dsn=dsn).returncode == 0
    q = "Is tennis elbow covered?"
    one = onetrip("search-many", q, "-k", "2", "--json", dsn=dsn)
    assert one.returncode == 0, one.stderr
    searched = json.loads(onetrip("search", q, "-k", "2", "--json", dsn=dsn).stdout)  # search's shape: a list of hits
    assert len(searched) == 2 and "section_id" in searched[0]
    assert json.loads(one.stdout) == [{"query": q, "hits": searched}]
    two = json.loads(onetrip("search-many", q, "descaling", "-k", "2", "--json", dsn=dsn).stdout)
    assert [b["query"] for b in two] == [q, "descaling"] and two[0]["hits"] == searched
    # the text output heads each question's hits with it, one question as several
    text = onetrip("search-many", q, "-k", "1", dsn=dsn, COLUMNS="120")
    assert text.returncode == 0 and any(q in line and "─" in line for line in text.stdout.splitlines()), text.stdout
    plain = onetrip("search", q, "-k", "1", dsn=dsn, COLUMNS="120")
    assert plain.returncode == 0 and q not in plain.stdout  # search: the hits alone
    refused = onetrip("search-many", q, "--assemble", dsn=dsn)  # it had assembled a context
    assert refused.returncode == 2 and "search-many" in refused.stderr and "onetrip assemble" in refused.stderr
    # an assemble-only option names `onetrip assemble`, not the --assemble search-many refuses (a review)
    budget = onetrip("search-many", q, "--max-tokens", "50", dsn=dsn)
    assert budget.returncode == 2 and "`onetrip assemble QUESTION`" in budget.stderr, budget.stderr
    assert "add --assemble" not in budget.stderr
    budget = onetrip("search", q, q + " again", "--max-tokens", "50", dsn=dsn)  # several questions: the same
    assert budget.returncode == 2 and "`onetrip assemble QUESTION`" in budget.stderr, budget.stderr
    # search_many sends one question's search as `search` does (explain_many): the statement `explain` shows
    planned = json.loads(onetrip("search-many", q, "--explain", "plan", "--json", dsn=dsn).stdout)
    explained = json.loads(onetrip("explain", q, "--explain", "plan", "--json", dsn=dsn).stdout)
    assert (planned["statement"], planned["params"]) == (explained["statement"], explained["params"])
    assert planned["params"]["query_text"] == q
