"""Write documents and their sections: bulk COPY, one transaction per document.

Replacing a document is atomic. The old sections are deleted and the new ones
copied in inside one transaction, serialised per document by an advisory lock,
so a concurrent search (one statement, one snapshot) sees either every old
section or every new one, never a mix; a failure or a kill before COMMIT leaves
the previous revision in place. An unchanged content hash is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np
import psycopg
from pgvector import Vector
from psycopg import sql
from psycopg.types.json import Jsonb

from .connection import require_autocommit, require_connection
from .embedders import LENGTH_RANGE, NAMED_IN_ERRORS
from .errors import DimensionMismatchError, missing_table_error
from .identifiers import quote_ident
from .layout import Layout

Outcome = Literal["new", "changed", "unchanged"]

SECTION_COLUMNS = (
    "doc_id", "section_id", "parent_section_id", "sequence_index", "parent_sequence_index", "heading_level", "heading",
    "heading_path", "anchor", "content", "token_count", "context_tokens", "revision", "collection", "acl",
    "embedding", "metadata", "path_text", "terms",
)
COPY_TYPES = ["text", "text", "text", "int4", "int4", "int2", "text", "text[]", "text", "text", "int4", "int4", "int4",
               "text", "text[]", "vector", "jsonb", "text", "text[]"]


class SectionLike(Protocol):
    """What `replace_document` reads from a section (onetrip.sections.Section fits)."""

    section_id: str
    parent_section_id: str | None
    sequence_index: int
    level: int
    heading: str
    heading_path: Sequence[str]
    content: str
    token_count: int
    anchor: str | None
    metadata: Mapping[str, Any]


#: The longest doc_id and section_id stored, in UTF-8 bytes: (doc_id, section_id) is a btree key, and
#: PostgreSQL refuses an index row past ~2,700 bytes with a message naming the index, not the document.
#: Parsed section ids are at most 200 characters (sections.MAX_SECTION_ID), 800 bytes.
MAX_DOC_ID_BYTES = 1800
MAX_SECTION_ID_BYTES = 800
#: Longer "technical terms" (identifier-like runs such as max_connections) are not stored or searched: the
#: GIN index on `terms` refuses entries past ~2,700 bytes, and no real identifier is this long.
MAX_TERM_CHARS = 200


@dataclass(frozen=True)
class DocumentRecord:
    """The documents row for one source file or text."""

    doc_id: str
    source_uri: str
    title: str
    content_hash: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    collection: str = "default"
    acl: Sequence[str] | None = None  # principals allowed to read; None = everyone

    def __post_init__(self) -> None:
        check_doc_id(self.doc_id)
        for name in ("title", "source_uri", "content_hash"):  # NOT NULL columns had failed mid-transaction
            v = getattr(self, name)
            if not isinstance(v, str) and not (v is None and name == "title"):
                want = "a string or None" if name == "title" else "a string"
                raise TypeError(f"{self.doc_id}: {name} must be {want}, got {v!r:.80}")
            check_text(v or "", f"{self.doc_id}: the {name} {v!r:.80}")  # psycopg's own refusal named no column
        if not isinstance(self.metadata, Mapping):
            raise TypeError(f"{self.doc_id}: metadata must be a mapping (a dict), got {self.metadata!r:.80}")
        check_access_values(self.collection, self.acl)


def check_doc_id(doc_id: Any) -> str:
    """A document id PostgreSQL stores and indexes: a non-empty UTF-8 string, no NUL, at most MAX_DOC_ID_BYTES."""
    if not isinstance(doc_id, str) or not doc_id or "\x00" in doc_id:
        raise ValueError(f"doc_id must be a non-empty string without NUL, got {doc_id!r:.80}")
    try:
        check_text(doc_id, f"doc_id {doc_id!r:.80}")
    except ValueError as e:  # a file name in another encoding: os.fsdecode's surrogates
        raise ValueError(f"{e}: a file name that is not UTF-8 (rename the file; ingest_paths also takes a "
                         "doc_id for a single file)") from None
    if len(doc_id.encode()) > MAX_DOC_ID_BYTES:  # PostgreSQL's btree refuses index rows past ~2.7 kB
        raise ValueError(f"doc_id {doc_id[:60]!r}... is {len(doc_id.encode())} bytes; "
                         f"the limit is {MAX_DOC_ID_BYTES} (it is a key of the documents and sections indexes)")
    return doc_id


def check_text(text: str, what: str) -> str:
    """``text`` if PostgreSQL text can hold it, else a ValueError naming ``what``: a NUL character, or a lone
    surrogate (not valid Unicode: os.fsdecode's for a file name in another encoding), which psycopg had refused
    mid-transaction with a message naming no field ('text fields cannot contain NUL', a bare UnicodeEncodeError).
    The one check of doc ids, keys, a document's fields and a section's texts."""
    if "\x00" in text:
        raise ValueError(f"{what} holds a NUL character, which PostgreSQL text cannot store")
    try:
        text.encode()
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid Unicode ({e.reason} at position {e.start} of {text[:40]!r})") \
            from None
    return text


def check_access_values(collection: Any, acl: Any) -> None:
    """Refuse a collection or ACL that would be stored as something else: acl="hr" had become {h,r}."""
    if not isinstance(collection, str) or not collection:
        raise ValueError(f"collection must be a non-empty string, got {collection!r}")
    check_text(collection, "collection")  # NUL, or not UTF-8 (from argv): every file had failed on its own
    check_acl(acl)


def check_acl(acl: Any) -> None:
    """None (readable by everyone) or a sequence of non-empty principal names, never one string."""
    if acl is None:
        return
    if isinstance(acl, (str, bytes)):
        raise TypeError(f"acl must be a sequence of principals such as [{acl!r}], not one string (it would be "
                        "read as one principal per character)")
    if not all(isinstance(a, str) and a for a in acl):
        raise ValueError(f"acl must hold non-empty strings, got {list(acl)!r}")
    for a in acl:
        check_text(a, "acl principal")


@dataclass(frozen=True)
class StoreResult:
    doc_id: str
    outcome: Outcome
    revision: int
    sections: int
    made_public: bool = False  # it had an ACL and is now stored without one (readable by everyone)
    moved_from: str | None = None  # the collection it was stored in, when that was another one


def current_hash(conn: psycopg.Connection, layout: Layout, doc_id: str) -> str | None:
    """The stored content hash of a document, or None if it is not stored."""
    q = sql.SQL("SELECT content_hash FROM {} WHERE doc_id = %s").format(sql.SQL(layout.tables["documents"]))
    row = conn.execute(q, (doc_id,)).fetchone()
    return None if row is None else row[0]


def _same_access(stored_collection: str | None, stored_acl: Sequence[str] | None, collection: str | None,
                 acl: Sequence[str] | None) -> bool:
    """The stored collection and ACL are the ones asked for (the ACL compared as a set of principals)."""
    return stored_collection == collection and \
        (None if stored_acl is None else set(stored_acl)) == (None if acl is None else set(acl))


def _access_change(stored_collection: str, stored_acl: Sequence[str] | None, collection: str,
                   acl: Sequence[str] | None) -> dict[str, Any]:
    """What a new revision changed of a stored document's access, as `StoreResult` reports it."""
    return {"made_public": stored_acl is not None and acl is None,
            "moved_from": stored_collection if stored_collection != collection else None}


StoredState = Literal["new", "content", "sectioning", "access", "source", "unchanged"]


def stored_state(conn: psycopg.Connection, layout: Layout, doc_id: str, content_hash: str,
                 collection: str | None, acl: Sequence[str] | None, *,
                 sectioning: int | None = None, source_uri: str | None = None) -> tuple[StoredState, str | None]:
    """How a document to be stored differs from the stored one: not stored, its content, how it was cut into
    sections, only its access, only where its file is (``source_uri``, when given: `set_document_source`),
    nothing; and the stored ``source_uri`` (None when not stored), read in the same statement.

    Access counts, not only content: a re-ingest of an unchanged file with
    another ``acl`` or ``collection`` must store it ("access": `set_document_access`,
    no re-embedding), or a narrowed ACL would silently not take effect. With
    ``sectioning`` (`onetrip.sections.SECTIONING`), an unchanged file stored
    under a lower number (or none: before 2026-12-05, or one that is not a
    number) is "sectioning": to be cut again and stored in full. A higher
    number is left alone: a newer onetrip cut it, and an older one re-cutting
    it would make the two undo each other on every run.
    """
    # the number is onetrip's only beside EMBEDDING_TEXT_KEY: a file's front matter was stored as written, and
    # until 2026-12-05 10:19 onetrip wrote no SECTIONING_KEY over it, so a file's own onetrip_sectioning: 8 had
    # read as a newer onetrip's cut and kept the old one for good. EMBEDDING_TEXT_KEY is onetrip's own from
    # 12:44 that day (written over a file's own); a document stored in between is re-cut once more, which its
    # SECTIONING of that day (2 or 3) makes it be anyway
    q = sql.SQL("SELECT content_hash, collection, acl, CASE WHEN metadata ? %s THEN metadata ->> %s END, source_uri "
                "FROM {} WHERE doc_id = %s").format(sql.SQL(layout.tables["documents"]))
    row = conn.execute(q, (EMBEDDING_TEXT_KEY, SECTIONING_KEY, doc_id)).fetchone()
    if row is None:
        return "new", None
    if row[0] != content_hash:
        return "content", row[4]
    if sectioning is not None and _cut_before(row[3], sectioning):
        return "sectioning", row[4]
    if not _same_access(row[1], row[2], collection, acl):
        return "access", row[4]
    return ("source" if source_uri is not None and row[4] != source_uri else "unchanged"), row[4]


def set_document_source(conn: psycopg.Connection, layout: Layout, doc_id: str, content_hash: str,
                        source_uri: str) -> bool:
    """Record where an unchanged document's file is now (a moved folder), in place: no new revision, as nothing
    a search returns changed but the source (which a `Filters.source_prefix` reads, and which had kept the old
    path for good). False if the stored content is no longer ``content_hash`` (another writer came first)."""
    q = sql.SQL("UPDATE {} SET source_uri = %s WHERE doc_id = %s AND content_hash = %s").format(
        sql.SQL(layout.tables["documents"]))
    return conn.execute(q, (source_uri, doc_id, content_hash)).rowcount > 0


def _cut_before(stored: str | None, sectioning: int) -> bool:
    """Whether a document's stored ``onetrip_sectioning`` is older than ``sectioning``; none or garbage counts as older."""
    return stored is None or not stored.isdecimal() or int(stored) < sectioning


def set_document_access(conn: psycopg.Connection, layout: Layout, doc_id: str, content_hash: str,
                        collection: str, acl: Sequence[str] | None, *, source_uri: str | None = None,
                        keep_history: bool = False) -> StoreResult | None:
    """Give a stored document another collection and ACL as a new revision, its sections and vectors kept.

    For a re-ingest whose file did not change: one transaction under the
    document's lock, every section taking the document's new collection, and
    the document ``source_uri`` if given (the same file found under another
    path). A section stored with the document's ACL takes the new one; a
    section stored with an ACL of its own (`replace_document`; marked
    `OWN_ACL_KEY` in its metadata) keeps it: the document's access changing
    must not open, or close, what was set for that section alone (they had
    all taken the document's, a section for ``hr`` in a document for
    ``staff`` then readable by all staff). The mark, not the ACL's value,
    tells them apart: by value, a document set to ``hr`` and then back to
    ``staff`` had taken the hr section along to staff. A section stored
    before the mark keeps its ACL when it differs from the document's. None
    if the stored content hash is no longer ``content_hash`` (another writer
    came first): store it in full instead.
    """
    require_autocommit(conn, "set_document_access")
    check_access_values(collection, acl)
    documents, sections = sql.SQL(layout.tables["documents"]), sql.SQL(layout.tables["sections"])
    new_acl = None if acl is None else list(acl)
    with conn.transaction():
        _lock_document(conn, doc_id)
        row = conn.execute(sql.SQL("SELECT content_hash, revision, collection, acl FROM {} WHERE doc_id = %s")
                           .format(documents), (doc_id,)).fetchone()
        if row is None or row[0] != content_hash:
            return None
        if _same_access(row[2], row[3], collection, acl):
            return StoreResult(doc_id, "unchanged", row[1], 0)
        if keep_history:
            _archive_sections(conn, layout, doc_id)
        revision = row[1] + 1
        conn.execute(sql.SQL("UPDATE {} SET collection = %s, acl = %s, revision = %s, ingested_at = now(), "
                             "source_uri = coalesce(%s, source_uri) WHERE doc_id = %s").format(documents),
                     (collection, new_acl, revision, source_uri, doc_id))
        # marked: its own ACL, whatever it holds. Unmarked (stored before the mark) and equal to the
        # document's: it took the document's. Unmarked and another: its own
        n = conn.execute(sql.SQL("UPDATE {} SET collection = %s, revision = %s, acl = CASE WHEN metadata ? %s "
                                 "THEN acl WHEN acl IS NOT DISTINCT FROM %s::text[] THEN %s::text[] ELSE acl END "
                                 "WHERE doc_id = %s")
                         .format(sections), (collection, revision, OWN_ACL_KEY, row[3], new_acl, doc_id)).rowcount
    return StoreResult(doc_id, "changed", revision, n, **_access_change(row[2], row[3], collection, acl))


#: The documents.metadata key `ingest_paths` records its embedder's name under; prefixed so that a
#: document's own metadata (front matter, a caller's record) is neither read as one nor overwritten.
EMBEDDER_KEY = "onetrip_embedder"
#: The documents.metadata key `ingest_paths` records the model's `embedders.embedder_probe` under (a short list of
#: numbers: two models of one name, another version or fine-tune, are told apart by it).
EMBEDDER_PROBE_KEY = "onetrip_embedder_probe"
#: The documents.metadata key `ingest_paths` records `ingest.EMBEDDING_TEXT` under: how a section's text was put to
#: the model, which a stored vector must share to be reused for the same text.
EMBEDDING_TEXT_KEY = "onetrip_embedding_text"
#: The documents.metadata key `ingest_paths` records the file's format under ("markdown", "html", "rst", "text").
FORMAT_KEY = "onetrip_format"
#: The documents.metadata key `ingest_paths` keeps a file's `ParsedDocument.warnings` under (when it has any).
PARSE_WARNINGS_KEY = "onetrip_parse_warnings"
#: The documents.metadata key `ingest_paths` records `onetrip.sections.SECTIONING` under: how the file was cut.
SECTIONING_KEY = "onetrip_sectioning"
#: The sections.metadata key (true) of a section stored with an ``acl`` of its own, which `set_document_access`
#: leaves as it is; `replace_document` sets it and keeps a caller's own value under that key out.
OWN_ACL_KEY = "onetrip_own_acl"
TABLE_READABLE = "SELECT has_table_privilege(to_regclass(%s), 'SELECT')"
#: The binds of `recorded_embedders_query`.
RECORD_KEYS = {"k": EMBEDDER_KEY, "p": EMBEDDER_PROBE_KEY}


def recorded_embedders_query(layout: Layout) -> sql.Composed:
    """The embedder the stored documents record: the first recorded name, and the first probe recorded under it
    (binds: RECORD_KEYS). No row when no document has a record.

    What a retriever reads when it is made, and the HTTP service's /health (ingest
    keeps one model per table). Each read ends at the first row that answers it, at
    once when the first document has both. It reads every document when none has a
    record (precomputed loads), and the probe's when none recorded under the name has
    a probe (documents of an onetrip before 2026-12-05): 40-60 ms per 300,000
    documents, where the first row had cost 0.2 ms. Any one row had been read: a document stored by
    `replace_document`, which records no model, hid the others' record, and one
    stored before probes were recorded hid the others' probe, so another model
    searched unchecked (found by reviews). Ingest reads every document's,
    `recorded_models`.
    """
    return sql.SQL("SELECT r.name, (SELECT d.metadata -> %(p)s FROM {docs} AS d "
                   "WHERE d.metadata ->> %(k)s = r.name AND jsonb_typeof(d.metadata -> %(p)s) = 'array' LIMIT 1) "
                   "FROM (SELECT metadata ->> %(k)s AS name FROM {docs} "
                   "WHERE jsonb_typeof(metadata -> %(k)s) = 'string' LIMIT 1) AS r").format(
        docs=sql.SQL(layout.tables["documents"]))


def recorded_models(conn: psycopg.Connection, layout: Layout) -> list[tuple[str, Any, int]]:
    """Each (embedder name, probe or None, documents) recorded on the stored documents, in one pass over them:
    what ingest checks its model against. Empty when no document has a record (precomputed loads, documents of
    an older onetrip) or the caller may not read the documents table (a search-only role)."""
    readable = conn.execute(TABLE_READABLE, (layout.tables["documents"],)).fetchone()
    if not (readable and readable[0]):
        return []
    # the probe grouped as text (->>) and parsed here: grouping by the jsonb value sorted 500k documents' probes
    # by jsonb comparison, 1.0 s against 0.4 s, where the two passes this replaced took 0.9 s
    q = sql.SQL("SELECT metadata ->> %(k)s, "
                "CASE WHEN jsonb_typeof(metadata -> %(p)s) = 'array' THEN metadata ->> %(p)s END, count(*) "
                "FROM {} WHERE jsonb_typeof(metadata -> %(k)s) = 'string' GROUP BY 1, 2 ORDER BY 1").format(
        sql.SQL(layout.tables["documents"]))
    return [(name, None if probe is None else json.loads(probe), n)
            for name, probe, n in conn.execute(q, RECORD_KEYS).fetchall()]


def recorded_embedders(conn: psycopg.Connection, layout: Layout) -> list[str]:
    """The names of the embedders ingest recorded on the stored documents (`recorded_models`' names); what one
    document says is `recorded_record`'s."""
    return model_names(recorded_models(conn, layout))


def model_names(models: Iterable[tuple[str, Any, int]]) -> list[str]:
    """The embedder names of `recorded_models`' rows, each once, sorted."""
    return sorted({name for name, _, _ in models})


def recorded_record(conn: psycopg.Connection, layout: Layout) -> tuple[list[str], Any]:
    """What one stored document says of its embedder: its name (a list of none or one) and its probe (None when
    it has none); what a retriever reads once, when it is made, to check the model it embeds text with."""
    readable = conn.execute(TABLE_READABLE, (layout.tables["documents"],)).fetchone()
    if not (readable and readable[0]):
        return [], None
    row = conn.execute(recorded_embedders_query(layout), RECORD_KEYS).fetchone()
    return record_of_row(row)


def record_of_row(row: Sequence[Any] | None) -> tuple[list[str], Any]:
    """A `recorded_embedders_query` row as (names, probe)."""
    if row is None:
        return [], None
    return ([row[0]] if row[0] is not None else []), row[1]


def recorded_probes(conn: psycopg.Connection, layout: Layout, name: str) -> list[tuple[Any, int, list[str]]]:
    """The probes recorded on documents of embedder ``name`` (EMBEDDER_PROBE_KEY), each with how many documents
    hold it and the first few of their ids (an error names them); documents without one (stored before
    2026-12-05, or by an embedder that gave none) are left out. The ids: a top-n per probe (the primary key's
    order, read until n are found), not array_agg(doc_id ORDER BY doc_id), which sorted every document's id on
    every ingest run (500k documents: 4.4 s against 0.4 s for the counts), whether or not an error followed."""
    q = sql.SQL("SELECT g.probe, g.n, ARRAY(SELECT d.doc_id FROM {docs} d "
                "WHERE d.metadata ->> %(k)s = %(name)s AND d.metadata -> %(p)s = g.probe "
                "ORDER BY d.doc_id LIMIT %(n)s) "
                "FROM (SELECT metadata -> %(p)s AS probe, count(*) AS n FROM {docs} "
                "WHERE metadata ->> %(k)s = %(name)s AND jsonb_typeof(metadata -> %(p)s) = 'array' "
                "GROUP BY 1) g").format(
        docs=sql.SQL(layout.tables["documents"]))
    return [(probe, n, list(ids)) for probe, n, ids in conn.execute(
        q, {"p": EMBEDDER_PROBE_KEY, "k": EMBEDDER_KEY, "name": name, "n": NAMED_IN_ERRORS}).fetchall()]


def embedder_lock(conn: psycopg.Connection, layout: Layout, *, unlock: bool = False) -> None:
    """Take (or release) the session advisory lock under which a first ingest checks and records its model.

    Two ingests into a table without a record, with different models, would
    each find no record and both write; the second to take this lock finds
    the first one's record instead.
    """
    fn = "pg_advisory_unlock" if unlock else "pg_advisory_lock"
    conn.execute(f"SELECT {fn}(hashtext(%s))", ("onetrip embedder record " + layout.tables["documents"],))


def _check_embeddings(sections: Sequence[SectionLike], embeddings: np.ndarray, dim: int,
                      vector_type: str = "vector") -> np.ndarray:
    try:
        arr = np.asarray(embeddings, dtype=np.float32)
    except (TypeError, ValueError) as e:  # a dict, strings, objects: the embedder's fault, named as such
        raise ValueError(f"embeddings are not an array of numbers ({type(embeddings).__name__}: {e})") from None
    if arr.ndim != 2 or arr.shape[0] != len(sections):
        raise ValueError(f"expected {len(sections)} embeddings, got an array of shape {arr.shape}")
    if arr.shape[1] != dim:
        raise DimensionMismatchError(
            f"embeddings have {arr.shape[1]} dimensions but the sections table stores vector({dim})"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError("embeddings contain NaN or infinity")
    norms = np.linalg.norm(arr.astype(np.float64), axis=1)
    lo, hi = LENGTH_RANGE  # the range query embeddings are held to
    bad = np.flatnonzero((norms < lo) | (norms > hi))
    if bad.size:
        s, norm = sections[int(bad[0])], float(norms[bad[0]])
        raise ValueError(f"the embedding of section {s.section_id!r} has length {norm:.3g}"
                         f"{' (all zeros)' if norm == 0 else ''}: pgvector's cosine distance to it would be "
                         "undefined or meaningless (every search reaching it would fail or misorder); "
                         "normalise it" + (f" ({bad.size} such sections)" if bad.size > 1 else ""))
    if vector_type == "halfvec":
        _check_halfvec(sections, arr, norms)
    return arr


def _check_halfvec(sections: Sequence[SectionLike], arr: np.ndarray, norms: np.ndarray) -> None:
    """A ValueError unless 16-bit floats hold each embedding: halfvec had stored a vector of components under
    ~6e-8 as all zeros (a length of 1e-9 passed LENGTH_RANGE), and every hybrid search reaching it failed with a
    NaN distance; one over 65504 failed the write with pgvector's message naming no section."""
    with np.errstate(over="ignore"):
        half = arr.astype(np.float16).astype(np.float64)
    finite = np.isfinite(half).all(axis=1)
    error = np.where(finite, np.linalg.norm(np.where(np.isfinite(half), half, 0) - arr, axis=1) / norms, np.inf)
    bad = np.flatnonzero(error > 0.01)
    if bad.size:
        s = sections[int(bad[0])]
        how = ("a component past 65504, the largest 16-bit float" if not finite[bad[0]] else
               f"{float(error[bad[0]]):.0%} of its length lost to 16-bit rounding (components under ~6e-5 "
               "lose precision, under ~6e-8 become 0)")
        raise ValueError(f"the embedding of section {s.section_id!r} does not fit halfvec: {how}; normalise it"
                         + (f" ({bad.size} such sections)" if bad.size > 1 else ""))


def _check_fields(doc_id: str, s: SectionLike) -> None:
    """Each field of a section of the type its column stores, named before the write.

    A heading_path given as one string had been stored as one heading per character (['T', 'i', 't', ...]), a
    negative token_count silently; an anchor with a NUL, a token_count past int4 or a lone surrogate had failed
    mid-COPY with PostgreSQL's or psycopg's message naming no section; a None heading or content, a str level
    or token_count with Python's ("argument of type 'NoneType' is not iterable").
    """
    def bad(name: str, want: str, error: type[Exception] = TypeError) -> Exception:
        """TypeError for a value of the wrong type (as DocumentRecord's), ValueError for one out of range."""
        return error(f"{doc_id}: section {s.section_id!r:.80} has {name} {getattr(s, name)!r:.80}; it must be {want}")

    for name in ("heading", "content"):
        if not isinstance(getattr(s, name), str):
            raise bad(name, "a string")
    path = s.heading_path
    if isinstance(path, (str, bytes)) or not isinstance(path, Sequence) or not all(isinstance(h, str) for h in path):
        raise bad("heading_path", "a sequence of strings such as ['Guide', 'Setup'], not one string")
    if s.anchor is not None and not isinstance(s.anchor, str):
        raise bad("anchor", "None or a string without NUL")
    if s.anchor is not None and "\x00" in s.anchor:
        raise bad("anchor", "None or a string without NUL", ValueError)
    for name, lo, hi in (("sequence_index", 0, 2**31 - 1), ("level", None, None), ("token_count", 0, 2**31 - 1)):
        v = getattr(s, name)  # numbers.Integral: numpy's integers too
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise bad(name, "an integer")
        if lo is not None and not lo <= v <= hi:  # level's range: _check_tree's smallint check
            raise bad(name, f"an integer from {lo} to {hi}", ValueError)
    if not isinstance(s.metadata, Mapping):
        raise bad("metadata", "a mapping (a dict)")
    for text in (s.section_id, s.heading, s.content, *path, s.anchor or ""):
        check_text(text, f"{doc_id}: section {s.section_id!r:.80}")


def _check_tree(doc_id: str, sections: Sequence[SectionLike]) -> None:
    """Refuse a section list that would store a broken tree (caught before any write)."""
    ids = [s.section_id for s in sections]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{doc_id}: duplicate section_id values")
    for s in sections:  # what PostgreSQL would refuse mid-COPY with its own message
        if not isinstance(s.section_id, str) or not s.section_id or len(s.section_id.encode()) > MAX_SECTION_ID_BYTES:
            raise ValueError(f"{doc_id}: section_id {s.section_id!r:.80} must be a non-empty string of at most "
                             f"{MAX_SECTION_ID_BYTES} bytes")
        check_acl(getattr(s, "acl", None))  # a section's own ACL, as the document's
        _check_fields(doc_id, s)
    if sorted(s.sequence_index for s in sections) != list(range(len(sections))):
        raise ValueError(f"{doc_id}: sequence_index must be contiguous from 0")
    parents = {s.section_id: s.parent_section_id for s in sections}
    paths = {s.section_id: tuple(s.heading_path) for s in sections}
    depth = {sid: len(path) for sid, path in paths.items()}
    for s in sections:
        if s.parent_section_id is not None and s.parent_section_id not in parents:
            raise ValueError(f"{doc_id}: section {s.section_id} has unknown parent {s.parent_section_id}")
        if not -32768 <= s.level <= 32767:  # heading_level is a smallint (binary COPY would wrap it)
            raise ValueError(f"{doc_id}: section {s.section_id} has heading level {s.level}, outside a smallint")
    rooted: set[str] = set()  # ancestors and `section` expansion walk this tree: every chain must end at a root
    for s in sections:
        chain: dict[str, None] = {}
        at: str | None = s.section_id
        while at is not None and at not in rooted:
            if at in chain:
                raise ValueError(f"{doc_id}: section {s.section_id}'s parents form a cycle through {at}")
            chain[at] = None
            at = parents[at]
        rooted.update(chain)
    for s in sections:
        # the neighbors' "parent" scope ends a hit's window at the first later section with a shorter heading
        # path: a path that is not its parent's plus one heading had widened (or cut) that window silently
        if s.parent_section_id is None:
            fits, want = depth[s.section_id] <= 1, "at most 1"
        else:
            fits, want = depth[s.section_id] == depth[s.parent_section_id] + 1, str(depth[s.parent_section_id] + 1)
        if not fits:
            raise ValueError(f"{doc_id}: section {s.section_id} has a heading path of {depth[s.section_id]} "
                             f"heading(s); it must hold {want}: its ancestors' headings and its own "
                             "(a section with no parent: its own, or none)")
        if s.parent_section_id is not None and paths[s.section_id][:-1] != paths[s.parent_section_id]:
            # rendered in every context header and searched by the lexical side: only the length had been checked
            raise ValueError(f"{doc_id}: section {s.section_id}'s heading path {list(paths[s.section_id])!r:.200} "
                             f"does not start with its parent {s.parent_section_id}'s "
                             f"{list(paths[s.parent_section_id])!r:.200}; it must hold its ancestors' headings and "
                             "its own")
    _check_parts(doc_id, sections)
    _check_document_order(doc_id, sections, depth)


def _check_document_order(doc_id: str, sections: Sequence[SectionLike], depth: Mapping[str, int]) -> None:
    """Refuse a tree whose sequence_index does not list each subtree as one run (the parent, its later parts,
    then what lies below it), as a document's headings do.

    The neighbors' "parent" scope and the ``section`` expansion read a subtree as a range of sequence_index:
    a tree listed in another order (A, B, then A's child a1) had put the sibling B into a1's window scoped to
    its parent A (found by review). Each section's parent must be the nearest open section one level up (any
    of its parts, when it is split).
    """
    order = sorted(sections, key=lambda s: s.sequence_index)
    open_: list[tuple[int, str, set[str]]] = []  # (depth, a node's first part's id, its parts' ids), root down
    parts_of: dict[str, set[str]] = {}
    for i, s in enumerate(order):
        d = depth[s.section_id]
        part = s.metadata.get("part")
        node = order[i - part + 1].section_id if isinstance(part, int) and part > 1 else s.section_id
        while open_ and open_[-1][0] >= d:
            open_.pop()
        if s.parent_section_id is None:
            open_.clear()
        elif not open_ or s.parent_section_id not in open_[-1][2]:  # any part of a split section may be it
            nearest = open_[-1][1] if open_ else "none (a root)"
            raise ValueError(f"{doc_id}: section {s.section_id} (sequence_index {s.sequence_index}) has parent "
                             f"{s.parent_section_id}, but by document order its parent is {nearest}: "
                             "sequence_index must list the tree in document order (a section after its parent "
                             "and before its parent's next sibling)")
        ids = parts_of.setdefault(node, set())
        ids.add(s.section_id)
        open_.append((d, node, ids))


PART_KEYS = ("part", "parts")
"""Section metadata keys that mark a section cut into parts (`sections.build_sections`: part k of n, on n
consecutive sections). The context's ``section`` expansion reads them to find a hit's other parts."""
#: The most parts a section's marker may count (written or read): past it, a stored "parts" is a caller's own.
MAX_PARTS = 100_000


def _check_parts(doc_id: str, sections: Sequence[SectionLike]) -> None:
    """Refuse part markers that are not whole runs: a caller's own "part" ("Part II" of a manual) had been read
    as one, so the default context took unrelated sections, or failed with a raw cast error."""
    marks: dict[int, tuple[Any, Any]] = {}
    for s in sections:
        meta = s.metadata
        if any(k in meta for k in PART_KEYS):
            marks[s.sequence_index] = (meta.get("part"), meta.get("parts"))
    for seq, (k, n) in marks.items():
        whole = (all(isinstance(x, int) and not isinstance(x, bool) for x in (k, n)) and 1 <= k <= n
                 and 2 <= n <= MAX_PARTS)
        if not whole or any(marks.get(seq - k + j) != (j, n) for j in range(1, n + 1)):
            sid = next(s.section_id for s in sections if s.sequence_index == seq)
            raise ValueError(f"{doc_id}: section {sid}'s metadata part={k!r:.40}, parts={n!r:.40} is no part of "
                             "a run: the keys 'part' and 'parts' mark a section cut into parts (part k of n on n "
                             "consecutive sections, as onetrip's parsers write them); give your own value "
                             "another key")


def _checked(doc: DocumentRecord, sections: Sequence[SectionLike], embeddings: Any,
             dim: int, vector_type: str = "vector") -> tuple[np.ndarray, Any, list[Any]]:
    """Everything a write refuses, checked before it starts: the embeddings as float32, and the document's and
    each section's metadata as jsonb (made here, once, so NaN is refused before the write, not in it)."""
    if not sections:
        raise ValueError(f"{doc.doc_id}: a document needs at least one section")
    arr = _check_embeddings(sections, embeddings, dim, vector_type)
    _check_tree(doc.doc_id, sections)
    try:
        doc_meta = _json_object(doc.metadata)
    except ValueError as e:
        raise ValueError(f"{doc.doc_id}: {e}") from None
    section_meta = []
    for s in sections:
        try:
            section_meta.append(_json_object(_section_metadata(s)))
        except ValueError as e:
            raise ValueError(f"{doc.doc_id}: section {s.section_id!r}: {e}") from None
    return arr, doc_meta, section_meta


def _section_metadata(s: SectionLike) -> dict[str, Any]:
    """A section's metadata as stored: marked (`OWN_ACL_KEY`) when the section carries an ``acl`` of its own.

    Only the mark tells `set_document_access` such a section from one that took the document's ACL when
    both hold the same principals; a caller's own value under that key is not taken as the mark.
    """
    meta = {k: v for k, v in dict(s.metadata).items() if k != OWN_ACL_KEY}  # as _json_object reads it
    if hasattr(s, "acl"):
        meta[OWN_ACL_KEY] = True
    return meta


def _word_vector_size(s: SectionLike) -> int:
    """Roughly the bytes of a section's full-text vector: its distinct words (what PostgreSQL's tsvector holds
    once each, with up to 256 positions) over its heading path and content; only an order to ask the server
    in (`_too_big`). The longest text is not the largest vector: a megabyte of one repeated word is one lexeme."""
    counts: dict[str, int] = {}
    for w in re.findall(r"\w+", " ".join(s.heading_path) + " " + s.content):
        counts[w.lower()] = counts.get(w.lower(), 0) + 1
    return sum(len(w.encode()) + 4 + 2 * min(n, 256) for w, n in counts.items())


def _binary_copy(table: str, columns: Sequence[str]) -> sql.Composed:
    """``COPY table (columns) FROM STDIN`` in binary format (table: a quoted `Layout.tables` name)."""
    return sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
        sql.SQL(table), sql.SQL(", ").join(sql.Identifier(c) for c in columns))


def _json_object(metadata: Mapping[str, Any]) -> Any:
    """Metadata as a jsonb object (not a JSON string), values JSON cannot hold as their str()."""
    try:
        text = json.dumps(dict(metadata), default=str, allow_nan=False, ensure_ascii=False)
        data = json.loads(text)
    except ValueError as e:  # NaN/infinity: PostgreSQL's jsonb says only 'Token "NaN" is invalid'
        raise ValueError(f"metadata {str(dict(metadata))[:80]} holds a value JSON cannot (NaN or "
                         f"infinity): {e}") from None
    except TypeError as e:  # json's own 'keys must be str, int, float, bool or None, not tuple' named no key
        if (key := _bad_key(metadata)) is None:  # another TypeError (a value whose __str__ returns no str)
            raise ValueError(f"metadata {str(dict(metadata))[:80]} holds what JSON cannot: {e}") from None
        raise ValueError(f"metadata key {key!r:.80} is a {type(key).__name__}; JSON object keys are strings "
                         "(str, int, float, bool or None are turned into one)") from None
    if (where := nul_in(data)) is not None:  # jsonb refuses \u0000 with a multi-line 'unsupported Unicode escape'
        raise ValueError(f"metadata {where} holds a NUL character, which PostgreSQL's jsonb cannot store "
                         "(front matter: a \"\\0\" or \"\\x00\" escape)")
    check_text(text, "metadata")  # a lone surrogate: jsonb's error had named no field
    return Jsonb(data)


def _walk(value: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(key, value, where) for every value in metadata, depth first and without recursion (metadata may nest
    deeper than Python's recursion limit); a list item's key is its index, the top's None. `where` is a linked
    (parent's where, key) pair, spelled out by `_where_text` only for the value reported."""
    stack: list[tuple[Any, Any, Any]] = [(None, value, None)]
    while stack:
        key, v, where = stack.pop()
        yield key, v, where
        if isinstance(v, Mapping):
            stack.extend((k, x, (where, k)) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((i, x, (where, i)) for i, x in enumerate(v))


def _where_text(where: Any) -> str:
    """`'a'[0]['b']` for a linked where of decoded JSON (a str key names a member, an int a list item)."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(key)
    keys.reverse()
    return "".join(repr(k) if i == 0 and isinstance(k, str) else f"[{k!r}]" for i, k in enumerate(keys))


def _bad_key(value: Any) -> Any:
    """The first key, at any depth, that `json.dumps` refuses (a tuple, a frozenset...); None if none is."""
    for _, v, _ in _walk(value):
        if isinstance(v, Mapping):
            for k in v:
                if not isinstance(k, (str, int, float, bool)) and k is not None:
                    return k
    return None


def nul_in(value: Any) -> str | None:
    """Where a JSON value (decoded) holds a NUL character, in a key or a string: its key path, or None."""
    for key, v, where in _walk(value):
        if isinstance(key, str) and "\x00" in key:
            return f"key {key!r:.80}"
        if isinstance(v, str) and "\x00" in v:
            return f"value {_where_text(where) or '(top level)'}"
    return None


#: An identifier with an underscore or a dot inside, after any leading underscores: ``_PG_init`` is ``pg_init``, and
#: Markdown's ``_shared_buffers_`` (emphasis) ``shared_buffers``; they had given no term (the underscore before
#: the first letter failed the look-behind), and the section naming the identifier ranked below prose about its
#: words (found by review). Query and stored text read them alike.
_TECH_TERM = re.compile(r"(?<![\w.])_*([A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+)")


def technical_terms(text: str, *, parts: bool = False) -> list[str]:
    """Identifiers a text search configuration would split: max_connections, pg_stat_activity, hnsw.ef_search.

    Stored whole (lower-cased) in ``terms`` so an exact identifier in a query
    matches exactly; the same function runs on query text. With ``parts`` (the
    stored text's terms), a qualified name's parts that hold an underscore are
    terms too (``pg_stat_activity.wait_event`` gives ``pg_stat_activity`` and
    ``wait_event``): a question naming the column alone had not matched a section
    writing it qualified, and the english configuration does not help there (it
    reads ``pg_stat_activity.wait`` as one host name). A query's qualified name
    adds only its last part (``wait_event``, which the manual's view tables write
    alone): all its parts had matched every section naming ``pg_stat_activity``
    or ``auto_explain`` alone, and the sections about ``pg_stat_activity.query``
    or ``auto_explain.log_min_duration`` lost their place (two tuning questions
    lost coverage). A Markdown escape
    (``max\\_connections``, as pandoc and Notion write it) is read as the
    identifier it renders as: the backslash had ended the term, so none was stored.
    """
    seen: dict[str, None] = {}
    for m in _TECH_TERM.finditer(text.replace("\\_", "_").replace("\\.", ".")):
        term = m.group(1).lower().rstrip(".")
        if len(term) > MAX_TERM_CHARS:
            continue
        names = term.split(".")
        if "_" in term or (len(names) > 1 and all(len(part) >= 2 for part in names)):
            seen.setdefault(term, None)
            for part in names if parts else names[-1:]:  # no dot: the term itself, kept once
                if "_" in part:
                    seen.setdefault(part, None)
    return list(seen)


def copy_types(layout: Layout) -> list[str]:
    """Binary COPY types for SECTION_COLUMNS in this layout (vector or halfvec embeddings)."""
    return [layout.vector_type if t == "vector" else t for t in COPY_TYPES]


def parent_sequences(sections: Sequence[SectionLike]) -> list[int | None]:
    """Each section's parent's sequence_index (None at a root), stored as parent_sequence_index.

    With it, a hit's parent is found by (doc_id, sequence_index) like its
    neighbors: the retrieval query reads all context rows through one index and
    one deduplicated key set (benchmarks/latency measured ~30 us per query saved).
    """
    seq = {s.section_id: s.sequence_index for s in sections}
    return [None if s.parent_section_id is None else seq[s.parent_section_id] for s in sections]


def section_copy_row(doc: DocumentRecord, s: SectionLike, vec: np.ndarray, context_tokens: int,
                     revision: int, vector_type: str = "vector", parent_sequence_index: int | None = None, *,
                     metadata: Any) -> tuple:
    """One row for ``COPY sections (SECTION_COLUMNS)`` in binary format (types: `copy_types`).

    ``parent_sequence_index`` comes from `parent_sequences` over the whole document, ``metadata`` (the
    section's, as jsonb) from `_checked`.
    """
    from pgvector import HalfVector

    acl = getattr(s, "acl", doc.acl)
    return (
        doc.doc_id, s.section_id, s.parent_section_id, s.sequence_index, parent_sequence_index, s.level,
        s.heading, list(s.heading_path), s.anchor, s.content, s.token_count, context_tokens,
        revision, doc.collection, None if acl is None else list(acl),
        HalfVector(vec) if vector_type == "halfvec" else Vector(vec),
        metadata,
        " ".join(h for h in s.heading_path if h),
        technical_terms(" ".join(s.heading_path) + "\n" + s.content, parts=True),
    )


def write_section_rows(copy: Any, layout: Layout, doc: DocumentRecord, sections: Sequence[SectionLike],
                       embeddings: Any, context_tokens: Sequence[int], metadata: Sequence[Any],
                       revision: int = 1) -> None:
    """Write one document's rows into an open ``COPY sections (SECTION_COLUMNS)`` (binary, `copy_types`).

    The one row writer behind `replace_document` and the bulk loaders, so every
    path stores the same columns (parent_sequence_index included); ``metadata``
    is `_checked`'s jsonb of each section.
    """
    for s, vec, ctx, pseq, meta in zip(sections, embeddings, context_tokens, parent_sequences(sections), metadata):
        copy.write_row(section_copy_row(doc, s, vec, ctx, revision, layout.vector_type, pseq, metadata=meta))


def passage_tokens(doc_id: str, sections: Sequence[SectionLike]) -> list[int]:
    """Tokens each section costs in an assembled context: its header line plus its content.

    Stored as ``context_tokens`` so the budget enforced in SQL is exactly what
    `onetrip.context.render_context` produces, less the header it does not repeat for a passage that continues
    the one before it (word-piece counts add across the whitespace that joins header and content), except
    that a word over 100 characters, one [UNK] to the model, costs one token per 4 of its characters
    (`tokens.unknown_surplus`): a base64 blob had passed every budget as one token.
    """
    from .context import passage_header
    from .tokens import count_tokens_batch, unknown_surplus

    headers = [passage_header(doc_id, s.anchor, s.heading_path) for s in sections]
    return [h + unknown_surplus(header) + s.token_count + unknown_surplus(s.content)
            for header, h, s in zip(headers, count_tokens_batch(headers), sections)]


#: The documents columns a load writes (ingested_at takes its default, now()).
DOCUMENT_COLUMNS = ("doc_id", "source_uri", "title", "revision", "content_hash", "collection", "acl", "metadata",
                    "token_count", "section_count")
DOCUMENT_COPY_TYPES = ["text", "text", "text", "int4", "text", "text", "text[]", "jsonb", "int4", "int4"]


def copy_documents(conn: psycopg.Connection, layout: Layout,
                   docs: Iterable[tuple[DocumentRecord, Sequence[SectionLike], Any]]) -> int:
    """COPY new documents and their sections (revision 1) in the caller's transaction; sections written.

    The bulk path for synthetic corpora (tests, benchmarks): one binary COPY per
    table instead of `replace_document`'s per-document statements, with the same
    rows (documents.token_count is the sum of the sections' context_tokens, as
    there). It neither replaces nor skips: the documents must not exist yet.
    """
    docs = [(d, ss, *_checked(d, ss, e, layout.dim, layout.vector_type)) for d, ss, e in docs]
    context_tokens = [passage_tokens(d.doc_id, ss) for d, ss, *_ in docs]
    with conn.cursor() as cur:
        with cur.copy(_binary_copy(layout.tables["documents"], DOCUMENT_COLUMNS)) as copy:
            copy.set_types(DOCUMENT_COPY_TYPES)
            for (d, ss, _, doc_meta, _), ctx in zip(docs, context_tokens):
                copy.write_row((d.doc_id, d.source_uri, d.title, 1, d.content_hash, d.collection,
                                None if d.acl is None else list(d.acl), doc_meta, sum(ctx), len(ss)))
        with cur.copy(_binary_copy(layout.tables["sections"], SECTION_COLUMNS)) as copy:
            copy.set_types(copy_types(layout))
            for (d, ss, arr, _, section_meta), ctx in zip(docs, context_tokens):
                write_section_rows(copy, layout, d, ss, arr, ctx, section_meta)
    return sum(len(ss) for _, ss, *_ in docs)


def _lock_document(conn: psycopg.Connection, doc_id: str) -> None:
    """Serialise writers of one document (re-ingest, delete) until the transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (doc_id,))


def _archive_sections(conn: psycopg.Connection, layout: Layout, doc_id: str) -> None:
    """Copy a document's current sections to section_history (audit) as its current revision, inside the
    caller's transaction (a section a revision left unchanged carries the number of the one that wrote it)."""
    columns = (*SECTION_COLUMNS, "tsv")
    conn.execute(
        sql.SQL("INSERT INTO {} ({}, archived_at) SELECT {}, now() FROM {} s JOIN {} d ON d.doc_id = s.doc_id "
                "WHERE s.doc_id = %s").format(
            sql.SQL(layout.tables["section_history"]), sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            sql.SQL(", ").join(sql.SQL("d.revision") if c == "revision" else sql.SQL("s.{}").format(sql.Identifier(c))
                               for c in columns),
            sql.SQL(layout.tables["sections"]), sql.SQL(layout.tables["documents"])),
        (doc_id,),
    )


def replace_document(
    conn: psycopg.Connection,
    layout: Layout,
    doc: DocumentRecord,
    sections: Sequence[SectionLike],
    embeddings: np.ndarray,
    *,
    force: bool = False,
    keep_history: bool = False,
) -> StoreResult:
    """Store ``doc`` with ``sections`` as its new revision, atomically.

    Skips the write (outcome "unchanged") when the stored content hash,
    collection and ACL are equal, and so are the document's metadata and its
    sections' ids, own ACLs and metadata, unless ``force``. With ``keep_history`` the superseded revision's sections
    are copied to the section_history table (audit) in the same transaction.
    A section may carry its own ``acl`` attribute (its metadata then holds
    `OWN_ACL_KEY`, so that `set_document_access` keeps it); otherwise it gets
    the document's. Everything is validated before the transaction starts, except
    PostgreSQL's own limit on a section's full-text vector (1 MB), a ValueError naming
    the document after the rollback.
    A stored revision commits with the TERM_STATS_BEHIND mark: its words count
    in lexical search once `refresh_term_stats` runs (ingest runs it at its end;
    else the next ingest run does).
    """
    require_autocommit(conn, "replace_document")
    arr, doc_meta, section_meta = _checked(doc, sections, embeddings, layout.dim, layout.vector_type)
    context_tokens = passage_tokens(doc.doc_id, sections)
    try:
        return _store_revision(conn, layout, doc, sections, arr, doc_meta, section_meta, context_tokens, force,
                               keep_history)
    except psycopg.errors.ProgramLimitExceeded as e:  # the one check only the server makes: rolled back
        culprit = _too_big(conn, sections)
        raise ValueError(f"{doc.doc_id}: {e.diag.message_primary or e}"
                         + (f" (section {culprit}'s words are too many for it: cut it into smaller sections)"
                            if culprit else "") + "; nothing was written") from None


def _too_big(conn: psycopg.Connection, sections: Sequence[SectionLike]) -> str | None:
    """The section whose full-text vector is past PostgreSQL's 1 MB (None: another limit), asked of the server
    section by section, the likeliest first (its parser and stemmer decide: a Python word count had named a
    snake_case decoy). Only after such a failure, so the statements cost nothing otherwise."""
    from .templates import TEXT_CONFIG

    for s in sorted(sections, key=_word_vector_size, reverse=True):
        try:
            with conn.transaction():  # a savepoint inside a caller's transaction: its failure must not abort it
                conn.execute("SELECT length(to_tsvector(%s::regconfig, %s))",
                             (TEXT_CONFIG, " ".join(h for h in s.heading_path if h) + " " + s.content))
        except psycopg.errors.ProgramLimitExceeded:
            return s.section_id
    return None


def _store_revision(conn: psycopg.Connection, layout: Layout, doc: DocumentRecord, sections: Sequence[SectionLike],
                    arr: np.ndarray, doc_meta: Any, section_meta: list[Any], context_tokens: list[int], force: bool,
                    keep_history: bool) -> StoreResult:
    """`replace_document`'s transaction, its input checked."""
    documents = sql.SQL(layout.tables["documents"])
    with conn.transaction():
        _lock_document(conn, doc.doc_id)
        row = conn.execute(
            sql.SQL("SELECT content_hash, revision, collection, acl, metadata, "
                    "has_database_privilege(current_database(), 'TEMPORARY') FROM {} WHERE doc_id = %s")
            .format(documents), (doc.doc_id,),
        ).fetchone()
        unchanged = row is not None and row[0] == doc.content_hash and _same_access(row[2], row[3], doc.collection,
                                                                                     doc.acl)
        if unchanged and not force and row[4] == doc_meta.obj \
                and _same_section_labels(conn, layout, doc, sections, section_meta):
            return StoreResult(doc.doc_id, "unchanged", row[1], 0)
        # a document stored again after a delete continues past its archived revisions: starting at 1 again,
        # the audit trail held two revision 1s (an archive of the second had been dropped on the conflict)
        revision = row[1] + 1 if row is not None else 1 + conn.execute(
            sql.SQL("SELECT coalesce(max(revision), 0) FROM {} WHERE doc_id = %s").format(
                sql.SQL(layout.tables["section_history"])), (doc.doc_id,)).fetchone()[0]
        total_tokens = sum(context_tokens)
        if keep_history and row is not None:
            _archive_sections(conn, layout, doc.doc_id)
        conn.execute(
            sql.SQL(
                """
                INSERT INTO {} AS d (doc_id, source_uri, title, revision, content_hash, collection, acl,
                                     metadata, token_count, section_count, ingested_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())
                ON CONFLICT (doc_id) DO UPDATE
                   SET source_uri = excluded.source_uri, title = excluded.title,
                       revision = excluded.revision, content_hash = excluded.content_hash,
                       collection = excluded.collection, acl = excluded.acl,
                       metadata = excluded.metadata, token_count = excluded.token_count,
                       section_count = excluded.section_count, ingested_at = excluded.ingested_at
                """
            ).format(documents),
            (doc.doc_id, doc.source_uri, doc.title, revision, doc.content_hash, doc.collection,
             None if doc.acl is None else list(doc.acl), doc_meta, total_tokens, len(sections)),
        )
        if row is not None and row[5]:
            _replace_changed_rows(conn, layout, doc, sections, arr, context_tokens, section_meta, revision)
        else:  # a new document; or a role that may not create the temporary table (REVOKE TEMPORARY): all its
            # rows rewritten, as before 2026-12-06 (README: then VACUUM matters after many re-ingests)
            if row is not None:
                conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = %s").format(sql.SQL(layout.tables["sections"])),
                             (doc.doc_id,))
            with conn.cursor() as cur, cur.copy(_binary_copy(layout.tables["sections"], SECTION_COLUMNS)) as copy:
                copy.set_types(copy_types(layout))
                write_section_rows(copy, layout, doc, sections, arr, context_tokens, section_meta, revision)
        # committed with the document, as a deletion's: a mark written outside it (before and after a batch, by
        # ingest) was deleted by another run's recount that began before this commit and ended after it, and a
        # run killed then left this document's words uncounted with no mark (found by review). Inside, the insert
        # waits for such a recount (its lock) and marks after it; a recount that waits for this commit counts it
        _mark_behind(conn, layout)
    return StoreResult(doc.doc_id, "new" if row is None else "changed", revision, len(sections),
                       **({} if row is None else _access_change(row[2], row[3], doc.collection, doc.acl)))


#: The section columns a row is kept by: a stored row equal to its new one in all of them is left as it is.
KEPT_BY = tuple(c for c in SECTION_COLUMNS if c not in ("doc_id", "revision"))


def _replace_changed_rows(conn: psycopg.Connection, layout: Layout, doc: DocumentRecord,
                          sections: Sequence[SectionLike], arr: np.ndarray, context_tokens: Sequence[int],
                          section_meta: Sequence[Any], revision: int) -> None:
    """Store a revision's rows, leaving each stored row that is equal to its new one in every column but
    revision as it is (its revision then names the revision that wrote it).

    Rewriting them all had put one more copy of each unchanged section's vector into the HNSW index per
    revision: until VACUUM, those dead copies crowd one point of the graph, and a document re-ingested a few
    hundred times made dense searches near it, and near other documents' sections, return fewer than k hits
    (found by review: 1 hit of 5 after 500 re-ingests of a 4-section file, other documents' searches too).
    The new rows go to a temporary table (the same binary COPY), and the server compares them with its own
    equality (jsonb, vectors, arrays) in two statements: delete the rows that differ or are gone, insert the
    new or changed ones."""
    stage_name = quote_ident("onetrip_stage_" + hashlib.sha256(layout.tables["sections"].encode()).hexdigest()[:16])
    stage, table = sql.SQL(stage_name), sql.SQL(layout.tables["sections"])
    conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} (LIKE {})").format(stage, table))
    with conn.cursor() as cur, cur.copy(_binary_copy(stage_name, SECTION_COLUMNS)) as copy:
        copy.set_types(copy_types(layout))
        write_section_rows(copy, layout, doc, sections, arr, context_tokens, section_meta, revision)
    # section_id (NOT NULL) by `=` first: the planner hashes on it (null-safe comparisons alone had made the
    # DELETE a nested loop over stored x new rows: 3.3 s for a document of 5,927 sections, 53 ms now)
    same = sql.SQL(" AND ").join([sql.SQL("n.section_id = s.section_id")] + [
        sql.SQL("n.{0} IS NOT DISTINCT FROM s.{0}").format(sql.Identifier(c)) for c in KEPT_BY])
    conn.execute(sql.SQL("DELETE FROM {} s WHERE s.doc_id = %s AND NOT EXISTS (SELECT 1 FROM {} n WHERE {})")
                 .format(table, stage, same), (doc.doc_id,))
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in SECTION_COLUMNS)
    conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} n WHERE NOT EXISTS (SELECT 1 FROM {} s "
                         "WHERE s.doc_id = n.doc_id AND s.section_id = n.section_id) ORDER BY n.sequence_index")
                 .format(table, columns, sql.SQL(", ").join(sql.SQL("n.{}").format(sql.Identifier(c))
                                                            for c in SECTION_COLUMNS), stage, table))
    # dropped here (a failure before rolls its CREATE back): with ON COMMIT DROP, a second call in one transaction
    # of the caller's (two documents, or one twice) had failed creating it again (DuplicateTable; found by review)
    conn.execute(sql.SQL("DROP TABLE {}").format(stage))


def _same_section_labels(conn: psycopg.Connection, layout: Layout, doc: DocumentRecord,
                         sections: Sequence[SectionLike], section_meta: Sequence[Any]) -> bool:
    """Whether the stored sections' ids, ACLs and metadata are the ones given (the document's metadata is
    compared by the caller, from the row it read).

    The content hash is the caller's and may cover the text alone: a section's own ACL tightened (or the
    metadata a filter reads changed) under the same hash had been "unchanged", and the old ACL stayed.
    """
    stored = conn.execute(sql.SQL("SELECT section_id, acl, metadata FROM {} WHERE doc_id = %s "
                                  "ORDER BY sequence_index").format(sql.SQL(layout.tables["sections"])),
                          (doc.doc_id,)).fetchall()

    def principals(acl: Sequence[str] | None) -> frozenset[str] | None:
        return None if acl is None else frozenset(acl)

    given = [(s.section_id, principals(getattr(s, "acl", doc.acl)), m.obj) for s, m in zip(sections, section_meta)]
    return [(sid, principals(acl), meta) for sid, acl, meta in stored] == given


def check_key(value: Any, name: str) -> str:
    """A doc_id or collection given to delete/prune/list: a string PostgreSQL text can hold, or an error naming it.

    An int had reached the server as PostgreSQL's multi-line 'function hashtextextended(smallint, integer) does
    not exist', None had been 'not stored' (False), and a NUL psycopg's 'text fields cannot contain NUL'.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r:.80}")
    return check_text(value, f"{name} {value!r:.80}")


def _holds(conn: psycopg.Connection, table: str, doc_id: str) -> bool:
    check_key(doc_id, "doc_id")
    try:
        return conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE doc_id = %s)").format(sql.SQL(table)),
                            (doc_id,)).fetchone()[0]
    except psycopg.errors.UndefinedTable as e:
        raise missing_table_error(e) from None


def has_history(conn: psycopg.Connection, layout: Layout, doc_id: str) -> bool:
    """Whether section_history holds any archived revision of ``doc_id``."""
    return _holds(conn, layout.tables["section_history"], doc_id)


def is_stored(conn: psycopg.Connection, layout: Layout, doc_id: str) -> bool:
    """Whether ``doc_id`` is a stored document (what `list_documents` lists)."""
    return _holds(conn, layout.tables["documents"], doc_id)


def prune_history(conn: psycopg.Connection, layout: Layout, *, keep: int = 0, doc_id: str | None = None) -> int:
    """Delete archived revisions, keeping the newest ``keep`` per document; returns rows removed."""
    if isinstance(keep, bool) or not isinstance(keep, numbers.Integral):  # numpy's integers too, as before
        raise TypeError(f"keep must be an integer, got {type(keep).__name__} {keep!r:.80}")
    if keep < 0:
        raise ValueError("keep must be >= 0")
    if doc_id is not None:
        check_key(doc_id, "doc_id")
    hist = sql.SQL(layout.tables["section_history"])
    require_autocommit(conn, "prune_history")
    q = sql.SQL(
        """DELETE FROM {h} x USING (
               SELECT doc_id, revision,
                      dense_rank() OVER (PARTITION BY doc_id ORDER BY revision DESC) AS age
                 FROM {h} GROUP BY doc_id, revision) r
            WHERE x.doc_id = r.doc_id AND x.revision = r.revision AND r.age > %s
              AND (%s::text IS NULL OR x.doc_id = %s)"""
    ).format(h=hist)
    try:
        with conn.transaction():
            return conn.execute(q, (keep, doc_id, doc_id)).rowcount
    except psycopg.errors.UndefinedTable as e:  # tables from before section_history: `onetrip init` adds it
        raise missing_table_error(e) from None


@dataclass(frozen=True)
class DocumentInfo:
    """One stored document, as `list_documents` reports it (the documents row)."""

    doc_id: str
    title: str | None
    source_uri: str
    collection: str
    acl: tuple[str, ...] | None
    revision: int
    section_count: int
    token_count: int  # context tokens of all its sections (what `document` expansion gates on)
    ingested_at: datetime
    embedder: str | None = None  # the model `ingest_paths` embedded it with (None: loaded another way)
    #: what parsing lost when it was ingested (a file cut short: `ParsedDocument.warnings`), kept in its metadata
    parse_warnings: tuple[str, ...] = ()


def _reader_principals(principals: Any) -> list[str] | None:
    """Principals as `Filters.principals` takes them: None (no ACL check) or a list of strings (empty: public only).

    One string is refused, not read as its characters ("hr" would have read as the principals h and r).
    """
    if principals is None:
        return None
    if isinstance(principals, (str, bytes)) or not isinstance(principals, Iterable):
        raise TypeError(f"principals must be a list of strings such as [{principals!r:.40}], not "
                        f"{type(principals).__name__}")
    return [check_key(p, "principal") for p in principals]


#: the largest ``limit`` `list_documents` takes: PostgreSQL's LIMIT is a bigint, and a caller may ask for one
#: row more than its page to learn whether another page follows (`onetrip documents`, GET /documents)
MAX_LIST_LIMIT = 2**63 - 2


def check_page(limit: Any, after: Any) -> tuple[int | None, str | None]:
    """`list_documents`' ``limit`` (None, or a positive integer; a bool refused) and ``after`` (None or a string
    PostgreSQL text can hold), or the error naming which is wrong."""
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, numbers.Integral):  # numpy's integers too
            raise TypeError(f"limit must be an integer, got {type(limit).__name__} {limit!r:.80}")
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {limit!r}")
        limit = int(limit)
    if after is not None:
        check_key(after, "after")
    return limit, after


def list_documents_query(layout: Layout, *, collection: str | None = None, principals: Sequence[str] | None = None,
                         limit: int | None = None, after: str | None = None) -> tuple[sql.Composed, dict[str, Any]]:
    """`list_documents`' one statement and binds (the HTTP service runs the same on an async connection).

    The ACL test is the one searches apply to every row (``acl IS NULL OR acl && principals``), on the
    documents row's acl (the row holds the title, source and metadata; rls.sql's policy on the documents
    table is the same test). Ingest and `set_document_access` give the sections that acl; a section stored
    with an ``acl`` of its own (`replace_document`) does not change whether its document is listed.
    A page is keyset, on the primary key: ``doc_id > after ... ORDER BY doc_id LIMIT limit`` (LIMIT NULL is
    no limit), so page n costs what page 1 does, where an OFFSET reads and drops every earlier row.
    """
    if collection is not None:
        check_key(collection, "collection")
    limit, after = check_page(limit, after)
    q = sql.SQL(
        "SELECT doc_id, title, source_uri, collection, acl, revision, section_count, token_count, ingested_at, "
        "metadata ->> %(e)s, metadata -> %(w)s "
        "FROM {} WHERE (%(c)s::text IS NULL OR collection = %(c)s) "
        "AND (%(p)s::text[] IS NULL OR acl IS NULL OR acl && %(p)s::text[]) "
        "AND doc_id > %(a)s ORDER BY doc_id LIMIT %(n)s::bigint"
    ).format(sql.SQL(layout.tables["documents"]))
    # no after: '' (every doc_id is non-empty, so it sorts after ''). Not '(%(a)s IS NULL OR doc_id > %(a)s)':
    # a generic plan (plan_cache_mode, or PostgreSQL's own choice for a prepared statement) keeps that as a
    # filter, not an index condition, and read every earlier row: with 100k documents the page after the
    # 98,000th took 25 ms against 4 ms for the first page; as an index condition both take 4 ms.
    return q, {"c": collection, "p": _reader_principals(principals), "a": "" if after is None else after, "n": limit,
               "e": EMBEDDER_KEY, "w": PARSE_WARNINGS_KEY}


def document_info(row: Sequence[Any]) -> DocumentInfo:
    """A `list_documents_query` row as a DocumentInfo."""
    d, t, u, c, a, r, n, tok, at, e, w = row
    return DocumentInfo(d, t, u, c, None if a is None else tuple(a), r, n, tok, at, e,
                        tuple(str(x) for x in w) if isinstance(w, list) else ())


def list_documents(conn: psycopg.Connection, layout: Layout, *, collection: str | None = None,
                   principals: Sequence[str] | None = None, limit: int | None = None,
                   after: str | None = None) -> list[DocumentInfo]:
    """The stored documents by doc_id, optionally of one collection: what `delete_document` takes.

    ``principals`` as in `Filters`: None lists every document (a trusted caller), a list only those
    whose acl is NULL or shares one of them (an empty list: public documents only), as a search reads.
    ``limit`` and ``after`` page through them (one statement a page, keyset on doc_id): at most ``limit``
    documents whose doc_id sorts after ``after``, the last doc_id of the previous page. A page shorter than
    ``limit`` is the last; the next page of a full one starts ``after=page[-1].doc_id``. Only documents
    the principals may read are counted or returned, and ``after`` need not be a stored doc_id.
    """
    require_connection(conn, "list_documents")
    q, params = list_documents_query(layout, collection=collection, principals=principals, limit=limit,
                                     after=after)
    try:
        rows = conn.execute(q, params).fetchall()
    except psycopg.errors.UndefinedTable as e:
        raise missing_table_error(e) from None
    return [document_info(row) for row in rows]


def stored_source(conn: psycopg.Connection, layout: Layout, doc_id: str, *,
                  for_update: bool = False) -> str | None:
    """The ``source_uri`` a document is stored with (None if it is not stored, or has none); ``for_update``: with
    its row locked until the caller's transaction ends."""
    q = sql.SQL("SELECT source_uri FROM {} WHERE doc_id = %s{}").format(
        sql.SQL(layout.tables["documents"]), sql.SQL(" FOR UPDATE" if for_update else ""))
    row = conn.execute(q, (doc_id,)).fetchone()
    return None if row is None else row[0]


def documents_from(conn: psycopg.Connection, layout: Layout, uri_prefix: str) -> list[tuple[str, str]]:
    """(doc_id, source_uri) of the documents whose source URI starts with ``uri_prefix`` (a folder's
    ``file:`` URI and ``/``), in doc_id order: what an ingest of that folder checks for files gone."""
    q = sql.SQL("SELECT doc_id, source_uri FROM {} WHERE starts_with(source_uri, %s) ORDER BY doc_id").format(
        sql.SQL(layout.tables["documents"]))
    return [(d, u) for d, u in conn.execute(q, (uri_prefix,)).fetchall()]


def delete_document(conn: psycopg.Connection, layout: Layout, doc_id: str, *, keep_history: bool = False,
                    source_uri: str | None = None) -> bool:
    """Remove a document and all its sections in one transaction of its own; True if it was stored.

    Takes the same per-document lock as `replace_document`, so a delete and a
    re-ingest of the same document run one after the other, never interleaved.
    With ``keep_history`` the deleted revision's sections are archived first, as
    a re-ingest with keep_history does. Lexical word weights count the deleted
    sections until `refresh_term_stats` runs (``onetrip delete`` runs it); the
    delete commits with the TERM_STATS_BEHIND mark, so if that recount never
    comes (a stopped command, a library caller), the next ingest run recounts.
    With ``source_uri``, only a document still stored from that source is
    deleted (False otherwise): an ingest removing documents whose files are
    gone must not remove one that another writer has stored from a file since.
    """
    require_autocommit(conn, "delete_document")
    check_key(doc_id, "doc_id")
    documents = sql.SQL(layout.tables["documents"])
    with conn.transaction():
        try:
            _lock_document(conn, doc_id)
            # FOR UPDATE: the row stays as read until the DELETE. A plain read had let `set_document_source` (an
            # unchanged file found at a new path, which takes no document lock) commit in between, and the DELETE
            # then removed the document another run had just stored from an existing file (found by review)
            if source_uri is not None and stored_source(conn, layout, doc_id, for_update=True) != source_uri:
                return False
            if keep_history:
                _archive_sections(conn, layout, doc_id)
            # the sections go with it: their foreign key is ON DELETE CASCADE
            gone = conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = %s").format(documents), (doc_id,)).rowcount > 0
            if gone:
                _mark_behind(conn, layout)
            return gone
        except psycopg.errors.UndefinedTable as e:
            raise missing_table_error(e) from None


def flush_word_indexes(conn: psycopg.Connection, layout: Layout) -> int | None:
    """Move the full-text (GIN) indexes' pending entries into the indexes proper; returns the pages moved.

    Why: GIN indexes take new rows into a pending list (fastupdate), which every
    index scan reads in full until VACUUM merges it, and autovacuum waits for
    ~20% of the table to be new. After re-ingesting 40 of the manual's pages
    (566 sections) the list held 73 pages and a hybrid search took 8.07 ms
    against 6.17 ms once merged (median wall time, 140 interleaved calls; each
    query word's index scan had taken ~0.8 ms instead of ~0.01). Needs the
    indexes' owner (PostgreSQL's rule for gin_clean_pending_list): for anyone
    else it does nothing and returns None, and autovacuum merges later.
    """
    sections = layout.tables["sections"]
    try:
        with conn.transaction():
            return int(conn.execute(
                """SELECT coalesce(sum(gin_clean_pending_list(c.oid::regclass)), 0)
                     FROM pg_index i
                     JOIN pg_class c ON c.oid = i.indexrelid
                     JOIN pg_am a ON a.oid = c.relam
                    WHERE a.amname = 'gin'
                      AND c.relkind = 'i'  -- a partitioned table's own index has no pages: its partitions' do
                      AND i.indrelid IN (SELECT %(t)s::regclass
                                         UNION ALL
                                         SELECT inhrelid FROM pg_inherits WHERE inhparent = %(t)s::regclass)""",
                {"t": sections}).fetchone()[0])
    except psycopg.errors.InsufficientPrivilege:
        return None
    except psycopg.errors.UndefinedTable as e:
        raise missing_table_error(e) from None


def refresh_term_stats(conn: psycopg.Connection, layout: Layout) -> int:
    """Recount how many sections contain each stemmed word (lexical search's weights); returns the words counted.

    One transaction: searches keep the previous counts until it commits. The
    lock makes concurrent refreshes wait for each other instead of colliding on
    the primary key; readers are not blocked. O(sections): onetrip runs it once
    per ingest run, not per document, and tolerates counts that are a run old.
    Then merges the full-text indexes' pending entries (`flush_word_indexes`).
    """
    require_autocommit(conn, "refresh_term_stats")
    words = _count_words(conn, layout)
    flush_word_indexes(conn, layout)
    return words


def _count_words(conn: psycopg.Connection, layout: Layout) -> int:
    stats, sections = layout.tables["term_stats"], layout.tables["sections"]
    with conn.transaction():
        try:
            conn.execute(f"LOCK TABLE {stats} IN SHARE ROW EXCLUSIVE MODE")
        except psycopg.errors.UndefinedTable as e:
            raise missing_table_error(e) from None
        conn.execute(f"DELETE FROM {stats}")
        return conn.execute(
            f"""INSERT INTO {stats} (lexeme, sections, share, idf)
                SELECT w.word, w.ndoc, w.ndoc::float8 / n.total, ln((n.total + 1.0) / w.ndoc)
                  FROM ts_stat(%s) w,
                       (SELECT count(*) AS total FROM {sections}) n""",
            (f"SELECT tsv FROM {sections}",),
        ).rowcount


TERM_STATS_BEHIND = ""
"""The term_stats lexeme of the row that says the counts are behind the sections. Each stored revision
(`replace_document`) and deletion commits with it, an ingest run writes it before each batch of documents,
and the recount at the run's end deletes it with every other row, so a
run stopped before its recount (Ctrl-C, SIGTERM, a lost connection) leaves it, and the next run recounts even
if it stores nothing: that had left the stopped run's documents' words uncounted until someone ran
`onetrip refresh-term-stats`. No query word is empty, so searches never read it."""


def mark_term_stats_behind(conn: psycopg.Connection, layout: Layout) -> None:
    """Write (and commit, unless a transaction of the caller's is open) the TERM_STATS_BEHIND row."""
    with conn.transaction():
        _mark_behind(conn, layout)


def _mark_behind(conn: psycopg.Connection, layout: Layout) -> None:
    conn.execute(f"INSERT INTO {layout.tables['term_stats']} (lexeme, sections, share, idf) "
                 "VALUES (%s, 0, 0, 0) ON CONFLICT DO NOTHING", (TERM_STATS_BEHIND,))


def term_stats_behind(conn: psycopg.Connection, layout: Layout) -> bool:
    """True when the word counts may be behind the sections: none counted yet (a table made or loaded without
    `refresh_term_stats`), or a run that wrote documents stopped before its recount (TERM_STATS_BEHIND)."""
    stats = layout.tables["term_stats"]
    try:
        return conn.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {stats} WHERE lexeme <> %(m)s) "
                            f"OR EXISTS (SELECT 1 FROM {stats} WHERE lexeme = %(m)s)",
                            {"m": TERM_STATS_BEHIND}).fetchone()[0]
    except psycopg.errors.UndefinedTable as e:
        raise missing_table_error(e) from None
