"""The README's Python examples run as written, on the test server (``$ONETRIP_DSN``), so they cannot drift
from the API: a renamed argument or a changed default breaks this file before it misleads a reader."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from onetrip import Layout, SentenceTransformerEmbedder, ingest_paths, init_schema

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "onetrip" / "demo_corpus"


def python_blocks() -> list[str]:
    return blocks("python")


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)


def run_block(index: int, name: str) -> dict:
    """Execute one README block in a fresh namespace; its connections are closed afterwards."""
    namespace: dict = {}
    try:
        exec(compile(python_blocks()[index], f"README.md ({name})", "exec"), namespace)
    finally:
        for value in namespace.values():
            if type(value).__name__ in ("Connection", "Retriever"):
                value.close()
    return namespace


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()  # the model the README's Retriever uses by default


def test_every_python_block_of_the_readme_is_run_here():
    python = python_blocks()
    assert len(python) == 2, "a Python block was added to or removed from README.md: run it in this file"
    assert "r.assemble(" in python[0] and "ingest_paths(" in python[1]
    # the shell blocks: the two quick-start commands (.ci/run runs them) and the HTTP one, run below
    shell = blocks("bash")
    assert len(shell) == 3 and "onetrip demo" in shell[0] and "pytest" in shell[1] and "serve" in shell[2]


def test_the_python_api_example_on_the_demo_tables(db, dsn, embedder, monkeypatch, capsys):
    layout = init_schema(db, Layout(prefix="demo_"))  # what `onetrip demo` fills
    assert ingest_paths(db, [DEMO], layout=layout, embedder=embedder).new == 3
    monkeypatch.setenv("ONETRIP_DSN", dsn)  # connect() with no argument: this server, not the embedded one
    ns = run_block(0, "Python API")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) > 5 and [line.split()[0] for line in lines[:5]] == ["1", "2", "3", "4", "5"], out
    ctx = ns["ctx"]
    assert ctx.passages and len({(p.doc_id, p.section_id) for p in ctx.passages}) == len(ctx.passages)
    assert sum(p.token_count for p in ctx.passages) <= 2000
    # the question's answer is in the policy's exclusions; the rendered context printed last holds it
    assert "tennis elbow" in ctx.render() and "tennis elbow" in out


def test_the_ingestion_example_in_a_folder_of_documents(db, dsn, embedder, tmp_path, monkeypatch, capsys):
    shutil.copytree(DEMO, tmp_path / "docs")
    monkeypatch.chdir(tmp_path)  # the example ingests "docs/"
    monkeypatch.setenv("ONETRIP_DSN", dsn)
    monkeypatch.setattr("onetrip.SentenceTransformerEmbedder", lambda: embedder)  # one model load per module
    ns = run_block(1, "ingestion")
    report = ns["report"]
    assert (report.new, report.failed) == (3, [])
    printed = capsys.readouterr().out.split()
    assert {"espresso-machine-manual.md", "remote-work-policy.html", "travel-insurance-policy.md"} <= set(printed)
    assert ns["page"] == []  # after the last document of a one-page list: the next page is empty
    rows = db.execute("SELECT DISTINCT collection, acl FROM kb_documents").fetchall()  # the example's prefix
    assert rows == [("policies", ["hr"])]


def test_the_http_example_as_written(db, dsn, embedder):
    """The README's curl session, run by bash as written (port 8765 included), with its answer as the
    comment under it says: the exclusions section first, a context within the 300 tokens asked for."""
    layout = init_schema(db, Layout(prefix="demo_"))
    assert ingest_paths(db, [DEMO], layout=layout, embedder=embedder).new == 3
    script = blocks("bash")[2]
    assert script.count("8765") == 3  # the README's port: `serve`, the health loop, the search ...
    with socket.socket() as s:  # ... swapped for a free one, so that a busy 8765 cannot fail the test
        s.bind(("127.0.0.1", 0))
        script = script.replace("8765", str(s.getsockname()[1]))
    bin_dir = str(Path(sys.executable).parent)  # the `onetrip` console script is installed beside python
    env = {**os.environ, "ONETRIP_DSN": dsn, "HF_HUB_OFFLINE": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # the block leaves the service running in the background (`&`): stop it, whatever happened
    proc = subprocess.Popen(["bash", "-c", f"trap 'kill %1 2>/dev/null; wait' EXIT\n{script}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:  # a block stopped early (a timeout, a failed test) leaves no service behind: its whole group goes
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, err[-2000:]
    answer = json.loads(out.strip().splitlines()[-1])
    top = answer["hits"][0]
    assert (top["rank"], top["doc_id"], top["section_id"]) == (1, "travel-insurance-policy.md", "policy-exclusions")
    assert len(answer["hits"]) == 2 and {"parent", "prev", "next", "score"} <= set(top)
    ctx = answer["context"]
    assert ctx["max_tokens"] == 300 and 0 < ctx["tokens"] <= 300 and ctx["hits"] >= 1
    assert ctx["text"].startswith("### ") and "tennis elbow" in ctx["text"]


def test_every_cli_command_and_option_is_in_the_readme():
    """The README's CLI table and HTTP section name every subcommand and every long option the parser has, so
    a flag added to the CLI without a word in the README fails here (`--[no-]x` in the README names both)."""
    import argparse

    from onetrip.cli import build_parser

    readme = (ROOT / "README.md").read_text()
    readme = re.sub(r"--\[no-\]([a-z-]+)", r"--\1 --no-\1", readme)
    undocumented: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if f"`onetrip {path}{name}" not in readme:  # a row of the CLI table starts so
                        undocumented.append(f"onetrip {path}{name}")
                    walk(sub, f"{path}{name} ")
            else:
                undocumented.extend(f"onetrip {path.strip()} {o}" for o in action.option_strings
                                    if o.startswith("--") and o != "--help" and not re.search(rf"{o}(?![a-z-])",
                                                                                            readme))

    walk(build_parser(), "")
    assert undocumented == []


def test_every_public_name_is_in_the_readme():
    """What `from onetrip import ...` offers (``onetrip.__all__``) is named in the README: in its code (inline,
    or a Python block this file runs)."""
    import onetrip

    readme = (ROOT / "README.md").read_text()
    code = "\n".join(python_blocks() + re.findall(r"(?<!`)`([^`]+)`(?!`)", readme))
    assert [n for n in onetrip.__all__ if not re.search(rf"\b{n}\b", code)] == []


def test_the_readmes_http_request_fields_are_the_services():
    """The README's endpoint table lists each request body's fields (and /documents' query parameters) as the
    service's own OpenAPI document defines them: a field added to the service without a word there fails."""
    from onetrip.http_service import ServiceConfig, openapi_document

    doc = openapi_document(ServiceConfig())
    schemas = doc["components"]["schemas"]
    readme = (ROOT / "README.md").read_text()

    def listed(row_start: str) -> set[str]:
        (row,) = [line for line in readme.splitlines() if line.startswith(row_start)]
        body = re.search(r"body `\{(.*?)\}`", row).group(1)  # "query \| embedding, k, ...": the field names
        return set(re.findall(r"[a-z_]+", body)) - {"both"}  # "queries | embeddings | both"

    assert listed("| `POST /search` |") == set(schemas["SearchRequest"]["properties"])
    many = listed("| `POST /search_many` |") - {"parent", "neighbors"}  # expand's own keys, shown inline
    assert many == set(schemas["SearchManyRequest"]["properties"])
    (row,) = [line for line in readme.splitlines() if line.startswith("| `GET /documents?")]
    params = set(re.findall(r"[?&]([a-z_]+)=", row.split("`")[1]))
    assert params == {p["name"] for p in doc["paths"]["/documents"]["get"]["parameters"]}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_relative_links_in_the_docs_reach_a_file_and_a_heading():
    """Every relative link in the project's Markdown (README, sql/, benchmarks/ READMEs and results) names a
    file that is in the repository and, with a #fragment, a heading of that file."""
    docs = [ROOT / "README.md", *ROOT.glob("sql/**/*.md"), *ROOT.glob("benchmarks/**/*.md")]
    broken: list[str] = []
    for doc in docs:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)  # not inside code blocks
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and file.suffix == ".md":
                headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)}
                if fragment not in headings:
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_paths_the_readme_names_exist():
    """The README's backquoted repository paths ("where is the CTE?": `sql/templates/hits_cte.sql.j2`, ...)."""
    readme = (ROOT / "README.md").read_text()
    paths = set(re.findall(r"`((?:src|sql|benchmarks|tests|scripts|\.ci)/[^`\s]*)`", readme))
    assert len(paths) > 30
    assert [p for p in sorted(paths) if not list(ROOT.glob(p.rstrip("/")))] == []
