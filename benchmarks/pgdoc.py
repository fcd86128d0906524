"""Get the PostgreSQL 15 HTML manual (Debian's postgresql-doc-15) for benchmarks.

`ensure_manual()` returns the folder of *.html pages, downloading and unpacking
the .deb with apt-get/dpkg on first use (Debian's registry is reachable here;
nothing else is fetched).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("ONETRIP_PGDOC", Path.home() / ".cache" / "onetrip" / "pgdoc"))
HTML_SUBDIR = Path("usr/share/doc/postgresql-doc-15/html")


def ensure_manual(root: Path | None = None) -> Path:
    """Folder with the manual's HTML pages; downloaded once into ``root``."""
    root = Path(root or DEFAULT_ROOT)
    html = root / HTML_SUBDIR
    if html.is_dir() and any(html.glob("*.html")):
        return html
    root.mkdir(parents=True, exist_ok=True)
    debs = sorted(root.glob("postgresql-doc-15_*.deb"))
    if not debs:
        subprocess.run(["apt-get", "download", "postgresql-doc-15"], cwd=root, check=True)
        debs = sorted(root.glob("postgresql-doc-15_*.deb"))
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(root)], check=True)
    if not html.is_dir():
        raise FileNotFoundError(f"no HTML pages at {html} after unpacking {debs[-1]}")
    return html


def find_manual(explicit: str | None) -> Path:
    """An explicit --manual folder, else a previously unpacked one, else download."""
    if explicit:
        p = Path(explicit)
        for cand in (p, p / HTML_SUBDIR):
            if cand.is_dir() and any(cand.glob("*.html")):
                return cand
        raise FileNotFoundError(f"--manual {explicit}: no *.html pages there")
    return ensure_manual()
