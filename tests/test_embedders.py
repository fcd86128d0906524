"""The bundled default model: loads offline, quietly, and leaves the caller's settings alone."""

from __future__ import annotations

import numpy as np
from transformers.utils import logging as hf_logging

from onetrip.embedders import SentenceTransformerEmbedder


def test_default_model_loads_without_a_progress_bar_and_restores_the_setting(capfd):
    hf_logging.enable_progress_bar()
    e = SentenceTransformerEmbedder()
    v = e.embed_query("How do I create an index?")
    err = capfd.readouterr().err
    assert "Loading weights" not in err, err[-300:]
    assert hf_logging.is_progress_bar_enabled()  # switched off while loading only
    assert v.shape == (384,) and v.dtype == np.float32
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
