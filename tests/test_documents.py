"""Listing and deleting documents (library and CLI) on a real server."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from onetrip import (
    Layout,
    Retriever,
    SchemaMissingError,
    delete_document,
    ingest_paths,
    init_schema,
    list_documents,
    prune_history,
    read_layout,
    refresh_term_stats,
)
from onetrip.connection import connect
from onetrip.store import DocumentRecord, replace_document, set_document_access

from .embedders import HashEmbedder
from .test_cli import onetrip
from .test_ingest import counted_words

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
    human = onetrip("documents", dsn=dsn).stdout.splitlines()
    keep = next(line.split("\t") for line in human if line.startswith("keep.md\t"))
    sections = next(d["section_count"] for d in listed if d["doc_id"] == "keep.md")
    assert keep[1:3] == ["revision 1", f"{sections} section" + ("" if sections == 1 else "s")], keep
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
        assert res.stdout.splitlines() == ["deleted 1 document"]
        # its sections are gone, and so is its word from lexical search's weights (recounted by the command)
        assert conn.execute("SELECT count(*) FROM sections WHERE doc_id = 'drop.md'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM term_stats WHERE lexeme = %s", (word,)).fetchone()[0] == 0
        with Retriever(conn) as r:
            assert {h.section.doc_id for h in r.search("zymurgyxq", k=5)} == {"keep.md"}
    assert [d["doc_id"] for d in json.loads(onetrip("documents", "--json", dsn=dsn).stdout)] == ["keep.md"]
    res = onetrip("delete", "keep.md", "--prefix", "bad;name", dsn=dsn)
    assert res.returncode == 2 and "not allowed" in res.stderr
    # tables from before term_stats and section_history: a deletion commits with the mark that says the word
    # weights are behind (in term_stats), so it is refused whole, naming the fix (its recount had failed after
    # the deletion committed); prune's raw UndefinedTable names the fix now
    with connect(dsn) as conn:
        conn.execute("DROP TABLE term_stats, section_history")
    res = onetrip("delete", "keep.md", dsn=dsn)
    assert res.returncode == 1 and res.stdout == "", (res.stdout, res.stderr)
    assert "term_stats" in res.stderr and "onetrip init" in res.stderr, res.stderr
    assert [d["doc_id"] for d in json.loads(onetrip("documents", "--json", dsn=dsn).stdout)] == ["keep.md"]
    res = onetrip("prune", dsn=dsn)
    assert res.returncode == 1 and "section_history" in res.stderr and "run `onetrip init` first" in res.stderr \
        and "UndefinedTable" not in res.stderr, res.stderr
    res = onetrip("prune", "--doc-id", "keep.md", dsn=dsn)
    assert res.returncode == 1 and "run `onetrip init` first" in res.stderr, res.stderr


def test_cli_no_recount_on_ingest_and_delete(dsn, tmp_path):
    """`ingest --no-recount` and `delete --no-recount` leave the word weights (and the mark saying they are
    behind) to `refresh-term-stats` or the next run, and say so; without the flag each command recounts."""
    from onetrip.cli import RECOUNT_LEFT
    from onetrip.store import TERM_STATS_BEHIND

    def words() -> set[str]:
        with connect(dsn) as conn:
            return counted_words(conn)

    write_docs(tmp_path, **{"keep.md": f"# Kept\n\nPlain words about gardening.{PAD}\n"})
    assert onetrip("ingest", str(tmp_path), dsn=dsn).returncode == 0
    assert "garden" in words() and TERM_STATS_BEHIND not in words()
    write_docs(tmp_path, **{"drop.md": f"# Dropped\n\nThe word zymurgyxq appears only here.{PAD}\n"})
    res = onetrip("ingest", str(tmp_path), "--no-recount", "--json", dsn=dsn)
    assert res.returncode == 0 and RECOUNT_LEFT in res.stderr, res.stderr
    summary = json.loads(res.stdout)
    assert (summary["new"], summary["recounted"], summary["words_behind"]) == (1, False, True)
    assert "zymurgyxq" not in words() and TERM_STATS_BEHIND in words()
    res = onetrip("refresh-term-stats", dsn=dsn)
    assert res.returncode == 0 and "zymurgyxq" in words() and TERM_STATS_BEHIND not in words()
    res = onetrip("delete", "drop.md", "--no-recount", dsn=dsn)
    assert res.returncode == 0 and res.stdout.splitlines() == ["deleted 1 document"] and RECOUNT_LEFT in res.stderr
    assert "zymurgyxq" in words() and TERM_STATS_BEHIND in words()  # counted until the next recount, marked
    res = onetrip("delete", "ghost.md", "--no-recount", dsn=dsn)
    assert res.returncode == 3 and RECOUNT_LEFT not in res.stderr  # nothing deleted, nothing left behind
    res = onetrip("ingest", str(tmp_path / "keep.md"), "--json", dsn=dsn)  # unchanged, but the mark says recount
    assert json.loads(res.stdout)["recounted"] is True and RECOUNT_LEFT not in res.stderr, res.stderr
    assert "zymurgyxq" not in words() and "garden" in words() and TERM_STATS_BEHIND not in words()


def test_a_deletion_whose_recount_never_comes_has_the_next_ingest_recount(db, tmp_path):
    """A stopped `onetrip delete` (its deletions commit one by one before its recount) or a library caller of
    delete_document had left the deleted words counted and nothing saying so: the next ingest said
    recounted False. Each deletion now commits with the mark; nothing deleted, nothing marked."""
    from onetrip.store import TERM_STATS_BEHIND

    layout = init_schema(db)
    write_docs(tmp_path, **{"keep.md": f"# Kept\n\nPlain words about gardening.{PAD}\n",
                            "drop.md": f"# Dropped\n\nThe word zymurgyxq appears only here.{PAD}\n"})
    assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).recounted
    (tmp_path / "drop.md").unlink()
    assert not delete_document(db, layout, "ghost.md") and TERM_STATS_BEHIND not in counted_words(db)
    assert delete_document(db, layout, "drop.md")
    assert "zymurgyxq" in counted_words(db) and TERM_STATS_BEHIND in counted_words(db)
    report = ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())  # stores nothing new
    assert (report.unchanged, report.recounted) == (1, True)
    assert "zymurgyxq" not in counted_words(db) and TERM_STATS_BEHIND not in counted_words(db)


@pytest.fixture
def five_docs(db, tmp_path) -> Layout:
    """a, b, d public; c and e readable by "hr" only (so a public page skips them)."""
    layout = init_schema(db)
    pub, sec = tmp_path / "pub", tmp_path / "sec"
    pub.mkdir()
    sec.mkdir()
    for name in ("a", "b", "d"):
        write_docs(pub, **{f"{name}.md": f"# {name.upper()}\n\nPublic {name}.{PAD}\n"})
    for name in ("c", "e"):
        write_docs(sec, **{f"{name}.md": f"# {name.upper()}\n\nSecret {name}.{PAD}\n"})
    assert ingest_paths(db, [pub], layout=layout, embedder=HashEmbedder()).new == 3
    assert ingest_paths(db, [sec], layout=layout, embedder=HashEmbedder(), acl=("hr",)).new == 2
    return layout


def pages(db, layout, limit: int, **kw) -> list[list[str]]:
    """Every page of list_documents, each next one after the previous page's last doc_id."""
    out: list[list[str]] = []
    after = None
    while True:
        page = [d.doc_id for d in list_documents(db, layout, limit=limit, after=after, **kw)]
        out.append(page)
        if len(page) < limit:
            return out
        after = page[-1]


def test_list_documents_pages_by_doc_id_in_one_statement_each(db, five_docs, statement_log):
    layout = five_docs
    everything = list_documents(db, layout)
    assert [d.doc_id for d in everything] == ["a.md", "b.md", "c.md", "d.md", "e.md"]
    assert pages(db, layout, 2) == [["a.md", "b.md"], ["c.md", "d.md"], ["e.md"]]
    assert pages(db, layout, 1) == [["a.md"], ["b.md"], ["c.md"], ["d.md"], ["e.md"], []]
    assert list_documents(db, layout, limit=2, after="b.md") == everything[2:4]  # the same DocumentInfo rows
    assert list_documents(db, layout, after="c.md") == everything[3:]  # after alone: the rest
    assert list_documents(db, layout, limit=100) == everything
    assert list_documents(db, layout, limit=2, after="e.md") == []  # past the end
    assert list_documents(db, layout, after="zzz") == []
    assert [d.doc_id for d in list_documents(db, layout, limit=2, after="b")] == ["b.md", "c.md"]  # not stored
    for limit in (1, 2, 3):
        with statement_log.watch(db) as w:
            list_documents(db, layout, limit=limit, after="a.md")
        assert len(w.statements) == 1, w.statements
        assert "LIMIT" in w.statements[0] and "doc_id >" in w.statements[0]


def test_a_late_page_reads_from_its_cursor_under_a_generic_plan(db, five_docs):
    """The cursor is an index condition even in a generic plan (a prepared statement PostgreSQL plans once for
    any values, or plan_cache_mode = force_generic_plan): '(after IS NULL OR doc_id > after)' had been a filter
    there, and the page after the 98,000th of 100k documents read every earlier row (25 ms against 4 ms)."""
    from psycopg import sql

    from onetrip.store import list_documents_query

    q, params = list_documents_query(five_docs, principals=(), limit=2, after="b.md")
    names = ["c", "p", "a", "n", "e", "w"]
    text = q.as_string(db)
    for i, name in enumerate(names, 1):
        text = text.replace(f"%({name})s", f"${i}")
    assert "%(" not in text
    try:
        # the simple query protocol: psycopg's execute would send the $n as its own (missing) parameters
        res = db.pgconn.exec_(f"PREPARE page(text, text[], text, bigint, text, text) AS {text}".encode())
        assert res.error_message == b"", res.error_message
        db.execute("SET plan_cache_mode = force_generic_plan")
        db.execute("SET enable_seqscan = off")  # five rows: a sequential scan would do, as it would not for 100k
        values = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)  # EXECUTE takes no bound parameters
        plan = "\n".join(r[0] for r in db.execute(sql.SQL("EXPLAIN EXECUTE page({})").format(values)).fetchall())
        assert "Index Cond: (doc_id > $3)" in plan, plan
        assert [r[0] for r in db.execute(sql.SQL("EXECUTE page({})").format(values)).fetchall()] == ["d.md"]
    finally:
        db.execute("RESET plan_cache_mode")
        db.execute("RESET enable_seqscan")
        db.execute("DEALLOCATE ALL")


def test_list_documents_pages_count_only_what_the_principals_may_read(db, five_docs):
    """A page holds `limit` readable documents (hidden ones neither returned nor counted), and a hidden
    doc_id given as ``after`` answers as any other string would: whether it is stored does not show."""
    layout = five_docs
    assert pages(db, layout, 2, principals=()) == [["a.md", "b.md"], ["d.md"]]
    assert pages(db, layout, 2, principals=["hr"]) == [["a.md", "b.md"], ["c.md", "d.md"], ["e.md"]]
    assert pages(db, layout, 1, principals=["eng"], collection="default") == [["a.md"], ["b.md"], ["d.md"], []]
    hidden_after = [d.doc_id for d in list_documents(db, layout, principals=(), limit=2, after="c.md")]
    assert hidden_after == ["d.md"]
    delete_document(db, layout, "c.md")
    assert [d.doc_id for d in list_documents(db, layout, principals=(), limit=2, after="c.md")] == hidden_after


def test_list_documents_refuses_a_bad_limit_or_after(db, five_docs):
    layout = five_docs
    for bad in (True, False, 2.0, "2"):
        with pytest.raises(TypeError, match="limit must be an integer"):
            list_documents(db, layout, limit=bad)
    for bad in (0, -1, 2**63):
        with pytest.raises(ValueError, match=r"limit must be an integer from 1 to \d+, got"):
            list_documents(db, layout, limit=bad)
    for bad in (5, b"a.md", ["a.md"]):
        with pytest.raises(TypeError, match="after must be a string"):
            list_documents(db, layout, after=bad)
    with pytest.raises(ValueError, match="after 'a\\\\x00' holds a NUL"):
        list_documents(db, layout, after="a\x00")
    with pytest.raises(ValueError, match="after .* is not valid Unicode"):
        list_documents(db, layout, after="a\udcff")
    import numpy as np

    assert [d.doc_id for d in list_documents(db, layout, limit=np.int64(1))] == ["a.md"]  # numpy's ints, as keep=


def test_cli_documents_pages_with_limit_and_after(dsn, tmp_path):
    """stdout keeps its shape (the JSON list); the next page's --after is said on stderr, and only when more
    documents follow (asked as one row more in the same statement)."""
    for name in ("a", "b", "c", "d", "-e"):
        write_docs(tmp_path, **{f"{name}.md": f"# {name}\n\nText {name}.{PAD}\n"})
    assert onetrip("init", dsn=dsn).returncode == 0
    assert onetrip("ingest", str(tmp_path), dsn=dsn).returncode == 0
    everything = json.loads(onetrip("documents", "--json", dsn=dsn).stdout)
    ids = [d["doc_id"] for d in everything]
    assert sorted(ids) == ["-e.md", "a.md", "b.md", "c.md", "d.md"]
    seen: list[str] = []
    after: list[str] = []
    for _ in range(10):
        res = onetrip("documents", "--json", "--limit", "2", *after, dsn=dsn)
        assert res.returncode == 0, res.stderr
        page = json.loads(res.stdout)
        assert isinstance(page, list) and len(page) <= 2
        seen += [d["doc_id"] for d in page]
        nxt = [line for line in res.stderr.splitlines() if line.startswith("next page: ")]
        if not nxt:
            break
        assert nxt == [f"next page: --after={page[-1]['doc_id']}"]
        after = [nxt[0].removeprefix("next page: ")]  # '--after=-e.md' too: argparse takes it with the '='
    assert seen == ids  # each once, in order
    assert json.loads(onetrip("documents", "--json", "--limit", "5", dsn=dsn).stdout) == everything
    res = onetrip("documents", "--json", "--limit", "5", dsn=dsn)
    assert "next page" not in res.stderr  # exactly the last page: nothing follows
    res = onetrip("documents", "--limit", "1", f"--after={ids[0]}", dsn=dsn)  # the table
    assert res.stdout.startswith(f"{ids[1]}\trevision 1") and len(res.stdout.splitlines()) == 1
    assert res.stderr.splitlines()[0] == "1 document" and f"next page: --after={ids[1]}" in res.stderr
    res = onetrip("documents", "--json", "--after", "zzz", dsn=dsn)
    assert (res.returncode, json.loads(res.stdout), res.stderr) == (0, [], "")
    for bad, why in ((["--limit", "0"], "error: --limit must be an integer from 1"),
                     (["--limit", "-3"], "error: --limit must be an integer from 1"),
                     (["--limit", "two"], "invalid int value"),
                     (["--after", "a\x01b\udcff"], "not valid Unicode")):
        res = onetrip("documents", *bad, dsn=dsn)
        assert res.returncode == 2 and why in res.stderr and res.stdout == "", (bad, res.stderr)


_TAKING_A_CONNECTION = {
    "ingest_paths": lambda c, tmp: ingest_paths(c, [tmp], layout=Layout(), embedder=HashEmbedder()),
    "init_schema": lambda c, tmp: init_schema(c, Layout()),
    "list_documents": lambda c, tmp: list_documents(c, Layout()),
    "delete_document": lambda c, tmp: delete_document(c, Layout(), "a.md"),
    "prune_history": lambda c, tmp: prune_history(c, Layout()),
    "refresh_term_stats": lambda c, tmp: refresh_term_stats(c, Layout()),
    "read_layout": lambda c, tmp: read_layout(c),
    "replace_document": lambda c, tmp: replace_document(c, Layout(), DocumentRecord("a.md", "", "A", "h"), [],
                                                  np.zeros((0, 384), np.float32)),
    "set_document_access": lambda c, tmp: set_document_access(c, Layout(), "a.md", "h", "x", None),
}


@pytest.mark.parametrize("name", list(_TAKING_A_CONNECTION))
def test_a_dsn_none_or_an_async_connection_is_named_by_every_function_taking_a_connection(
        db, dsn, tmp_path, statement_log, name):
    """A DSN, None or an AsyncConnection given where a psycopg Connection belongs had failed with an unnamed
    AttributeError ('str' object has no attribute 'execute' / 'autocommit'; for an async one "'coroutine' object
    has no attribute 'fetchall'" and a never-awaited warning, or a TypeError about _AsyncGeneratorContextManager)."""
    import asyncio

    import psycopg

    call = _TAKING_A_CONNECTION[name]
    init_schema(db)
    write_docs(tmp_path, **{"a.md": "# A\n\nText." + PAD})
    for given, kind, hint in ((dsn, "str", r"pass onetrip\.connect\(dsn\)"), (None, "None", r"pass onetrip\.connect"),
                              (5, "int", r"pass onetrip\.connect\(dsn\)")):
        with pytest.raises(TypeError, match=rf"^{name} needs a psycopg\.Connection \(onetrip\.connect\(\)\), got "
                                            rf"{kind}: {hint}"):
            call(given, tmp_path)

    async def with_async() -> None:
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            with statement_log.watch(aconn) as w:
                with pytest.raises(TypeError, match=rf"^{name} needs a psycopg\.Connection .*got AsyncConnection: "
                                                    rf"an async one; {name} is synchronous"):
                    call(aconn, tmp_path)
            assert w.statements == []
            assert (await (await aconn.execute("SELECT 1")).fetchone()) == (1,)  # nothing left pending on it
        finally:
            await aconn.close()

    asyncio.run(with_async())
    assert list_documents(db, Layout()) == []  # nothing was written through any of them
