"""benchmarks.ingest_manual --out takes a folder, as every other benchmark's --out does, or a .json file.

Given a folder it had written to the folder's path as a file and failed with
IsADirectoryError after the whole ingest (minutes for the manual), writing nothing.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import ingest_manual


def test_out_is_a_json_file_or_a_folder(tmp_path):
    assert ingest_manual.output_path("benchmarks/results/ingest_manual.json").name == "ingest_manual.json"
    assert ingest_manual.output_path(str(tmp_path / "other.json")) == tmp_path / "other.json"
    assert ingest_manual.output_path(str(tmp_path)) == tmp_path / "ingest_manual.json"  # an existing folder
    assert ingest_manual.output_path(str(tmp_path / "new")) == tmp_path / "new" / "ingest_manual.json"
    (tmp_path / "odd.json").mkdir()  # a folder named *.json is still a folder
    assert ingest_manual.output_path(str(tmp_path / "odd.json")) == tmp_path / "odd.json" / "ingest_manual.json"


@pytest.mark.slow
def test_ingest_into_an_existing_out_folder(dsn, tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "page.html").write_text("<html><body><h1>Page</h1><h2 id='a'>Part</h2><p>Some text.</p></body></html>")
    out = tmp_path / "results"
    out.mkdir()
    assert ingest_manual.main(["--dsn", dsn, "--manual", str(manual), "--prefix", "outdir_", "--out", str(out)]) == 0
    result = json.loads((out / "ingest_manual.json").read_text())
    assert result["pages"] == 1 and result["sections_stored"] >= 1
    # the timings are the server's too: the result names it, as every other benchmark's does
    assert set(result["server"]) == {"postgresql", "pgvector"} and all(result["server"].values())


def test_load_http_out_is_a_folder_or_a_json_file(tmp_path):
    """load_http took --out as a stem: a folder given got outdir.json beside it, and run.v2 became run.json."""
    from benchmarks.args import output_file

    assert output_file(str(tmp_path), "load_http.json") == tmp_path / "load_http.json"
    assert output_file(str(tmp_path / "run.v2"), "load_http.json") == tmp_path / "run.v2" / "load_http.json"
    assert output_file(str(tmp_path / "mine.json"), "load_http.json") == tmp_path / "mine.json"


def test_load_http_makes_every_text_request_distinct():
    """A review: the embedder keeps its last 1,024 query vectors, and the 20 questions repeated were answered from
    that cache after the warm-up, so --payload text measured no embedding while its report said the service
    embedded each question. Each text request is now made distinct; a precomputed embedding is sent as it is."""
    from benchmarks.load_http import QUESTIONS, distinct

    body = {"k": 5, "query": QUESTIONS[0]}
    sent = {distinct(body, n)["query"] for n in range(3000)} | {distinct(body, "warm-up")["query"]}
    assert len(sent) == 3001 and all(q.startswith(QUESTIONS[0]) for q in sent)
    with_vector = {"k": 5, "embedding": [0.1] * 384, "query": QUESTIONS[0]}  # hybrid: the service embeds nothing
    assert distinct(with_vector, 7) == with_vector


@pytest.mark.slow
def test_load_http_refuses_tables_holding_another_synthetic_size(dsn):
    """A review: a run of --synthetic 5000 over tables an earlier --synthetic 1000 had filled measured the 1,018
    sections there, without a word."""
    from benchmarks.load_http import prepare_corpus
    from onetrip.connection import connect
    from onetrip.layout import Layout
    from onetrip.schema import init_schema
    from onetrip.synthetic import bulk_load, generate

    with connect(dsn) as conn:
        layout = init_schema(conn, Layout(dim=384, prefix="lh_"))
        bulk_load(conn, layout, list(generate(300, dim=384, seed=7, doc_prefix="syn")))
    with pytest.raises(SystemExit, match="the lh_ tables hold 300 synthetic sections, not --synthetic 500"):
        prepare_corpus(dsn, "lh_", 500)
