"""The bundled default model: loads offline, quietly, and leaves the caller's settings alone."""

from __future__ import annotations

import numpy as np
import pytest
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


def test_a_repeated_query_is_not_embedded_again(monkeypatch):
    e = SentenceTransformerEmbedder(query_cache=2)
    calls: list[list[str]] = []
    real = e.embed_documents

    def counting(texts):
        calls.append(list(texts))
        return real(texts)

    monkeypatch.setattr(e, "embed_documents", counting)
    a = e.embed_query("How do I create an index?")
    assert e.embed_query("How do I create an index?") is a and len(calls) == 1
    assert not a.flags.writeable  # shared by every caller: nobody may change it in place
    b = e.embed_query("What is VACUUM?")
    e.embed_query("How do I create an index?")  # refreshes it: "What is VACUUM?" is now the oldest
    e.embed_query("Which port does the server use?")  # the third text evicts the oldest
    assert len(calls) == 3
    assert e.embed_query("What is VACUUM?") is not b and len(calls) == 4
    assert np.array_equal(e.embed_query("What is VACUUM?"), b)
    # the cached vector is the model's: equal to a fresh embedding of the same text
    assert np.allclose(a, real(["How do I create an index?"])[0], atol=1e-6)

    off = SentenceTransformerEmbedder(query_cache=0)
    monkeypatch.setattr(off, "embed_documents", counting)
    off.embed_query("x")
    off.embed_query("x")
    assert calls[-2:] == [["x"], ["x"]]
    e.query_cache = 0  # turned off after construction: no cached vector comes back (found by review)
    e.embed_query("How do I create an index?")
    assert calls[-1] == ["How do I create an index?"] and len(e._queries) == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="query_cache"):
            SentenceTransformerEmbedder(query_cache=bad)


def test_a_model_folder_under_home_loads_and_batch_size_is_checked_when_made(tmp_path, monkeypatch):
    """Found by review: SentenceTransformerEmbedder('~/model') named the folder (its name expanded '~') but
    handed the literal '~/model' to sentence-transformers, which read it as a hub id and failed; a
    batch_size of the wrong type failed only at the first embedding, inside sentence-transformers."""
    import os

    from onetrip.embedders import default_model_path

    monkeypatch.setenv("HOME", str(tmp_path))
    os.symlink(default_model_path(), tmp_path / "mymodel")
    e = SentenceTransformerEmbedder("~/mymodel")
    assert e.model_path == str(tmp_path / "mymodel")
    assert e.embed_query("hello").shape == (e.dim,) == (384,)
    for bad in ("8", 0, True, 2.0):
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            SentenceTransformerEmbedder(batch_size=bad)
