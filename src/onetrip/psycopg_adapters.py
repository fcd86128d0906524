"""psycopg adapters for onetrip's connections: pgvector's, plus a lean dumper for query vectors.

pgvector-python dumps a numpy query vector by copying it into an ``array.array``,
byteswapping that and concatenating a header: measured at ~25 us per query
between two socket waits on the latency benchmark's hot path, more than the
index probes of a hit's parent and neighbors. `Float32VectorDumper` writes the
same binary ``vector`` value with one ``astype`` and one ``tobytes``. Every
onetrip connection (connect, pools, Retriever, AsyncRetriever) registers it.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

_BIG_ENDIAN_F4 = np.dtype(">f4")


class Float32VectorDumper(Dumper):
    """A 1-d numpy array as pgvector's binary ``vector``: uint16 dim, uint16 0, big-endian float4s.

    Registered for numpy arrays; psycopg also picks it by oid (binary COPY with
    ``set_types``), so it accepts pgvector's ``Vector`` and sequences as well.
    """

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        arr = obj if type(obj) is np.ndarray else np.asarray(obj.to_numpy() if hasattr(obj, "to_numpy") else obj)
        if arr.ndim != 1:
            raise ValueError(f"a vector must be one-dimensional, got shape {arr.shape}")
        return struct.pack(">HH", arr.shape[0], 0) + arr.astype(_BIG_ENDIAN_F4).tobytes()


def _register_dumper(conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
    info = conn.adapters.types.get("vector")
    if info is None:  # pragma: no cover - register_vector raised already
        raise psycopg.ProgrammingError("vector type not found in the database")
    conn.adapters.register_dumper("numpy.ndarray", type("", (Float32VectorDumper,), {"oid": info.oid}))


def register_adapters(conn: psycopg.Connection) -> None:
    """Register pgvector's psycopg adapters (vector, halfvec, sparsevec) and the lean ndarray dumper."""
    from pgvector.psycopg import register_vector

    register_vector(conn)
    _register_dumper(conn)


async def register_adapters_async(conn: psycopg.AsyncConnection) -> None:
    """Async twin of `register_adapters`."""
    from pgvector.psycopg import register_vector_async

    await register_vector_async(conn)
    _register_dumper(conn)
