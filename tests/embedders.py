"""A cheap deterministic embedder for DB tests that do not need semantic vectors.

It is an `Embedder` like any user's plug-in, not a stand-in for the database.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class HashEmbedder:
    name = "hash-test"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


class LoopWatchingEmbedder(HashEmbedder):
    """HashEmbedder that notes, each time it embeds `embedders.PROBE_TEXT` (a retriever's model check), whether
    that ran on a running event loop (where a model call holds up every other task) or in a worker thread."""

    def __init__(self, dim: int = 384) -> None:
        super().__init__(dim)
        self.probe_on_loop: list[bool] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        from onetrip.embedders import PROBE_TEXT

        if PROBE_TEXT in texts:
            try:
                asyncio.get_running_loop()
                self.probe_on_loop.append(True)
            except RuntimeError:
                self.probe_on_loop.append(False)
        return super().embed_documents(texts)


def linked_model_copy(folder: Path) -> Path:
    """The bundled model's files under another folder name: a second model, as far as names go."""
    from onetrip.embedders import default_model_path

    src = Path(default_model_path())
    for f in src.rglob("*"):
        if f.is_file():
            dest = folder / f.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(f)
    return folder
