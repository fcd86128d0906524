"""Ingestion: files -> parsed sections -> embeddings -> one atomic write per document.

Files are read and hashed first; a document whose bytes are unchanged since
the stored revision is skipped before any parsing or embedding. Parsed
documents are embedded in batches across documents (small pages would waste
the model's batch otherwise) and each is then written in its own transaction
(see `store.replace_document`). A bad file is reported and skipped; it never
aborts the batch and never leaves partial rows.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
import urllib.parse
from contextlib import contextmanager, suppress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from .embedders import (Embedder, check_embedder, check_embedder_object, check_probe, embedder_dim, embedder_name,
                        embedder_probe, probe_differs)
from .errors import DimensionMismatchError, IngestInterruptedError, InputDocumentError, OnetripError
from .sections import (
    HTML_SUFFIXES,
    MARKDOWN_SUFFIXES,
    RST_SUFFIXES,
    SECTIONING,
    TEXT_SUFFIXES,
    ParsedDocument,
    embedding_text,
    parse_file,
)
from .store import (
    EMBEDDER_KEY,
    EMBEDDER_PROBE_KEY,
    EMBEDDING_TEXT_KEY,
    FORMAT_KEY,
    PARSE_WARNINGS_KEY,
    SECTIONING_KEY,
    DocumentRecord,
    StoreResult,
    embedder_lock,
    check_access_values,
    check_doc_id,
    delete_document,
    is_stored,
    documents_from,
    flush_word_indexes,
    set_document_access,
    set_document_source,
    stored_source,
    stored_state,
    recorded_models,
    recorded_probes,
    refresh_term_stats,
    replace_document,
    mark_term_stats_behind,
    model_names,
    term_stats_behind,
)
from .layout import Layout
from .schema import read_layout
from .connection import require_autocommit

#: what a folder walk picks up (what `parse_file` reads by its suffix); a file named directly is read as it is
SUFFIXES = MARKDOWN_SUFFIXES | HTML_SUFFIXES | RST_SUFFIXES | TEXT_SUFFIXES


@dataclass
class IngestReport:
    """What an ingest run did, for the CLI summary and for callers."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    access_only: int = 0  # of `changed`: same content, another collection/ACL (not re-embedded)
    recut: int = 0  # of `changed`: same file, stored by an onetrip that cut files differently (SECTIONING)
    made_public: list[str] = field(default_factory=list)  # stored with an ACL before, without one now
    moved: list[tuple[str, str]] = field(default_factory=list)  # (path, the other collection it was stored in)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (path, what parsing lost: ParsedDocument.warnings)
    replaced: list[tuple[str, str]] = field(default_factory=list)  # (path, the other file, still there, it was from)
    gone: list[tuple[str, str]] = field(default_factory=list)  # (doc_id, its file, gone from a folder given)
    deleted: list[str] = field(default_factory=list)  # of `gone`: deleted (delete_missing=True)
    #: of `gone`: no longer stored when this run came to delete it (another writer deleted it meanwhile)
    deleted_elsewhere: list[str] = field(default_factory=list)
    sections: int = 0
    reused: int = 0  # of `sections`: written with the vector stored for the same text (`_stored_vectors`), not embedded
    parse_seconds: float = 0.0
    embed_seconds: float = 0.0
    load_seconds: float = 0.0
    documents: int = 0
    recounted: bool = False  # the run recounted the lexical word weights (`refresh_term_stats`)
    words_behind: bool = False  # a recount was due but ``recount=False``: the next run (or refresh-term-stats) does it

    @property
    def seconds(self) -> float:
        return self.parse_seconds + self.embed_seconds + self.load_seconds

    def note_access(self, path: str, res: StoreResult) -> None:
        """List a stored revision that made a document public or moved it from another collection."""
        if res.made_public:
            self.made_public.append(path)
        if res.moved_from is not None:
            self.moved.append((path, res.moved_from))

    def as_dict(self) -> dict[str, object]:
        return {
            "documents": self.documents, "new": self.new, "changed": self.changed,
            "unchanged": self.unchanged, "failed": [{"path": p, "reason": r} for p, r in self.failed],
            "access_only": self.access_only, "recut": self.recut, "made_public": self.made_public,
            "moved": [{"path": p, "from_collection": c} for p, c in self.moved],
            "warnings": [{"path": p, "warning": w} for p, w in self.warnings],
            "replaced": [{"path": p, "other_file": o} for p, o in self.replaced],
            "gone": [{"doc_id": d, "path": p} for d, p in self.gone], "deleted": self.deleted,
            "deleted_elsewhere": self.deleted_elsewhere,
            "sections": self.sections, "reused": self.reused, "parse_seconds": round(self.parse_seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3), "load_seconds": round(self.load_seconds, 3),
            "recounted": self.recounted, "words_behind": self.words_behind,
        }


Paths = Iterable[str | os.PathLike[str]] | str | os.PathLike[str]


def iter_files(paths: Paths) -> Iterator[tuple[Path, Path]]:
    """Yield (file, root) pairs: files as given, folders walked in sorted order.

    A path that does not exist is yielded too, so it is reported as a failure,
    as is a file in a folder that is not a regular file (a FIFO, socket or
    device, or a symbolic link whose target is missing), which had been skipped
    without a word. One path may be given as a string (not read as a sequence
    of one-letter paths). A folder in it that cannot be read (permissions) is yielded too, so it is reported
    as a failure: the walk (Path.rglob) had skipped it without a word, and a run's --delete-missing then took
    its files for gone and deleted their documents.
    """
    for raw in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        p = Path(_checked_path(raw))
        if _is_dir(p):
            found: list[Path] = []
            for folder, dirs, names in os.walk(p, onerror=lambda e: found.append(Path(e.filename))):
                dirs[:] = [d for d in dirs if not d.startswith(".")]  # hidden folders are not walked
                found += [Path(folder, n) for n in names
                          if not n.startswith(".") and Path(n).suffix.lower() in SUFFIXES]
            for f in sorted(found):
                yield f, p
        else:
            yield p, p.parent


def _checked_path(raw: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """``raw``, refused when it is "" or the filesystem root. Path("") is ".": `onetrip ingest "$DOCS"` with DOCS
    unset had ingested the folder the shell was in (with --delete-missing, deleting what was stored from the real
    one), and `onetrip ingest "$DOCS/"` walks the whole filesystem (found by review)."""
    if isinstance(raw, str) and not raw:
        raise InputDocumentError(repr(raw), "an empty path (an unset variable?): name a file or folder ('.' for "
                                 "the current folder); nothing was ingested")
    try:  # not Path.resolve(), which raises on a symbolic link loop
        resolved = Path(os.path.realpath(raw))
    except (OSError, ValueError):  # a NUL in it: that path fails as it did, alone
        return raw
    if resolved == Path(resolved.anchor):
        raise InputDocumentError(str(raw), "the filesystem root (an unset variable in \"$DOCS/\"?): name the "
                                 "documents' folder; nothing was ingested")
    return raw


def _is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where it cannot be told (a folder above it that cannot be entered: Python
    3.11's is_dir raises PermissionError, which had stopped the whole run); the path is then read as a file
    and fails as one."""
    try:
        return path.is_dir()
    except OSError:
        return False


def is_there(path: Path) -> bool:
    """``path.exists()``, True for a path out of reach (a folder above it that cannot be entered: Python
    3.11's exists raises PermissionError there); ingest then reports it failed, naming the cause."""
    try:
        return path.exists()
    except PermissionError:
        return True
    except OSError:
        return False


def _within_reach(path: Path) -> bool:
    """There, and reachable: `is_there` (True out of reach) and its own entry readable (lexists is False out of
    reach): what ingest reads, and what alone can clash with another file's id."""
    return is_there(path) and os.path.lexists(path)


def _is_gone(path: Path) -> bool:
    """Whether a stored document's file is gone: nothing there (ENOENT, ENOTDIR), not merely out of reach (a
    folder above it that cannot be entered: os.path.lexists says False for that too, and --delete-missing had
    deleted the documents of every file under a folder that was only made unreadable)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False


def _path_of(uri: str | None) -> Path | None:
    """The file a ``file:`` URI names (None for another scheme: a document loaded by the caller's own code).

    Decoded to bytes, then as the file system does: `Path.as_uri` percent-encodes a name that is not UTF-8
    byte by byte, which url2pathname decoded as UTF-8 with replacement, naming a file that is not there (every
    document under such a folder was "gone", and --delete-missing deleted them; found by review)."""
    if not uri:
        return None
    parts = urllib.parse.urlsplit(uri)
    return Path(os.fsdecode(urllib.parse.unquote_to_bytes(parts.path))) if parts.scheme == "file" else None


def _other_file(stored_uri: str | None, uri: str) -> str | None:
    """The file a stored document came from, when that is another file than ``uri`` and it is still there:
    a file that replaces it is another one of the same id (a run of another folder), not the same one moved."""
    other = _path_of(stored_uri) if stored_uri != uri else None
    return str(other) if other is not None and other.is_file() else None


def _gone_files(conn: psycopg.Connection, layout: Layout, folder: Path,
                doc_id: Callable[[Path, Path], str]) -> list[tuple[str, str, Path]]:
    """(doc_id, source_uri, file) of the stored documents from files under ``folder`` that no longer exist and
    that a run of ``folder`` would give that id (so another id scheme's documents, a --doc-id-prefix run's, and
    files named alone are not this run's to report)."""
    gone = []
    root = folder.resolve()
    for did, uri in documents_from(conn, layout, root.as_uri().rstrip("/") + "/"):
        path = _path_of(uri)
        if path is None or not _is_gone(path) or not path.is_relative_to(root):
            continue  # (outside the folder, an id function may fall back to the bare file name)
        try:
            if doc_id(path, folder) != did:
                continue
        except Exception:  # noqa: BLE001 - a caller's id function that cannot name a missing file: not ours
            continue
        gone.append((did, uri, path))
    return gone


def _resolve(path: Path) -> Path:
    """``path.resolve()``, or for a symbolic link loop its folder resolved and its own name.

    Python before 3.13 raises RuntimeError ("Symlink loop from ...") on a loop,
    and a loop in a folder walked had stopped the whole run with a traceback
    before anything was written; the loop is now reported as that file's failure.
    """
    if "\x00" in str(path):  # no such file can exist; os.path.realpath would raise 'embedded null byte'
        return Path(os.path.abspath(path))
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return path.parent.resolve() / path.name


def _not_a_file(path: Path) -> str:
    """Why a path that exists is not read as a document."""
    if not path.is_dir():
        return "not a regular file (a FIFO, socket or device)"
    try:  # `iter_files` yields a folder its walk could not read
        with os.scandir(path):
            pass
    except OSError as e:
        return (f"a folder onetrip cannot read ({e.strerror or e}): its files were not ingested, and no "
                "document stored from them is taken for gone")
    return "a folder now (it was a file when the run began)"


def unreadable(path: Path) -> str:
    """Why a path that does not exist as a file cannot be read: a loop, a dangling link, or nothing there."""
    if "\x00" in str(path):
        return "a path with a NUL character (no file can have one)"
    try:
        path.stat()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop (following its links never reaches a file)"
        if e.errno == errno.EACCES:
            return "out of reach (permission denied on a folder above it)"
    return "a symbolic link to a missing file" if path.is_symlink() else "no such file or directory"


def plan_files(paths: Paths, doc_id: Callable[[Path, Path], str] | None = None) -> list[tuple[Path, Path, str]]:
    """The (file, root, doc_id) a run ingests, each file once; refuses two files that would share a doc_id.

    The id is the path relative to the folder given (a file given alone: its
    name), so ``a/README.md`` and ``b/README.md`` named one by one are both
    ``README.md``: the second had silently replaced the first. Raised before
    any write (InputDocumentError, naming both files).
    """
    make_id = doc_id or doc_id_for
    seen: dict[str, Path] = {}
    files: set[Path] = set()
    planned = []
    for path, root in iter_files(paths):
        resolved = _resolve(path)
        if resolved in files:
            continue  # the same file given twice (a folder and a file in it): once, under its first id
        files.add(resolved)
        did = make_id(path, root)
        # a missing file is reported as such by ingest and stores nothing: no conflict; nor does a folder the
        # walk could not read (two lost+found folders had refused a run of two disks) or a file out of reach
        exists = _within_reach(path) and not _is_dir(path)
        first = seen.get(did) if exists else None
        if first is not None:
            raise InputDocumentError(str(path), f"it would be stored as document {did!r}, as {first} is: a "
                                     "document's id is its path relative to the folder given; ingest their "
                                     "common folder, or each in its own run with --doc-id-prefix (doc_id=)")
        if exists:
            seen[did] = path
        planned.append((path, root, did))
    return planned


def doc_id_for(path: Path, root: Path) -> str:
    """A stable document id: the path relative to the folder it was found in. For a symbolic link whose
    target lies outside that folder, the link's own path there (it had been the bare file name: two such
    links of one name in two subfolders then collided, and the message said to ingest the folder given)."""
    try:
        return _resolve(path).relative_to(root.resolve()).as_posix()
    except ValueError:
        pass
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return path.name


EMBEDDING_TEXT = 1
"""The version of `embedding_text`, stored with each document (metadata ``onetrip_embedding_text``; none: 1, as
every onetrip stored before 2026-12-05 made it). A stored vector is reused for a section whose text is the same
(`_stored_vectors`) only under the same version: raise it whenever `embedding_text` changes."""


def _why(e: BaseException, doc_id: str | None = None) -> str:
    """A failed file's reason, one line: PostgreSQL's DETAIL, HINT and CONTEXT lines (a trigger's, a full disk's,
    COPY's 'line 1, column embedding') had each become a line of `onetrip ingest`'s summary. The document's id,
    which `replace_document`'s own errors start with, is left out: the summary names the file."""
    first = (str(e).strip().splitlines() or [""])[0]
    if doc_id is not None and first.startswith(f"{doc_id}: "):
        first = first[len(doc_id) + 2:]
    return f"{type(e).__name__}: {first}"


@dataclass
class _Pending:
    record: DocumentRecord
    parsed: ParsedDocument
    path: str
    recut: bool = False  # stored unchanged, but cut by another SECTIONING: written even though its hash matches
    stored: bool = False  # a revision is stored: its vectors may serve sections of the same text (`_stored_vectors`)
    replaces: str | None = None  # the stored revision came from this other file, still there (report.replaced)


def _stored_vectors(conn: psycopg.Connection, layout: Layout, doc_ids: Sequence[str],
                    embedder_name: str, probe: list[float] | None) -> dict[str, np.ndarray]:
    """The stored vectors of these documents' sections, by the text they were embedded from (`embedding_text`).

    Why: an edited page changes a few of its sections, and a new onetrip that
    cuts files differently (`SECTIONING`) changes the cut of some documents, not
    their text; embedding every section again cost the whole first ingest's
    time (the model is ~90% of it). Only documents that ``ingest_paths`` stored
    with this embedder (its name, and its ``probe`` when it gives one) and this
    EMBEDDING_TEXT are read, so a vector is reused only for the very text it
    was made from. A document without a recorded probe (stored before
    2026-12-05) lends none: `embedders.check_probe` cannot compare it, so its
    vectors may be another model's of that name, and the new revision would
    record this model's probe over them. One statement per embedding batch.
    """
    if not doc_ids:
        return {}
    t = layout.tables
    rows = conn.execute(
        f"""SELECT d.metadata -> %(p)s, d.title, s.heading_path, s.content, s.embedding::vector::text
              FROM {t['sections']} s
              JOIN {t['documents']} d ON d.doc_id = s.doc_id
             WHERE s.doc_id = ANY(%(ids)s)
               AND d.metadata ->> %(e)s = %(name)s
               AND coalesce(d.metadata ->> %(v)s, '1') = %(version)s""",
        {"ids": list(doc_ids), "e": EMBEDDER_KEY, "name": embedder_name, "v": EMBEDDING_TEXT_KEY,
         "version": str(EMBEDDING_TEXT), "p": EMBEDDER_PROBE_KEY},
    ).fetchall()
    return {embedding_text(title or "", path, content): np.array(json.loads(vec), dtype=np.float32)
            for stored_probe, title, path, content, vec in rows
            if probe is None or (isinstance(stored_probe, list) and not probe_differs(stored_probe, probe))}


@contextmanager
def _one_model(conn: psycopg.Connection, layout: Layout, embedder: Embedder, probe: list[float] | None, *,
               force: bool) -> Iterator[Callable[[], None]]:
    """Refuse a table whose documents another embedder made; a first ingest holds a lock until it has recorded.

    Documents recorded under this embedder's name but with another probe
    (`embedders.check_probe`: another model in a folder of the same name) are
    refused too, unless ``force`` embeds the files again on purpose.

    Without the lock, two first ingests with different models would each find
    no record and both write (tested with two threads). Yields ``recorded``, to
    call once a document is committed: the record is then visible to others,
    so same-model ingests go on in parallel.
    """
    table = layout.tables["documents"]

    def check() -> list[str]:
        """The recorded names, once both checks passed (the probe's not under ``force``): one pass over the
        documents; a second, for the ids the error names, only when a probe differs."""
        models = recorded_models(conn, layout)
        names = model_names(models)
        check_embedder(names, embedder, table)
        if not force and probe is not None and any(
                name == embedder.name and probe_differs(stored, probe) for name, stored, _ in models):
            check_probe(recorded_probes(conn, layout, embedder.name), probe, embedder, table)
        return names

    if check():
        yield lambda: None
        return
    held = [True]

    def release() -> None:
        if held[0]:
            held[0] = False
            with suppress(psycopg.Error):  # a broken connection has released it with its session
                embedder_lock(conn, layout, unlock=True)

    embedder_lock(conn, layout)
    try:
        check()  # another first ingest may have won, with another model or this name's other weights
        yield release
    finally:
        release()


@contextmanager
def _stop_when_lost(conn: psycopg.Connection, report: IngestReport, total: int) -> Iterator[None]:
    """A lost connection ends the run with IngestInterruptedError, naming the cause and what was done.

    The run had gone on: every file left in the embedding batch failed with "the
    connection is closed", then psycopg's error ended it, and the report (which
    files were stored) never reached the caller.
    """
    try:
        yield
    except psycopg.OperationalError as e:
        if not conn.broken:
            raise
        cause = (str(e).strip().splitlines() or [""])[0]
        done, failed = report.new + report.changed + report.unchanged, len(report.failed)
        if done + failed == total:  # lost while recounting the word statistics
            what = (f"after every file was stored, found unchanged or failed ({done} and {failed}); the lexical "
                    "word statistics were not brought up to date: run `onetrip refresh-term-stats` "
                    "(refresh_term_stats in Python)")
        else:
            what = (f"after {done} of {total} files were stored or found unchanged, each committed whole"
                    f"{f' ({failed} failed before)' if failed else ''}; the others were not written: run the same "
                    "ingest again (unchanged files are skipped)")
        raise IngestInterruptedError(f"the connection to PostgreSQL was lost during ingest ({cause}) {what}",
                                     cause, report) from None


def _store_access(conn: psycopg.Connection, layout: Layout, did: str, digest: str, collection: str,
                  acl: Sequence[str] | None, keep_history: bool, source_uri: str, shown: str,
                  report: IngestReport) -> bool:
    """Apply an access-only change (`set_document_access`) and count it; False: store the document in full."""
    try:
        res = set_document_access(conn, layout, did, digest, collection, acl, source_uri=source_uri,
                                  keep_history=keep_history)
    except (OnetripError, ValueError, psycopg.Error) as e:
        if conn.broken:  # not this file's fault: the run stops (_stop_when_lost)
            raise
        report.failed.append((shown, _why(e)))
        return True
    if res is None:  # its content changed meanwhile
        return False
    if res.outcome == "changed":
        report.changed += 1
        report.access_only += 1
        report.sections += res.sections
    else:
        report.unchanged += 1
    report.note_access(shown, res)
    return True


#: The prefix of the documents.metadata keys onetrip records (`store.EMBEDDER_KEY`, ...).
RESERVED_PREFIX = "onetrip_"


def _own_metadata(metadata: dict, warnings: Sequence[str]) -> tuple[dict, list[str]]:
    """A file's own metadata (front matter, an HTML page's <meta>) without keys of onetrip's prefix, and its
    warnings with one per key dropped.

    Such a key would be read as onetrip's own (``onetrip_parse_warnings`` showed as the file's warnings) or
    silently overwritten (``onetrip_embedder``); dropped with a warning, the file is still stored.
    """
    dropped = sorted(str(k) for k in metadata if str(k).startswith(RESERVED_PREFIX))
    own = {k: v for k, v in metadata.items() if not str(k).startswith(RESERVED_PREFIX)}
    return own, [*warnings, *(f"metadata key {k!r} dropped: the {RESERVED_PREFIX} prefix is onetrip's own"
                              for k in dropped)]


def ingest_paths(
    conn: psycopg.Connection,
    paths: Paths,
    *,
    layout: Layout,
    embedder: Embedder,
    force: bool = False,
    batch_sections: int = 256,
    on_progress: Callable[[str, IngestReport], None] | None = None,
    doc_id: Callable[[Path, Path], str] = doc_id_for,
    collection: str = "default",
    acl: Sequence[str] | None = None,
    keep_history: bool = False,
    recount: bool = True,
    delete_missing: bool = False,
) -> IngestReport:
    """Ingest files and folders; returns counts of new/changed/unchanged/failed documents.

    A file is skipped as unchanged when its content hash, ``collection`` and
    ``acl`` are all as stored (its stored ``source_uri`` follows it when the
    file was found somewhere else: a moved folder). Another collection or ACL on an unchanged file
    is a new revision that keeps the sections and their vectors (no parsing or
    embedding), so an access change takes effect at once. An unchanged file
    that an onetrip which cut files differently stored (another
    `onetrip.sections.SECTIONING`) is cut, embedded and stored again
    (``report.recut``). Documents that had
    an ACL and are stored without one are listed in ``report.made_public``, and
    documents stored in another collection before in ``report.moved``: a doc_id
    names one document across collections (give ``doc_id`` a prefix to keep both).
    Two files of one run that would share a doc_id are refused before any write;
    a file that replaces a document stored from another file, which is still
    there, is stored and listed in ``report.replaced`` (another run's file of the
    same relative path: a ``doc_id`` prefix keeps both; the same text, in another
    collection or ACL, too); the same text under the same access stays that other
    file's document (unchanged, its source kept). ``paths`` may be one path.

    Files gone: for each folder given, the stored documents that came from a
    file under it (``source_uri``) which no longer exists, and which this run
    would have given the same id, are listed in ``report.gone`` (a file renamed,
    moved to another subfolder or deleted: a rename is a new id, and the old
    document stayed searchable without a word). ``delete_missing`` deletes them
    (``report.deleted``; archived first under ``keep_history``).

    Ends by recounting the lexical search's word statistics (`refresh_term_stats`)
    when a document was added or changed, none were counted yet, or an earlier
    run stopped before its recount (`store.TERM_STATS_BEHIND`). The recount reads
    every section (~6 s at a million): ``recount=False`` leaves it to the next run
    or to `refresh_term_stats` (``report.words_behind``; the mark stays), for
    frequent small runs into a large table. Until then a word new to the table
    weighs 1 in lexical search, and known words keep their counts.

    Each written document records ``embedder.name`` in its metadata (key
    ``onetrip_embedder``) and the model's probe (``onetrip_embedder_probe``: the
    start of its vector for a fixed sentence, `embedders.embedder_probe`). Before
    any write, a table whose documents name another embedder is refused
    (EmbedderMismatchError), as is one of another dimension (DimensionMismatchError);
    documents of the same name whose probe differs (another model saved in a
    folder of that name) are refused too, unless ``force`` embeds the files again
    on purpose. Retrievers make both checks before they embed a text.

    A changed or re-cut document embeds only the sections whose text changed
    (`_stored_vectors`; ``report.reused`` counts the others), except under ``force``.

    A connection lost during the run ends it with IngestInterruptedError (its
    ``report``: what was done before); a document being written then is not stored.

    ``conn`` must be in autocommit mode (`onetrip.connect` makes it so): each
    document commits in a transaction of its own. On a connection without it,
    the run's first statement opened a transaction that every document's became
    a savepoint of: nothing was visible to others, other writers of those
    documents waited for the whole run, and closing the connection lost it all.
    """
    require_autocommit(conn, "ingest_paths")  # each document commits in a transaction of its own
    if embedder is None:  # None is "the default" to a retriever, not to ingest, which records what embedded
        raise TypeError("ingest_paths needs an embedder: onetrip.embedders.SentenceTransformerEmbedder() for the "
                        "bundled model")
    check_embedder_object(embedder)  # a model folder's path: a TypeError saying so, not AttributeError 'dim'
    embedder_name(embedder)  # recorded on every document: a string, or the model checks read no record
    report = IngestReport()
    check_access_values(collection, acl)
    given = [Path(_checked_path(p)) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else list(paths))]
    planned = plan_files(given, doc_id)  # before any write: two files for one doc_id are refused
    # before any write: the tables as they are, not as the caller's Layout says. A Layout(dim=768) over a
    # vector(384) table had failed every file with COPY's multi-line 'expected 384 dimensions, not 768'; a prefix
    # with no tables with 'relation "x_term_stats" does not exist ... versions before it did not create'.
    # Read first, so the embedder is compared with the table, not with a Layout that misstates it (a 384-d model
    # with Layout(dim=768) over vector(384) tables was told 'the sections table stores vector(768)')
    stored = read_layout(conn, schema=layout.schema, prefix=layout.prefix)  # SchemaMissingError: `onetrip init`
    if (stored.vector_type, stored.dim) != (layout.vector_type, layout.dim):
        raise DimensionMismatchError(
            f"{layout.tables['sections']} stores {stored.vector_type}({stored.dim}), but the layout given says "
            f"{layout.vector_type}({layout.dim}) (Python: Layout(dim=..., vector_type=...) as the table was made, "
            "or read_layout(conn, ...) to get it)"
        )
    dim = embedder_dim(embedder)  # "8" or None: a TypeError naming it, not 'makes 8-d vectors ... vector(8)'
    if dim != stored.dim:
        raise DimensionMismatchError(
            f"embedder {embedder.name} makes {dim}-d vectors but the sections table "
            f"stores {stored.vector_type}({stored.dim})"
        )
    # before any write: one table, one model (vectors of two models are not comparable, even at one dimension)
    probe = embedder_probe(embedder)
    with _stop_when_lost(conn, report, len(planned)), _one_model(conn, layout, embedder, probe,
                                                                 force=force) as recorded:
        # before any write: an installation without term_stats (older onetrip) fails here, naming `onetrip init`
        # none counted, or an earlier run stopped before its recount: this run recounts at its end; the
        # TERM_STATS_BEHIND row is written around each batch of this run's documents
        marked = [term_stats_behind(conn, layout)]
        pending: list[_Pending] = []

        def flush() -> None:
            if not pending:
                return
            texts = [
                embedding_text(p.parsed.title, s.heading_path, s.content) for p in pending for s in p.parsed.sections
            ]
            t0 = time.perf_counter()
            known = {} if force else _stored_vectors(conn, layout, [p.record.doc_id for p in pending if p.stored],
                                                     embedder.name, probe)
            todo = [t for t in texts if t not in known]
            report.load_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                made = embedder.embed_documents(todo) if todo else np.zeros((0, stored.dim), np.float32)
            except OnetripError:
                raise
            except Exception as e:  # a model that fails (out of memory): the run stops, named (its raw exception
                # had ended `onetrip ingest` with a traceback and said nothing of what was stored)
                files = pending[0].path if len(pending) == 1 else f"{pending[0].path} to {pending[-1].path}"
                raise OnetripError(
                    f"the embedder {embedder.name!r} failed on a batch of {len(pending)} "
                    f"file{'' if len(pending) == 1 else 's'} ({files}): {_why(e)}; "
                    "the documents stored before that batch stay "
                    "stored, and the same command again continues from it") from e
            report.embed_seconds += time.perf_counter() - t0
            try:  # a mapping or a string has a length, but no vector per section in order (a dict had ended the
                n_vectors: int | None = None if isinstance(made, (Mapping, str, bytes)) else len(made)  # whole run)
            except TypeError:
                n_vectors = None
            if n_vectors != len(todo):  # each document's slice would take another's vectors: none is stored
                # a flat array of the batch's numbers is named by its shape: 'returned 1536 vectors' had misled
                got = (f"an array of shape {tuple(made.shape)}" if getattr(made, "ndim", 2) != 2
                       else f"{n_vectors} vectors" if n_vectors is not None else f"a {type(made).__name__}")
                why = (f"the embedder {embedder.name!r} returned {got} for {len(todo)} sections (this "
                       f"batch of {len(pending)} files); none was stored, as a vector could not be matched to its "
                       "section")
                for p in pending:
                    report.failed.append((p.path, why))
                    if on_progress:
                        on_progress(p.path, report)
                pending.clear()
                return
            # before each batch's writes (a run stopped in them recounts next time), and each stored document
            # commits with the mark too (replace_document): another run's recount deletes it, counting only
            # what was committed before it
            mark_term_stats_behind(conn, layout)
            marked[0] = True
            reused = [t in known for t in texts]
            if known:  # in the texts' order: a stored vector where the text is one, else the next one made
                made_rows = iter(made)
                vectors = [known[t] if hit else next(made_rows) for t, hit in zip(texts, reused)]
            else:
                vectors = made
            offset = 0
            for p in pending:
                n = len(p.parsed.sections)
                t0 = time.perf_counter()
                try:
                    res: StoreResult = replace_document(
                        conn, layout, p.record, p.parsed.sections, vectors[offset : offset + n], force=force or p.recut,
                        keep_history=keep_history,
                    )
                except (OnetripError, ValueError, psycopg.Error) as e:
                    if conn.broken:  # not this file's fault: the run stops (_stop_when_lost)
                        raise
                    report.failed.append((p.path, _why(e, p.record.doc_id)))
                else:
                    if res.outcome == "new":
                        report.new += 1
                    elif res.outcome == "changed":
                        report.changed += 1
                        if p.recut:
                            report.recut += 1
                        if p.replaces:
                            report.replaced.append((p.path, p.replaces))
                    else:
                        report.unchanged += 1
                    if res.outcome != "unchanged":
                        recorded()  # committed: the record is visible, the first-ingest lock can go
                    report.note_access(p.path, res)
                    report.sections += res.sections
                    if res.outcome != "unchanged":
                        report.reused += sum(reused[offset : offset + n])
                report.load_seconds += time.perf_counter() - t0
                offset += n
                if on_progress:
                    on_progress(p.path, report)
            pending.clear()

        for path, root, did in planned:
            report.documents += 1
            shown = str(path)
            t0 = time.perf_counter()
            state = "new"
            try:
                if not _within_reach(path):
                    raise InputDocumentError(shown, unreadable(path))
                if not path.is_file():  # reading a FIFO would wait forever
                    raise InputDocumentError(shown, _not_a_file(path))
                try:  # before stored_state sends it: a non-UTF-8 file name, an id past the limit
                    check_doc_id(did)
                except ValueError as e:  # the file's fault, said as the others are: no exception's name
                    raise InputDocumentError(shown, str(e)) from None
                data = path.read_bytes()
                digest = hashlib.sha256(data).hexdigest()
                uri = path.resolve().as_uri()
                state, stored_uri = stored_state(conn, layout, did, digest, collection, acl, sectioning=SECTIONING,
                                                 source_uri=uri)
                if force and state != "new":  # written whatever is stored; looked up all the same, so that a
                    state = "content"         # failure says "stays searchable" only of a document that is stored
                replaces = _other_file(stored_uri, uri) if state in ("content", "access", "source") else None
                if state == "source" and replaces:  # the same text from another file, which is still there: the
                    state = "unchanged"  # document stays that file's (moving its source here, a --delete-missing
                    # of this folder would delete it once this copy went, the other file still there)
                if state == "source" and not set_document_source(conn, layout, did, digest, uri):
                    state = "content"  # another writer stored other content meanwhile: this file's is stored
                    replaces = _other_file(stored_source(conn, layout, did), uri)
                if state in ("unchanged", "source"):
                    report.unchanged += 1
                    report.parse_seconds += time.perf_counter() - t0
                    if on_progress:
                        on_progress(shown, report)
                    continue
                if state == "access" and _store_access(conn, layout, did, digest, collection, acl, keep_history,
                                                       uri, shown, report):
                    if replaces:  # another tenant's file of the same id and text took it over: say so
                        report.replaced.append((shown, replaces))
                    report.load_seconds += time.perf_counter() - t0
                    if on_progress:
                        on_progress(shown, report)
                    continue
                try:
                    parsed = parse_file(path, data=data)  # the bytes hashed above: an edit since is the next run's
                except (InputDocumentError, OSError, UnicodeError, ValueError):
                    raise
                except Exception as e:  # noqa: BLE001 - a parser's own failure fails this file, not the run
                    # (front matter with a mapping as a key had raised TypeError and ended a whole ingest)
                    raise InputDocumentError(shown, f"the parser failed ({type(e).__name__}: {e})") from e
                own, warned = _own_metadata(parsed.metadata, parsed.warnings)
                report.warnings += [(shown, w) for w in warned]
                # kept with the document too, so a later look (onetrip documents, SQL) finds them
                found = {PARSE_WARNINGS_KEY: warned} if warned else {}
                record = DocumentRecord(  # refuses a doc_id past the index limit: this file fails, not the run
                    doc_id=did, source_uri=uri, title=parsed.title, content_hash=digest,
                    metadata={**own, **found, FORMAT_KEY: parsed.format, EMBEDDER_KEY: embedder.name,
                              SECTIONING_KEY: SECTIONING, EMBEDDING_TEXT_KEY: EMBEDDING_TEXT,
                              **({} if probe is None else {EMBEDDER_PROBE_KEY: probe})},
                    collection=collection, acl=acl,
                )
            except (InputDocumentError, OSError, UnicodeError, ValueError) as e:
                why = e.reason if isinstance(e, InputDocumentError) else _why(e)
                if state in ("content", "sectioning"):  # a stored document whose new read failed: say it is kept
                    why += ("; the revision stored before stays searchable" if state == "content" else
                            "; the revision an older onetrip stored stays searchable, cut as it cut it")
                report.failed.append((shown, why))
                report.parse_seconds += time.perf_counter() - t0
                if on_progress:  # every file is reported once, however it failed
                    on_progress(shown, report)
                continue
            report.parse_seconds += time.perf_counter() - t0
            pending.append(_Pending(record, parsed, shown, recut=state == "sectioning",
                                    stored=state in ("content", "sectioning"), replaces=replaces))
            if sum(len(p.parsed.sections) for p in pending) >= batch_sections:
                flush()
        flush()
        t0 = time.perf_counter()
        for folder in {g.resolve(): g for g in reversed(given) if _is_dir(g)}.values():  # each folder once
            for did, uri, path in _gone_files(conn, layout, folder, doc_id):
                report.gone.append((did, str(path)))
                if not delete_missing:
                    continue
                if delete_document(conn, layout, did, keep_history=keep_history, source_uri=uri):
                    report.deleted.append(did)
                    marked[0] = True  # the deletion committed with the mark: the recount below is due
                elif not is_stored(conn, layout, did):
                    report.deleted_elsewhere.append(did)  # else stored again from another file: kept
        # a recount is due when words changed, or marked: a write was tried, or an earlier run stopped
        due = bool(report.new or report.changed > report.access_only or marked[0])
        if due and recount:
            refresh_term_stats(conn, layout)  # recounts (the mark goes), merges GIN lists
            report.recounted = True
        elif due or report.access_only:
            # Word counts ignore access, but the UPDATEs left new GIN entries pending. Without the recount the
            # merge still runs (its cost is the new entries', not the table's), so searches do not slow down;
            # the TERM_STATS_BEHIND mark stays for the next run.
            flush_word_indexes(conn, layout)
            report.words_behind = due
        report.load_seconds += time.perf_counter() - t0
        return report
