"""Running a benchmark script with bad flags, for the benchmark smoke tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = "host=/nonexistent/onetrip-no-server dbname=none"  # a run that got past its flags fails to connect


def ingest_one_page_manual(dsn: str, tmp_path: Path) -> None:
    """A one-page stand-in for the PostgreSQL manual, ingested as `benchmarks.ingest_manual` does (tables pg15_)."""
    from benchmarks import ingest_manual

    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "page.html").write_text("<html><body><h1>Vacuum</h1><h2 id='a'>Freezing</h2><p>Text.</p>"
                                      "<h2 id='b'>Statistics</h2><p>More text.</p></body></html>")
    assert ingest_manual.main(["--dsn", dsn, "--manual", str(manual), "--out", str(tmp_path / "ingest")]) == 0


def refused(module: str, *flags: str, dsn: str = UNREACHABLE) -> str:
    """Run ``python -m module`` with bad flags: exit 2, argparse's usage and one error line, no traceback
    (a run that got past its flags would fail to connect to UNREACHABLE: exit 1).

    Returns the error line.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("ONETRIP_DSN", None)
    r = subprocess.run([sys.executable, "-m", module, "--dsn", dsn, *flags], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    lines = r.stderr.rstrip("\n").splitlines()
    assert lines[-1].startswith(f"python -m {module}: error: "), r.stderr
    assert all(line.startswith(("usage: ", " ")) for line in lines[:-1]), r.stderr  # the rest is the usage
    return lines[-1]


def cannot_connect(module: str, *flags: str) -> str:
    """Run ``python -m module`` with good flags and a DSN that does not answer: exit 1, one error line naming
    the connection, no traceback. Returns that line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("ONETRIP_DSN", None)
    r = subprocess.run([sys.executable, "-m", module, "--dsn", UNREACHABLE, *flags], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.rstrip("\n").splitlines()
    assert lines[-1].startswith(f"python -m {module}: error: could not connect to PostgreSQL at "), r.stderr
    return lines[-1]
