"""What ingest refuses or reports instead of losing data silently (found by a bad-input sweep).

Two files for one doc_id, a string where a list belongs, a FIFO, a zero embedding,
an audit trail that restarted at revision 1, a database error in the CLI.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import psycopg
import pytest

from onetrip import Retriever, init_schema
from onetrip.errors import InputDocumentError
from onetrip.ingest import ingest_paths
from onetrip.sections import parse_file
from onetrip.store import DocumentRecord, delete_document, list_documents, replace_document
from onetrip.layout import Layout

from .embedders import HashEmbedder
from .test_cli import onetrip

PAD = " This sentence pads the section so that it is not merged away as a tiny one."


def _doc(text: str) -> str:
    return f"# Handbook\n\n{text}{PAD}\n\n## Leave\n\nLeave rules of {text}.{PAD}\n"


def _parsed(tmp_path, name: str, text: str):
    """A file written, parsed, and its sections embedded: what a direct `replace_document` call needs."""
    path = tmp_path / name
    path.write_text(text)
    parsed = parse_file(path)
    return path, parsed, HashEmbedder().embed_documents([s.content for s in parsed.sections])


def _tenants(tmp_path):
    for tenant in ("tenantA", "tenantB"):
        (tmp_path / tenant).mkdir()
        (tmp_path / tenant / "handbook.md").write_text(_doc(f"the handbook of {tenant}"))
    return tmp_path / "tenantA" / "handbook.md", tmp_path / "tenantB" / "handbook.md"


def test_two_files_for_one_doc_id_are_refused_before_any_write(db, tmp_path):
    a, b = _tenants(tmp_path)
    init_schema(db)
    with pytest.raises(InputDocumentError, match="would be stored as document 'handbook.md', as .*tenantA/handbook.md"
                                                 " is.*--doc-id-prefix"):
        ingest_paths(db, [a, b], layout=Layout(), embedder=HashEmbedder())
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 0
    # the same file twice (a folder and a file in it) is one document, not a conflict
    report = ingest_paths(db, [tmp_path / "tenantA", a], layout=Layout(), embedder=HashEmbedder())
    assert (report.documents, report.new) == (1, 1)
    from onetrip.ingest import plan_files

    assert [p[2] for p in plan_files([tmp_path])] == ["tenantA/handbook.md", "tenantB/handbook.md"]
    # two missing files of one name are each reported missing (by ingest), not refused as a conflict
    assert [p[2] for p in plan_files([tmp_path / "x" / "a.md", tmp_path / "y" / "a.md"])] == ["a.md", "a.md"]


def test_a_link_to_a_file_outside_the_folder_is_named_by_its_own_path(tmp_path):
    """Found by review: a symbolic link whose target lay outside the folder given got the bare file name as
    its id ('link.md', not 'sub/link.md'), so two such links of one name in two subfolders were refused,
    with a message saying to ingest their common folder, which is what had been done."""
    from onetrip.ingest import plan_files

    outside, corpus = tmp_path / "outside", tmp_path / "corpus"
    for d in (outside, corpus / "a", corpus / "b", corpus / "c"):
        d.mkdir(parents=True)
    (outside / "x.md").write_text("# X\n\nx\n")
    (outside / "y.md").write_text("# Y\n\ny\n")
    (corpus / "a" / "link.md").symlink_to(outside / "x.md")
    (corpus / "b" / "link.md").symlink_to(outside / "y.md")
    (corpus / "c" / "in.md").write_text("# In\n\ni\n")
    (corpus / "c" / "alias.md").symlink_to(corpus / "c" / "in.md")  # inside: one document, as before
    assert sorted(p[2] for p in plan_files([corpus])) == ["a/link.md", "b/link.md", "c/in.md"]


def test_a_document_moved_to_another_collection_is_reported(db, tmp_path):
    """Tenant B's file of the same relative path had replaced tenant A's document, counted as 'changed'."""
    init_schema(db)
    _tenants(tmp_path)
    ingest_paths(db, [tmp_path / "tenantA"], layout=Layout(), embedder=HashEmbedder(), collection="a",
                 acl=("team-a",))
    report = ingest_paths(db, [tmp_path / "tenantB"], layout=Layout(), embedder=HashEmbedder(), collection="b",
                          acl=("team-b",))
    assert report.moved == [(str(tmp_path / "tenantB" / "handbook.md"), "a")]
    assert report.as_dict()["moved"] == [{"path": str(tmp_path / "tenantB" / "handbook.md"), "from_collection": "a"}]
    # an unchanged file moved by collection alone (no re-embedding) is reported too
    report = ingest_paths(db, [tmp_path / "tenantB"], layout=Layout(), embedder=HashEmbedder(), collection="c",
                          acl=("team-b",))
    assert report.access_only == 1 and report.moved == [(str(tmp_path / "tenantB" / "handbook.md"), "b")]
    # with a prefix per tenant both stay
    for tenant in ("tenantA", "tenantB"):
        ingest_paths(db, [tmp_path / tenant], layout=Layout(), embedder=HashEmbedder(), collection=tenant,
                     doc_id=lambda path, root, t=tenant: f"{t}/{path.name}")
    assert {d.doc_id: d.collection for d in list_documents(db, Layout())} == {
        "handbook.md": "c", "tenantA/handbook.md": "tenantA", "tenantB/handbook.md": "tenantB"}


def test_a_file_replacing_a_document_stored_from_another_file_still_there_is_reported(db, tmp_path):
    """Found by review: tenant B's handbook.md, ingested alone in a later run of the same collection, replaced
    tenant A's document (same id: the file's name) as an ordinary edit, with nothing said. A file that was
    moved (the old one is gone) is the same document and is not reported."""
    a, b = _tenants(tmp_path)
    init_schema(db)
    ingest_paths(db, [a], layout=Layout(), embedder=HashEmbedder())
    report = ingest_paths(db, [b], layout=Layout(), embedder=HashEmbedder())
    assert report.changed == 1 and report.replaced == [(str(b), str(a.resolve()))]
    assert report.as_dict()["replaced"] == [{"path": str(b), "other_file": str(a.resolve())}]
    moved = tmp_path / "tenantC" / "handbook.md"
    moved.parent.mkdir()
    b.rename(moved)
    moved.write_text(_doc("an edited handbook"))
    report = ingest_paths(db, [moved], layout=Layout(), embedder=HashEmbedder())
    assert (report.changed, report.replaced) == (1, [])


def test_documents_whose_files_left_a_folder_are_listed_and_deleted_on_request(db, tmp_path):
    """Found by review: a renamed, moved or deleted file left its document stored and searchable, and a second
    run said nothing of it (a rename is a new id: the old text was found twice, once under a path that is gone).
    Only documents this run's ids would name are its to report: another id scheme's stay as they are."""
    docs = tmp_path / "docs"
    (docs / "a").mkdir(parents=True)
    for name, text in (("a/zebra.md", "zebras gallop"), ("lion.md", "lions rest"), ("keep.md", "kept text")):
        (docs / name).write_text(_doc(text))
    init_schema(db)
    emb = HashEmbedder()
    ingest_paths(db, [docs], layout=Layout(), embedder=emb)
    ingest_paths(db, [docs], layout=Layout(), embedder=emb, doc_id=lambda p, r: "t/" + p.relative_to(r).as_posix())
    (docs / "a" / "zebra.md").rename(docs / "a" / "zebra-renamed.md")
    (docs / "lion.md").unlink()
    (docs / "lion.html").write_text("<h1>Lion</h1><p>Lions rest.</p>")
    report = ingest_paths(db, [docs], layout=Layout(), embedder=emb)
    gone = [("a/zebra.md", str((docs / "a" / "zebra.md").resolve())), ("lion.md", str((docs / "lion.md").resolve()))]
    assert (report.new, report.gone, report.deleted) == (2, gone, [])
    stored = {d.doc_id for d in list_documents(db, Layout())}
    assert {"a/zebra.md", "lion.md", "t/a/zebra.md", "t/lion.md"} <= stored  # listed, not deleted
    assert ingest_paths(db, [docs / "keep.md"], layout=Layout(), embedder=emb).gone == []  # a file: no folder
    report = ingest_paths(db, [docs], layout=Layout(), embedder=emb, delete_missing=True, keep_history=True)
    assert (report.unchanged, report.gone, report.deleted) == (3, gone, ["a/zebra.md", "lion.md"])
    assert report.recounted  # the deleted sections' words no longer count
    assert {d.doc_id for d in list_documents(db, Layout())} == stored - {"a/zebra.md", "lion.md"}
    assert db.execute("SELECT count(DISTINCT doc_id) FROM section_history").fetchone()[0] == 2  # archived first
    assert ingest_paths(db, [docs], layout=Layout(), embedder=emb, delete_missing=True).gone == []


def test_delete_document_with_a_source_deletes_only_a_document_still_stored_from_it(db, tmp_path):
    a, b = _tenants(tmp_path)
    init_schema(db)
    ingest_paths(db, [a], layout=Layout(), embedder=HashEmbedder())
    assert not delete_document(db, Layout(), "handbook.md", source_uri=b.resolve().as_uri())
    assert delete_document(db, Layout(), "handbook.md", source_uri=a.resolve().as_uri())
    assert list_documents(db, Layout()) == []


def test_a_delete_by_source_waits_for_a_move_of_that_document_and_keeps_it(db, dsn, tmp_path):
    """Found by review: `--delete-missing` read the stored path, then deleted by doc_id alone; another run moving
    the document to a file that exists (`set_document_source`, which takes no document lock) could commit in
    between, and its document was deleted. The delete now reads the path with the row locked."""
    from onetrip.store import set_document_source

    a, b = _tenants(tmp_path)
    init_schema(db)
    ingest_paths(db, [a], layout=Layout(), embedder=HashEmbedder())
    digest = db.execute("SELECT content_hash FROM documents WHERE doc_id = 'handbook.md'").fetchone()[0]
    result: list[object] = []
    with psycopg.connect(dsn) as mover:  # another run, its move not yet committed
        assert set_document_source(mover, Layout(), "handbook.md", digest, b.resolve().as_uri())

        def delete() -> None:
            with psycopg.connect(dsn, autocommit=True) as deleter:
                result.append(deleter.info.backend_pid)
                result.append(delete_document(deleter, Layout(), "handbook.md", source_uri=a.resolve().as_uri()))

        worker = threading.Thread(target=delete)
        worker.start()
        waiting = "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s"
        for _ in range(6000):  # until the delete waits on the moved row (a guard against hanging, not a timing)
            if result and db.execute(waiting, (result[0],)).fetchone() == ("Lock",):
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the delete never waited on the row being moved")
        mover.commit()
    worker.join(60)
    assert result[1:] == [False]  # it had returned True and deleted the moved document
    assert [d.source_uri for d in list_documents(db, Layout())] == [b.resolve().as_uri()]


def test_a_document_another_writer_deleted_is_not_called_stored_again(db, tmp_path, monkeypatch, capsys):
    """Found by review: a gone file's document that another writer deleted before --delete-missing came to it
    was listed as "stored again from another file meanwhile, so not deleted"."""
    import onetrip.ingest
    from onetrip.cli import _print_gone

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "f5.md").write_text(_doc("five"))
    init_schema(db)
    ingest_paths(db, [docs], layout=Layout(), embedder=HashEmbedder())
    (docs / "f5.md").unlink()
    real = onetrip.ingest.delete_document

    def deleted_first(conn, layout, doc_id, **kw):  # another writer (`onetrip delete`) comes first
        assert delete_document(conn, layout, doc_id)
        return real(conn, layout, doc_id, **kw)

    monkeypatch.setattr(onetrip.ingest, "delete_document", deleted_first)
    report = ingest_paths(db, [docs], layout=Layout(), embedder=HashEmbedder(), delete_missing=True)
    assert (report.deleted, report.deleted_elsewhere) == ([], ["f5.md"])
    assert report.as_dict()["deleted_elsewhere"] == ["f5.md"]
    _print_gone(report, True)
    err = capsys.readouterr().err
    assert "1 document whose files are gone had been deleted by another writer meanwhile" in err, err
    assert "deleted meanwhile: f5.md" in err and "stored again" not in err, err


def test_cli_names_files_gone_and_replaced_documents(dsn, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "old.md").write_text(_doc("old name"))
    assert onetrip("ingest", str(docs), dsn=dsn).returncode == 0
    (docs / "old.md").rename(docs / "new.md")
    res = onetrip("ingest", str(docs), dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert "1 stored document came from files that are gone" in res.stderr and "--delete-missing" in res.stderr
    assert f"  gone: old.md (was {(docs / 'old.md').resolve()})" in res.stderr
    res = onetrip("ingest", str(docs), "--delete-missing", "--json", dsn=dsn)
    assert res.returncode == 0 and json.loads(res.stdout)["deleted"] == ["old.md"], res.stderr
    assert "deleted 1 document whose files are gone" in res.stderr
    a, b = _tenants(tmp_path)
    assert onetrip("ingest", str(a), dsn=dsn).returncode == 0
    res = onetrip("ingest", str(b), "--collection", "other", dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("onetrip: note:") == 1, res.stderr  # one note: replaced, and from which collection
    assert (f"replaced the document stored in collection 'default' from another file, which is still there "
            f"({a.resolve()})") in res.stderr


def test_cli_refuses_a_doc_id_conflict_before_making_tables_and_prefix_keeps_both(dsn, db, tmp_path):
    a, b = _tenants(tmp_path)
    res = onetrip("ingest", "--prefix", "guard_", str(a), str(b), dsn=dsn)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "would be stored as document 'handbook.md'" in res.stderr
    assert db.execute("SELECT to_regclass('guard_documents')").fetchone()[0] is None  # nothing made
    for tenant, path in (("tenantA", a), ("tenantB", b)):
        res = onetrip("ingest", "--prefix", "guard_", "--doc-id-prefix", f"{tenant}/", "--collection", tenant,
                      str(path), "--json", dsn=dsn)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["new"] == 1
    res = onetrip("ingest", "--prefix", "guard_", "--collection", "x", str(a), dsn=dsn)
    assert res.returncode == 0 and "note" not in res.stderr  # a new id 'handbook.md': nothing moved
    res = onetrip("ingest", "--prefix", "guard_", "--collection", "y", str(b), dsn=dsn)
    assert f"note: {b} replaced the document stored in collection 'x' from another file, which is still there" \
        in res.stderr  # one note naming both the other file and the collection
    b.write_text(b.read_text() + "\nMore.\n")
    res = onetrip("ingest", "--prefix", "guard_", "--collection", "z", str(b), dsn=dsn)
    assert res.stderr.strip() == f"onetrip: note: {b}: its document moved from collection 'y' to 'z'", res.stderr
    assert sorted(r[0] for r in db.execute("SELECT doc_id FROM guard_documents")) == [
        "handbook.md", "tenantA/handbook.md", "tenantB/handbook.md"]


def test_one_path_as_a_string_is_one_path(db, tmp_path, monkeypatch):
    """A string had been read as one path per character: '.' walked the working directory."""
    init_schema(db)
    (tmp_path / "notes.md").write_text(_doc("notes"))
    (tmp_path / "other.md").write_text(_doc("other"))
    monkeypatch.chdir(tmp_path)
    report = ingest_paths(db, "notes.md", layout=Layout(), embedder=HashEmbedder())
    assert (report.documents, report.new, report.failed) == (1, 1, [])
    report = ingest_paths(db, tmp_path / "other.md", layout=Layout(), embedder=HashEmbedder())
    assert (report.documents, report.new) == (1, 1)


def test_a_string_acl_or_an_empty_collection_is_refused(db, tmp_path):
    """acl="hr" had been stored as {h,r}: principal "hr" could not read it, "h" could."""
    init_schema(db)
    (tmp_path / "a.md").write_text(_doc("a"))
    with pytest.raises(TypeError, match="acl must be a sequence of principals such as \\['hr'\\]"):
        ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder(), acl="hr")
    with pytest.raises(ValueError, match="collection must be a non-empty string, got None"):
        ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder(), collection=None)
    with pytest.raises(TypeError, match="acl must be a sequence"):
        DocumentRecord("d", "file:///d", "D", "h", acl="hr")
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 0


def test_a_fifo_and_a_dangling_link_are_reported_not_waited_on(db, tmp_path):
    init_schema(db)
    (tmp_path / "good.mkd").write_text(_doc("good"))  # a Markdown suffix parse_file reads: now walked too
    os.mkfifo(tmp_path / "pipe.md")
    os.mkfifo(tmp_path / "walked.md")  # found by the folder walk only: it had been skipped without a word
    (tmp_path / "gone.md").symlink_to(tmp_path / "nowhere.md")
    (tmp_path / "folder.md").mkdir()  # a folder with a document's suffix is walked, not reported
    result: list = []
    t = threading.Thread(target=lambda: result.append(ingest_paths(
        db, [tmp_path, tmp_path / "pipe.md"], layout=Layout(), embedder=HashEmbedder())), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # unblock the reader so the test process can end
        for name in ("pipe.md", "walked.md"):
            with open(tmp_path / name, "w"):
                pass
        pytest.fail("ingest waited on the FIFO")
    report = result[0]
    failed = dict(report.failed)
    assert failed[str(tmp_path / "pipe.md")] == "not a regular file (a FIFO, socket or device)"
    assert failed[str(tmp_path / "walked.md")] == "not a regular file (a FIFO, socket or device)"
    assert failed[str(tmp_path / "gone.md")] == "a symbolic link to a missing file"
    assert report.new == 1 and report.documents == 4  # the FIFO named twice is one file


def test_keep_history_after_a_delete_continues_the_revisions(db, tmp_path):
    """Stored again after a delete, a document restarted at revision 1 and its next archive was dropped."""
    init_schema(db)
    path = tmp_path / "audit.md"
    emb = HashEmbedder()
    path.write_text(_doc("version A"))
    ingest_paths(db, [path], layout=Layout(), embedder=emb, keep_history=True)
    assert delete_document(db, Layout(), "audit.md", keep_history=True)
    for text in ("version B", "version C"):
        path.write_text(_doc(text))
        ingest_paths(db, [path], layout=Layout(), embedder=emb, keep_history=True)
    archived = db.execute("SELECT DISTINCT revision, content FROM section_history WHERE section_id = 'handbook' "
                          "ORDER BY revision").fetchall()
    assert [(r, c.split(" This")[0]) for r, c in archived] == [(1, "version A"), (2, "version B")]
    assert db.execute("SELECT revision FROM documents WHERE doc_id = 'audit.md'").fetchone() == (3,)


def test_a_zero_embedding_is_refused_at_store_and_named_at_search(db, tmp_path, statement_log):
    """A stored zero vector had made every search reaching it fail with 'the query embedding has length zero'."""
    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "z.md", _doc("zebra"))
    vecs[1] = 0.0
    record = DocumentRecord("z.md", path.as_uri(), parsed.title, "h1")
    with statement_log.watch(db) as w:  # refused before the write: nothing sent, not a rolled-back write
        with pytest.raises(ValueError, match="embedding of section 'leave' has length 0 \\(all zeros\\)"):
            replace_document(db, Layout(), record, parsed.sections, vecs)
        vecs[1] = 1e-30
        with pytest.raises(ValueError, match="has length 1.96e-29.*normalise it"):
            replace_document(db, Layout(), record, parsed.sections, vecs)
    assert w.statements == []
    # loaded around the check (by SQL), the search names the section, not the query
    vecs[1] = vecs[0]
    replace_document(db, Layout(), record, parsed.sections, vecs)
    db.execute("UPDATE sections SET embedding = array_fill(0, ARRAY[384])::vector WHERE section_id = 'leave'")
    db.execute("SET enable_indexscan = off")  # HNSW leaves zero vectors out of its graph; an exact scan reads them
    with pytest.raises(ValueError, match="distance to section 'leave' of 'z.md' is undefined"):
        Retriever(db, embedder=HashEmbedder()).search(vecs[0], k=2, neighbors=False, parent=False)


def test_a_tree_that_does_not_end_at_a_root_is_refused(db, tmp_path, statement_log):
    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "t.md", _doc("tree"))
    record = DocumentRecord("t.md", path.as_uri(), parsed.title, "h")
    from dataclasses import replace

    root, leave = parsed.sections
    for sections, why in (
        ([replace(root, parent_section_id=root.section_id), leave], "parents form a cycle through handbook"),
        ([replace(root, parent_section_id=leave.section_id), leave], "parents form a cycle"),
        ([root, replace(leave, level=40000)], "heading level 40000, outside a smallint"),
        # found by review: the neighbors' "parent" scope reads a path's length as the section's depth, so a
        # path that is not its parent's plus one heading took sections outside the parent into the window
        ([root, replace(leave, heading_path=leave.heading_path[-1:])], "section leave has a heading path of 1 "
                                                                      "heading\\(s\\); it must hold 2"),
        ([replace(root, heading_path=("A", "B")), replace(leave, heading_path=("A", "B", "C"))],
         "section handbook has a heading path of 2 heading\\(s\\); it must hold at most 1"),
        # found by review: only the length had been checked, and a wrong path is rendered in context headers
        ([root, replace(leave, heading_path=("Elsewhere", leave.heading_path[-1]))],
         "section leave's heading path \\['Elsewhere', .* does not start with its parent handbook's"),
    ):
        with statement_log.watch(db) as w, pytest.raises(ValueError, match=why):
            replace_document(db, Layout(), record, sections, vecs)
        assert w.statements == [], why  # refused before the write, not rolled back after it


def test_a_tree_listed_out_of_document_order_is_refused(db, tmp_path, statement_log):
    """Found by review: sections A, B, then A's child a1 (a subtree that is not one run of sequence_index) were
    stored, and a1's neighbors scoped to its parent A took in the sibling B. The neighbors' "parent" scope and
    the section expansion read a subtree as a range: sequence_index must list the tree in document order."""
    from dataclasses import replace

    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "o.md", f"# A\n\nAlpha.{PAD}\n\n## a1\n\nAlpha one.{PAD}\n\n"
                                                     f"# B\n\nBeta.{PAD}\n")
    record = DocumentRecord("o.md", path.as_uri(), parsed.title, "h")
    a, a1, b = parsed.sections
    assert (a1.parent_section_id, b.parent_section_id) == (a.section_id, None)
    swapped = [a, replace(b, sequence_index=1), replace(a1, sequence_index=2)]
    with statement_log.watch(db) as w, pytest.raises(ValueError, match=f"section {a1.section_id} \\(sequence_index "
                                                     f"2\\) has parent {a.section_id}, but by document order its "
                                                     f"parent is {b.section_id}"):
        replace_document(db, Layout(), record, swapped, vecs)
    assert w.statements == []
    # a grandchild listed after its grandparent's next child: its parent is closed by then
    path, parsed, vecs = _parsed(tmp_path, "g.md", f"# A\n\nAlpha.{PAD}\n\n## a1\n\nOne.{PAD}\n\n"
                                                     f"### x\n\nEx.{PAD}\n\n## a2\n\nTwo.{PAD}\n")
    a, a1, x, a2 = parsed.sections
    record = DocumentRecord("g.md", path.as_uri(), parsed.title, "h")
    with pytest.raises(ValueError, match=f"has parent {a1.section_id}, but by document order its parent is "
                                         f"{a2.section_id}"):
        replace_document(db, Layout(), record, [a, a1, replace(a2, sequence_index=2), replace(x, sequence_index=3)],
                         vecs)
    replace_document(db, Layout(), record, [a, a1, x, a2], vecs)  # the parser's order is stored
    # a child of a split section's later part (the parsers name the first): the order is right, so it is stored
    # (a review: it had been refused as out of order)
    marked = [replace(a1, metadata={"part": 1, "parts": 2}), replace(x, heading_path=a1.heading_path,
                                                                      parent_section_id=a.section_id,
                                                                      metadata={"part": 2, "parts": 2}),
              replace(a2, heading_path=(*a1.heading_path, "a2"), parent_section_id=x.section_id)]
    replace_document(db, Layout(), record, [a, *marked], vecs)
    assert db.execute("SELECT count(*) FROM sections WHERE doc_id = 'g.md'").fetchone()[0] == 4
    assert db.execute("SELECT count(*) FROM sections WHERE doc_id = 'g.md'").fetchone()[0] == 4


def test_part_markers_that_are_no_whole_run_are_refused(db, tmp_path, statement_log, monkeypatch):
    """The context's section expansion reads metadata 'part'/'parts' as a cut section's part k of n: a caller's
    own "part" (Part II of a manual) had moved the default context onto unrelated sections ({"part": 3}), or
    failed with a raw cast error ({"part": "II"}). Only whole runs, as the parsers write them, are stored."""
    from dataclasses import replace

    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "t.md", _doc("tree"))
    record = DocumentRecord("t.md", path.as_uri(), parsed.title, "h")
    root, leave = parsed.sections
    for meta, other in (({"part": 3}, {}), ({"part": "II"}, {}), ({"part": 1, "parts": 2}, {}),
                        ({"part": 1, "parts": 2}, {"part": 1, "parts": 2}), ({"parts": 1}, {}),
                        ({"part": True, "parts": 2}, {"part": 2, "parts": 2})):
        sections = [replace(root, metadata={**root.metadata, **meta}), replace(leave, metadata=other)]
        with statement_log.watch(db) as w, pytest.raises(ValueError, match="is no part of a run: the keys 'part'"):
            replace_document(db, Layout(), record, sections, vecs)
        assert w.statements == [], meta  # refused before the write
    run = [replace(root, metadata={"part": 1, "parts": 2}), replace(leave, metadata={"part": 2, "parts": 2})]
    # a run of more than MAX_PARTS parts is refused too: the section expansion would not read it as one
    import onetrip.store as store_module

    monkeypatch.setattr(store_module, "MAX_PARTS", 1)
    with pytest.raises(ValueError, match="is no part of a run"):
        replace_document(db, Layout(), record, run, vecs)
    monkeypatch.undo()
    assert replace_document(db, Layout(), record, run, vecs).outcome == "new"  # a whole run, as a parser cuts


def test_a_long_heading_cut_into_parts_keeps_every_id_within_the_limit(db, tmp_path):
    """A 200-character anchor's later parts (and a repeated one) had ids of 202 characters: in 4-byte letters,
    802 bytes, over the stored 800, and the parser's own file was refused. The base is cut to make room."""
    from onetrip.sections import MAX_SECTION_ID
    from onetrip.store import MAX_SECTION_ID_BYTES

    init_schema(db)
    heading = "\U00020000" * 210
    body = "\n\n".join(" ".join(f"word{i}x{j}" for j in range(120)) for i in range(12))
    (tmp_path / "b.md").write_text(f"# {heading}\n\n{body}\n\n# {heading}\n\nagain\n")
    sections = parse_file(tmp_path / "b.md").sections
    assert len(sections) > 3 and len({s.section_id for s in sections}) == len(sections)
    assert all(len(s.section_id) <= MAX_SECTION_ID and len(s.section_id.encode()) <= MAX_SECTION_ID_BYTES
               for s in sections), [len(s.section_id) for s in sections]
    assert [s.section_id[-2:] for s in sections[1:3]] == ["~2", "~3"]
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.new == 1 and not report.failed, report.failed


def test_a_section_too_large_for_the_full_text_index_is_named(db, tmp_path):
    """PostgreSQL's 1 MB tsvector limit is the one check only the server makes: its raw ProgramLimitExceeded named
    no document; now a ValueError names it and its longest section, and nothing is written."""
    from onetrip.sections import Section

    init_schema(db, Layout(dim=16))
    text = " ".join(f"w{i:07d}" for i in range(160_000))  # distinct words: a tsvector far past 1 MB
    repeated = " ".join(["again"] * 400_000)  # longer, but one lexeme: not the section to cut
    pair = [a + b for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz"]
    decoy = " ".join(f"{pair[i % 676]}_{pair[i // 676 % 676]}_{pair[i // 456976]}" for i in range(200_000))
    sections = [Section("huge", None, 0, 1, "Huge", ("Huge",), text, 3, "huge"),
                Section("long", None, 1, 1, "Long", ("Long",), repeated, 3, "long"),
                Section("decoy", None, 2, 1, "Decoy", ("Decoy",), decoy, 3, "decoy")]  # 200,000 \w+ words, 676 lexemes
    from onetrip.store import _word_vector_size

    assert _word_vector_size(sections[2]) > _word_vector_size(sections[0])  # so only the server can tell them apart
    vec = np.ones((3, 16), dtype=np.float32) / 4
    with pytest.raises(ValueError, match=r"^big\.md: string is too long for tsvector .*\(section huge's words are "
                                         r"too many for it: cut it into smaller sections\); nothing was written$"):
        replace_document(db, Layout(dim=16), DocumentRecord("big.md", "file:///big.md", "Big", "h"), sections, vec)
    assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 0
    # inside a transaction of the caller's the diagnosis probes in savepoints of their own: the caller's
    # transaction stays usable (a probe failing in it had aborted it: the next write raised InFailedSqlTransaction)
    from psycopg import pq

    small = [Section("s", None, 0, 1, "S", ("S",), "small text", 3, "s")]
    with db.transaction():
        with pytest.raises(ValueError, match="section huge's words are too many"):
            replace_document(db, Layout(dim=16), DocumentRecord("big.md", "file:///big.md", "Big", "h"), sections,
                             vec)
        assert db.info.transaction_status == pq.TransactionStatus.INTRANS
        assert replace_document(db, Layout(dim=16), DocumentRecord("ok.md", "file:///ok.md", "Ok", "h"), small,
                                vec[:1]).outcome == "new"
    assert [r[0] for r in db.execute("SELECT doc_id FROM documents")] == ["ok.md"]


def test_a_database_error_in_the_cli_is_one_line(dsn, db):
    """psycopg's own errors (a read-only server, a timeout, a lost connection) had been tracebacks."""
    init_schema(db)
    res = onetrip("delete", "nothing.md", dsn=dsn, PGOPTIONS="-c default_transaction_read_only=on")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("onetrip: error: PostgreSQL: ReadOnlySqlTransaction: ") and \
        len(res.stderr.strip().splitlines()) == 1, res.stderr
    with psycopg.connect(dsn) as locker:  # its list_documents waits on the lock until the timeout cancels it
        locker.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
        res = onetrip("documents", dsn=dsn, PGOPTIONS="-c statement_timeout=500")
        locker.rollback()
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("onetrip: error: PostgreSQL: QueryCanceled: "), res.stderr


def test_values_past_postgres_limits_are_named_before_the_write(db, tmp_path, statement_log):
    """A long doc_id, a NUL, NaN metadata and a 3,000-character identifier had failed with PostgreSQL's own
    messages (index row size ... exceeds btree maximum, invalid byte sequence, Token "NaN" is invalid)."""
    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "limits.md", _doc("limits") + f"\n## Setting\n\nset max_{'x' * 3000} "
                                 f"and max_connections.{PAD}\n")
    with pytest.raises(ValueError, match="is 2000 bytes; the limit is 1800"):
        DocumentRecord("d" * 2000, path.as_uri(), "T", "h")
    with pytest.raises(ValueError, match="doc_id must be a non-empty string without NUL"):
        DocumentRecord("a\x00b", path.as_uri(), "T", "h")
    from dataclasses import replace

    bad = [replace(parsed.sections[0], content="a\x00b"), *parsed.sections[1:]]
    nan_section = [parsed.sections[0], replace(parsed.sections[1], metadata={"w": float("inf")}),
                   *parsed.sections[2:]]
    with statement_log.watch(db) as w:  # each refused before the write: nothing sent
        with pytest.raises(ValueError, match="section 'handbook' holds a NUL character"):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h"), bad, vecs)
        with pytest.raises(ValueError, match="holds a value JSON cannot \\(NaN or infinity\\)"):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h",
                                                          metadata={"x": float("nan")}), parsed.sections, vecs)
        with pytest.raises(ValueError, match="holds a value JSON cannot \\(NaN or infinity\\)"):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h"), nan_section, vecs)
        class NoStr:  # a value whose __str__ returns no str: a TypeError of json's that is not about a key
            def __str__(self):  # noqa: PLE0307
                return 1

        with pytest.raises(ValueError, match=r"^l\.md: metadata .* holds what JSON cannot: "):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h",
                                                          metadata={"a": NoStr()}), parsed.sections, vecs)
        # a key JSON has no form for: json's TypeError had named neither the key nor the document
        with pytest.raises(ValueError, match=r"^l\.md: metadata key \('a', 1\) is a tuple; JSON object keys"):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h",
                                                          metadata={("a", 1): "x"}), parsed.sections, vecs)
        tuple_section = [parsed.sections[0], replace(parsed.sections[1], metadata={"w": {frozenset(): 1}}),
                         *parsed.sections[2:]]
        with pytest.raises(ValueError, match=rf"^l\.md: section {parsed.sections[1].section_id!r}: metadata key "
                                             r"frozenset\(\) is a frozenset"):
            replace_document(db, Layout(), DocumentRecord("l.md", path.as_uri(), "T", "h"), tuple_section, vecs)
    assert w.statements == []
    report = ingest_paths(db, [path], layout=Layout(), embedder=HashEmbedder())
    assert report.new == 1 and report.failed == []  # the long identifier is left out of the terms, not fatal
    terms = db.execute("SELECT terms FROM sections WHERE section_id = 'setting'").fetchone()[0]
    assert terms == ["max_connections"]


def test_encodings_and_invisible_text_are_named(tmp_path):
    """UTF-16 without a byte-order mark had been 'binary file (NUL byte at offset 1)', an HTML page declaring
    iso-8859-1 'invalid UTF-8', and a file of zero-width spaces a stored 0-token section."""
    (tmp_path / "u16.md").write_bytes("# Title\n\nSome text.\n".encode("utf-16-le"))
    (tmp_path / "latin1.html").write_bytes('<html><head><meta charset="iso-8859-1"></head><body><h1>Caf\xe9</h1>'
                                           '<p>Na\xefve text about the caf\xe9.</p></body></html>'.encode("latin-1"))
    (tmp_path / "lies.html").write_bytes(b'<meta charset="utf-8"><h1>x</h1><p>\xff\xfe bad</p>')
    (tmp_path / "zw.md").write_text("\u200b\u200b\n\u2060 \ufeff\u200d")
    with pytest.raises(InputDocumentError, match="UTF-16 encoded \\(no byte-order mark\\)"):
        parse_file(tmp_path / "u16.md")
    doc = parse_file(tmp_path / "latin1.html")
    assert doc.sections[0].heading == "Café" and "Naïve text about the café." in doc.sections[0].content
    with pytest.raises(InputDocumentError, match="invalid UTF-8 .*declared charset 'utf-8' does not decode it"):
        parse_file(tmp_path / "lies.html")
    with pytest.raises(InputDocumentError, match="only whitespace and invisible characters"):
        parse_file(tmp_path / "zw.md")


def test_an_undeclared_legacy_html_page_is_read_as_windows_1252_with_a_warning(tmp_path):
    """Found by review: a Latin-1 page declaring no charset (libxslt's xslt.html) was refused as invalid UTF-8,
    where browsers read it as windows-1252. A page with any UTF-8 sequence in it, a Markdown file, and a page
    declaring a charset that does not decode it are refused as before."""
    (tmp_path / "legacy.html").write_bytes("<h1>Caf\xe9</h1><p>Na\xefve \x93quotes\x94 and \x81.</p>".encode("latin-1"))
    doc = parse_file(tmp_path / "legacy.html")
    assert doc.sections[0].heading == "Café" and "Naïve \u201cquotes\u201d and \x81." in doc.sections[0].content
    assert doc.warnings == ("not UTF-8 (byte offset 7) and no charset declared: read as windows-1252, as browsers "
                            "read such a page; declare its charset if that is wrong",)
    (tmp_path / "broken.html").write_bytes("<h1>Café</h1><p>bad \xff byte</p>".encode("utf-8").replace(b"\xc3\xbf", b"\xff"))
    (tmp_path / "legacy.md").write_bytes("# Caf\xe9\n\nText.\n".encode("latin-1"))
    # (third review) a French page whose "é »" happens to form a UTF-8 pair is still legacy: most of its
    # non-ASCII bytes are not UTF-8; a charset named past the first 4 kB, or an .xhtml file, is not guessed at
    (tmp_path / "fr.html").write_bytes("<h1>Caf\xe9</h1><p>Le caf\xe9 est tr\xe8s bon \xe0 Paris, o\xf9 l'\xe9t\xe9 "
                                       "est chaud\xa0\xbb.</p>".encode("latin-1"))
    assert "est chaud \xbb." in parse_file(tmp_path / "fr.html").sections[0].content
    (tmp_path / "late.html").write_bytes(b"<!--" + b"x" * 5000 + b'--><meta charset="koi8-r"><p>'
                                         + "привет".encode("koi8-r") + b"</p>")
    (tmp_path / "page.xhtml").write_bytes("<h1>Caf\xe9</h1>".encode("latin-1"))
    for name in ("broken.html", "legacy.md", "late.html", "page.xhtml"):
        with pytest.raises(InputDocumentError, match="invalid UTF-8 at byte offset"):
            parse_file(tmp_path / name)


def test_a_utf8_byte_order_mark_overrides_a_declared_charset(tmp_path):
    """WHATWG: a byte-order mark decides the encoding, not <meta>. A UTF-8 page with a BOM, a meta naming
    iso-8859-1 and one stray byte had been read as cp1252 ('CafÃ©' and a section 'ï»¿'); it is named now."""
    page = tmp_path / "bom.html"
    page.write_bytes(b'\xef\xbb\xbf<meta charset="iso-8859-1"><h1>Caf\xc3\xa9</h1><p>na\xc3\xafve \xa0 text</p>')
    with pytest.raises(InputDocumentError, match="invalid UTF-8 .*byte-order mark overrides its declared charset "
                                                 "'iso-8859-1'"):
        parse_file(page)
    page.write_bytes(b'\xef\xbb\xbf<meta charset="iso-8859-1"><h1>Caf\xc3\xa9</h1><p>na\xc3\xafve text</p>')
    doc = parse_file(page)
    assert [(s.heading, s.content) for s in doc.sections] == [("Café", "naïve text")]


def test_legacy_charsets_are_read_as_browsers_read_them(tmp_path):
    """Found by review: pages declaring GB2312, Shift_JIS or EUC-KR and holding the wider codepage's characters
    (as such pages do; WHATWG reads those labels as GBK, windows-31j, windows-949) were refused; so was a page
    declaring iso-8859-1 with one of windows-1252's five unassigned bytes (WHATWG: a C1 control), and an XHTML
    file whose XML declaration names its encoding."""
    for label, codec, heading, body in (("Shift_JIS", "cp932", "手順①", "株式会社 ㈱"), ("gb2312", "gbk", "说明", "朱镕基"),
                                        ("euc-kr", "cp949", "설명", "똠방각하"), ("iso-8859-1", "cp1252", "Café", "x\x81y")):
        page = tmp_path / f"{codec}.html"
        page.write_bytes(f'<meta charset="{label}"><h1>{heading}</h1><p>{body}</p>'.encode(codec, "surrogateescape")
                         if codec != "cp1252" else f'<meta charset="{label}"><h1>{heading}</h1>'.encode(codec)
                         + b"<p>x\x81y</p>")
        section, = parse_file(page).sections
        assert (section.heading, section.content) == (heading, body), label
    # a review of that: windows-874 reads its unassigned bytes of 0x80-0x9F as C1 controls too, and a Big5 page
    # with one of six pairs Big5-HKSCS refuses (big5 reads them) is read by big5, as it was before
    (tmp_path / "th.html").write_bytes('<meta charset="tis-620"><h1>ไทย</h1><p>ก'.encode("cp874") + b"\x81"
                                       + "ข \u2013 ค</p>".encode("cp874"))
    assert parse_file(tmp_path / "th.html").sections[0].content == "ก\x81ข \u2013 ค"
    (tmp_path / "b5.html").write_bytes('<meta charset="big5"><h1>日期</h1><p>'.encode("big5") + b"\xc6\xde"
                                       + " 同上</p>".encode("big5"))
    assert parse_file(tmp_path / "b5.html").sections[0].content == b"\xc6\xde".decode("big5") + " 同上"
    (tmp_path / "th_bad.html").write_bytes('<meta charset="tis-620"><h1>x</h1><p>'.encode() + b"\xfc</p>")
    with pytest.raises(InputDocumentError, match="'tis-620' \\(read as cp874, as browsers do\\) does not decode"):
        parse_file(tmp_path / "th_bad.html")
    xhtml = tmp_path / "x.xhtml"
    xhtml.write_bytes('<?xml version="1.0" encoding="ISO-8859-1"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
                      '<body><h1>Café</h1><p>Crème brûlée.</p></body></html>'.encode("latin-1"))
    assert parse_file(xhtml).sections[0].content == "Crème brûlée."
    broken = tmp_path / "broken.html"  # a label read as another codec is named as both
    broken.write_bytes(b'<meta charset="gb2312"><h1>x</h1><p>\xff\xff</p>')
    with pytest.raises(InputDocumentError, match="declared charset 'gb2312' \\(read as gbk, as browsers do\\) does not"):
        parse_file(broken)


def test_review_mends_nested_duplicate_long_id_cp1252_and_section_acl(db, tmp_path):
    """A file named again inside a folder given (ids guide/setup.md and setup.md) had been stored twice; a
    doc_id over the limit stopped the whole run; a page declaring iso-8859-1 lost its smart quotes (HTML reads
    that label as windows-1252); a section's own acl="hr" was still stored as {h,r}."""
    init_schema(db)
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    setup = tmp_path / "docs" / "guide" / "setup.md"
    setup.write_text(_doc("setup"))
    deep = tmp_path / "docs"
    for i in range(10):
        deep = deep / (chr(97 + i) * 200)
    deep.mkdir(parents=True)
    (deep / "long.md").write_text(_doc("deep"))
    report = ingest_paths(db, [tmp_path / "docs", setup], layout=Layout(), embedder=HashEmbedder())
    assert (report.documents, report.new) == (2, 1)
    assert [d.doc_id for d in list_documents(db, Layout())] == ["guide/setup.md"]
    (path, why), = report.failed
    assert path.endswith("long.md") and "the limit is 1800" in why
    page = tmp_path / "quotes.html"
    page.write_bytes(b'<meta charset="iso-8859-1"><h1>Q</h1><p>He said \x93hello\x94 \x96 it costs \x80 5.</p>')
    assert "He said \u201chello\u201d \u2013 it costs \u20ac 5." in parse_file(page).sections[0].content
    bad = tmp_path / "bad.html"
    bad.write_bytes(b'<meta charset="windows-874x"><h1>x</h1><p>\xff bad</p>')
    with pytest.raises(InputDocumentError, match="declared charset 'windows-874x' is not one Python knows"):
        parse_file(bad)
    parsed = parse_file(setup)
    from dataclasses import dataclass

    @dataclass
    class WithAcl:
        section_id: str
        parent_section_id: str | None
        sequence_index: int
        level: int
        heading: str
        heading_path: tuple
        content: str
        token_count: int
        anchor: str | None
        metadata: dict
        acl: object

    secs = [WithAcl(s.section_id, s.parent_section_id, s.sequence_index, s.level, s.heading, s.heading_path,
                    s.content, s.token_count, s.anchor, s.metadata, "hr") for s in parsed.sections]
    vecs = HashEmbedder().embed_documents([s.content for s in parsed.sections])
    with pytest.raises(TypeError, match="acl must be a sequence of principals"):
        replace_document(db, Layout(), DocumentRecord("acl.md", setup.as_uri(), "T", "h"), secs, vecs)


def test_a_symbolic_link_loop_fails_that_file_not_the_run(db, tmp_path):
    """A loop (a.md -> b.md -> a.md) in a folder walked had stopped the whole run with a traceback
    (pathlib's RuntimeError 'Symlink loop from ...' before Python 3.13) before any file was stored."""
    init_schema(db)
    (tmp_path / "good.md").write_text(_doc("good"))
    (tmp_path / "a.md").symlink_to(tmp_path / "b.md")
    (tmp_path / "b.md").symlink_to(tmp_path / "a.md")
    report = ingest_paths(db, [tmp_path, tmp_path / "a.md"], layout=Layout(), embedder=HashEmbedder())
    loop = "a symbolic link loop (following its links never reaches a file)"
    assert dict(report.failed) == {str(tmp_path / "a.md"): loop, str(tmp_path / "b.md"): loop}
    assert (report.documents, report.new) == (3, 1)  # a.md named twice is one file
    assert [d.doc_id for d in list_documents(db, Layout())] == ["good.md"]


def test_a_nul_escape_in_front_matter_is_named_before_the_write(db, tmp_path, statement_log):
    """YAML's "\\0" (or "\\x00", "\\u0000") escape puts a NUL in the title or metadata: the file had failed with
    psycopg's 'PostgreSQL text fields cannot contain NUL (0x00) bytes' (no field named) or PostgreSQL's
    multi-line 'unsupported Unicode escape sequence ... unnamed portal parameter $8', mid-transaction."""
    init_schema(db)
    (tmp_path / "title.md").write_text('---\ntitle: "a\\0b"\n---\n' + _doc("title"))
    (tmp_path / "meta.md").write_text('---\ntags:\n  - ok\n  - "x\\x00y"\n---\n' + _doc("meta"))
    (tmp_path / "key.md").write_text('---\n"k\\u0000": 1\n---\n' + _doc("key"))
    (tmp_path / "good.md").write_text(_doc("good"))
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    failed = dict(report.failed)
    assert "the title 'a\\x00b' holds a NUL character, which PostgreSQL text cannot store" in \
        failed[str(tmp_path / "title.md")]
    # the summary names the file; the document's id, which replace_document's own error starts with, is not
    # repeated after it (a review of 0503c6e: "failed: meta.md: ValueError: meta.md: metadata ...")
    assert failed[str(tmp_path / "meta.md")].startswith("ValueError: metadata value 'tags'[1] holds a NUL character")
    assert "metadata key 'k\\x00' holds a NUL character" in failed[str(tmp_path / "key.md")]
    assert all("\n" not in why for why in failed.values())
    assert [d.doc_id for d in list_documents(db, Layout())] == ["good.md"]
    path, parsed, vecs = _parsed(tmp_path, "direct.md", _doc("direct"))
    with statement_log.watch(db) as w, pytest.raises(ValueError, match=r"metadata value 'a'\['b'\] holds a NUL"):
        replace_document(db, Layout(), DocumentRecord("direct.md", path.as_uri(), "T", "h",
                                                      metadata={"a": {"b": "\x00"}}), parsed.sections, vecs)
    assert w.statements == []  # refused before the write


def test_a_layout_other_than_the_tables_is_named_before_any_write(db, tmp_path, statement_log):
    """ingest_paths trusted the Layout given: Layout(dim=64) over vector(384) tables failed every file with COPY's
    multi-line 'expected 384 dimensions, not 64 / CONTEXT: COPY sections, line 1, column embedding'; a prefix with
    no tables named term_stats as missing from 'onetrip versions before it' instead of `onetrip init`."""
    from onetrip import DimensionMismatchError, SchemaMissingError

    init_schema(db)
    (tmp_path / "a.md").write_text(_doc("a"))
    with statement_log.watch(db) as w:
        with pytest.raises(DimensionMismatchError, match=r"sections stores vector\(384\), but the layout given says "
                                                         r"vector\(64\)"):
            ingest_paths(db, [tmp_path], layout=Layout(dim=64), embedder=HashEmbedder(64))
        with pytest.raises(DimensionMismatchError, match=r"stores vector\(384\), but the layout given says halfvec"):
            ingest_paths(db, [tmp_path], layout=Layout(vector_type="halfvec"), embedder=HashEmbedder())
        # the model agrees with the table and the Layout does not: the Layout is named, not the model (this had
        # said 'embedder hash-test makes 384-d vectors but the sections table stores vector(64)', untrue)
        with pytest.raises(DimensionMismatchError, match=r"stores vector\(384\), but the layout given says "
                                                         r"vector\(64\)"):
            ingest_paths(db, [tmp_path], layout=Layout(dim=64), embedder=HashEmbedder())
        with pytest.raises(SchemaMissingError,
                           match="table other_sections .*does not exist.*run `onetrip init` first"):
            ingest_paths(db, [tmp_path], layout=Layout(prefix="other_"), embedder=HashEmbedder())
    assert not [s for s in w.statements if s.split()[:1] in (["INSERT"], ["COPY"], ["DELETE"], ["BEGIN"])], \
        w.statements
    assert ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder()).new == 1


def test_a_database_error_on_one_file_is_one_line_of_the_report(dsn, db, tmp_path):
    """PostgreSQL's DETAIL/HINT/CONTEXT lines (here a DBA's trigger's) had each become a line of the summary."""
    init_schema(db)
    db.execute("""CREATE FUNCTION no_secrets() RETURNS trigger LANGUAGE plpgsql AS $$
                  BEGIN IF NEW.doc_id LIKE 'secret%' THEN
                      RAISE EXCEPTION 'secrets are not stored here' USING DETAIL = 'policy 7', HINT = 'ask the DBA';
                  END IF; RETURN NEW; END $$""")
    db.execute("CREATE TRIGGER no_secrets BEFORE INSERT ON documents FOR EACH ROW EXECUTE FUNCTION no_secrets()")
    (tmp_path / "secret.md").write_text(_doc("secret"))
    (tmp_path / "public.md").write_text(_doc("public"))
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.failed == [(str(tmp_path / "secret.md"), "RaiseException: secrets are not stored here")]
    assert [d.doc_id for d in list_documents(db, Layout())] == ["public.md"]
    (tmp_path / "public.md").unlink()
    init_schema(db, Layout(prefix="cli_"))  # the CLI embeds with the bundled model: tables of its own
    db.execute("CREATE TRIGGER no_secrets BEFORE INSERT ON cli_documents FOR EACH ROW EXECUTE FUNCTION no_secrets()")
    res = onetrip("ingest", str(tmp_path), "--prefix", "cli_", dsn=dsn)
    assert res.returncode == 3 and res.stderr.strip().splitlines()[-1].endswith(
        "secret.md: RaiseException: secrets are not stored here"), res.stderr


def test_delete_prune_and_list_name_a_wrong_argument(db, tmp_path, statement_log):
    """delete_document(conn, layout, 5) had been PostgreSQL's multi-line 'function hashtextextended(smallint,
    integer) does not exist', a None or a list doc_id a silent False ('not stored'), list_documents(collection=5)
    'operator does not exist: text = smallint', prune_history(keep=True) 'bigint > boolean', and a NUL psycopg's
    'PostgreSQL text fields cannot contain NUL (0x00) bytes', naming no argument."""
    from onetrip.store import prune_history

    init_schema(db)
    (tmp_path / "kept.md").write_text(_doc("kept"))
    ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    L = Layout()
    with statement_log.watch(db) as w:
        for bad in (5, None, ["kept.md"]):
            with pytest.raises(TypeError, match="doc_id must be a string, got"):
                delete_document(db, L, bad)
        with pytest.raises(ValueError, match="doc_id 'a\\\\x00b' holds a NUL character"):
            delete_document(db, L, "a\x00b")
        with pytest.raises(ValueError, match="doc_id 'a\\\\udcffb' is not valid Unicode"):
            delete_document(db, L, "a\udcffb")  # a non-UTF-8 name from argv (surrogateescape)
        with pytest.raises(TypeError, match="collection must be a string, got int 5"):
            list_documents(db, L, collection=5)
        with pytest.raises(TypeError, match="keep must be an integer, got bool True"):
            prune_history(db, L, keep=True)
        with pytest.raises(TypeError, match="doc_id must be a string, got int 5"):
            prune_history(db, L, doc_id=5)
    assert w.statements == []  # refused before anything is sent
    assert [d.doc_id for d in list_documents(db, L)] == ["kept.md"]


def test_prune_history_takes_numpy_integers_for_keep(db, tmp_path):
    """keep=np.int64(...) (a count read from a DataFrame, say) had worked; the bool/int check refused it."""
    import numpy as np

    from onetrip.store import has_history, prune_history

    init_schema(db)
    for text in ("one", "two", "three"):
        (tmp_path / "kept.md").write_text(_doc(text))
        ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder(), keep_history=True)
    revisions = "SELECT count(DISTINCT revision) FROM section_history WHERE doc_id = 'kept.md'"
    assert db.execute(revisions).fetchone()[0] == 2
    assert prune_history(db, Layout(), keep=np.int64(1)) > 0
    assert db.execute(revisions).fetchone()[0] == 1
    assert prune_history(db, Layout(), keep=np.int32(0), doc_id="kept.md") > 0
    assert not has_history(db, Layout(), "kept.md")
    with pytest.raises(ValueError, match="keep must be >= 0"):
        prune_history(db, Layout(), keep=np.int64(-1))


def test_a_file_name_that_is_not_utf8_is_named(db, tmp_path):
    """A Latin-1 file name (bytes 0xff) had failed with a bare "UnicodeEncodeError: 'utf-8' codec can't encode
    character '\\udcff' in position 3: surrogates not allowed", saying neither doc_id nor file name; then with
    "ValueError: ..." before the reason, which no other file's reason has."""
    init_schema(db)
    (tmp_path / "good.md").write_text(_doc("good"))
    bad = os.path.join(os.fsencode(tmp_path), b"caf\xe9.md")
    with open(bad, "w") as f:
        f.write(_doc("latin"))
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    (path, why), = report.failed
    assert path == os.fsdecode(bad) and why.startswith("doc_id 'caf\\udce9.md' is not valid Unicode") \
        and "a file name that is not UTF-8 (rename the file" in why, why
    assert [d.doc_id for d in list_documents(db, Layout())] == ["good.md"]


def test_a_title_that_is_not_utf8_fails_that_file_not_the_run(db, tmp_path):
    """A plain-text file's title is its file name's stem: a Latin-1 name under an id of the caller's own
    (doc_id=) passed the doc_id check, and its title's lone surrogate ended the whole run in the embedder
    (or failed mid-transaction) with a bare UnicodeEncodeError; DocumentRecord checked its title for NUL only."""
    init_schema(db)
    (tmp_path / "good.md").write_text(_doc("good"))
    bad = os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt")
    with open(bad, "w") as f:
        f.write("A plain text note about the cafe." + PAD)
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder(),
                          doc_id=lambda path, root: "notes/" + path.name.encode(errors="replace").decode())
    (path, why), = report.failed
    assert path == os.fsdecode(bad) and why.startswith("ValueError: notes/caf?.txt: the title 'caf\\udce9' is not "
                                                       "valid Unicode"), why
    assert [d.doc_id for d in list_documents(db, Layout())] == ["notes/good.md"]
    with pytest.raises(ValueError, match="r.md: the source_uri 'file:caf.*' is not valid Unicode"):
        DocumentRecord("r.md", "file:caf\udce9", "T", "h")


def test_a_path_with_a_nul_fails_that_path_not_the_run(db, tmp_path):
    """ingest_paths(["a\\0b.md", folder]) had stopped before any write with a bare 'ValueError: embedded null
    byte' (os.path.realpath's), naming no path."""
    init_schema(db)
    (tmp_path / "good.md").write_text(_doc("good"))
    bad = str(tmp_path / "a\x00b.md")
    report = ingest_paths(db, [bad, tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.failed == [(bad, "a path with a NUL character (no file can have one)")]
    assert [d.doc_id for d in list_documents(db, Layout())] == ["good.md"]


def test_a_section_field_of_the_wrong_type_is_named_before_the_write(db, tmp_path, statement_log):
    """replace_document (sections from a caller's own parser) had stored heading_path="Setup" as one heading per
    character (['S', 'e', 't', 'u', 'p'], path_text 'S e t u p') and token_count=-5 as it was, without a word; an
    anchor with a NUL or a token_count past int4 failed mid-COPY (rolled back) naming no section; content=None was
    Python's "argument of type 'NoneType' is not iterable"."""
    from dataclasses import replace

    import numpy as np

    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "f.md", _doc("fields"))
    record = DocumentRecord("f.md", path.as_uri(), parsed.title, "h")
    root, leave = parsed.sections
    with statement_log.watch(db) as w:
        for change, exc, why in (  # the wrong type: TypeError (as DocumentRecord's); a bad value: ValueError
            (dict(heading_path="Setup"), TypeError, "has heading_path 'Setup'; it must be a sequence of strings"),
            (dict(token_count=-5), ValueError, "has token_count -5; it must be an integer from 0 to 2147483647"),
            (dict(token_count=2**40), ValueError, "has token_count 1099511627776; it must be an integer from 0"),
            (dict(anchor="a\x00b"), ValueError, "has anchor 'a\\\\x00b'; it must be None or a string without NUL"),
            (dict(anchor=5), TypeError, "has anchor 5; it must be None or a string"),
            (dict(content=None), TypeError, "has content None; it must be a string"),
            (dict(level="1"), TypeError, "has level '1'; it must be an integer"),
            (dict(metadata=None), TypeError, "has metadata None; it must be a mapping"),
            (dict(content="caf\udce9"), ValueError,
             "is not valid Unicode \\(surrogates not allowed at position 3 of 'caf"),
        ):
            with pytest.raises(exc, match=f"f.md: section 'leave' {why}") as info:
                replace_document(db, Layout(), record, [root, replace(leave, **change)], vecs)
            assert type(info.value) is exc  # not ValueError for a wrong type, as sections' errors once were
    assert w.statements == []  # each refused before the write
    # numpy's integers are integers
    as_numpy = replace(leave, token_count=np.int64(leave.token_count))
    res = replace_document(db, Layout(), record, [root, as_numpy], vecs)
    assert res.outcome == "new"
    assert db.execute("SELECT heading_path FROM sections WHERE section_id = 'leave'").fetchone()[0] == \
        list(leave.heading_path)


def test_a_document_record_of_the_wrong_type_is_named(db, tmp_path, statement_log):
    """source_uri=None or content_hash=None had failed mid-transaction with PostgreSQL's multi-line NotNullViolation
    (rolled back); content_hash=5 was stored as '5'; metadata=[1] was Python's 'cannot convert dictionary update
    sequence element #0 to a sequence'."""
    init_schema(db)
    path, parsed, vecs = _parsed(tmp_path, "r.md", _doc("record"))
    for kwargs, exc, why in (
        (dict(source_uri=None), TypeError, "r.md: source_uri must be a string, got None"),
        (dict(content_hash=None), TypeError, "r.md: content_hash must be a string, got None"),
        (dict(content_hash=5), TypeError, "r.md: content_hash must be a string, got 5"),
        (dict(title=5), TypeError, "r.md: title must be a string or None, got 5"),
        (dict(metadata=[1]), TypeError, "r.md: metadata must be a mapping"),
    ):
        with pytest.raises(exc, match=why):
            DocumentRecord(**{"doc_id": "r.md", "source_uri": path.as_uri(), "title": "T", "content_hash": "h",
                              **kwargs})
    untitled = DocumentRecord("r.md", path.as_uri(), None, "h")  # a document without a title is one
    assert replace_document(db, Layout(), untitled, parsed.sections, vecs).outcome == "new"


class _DropsOne(HashEmbedder):
    """An embedder that loses one text of a batch (a plug-in that skips what its tokenizer cannot read)."""

    def embed_documents(self, texts):
        return super().embed_documents([t for t in texts if "mystery" not in t])


def test_an_embedder_returning_too_few_vectors_stores_none_of_its_batch(db, tmp_path):
    """ingest sliced the batch's vectors per document and checked each slice only: with one text dropped, the
    documents before it got their own vectors, those after it their neighbours' (stored, silently wrong) and the
    last failed with 'expected 1 embeddings, got an array of shape (0, 384)'; None was a TypeError ending the run."""
    init_schema(db)
    for name, words in (("a.md", "alpha"), ("b.md", "mystery"), ("c.md", "gamma"), ("d.md", "delta")):
        (tmp_path / name).write_text(f"# {words.title()}\n\nThe {words} section says this once.\n")
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=_DropsOne(), batch_sections=1000)
    assert report.new == 0 and len(report.failed) == 4
    assert {why for _, why in report.failed} == {("the embedder 'hash-test' returned 3 vectors for 4 sections (this "
                                                  "batch of 4 files); none was stored, as a vector could not be "
                                                  "matched to its section")}
    assert list_documents(db, Layout()) == []
    report = ingest_paths(db, [tmp_path / "a.md", tmp_path / "c.md"], layout=Layout(), embedder=_DropsOne())
    assert report.new == 2 and report.failed == []


class _Flat(HashEmbedder):
    """An embedder that returns its batch's numbers as one flat array (a reshape forgotten)."""

    def embed_documents(self, texts):
        return super().embed_documents(texts).reshape(-1)


def test_an_embedder_returning_a_flat_array_is_named_by_its_shape(db, tmp_path):
    """A flat array of 4 x 384 numbers had been told 'returned 1536 vectors for 4 sections'. Found by review."""
    init_schema(db)
    for name in ("a.md", "b.md", "c.md", "d.md"):
        (tmp_path / name).write_text(f"# {name}\n\nThe {name} section says this once.\n")
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=_Flat(), batch_sections=1000)
    assert report.new == 0 and len(report.failed) == 4
    assert {why for _, why in report.failed} == {("the embedder 'hash-test' returned an array of shape (1536,) for 4 "
                                                  "sections (this batch of 4 files); none was stored, as a vector "
                                                  "could not be matched to its section")}
    assert list_documents(db, Layout()) == []


def test_embeddings_halfvec_cannot_hold_are_refused_naming_the_section(db, tmp_path):
    """Found by review: a halfvec table stored a vector of components ~1e-9 (length 2.8e-9, inside the range
    float32 checks allow) as all zeros; dense search never found it and every hybrid search reaching it failed
    with a NaN distance. A component past 65504 failed mid-write with pgvector's message naming no section."""
    layout = init_schema(db, Layout(prefix="h_", vector_type="halfvec", dim=8))
    path, parsed, _ = _parsed(tmp_path, "tiny.md", _doc("tiny vectors"))
    record = DocumentRecord(doc_id="tiny.md", source_uri=path.as_uri(), title=parsed.title, content_hash="t")
    n = len(parsed.sections)
    first = parsed.sections[0].section_id
    for scale, why in ((1e-9, "of its length lost to 16-bit rounding"), (1e5, "a component past 65504")):
        with pytest.raises(ValueError, match=rf"section '{first}' does not fit halfvec: .*{why}"):
            replace_document(db, layout, record, parsed.sections, np.full((n, 8), scale, np.float32))
    assert list_documents(db, layout) == []
    assert replace_document(db, layout, record, parsed.sections, np.full((n, 8), 0.35, np.float32)).outcome == "new"
    # the same tiny vectors fit a float32 table
    other = init_schema(db, Layout(prefix="f_", dim=8))
    assert replace_document(db, other, record, parsed.sections, np.full((n, 8), 1e-9, np.float32)).outcome == "new"


def test_an_embedder_returning_no_array_fails_its_files_not_the_run(db, tmp_path):
    """Found by review: an embedder returning a dict or an object array ended the whole run with a bare
    TypeError (slicing a dict; numpy's conversion), where other wrong outputs fail their batch's files."""
    init_schema(db)
    (tmp_path / "a.md").write_text(_doc("alpha"))

    class Returns(HashEmbedder):
        def __init__(self, make):
            super().__init__()
            self.make = make

        def embed_documents(self, texts):
            return self.make(super().embed_documents(texts))

    for make, why in ((lambda a: {i: v for i, v in enumerate(a)}, "returned a dict"),
                      (lambda a: np.array([object()] * len(a)), "not an array of numbers")):
        report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=Returns(make))
        (path, reason), = report.failed
        assert why in reason, reason
    assert list_documents(db, Layout()) == []


def test_a_utf32_file_is_named_as_such(tmp_path):
    """Found by review: a UTF-32 file (its byte-order mark FF FE 00 00 starts as UTF-16's) was called UTF-16."""
    for name, bom, codec in (("le.txt", b"\xff\xfe\x00\x00", "utf-32-le"), ("be.txt", b"\x00\x00\xfe\xff", "utf-32-be")):
        p = tmp_path / name
        p.write_bytes(bom + "hello".encode(codec))
        with pytest.raises(InputDocumentError, match=r"UTF-32 encoded \(byte-order mark\)"):
            parse_file(p)


def test_a_file_that_became_a_folder_mid_run_is_named_so(db, tmp_path):
    """Found by review: it was reported as 'not a regular file (a FIFO, socket or device)'."""
    init_schema(db)
    (tmp_path / "a.md").write_text(_doc("alpha"))
    ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    (tmp_path / "b.md").write_text(_doc("beta"))

    def swap(path, report):  # a.md, unchanged, is reported at once, before b.md is read
        if path.endswith("a.md"):
            (tmp_path / "b.md").unlink()
            (tmp_path / "b.md").mkdir()

    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder(), on_progress=swap)
    assert report.failed == [(str(tmp_path / "b.md"), "a folder now (it was a file when the run began)")]


def test_files_gone_under_a_folder_whose_name_is_not_utf8_and_copies_elsewhere_delete_nothing_wrongly(db, tmp_path):
    """Found by a second review: (1) a folder named in Latin-1 had every document under it reported gone at
    once (its URI decoded as UTF-8 named no file) and --delete-missing deleted top-level ones whose files were
    there; (2) the same text copied into another folder took the document's source over without a word, so
    deleting the copy with --delete-missing deleted the document while the first file was still there;
    (3) a folder given twice listed each gone document twice."""
    init_schema(db)
    emb = HashEmbedder()
    latin = tmp_path / os.fsdecode(b"caf\xe9")
    (latin / "sub").mkdir(parents=True)
    (latin / "a.md").write_text(_doc("alpha"))
    (latin / "sub" / "b.md").write_text(_doc("beta"))
    first = ingest_paths(db, [latin], layout=Layout(), embedder=emb)
    assert (first.new, first.gone) == (2, [])
    again = ingest_paths(db, [latin], layout=Layout(), embedder=emb, delete_missing=True)
    assert (again.unchanged, again.gone, again.deleted) == (2, [], [])
    (latin / "a.md").unlink()
    gone = ingest_paths(db, [latin, latin], layout=Layout(), embedder=emb)
    assert [d for d, _ in gone.gone] == ["a.md"]  # once, and named by its real path
    assert gone.gone[0][1] == str((latin / "a.md").resolve())

    a, c = tmp_path / "A", tmp_path / "C"
    for folder in (a, c):
        folder.mkdir()
        (folder / "h.md").write_text(_doc("the same handbook"))
    ingest_paths(db, [a], layout=Layout(), embedder=emb)
    copy = ingest_paths(db, [c], layout=Layout(), embedder=emb)
    assert (copy.unchanged, copy.replaced) == (1, [])
    assert db.execute("SELECT source_uri FROM documents WHERE doc_id = 'h.md'").fetchone()[0] == \
        (a / "h.md").resolve().as_uri()  # still the first file's
    (c / "h.md").unlink()
    assert ingest_paths(db, [c], layout=Layout(), embedder=emb, delete_missing=True).deleted == []
    assert "h.md" in {d.doc_id for d in list_documents(db, Layout())}
    # the same text moving to another collection from another file is reported
    (c / "h.md").write_text(_doc("the same handbook"))
    moved = ingest_paths(db, [c], layout=Layout(), embedder=emb, collection="other")
    assert moved.access_only == 1 and moved.replaced == [(str(c / "h.md"), str((a / "h.md").resolve()))]


def _out_of_reach(monkeypatch: pytest.MonkeyPatch, folders: list, listable: bool) -> None:
    """Make the file system calls (os.scandir, os.stat, os.lstat) raise for ``folders`` what the kernel raises
    for an unprivileged user (root reads everything): chmod 744 (``listable``: listed, not entered) or 700."""
    import errno

    locked = [str(f) for f in folders]
    real = {name: getattr(os, name) for name in ("scandir", "stat", "lstat")}

    def denied(path: object) -> OSError:
        return PermissionError(errno.EACCES, "Permission denied", os.fspath(path))  # type: ignore[arg-type]

    def inside(path: object) -> bool:
        return isinstance(path, (str, os.PathLike)) and any(
            os.path.abspath(path).startswith(f + os.sep) for f in locked)  # type: ignore[arg-type]

    def scandir(path: object = ".") -> object:
        if (not listable and isinstance(path, (str, os.PathLike)) and os.path.abspath(path) in locked) \
                or inside(path):
            raise denied(path)
        return real["scandir"](path)

    def stat_of(name: str):  # a folder that cannot be entered: nothing below it can be stat'ed
        def stat(path: object, *args: object, **kwargs: object) -> object:
            if inside(path):
                raise denied(path)
            return real[name](path, *args, **kwargs)
        return stat

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", stat_of("stat"))
    monkeypatch.setattr(os, "lstat", stat_of("lstat"))


@pytest.mark.parametrize("listable", [False, True])
def test_files_out_of_reach_are_neither_gone_nor_a_stopped_run(db, tmp_path, monkeypatch, listable):
    """Found by an ingestion review, run as an unprivileged user: a folder the user may not read was skipped by
    the walk without a word, its files then counted gone (os.path.lexists is False on EACCES too), so
    --delete-missing deleted every document from it (exit 0); a folder that may be listed but not entered
    stopped the whole run with a PermissionError, the good files not stored."""
    init_schema(db)
    emb = HashEmbedder()
    root = tmp_path / "docs"
    locked = root / "locked"
    locked.mkdir(parents=True)
    (root / "a.md").write_text(_doc("alpha"))
    (locked / "b.md").write_text(_doc("beta"))
    (locked / "c.md").write_text(_doc("gamma"))
    assert ingest_paths(db, [root], layout=Layout(), embedder=emb).new == 3
    (root / "a.md").write_text(_doc("alpha, changed"))

    _out_of_reach(monkeypatch, [locked], listable)
    report = ingest_paths(db, [root], layout=Layout(), embedder=emb, delete_missing=True)
    monkeypatch.undo()
    assert (report.gone, report.deleted) == ([], [])
    assert report.changed == 1  # the readable file is stored: the run went on
    failed = dict(report.failed)
    if listable:  # its files are named, each out of reach
        assert set(failed) == {str(locked / "b.md"), str(locked / "c.md")}, failed
        assert all("out of reach (permission denied" in why for why in failed.values()), failed
    else:  # the folder is named
        assert list(failed) == [str(locked)] and "a folder onetrip cannot read" in failed[str(locked)], failed
    assert {d.doc_id for d in list_documents(db, Layout())} == {"a.md", "locked/b.md", "locked/c.md"}


@pytest.mark.parametrize("listable", [False, True])
def test_folders_out_of_reach_in_two_roots_neither_clash_nor_stop_the_cli(dsn, tmp_path, monkeypatch, capsys,
                                                                          listable):
    """A review of the fix above: a folder the walk could not read took part in the doc-id clash check, so two
    disks' lost+found folders refused the whole run ("would be stored as document 'lost+found'"); and the CLI's
    own look for mistyped paths (Path.exists) still raised PermissionError on a file out of reach, exit 1."""
    from onetrip import cli

    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for v, name in ((v1, "one"), (v2, "two")):
        (v / "lost+found").mkdir(parents=True)
        (v / f"{name}.md").write_text(_doc(name))
        (v / "lost+found" / "lost.md").write_text(_doc("lost " + name))  # one id in both: out of reach, no clash
    _out_of_reach(monkeypatch, [v1 / "lost+found", v2 / "lost+found"], listable)
    code = cli.main(["ingest", "--dsn", dsn, "--prefix", "reach_", str(v1), str(v2)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 3, err  # some files failed, the others stored
    expected = ([str(v / "lost+found" / "lost.md") for v in (v1, v2)] if listable
                else [str(v1 / "lost+found"), str(v2 / "lost+found")])
    assert all(f"failed: {path}: " in err for path in expected), err
    with psycopg.connect(dsn) as c:
        assert {r[0] for r in c.execute("SELECT doc_id FROM reach_documents")} == {"one.md", "two.md"}


@pytest.mark.parametrize("dim", ["8", None, 8.0, True, 0])
def test_an_embedder_whose_dim_is_no_positive_integer_is_named(db, tmp_path, statement_log, dim):
    """An embedder with ``dim = "8"`` (or None) over vector(8) tables had been told 'embedder hash-test makes
    8-d vectors but the sections table stores vector(8)': a DimensionMismatchError contradicting itself."""
    from onetrip import DimensionMismatchError

    init_schema(db, Layout(dim=8))
    (tmp_path / "a.md").write_text(_doc("a"))
    emb = HashEmbedder(8)
    emb.dim = dim
    kind = TypeError if dim != 0 else ValueError
    with statement_log.watch(db) as w:
        with pytest.raises(kind, match=r"embedder hash-test's dim must be a positive integer.*got "
                                       + ("0$" if dim == 0 else type(dim).__name__)) as e:
            ingest_paths(db, [tmp_path], layout=Layout(dim=8), embedder=emb)
    assert not isinstance(e.value, DimensionMismatchError)
    assert not [s for s in w.statements if s.split()[:1] in (["INSERT"], ["COPY"], ["DELETE"], ["BEGIN"])]
    emb.dim = np.int64(8)  # numpy's integers stay welcome
    assert ingest_paths(db, [tmp_path], layout=Layout(dim=8), embedder=emb).new == 1
