"""onetrip's query-vector dumper writes exactly the vector pgvector's own dumper writes."""

from __future__ import annotations

import numpy as np
import pytest
from pgvector import Vector

from onetrip.psycopg_adapters import Float32VectorDumper


def test_ndarray_and_vector_dump_to_the_same_server_value(db):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(384).astype(np.float32)
    x[:3] = (0.0, -0.0, 1e-30)
    want = db.execute("SELECT %s::vector::text", (Vector(x).to_text(),)).fetchone()[0]  # text path, no dumper
    for value in (x, x.astype(np.float64), Vector(x), x[::-1][::-1]):
        got = db.execute("SELECT %s::vector::text", (value,)).fetchone()[0]
        assert got == want, type(value)
    dumper = db.adapters.get_dumper(np.ndarray, "b")
    assert issubclass(dumper, Float32VectorDumper)


def test_not_a_vector_is_refused_naming_the_shape(db):
    with pytest.raises(ValueError, match=r"one-dimensional, got shape \(2, 3\)"):
        db.execute("SELECT %s::vector", (np.ones((2, 3), np.float32),))
