"""Hybrid retrieval: full-text + vector fused with RRF, expanded, in one statement."""

from __future__ import annotations

import dataclasses
import math
import subprocess
from pathlib import Path

import pytest

from onetrip import Filters, HybridOptions, Retriever, SchemaMissingError, init_schema, refresh_term_stats
from onetrip.ingest import ingest_paths
from onetrip.store import technical_terms
from onetrip.layout import Layout

from .embedders import HashEmbedder
from .conftest import psql_binary

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
PAD = " This sentence is padding so that the section is not merged into its neighbour as a tiny one."

DOCS = {
    "connections.md": f"""# Connections and Authentication

## Connection Settings

The server setting max_connections determines the maximum number of concurrent connections.{PAD}

### Reserved slots

superuser_reserved_connections slots are kept for superusers.{PAD}

## Monitoring

Query pg_stat_activity to see one row per server process.{PAD}
""",
    "tables.md": f"""# Tables

## Identity columns

A column declared GENERATED ALWAYS AS IDENTITY gets values from an implicit sequence.{PAD}

## Defaults

A default value is used when no value is specified for the column.{PAD}
""",
    "cooking.md": f"""# Cooking

## Pasta

Boil water, add salt, cook the pasta for nine minutes.{PAD}

## Bread

Knead the dough and let it rise for an hour.{PAD}
""",
}


@pytest.fixture
def kb(db, tmp_path):
    init_schema(db)
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    report = ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.new == 3
    return Retriever(db, embedder=HashEmbedder())


def ids(hits) -> list[str]:
    return [f"{h.section.doc_id}#{h.section.section_id}" for h in hits]


def test_technical_terms_survive_exactly(kb):
    for query, expected in [("max_connections", "connections.md#connection-settings"),
                            ("what does pg_stat_activity show", "connections.md#monitoring"),
                            ("GENERATED ALWAYS", "tables.md#identity-columns")]:
        lexical = kb.search(query, k=3, mode="lexical")
        assert lexical and ids(lexical)[0] == expected, (query, ids(lexical))
        hybrid = kb.search(query, k=3, mode="hybrid")
        assert expected in ids(hybrid)
    assert technical_terms("max_connections") == ["max_connections"]
    # stored and matched lower-cased: a text that writes it in capitals is found by the usual spelling
    assert technical_terms("Set MAX_Connections and PG_STAT_ACTIVITY.") == ["max_connections", "pg_stat_activity"]
    # a Markdown escape (pandoc, Notion) is the identifier it renders as; the backslash had ended the term
    assert technical_terms(r"Set max\_connections and hnsw\.ef\_search.") == ["max_connections", "hnsw.ef_search",
                                                                               "ef_search"]
    # in stored text a qualified name's underscored parts are terms too; a query's adds its last part only
    assert technical_terms("pg_stat_activity.wait_event, postgresql.conf", parts=True) == [
        "pg_stat_activity.wait_event", "pg_stat_activity", "wait_event", "postgresql.conf"]
    assert technical_terms("pg_stat_activity.wait_event") == ["pg_stat_activity.wait_event", "wait_event"]
    assert technical_terms("pg_stat_activity.query") == ["pg_stat_activity.query"]
    # after leading underscores: Markdown's emphasis, a C name (they had given no term; found by review)
    assert technical_terms("Set _shared_buffers_ and __max_wal_size__; call _PG_init.") == [
        "shared_buffers", "max_wal_size", "pg_init"]
    assert technical_terms("a_b x__init__ max__x") == ["a_b"]  # inside a word, no term starts at an underscore
    # the stemmed english column alone would split it: 'max' & 'connect'
    row = kb.conn.execute("SELECT to_tsvector('english', 'max_connections')::text").fetchone()[0]
    assert "max_connections" not in row


def test_a_qualified_name_is_found_by_its_underscored_part(db, tmp_path):
    """A question naming `wait_event` alone finds the section writing `pg_stat_activity.wait_event` by its term
    (the english configuration reads `pg_stat_activity.wait` as one host name, so only `event` had matched)."""
    init_schema(db)
    (tmp_path / "stats.md").write_text(
        f"# Statistics\n\n## Backend state\n\nRead pg_stat_activity.wait_event to see a backend's state.{PAD}\n\n"
        f"## Other\n\nA wait for an event of some kind is described in another chapter.{PAD}\n")
    ingest_paths(db, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert "wait_event" in db.execute("SELECT terms FROM sections WHERE section_id = 'backend-state'").fetchone()[0]
    kb = Retriever(db, embedder=HashEmbedder())
    for mode in ("lexical", "hybrid"):
        assert ids(kb.search("wait_event", k=2, mode=mode))[0] == "stats.md#backend-state", mode


def test_hybrid_is_one_statement_with_every_expansion(kb, statement_log):
    for call in (lambda: kb.search("max_connections", k=3, mode="hybrid"),
                 lambda: kb.assemble("max_connections", k=3, mode="hybrid", ancestors=True, section=True,
                                     neighbors=2, max_tokens=500),
                 lambda: kb.assemble("pasta water", k=3, mode="lexical", filters=Filters(doc_ids=("cooking.md",)))):
        with statement_log.watch(kb.conn) as w:
            call()
        assert len(w.statements) == 1, w.statements


def test_auto_mode_is_hybrid_for_text_and_dense_for_a_bare_embedding(kb, statement_log):
    """The default: hybrid whenever the query text is at hand (a text query, or text= with an embedding)."""
    q = "maximum number of concurrent connections"
    vec = HashEmbedder().embed_query(q)

    def same(a, b) -> bool:
        return [(h.rank, ids([h]), h.score) for h in a] == [(h.rank, ids([h]), h.score) for h in b]

    assert same(kb.search(q, k=4), kb.search(q, k=4, mode="hybrid"))
    assert same(kb.search(vec, k=4, text=q), kb.search(q, k=4, mode="hybrid"))
    assert all(h.score is not None for h in kb.search(q, k=4))  # the fused score: it ran hybrid
    assert same(kb.search(vec, k=4), kb.search(vec, k=4, mode="dense"))
    assert all(h.score is None for h in kb.search(vec, k=4))
    assert kb.assemble(q).options["mode"] == "hybrid"
    assert kb.assemble(vec).options["mode"] == "dense"
    assert kb.assemble(q, mode="dense").options["mode"] == "dense"
    with pytest.raises(ValueError, match="mode must be one of \\('auto', 'dense'"):
        kb.search(q, mode="fuzzy")
    with statement_log.watch(kb.conn) as w:
        kb.assemble(q)
    assert len(w.statements) == 1, w.statements


@pytest.mark.parametrize("candidates,k", [(20, 5), (2, 2), (1, 1)])  # 1, 2: a cut lexical list (4 match)
def test_rrf_matches_a_python_fusion_of_the_two_lists(kb, candidates, k):
    # rrf_k 10, not the default 60: a mutation review found the one-query fusion's rrf_k hard-coded to 60 caught only
    # by a batch-versus-single comparison
    opts = HybridOptions(candidates=candidates, rrf_k=10, dense_weight=1.0, lexical_weight=2.0)
    q = "maximum number of concurrent connections for superusers"
    dense = kb.search(q, k=candidates, mode="dense", parent=False, neighbors=False)
    lexical = kb.search(q, k=candidates, mode="lexical", hybrid=opts, parent=False, neighbors=False)
    whole = ids(kb.search(q, k=20, mode="lexical", hybrid=opts, parent=False, neighbors=False))
    assert len(whole) > 2
    if k == 1:  # what makes the cut visible: the dense top is lower in the whole lexical list, so cut it counts once
        assert ids(dense)[0] in whole[1:]
    scores: dict[str, float] = {}
    for weight, hits in ((1.0, dense), (2.0, lexical)):
        for rank, key in enumerate(ids(hits), 1):
            scores[key] = scores.get(key, 0.0) + weight / (10 + rank)
    want = sorted(scores, key=lambda key: -scores[key])[:k]
    got = kb.search(q, k=k, mode="hybrid", hybrid=opts, parent=False, neighbors=False)
    assert len(got) == len(want) == k
    assert [h.score for h in got] == pytest.approx(sorted((scores[key] for key in want), reverse=True))
    assert set(ids(got)) == set(want)


def test_equal_fused_scores_go_by_distance_before_document(kb, db):
    """A section only the dense list holds and one only the lexical list holds, at the same rank with equal
    weights, tie on the fused score; the nearer one wins the cut (then doc_id), in one search and in a batch.
    Here the dense top (cooking.md) sorts after the lexical top (connections.md) by doc_id."""
    (vec,) = db.execute("SELECT embedding FROM sections WHERE doc_id = 'cooking.md' AND heading = 'Pasta'").fetchone()
    opts = HybridOptions(candidates=1, dense_weight=1.0, lexical_weight=1.0)
    text = "max_connections"
    dense = kb.search(vec, k=1, mode="dense", parent=False, neighbors=False)
    lexical = kb.search(vec, k=1, text=text, mode="lexical", hybrid=opts, parent=False, neighbors=False)
    assert ids(dense) == ["cooking.md#pasta"] and ids(lexical)[0].startswith("connections.md#"), (dense, lexical)
    # at k=1 each list holds its top alone, each scoring 1 / (rrf_k + 1): a tie, which the distance breaks;
    # the least tilt of the weights makes the lexical top win instead
    top = kb.search(vec, k=1, text=text, mode="hybrid", hybrid=opts, parent=False, neighbors=False)
    assert ids(top) == ids(dense) and top[0].score == pytest.approx(1 / 61, rel=1e-12)
    tilt = HybridOptions(candidates=1, dense_weight=1.0, lexical_weight=1.000001)
    assert ids(kb.search(vec, k=1, text=text, mode="hybrid", hybrid=tilt, parent=False, neighbors=False)) == \
        ids(lexical)
    many = kb.search_many([vec, vec], k=1, texts=[text, text], mode="hybrid", hybrid=opts, parent=False,
                          neighbors=False)
    assert [ids(hits) for hits in many] == [ids(dense)] * 2


@pytest.mark.parametrize("query", [
    "foo & bar | !baz <-> 'quoted' \"phrase here\" (paren) -- ; DROP TABLE sections; /* */",
    "a:* & b:B", "!!!", "&&&|||", "\\x00 %s %(k)s {}", "max_connections OR -pasta",
])
def test_punctuation_and_operators_never_break_sql(kb, query):
    for mode in ("lexical", "hybrid"):
        kb.search(query, k=3, mode=mode)
        kb.assemble(query, k=3, mode=mode, max_tokens=300)


def test_empty_stopwords_and_non_english(kb):
    for mode in ("lexical", "hybrid"):
        with pytest.raises(ValueError, match="query text is empty"):
            kb.search("   ", mode=mode)
    assert kb.search("the of and a", k=3, mode="lexical") == []  # only stop words: no lexical match
    dense = kb.search("the of and a", k=3, mode="dense", parent=False, neighbors=False)
    hybrid = kb.search("the of and a", k=3, mode="hybrid", parent=False, neighbors=False)
    assert ids(hybrid) == ids(dense)  # fusion with an empty lexical list is the dense ranking
    for q in ("Wie konfiguriere ich max_connections?", "接続数の上限を設定する", "Как настроить соединения"):
        hits = kb.search(q, k=3, mode="hybrid")
        assert len(hits) == 3
    assert ids(kb.search("Wie konfiguriere ich max_connections?", k=1, mode="lexical")) == [
        "connections.md#connection-settings"]
    with pytest.raises(ValueError, match="needs the query text"):
        kb.search(HashEmbedder().embed_query("x"), mode="hybrid")
    with pytest.raises(ValueError, match="mode must be one of"):
        kb.search("x", mode="fuzzy")


def test_hybrid_obeys_filters_on_both_lists(kb):
    hits = kb.search("max_connections pasta", k=5, mode="hybrid", filters=Filters(doc_ids=("cooking.md",)))
    assert hits and {h.section.doc_id for h in hits} == {"cooking.md"}
    for h in hits:
        for rel in (h.parent, h.prev, h.next):
            assert rel is None or rel.doc_id == "cooking.md"


def _psql_hybrid(dsn: str, vec, k: int, params: dict) -> list[dict[str, str]]:
    """retrieve_hybrid.sql run as is in psql for the text max_connections, its rows as dicts."""
    import csv
    import io

    lit = "[" + ",".join(f"{x:.8f}" for x in vec) + "]"
    out = subprocess.run(
        [psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "--csv", "-d", dsn,
         "-v", f"k={k}", "-v", f"query_embedding={lit}", "-v", "query_text=max_connections",
         "-v", "query_terms={max_connections}", *[a for n, v in params.items() for a in ("-v", f"{n}={v}")],
         "-f", str(SQL_DIR / "postgres" / "retrieve_hybrid.sql")], check=True, capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(out)))


def test_psql_runs_the_hybrid_edition(kb, dsn):
    from onetrip.embedders import as_vector

    vec = as_vector(HashEmbedder().embed_query("max_connections"), 384)
    rows = _psql_hybrid(dsn, vec, 3, HybridOptions().params(3))
    api = kb.search(vec, k=3, mode="hybrid", text="max_connections")
    hits = [r for r in rows if r["hit_rank"]]  # then the hits' context rows, each section once
    assert [(r["doc_id"], r["section_id"]) for r in hits] == [(h.section.doc_id, h.section.section_id) for h in api]
    context = {(h.section.doc_id, x.section_id) for h in api for x in (h.parent, h.prev, h.next) if x}
    assert {(r["doc_id"], r["section_id"]) for r in rows[len(hits):]} == context - {
        (h.section.doc_id, h.section.section_id) for h in api}

    # whole-number weights, as a DBA types them (-v lexical_weight=1): the file casts its float
    # parameters, so 1 / (60 + rank) is not integer division (every score 0, ranked by distance)
    ints = {**HybridOptions(lexical_weight=1.0).params(3), "dense_weight": 1, "lexical_weight": 1}
    hits = [r for r in _psql_hybrid(dsn, vec, 3, ints) if r["hit_rank"]]
    api = kb.search(vec, k=3, mode="hybrid", text="max_connections", hybrid=HybridOptions(lexical_weight=1.0))
    assert all(float(r["score"]) > 0 for r in hits)
    assert [(r["doc_id"], r["section_id"]) for r in hits] == [(h.section.doc_id, h.section.section_id) for h in api]

    # found by review: with k above :candidates the file returned :candidates hits at most, where the library
    # binds max(candidates, k); the file now takes the larger itself
    hits = [r for r in _psql_hybrid(dsn, vec, 8, {**HybridOptions().params(8), "candidates": 2}) if r["hit_rank"]]
    api = kb.search(vec, k=8, mode="hybrid", text="max_connections", hybrid=HybridOptions(candidates=2))
    assert len(hits) == 8
    assert [(r["doc_id"], r["section_id"]) for r in hits] == [(h.section.doc_id, h.section.section_id) for h in api]


def test_term_stats_count_every_word_of_every_section(kb):
    """The word weights are the exact section counts (computed here in Python from each tsv)."""
    from collections import Counter

    counts: Counter[str] = Counter()
    for (words,) in kb.conn.execute("SELECT tsvector_to_array(tsv) FROM sections"):
        counts.update(words)
    total = kb.conn.execute("SELECT count(*) FROM sections").fetchone()[0]
    rows = kb.conn.execute("SELECT lexeme, sections, share, idf FROM term_stats").fetchall()
    assert {w: n for w, n, _, _ in rows} == dict(counts)
    for _, n, share, idf in rows:
        assert share == pytest.approx(n / total) and idf == pytest.approx(math.log((total + 1) / n))


def test_question_style_lexical_query_matches_any_word_weighted_by_rarity(kb):
    q = "how many slots are kept back for superusers when connections run out"
    # no section holds every word, so an AND of the words (websearch_to_tsquery) finds nothing
    assert kb.conn.execute("SELECT count(*) FROM sections WHERE tsv @@ websearch_to_tsquery('english', %s)",
                           (q,)).fetchone()[0] == 0
    hits = kb.search(q, k=3, mode="lexical", parent=False, neighbors=False)
    assert ids(hits)[0] == "connections.md#reserved-slots", ids(hits)
    assert all("cooking.md" not in i for i in ids(hits))  # shares no word with the question


def test_words_in_most_sections_are_skipped_on_a_large_corpus(db, tmp_path):
    """Above rare_term_sections, a word in more than max_term_share of the sections is not searched."""
    layout = Layout(prefix="common_")
    init_schema(db, layout)
    parts = [f"## Part {i}\n\nEvery widget part number {i} is listed here.{PAD}\n" for i in range(150)]
    parts[77] = f"## Part 77\n\nEvery widget part number 77 needs a sprocket.{PAD}\n"
    (tmp_path / "catalog.md").write_text("# Catalog\n\n" + "\n".join(parts))
    ingest_paths(db, [tmp_path / "catalog.md"], layout=layout, embedder=HashEmbedder())
    kb = Retriever(db, prefix="common_", embedder=HashEmbedder())
    n = db.execute("SELECT sections FROM common_term_stats WHERE lexeme = 'widget'").fetchone()[0]
    assert n > HybridOptions().rare_term_sections
    assert kb.search("widget", k=3, mode="lexical") == []  # in every part: skipped
    assert len(kb.search("widget", k=3, mode="lexical", hybrid=HybridOptions(max_term_share=1.0))) == 3
    assert ids(kb.search("widget sprocket", k=1, mode="lexical")) == ["catalog.md#part-77"]


def test_a_word_in_exactly_rare_term_sections_sections_is_still_searched(kb, db):
    """rare_term_sections is inclusive: a word in exactly that many sections is rare enough to search (however
    large its share), one more section and it is skipped; max_term_share=0 leaves the count alone to decide."""
    n = db.execute("SELECT sections FROM term_stats WHERE lexeme = 'pad'").fetchone()[0]  # "padding": PAD's
    assert n > 3
    at = kb.search("padding", k=3, mode="lexical", hybrid=HybridOptions(rare_term_sections=n, max_term_share=0.0))
    assert len(at) == 3
    below = HybridOptions(rare_term_sections=n - 1, max_term_share=0.0)
    assert kb.search("padding", k=3, mode="lexical", hybrid=below) == []


def test_a_word_at_exactly_max_term_share_is_still_searched(kb, db):
    """max_term_share is inclusive too: a word whose share of the sections is exactly the bound is searched
    (rare_term_sections=0 leaves the share alone to decide), a bound just below it skips the word."""
    (share,) = db.execute("SELECT share FROM term_stats WHERE lexeme = 'pad'").fetchone()
    assert 0 < share < 1
    at = kb.search("padding", k=3, mode="lexical", hybrid=HybridOptions(rare_term_sections=0, max_term_share=share))
    assert len(at) == 3
    below = HybridOptions(rare_term_sections=0, max_term_share=share * (1 - 1e-9))
    assert kb.search("padding", k=3, mode="lexical", hybrid=below) == []


def test_stale_or_missing_word_counts(kb, tmp_path):
    """Never counted: every word weighs 1 and search still works; ingest recounts; no table: a clear error."""
    kb.conn.execute("DELETE FROM term_stats")
    assert ids(kb.search("GENERATED ALWAYS", k=1, mode="lexical")) == ["tables.md#identity-columns"]
    report = ingest_paths(kb.conn, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert report.unchanged == 3 and kb.conn.execute("SELECT count(*) FROM term_stats").fetchone()[0] > 0
    (tmp_path / "cooking.md").write_text(DOCS["cooking.md"] + f"\n## Risotto\n\nStir the risotto slowly.{PAD}\n")
    ingest_paths(kb.conn, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert kb.conn.execute("SELECT sections FROM term_stats WHERE lexeme = 'risotto'").fetchone()[0] == 1
    kb.conn.execute("DROP TABLE term_stats")
    for mode in ("lexical", "hybrid", "auto"):  # auto: a text query runs hybrid
        with pytest.raises(SchemaMissingError, match="onetrip init"):
            kb.search("risotto", k=1, mode=mode)
    (tmp_path / "new.md").write_text(f"# New\n\nA new page.{PAD}\n")
    with pytest.raises(SchemaMissingError, match="term_stats.*onetrip init"):
        ingest_paths(kb.conn, [tmp_path], layout=Layout(), embedder=HashEmbedder())
    assert kb.conn.execute("SELECT count(*) FROM documents WHERE doc_id = 'new.md'").fetchone()[0] == 0
    assert ids(kb.search("risotto", k=1, mode="dense")) and init_schema(kb.conn)  # dense needs no word counts
    # init adds the table
    assert refresh_term_stats(kb.conn, Layout()) > 0
    assert ids(kb.search("risotto", k=1, mode="lexical")) == ["cooking.md#risotto"]


def test_text_queries_run_hybrid_on_every_table_layout(db, tmp_path, statement_log):
    """The default (auto: hybrid for text) on the partitioned and halfvec layouts finds what the plain one finds."""
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    layouts = {"plain": Layout(prefix="pl_"), "partitioned": Layout(prefix="pt_", partitions=4),
               "halfvec": Layout(prefix="hv_", vector_type="halfvec")}
    got = {}
    for name, layout in layouts.items():
        init_schema(db, layout)
        assert ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder()).new == 3
        r = Retriever(db, prefix=layout.prefix, embedder=HashEmbedder())
        assert (r.layout.partitions, r.layout.vector_type) == (layout.partitions, layout.vector_type)
        with statement_log.watch(db) as w:
            hits = r.search("maximum number of concurrent connections", k=4)
            ctx = r.assemble("what does pg_stat_activity show", k=3, max_tokens=500)
        assert len(w.statements) == 2, w.statements  # one per call
        assert all(h.score is not None for h in hits) and ctx.options["mode"] == "hybrid"
        got[name] = (ids(hits), [(p.doc_id, p.section_id) for p in ctx.passages])
    assert got["plain"][0][0] == "connections.md#connection-settings"
    assert got["partitioned"] == got["plain"]
    assert got["halfvec"] == got["plain"]


def test_term_frequency_ranks_a_repeated_word_first_in_lexical_mode(db, tmp_path):
    """tf_weight: a section that repeats the query word outranks one that has it once (lexical's default)."""
    layout = Layout(prefix="tf_")
    init_schema(db, layout)
    # "a-once" sorts before "b-thrice", so presence-only scoring (a tie) ranks it first
    (tmp_path / "vacuum.md").write_text(
        "# Vacuum\n\n## A once\n\nThe autovacuum daemon runs in the background on every database."
        f"{PAD}\n\n## B thrice\n\nRun autovacuum often: autovacuum keeps tables small, and autovacuum "
        f"workers run in parallel.{PAD}\n\n## C none\n\nCheckpoints write dirty pages.{PAD}\n")
    ingest_paths(db, [tmp_path / "vacuum.md"], layout=layout, embedder=HashEmbedder())
    kb = Retriever(db, prefix="tf_", embedder=HashEmbedder())
    q = "autovacuum"
    assert ids(kb.search(q, k=2, mode="lexical", parent=False, neighbors=False)) == \
        ["vacuum.md#b-thrice", "vacuum.md#a-once"]
    assert ids(kb.search(q, k=2, mode="lexical", hybrid=HybridOptions(tf_weight=0), parent=False,
                         neighbors=False)) == ["vacuum.md#a-once", "vacuum.md#b-thrice"]
    assert HybridOptions().params(5, "lexical")["tf_weight"] == 2.0
    assert HybridOptions().params(5, "hybrid")["tf_weight"] == 0.0
    assert HybridOptions(tf_weight=0.5).params(5, "lexical")["tf_weight"] == 0.5
    for bad in (-1, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="tf_weight"):
            HybridOptions(tf_weight=bad)


def test_sections_holding_the_same_words_tie_exactly_whatever_the_plan(db, tmp_path):
    """Sections holding the same query words tie exactly and then go by key, whichever plan runs.

    A float sum of the words' weights depends on the order of its terms. A sort
    before a group aggregate (the generic plan of a prepared statement chose one
    on the PostgreSQL manual) is not stable, so the terms came in another order
    for each section, and equal sections were ranked by rounding noise.
    """
    layout = Layout(prefix="ties_")
    init_schema(db, layout)
    words = ["replication", "slot", "standby", "walsender", "timeline", "archive", "restore", "promote"]
    parts = [f"## Full {i:02d}\n\n{' '.join(words)} notes for part {i}.{PAD}\n" for i in range(40)]
    parts += [f"## Some {i:02d}\n\n{' '.join(words[: 1 + i % 7])} notes for part {i}.{PAD}\n" for i in range(40)]
    (tmp_path / "ties.md").write_text("# Ties\n\n" + "\n".join(parts))
    ingest_paths(db, [tmp_path / "ties.md"], layout=layout, embedder=HashEmbedder())
    kb = Retriever(db, prefix="ties_", embedder=HashEmbedder())
    query = " ".join(words)
    ranked = {}
    for hashagg in ("on", "off"):
        db.execute(f"SET enable_hashagg = {hashagg}")
        for tf in (0, 2):
            opts = HybridOptions(tf_weight=tf, max_term_share=1.0, candidates=50)
            got = ids(kb.search(query, k=50, mode="lexical", hybrid=opts, parent=False, neighbors=False))
            full = [i for i in got if "#full-" in i]
            assert len(full) == 40 and full == got[:40], (hashagg, tf, got[:42])
            assert full == sorted(full), (hashagg, tf, full)  # the tie goes by key
            ranked[hashagg, tf] = got
    db.execute("RESET enable_hashagg")
    for tf in (0, 2):
        assert ranked["on", tf] == ranked["off", tf]


def test_text_queries_reuse_one_generic_plan(kb):
    """The planner's estimate of a text query's statement must not depend on its words.

    psycopg prepares a statement from its 6th call; PostgreSQL then compares its
    generic plan with the first custom ones. A custom plan counted the query's
    words and technical terms (none, for most questions) and so looked cheaper:
    on the manual the statement was planned afresh on every call (1.1 ms per
    hybrid search, 2.1 ms per assemble), or not, depending on a connection's
    first five queries. Behind their fences the words and terms are unknown to
    every plan alike, so custom and generic estimates agree and the generic plan
    is reused.
    """
    import re

    def cost(q: str, **kw: object) -> float:
        plan = kb.explain(q, kind="plan", **kw).plan
        return float(re.search(r"cost=[\d.]+\.\.([\d.]+)", plan).group(1))

    for kw in ({"k": 3}, {"assemble": True, "max_tokens": 300}):
        few, many = cost("pasta", **kw), cost("max_connections server process rows default value column", **kw)
        assert few == many, (kw, few, many)
    for q in ["how many connections", "pasta water salt", "identity column sequence", "dough rise hour"] * 3:
        kb.search(q, k=3)
        kb.assemble(q, max_tokens=300)
    plans = kb.conn.execute("SELECT generic_plans FROM pg_prepared_statements "
                            "WHERE statement LIKE 'WITH%' AND statement LIKE '%query_words%'").fetchall()
    assert len(plans) == 2 and all(g >= 2 for g, in plans), plans


@pytest.mark.parametrize("layout", [Layout(), Layout(partitions=3)], ids=["plain", "partitioned"])
def test_ingest_leaves_no_pending_entries_in_the_word_indexes(db, tmp_path, layout):
    """A GIN index's pending list is read in full by every lexical index scan until VACUUM merges it."""
    from onetrip.store import flush_word_indexes

    init_schema(db, layout)
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    ingest_paths(db, [tmp_path], layout=layout, embedder=HashEmbedder())
    assert flush_word_indexes(db, layout) == 0  # the pages it moves: ingest left none pending
    # rows written another way leave pending entries; refresh-term-stats merges them too
    db.execute("UPDATE sections SET content = content || ' with some extra words here'")  # tsv is generated
    assert flush_word_indexes(db, layout) > 0
    assert flush_word_indexes(db, layout) == 0


def test_merging_the_word_indexes_is_skipped_for_a_non_owner(kb):
    from onetrip.store import flush_word_indexes

    db = kb.conn
    role = "onetrip_test_not_owner"
    db.execute(f"DROP ROLE IF EXISTS {role}")
    db.execute(f"CREATE ROLE {role}")
    try:
        db.execute(f"GRANT SELECT ON sections TO {role}")
        db.execute(f"SET ROLE {role}")
        assert flush_word_indexes(db, Layout()) is None  # needs the owner: nothing done, nothing broken
        assert db.execute("SELECT count(*) FROM sections").fetchone()[0] > 0
    finally:
        db.execute("RESET ROLE")
        db.execute(f"REVOKE ALL ON sections FROM {role}")
        db.execute(f"DROP ROLE {role}")


def _reference_lexical_order(db, query: str, opts: HybridOptions) -> list[str]:
    """The lexical list as hits_cte.sql.j2 defines it, computed here from the stored rows: each kept query word a
    section holds adds its idf (1 for a word term_stats does not know), times 1 + tf_weight (ts_rank / the rank
    of one occurrence - 1) when tf_weight > 0; an exact technical term adds term_weight once; each weight is
    rounded to a multiple of 2^-20; sections go by score, then doc_id, then section_id in the server's collation
    (its own ORDER BY of the keys). Only ts_rank, PostgreSQL's own function, is read from the server per
    (section, word)."""
    words = [w for (w,) in db.execute("SELECT unnest(tsvector_to_array(to_tsvector('english', %s)))", (query,))]
    stats = {w: (n, share, idf) for w, n, share, idf in
             db.execute("SELECT lexeme, sections, share, idf FROM term_stats WHERE lexeme = ANY(%s)", (words,))}
    kept = [w for w in words if w not in stats or stats[w][0] <= opts.rare_term_sections
            or stats[w][1] <= opts.max_term_share]
    tf = 2.0 if opts.tf_weight is None else opts.tf_weight  # lexical mode's default
    terms = set(technical_terms(query))
    scores: dict[tuple[str, str], int] = {}
    rows = db.execute("SELECT doc_id, section_id, tsvector_to_array(tsv), terms FROM sections").fetchall()
    for doc, sid, lexemes, sec_terms in rows:
        total = 0
        for w in kept:
            if w not in lexemes:
                continue
            weight = stats[w][2] if w in stats else 1.0
            if tf > 0:
                (rank,) = db.execute("SELECT ts_rank(tsv, quote_literal(%s)::tsquery, 0) FROM sections "
                                     "WHERE doc_id = %s AND section_id = %s", (w, doc, sid)).fetchone()
                weight *= 1 + tf * (rank / 0.0607927 - 1)
            total += math.floor(weight * 1048576 + 0.5)  # round() of a positive double: half away from zero
        if terms & set(sec_terms or ()):
            total += math.floor(opts.term_weight * 1048576 + 0.5)
        if total:
            scores[doc, sid] = total
    collated = {key: i for i, key in enumerate(db.execute("SELECT doc_id, section_id FROM sections "
                                                          "ORDER BY doc_id, section_id").fetchall())}
    return [f"{d}#{s}" for d, s in sorted(scores, key=lambda key: (-scores[key], collated[key]))]


@pytest.mark.parametrize("opts", [HybridOptions(tf_weight=0), HybridOptions(), HybridOptions(tf_weight=4),
                                  HybridOptions(tf_weight=0, term_weight=0.5)],
                         ids=["presence", "lexical-default-tf", "tf4", "small-term-weight"])
def test_lexical_order_matches_a_python_scorer(kb, db, opts):
    """Lexical mode's ranking, section by section, equals a scorer written from the statement's definition:
    the weight of each kept word (its idf; 1 for a word term_stats does not know), the term-frequency factor,
    term_weight for an exact technical term, the rounding, and the tie order by doc_id then section_id. One
    word's count is taken out of term_stats (a word ingested since the last recount), and ties are many: the
    padding words are in every section."""
    assert db.execute("DELETE FROM term_stats WHERE lexeme = 'concurr'").rowcount == 1
    queries = ["maximum number of concurrent connections for superusers", "max_connections",
               "padding sentence neighbour", "concurrent values for the column", "salt water pasta dough",
               "what does pg_stat_activity show about each server process"]
    for q in queries:
        want = _reference_lexical_order(db, q, opts)
        assert want, q
        got = ids(kb.search(q, k=50, mode="lexical", hybrid=dataclasses.replace(opts, candidates=50),
                            parent=False, neighbors=False))
        assert got == want, (q, got, want)
        # a list cut at 3 candidates keeps the first three, ties at the cut going by doc_id, then section_id
        cut = ids(kb.search(q, k=3, mode="lexical", hybrid=dataclasses.replace(opts, candidates=3),
                            parent=False, neighbors=False))
        assert cut == want[:3], (q, cut, want)


def test_each_lexical_weight_decides_the_order_it_should(kb, db):
    """The lexical weights one at a time, each given the deciding margin by setting word counts in term_stats:
    a word term_stats does not know weighs exactly 1, term_weight counts in full, and the term-frequency factor
    is 1 + tf_weight (ts_rank / 0.0607927 - 1). Each order flips when the margin crosses that value."""
    def idf(word: str) -> float:
        return db.execute("SELECT idf FROM term_stats WHERE lexeme = %s", (word,)).fetchone()[0]

    def set_idf(word: str, value: float) -> None:
        assert db.execute("UPDATE term_stats SET idf = %s WHERE lexeme = %s", (value, word)).rowcount == 1

    def top2(q: str, **options) -> list[str]:
        one = ids(kb.search(q, k=2, mode="lexical", hybrid=HybridOptions(**options), parent=False, neighbors=False))
        # the several-query statement (two queries: one alone is sent as search) weighs by the same margins
        many = kb.search_many([q, "bread"], k=2, mode="lexical", hybrid=HybridOptions(**options), parent=False,
                              neighbors=False)
        assert ids(many[0]) == one, (q, options, ids(many[0]), one)
        return one

    pasta, bread, settings = "cooking.md#pasta", "cooking.md#bread", "connections.md#connection-settings"
    # a word term_stats does not know ('pasta', ingested since the last recount, say) weighs 1
    assert db.execute("DELETE FROM term_stats WHERE lexeme = 'pasta'").rowcount == 1
    for dough, want in ((0.75, [pasta, bread]), (1.25, [bread, pasta])):
        set_idf("dough", dough)
        assert top2("pasta dough", tf_weight=0) == want, dough
    # term_weight: the section holding max_connections scores its words' idf plus term_weight
    (words,) = db.execute(
        "SELECT sum(ts.idf) FROM term_stats ts, sections s WHERE s.doc_id = 'connections.md' "
        "AND s.section_id = 'connection-settings' AND ts.lexeme = ANY(tsvector_to_array(s.tsv)) "
        "AND ts.lexeme = ANY(tsvector_to_array(to_tsvector('english', 'max_connections')))").fetchone()
    for share, want in ((0.75, [settings, bread]), (1.25, [bread, settings])):
        set_idf("dough", words + share * 0.8)
        assert top2("max_connections dough", tf_weight=0, term_weight=0.8) == want, share
    # the term-frequency factor: 'connect' three times in Connection Settings (heading, max_connections,
    # connections), against 'dough' once in Bread
    rank = {sid: r for sid, r in db.execute(
        "SELECT section_id, ts_rank(tsv, 'connect'::tsquery, 0) FROM sections WHERE tsv @@ 'connect'::tsquery")}
    factor = {sid: 1 + 2.0 * (r / 0.0607927 - 1) for sid, r in rank.items()}
    a = idf("connect")
    assert max(factor, key=factor.get) == "connection-settings" and factor["connection-settings"] > 1.5, factor
    second = max(f for sid, f in factor.items() if sid != "connection-settings")
    # (Reserved slots holds it twice, a factor close below: Bread's margin must stay above that section)
    # Half a percent either side of the margin: with the one-occurrence constant 0.06 instead of 0.0607927,
    # Bread's one 'dough' would weigh 1.026 and Connection Settings' factor change, and 0.995 would flip.
    for share, want in ((0.9, [settings, bread]), (0.995, [settings, bread]), (1.005, [bread, settings]),
                        (1.25, [bread, settings])):
        b = a * (1 + share * (factor["connection-settings"] - 1))
        assert b > a * second, (b, a, second, factor)  # Bread stays above every other section holding 'connect'
        set_idf("dough", b)
        assert top2("connections dough", tf_weight=2.0) == want, share


def test_weights_that_score_every_hit_zero_are_refused(kb):
    """lexical_weight=0 in lexical mode (or both weights 0 in hybrid mode) made every score 0, and the hits came
    in doc_id order whatever they held (found by review): refused, naming the weight, before anything is sent."""
    q = "maximum number of concurrent connections"
    calls = {"search": lambda mode, h: kb.search(q, k=3, mode=mode, hybrid=h),
             "search_many": lambda mode, h: kb.search_many([q, "bread"], k=3, mode=mode, hybrid=h),
             "assemble": lambda mode, h: kb.assemble(q, k=3, mode=mode, hybrid=h)}
    for name, call in calls.items():
        with pytest.raises(ValueError, match="lexical_weight=0 in lexical mode"):
            call("lexical", HybridOptions(lexical_weight=0))
        with pytest.raises(ValueError, match="dense_weight and lexical_weight are both 0"):
            call("hybrid", HybridOptions(lexical_weight=0, dense_weight=0))
        assert call("hybrid", HybridOptions(lexical_weight=0)), name  # the dense list alone still ranks
        assert call("lexical", HybridOptions(dense_weight=0)), name  # lexical mode has no dense list
    weighted = kb.search(q, k=5, mode="lexical", hybrid=HybridOptions(lexical_weight=2))
    assert [h.score for h in weighted] == sorted((h.score for h in weighted), reverse=True)
    assert ids(weighted) == ids(kb.search(q, k=5, mode="lexical"))  # a weight scales lexical scores only
