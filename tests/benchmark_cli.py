"""Running a benchmark script with bad flags, for the benchmark smoke tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = "host=/nonexistent/onetrip-no-server dbname=none"  # a run that got past its flags fails to connect


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
