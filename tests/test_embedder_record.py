"""One table, one embedding model: ingest records the model's name, and a text is never embedded with another.

Two models of one dimension (many are 384-d) make vectors of the same shape
whose distances mean nothing to each other; without the record, a search with
the wrong model returns wrong hits and no error.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from onetrip import (
    AsyncRetriever,
    DimensionMismatchError,
    EmbedderMismatchError,
    Retriever,
    SentenceTransformerEmbedder,
    connect,
    delete_document,
    init_schema,
    list_documents,
)
from onetrip.embedders import DEFAULT_MODEL, default_model_path, embedder_probe, model_name
from onetrip.ingest import ingest_paths
from onetrip.layout import Layout
from onetrip.store import recorded_embedders

from .embedders import HashEmbedder, linked_model_copy
from .test_cli import DEMO, onetrip

PAD = " This sentence pads the section so that it is not merged away as a tiny one."


class OtherHashEmbedder(HashEmbedder):
    """Another model of the same dimension: same-shaped vectors, unrelated to HashEmbedder's."""

    name = "hash-other"

    def _one(self, text: str) -> np.ndarray:
        return super()._one("other model: " + text)


def write_docs(folder: Path, *names: str) -> Path:
    folder.mkdir(exist_ok=True)
    for n in names:
        (folder / f"{n}.md").write_text(f"# {n.title()}\n\nAbout {n}.{PAD}\n\n## Details\n\nMore on {n}.{PAD}\n")
    return folder


def documents(db: psycopg.Connection) -> dict[str, str | None]:
    return dict(db.execute("SELECT doc_id, metadata ->> 'onetrip_embedder' FROM documents").fetchall())


def test_ingest_records_the_embedder_and_refuses_another_before_any_write(db, tmp_path):
    layout = init_schema(db, Layout())
    assert recorded_embedders(db, layout) == []
    rep = ingest_paths(db, [write_docs(tmp_path / "a", "alpha", "beta")], layout=layout, embedder=HashEmbedder())
    assert rep.new == 2
    assert documents(db) == {"alpha.md": "hash-test", "beta.md": "hash-test"}
    assert recorded_embedders(db, layout) == ["hash-test"]
    assert {d.doc_id: d.embedder for d in list_documents(db, layout)} == documents(db)
    before = db.execute("SELECT doc_id, section_id, embedding::text FROM sections ORDER BY 1, 2").fetchall()

    # a new document, and a changed one, with another model of the same dimension: refused, nothing written
    write_docs(tmp_path / "a", "gamma")
    (tmp_path / "a" / "beta.md").write_text(f"# Beta\n\nChanged.{PAD}\n")
    with pytest.raises(EmbedderMismatchError) as e:
        ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=OtherHashEmbedder(), force=True)
    assert "'hash-test'" in str(e.value) and "'hash-other'" in str(e.value) and "documents" in str(e.value)
    assert documents(db) == {"alpha.md": "hash-test", "beta.md": "hash-test"}
    assert db.execute("SELECT doc_id, section_id, embedding::text FROM sections ORDER BY 1, 2").fetchall() == before

    # another dimension is refused by its own error, also before any write
    with pytest.raises(DimensionMismatchError, match="8-d vectors"):
        ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=HashEmbedder(dim=8))

    # the same model goes on; once the table is empty, another model may start it afresh
    assert ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=HashEmbedder()).new == 1
    for doc_id in list(documents(db)):
        assert delete_document(db, layout, doc_id)
    assert ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=OtherHashEmbedder()).new == 3
    assert recorded_embedders(db, layout) == ["hash-other"]


class RetrainedHashEmbedder(HashEmbedder):
    """HashEmbedder's name over other weights: a fine-tune saved in a folder of the same name, or weights
    replaced in place. Same name, same dimension: only the vectors tell the two apart."""

    def _one(self, text: str) -> np.ndarray:
        return super()._one("retrained: " + text)


def test_a_model_of_the_same_name_with_other_weights_is_refused_unless_forced(db, tmp_path):
    """The record was the model's folder name only, so a second model saved as ``model`` (or new weights in the
    same folder) was taken for the first, and its vectors were mixed with the first's. Ingest now records a
    probe (the start of the model's vector for a fixed sentence) and refuses a model whose probe differs, before
    any write; --force embeds the files again with it on purpose, and a later plain run names the documents the
    forced run did not cover."""
    from onetrip.embedders import embedder_probe
    from onetrip.store import EMBEDDER_PROBE_KEY

    def probes() -> dict[str, object]:
        return dict(db.execute("SELECT doc_id, metadata -> %s FROM documents ORDER BY 1",
                               (EMBEDDER_PROBE_KEY,)).fetchall())

    def snapshot() -> list:
        return db.execute("SELECT doc_id, section_id, embedding::text FROM sections ORDER BY 1, 2").fetchall()

    layout = init_schema(db, Layout())
    a, b = write_docs(tmp_path / "a", "alpha", "beta"), write_docs(tmp_path / "b", "delta")
    assert ingest_paths(db, [a, b], layout=layout, embedder=HashEmbedder()).new == 3
    old, new = embedder_probe(HashEmbedder()), embedder_probe(RetrainedHashEmbedder())
    assert old is not None and new is not None and len(old) == 16 and old != new
    assert probes() == {"alpha.md": old, "beta.md": old, "delta.md": old}
    # the same model again (another instance): accepted
    assert ingest_paths(db, [a], layout=layout, embedder=HashEmbedder()).unchanged == 2

    before = snapshot()
    write_docs(tmp_path / "a", "gamma")
    with pytest.raises(EmbedderMismatchError, match=r"3 document\(s\) in documents \('alpha.md', 'beta.md', "
                                                    r"'delta.md'\) were embedded by a model also "
                                                    r"named 'hash-test' whose vectors differ.*--force"):
        ingest_paths(db, [a], layout=layout, embedder=RetrainedHashEmbedder())
    assert snapshot() == before and set(probes()) == {"alpha.md", "beta.md", "delta.md"}

    # forced: the weights changed on purpose; the files given are embedded again with them
    forced = ingest_paths(db, [a], layout=layout, embedder=RetrainedHashEmbedder(), force=True)
    assert (forced.new, forced.changed) == (1, 2)
    assert probes() == {"alpha.md": new, "beta.md": new, "delta.md": old, "gamma.md": new}
    with pytest.raises(EmbedderMismatchError, match=r"^1 document\(s\) in documents \('delta.md'\)"):  # not re-embedded
        ingest_paths(db, [a], layout=layout, embedder=RetrainedHashEmbedder())
    assert ingest_paths(db, [b], layout=layout, embedder=RetrainedHashEmbedder(), force=True).changed == 1
    assert ingest_paths(db, [a, b], layout=layout, embedder=RetrainedHashEmbedder()).unchanged == 4

    # documents stored before probes were recorded are compared by name only
    db.execute("UPDATE documents SET metadata = metadata - %s", (EMBEDDER_PROBE_KEY,))
    assert ingest_paths(db, [a, b], layout=layout, embedder=HashEmbedder()).unchanged == 4


def test_a_retriever_refuses_a_model_of_the_same_name_with_other_weights(db, dsn, tmp_path, statement_log):
    """A retriever compared the model's name only, so one of the same folder name but other weights embedded
    queries for another model's vectors: wrong hits, no error. It reads the probe with the name, when it is
    made, and checks it once, when it first embeds a text (one embedding of the probe sentence, no statement);
    embedding queries are not checked, and a search still sends one statement."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha", "beta")], layout=layout, embedder=HashEmbedder())
    wrong = Retriever(db, embedder=RetrainedHashEmbedder())
    assert wrong.recorded_embedders == ["hash-test"] and wrong.recorded_probe is not None
    for call in (lambda: wrong.search("alpha", 2), lambda: wrong.assemble("alpha", 2),
                 lambda: wrong.query_vector("alpha")):
        with pytest.raises(EmbedderMismatchError, match="also named 'hash-test' whose vectors differ"):
            call()
    assert wrong.search(HashEmbedder().embed_query("alpha"), 2)  # an embedding needs no model
    right = Retriever(db, embedder=HashEmbedder())
    with statement_log.watch(db) as w:
        hits = right.search("About alpha.", 2)
    assert len(w.statements) == 1, w.statements
    assert hits[0].section.doc_id == "alpha.md"
    # documents without a probe (stored before 2026-12-05): the name alone, as before
    db.execute("UPDATE documents SET metadata = metadata - 'onetrip_embedder_probe'")
    assert wrong.refresh_embedder_record() == ["hash-test"] and wrong.recorded_probe is None
    assert wrong.search("alpha", 2)

    db.execute("UPDATE documents SET metadata = metadata || jsonb_build_object('onetrip_embedder_probe', %s::jsonb)",
               (json.dumps(embedder_probe(HashEmbedder())),))
    asyncio.run(_async_wrong_then_right(dsn, RetrainedHashEmbedder(), "also named 'hash-test' whose vectors differ",
                                        search_many=True))


def test_a_document_stored_before_probes_hides_no_other_documents_probe(db, dsn, tmp_path):
    """The retriever read the first recorded document's probe, or none: one stored before probes were recorded
    hid the probe newer documents hold, and a model of the same name but other weights searched unchecked (ingest,
    reading every document's, refused it). Found by review."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    db.execute("UPDATE documents SET metadata = metadata - 'onetrip_embedder_probe'")  # as stored before probes
    ingest_paths(db, [write_docs(tmp_path / "b", "beta")], layout=layout, embedder=HashEmbedder())
    wrong = Retriever(db, embedder=RetrainedHashEmbedder())
    assert wrong.recorded_probe == embedder_probe(HashEmbedder())
    with pytest.raises(EmbedderMismatchError, match="also named 'hash-test' whose vectors differ"):
        wrong.search("beta", 1)
    asyncio.run(_async_wrong_then_right(dsn, RetrainedHashEmbedder(), "also named 'hash-test' whose vectors differ"))


def test_a_name_mismatch_is_said_before_the_model_loads(db, tmp_path, monkeypatch):
    """The dimension check (which loads a SentenceTransformerEmbedder's model: its dim) had come before the
    name's: another model's name was said after a 7 s load. Found by review."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    model = SentenceTransformerEmbedder()
    monkeypatch.setattr(type(model), "_load", lambda self: pytest.fail("the model was loaded"))
    with pytest.raises(EmbedderMismatchError, match="embedded with 'hash-test'"):
        Retriever(db, embedder=model).search("alpha", 1)


def test_a_record_refreshed_during_the_model_check_is_checked_again(db, tmp_path):
    """The check of the model ran once and was marked done; a `refresh_embedder_record` under way meanwhile
    (the HTTP service's /health on the event loop while a worker thread checks) reset the mark before the check
    set it, so the new record went unchecked until the next refresh. The check is marked done only against the
    record it read. Here the refresh happens inside the check (the embedder's name is read there)."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    r = Retriever(db, embedder=None)

    class RefreshingEmbedder(HashEmbedder):
        refreshes = 0

        @property
        def name(self) -> str:
            if RefreshingEmbedder.refreshes == 0:
                RefreshingEmbedder.refreshes += 1
                r.refresh_embedder_record()  # as /health would, while this check runs
            return "hash-test"

    r._embedder = RefreshingEmbedder()
    assert r.search("About alpha.", 1)
    assert r._embedder_checked is False  # checked against the old record: the new one is checked next time
    assert r.search("About alpha.", 1) and r._embedder_checked is True


def test_an_embedder_that_embeds_no_probe_is_checked_by_name_only(db, tmp_path):
    """A plug-in that embeds only the texts it knows (PrecomputedEmbedder) gives no probe: ingest goes on as
    before, records none, and compares names only."""
    from onetrip.embedders import PrecomputedEmbedder, embedder_probe
    from onetrip.ingest import embedding_text
    from onetrip.sections import parse_file

    layout = init_schema(db, Layout())
    folder = write_docs(tmp_path / "a", "alpha")
    parsed = parse_file(folder / "alpha.md")
    texts = [embedding_text(parsed.title, s.heading_path, s.content) for s in parsed.sections]
    hashed = HashEmbedder()
    pre = PrecomputedEmbedder({t: hashed.embed_query(t) for t in texts}, name="hash-test")
    assert embedder_probe(pre) is None
    assert ingest_paths(db, [folder], layout=layout, embedder=pre).new == 1
    assert db.execute("SELECT metadata ? 'onetrip_embedder_probe' FROM documents").fetchall() == [(False,)]


def test_a_retriever_embeds_text_only_with_the_recorded_model(db, tmp_path, statement_log):
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha", "beta")], layout=layout, embedder=HashEmbedder())
    wrong = Retriever(db, embedder=OtherHashEmbedder())
    assert wrong.recorded_embedders == ["hash-test"]
    for call in (lambda: wrong.search("alpha", 2), lambda: wrong.assemble("alpha", 2),
                 lambda: wrong.search_many(["alpha", "beta"], 2), lambda: wrong.query_vector("alpha")):
        with pytest.raises(EmbedderMismatchError, match="embedded with 'hash-test'.*embeds with 'hash-other'"):
            call()
    # embeddings and lexical search need no model: they still work
    assert wrong.search(HashEmbedder().embed_query("alpha"), 2)
    assert wrong.search("alpha", 2, mode="lexical")

    right = Retriever(db, embedder=HashEmbedder())
    with statement_log.watch(db) as w:  # the record was read when the retriever was made, not per search
        hits = right.search("About alpha.", 2)
    assert len(w.statements) == 1, w.statements
    assert hits[0].section.doc_id == "alpha.md"


def test_the_async_retriever_checks_the_same(dsn, db, tmp_path):
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())

    asyncio.run(_async_wrong_then_right(dsn, OtherHashEmbedder(), "'hash-test'"))


async def _async_wrong_then_right(dsn: str, wrong_embedder: HashEmbedder, match: str, *,
                                  search_many: bool = False) -> None:
    """An AsyncRetriever with ``wrong_embedder`` over documents HashEmbedder made: a text search raises
    EmbedderMismatchError (``match``), an embedding search works; one with HashEmbedder finds alpha.md."""
    wrong = await AsyncRetriever.create(dsn, embedder=wrong_embedder)
    try:
        assert wrong.recorded_embedders == ["hash-test"]
        with pytest.raises(EmbedderMismatchError, match=match):
            await wrong.search("alpha", 1)
        if search_many:
            with pytest.raises(EmbedderMismatchError, match=match):
                await wrong.search_many(["alpha", "beta"], 1)
        assert await wrong.search(HashEmbedder().embed_query("alpha"), 1)
    finally:
        await wrong.close()
    right = await AsyncRetriever.create(dsn, embedder=HashEmbedder())
    try:
        assert (await right.search("About alpha.", 1))[0].section.doc_id == "alpha.md"
    finally:
        await right.close()


def test_a_role_that_cannot_read_documents_still_searches(db, dsn, tmp_path):
    """A search-only role granted the sections table alone: no record to read, so no check, and no error."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    db.execute("DROP ROLE IF EXISTS onetrip_reader")
    db.execute("CREATE ROLE onetrip_reader LOGIN")
    try:
        db.execute("GRANT SELECT ON sections, term_stats TO onetrip_reader")
        with connect(psycopg.conninfo.make_conninfo(dsn, user="onetrip_reader")) as conn:
            r = Retriever(conn, embedder=OtherHashEmbedder())
            assert r.recorded_embedders == []
            assert r.search("alpha", 1)[0].section.doc_id == "alpha.md"
    finally:
        db.execute("DROP OWNED BY onetrip_reader")
        db.execute("DROP ROLE onetrip_reader")


def test_model_names_are_folder_names(tmp_path, monkeypatch):
    assert model_name(default_model_path()) == DEFAULT_MODEL
    assert SentenceTransformerEmbedder().name == DEFAULT_MODEL
    copy = linked_model_copy(tmp_path / "models" / "minilm-copy")
    monkeypatch.chdir(tmp_path)  # a relative and an absolute spelling of one folder give one name
    assert model_name("models/minilm-copy") == model_name(str(copy)) == "minilm-copy"
    assert model_name("not-a-folder") == "not-a-folder"


def test_cli_model_option(dsn, tmp_path):
    model = linked_model_copy(tmp_path / "minilm-copy")
    res = onetrip("ingest", str(DEMO), "--model", str(model), "--json", dsn=dsn)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["new"] == 3
    with psycopg.connect(dsn) as conn:
        assert {r[0] for r in conn.execute("SELECT metadata ->> 'onetrip_embedder' FROM documents")} == {"minilm-copy"}

    assert "\tembedder minilm-copy" in onetrip("documents", dsn=dsn).stdout
    res = onetrip("search", "Is tennis elbow covered?", "--json", dsn=dsn)  # the bundled model: refused
    assert res.returncode == 2
    assert "'minilm-copy'" in res.stderr and "--model" in res.stderr and DEFAULT_MODEL in res.stderr

    res = onetrip("search", "Is tennis elbow covered?", "-k", "1", "--json", dsn=dsn, ONETRIP_MODEL=str(model))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["doc_id"] == "travel-insurance-policy.md"

    res = onetrip("search", "anything", "--model", str(tmp_path / "missing"), dsn=dsn)
    assert res.returncode == 2 and "--model" in res.stderr and "is not a folder" in res.stderr
    # lexical search embeds nothing: neither a missing model folder nor the record stops it
    res = onetrip("search", "tennis elbow", "--mode", "lexical", "-k", "1", "--json", dsn=dsn,
                  ONETRIP_MODEL=str(tmp_path / "missing"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["doc_id"] == "travel-insurance-policy.md"


def test_http_answers_500_embedder_mismatch_and_health_warns(db, dsn, tmp_path):
    pytest.importorskip("uvicorn")
    from .test_http_service import assert_error, call, search, serving

    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    with serving(dsn, embedder_factory=OtherHashEmbedder) as base:
        # /health says so too (it had said a bare ok while every default search was 500: found by review), and
        # stays 200: a client sending embeddings needs no model
        status, data, _ = call(base, "GET", "/health")
        assert status == 200 and data["status"] == "ok", data
        assert [w["code"] for w in data["warnings"]] == ["embedder_mismatch"] and "'hash-test'" in \
            data["warnings"][0]["message"] and "with an embedding or in lexical mode works" in \
            data["warnings"][0]["message"], data
        assert_error(*search(base, {"query": "alpha"}), 500, "embedder_mismatch", "'hash-test'", "'hash-other'")
        status, data = search(base, {"embedding": HashEmbedder().embed_query("alpha").tolist(), "k": 1})
        assert status == 200 and data["hits"][0]["doc_id"] == "alpha.md"
        status, data, _ = call_many(base, {"queries": ["alpha", "beta"], "k": 1})
        assert_error(status, data, 500, "embedder_mismatch", "'hash-test'")
    # a model of the recorded name making vectors of another size: the service's fault, said as such
    with serving(dsn, embedder_factory=lambda: HashEmbedder(dim=16)) as base:
        assert_error(*search(base, {"query": "alpha"}), 500, "embedder_mismatch", "makes 16-d vectors",
                     "vector(384)")
        status, data, _ = call(base, "GET", "/health")
        assert status == 200 and "makes 16-d vectors" in data["warnings"][0]["message"], data


def call_many(base: str, body: dict) -> tuple:
    from .test_http_service import call

    return call(base, "POST", "/search_many", body)


def test_a_retriever_made_before_the_first_ingest_checks_after_a_refresh(db, dsn, tmp_path):
    layout = init_schema(db, Layout())
    early = Retriever(db, embedder=OtherHashEmbedder())  # e.g. a service started before the documents came
    assert early.recorded_embedders == []
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    assert early.search("alpha", 1)  # not checked: it read no record when it was made (README says so)
    assert early.refresh_embedder_record() == ["hash-test"]
    with pytest.raises(EmbedderMismatchError):
        early.search("alpha", 1)
    # and the other way: the documents deleted and ingested again with the retriever's model
    delete_document(db, layout, "alpha.md")
    ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=OtherHashEmbedder())
    assert early.refresh_embedder_record() == ["hash-other"]
    assert early.search("alpha", 1)[0].section.doc_id == "alpha.md"


def test_the_service_rereads_the_record_on_health(db, dsn, tmp_path):
    pytest.importorskip("uvicorn")
    from .test_http_service import assert_error, call, search, serving

    layout = init_schema(db, Layout())
    with serving(dsn, embedder_factory=OtherHashEmbedder) as base:
        assert call(base, "GET", "/health")[:2] == (200, {"status": "ok"})  # the retriever is made now, on empty tables
        ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
        assert "'hash-test'" in call(base, "GET", "/health")[1]["warnings"][0]["message"]
        assert_error(*search(base, {"query": "alpha"}), 500, "embedder_mismatch", "'hash-test'")


class SlowEmbedder(HashEmbedder):
    """Holds a first ingest inside its embedding step, so two first ingests overlap."""

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        return super().embed_documents(texts)


class SlowOtherEmbedder(SlowEmbedder, OtherHashEmbedder):
    name = "hash-other"


def _two_first_ingests(dsn: str, layout: Layout, tmp_path: Path, other: HashEmbedder) -> list[str]:
    """Two first ingests at once, one with SlowEmbedder and one with ``other``, each of a folder of its own;
    their outcomes ("new N" or "refused"), sorted."""
    outcomes: dict[str, str] = {}

    def run(name: str, embedder: HashEmbedder, folder: Path) -> None:
        with connect(dsn) as conn:
            try:
                rep = ingest_paths(conn, [folder], layout=layout, embedder=embedder)
                outcomes[name] = f"new {rep.new}"
            except EmbedderMismatchError:
                outcomes[name] = "refused"

    threads = [threading.Thread(target=run, args=("a", SlowEmbedder(), write_docs(tmp_path / "a", "alpha"))),
               threading.Thread(target=run, args=("b", other, write_docs(tmp_path / "b", "beta")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(outcomes.values())


def test_two_first_ingests_with_different_models_do_not_mix(db, dsn, tmp_path):
    layout = init_schema(db, Layout())
    outcomes = _two_first_ingests(dsn, layout, tmp_path, SlowOtherEmbedder())
    assert outcomes == ["new 1", "refused"], outcomes
    assert len(recorded_embedders(db, layout)) == 1
    assert len(documents(db)) == 1


def test_a_documents_own_metadata_is_not_a_record(db, tmp_path):
    """Front matter or a caller's metadata under "embedder" is kept as it is, and a non-string record is none."""
    layout = init_schema(db, Layout())
    (tmp_path / "fm.md").write_text(f"---\nembedder: my notes\n---\n# Front\n\nMatter.{PAD}\n")
    ingest_paths(db, [tmp_path / "fm.md"], layout=layout, embedder=HashEmbedder())
    meta = db.execute("SELECT metadata FROM documents").fetchone()[0]
    assert meta["embedder"] == "my notes" and meta["onetrip_embedder"] == "hash-test"
    db.execute("UPDATE documents SET metadata = metadata || '{\"onetrip_embedder\": {\"a\": 1}}'")
    assert recorded_embedders(db, layout) == [] and Retriever(db).recorded_embedders == []


def test_recorded_probes_name_each_probes_first_documents(db):
    """recorded_probes gives, per probe, its documents' count and first ids (by doc_id): for the probe most
    documents hold and for one a few hold. It had sorted every id of every probe to keep five. The rows are
    written in the reverse of the ids' order, so that a scan's order is not taken for the ids'."""
    from onetrip import store

    layout = init_schema(db, Layout())
    mine, other = embedder_probe(HashEmbedder()), embedder_probe(RetrainedHashEmbedder())
    db.execute("INSERT INTO documents (doc_id, source_uri, content_hash, metadata) "
               "SELECT 'd' || lpad(g::text, 3, '0') || '.md', 'file:///x', 'h', "
               "jsonb_build_object(%s::text, 'hash-test', %s::text, "
               "CASE WHEN g %% 10 = 3 THEN %s::jsonb ELSE %s::jsonb END) FROM generate_series(200, 1, -1) g",
               (store.EMBEDDER_KEY, store.EMBEDDER_PROBE_KEY, json.dumps(other), json.dumps(mine)))
    got = {json.dumps(p): (n, ids) for p, n, ids in store.recorded_probes(db, layout, "hash-test")}
    ids = [f"d{g:03}.md" for g in range(1, 201)]  # one length: the same order under any collation
    assert got == {json.dumps(mine): (180, [i for i in ids if not i.endswith("3.md")][:store.NAMED_IN_ERRORS]),
                   json.dumps(other): (20, [i for i in ids if i.endswith("3.md")][:store.NAMED_IN_ERRORS])}
    assert store.recorded_probes(db, layout, "another") == []


def test_recorded_models_count_each_name_and_probe_in_one_pass(db):
    """recorded_models, what ingest checks its model against: (name, probe as stored or None, documents) per
    name and probe, a probe parsed back to the numbers stored; a record that is not a string is none."""
    from onetrip import store

    layout = init_schema(db, Layout())
    mine, other = embedder_probe(HashEmbedder()), embedder_probe(RetrainedHashEmbedder())
    db.execute("INSERT INTO documents (doc_id, source_uri, content_hash, metadata) "
               "SELECT 'd' || g || '.md', 'file:///x', 'h', CASE "
               "WHEN g <= 5 THEN jsonb_build_object(%(k)s::text, 'hash-test', %(p)s::text, %(mine)s::jsonb) "
               "WHEN g <= 7 THEN jsonb_build_object(%(k)s::text, 'hash-test', %(p)s::text, %(other)s::jsonb) "
               "WHEN g = 8 THEN jsonb_build_object(%(k)s::text, 'hash-test') "
               "WHEN g = 9 THEN jsonb_build_object(%(k)s::text, 'legacy', %(p)s::text, 'not a list') "
               "ELSE jsonb_build_object(%(k)s::text, 7) END FROM generate_series(1, 10) g",
               {"k": store.EMBEDDER_KEY, "p": store.EMBEDDER_PROBE_KEY, "mine": json.dumps(mine),
                "other": json.dumps(other)})
    got = sorted(store.recorded_models(db, layout), key=json.dumps)
    assert got == sorted([("hash-test", mine, 5), ("hash-test", other, 2), ("hash-test", None, 1),
                          ("legacy", None, 1)], key=json.dumps)
    assert store.recorded_embedders(db, layout) == ["hash-test", "legacy"]


def test_the_probe_error_names_five_documents_at_most():
    """Many documents of another model's weights: the error names the first five ids and says there are more."""
    from onetrip.embedders import check_probe, embedder_probe

    emb = HashEmbedder()
    other = embedder_probe(RetrainedHashEmbedder())
    ids = [f"d{i}.md" for i in range(7)]
    with pytest.raises(EmbedderMismatchError, match=r"^7 document\(s\) in t \('d0.md', 'd1.md', 'd2.md', 'd3.md', "
                                                    r"'d4.md', …\)"):
        check_probe([(other, 7, ids[:5])], embedder_probe(emb), emb, "t")
    check_probe([(embedder_probe(emb), 7, ids[:5])], embedder_probe(emb), emb, "t")  # its own probe: no error


class NanProbeEmbedder(HashEmbedder):
    """HashEmbedder whose vector for the probe sentence alone is NaN (a half-precision model overflowing on one
    text, say): it has no probe to record, but embeds the documents' sections as usual."""

    def _one(self, text: str) -> np.ndarray:
        from onetrip.embedders import PROBE_TEXT

        return np.full(self.dim, np.nan, np.float32) if text == PROBE_TEXT else super()._one(text)


def test_an_embedder_whose_probe_is_not_finite_records_none_and_ingests(db, tmp_path):
    """A probe of NaN is no probe (embedder_probe gives None): recorded, it was a NaN that JSON cannot hold
    ('Out of range float values are not JSON compliant'), and every file of the run failed on a record that only
    serves a check; the names are still compared."""
    layout = init_schema(db, Layout())
    assert embedder_probe(NanProbeEmbedder()) is None
    rep = ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=NanProbeEmbedder())
    assert (rep.new, rep.failed) == (1, [])
    assert db.execute("SELECT metadata ? 'onetrip_embedder_probe' FROM documents").fetchall() == [(False,)]


def test_a_retriever_whose_embedder_gives_no_probe_is_checked_by_name_only(db, dsn, tmp_path):
    """Documents recorded with a probe, searched with an embedder that embeds no probe (PrecomputedEmbedder: the
    query texts it was given, under the model's name): the name is checked and the search goes on; with no
    probe of its own there is nothing to compare, which is not a mismatch (nor a TypeError)."""
    from onetrip.embedders import PrecomputedEmbedder

    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha", "beta")], layout=layout, embedder=HashEmbedder())
    q = "About alpha."
    pre = PrecomputedEmbedder({q: HashEmbedder().embed_query(q)}, name="hash-test")
    r = Retriever(db, embedder=pre)
    assert r.recorded_probe == embedder_probe(HashEmbedder())
    assert r.search(q, 1)[0].section.doc_id == "alpha.md"
    with pytest.raises(EmbedderMismatchError, match="'hash-test'.*'other'"):  # the name still is
        Retriever(db, embedder=PrecomputedEmbedder({q: HashEmbedder().embed_query(q)}, name="other")).search(q, 1)

    async def main() -> str:
        r = await AsyncRetriever.create(dsn, embedder=pre)
        try:
            return (await r.search(q, 1))[0].section.doc_id
        finally:
            await r.close()

    assert asyncio.run(main()) == "alpha.md"


def test_probe_differs_compares_every_component_of_a_list_of_numbers():
    """probe_differs' rule: the same model within PROBE_TOLERANCE (1e-3; float rounding between CPUs is ~1e-6,
    another version or fine-tune far more) in every component; another length differs; a record that is not a
    list of numbers (true/false are not numbers here) is not compared."""
    from onetrip.embedders import PROBE_TOLERANCE, probe_differs

    p = embedder_probe(HashEmbedder())
    assert p is not None and 5e-4 < PROBE_TOLERANCE < 2e-3
    assert not probe_differs(p, p)
    assert not probe_differs([x + 5e-4 for x in p], p)  # another CPU's rounding, with room to spare
    for i in (0, len(p) - 1):  # any one component past the tolerance: another model
        assert probe_differs([x + 2e-3 if j == i else x for j, x in enumerate(p)], p)
    assert probe_differs(p[:8], p) and probe_differs(p + [0.0], p) and probe_differs([], p)  # another length
    assert not probe_differs("not a list", p) and not probe_differs(None, p)
    assert not probe_differs(["0.1"] * len(p), p) and not probe_differs([True] * len(p), p)


def test_the_probe_error_names_the_first_ids_of_every_differing_probe():
    """Two older models' documents (two probes unlike this one's): the error names the first five ids of all of
    them in order, not the first group's five."""
    from onetrip.embedders import check_probe

    emb = HashEmbedder()
    a, b = embedder_probe(RetrainedHashEmbedder()), embedder_probe(OtherHashEmbedder())
    with pytest.raises(EmbedderMismatchError, match=r"^8 document\(s\) in t \('a1.md', 'a2.md', 'b1.md', 'b2.md', "
                                                    r"'c1.md', …\)"):
        check_probe([(a, 5, ["b1.md", "b2.md", "c1.md", "c2.md", "c3.md"]), (b, 3, ["a1.md", "a2.md", "c4.md"])],
                    embedder_probe(emb), emb, "t")


class SlowRetrainedEmbedder(SlowEmbedder, RetrainedHashEmbedder):
    """RetrainedHashEmbedder (HashEmbedder's name, other weights), held in its embedding step as SlowEmbedder."""


def test_two_first_ingests_with_one_name_and_other_weights_do_not_mix(db, dsn, tmp_path):
    """Two first ingests of one model name but other weights (two machines, each with its own 'model'
    folder): both find no record, and the one that waits for the first-ingest lock checks again under it. That
    second check compared the names only, so the second run wrote its vectors beside the first's, one name,
    two probes: a table of two models that no later check could undo."""
    from onetrip.store import EMBEDDER_PROBE_KEY

    layout = init_schema(db, Layout())
    outcomes = _two_first_ingests(dsn, layout, tmp_path, SlowRetrainedEmbedder())
    assert outcomes == ["new 1", "refused"], outcomes
    assert len(documents(db)) == 1
    assert db.execute("SELECT count(DISTINCT metadata -> %s) FROM documents", (EMBEDDER_PROBE_KEY,)).fetchone() == (1,)


def test_a_retriever_embeds_its_probe_once_however_often_the_record_is_read_again(db, dsn, tmp_path):
    """The probe is one embedding of the retriever's life: the HTTP service's /health reads the record again on
    every call, and each read had the next search embed the probe sentence again (a model call per health
    check). The check itself runs again after each read; the embedder's probe is kept."""
    from .test_ingest import CountingEmbedder

    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    emb = CountingEmbedder()
    r = Retriever(db, embedder=emb)
    for _ in range(3):
        assert r.search("About alpha.", 1)[0].section.doc_id == "alpha.md"
        assert r.refresh_embedder_record() == ["hash-test"]
    assert emb.probes == 1

    async def main() -> None:
        r = await AsyncRetriever.create(dsn, embedder=emb)
        try:
            for _ in range(3):
                assert (await r.search("About alpha.", 1))[0].section.doc_id == "alpha.md"
                assert await r.refresh_embedder_record() == ["hash-test"]
        finally:
            await r.close()

    asyncio.run(main())
    assert emb.probes == 2


def test_the_async_retriever_reads_the_probe_again_on_refresh(db, dsn, tmp_path):
    """An AsyncRetriever made before the first ingest (the HTTP service, started on empty tables) reads the
    record again on refresh_embedder_record (the service's /health): the probe with the name, so a model of the
    same name but other weights is refused once documents are stored, as it is by a retriever made after."""
    layout = init_schema(db, Layout())

    async def main() -> None:
        early = await AsyncRetriever.create(dsn, embedder=RetrainedHashEmbedder())
        try:
            assert early.recorded_embedders == [] and early.recorded_probe is None
            ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
            assert await early.refresh_embedder_record() == ["hash-test"]
            assert early.recorded_probe == embedder_probe(HashEmbedder())
            with pytest.raises(EmbedderMismatchError, match="also named 'hash-test' whose vectors differ"):
                await early.search("alpha", 1)
        finally:
            await early.close()

    asyncio.run(main())


def test_the_async_retriever_checks_the_model_off_the_event_loop(db, dsn, tmp_path):
    """The AsyncRetriever's first text embedding checks the model, and with documents that record a probe that
    check embeds the probe sentence: a model call, which on the event loop holds up every other task. Each call
    that embeds a text (search, search_many, assemble, query_vector, explain) reads the embedder in its worker
    thread; a new retriever each, since the check runs once per retriever."""
    from .embedders import LoopWatchingEmbedder

    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha", "beta")], layout=layout, embedder=HashEmbedder())
    calls = {
        "search": lambda r: r.search("About alpha.", 1),
        "search_many": lambda r: r.search_many(["About alpha.", "About beta."], 1),
        "assemble": lambda r: r.assemble("About alpha.", 1),
        "query_vector": lambda r: r.query_vector("About alpha."),
        "explain": lambda r: r.explain("About alpha.", 1),
    }

    async def main() -> dict[str, list[bool]]:
        seen = {}
        for name, call in calls.items():
            emb = LoopWatchingEmbedder()
            r = await AsyncRetriever.create(dsn, embedder=emb)
            try:
                await call(r)
            finally:
                await r.close()
            seen[name] = emb.probe_on_loop
        return seen

    assert asyncio.run(main()) == {name: [False] for name in calls}


def test_a_document_stored_without_a_record_hides_no_other_documents_record(db, dsn, tmp_path):
    """`replace_document` records no model. A retriever read any one document's record: that document, stored
    first, hid the record the ingested ones hold, and another model's searches went unchecked. Found by review."""
    from onetrip.store import replace_document
    from onetrip.synthetic import generate

    layout = init_schema(db, Layout())
    doc = next(iter(generate(1, dim=384, seed=5)))
    replace_document(db, layout, doc.record, doc.sections, doc.embeddings)
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    wrong = Retriever(db, embedder=OtherHashEmbedder())
    assert wrong.recorded_embedders == ["hash-test"]
    with pytest.raises(EmbedderMismatchError, match="embedded with 'hash-test'.*embeds with 'hash-other'"):
        wrong.search("alpha", 1)
    asyncio.run(_async_wrong_then_right(dsn, OtherHashEmbedder(), "'hash-test'"))


@pytest.mark.parametrize("name", [None, 123, ""])
def test_an_embedder_name_that_is_no_string_is_refused_not_recorded(db, tmp_path, name):
    """A name of None or 123 was stored as JSON null or a number, which the model checks (strings only) read as
    no record: another model's ingest and searches then passed. Found by review."""

    class Unnamed(HashEmbedder):
        pass

    Unnamed.name = name  # type: ignore[assignment]
    layout = init_schema(db, Layout())
    with pytest.raises(TypeError, match="embedder's name must be a non-empty string"):
        ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=Unnamed())
    assert documents(db) == {}
    ingest_paths(db, [tmp_path / "a"], layout=layout, embedder=HashEmbedder())
    with pytest.raises(TypeError, match="embedder's name must be a non-empty string"):
        Retriever(db, embedder=Unnamed()).search("alpha", 1)


def test_ingest_paths_refuses_what_is_not_an_embedder_before_reading(db, tmp_path):
    """A model folder's path given as the embedder had failed with AttributeError: 'str' object has no attribute
    'dim'; a retriever already said what to pass. Found by review."""
    layout = init_schema(db, Layout())
    folder = write_docs(tmp_path / "a", "alpha")
    with pytest.raises(TypeError, match="must be an Embedder .*got str.*SentenceTransformerEmbedder"):
        ingest_paths(db, [folder], layout=layout, embedder=str(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ingest_paths needs an embedder"):
        ingest_paths(db, [folder], layout=layout, embedder=None)  # type: ignore[arg-type]
    assert documents(db) == {}


def test_a_retriever_names_a_dimension_mismatch_before_comparing_the_model(db, dsn, tmp_path):
    """A model named as the recorded one but making 16-d vectors for a 384-d table had been told its vectors
    differ ('another version or fine-tune?'); ingest calls it a dimension mismatch, and so does search now."""
    layout = init_schema(db, Layout())
    ingest_paths(db, [write_docs(tmp_path / "a", "alpha")], layout=layout, embedder=HashEmbedder())
    with pytest.raises(DimensionMismatchError, match=r"embedder hash-test makes 16-d vectors but the sections "
                                                     r"table sections stores vector\(384\)"):
        Retriever(db, embedder=HashEmbedder(dim=16)).search("alpha", 1)

    async def main() -> None:
        r = await AsyncRetriever.create(dsn, embedder=HashEmbedder(dim=16))
        try:
            with pytest.raises(DimensionMismatchError, match="makes 16-d vectors"):
                await r.search("alpha", 1)
        finally:
            await r.close()
    asyncio.run(main())
