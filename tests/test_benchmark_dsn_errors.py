"""Every benchmark script turns a DSN that does not answer into one error line (exit 1), as `onetrip` does.

They had shown a traceback ending in onetrip's ConnectionFailedError.
"""

from __future__ import annotations

import json

import pytest

from tests.benchmark_cli import cannot_connect


def _questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "What does VACUUM do?", "evidence": [
        {"page": "sql-vacuum.html", "section_id": "id-1", "quote": "VACUUM reclaims storage"}]}) + "\n")
    return str(path)


def _manual(tmp_path):
    (tmp_path / "manual").mkdir()
    (tmp_path / "manual" / "page.html").write_text("<html><body><h1>Page</h1><p>Text.</p></body></html>")
    return str(tmp_path / "manual")


CASES = {
    "benchmarks.latency.run": lambda tmp: ["--sizes", "1000", "--rtts", "0", "--out", str(tmp / "out")],
    "benchmarks.latency.cost_split": lambda tmp: ["--sizes", "2000", "--out", str(tmp / "out")],
    "benchmarks.latency.many_queries": lambda tmp: ["--size", "2000", "--out", str(tmp / "out")],
    "benchmarks.scale.run": lambda tmp: ["--sizes", "10000", "--out", str(tmp / "out")],
    "benchmarks.ingest_manual": lambda tmp: ["--manual", _manual(tmp), "--out", str(tmp / "out")],
    "benchmarks.load_http": lambda tmp: ["--out", str(tmp / "out")],
    "benchmarks.quality.run": lambda tmp: ["--questions", _questions(tmp), "--out", str(tmp / "out")],
    "benchmarks.quality.lexical_grid": lambda tmp: ["--questions", _questions(tmp), "--out", str(tmp / "out")],
}


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(CASES))
def test_unreachable_dsn_is_one_line(module, tmp_path):
    line = cannot_connect(module, *CASES[module](tmp_path))
    assert "/nonexistent/onetrip-no-server" in line  # names the server it tried
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))  # nothing written
