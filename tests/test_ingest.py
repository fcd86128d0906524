"""Ingestion into a real database: bad files, unchanged/changed documents, atomic re-ingest."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from onetrip import Filters, Retriever, connect, init_schema
from onetrip.ingest import ingest_paths, iter_files
from onetrip.layout import Layout
from onetrip.sections import parse_file
from onetrip.store import DocumentRecord, replace_document

from .embedders import HashEmbedder

PAD = " This sentence pads the section so that it is not merged away as a tiny one."
DOC_V1 = f"# Guide\n\nIntro text for version one.{PAD}\n\n## Setup\n\nInstall it.{PAD}\n\n## Use\n\nRun it daily.{PAD}\n"
DOC_V2 = (f"# Guide\n\nIntro text for version two.{PAD}\n\n## Setup\n\nInstall it twice.{PAD}\n\n"
          f"## Use\n\nRun it.{PAD}\n\n## FAQ\n\nNone.{PAD}\n")


def rows(db, doc_id: str) -> list[tuple]:
    return db.execute(
        "SELECT section_id, content FROM sections WHERE doc_id = %s ORDER BY sequence_index", (doc_id,)
    ).fetchall()


def test_bad_files_are_reported_per_file_and_never_abort_the_batch(db, tmp_path):
    init_schema(db)
    good = tmp_path / "good.md"
    good.write_text(DOC_V1)
    (tmp_path / "empty.md").write_text("")
    (tmp_path / "blank.txt").write_text("  \n\n ")
    (tmp_path / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR" * 10)
    (tmp_path / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve".encode("latin-1"))
    (tmp_path / "noheadings.html").write_text("<html><body><p>Just a paragraph.</p></body></html>")
    (tmp_path / "broken.html").write_text("<html><body><h1>Title<p>unclosed <b>tags <div>everywhere")
    (tmp_path / "broken.md").write_text("# Title\n\n```python\nnever closed fence\n# not a heading\n")
    missing = tmp_path / "missing.md"
    unreadable = Path("/proc/self/mem")  # reading it raises OSError (EIO), even as root
    seen: list[str] = []
    report = ingest_paths(db, [tmp_path, missing, unreadable], layout=Layout(), embedder=HashEmbedder(),
                          on_progress=lambda path, _: seen.append(path))
    failed = dict(report.failed)
    assert set(failed) == {str(tmp_path / n) for n in ("empty.md", "blank.txt", "binary.md", "latin1.md")} | {
        str(missing), str(unreadable)}
    assert "OSError" in failed[str(unreadable)]
    assert sorted(seen) == sorted(str(f) for f, _ in iter_files([tmp_path, missing, unreadable]))  # each file once
    assert "empty" in failed[str(tmp_path / "empty.md")]
    assert "binary" in failed[str(tmp_path / "binary.md")]
    assert "UTF-8" in failed[str(tmp_path / "latin1.md")]
    assert "no such file" in failed[str(missing)]
    assert report.new == 4  # good.md, noheadings.html, broken.html, broken.md
    stored = {r[0] for r in db.execute("SELECT doc_id FROM documents")}
    assert stored == {"good.md", "noheadings.html", "broken.html", "broken.md"}
    # Failed files left no rows at all.
    assert db.execute("SELECT count(*) FROM sections WHERE doc_id NOT IN (SELECT doc_id FROM documents)").fetchone()[0] == 0
    # The fence is not closed, so '# not a heading' stayed code.
    assert not any("not a heading" == r[0] for r in db.execute("SELECT heading FROM sections WHERE doc_id='broken.md'"))


def test_files_that_break_a_parser_fail_alone(db, tmp_path):
    """Deep nesting raised RecursionError, which ingest_paths did not catch: the whole batch died. (2,000 nested
    <div>s, refused then, are read since the HTML walk is iterative: they are stored with the good files.)"""
    init_schema(db)
    (tmp_path / "good.md").write_text(DOC_V1)
    (tmp_path / "divs.html").write_text("<html><body>" + "<div>" * 2000 + "<p>x</p>" + "</div>" * 2000 + "</body>")
    (tmp_path / "brackets.md").write_text("---\nx: " + "[" * 5000 + "]" * 5000 + "\n---\n# T\n\nbody\n")
    (tmp_path / "utf16.md").write_bytes("# T\n\nHi".encode("utf-16"))
    (tmp_path / "late_nul.md").write_text("# T\n\n" + "a" * 10000 + "\x00b")  # past the first 8 KiB
    (tmp_path / "crlf.txt").write_bytes(f"First paragraph.{PAD}\r\n\r\nSecond one.{PAD}".encode())
    (tmp_path / "long_heading.md").write_text("# " + "x" * 5000 + f"\n\nbody text.{PAD}\n")
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    failed = {Path(f).name: reason for f, reason in report.failed}
    assert set(failed) == {"utf16.md", "late_nul.md"}
    assert "UTF-16" in failed["utf16.md"] and "NUL byte at offset 10005" in failed["late_nul.md"]
    assert report.new == 5  # good.md, crlf.txt, long_heading.md, divs.html, brackets.md
    # front matter nested 5,000 deep (PyYAML recursed past the limit: the file was refused) is read as key: value
    # lines, as invalid YAML is
    assert db.execute("SELECT metadata->>'x' FROM documents WHERE doc_id = 'brackets.md'").fetchone()[0] == (
        "[" * 5000 + "]" * 5000)
    assert db.execute("SELECT content FROM sections WHERE doc_id = 'divs.html'").fetchall() == [("x",)]
    assert "\r" not in db.execute("SELECT string_agg(content, '') FROM sections WHERE doc_id = 'crlf.txt'").fetchone()[0]
    (sid,) = db.execute("SELECT section_id FROM sections WHERE doc_id = 'long_heading.md' "
                        "AND sequence_index = 0").fetchone()
    assert sid == "x" * 200  # a key, cut: the anchor of a 5,000-character heading


def test_five_megabyte_single_paragraph(db, tmp_path):
    init_schema(db)
    big = tmp_path / "big.txt"
    big.write_text(("word " * 12 + "end. ") * 90_000)  # ~5.4 MB, sentences but no paragraphs
    assert big.stat().st_size > 5_000_000
    report = ingest_paths(db, [big], layout=Layout(), embedder=HashEmbedder())
    assert report.failed == [] and report.new == 1
    n, max_tokens = db.execute("SELECT count(*), max(token_count) FROM sections").fetchone()
    assert n > 1000 and max_tokens <= 256


def test_the_sections_stored_are_parsed_from_the_bytes_hashed(db, tmp_path, monkeypatch):
    """A file saved between ingest's read (which the hash is of) and its parse had been stored as the old bytes'
    hash with the new bytes' sections; once the file went back to the old bytes, ingest said "unchanged" and
    served text no file held. The parse now reads the bytes that were hashed; the edit is the next run's."""
    import hashlib

    import onetrip.ingest as ingest_module

    init_schema(db)
    page = tmp_path / "page.md"
    page.write_text(DOC_V1)
    parse = ingest_module.parse_file

    def edited_meanwhile(path, *args, **kwargs):
        page.write_text(DOC_V2)  # another writer saves the file after ingest read it
        return parse(path, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "parse_file", edited_meanwhile)
    assert ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder()).new == 1
    monkeypatch.setattr(ingest_module, "parse_file", parse)
    stored = " ".join(c for _, c in rows(db, "page.md"))
    assert "version one" in stored and "version two" not in stored
    assert db.execute("SELECT content_hash FROM documents").fetchone()[0] == hashlib.sha256(
        DOC_V1.encode()).hexdigest()
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())  # the file is V2 now
    assert report.changed == 1 and "version two" in " ".join(c for _, c in rows(db, "page.md"))


def test_a_connection_without_autocommit_is_refused_before_any_write(db, dsn, tmp_path):
    """On it, every document's transaction had been a savepoint of one the run's first statement opened: the
    report said new 1 and another session saw nothing, and closing the connection lost the run."""
    init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    with connect(dsn, autocommit=False) as conn:
        with pytest.raises(ValueError, match="autocommit mode"):
            ingest_paths(conn, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder()).new == 1
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 1


def test_every_writer_refuses_a_connection_without_autocommit(db, dsn, tmp_path):
    """delete_document, init_schema, refresh_term_stats, prune_history and drop_schema commit their own work, as
    ingest_paths does. On a connection without autocommit any earlier statement (read_layout) had opened a
    transaction their own became a savepoint of: delete_document returned True, the document stayed stored
    for everyone else, and closing the connection undid it (found by review)."""
    from onetrip import delete_document, read_layout, refresh_term_stats
    from onetrip.schema import drop_schema
    from onetrip.store import DocumentRecord, prune_history, replace_document, set_document_access

    init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder()).new == 1
    words = db.execute("SELECT count(*) FROM term_stats").fetchone()[0]
    stored_hash = db.execute("SELECT content_hash FROM documents").fetchone()[0]
    with connect(dsn, autocommit=False) as conn:
        layout = read_layout(conn)  # a read: the transaction is open from here on
        calls = {"delete_document": lambda: delete_document(conn, layout, "a.md"),
                 "init_schema": lambda: init_schema(conn, Layout(prefix="other_")),
                 "refresh_term_stats": lambda: refresh_term_stats(conn, layout),
                 "prune_history": lambda: prune_history(conn, layout),
                 "drop_schema": lambda: drop_schema(conn, layout),
                 "replace_document": lambda: replace_document(
                     conn, layout, DocumentRecord("b.md", "file:///b.md", "B", "b"), [], np.zeros((0, 384))),
                 "set_document_access": lambda: set_document_access(conn, layout, "a.md", stored_hash, "other",
                                                                    ["hr"])}
        for name, call in calls.items():
            with pytest.raises(ValueError, match=f"^{name} commits its work .* autocommit mode"):
                call()
    assert db.execute("SELECT doc_id, collection, acl FROM documents").fetchall() == [("a.md", "default", None)]
    assert db.execute("SELECT count(*) FROM term_stats").fetchone()[0] == words
    assert db.execute("SELECT to_regclass('other_documents')").fetchone()[0] is None
    assert delete_document(db, read_layout(db), "a.md")  # the same calls on an autocommit connection work
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 0


def test_an_unchanged_file_found_in_a_moved_folder_keeps_its_revision_and_takes_its_new_source(db, tmp_path):
    """The stored source_uri had kept the old path for good ("unchanged"), so a source_prefix filter on the new
    folder found nothing; an access change did update it. Now the source follows the file, in place."""
    old, new = tmp_path / "old" / "docs", tmp_path / "new" / "docs"
    old.mkdir(parents=True)
    (old / "a.md").write_text(DOC_V1)
    init_schema(db)
    assert ingest_paths(db, [old], layout=Layout(), embedder=HashEmbedder()).new == 1
    (tmp_path / "old").rename(tmp_path / "new")
    report = ingest_paths(db, [new], layout=Layout(), embedder=HashEmbedder())
    assert (report.unchanged, report.changed, report.new) == (1, 0, 0)
    uri, revision = db.execute("SELECT source_uri, revision FROM documents WHERE doc_id = 'a.md'").fetchone()
    assert (uri, revision) == ((new / "a.md").resolve().as_uri(), 1)
    r = Retriever(db, embedder=HashEmbedder())
    assert r.search("Install it", k=1, filters=Filters(source_prefix=new.resolve().as_uri()))


def test_a_parsers_own_failure_fails_that_file_not_the_run(db, tmp_path, monkeypatch):
    """A parser bug (a TypeError from front matter with a mapping as a key, since fixed) had ended the whole
    ingest run with a traceback, storing none of the other files."""
    import onetrip.ingest as ingest_module

    init_schema(db)
    (tmp_path / "bad.md").write_text(DOC_V1)
    (tmp_path / "good.md").write_text(DOC_V2)
    parse = ingest_module.parse_file

    def breaks_on_bad(path, *args, **kwargs):
        if path.name == "bad.md":
            raise TypeError("unhashable type: 'dict'")
        return parse(path, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "parse_file", breaks_on_bad)
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.new == 1 and dict(report.failed) == {
        str(tmp_path / "bad.md"): "the parser failed (TypeError: unhashable type: 'dict')"}


def test_unchanged_is_skipped_and_changed_replaces(db, tmp_path):
    init_schema(db)
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    emb = HashEmbedder()
    assert ingest_paths(db, [f], layout=Layout(), embedder=emb).new == 1
    again = ingest_paths(db, [f], layout=Layout(), embedder=emb)
    assert (again.new, again.changed, again.unchanged) == (0, 0, 1)
    f.write_text(DOC_V2)
    changed = ingest_paths(db, [f], layout=Layout(), embedder=emb)
    assert changed.changed == 1
    assert db.execute("SELECT revision FROM documents WHERE doc_id='guide.md'").fetchone()[0] == 2
    assert any("FAQ" in c for _, c in rows(db, "guide.md")) or any(
        "None." in c for _, c in rows(db, "guide.md"))
    assert not any("version one" in c for _, c in rows(db, "guide.md"))


class CountingEmbedder(HashEmbedder):
    """HashEmbedder that counts the sections' texts it embeds; the model probe each run embeds once
    (`onetrip.embedders.PROBE_TEXT`) is counted apart, in ``probes``."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded = 0
        self.probes = 0

    def embed_documents(self, texts):
        from onetrip.embedders import PROBE_TEXT

        probes = sum(t == PROBE_TEXT for t in texts)
        self.probes += probes
        self.embedded += len(texts) - probes
        return super().embed_documents(texts)


class FailingEmbedder(HashEmbedder):
    """HashEmbedder whose model fails on a text holding "explode", as one out of memory does."""

    def embed_documents(self, texts):
        if any("explode" in t for t in texts):
            raise RuntimeError("CUDA out of memory")
        return super().embed_documents(texts)


def test_an_embedder_that_fails_stops_the_run_naming_it_and_keeps_what_was_stored(db, tmp_path):
    """Found by review: a model's own exception ended the run raw (a traceback from `onetrip ingest`, nothing
    said of what was stored). It stops the run as an OnetripError naming the model, the batch and the cause."""
    from onetrip import OnetripError

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    (tmp_path / "z.md").write_text(f"# Boom\n\nThis one will explode.{PAD}\n")
    with pytest.raises(OnetripError, match=r"the embedder 'hash-test' failed on a batch of 1 file \(.*z\.md\): "
                                           r"RuntimeError: CUDA out of memory; the documents stored before") as e:
        ingest_paths(db, [tmp_path], layout=layout, embedder=FailingEmbedder(), batch_sections=1)
    assert isinstance(e.value.__cause__, RuntimeError)
    assert db.execute("SELECT array_agg(doc_id) FROM documents").fetchone()[0] == ["a.md"]
    again = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert (again.new, again.unchanged) == (1, 1)
    # a batch of several files names its first and last; a message of many lines (a C++ stack) gives its first
    (tmp_path / "y.md").write_text(f"# Boom too\n\nAlso explode.{PAD}\n")
    (tmp_path / "z.md").write_text(f"# Boom\n\nThis one will explode again.{PAD}\n")

    class Stacked(FailingEmbedder):
        def embed_documents(self, texts):
            if any("explode" in t for t in texts):
                raise RuntimeError("CUDA out of memory\nframe #0: at::native\nframe #1: c10::Error")
            return super().embed_documents(texts)

    with pytest.raises(OnetripError, match=r"batch of 2 files \(.*y\.md to .*z\.md\): RuntimeError: CUDA out of "
                                           r"memory; the documents") as e:
        ingest_paths(db, [tmp_path], layout=layout, embedder=Stacked())
    assert "\n" not in str(e.value)


def counted_words(db) -> set[str]:
    """The words term_stats counts (the TERM_STATS_BEHIND mark among them when it is there)."""
    return {w for (w,) in db.execute("SELECT lexeme FROM term_stats")}


def test_a_run_stopped_before_its_recount_is_recounted_by_the_next_run(db, tmp_path, monkeypatch):
    """ingest recounts the lexical word weights once, at the end of a run. A run stopped after storing its
    documents (Ctrl-C, SIGTERM, a lost connection during the recount) left their words uncounted, and the next
    run, finding every file stored, recounted nothing: those words searched with weight 1 until someone ran
    `onetrip refresh-term-stats`. The run now marks the counts as behind before its first write; the next run
    finds the mark and recounts even though it stores nothing."""
    import onetrip.ingest as ingest_module
    from onetrip.store import TERM_STATS_BEHIND, refresh_term_stats

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).new == 1

    words = counted_words(db)
    assert "zeppelin" not in words and TERM_STATS_BEHIND not in words
    (tmp_path / "b.md").write_text(f"# Airships\n\nA zeppelin floats.{PAD}\n")

    def stopped(*args):  # Ctrl-C as the recount starts: the documents are committed, their words not counted
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_module, "refresh_term_stats", stopped)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert db.execute("SELECT count(*) FROM documents").fetchone() == (2,)
    words = counted_words(db)
    assert "zeppelin" not in words and TERM_STATS_BEHIND in words  # behind, and marked so
    monkeypatch.undo()
    again = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert (again.new, again.changed, again.unchanged) == (0, 0, 2)
    words = counted_words(db)
    assert "zeppelin" in words and TERM_STATS_BEHIND not in words
    # the mark is never a search's word: the counts match a recount's, and no query word is empty
    n = len(counted_words(db))
    assert refresh_term_stats(db, layout) == n
    # a run that writes nothing marks nothing, and recounts nothing
    recounts: list = []
    monkeypatch.setattr(ingest_module, "refresh_term_stats", lambda *a: recounts.append(a))
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).unchanged == 2
    assert recounts == [] and TERM_STATS_BEHIND not in counted_words(db)


def test_another_runs_recount_does_not_take_the_mark_of_a_run_still_writing(db, dsn, tmp_path, monkeypatch):
    """Another run's recount (or `onetrip delete`, refresh-term-stats) deletes the TERM_STATS_BEHIND row and
    counts only the documents committed before it. The mark was written once, before a run's first write, so a
    run still writing after that recount, then stopped before its own, left its later documents uncounted and
    unmarked: the next run stored nothing and recounted nothing. The mark is written around each batch."""
    import onetrip.ingest as ingest_module
    from onetrip.store import TERM_STATS_BEHIND, refresh_term_stats

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(f"# Airships\n\nA zeppelin floats.{PAD}\n")
    (tmp_path / "b.md").write_text(f"# Music\n\nA xylophone rings.{PAD}\n")
    other = connect(dsn)
    store = ingest_module.replace_document

    def recounted_first(conn, layout, record, *args, **kwargs):  # the other recount, between b's mark and b
        if record.doc_id == "b.md":
            refresh_term_stats(other, layout)
        return store(conn, layout, record, *args, **kwargs)

    def stopped(*args):  # Ctrl-C as this run's own recount starts
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_module, "replace_document", recounted_first)
    monkeypatch.setattr(ingest_module, "refresh_term_stats", stopped)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder(), batch_sections=1)
    words = counted_words(db)
    assert "zeppelin" in words and "xylophon" not in words and TERM_STATS_BEHIND in words
    monkeypatch.undo()
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).unchanged == 2
    words = counted_words(db)
    assert "xylophon" in words and TERM_STATS_BEHIND not in words
    other.close()


def test_a_run_stopped_during_a_batchs_writes_is_recounted_by_the_next_run(db, tmp_path):
    """A stop that lands while a batch is written (Ctrl-C after one of its documents is committed) leaves that
    document stored and its words uncounted. The mark written before the batch's first write says so, and the
    next run, which stores nothing, recounts; the mark written after the batch comes too late for this stop."""
    from onetrip.store import TERM_STATS_BEHIND

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).new == 1
    (tmp_path / "b.md").write_text(f"# Airships\n\nA zeppelin floats.{PAD}\n")

    def stop(path, report) -> None:  # Ctrl-C as b.md's write is reported, before its batch ends
        if report.new:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder(), on_progress=stop)
    assert db.execute("SELECT count(*) FROM documents").fetchone() == (2,)
    words = counted_words(db)
    assert "zeppelin" not in words and TERM_STATS_BEHIND in words
    again = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert (again.new, again.changed, again.unchanged) == (0, 0, 2)
    words = counted_words(db)
    assert "zeppelin" in words and TERM_STATS_BEHIND not in words


def test_a_document_committed_during_another_runs_recount_keeps_the_mark(db, dsn, tmp_path):
    """Found by review: the mark was written outside each document's transaction (before and after a batch). A
    recount that had begun before a document's commit (its snapshot without it) and committed after deleted the
    mark; a run killed then left the document's words uncounted and unmarked, and plain re-runs never recounted.
    The mark now commits with the document: its insert waits for the open recount, and lands after it."""
    import threading

    from onetrip.store import TERM_STATS_BEHIND, refresh_term_stats

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).recounted
    parsed = parse_file(tmp_path / "a.md")
    recount = connect(dsn, autocommit=False)
    recount.execute("LOCK TABLE term_stats IN SHARE ROW EXCLUSIVE MODE")  # another run's recount, under way
    recount.execute("DELETE FROM term_stats")
    record = DocumentRecord(doc_id="b.md", source_uri="file:///b.md", title="B", content_hash="b")
    vectors = HashEmbedder().embed_documents([s.content for s in parsed.sections])
    stored = threading.Thread(target=replace_document, args=(db, layout, record, parsed.sections, vectors))
    stored.start()
    stored.join(2)
    assert stored.is_alive()  # its mark waits for the recount's lock
    recount.commit()  # the recount ends: every row, the mark among them, gone
    stored.join(10)
    assert not stored.is_alive() and db.execute("SELECT count(*) FROM documents").fetchone() == (2,)
    assert TERM_STATS_BEHIND in counted_words(db)  # the document came after the recount: marked
    refresh_term_stats(db, layout)
    assert TERM_STATS_BEHIND not in counted_words(db)
    recount.close()


def test_a_run_whose_writes_all_failed_leaves_no_mark(db, tmp_path, monkeypatch):
    """A batch's writes are marked before they are tried; when every one failed (a database error per document),
    the run still recounts at its end, which deletes its mark: a mark left behind would have the next run
    recount words that never changed (seconds, at a million sections)."""
    import onetrip.ingest as ingest_module
    from onetrip.store import TERM_STATS_BEHIND

    layout = init_schema(db)
    (tmp_path / "a.md").write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).new == 1
    (tmp_path / "b.md").write_text(f"# Airships\n\nA zeppelin floats.{PAD}\n")

    def refused(*args, **kwargs):
        raise ValueError("refused by the database")

    monkeypatch.setattr(ingest_module, "replace_document", refused)
    failed = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert (failed.new, failed.unchanged, [p for p, _ in failed.failed]) == (0, 1, [str(tmp_path / "b.md")])
    assert TERM_STATS_BEHIND not in counted_words(db)


def test_a_run_without_recount_leaves_the_weights_and_the_mark_to_the_next_run(db, tmp_path):
    """recount=False (`ingest --no-recount`), for frequent small runs into a large table, whose recount reads every
    section: the run's new words stay uncounted and the counts stay marked as behind, the full-text indexes'
    pending entries are merged all the same, and the next run that recounts does so though it stores nothing."""
    from onetrip.store import TERM_STATS_BEHIND, flush_word_indexes

    layout = init_schema(db)

    (tmp_path / "a.md").write_text(DOC_V1)
    first = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert first.new == 1 and first.recounted and not first.words_behind
    counted = counted_words(db)
    (tmp_path / "b.md").write_text(f"# Airships\n\nA zeppelin floats.{PAD}\n")
    run = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder(), recount=False)
    assert (run.new, run.unchanged, run.recounted, run.words_behind) == (1, 1, False, True)
    assert run.as_dict()["words_behind"] is True and run.as_dict()["recounted"] is False
    assert counted_words(db) == counted | {TERM_STATS_BEHIND}  # nothing recounted, and marked so
    assert flush_word_indexes(db, layout) == 0  # the new rows' GIN entries were merged by the run
    still = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder(), recount=False)
    assert (still.unchanged, still.recounted, still.words_behind) == (2, False, True)  # still due, still left
    due = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert (due.unchanged, due.recounted, due.words_behind) == (2, True, False)
    words = counted_words(db)
    assert "zeppelin" in words and TERM_STATS_BEHIND not in words
    quiet = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder(), recount=False)
    assert (quiet.unchanged, quiet.recounted, quiet.words_behind) == (2, False, False)  # nothing was due


def test_an_access_change_on_an_unchanged_file_is_stored(db, dsn, tmp_path, monkeypatch):
    """Same file, another --acl or --collection: a new revision at once, without re-embedding.

    The skip had compared the content hash only: re-ingesting with ``acl=("bob",)``
    reported "unchanged" and left the document readable by hr.
    """
    layout = init_schema(db)
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    emb = CountingEmbedder()
    assert ingest_paths(db, [f], layout=layout, embedder=emb, collection="c1", acl=("hr", "alice")).new == 1
    embedded, vectors = emb.embedded, db.execute("SELECT section_id, embedding FROM sections ORDER BY 1").fetchall()
    same = ingest_paths(db, [f], layout=layout, embedder=emb, collection="c1", acl=("alice", "hr"))
    assert (same.new, same.changed, same.unchanged) == (0, 0, 1)  # the ACL is a set: order does not matter
    twice = ingest_paths(db, [f], layout=layout, embedder=emb, collection="c1", acl=("hr", "alice", "hr"))
    assert twice.unchanged == 1  # ... nor does a name given twice

    import onetrip.ingest as ingest_module
    from onetrip.store import flush_word_indexes

    recounts = []
    monkeypatch.setattr(ingest_module, "refresh_term_stats", lambda *a: recounts.append(a))
    moved_file = tmp_path / "moved" / "guide.md"  # the same file found under another folder: same doc_id
    moved_file.parent.mkdir()
    moved_file.write_text(DOC_V1)
    narrowed = ingest_paths(db, [moved_file.parent], layout=layout, embedder=emb, collection="c1", acl=("bob",),
                            keep_history=True)
    assert (narrowed.changed, narrowed.access_only, narrowed.unchanged, narrowed.sections) == (1, 1, 0, 3)
    assert recounts == []  # word counts ignore access ...
    assert flush_word_indexes(db, layout) == 0  # ... but the updated rows' GIN entries were merged
    assert db.execute("SELECT source_uri FROM documents").fetchone() == (moved_file.resolve().as_uri(),)
    monkeypatch.undo()
    assert emb.embedded == embedded  # the sections and their vectors are kept
    assert db.execute("SELECT section_id, embedding FROM sections ORDER BY 1").fetchall() == vectors
    assert db.execute("SELECT acl, revision FROM documents WHERE doc_id = 'guide.md'").fetchone() == (["bob"], 2)
    assert db.execute("SELECT DISTINCT acl, revision FROM sections WHERE doc_id = 'guide.md'").fetchall() == [
        (["bob"], 2)]
    assert db.execute("SELECT DISTINCT acl, revision FROM section_history WHERE doc_id = 'guide.md'").fetchall() == [
        (["hr", "alice"], 1)]  # --keep-history archives the revision with its old ACL
    q = emb.embed_query("Install it")
    with Retriever(dsn) as r:
        assert r.search(q, k=3, filters=Filters(principals=("hr",))) == []
        hits = r.search(q, k=3, filters=Filters(principals=("bob",)))
        assert len(hits) == 3 and {h.section.revision for h in hits} == {2}

    moved = ingest_paths(db, [f], layout=layout, embedder=emb, collection="c2", acl=("bob",))
    assert (moved.changed, moved.made_public) == (1, [])
    assert {r[0] for r in db.execute("SELECT collection FROM sections WHERE doc_id = 'guide.md'")} == {"c2"}
    opened = ingest_paths(db, [f], layout=layout, embedder=emb, collection="c2")  # no ACL: everyone, as stored
    assert (opened.changed, opened.made_public) == (1, [str(f)])
    assert db.execute("SELECT acl FROM documents WHERE doc_id = 'guide.md'").fetchone() == (None,)
    assert emb.embedded == embedded

    f.write_text(DOC_V2)  # content and access together: stored in full, and reported as opened
    both = ingest_paths(db, [f], layout=layout, embedder=emb, collection="c2", acl=("bob",))
    assert (both.changed, both.access_only) == (1, 0) and emb.embedded > embedded
    assert ingest_paths(db, [f], layout=layout, embedder=emb, collection="c2").made_public == [str(f)]


def test_cli_ingest_says_when_a_document_was_made_public(dsn, tmp_path):
    from .test_cli import onetrip

    (tmp_path / "guide.md").write_text(DOC_V1)
    assert onetrip("ingest", str(tmp_path), "--acl", "hr", dsn=dsn).returncode == 0
    res = onetrip("ingest", str(tmp_path), "--acl", "bob", dsn=dsn)
    assert res.returncode == 0 and "1 changed (1 only in collection/ACL)" in res.stdout and "note" not in res.stderr
    res = onetrip("ingest", str(tmp_path), dsn=dsn)
    assert res.returncode == 0 and "guide.md had an ACL and is now readable by everyone" in res.stderr


def _failing_row_writer(after_rows: int, fail):
    """`store.section_copy_row` that calls ``fail`` on row ``after_rows + 1``: a failure in the middle of the
    COPY, after the DELETE of the old rows (earlier, at validation, nothing would have been written yet)."""
    import onetrip.store as store

    real, written = store.section_copy_row, []

    def row(*args, **kwargs):
        if len(written) == after_rows:
            fail()
        written.append(1)
        return real(*args, **kwargs)
    return row


def _then(real, after):
    """``real``, then ``after()`` (a failure or a stall once it has done its work)."""
    def wrapped(*args, **kwargs):
        real(*args, **kwargs)
        after()
    return wrapped


def _parsed(tmp_path: Path, text: str):
    p = tmp_path / "doc.md"
    p.write_text(text)
    return parse_file(p)


def test_failed_reingest_leaves_previous_revision_served(db, tmp_path, monkeypatch, statement_log):
    layout = Layout()
    init_schema(db, layout)
    emb = HashEmbedder()
    v1 = _parsed(tmp_path, DOC_V1)
    replace_document(db, layout, DocumentRecord("doc", "file:doc", "Guide", "h1"), v1.sections,
                     emb.embed_documents([s.content for s in v1.sections]))
    before = rows(db, "doc")
    v2 = _parsed(tmp_path, DOC_V2)
    assert len(v2.sections) == 4

    def fire():
        raise RuntimeError("disk on fire")
    monkeypatch.setattr("onetrip.store.section_copy_row", _failing_row_writer(2, fire))
    with statement_log.watch(db) as w, pytest.raises(RuntimeError, match="disk on fire"):
        replace_document(db, layout, DocumentRecord("doc", "file:doc", "Guide", "h2"), v2.sections,
                         emb.embed_documents([s.content for s in v2.sections]))
    sent = " ".join(w.statements)
    assert "COPY" in sent and w.statements[-1] == "ROLLBACK", w.statements  # mid-write: the document row upserted
    assert rows(db, "doc") == before
    assert db.execute("SELECT content_hash, revision FROM documents WHERE doc_id='doc'").fetchone() == ("h1", 1)
    monkeypatch.undo()
    # and after the old rows are deleted and the new ones inserted, before the commit
    import onetrip.store as store

    monkeypatch.setattr("onetrip.store._replace_changed_rows", _then(store._replace_changed_rows, fire))
    with statement_log.watch(db) as w, pytest.raises(RuntimeError, match="disk on fire"):
        replace_document(db, layout, DocumentRecord("doc", "file:doc", "Guide", "h2"), v2.sections,
                         emb.embed_documents([s.content for s in v2.sections]))
    assert [q.split()[0] for q in w.statements[-4:]] == ["DELETE", "INSERT", "DROP", "ROLLBACK"], w.statements
    assert rows(db, "doc") == before
    assert db.execute("SELECT content_hash, revision FROM documents WHERE doc_id='doc'").fetchone() == ("h1", 1)
    hits = Retriever(db).search(emb.embed_query(before[0][1]), k=3)
    assert {h.section.section_id for h in hits} <= {sid for sid, _ in before}


def _slow_reingest(dsn: str, tmp: str, ready: str) -> None:
    """Child process: start replacing the document, then stall mid-COPY until killed."""
    import onetrip.store as store

    conn = connect(dsn)
    v2 = parse_file(Path(tmp) / "v2.md")
    emb = HashEmbedder()

    def stall():
        # the old rows are deleted and the new ones inserted, uncommitted: say so atomically (the parent reads
        # the pid on sight)
        Path(ready + ".tmp").write_text(str(conn.info.backend_pid))
        os.replace(ready + ".tmp", ready)
        time.sleep(60)
    store._replace_changed_rows = _then(store._replace_changed_rows, stall)
    replace_document(conn, Layout(), DocumentRecord("doc", "file:doc", "Guide", "h2"), v2.sections,
                     emb.embed_documents([s.content for s in v2.sections]))


def test_killed_reingest_leaves_previous_revision_served(db, dsn, tmp_path):
    layout = Layout()
    init_schema(db, layout)
    emb = HashEmbedder()
    v1 = _parsed(tmp_path, DOC_V1)
    (tmp_path / "v2.md").write_text(DOC_V2)
    replace_document(db, layout, DocumentRecord("doc", "file:doc", "Guide", "h1"), v1.sections,
                     emb.embed_documents([s.content for s in v1.sections]))
    before = rows(db, "doc")
    ready = tmp_path / "ready"
    proc = mp.get_context("spawn").Process(target=_slow_reingest, args=(dsn, str(tmp_path), str(ready)))
    proc.start()
    for _ in range(600):
        if ready.exists():
            break
        time.sleep(0.05)
    assert ready.exists(), "child never reached the middle of the write"
    # Mid-transaction (its DELETE and INSERT done, and the DROP of the temporary table they read, no COMMIT):
    # readers still see the old revision in full.
    child = int(ready.read_text())
    state = db.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (child,)).fetchone()
    assert state[0] == "idle in transaction" and state[1].startswith("DROP TABLE"), state
    assert rows(db, "doc") == before
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    # The server notices the dead client and rolls back; wait for its lock to go.
    for _ in range(200):
        busy = db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0]
        if not busy:
            break
        time.sleep(0.05)
    assert rows(db, "doc") == before
    assert db.execute("SELECT revision FROM documents WHERE doc_id='doc'").fetchone()[0] == 1


def test_a_connection_lost_mid_run_stops_it_naming_the_cause_and_what_was_stored(db, dsn, tmp_path, terminate):
    """The server ends ingest's connection while it rewrites a document (mid-transaction). The
    run had gone on, failing every file left in its batch with 'the connection is closed', then ended with that
    psycopg error, its report (what was stored) lost. Now it stops at once with IngestInterruptedError naming the
    cause and the count, its report attached; the document being written keeps its previous revision whole."""
    import threading

    from onetrip import IngestInterruptedError

    init_schema(db)
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(DOC_V1)
    assert ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder()).new == 2
    before = rows(db, "b.md")
    for name in ("a.md", "b.md", "c.md", "d.md"):  # a and b changed, c and d new: one embedding batch
        (tmp_path / name).write_text(DOC_V2)
    conn, holder = connect(dsn), connect(dsn)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            ingest_paths(conn, [tmp_path], layout=Layout(), embedder=HashEmbedder())
        except BaseException as e:  # noqa: BLE001 - checked below
            outcome.append(e)

    try:
        with holder.transaction():  # b.md's documents row locked: its rewrite waits there, mid-transaction
            holder.execute("SELECT 1 FROM documents WHERE doc_id = 'b.md' FOR UPDATE")
            t = threading.Thread(target=run)
            t.start()
            deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
            while (state := db.execute("SELECT wait_event_type, query FROM pg_stat_activity WHERE pid = %s",
                                       (conn.info.backend_pid,)).fetchone())[0] != "Lock":
                assert time.monotonic() < deadline and t.is_alive(), (state, outcome)
                time.sleep(0.05)
            assert "INSERT INTO" in state[1], state
            assert terminate(pid=conn.info.backend_pid) == 1
            t.join(60)
    finally:
        holder.close()
        conn.close()
    [error] = outcome
    assert isinstance(error, IngestInterruptedError), repr(error)
    assert "lost during ingest (terminating connection due to administrator command) after 1 of 4 files" in str(error)
    assert error.report.changed == 1 and error.report.failed == []
    assert rows(db, "a.md") != rows(db, "b.md") == before  # b.md's rewrite rolled back: revision 1 whole
    assert db.execute("SELECT doc_id, revision FROM documents ORDER BY doc_id").fetchall() == [("a.md", 2),
                                                                                               ("b.md", 1)]


def test_reingest_waits_for_the_documents_lock_and_two_writers_never_interleave(db, dsn, tmp_path):
    """replace_document takes the per-document advisory lock before it reads the stored revision: a second
    writer of the same document (another re-ingest, a delete) waits for the first's transaction, and then
    reads the revision that one committed. Without the lock, two concurrent re-ingests of one document could
    both read the same stored revision and interleave their DELETEs and COPYs."""
    import threading

    layout = Layout()
    init_schema(db, layout)
    emb = HashEmbedder()
    v1, v2 = _parsed(tmp_path, DOC_V1), _parsed(tmp_path, DOC_V2)
    replace_document(db, layout, DocumentRecord("doc", "file:doc", "Guide", "h1"), v1.sections,
                     emb.embed_documents([s.content for s in v1.sections]))
    before = rows(db, "doc")
    holder, writer = connect(dsn), connect(dsn)
    result: list = []
    try:
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("doc",))  # as a writer holds it
            t = threading.Thread(target=lambda: result.append(replace_document(
                writer, layout, DocumentRecord("doc", "file:doc", "Guide", "h2"), v2.sections,
                emb.embed_documents([s.content for s in v2.sections]))))
            t.start()
            pid = writer.info.backend_pid
            row = None
            for _ in range(1200):  # until the writer is seen waiting on that lock, or has finished without it
                row = db.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone()
                if row == ("Lock", "advisory") or not t.is_alive():
                    break
                time.sleep(0.05)
            assert row == ("Lock", "advisory") and t.is_alive(), (row, result)
            assert result == [] and rows(db, "doc") == before  # nothing replaced while the lock is held
        t.join(timeout=60)
        assert not t.is_alive()
        assert [(r.outcome, r.revision) for r in result] == [("changed", 2)]
        assert rows(db, "doc") == [(s.section_id, s.content) for s in v2.sections]
    finally:
        holder.close()
        writer.close()


def test_wrong_embedding_dimension_is_refused_before_writing(db, tmp_path, statement_log):
    from onetrip import DimensionMismatchError

    init_schema(db)
    v1 = _parsed(tmp_path, DOC_V1)
    with statement_log.watch(db) as w, \
            pytest.raises(DimensionMismatchError, match="have 128 dimensions but the sections table stores vector\\(384\\)"):
        replace_document(db, Layout(), DocumentRecord("doc", "file:doc", "Guide", "h"), v1.sections,
                         np.zeros((len(v1.sections), 128), np.float32))
    assert w.statements == []  # refused before the write, not a write rolled back
    with statement_log.watch(db) as w, \
            pytest.raises(DimensionMismatchError, match="have 385 dimensions but the sections table stores vector\\(384\\)"):
        replace_document(db, Layout(), DocumentRecord("doc", "file:doc", "Guide", "h"), v1.sections,
                         np.zeros((len(v1.sections), 385), np.float32))  # longer too (a mutation review)
    assert w.statements == []
    from onetrip.errors import OnetripError

    with pytest.raises(OnetripError, match="makes 64-d vectors"):
        ingest_paths(db, [tmp_path / "doc.md"], layout=Layout(), embedder=HashEmbedder(64))


def test_section_metadata_is_stored_as_a_json_object(db, tmp_path):
    init_schema(db)
    f = tmp_path / "m.md"
    f.write_text(f"# T\n\nTiny.\n\n## A\n\nx\n\n## B\n\nBody of B.{PAD}\n")
    ingest_paths(db, [f], layout=Layout(), embedder=HashEmbedder())
    kinds = {r[0] for r in db.execute("SELECT jsonb_typeof(metadata) FROM sections")}
    assert kinds == {"object"}
    merged = db.execute("SELECT count(*) FROM sections WHERE metadata ? 'merged'").fetchone()[0]
    assert merged >= 1  # the tiny sibling 'A' was merged into 'B', and that is queryable


PARENT_SEQ_MISMATCHES = """
    SELECT count(*)
      FROM sections c
      LEFT JOIN sections p
        ON p.doc_id = c.doc_id
       AND p.section_id = c.parent_section_id
     WHERE c.parent_sequence_index IS DISTINCT FROM p.sequence_index
"""


def test_parent_sequence_index_is_the_parents_sequence_index(db, tmp_path):
    """The retrieval query finds parents by (doc_id, parent_sequence_index): it must match the tree."""
    from onetrip.synthetic import bulk_load, generate

    init_schema(db)
    f = tmp_path / "deep.md"
    f.write_text(f"# A\n\nTop.{PAD}\n\n## B\n\nMid.{PAD}\n\n### C\n\nLow.{PAD}\n\n## D\n\nMid two.{PAD}\n")
    ingest_paths(db, [f], layout=Layout(), embedder=HashEmbedder())
    bulk_load(db, Layout(), list(generate(200, seed=3)))  # the bulk loader writes the same column
    n, roots, with_parent = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE parent_section_id IS NULL), "
        "count(*) FILTER (WHERE parent_sequence_index IS NOT NULL) FROM sections").fetchone()
    assert n > 200 and 0 < roots < n and with_parent == n - roots
    assert db.execute(PARENT_SEQ_MISMATCHES).fetchone()[0] == 0
    # Deep parent: C's parent is B (not the root A).
    assert db.execute("SELECT parent_sequence_index FROM sections WHERE doc_id = 'deep.md' AND heading = 'C'"
                      ).fetchone()[0] == db.execute(
        "SELECT sequence_index FROM sections WHERE doc_id = 'deep.md' AND heading = 'B'").fetchone()[0]


def test_bulk_copy_writes_the_rows_replace_document_writes(db):
    """The bulk loader (tests, benchmarks) and ingestion must store identical rows, or benchmarks measure
    a table users never get: e.g. documents.token_count gates the `document` expansion mode."""
    from onetrip.store import copy_documents
    from onetrip.synthetic import generate

    docs = list(generate(120, seed=5))
    a, b = Layout(prefix="viacopy_"), Layout(prefix="viareplace_")
    for layout in (a, b):
        init_schema(db, layout)
    with db.transaction():
        assert copy_documents(db, a, ((d.record, d.sections, d.embeddings) for d in docs)) == 120
    for d in docs:
        replace_document(db, b, d.record, d.sections, d.embeddings)

    def dump(layout: Layout, table: str, skip: tuple[str, ...]) -> list[tuple]:
        cols = [c for (c,) in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum", (layout.prefix + table,)).fetchall() if c not in skip]
        return db.execute(f"SELECT {', '.join(cols)} FROM {layout.prefix}{table} ORDER BY 1, 2").fetchall()

    assert dump(a, "documents", ("ingested_at",)) == dump(b, "documents", ("ingested_at",))
    assert dump(a, "sections", ()) == dump(b, "sections", ())
    assert db.execute("SELECT min(token_count) FROM viacopy_documents").fetchone()[0] > 0


def test_bulk_copy_refuses_a_wrong_dimension_before_writing(db, statement_log):
    from onetrip.errors import DimensionMismatchError
    from onetrip.store import copy_documents
    from onetrip.synthetic import generate

    init_schema(db)
    good, bad = list(generate(40, seed=6)), list(generate(20, seed=7, dim=16, doc_prefix="bad"))
    with statement_log.watch(db) as w, pytest.raises(DimensionMismatchError, match="16 dimensions"):
        with db.transaction():
            copy_documents(db, Layout(), [(d.record, d.sections, d.embeddings) for d in good + bad])
    assert not [s for s in w.statements if "COPY" in s.upper()], w.statements  # refused before the first COPY
    assert db.execute("SELECT count(*) FROM sections").fetchone()[0] == 0


def test_a_document_that_fails_to_store_does_not_shift_the_next_ones_vectors(db, tmp_path, monkeypatch):
    """Documents are embedded in one batch and stored one by one: each takes its own slice of the vectors,
    whether or not the one before it was stored."""
    import onetrip.ingest as ingest
    from onetrip.ingest import embedding_text

    init_schema(db)
    for name, topic in (("a.md", "apples"), ("b.md", "bananas"), ("c.md", "cherries")):
        (tmp_path / name).write_text(f"# {topic.title()}\n\nAll about {topic}.\n\n## More\n\n{topic} again, longer.\n")
    real = ingest.replace_document

    def fail_b(conn, layout, record, *args, **kwargs):
        if record.doc_id == "b.md":
            raise ValueError("b cannot be stored")
        return real(conn, layout, record, *args, **kwargs)
    monkeypatch.setattr(ingest, "replace_document", fail_b)
    report = ingest_paths(db, sorted(tmp_path.glob("*.md")), layout=Layout(), embedder=HashEmbedder())
    assert (report.new, [p for p, _ in report.failed]) == (2, [str(tmp_path / "b.md")])
    for doc in ("a.md", "c.md"):
        parsed = parse_file(tmp_path / doc)
        want = HashEmbedder().embed_documents([embedding_text(parsed.title, s.heading_path, s.content)
                                               for s in parsed.sections])
        got = [v.to_numpy() for (v,) in db.execute(
            "SELECT embedding FROM sections WHERE doc_id = %s ORDER BY sequence_index", (doc,))]
        assert np.allclose(got, want, atol=1e-6), doc


def test_front_matter_keys_are_kept_beside_onetrips_own(db, tmp_path):
    """onetrip's metadata keys are prefixed: a file's own `format` or `parse_warnings` is neither
    overwritten by them nor read as them."""
    (tmp_path / "cut.md").write_text("---\nformat: post\nparse_warnings: none\n---\n# Cut\n\ntext\n\n```sh\nrest\n")
    (tmp_path / "whole.md").write_text("---\nparse_warnings: [mine]\n---\n# Whole\n\ntext\n")
    layout = Layout(dim=HashEmbedder().dim)
    init_schema(db, layout)
    report = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert report.new == 2 and len(report.warnings) == 1
    meta = dict(db.execute("SELECT doc_id, metadata FROM documents").fetchall())
    assert {k: meta["cut.md"][k] for k in ("format", "parse_warnings", "onetrip_format")} == {
        "format": "post", "parse_warnings": "none", "onetrip_format": "markdown"}
    assert meta["cut.md"]["onetrip_parse_warnings"] == [report.warnings[0][1]]
    assert meta["whole.md"]["parse_warnings"] == ["mine"] and "onetrip_parse_warnings" not in meta["whole.md"]
    from onetrip import list_documents

    listed = {d.doc_id: d.parse_warnings for d in list_documents(db, layout)}
    assert listed == {"cut.md": (report.warnings[0][1],), "whole.md": ()}


def test_front_matter_keys_of_onetrips_prefix_are_dropped_with_a_warning(db, tmp_path):
    """Found by review: `onetrip_parse_warnings` in a file's front matter showed as that file's warnings
    (`onetrip documents`), and `onetrip_embedder` was overwritten without a word, though store.EMBEDDER_KEY's
    comment says the prefix keeps a document's own metadata from being read as onetrip's or overwritten."""
    (tmp_path / "fm.md").write_text("---\nonetrip_parse_warnings: [fake]\nonetrip_embedder: mine\nteam: a\n---\n"
                                    "# Doc\n\ntext\n")
    layout = Layout(dim=HashEmbedder().dim)
    init_schema(db, layout)
    report = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert report.new == 1 and not report.failed
    assert [w for _, w in report.warnings] == [
        "metadata key 'onetrip_embedder' dropped: the onetrip_ prefix is onetrip's own",
        "metadata key 'onetrip_parse_warnings' dropped: the onetrip_ prefix is onetrip's own"]
    (meta,) = db.execute("SELECT metadata FROM documents").fetchone()
    assert meta["team"] == "a" and meta["onetrip_embedder"] == HashEmbedder().name
    assert meta["onetrip_parse_warnings"] == [w for _, w in report.warnings]
    from onetrip import list_documents

    assert "fake" not in " ".join(list_documents(db, layout)[0].parse_warnings)


def test_a_truncated_file_is_stored_and_its_loss_reported(db, dsn, tmp_path):
    """Stored as CommonMark and lxml read it (nothing fails), but the report, the CLI and the document name it."""
    from .test_cli import onetrip

    (tmp_path / "cut.md").write_text(DOC_V1 + "\n```sh\nonetrip init\n\n## Lost heading\n")
    (tmp_path / "whole.md").write_text(DOC_V2)
    layout = Layout(dim=HashEmbedder().dim)
    init_schema(db, layout)
    report = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert report.new == 2 and not report.failed
    assert len(report.warnings) == 1 and report.warnings[0][0].endswith("cut.md")
    assert "never closed" in report.warnings[0][1] and "1 of them heading lines" in report.warnings[0][1]
    assert report.as_dict()["warnings"] == [{"path": report.warnings[0][0], "warning": report.warnings[0][1]}]
    meta = dict(db.execute("SELECT doc_id, metadata->'onetrip_parse_warnings' FROM documents").fetchall())
    assert meta == {"cut.md": [report.warnings[0][1]], "whole.md": None}
    assert rows(db, "cut.md")[-1][1].endswith("## Lost heading")  # stored as it was read: inside the code
    from onetrip import list_documents

    listed = {d.doc_id: d.parse_warnings for d in list_documents(db, layout)}
    assert listed == {"cut.md": (report.warnings[0][1],), "whole.md": ()}

    (tmp_path / "whole.md").unlink()
    res = onetrip("ingest", str(tmp_path), "--prefix", "cut_", dsn=dsn)  # the bundled model: tables of its own
    assert res.returncode == 0, res.stderr
    assert f"onetrip: warning: {tmp_path / 'cut.md'}: the code fence (```) opened at line 13 is never closed" in res.stderr
    listing = onetrip("documents", "--prefix", "cut_", dsn=dsn)
    assert listing.returncode == 0 and "cut.md\t" in listing.stdout
    assert "\twarning: the code fence (```) opened at line 13 is never closed" in listing.stdout
    as_json = json.loads(onetrip("documents", "--prefix", "cut_", "--json", dsn=dsn).stdout)
    assert as_json[0]["parse_warnings"][0].startswith("the code fence (```) opened at line 13")


MERGING_DOC = (f"# Machine\n\nAbout the machine.{PAD}\n\n## Daily cleaning\n\nRinse it.\n\n"
               f"## Descaling\n\nDescale every 3 months.{PAD}\n")


def test_an_unchanged_file_cut_by_another_onetrip_is_cut_again(db, tmp_path, monkeypatch):
    """After an upgrade that cuts files differently (SECTIONING), a plain ingest re-cuts the documents an older
    onetrip stored, and only those: their merged section had kept its last part's heading until --force."""
    import onetrip.ingest as ingest_module
    from onetrip.sections import SECTIONING
    from onetrip.store import SECTIONING_KEY

    layout = init_schema(db)
    (tmp_path / "machine.md").write_text(MERGING_DOC)
    (tmp_path / "guide.md").write_text(DOC_V1)
    emb = CountingEmbedder()
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=emb).new == 2

    def paths() -> list:
        return [p for (p,) in db.execute("SELECT heading_path FROM sections WHERE doc_id = 'machine.md' "
                                         "ORDER BY sequence_index")]

    assert paths() == [["Machine"], ["Machine", "Daily cleaning; Descaling"]]
    assert db.execute("SELECT metadata ->> %s FROM documents WHERE doc_id = 'machine.md'",
                      (SECTIONING_KEY,)).fetchone() == (str(SECTIONING),)
    # as an onetrip before 2026-12-05 stored it: the old label, no sectioning recorded
    db.execute("UPDATE sections SET heading_path = ARRAY['Machine', 'Descaling'], heading = 'Descaling' "
               "WHERE doc_id = 'machine.md' AND sequence_index = 1")
    db.execute("UPDATE documents SET metadata = metadata - %s WHERE doc_id = 'machine.md'", (SECTIONING_KEY,))
    before = emb.embedded
    again = ingest_paths(db, [tmp_path], layout=layout, embedder=emb)
    assert (again.new, again.changed, again.recut, again.unchanged) == (0, 1, 1, 1)
    # the re-cut document's relabelled section, not the other document's: its first section's text is as
    # stored, so its stored vector is kept (reused)
    assert (emb.embedded - before, again.reused) == (1, 1)
    assert paths() == [["Machine"], ["Machine", "Daily cleaning; Descaling"]]
    assert db.execute("SELECT revision FROM documents WHERE doc_id = 'machine.md'").fetchone() == (2,)
    assert again.as_dict()["recut"] == 1
    # nothing more to do: both unchanged
    assert (lambda r: (r.changed, r.recut, r.unchanged))(ingest_paths(db, [tmp_path], layout=layout,
                                                                      embedder=emb)) == (0, 0, 2)
    # the next change of sectioning re-cuts both; --force re-cuts too, but is not counted as a re-cut
    monkeypatch.setattr(ingest_module, "SECTIONING", SECTIONING + 1)
    bumped = ingest_paths(db, [tmp_path], layout=layout, embedder=emb)
    assert (bumped.changed, bumped.recut) == (2, 2)
    forced = ingest_paths(db, [tmp_path], layout=layout, embedder=emb, force=True)
    assert (forced.changed, forced.recut) == (2, 0)
    # an older onetrip leaves what a newer one cut as it is (else the two would undo each other on every run)
    monkeypatch.setattr(ingest_module, "SECTIONING", SECTIONING)
    before = emb.embedded
    older = ingest_paths(db, [tmp_path], layout=layout, embedder=emb)
    assert (older.changed, older.recut, older.unchanged, emb.embedded - before) == (0, 0, 2, 0)
    assert db.execute("SELECT DISTINCT metadata ->> %s FROM documents", (SECTIONING_KEY,)).fetchall() == [
        (str(SECTIONING + 1),)]
    # a mark that is not a number counts as older
    db.execute("UPDATE documents SET metadata = jsonb_set(metadata, %s, '\"2b\"') WHERE doc_id = 'machine.md'",
               ([SECTIONING_KEY],))
    assert (lambda r: (r.changed, r.recut))(ingest_paths(db, [tmp_path], layout=layout, embedder=emb)) == (1, 1)
    # so does a number with no onetrip_embedding_text beside it: a file's own front matter key, stored as written
    # before onetrip wrote its own over it (found by the upgrade review: `onetrip_sectioning: 8` had kept that
    # document's old cut for good), with or without onetrip_format beside it (onetrip wrote that key earlier)
    for dropped in ("onetrip_format", "onetrip_embedding_text"):
        db.execute("UPDATE documents SET metadata = metadata - 'onetrip_embedding_text' - %s::text "
                   "|| jsonb_build_object(%s::text, 99) WHERE doc_id = 'machine.md'", (dropped, SECTIONING_KEY))
        assert (lambda r: (r.changed, r.recut))(ingest_paths(db, [tmp_path], layout=layout, embedder=emb)) == \
            (1, 1), dropped
        assert db.execute("SELECT metadata ->> %s, metadata ->> 'onetrip_format' FROM documents "
                          "WHERE doc_id = 'machine.md'", (SECTIONING_KEY,)).fetchone() == (str(SECTIONING), "markdown")


@pytest.mark.parametrize("vector_type", ["vector", "halfvec"])
def test_a_changed_document_embeds_only_the_sections_whose_text_changed(db, tmp_path, vector_type):
    """An edited page had every section embedded again, though most kept their text (the model is ~90% of an
    ingest's time). A section whose text (document title, heading path, content: `embedding_text`) is as stored
    keeps its stored vector; only the others are embedded. Not under --force (a model's weights changed under
    its name), not from documents ingest did not store with this model and this EMBEDDING_TEXT."""
    from onetrip.ingest import EMBEDDING_TEXT, embedding_text
    from onetrip.store import EMBEDDING_TEXT_KEY

    layout = init_schema(db, Layout(vector_type=vector_type))
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    emb = CountingEmbedder()
    first = ingest_paths(db, [f], layout=layout, embedder=emb)
    assert (first.new, first.reused, emb.embedded) == (1, 0, 3)
    assert db.execute("SELECT metadata ->> %s FROM documents", (EMBEDDING_TEXT_KEY,)).fetchone() == (
        str(EMBEDDING_TEXT),)

    def vectors() -> dict[str, str]:
        return dict(db.execute("SELECT content, embedding::text FROM sections WHERE doc_id = 'guide.md'"))

    stored = vectors()
    # one section's text changes: it alone is embedded; the two others keep their vectors, byte for byte
    f.write_text(DOC_V1.replace("Run it daily.", "Run it weekly."))
    edited = ingest_paths(db, [f], layout=layout, embedder=emb)
    assert (edited.changed, edited.sections, edited.reused, emb.embedded) == (1, 3, 2, 4)
    assert edited.as_dict()["reused"] == 2  # onetrip ingest --json
    now = vectors()
    assert {c: v for c, v in now.items() if c in stored} == {c: v for c, v in stored.items() if c in now}
    (new_content,) = set(now) - set(stored)
    assert new_content.startswith("Run it weekly.")
    title, path = db.execute("SELECT d.title, s.heading_path FROM sections s JOIN documents d USING (doc_id) "
                             "WHERE s.content = %s", (new_content,)).fetchone()
    want = HashEmbedder().embed_documents([embedding_text(title, path, new_content)])[0]
    got = np.array(json.loads(now[new_content]), dtype=np.float32)
    assert np.allclose(got, want, atol=1e-3 if vector_type == "halfvec" else 1e-6)  # halfvec: 16-bit floats
    # the same search finds the edited section by its new vector
    with Retriever(db, embedder=HashEmbedder()) as r:
        assert r.search(want, k=1)[0].section.content == new_content
    # another title changes every section's text: all embedded again
    f.write_text(DOC_V1.replace("Run it daily.", "Run it weekly.").replace("# Guide", "# Handbook"))
    retitled = ingest_paths(db, [f], layout=layout, embedder=emb)
    assert (retitled.changed, retitled.reused, emb.embedded) == (1, 0, 7)
    # --force embeds everything (a model's weights changed under its name)
    forced = ingest_paths(db, [f], layout=layout, embedder=emb, force=True)
    assert (forced.changed, forced.reused, emb.embedded) == (1, 0, 10)
    # stored under another EMBEDDING_TEXT, or not by ingest with this model: nothing is reused
    for change in (f"metadata || jsonb_build_object('{EMBEDDING_TEXT_KEY}', '{EMBEDDING_TEXT + 1}')",
                   "metadata - 'onetrip_embedder'"):
        db.execute(f"UPDATE documents SET metadata = {change}")
        f.write_text(f.read_text() + "\n## More\n\nAnother section." + PAD + "\n")
        before = emb.embedded
        other = ingest_paths(db, [f], layout=layout, embedder=emb)
        assert (other.changed, other.reused, emb.embedded - before) == (1, 0, other.sections)


def test_a_stored_vector_is_reused_only_under_the_same_probe(db, tmp_path):
    """A document stored before the probe was recorded (2026-12-05) lent its vectors to the re-cut that the
    upgrade itself brings: a model of the same name but other weights (a fine-tune saved as 'model') kept the old
    model's vectors and recorded its own probe over them, which check_probe then took for its own. Such a
    document lends none; one whose probe is this model's, within PROBE_TOLERANCE, does."""
    from onetrip.ingest import embedding_text
    from onetrip.store import EMBEDDER_PROBE_KEY, SECTIONING_KEY

    class Weights(CountingEmbedder):
        name = "model"

        def __init__(self, salt: str) -> None:
            super().__init__()
            self.salt = salt

        def _one(self, text: str) -> np.ndarray:
            return super()._one(self.salt + text)

    layout = init_schema(db)
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    assert ingest_paths(db, [f], layout=layout, embedder=Weights("old")).new == 1
    # its probe nudged within the tolerance (another CPU's rounding): the same model, its vectors kept
    db.execute("UPDATE documents SET metadata = jsonb_set(metadata - %s, %s, to_jsonb(((metadata -> %s ->> 0)"
               "::float8 + 1e-4)))", (SECTIONING_KEY, [EMBEDDER_PROBE_KEY, "0"], EMBEDDER_PROBE_KEY))
    same = ingest_paths(db, [f], layout=layout, embedder=Weights("old"))
    assert (same.recut, same.reused) == (1, 3)
    # as an onetrip before 2026-12-05 stored it (no probe, no sectioning); the folder now holds other weights
    db.execute("UPDATE documents SET metadata = metadata - %s - %s", (EMBEDDER_PROBE_KEY, SECTIONING_KEY))
    new = Weights("new")
    recut = ingest_paths(db, [f], layout=layout, embedder=new)
    assert (recut.recut, recut.reused, new.embedded) == (1, 0, 3)
    for title, path, content, vec in db.execute("SELECT d.title, s.heading_path, s.content, s.embedding::text "
                                                "FROM sections s JOIN documents d USING (doc_id)"):
        want = new.embed_documents([embedding_text(title, path, content)])[0]
        assert np.allclose(np.array(json.loads(vec), dtype=np.float32), want, atol=1e-6)


def test_a_document_stored_without_an_embedding_text_version_lends_its_vectors(db, tmp_path):
    """No onetrip_embedding_text on a document means version 1 (EMBEDDING_TEXT), the way every onetrip had put a
    section's text to the model before it recorded the version: such a document, recorded with this model's
    probe, lends its vectors to the sections whose text is unchanged."""
    from onetrip.ingest import EMBEDDING_TEXT
    from onetrip.store import EMBEDDING_TEXT_KEY

    layout = init_schema(db)
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    assert ingest_paths(db, [f], layout=layout, embedder=HashEmbedder()).new == 1
    db.execute("UPDATE documents SET metadata = metadata - %s", (EMBEDDING_TEXT_KEY,))
    f.write_text(DOC_V1.replace("Run it daily.", "Run it weekly."))
    emb = CountingEmbedder()
    edited = ingest_paths(db, [f], layout=layout, embedder=emb)
    assert (edited.changed, edited.reused, emb.embedded) == ((1, 2, 1) if EMBEDDING_TEXT == 1 else (1, 0, 3))


def test_an_html_page_stored_before_the_open_paragraph_heading_fix_is_cut_again(db, tmp_path):
    """SECTIONING 3 came with parse_html reading a heading that lxml nests in a paragraph left open
    (<p>x <b>y<h2>H) as a heading; an onetrip of SECTIONING 2 had cut such a page with that heading's section
    lost into the one before. A page stored under 2 is older, so a plain ingest cuts it again."""
    from onetrip.store import SECTIONING_KEY

    layout = init_schema(db)
    page = tmp_path / "page.html"
    page.write_text(f'<h1 id="t">Title</h1><p>Intro {PAD} <b>bold<h2 id="s">Second heading</h2><p>Its text.{PAD}</p>')
    assert ingest_paths(db, [page], layout=layout, embedder=HashEmbedder()).new == 1
    assert [h for (h,) in db.execute("SELECT heading FROM sections ORDER BY sequence_index")] == [
        "Title", "Second heading"]
    db.execute("UPDATE documents SET metadata = jsonb_set(metadata, %s, '2')", ([SECTIONING_KEY],))
    again = ingest_paths(db, [page], layout=layout, embedder=HashEmbedder())
    assert (again.changed, again.recut) == (1, 1)


def test_cli_summary_says_why_unchanged_files_were_embedded_again(dsn, tmp_path):
    from .test_cli import onetrip

    (tmp_path / "machine.md").write_text(MERGING_DOC)
    first = onetrip("ingest", "--prefix", "recut_", str(tmp_path), dsn=dsn)
    assert first.returncode == 0, first.stderr
    with connect(dsn) as conn:
        conn.execute("UPDATE recut_documents SET metadata = metadata - 'onetrip_sectioning'")
    again = onetrip("ingest", "--prefix", "recut_", str(tmp_path), dsn=dsn)
    assert again.returncode == 0, again.stderr
    assert "0 new, 1 changed (1 re-cut: stored by an onetrip that cut files differently)" in again.stdout
    # only the mark was taken away: both sections' texts are as stored, their vectors kept, and the summary says so
    assert "2 sections in " in again.stdout and "(2 kept their stored vector; " in again.stdout, again.stdout


def test_a_stored_document_whose_file_now_fails_says_the_stored_revision_is_kept(db, tmp_path, monkeypatch):
    """A failure of a document already stored names what a search still finds: the revision stored before."""
    import onetrip.ingest as ingest_module
    from onetrip.errors import InputDocumentError

    layout = init_schema(db)
    f = tmp_path / "guide.md"
    f.write_text(DOC_V1)
    assert ingest_paths(db, [f], layout=layout, embedder=HashEmbedder()).new == 1
    stored = rows(db, "guide.md")
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR" * 10)  # the file changed into something unreadable
    (fresh := tmp_path / "fresh.md").write_bytes(b"")  # ... and a new file that fails says nothing of the kind
    bad = ingest_paths(db, [f, fresh], layout=layout, embedder=HashEmbedder())
    failed = dict(bad.failed)
    assert "binary" in failed[str(f)] and failed[str(f)].endswith("; the revision stored before stays searchable")
    assert "stays" not in failed[str(fresh)]
    assert rows(db, "guide.md") == stored
    # the same with --force, which embeds every file again: only the stored one is said to stay
    forced = dict(ingest_paths(db, [f, fresh], layout=layout, embedder=HashEmbedder(), force=True).failed)
    assert forced[str(f)].endswith("; the revision stored before stays searchable")
    assert "stays" not in forced[str(fresh)], forced[str(fresh)]
    assert rows(db, "guide.md") == stored
    # an unchanged file stored by an onetrip that cut files differently, which this one's parser refuses
    f.write_text(DOC_V1)
    db.execute("UPDATE documents SET metadata = metadata - 'onetrip_sectioning'")

    def refuse(path, **kwargs):
        raise InputDocumentError(str(path), "refused by this parser")

    monkeypatch.setattr(ingest_module, "parse_file", refuse)
    old = ingest_paths(db, [f], layout=layout, embedder=HashEmbedder())
    assert old.failed == [(str(f), "refused by this parser; the revision an older onetrip stored stays searchable, "
                                   "cut as it cut it")]
    assert rows(db, "guide.md") == stored


def test_a_new_revision_leaves_its_unchanged_rows_in_place_and_archives_each_revision_whole(db, tmp_path):
    """Found by review: every revision rewrote all of a document's rows, so each put one more copy of every
    unchanged section's vector into the HNSW index; a 4-section file re-ingested 600 times (no VACUUM between)
    made dense searches matching it return 1 hit of 4. A row equal to its new one but for revision is now left
    as it is (its xmin shows it: no new row version, no new index entry); the archive labels every row of a
    superseded revision with that revision, kept rows too."""
    init_schema(db)
    doc = tmp_path / "a.md"
    edits = [DOC_V1, DOC_V1.replace("Run it daily.", "Run it hourly."), DOC_V1.replace("Run it daily.", "Run it.")]

    def stored() -> dict[str, tuple]:
        return {sid: (rev, xmin) for sid, rev, xmin in db.execute(
            "SELECT section_id, revision, xmin::text FROM sections WHERE doc_id = 'a.md'").fetchall()}

    states = []
    for text in edits:
        doc.write_text(text)
        ingest_paths(db, [doc], layout=Layout(), embedder=HashEmbedder(), keep_history=True)
        states.append(stored())
    assert set(states[0]) == set(states[2]) == {"guide", "setup", "use"}
    assert states[2]["guide"] == states[1]["guide"] == states[0]["guide"]  # the same row version throughout
    assert states[2]["setup"] == states[0]["setup"] and states[0]["setup"][0] == 1
    assert [states[i]["use"][0] for i in range(3)] == [1, 2, 3]  # rewritten each time, at its revision
    history = db.execute("SELECT revision, section_id, content FROM section_history ORDER BY 1, 2").fetchall()
    assert [(r, s) for r, s, _ in history] == [(1, "guide"), (1, "setup"), (1, "use"),
                                               (2, "guide"), (2, "setup"), (2, "use")]
    assert "hourly" in history[5][2] and "daily" in history[2][2]
    # a move is a change: a section inserted before the others rewrites the rows whose place moved
    doc.write_text(DOC_V1.replace("## Setup", "## Before\n\nA new first step." + PAD + "\n\n## Setup"))
    ingest_paths(db, [doc], layout=Layout(), embedder=HashEmbedder())
    after = stored()
    assert after["guide"] == states[2]["guide"] and {after[s][0] for s in ("before", "setup", "use")} == {4}


def test_a_role_without_temp_re_ingests_by_rewriting_the_rows(db, dsn, tmp_path, monkeypatch):
    """A review of the kept-rows change: a writing role that may not create temporary tables (REVOKE TEMPORARY
    ON DATABASE) failed every re-ingest with 'permission denied to create temporary tables'; it now rewrites
    the document's rows, as before that change (the privilege is read with the documents row: no statement)."""
    import uuid

    init_schema(db)
    doc = tmp_path / "a.md"
    doc.write_text(DOC_V1)
    role = f"writer_{uuid.uuid4().hex[:8]}"
    database = db.info.dbname
    db.execute(f"CREATE ROLE {role}")
    db.execute(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
    try:
        db.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        with connect(dsn) as conn:
            conn.execute(f"SET ROLE {role}")
            assert ingest_paths(conn, [doc], layout=Layout(), embedder=HashEmbedder()).new == 1
            guide = db.execute("SELECT xmin::text FROM sections WHERE section_id = 'guide'").fetchone()
            doc.write_text(DOC_V1.replace("Run it daily.", "Run it hourly."))
            report = ingest_paths(conn, [doc], layout=Layout(), embedder=HashEmbedder())
            assert (report.changed, report.failed) == (1, []), report.failed
            # and it is atomic: a write failing mid-COPY leaves the stored revision whole (a mutation review: a
            # COMMIT after this path's DELETE passed every test)
            stored = rows(db, "a.md")

            def fire():
                raise RuntimeError("disk on fire")
            monkeypatch.setattr("onetrip.store.section_copy_row", _failing_row_writer(1, fire))
            doc.write_text(DOC_V2)
            with pytest.raises(RuntimeError, match="disk on fire"):
                ingest_paths(conn, [doc], layout=Layout(), embedder=HashEmbedder())
            monkeypatch.undo()
            assert rows(db, "a.md") == stored
            assert db.execute("SELECT revision FROM documents WHERE doc_id = 'a.md'").fetchone() == (2,)
        assert db.execute("SELECT xmin::text FROM sections WHERE section_id = 'guide'").fetchone() != guide
        assert [c for _, c in rows(db, "a.md") if "hourly" in c]
    finally:
        db.execute(f'GRANT TEMPORARY ON DATABASE "{database}" TO PUBLIC')
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


def test_re_ingests_of_two_documents_in_one_transaction_of_the_callers_are_both_stored(db):
    """Found by review: `replace_document` called twice inside one transaction of the caller's (two documents'
    new revisions together, or one document twice) failed the second time with DuplicateTable: the temporary
    table the kept-rows compare goes through was dropped only at commit."""
    from onetrip.sections import Section

    layout = init_schema(db, Layout(dim=4))
    vec = np.array([[1, 0, 0, 0]], dtype=np.float32)

    def store(doc_id: str, text: str):
        section = [Section("s0", None, 0, 1, "H", ("H",), text, 3, None)]
        return replace_document(db, layout, DocumentRecord(doc_id, f"file:///{doc_id}", "T", text), section, vec)

    for doc_id in ("a.md", "b.md"):
        store(doc_id, "one")
    with db.transaction():
        assert [store(d, t).outcome for d, t in (("a.md", "two"), ("b.md", "two"), ("a.md", "three"))] \
            == ["changed"] * 3
    assert sorted(db.execute("SELECT doc_id, content FROM sections").fetchall()) == [("a.md", "three"),
                                                                                     ("b.md", "two")]
