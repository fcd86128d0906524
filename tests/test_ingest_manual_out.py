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
