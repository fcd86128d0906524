"""The window baseline's tables, on a real server: built once, reused, and searchable lexically."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.quality.windows import build_windows
from onetrip import Retriever

from .embedders import HashEmbedder

DATA = Path(__file__).parent / "data" / "parsing"


def test_build_windows_counts_word_weights_so_lexical_baselines_use_idf(db, tmp_path):
    shutil.copy(DATA / "manual_like.html", tmp_path / "manual_like.html")
    first = build_windows(db, tmp_path, prefix="win_", embedder=HashEmbedder(), size=64, overlap=8)
    assert first["built"] == 1 and first["windows_stored"] > 1
    assert first["term_stats_words"] > 0
    words = db.execute("SELECT count(*) FROM win_term_stats").fetchone()[0]
    assert words == first["term_stats_words"]
    again = build_windows(db, tmp_path, prefix="win_", embedder=HashEmbedder(), size=64, overlap=8)
    assert again["built"] == 0 and again["unchanged"] == 1 and "term_stats_words" not in again
    # a table whose counts are missing (built before the recount) gets them on the next run
    db.execute("DELETE FROM win_term_stats")
    healed = build_windows(db, tmp_path, prefix="win_", embedder=HashEmbedder(), size=64, overlap=8)
    assert healed["built"] == 0 and healed["term_stats_words"] == words
    r = Retriever(db, prefix="win_", embedder=HashEmbedder())
    hits = r.search("transaction isolation", k=2, mode="lexical", parent=False, neighbors=False)
    # the windows table searches lexically; that the counts weigh its words is test_hybrid's to show
    assert len(hits) == 2 and all("isolation" in h.section.content.lower() for h in hits)
