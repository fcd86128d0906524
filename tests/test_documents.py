"""Listing and deleting documents (library and CLI) on a real server."""

from __future__ import annotations

import json
import threading
import time

import pytest

from onetrip import (
    Layout,
    Retriever,
    SchemaMissingError,
    delete_document,
    ingest_paths,
    init_schema,
    list_documents,
)
from onetrip.connection import connect

from .embedders import HashEmbedder
from .test_cli import onetrip

PAD = " This sentence pads the section so that it is not merged away as a tiny one."


def write_docs(folder, **docs: str) -> None:
    for name, text in docs.items():
        (folder / name).write_text(text)


def section_rows(db, doc_id: str) -> list[tuple]:
    return db.execute("SELECT section_id, revision, content FROM sections WHERE doc_id = %s ORDER BY sequence_index",
                      (doc_id,)).fetchall()


def test_list_then_delete_one_document_leaves_the_others_untouched(db, tmp_path):
    layout = init_schema(db)
    write_docs(tmp_path, **{"a.md": f"# Alpha\n\nFirst.{PAD}\n\n## Child\n\nMore.{PAD}\n",
                            "b.md": f"# Beta\n\nSecond.{PAD}\n"})
    ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    (tmp_path / "a.md").write_text(f"# Alpha\n\nFirst, revised.{PAD}\n\n## Child\n\nMore.{PAD}\n")
    other = tmp_path / "other"
    other.mkdir()
    write_docs(other, **{"c.md": f"# Gamma\n\nThird.{PAD}\n"})
    ingest_paths(db, [tmp_path / "a.md", other], layout=layout, embedder=HashEmbedder(), collection="private",
                 acl=("hr",))

    docs = list_documents(db, layout)
    assert [d.doc_id for d in docs] == ["a.md", "b.md", "c.md"]
    a, b, c = docs
    assert (a.revision, a.section_count, a.collection, a.acl) == (2, 2, "private", ("hr",))
    assert (b.revision, b.collection, b.acl) == (1, "default", None)
    for d in docs:
        assert d.section_count == len(section_rows(db, d.doc_id))
        stored = db.execute("SELECT sum(context_tokens) FROM sections WHERE doc_id = %s", (d.doc_id,)).fetchone()[0]
        assert d.token_count == stored
    assert [d.doc_id for d in list_documents(db, layout, collection="private")] == ["a.md", "c.md"]
    assert list_documents(db, layout, collection="nowhere") == []
    # principals as a search reads with them: None every document, [] public only, else those sharing one
    assert [d.doc_id for d in list_documents(db, layout, principals=())] == ["b.md"]
    assert [d.doc_id for d in list_documents(db, layout, principals=["eng"])] == ["b.md"]
    assert list_documents(db, layout, principals=["eng", "hr"]) == docs
    assert [d.doc_id for d in list_documents(db, layout, collection="default", principals=["hr"])] == ["b.md"]
    with pytest.raises(TypeError, match=r"principals must be a list of strings such as \['hr'\]"):
        list_documents(db, layout, principals="hr")  # not the principals h and r
    with pytest.raises(ValueError, match="principal .* holds a NUL"):
        list_documents(db, layout, principals=["a\x00"])

    before_b, before_c = section_rows(db, "b.md"), section_rows(db, "c.md")
    deleted_rows = section_rows(db, "a.md")
    assert delete_document(db, layout, "a.md", keep_history=True) is True
    assert section_rows(db, "a.md") == []
    assert [d.doc_id for d in list_documents(db, layout)] == ["b.md", "c.md"]
    assert section_rows(db, "b.md") == before_b and section_rows(db, "c.md") == before_c
    archived = db.execute("SELECT section_id, revision, content FROM section_history WHERE doc_id = 'a.md' "
                          "ORDER BY sequence_index").fetchall()
    assert archived == deleted_rows  # the deleted revision (2), archived as it was
    assert delete_document(db, layout, "a.md") is False  # already gone
    assert delete_document(db, layout, "never-stored.md") is False
    assert delete_document(db, layout, "b.md") is True  # without keep_history: nothing archived
    assert db.execute("SELECT count(*) FROM section_history WHERE doc_id = 'b.md'").fetchone()[0] == 0
    assert [d.doc_id for d in list_documents(db, layout)] == ["c.md"]


def test_delete_waits_for_a_concurrent_reingest_of_the_same_document(db, dsn, tmp_path):
    """delete_document takes replace_document's per-document lock: the two never interleave."""
    layout = init_schema(db)
    write_docs(tmp_path, **{"a.md": f"# Alpha\n\nFirst.{PAD}\n"})
    ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    holder = connect(dsn)
    deleter = connect(dsn)
    result: list[bool] = []
    try:
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("a.md",))  # as an ingest holds it
            t = threading.Thread(target=lambda: result.append(delete_document(deleter, layout, "a.md")))
            t.start()
            pid = deleter.info.backend_pid
            for _ in range(200):  # until the deleter's backend is seen waiting on that lock (not a timing claim)
                row = db.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone()
                if row == ("Lock", "advisory"):
                    break
                time.sleep(0.05)
            assert row == ("Lock", "advisory")
            assert result == [] and len(section_rows(db, "a.md")) == 1  # nothing deleted while the lock is held
        t.join(timeout=30)
        assert result == [True] and section_rows(db, "a.md") == []
    finally:
        holder.close()
        deleter.close()


def test_missing_tables_name_the_fix(db):
    layout = Layout(prefix="nothing_here_")
    with pytest.raises(SchemaMissingError, match=r"nothing_here_documents.*onetrip init"):
        list_documents(db, layout)
    with pytest.raises(SchemaMissingError, match="onetrip init"):
        delete_document(db, layout, "a.md")


def test_cli_documents_and_delete(dsn, tmp_path):
    write_docs(tmp_path, **{"keep.md": f"# Kept\n\nPlain words about gardening.{PAD}\n",
                            "drop.md": f"# Dropped\n\nThe word zymurgyxq appears only here.{PAD}\n"})
    assert onetrip("init", dsn=dsn).returncode == 0
    assert onetrip("ingest", str(tmp_path), dsn=dsn).returncode == 0
    res = onetrip("documents", "--json", dsn=dsn)
    assert res.returncode == 0, res.stderr
    listed = json.loads(res.stdout)
    assert [d["doc_id"] for d in listed] == ["drop.md", "keep.md"]
    assert all(d["revision"] == 1 and d["section_count"] >= 1 and d["acl"] is None for d in listed)
    assert "keep.md\trevision 1" in onetrip("documents", dsn=dsn).stdout
    with connect(dsn) as conn:  # drop.md readable by hr only, as `ingest --acl hr` stores it
        for table in ("documents", "sections"):
            conn.execute(f"UPDATE {table} SET acl = ARRAY['hr'] WHERE doc_id = 'drop.md'")
    for principals, want in (([], ["drop.md", "keep.md"]), (["--principal", "eng"], ["keep.md"]),
                             (["--principal", "eng", "--principal", "hr"], ["drop.md", "keep.md"])):
        res = onetrip("documents", "--json", *principals, dsn=dsn)
        assert [d["doc_id"] for d in json.loads(res.stdout)] == want, (principals, res.stderr)

    with connect(dsn) as conn:
        word = "zymurgyxq"
        assert conn.execute("SELECT count(*) FROM term_stats WHERE lexeme = %s", (word,)).fetchone()[0] == 1
        res = onetrip("delete", "drop.md", "ghost.md", dsn=dsn)
        assert res.returncode == 3 and "not stored: ghost.md" in res.stderr, res.stderr
        assert "deleted 1 document(s)" in res.stdout
        # its sections are gone, and so is its word from lexical search's weights (recounted by the command)
        assert conn.execute("SELECT count(*) FROM sections WHERE doc_id = 'drop.md'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM term_stats WHERE lexeme = %s", (word,)).fetchone()[0] == 0
        with Retriever(conn) as r:
            assert {h.section.doc_id for h in r.search("zymurgyxq", k=5)} == {"keep.md"}
    assert [d["doc_id"] for d in json.loads(onetrip("documents", "--json", dsn=dsn).stdout)] == ["keep.md"]
    res = onetrip("delete", "keep.md", "--prefix", "bad;name", dsn=dsn)
    assert res.returncode == 2 and "not allowed" in res.stderr
