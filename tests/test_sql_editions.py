"""The checked-in SQL editions: fresh, runnable in psql as they are, and equal to the Python API."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from pathlib import Path

import numpy as np
import psycopg
import pytest

from onetrip import Retriever
from onetrip.editions import DEFAULT_EF_SEARCH, function_query, render_edition, stale_files
from onetrip.layout import Layout
from onetrip.sqlcheck import check_roundtrip, parse_statements, psql_vars_to_binds
from onetrip.store import replace_document
from onetrip.synthetic import corpus_query_vectors, generate

from .conftest import psql_binary

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"


def _unit(v: np.ndarray) -> np.ndarray:
    """A query vector of unit length, as the searches' embeddings are (several tests aim queries at sections)."""
    return (v / np.linalg.norm(v)).astype(np.float32)


def run_psql(dsn: str, *args: str) -> list[dict[str, str]]:
    out = subprocess.run(
        [psql_binary(), "-X", "-v", "ON_ERROR_STOP=1", "--csv", "-d", dsn, *args],
        check=True, capture_output=True, text=True,
    ).stdout
    # psql prints one CSV table per statement; retrieve.sql has exactly one result.
    return list(csv.DictReader(io.StringIO(out)))


def vec_literal(v: np.ndarray) -> str:
    """A vector literal that pgvector reads back as the very float32 values (9 significant digits round-trip):
    with 8 decimals, a query equidistant from two sections by construction moved by the rounding, and which of
    the two came first depended on the CPU's float code (it flipped on an AVX-512 machine), not on the SQL."""
    return "[" + ",".join(f"{float(x):.9g}" for x in v) + "]"


def test_checked_in_editions_are_fresh():
    stale = stale_files(SQL_DIR)
    assert not stale, f"stale SQL editions {stale}: run `onetrip sql render`"


def test_every_postgres_statement_parses_and_keeps_vector_operators():
    for name, text in render_edition("postgres").items():
        if "$function$" in text:
            # The wrapper parses as a whole; its dollar-quoted body is checked as a query of its own.
            assert parse_statements(text, "postgres")
            text = function_query(text)
        checked = check_roundtrip(psql_vars_to_binds(text))
        assert checked, name
        if name not in ("schema.sql", "rls.sql"):
            assert any("<=>" in (c.roundtrip or "") for c in checked), name


def test_rendering_an_edition_parses_every_statement(monkeypatch):
    """sqlglot checks what a DBA gets before it is written or printed: a template rendering broken SQL is
    an error naming the file (how operators are kept is test_sqlcheck's)."""
    import onetrip.editions as editions
    from onetrip.sqlcheck import SqlValidationError

    assert editions.check_edition("postgres", render_edition("postgres")) >= len(render_edition("postgres"))
    real = editions.render
    monkeypatch.setattr(editions, "render", lambda template, **kw: "SELECT doc_id FROM sections WHERE ("
                        if template == "assemble" else real(template, **kw))
    with pytest.raises(SqlValidationError, match="^postgres/assemble.sql: postgres SQL does not parse"):
        render_edition("postgres")


@pytest.mark.parametrize("dialect", ["postgres", "oracle"])
def test_headers_tell_a_dba_what_they_need(dialect):
    for name, text in render_edition(dialect).items():
        head = text.split("-- =====", 2)[1]
        for key in ("Purpose", "Requires"):
            assert key in head, f"{dialect}/{name} header lacks {key}"
        if name not in ("schema.sql",):
            for key in ("Params", "Plan"):
                assert key in head, f"{dialect}/{name} header lacks {key}"
        if dialect == "oracle":
            assert "validated by parsing" in head and "NOT by execution" in head


def _onetrip_note(name: str) -> str:
    """The header's `onetrip` paragraph of a checked-in PostgreSQL file: what the Python API sends instead."""
    head = (SQL_DIR / "postgres" / name).read_text().split("-- =====", 2)[1]
    return " ".join(head.split("-- onetrip ", 1)[1].replace("--", " ").split())


def test_hybrid_header_says_which_limit_the_api_buckets():
    """retrieve_hybrid.sql's note on the statement the API sends names the LIMIT that statement buckets: the
    dense list's HNSW scan takes the bucket of :candidates, whatever k, then LIMIT :candidates; the hits keep
    LIMIT :k. The note once said k's bucket then LIMIT :k (retrieve.sql's form), which a DBA comparing the two
    statements, or the plans of a k that is not a bucket, would not find."""
    from onetrip.retrieve import k_bucket, plan_search

    k, candidates = 3, 30
    vector = np.full(384, 0.05, dtype=np.float32)
    statement = plan_search(Layout(), vector, k, mode="hybrid", text="how do I descale",
                            hybrid={"candidates": candidates}).statement
    assert f"LIMIT {k_bucket(candidates)}\n" in statement and f"LIMIT {k_bucket(k)}\n" not in statement
    assert "LIMIT %(candidates)s" in statement and "LIMIT %(k)s" in statement
    assert "OFFSET 0" in statement
    note = _onetrip_note("retrieve_hybrid.sql")
    assert "at or above :candidates" in note and "then LIMIT :k" not in note, note
    assert "cut to LIMIT :candidates" in note and "OFFSET 0" in note, note
    # retrieve.sql's note, for the dense statement, is the one that buckets k
    dense = plan_search(Layout(), vector, k, mode="dense").statement
    assert f"LIMIT {k_bucket(k)}\n" in dense and "LIMIT %(k)s" in dense
    assert "then LIMIT :k" in _onetrip_note("retrieve.sql")


@pytest.fixture
def loaded(db, dsn):
    # Create the schema with the checked-in file itself, through psql.
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                    "-f", str(SQL_DIR / "postgres" / "schema.sql")], check=True, capture_output=True)
    layout = Layout()
    docs = list(generate(400, dim=384, seed=3, sections_per_doc=(3, 20)))
    for d in docs:
        replace_document(db, layout, d.record, d.sections, d.embeddings)
    return docs


def test_schema_header_recounts_words_as_refresh_term_stats(db, dsn, loaded, tmp_path):
    """Rows loaded outside onetrip leave term_stats empty (every word then weighs 1): schema.sql's header
    gives a DBA the statements `onetrip refresh-term-stats` runs. Run as written there, in psql, they count
    the same words as store.refresh_term_stats, and merge the GIN indexes' pending lists."""
    from onetrip.store import refresh_term_stats

    head = (SQL_DIR / "postgres" / "schema.sql").read_text().split("-- =====", 2)[1]
    words = head.split("-- Words ", 1)[1].split("\n-- Re-run", 1)[0]
    script = "\n".join(line[len("--             "):] for line in words.splitlines()
                       if line.startswith("--             "))
    assert "ts_stat(" in script and "gin_clean_pending_list(" in script, words
    (tmp_path / "words.sql").write_text(script)
    count = "SELECT count(*) FROM term_stats WHERE lexeme <> ''"  # '': the mark each stored document leaves
    assert db.execute(count).fetchone()[0] == 0, "replace_document alone does not count words"
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(tmp_path / "words.sql")],
                   check=True, capture_output=True)
    read = "SELECT lexeme, sections, share, idf FROM term_stats ORDER BY lexeme"
    by_psql = db.execute(read).fetchall()
    assert by_psql
    db.execute("DELETE FROM term_stats")
    refresh_term_stats(db, Layout())
    assert db.execute(read).fetchall() == by_psql


def _key(rows: list[dict[str, str]]) -> list[tuple]:
    """psql's rows (each section once: hits, then context) linked by key, as a reader of the file would."""
    by_id = {(r["doc_id"], r["section_id"]): r for r in rows}
    by_seq = {(r["doc_id"], int(r["sequence_index"])): r for r in rows}
    hits = [r for r in rows if r["hit_rank"]]
    assert [int(r["hit_rank"]) for r in hits] == list(range(1, len(hits) + 1))
    assert rows[:len(hits)] == hits, "hits come first"
    out = []
    for r in hits:
        doc, seq = r["doc_id"], int(r["sequence_index"])
        parent = by_id.get((doc, r["parent_section_id"])) if r["parent_section_id"] else None
        prev, nxt = by_seq.get((doc, seq - 1)), by_seq.get((doc, seq + 1))
        out.append((doc, r["section_id"], parent and parent["section_id"], prev and prev["section_id"],
                    nxt and nxt["section_id"], r["content"], parent and parent["content"], nxt and nxt["content"]))
    return out


def _api_key(hits) -> list[tuple]:
    return [(h.section.doc_id, h.section.section_id, h.parent and h.parent.section_id,
             h.prev and h.prev.section_id, h.next and h.next.section_id, h.section.content,
             h.parent and h.parent.content, h.next and h.next.content) for h in hits]


def test_psql_runs_retrieve_sql_as_is_and_matches_the_api(db, dsn, loaded):
    r = Retriever(db)
    for q in corpus_query_vectors(loaded, 5, seed=9):
        rows = run_psql(dsn, "-v", "k=5", "-v", f"query_embedding={vec_literal(q)}",
                        "-f", str(SQL_DIR / "postgres" / "retrieve.sql"))
        hits = r.search(q, k=5)
        assert sum(1 for row in rows if row["hit_rank"]) == 5
        assert _key(rows) == _api_key(hits)
        # each section once: no row repeats a section, and every context row serves a hit
        assert len({(row["doc_id"], row["section_id"]) for row in rows}) == len(rows)
        related = {(h.section.doc_id, x.section_id) for h in hits for x in (h.parent, h.prev, h.next) if x}
        assert {(row["doc_id"], row["section_id"]) for row in rows if not row["hit_rank"]} <= related
        for row, hit in zip(rows, hits):
            assert float(row["distance"]) == pytest.approx(hit.distance, abs=1e-5)


@pytest.mark.parametrize("name, variable", [("retrieve.sql", "k"), ("assemble.sql", "max_tokens"),
                                            ("retrieve_hybrid.sql", "dense_weight")])
def test_psql_number_variables_are_values_not_sql(db, dsn, loaded, name, variable):
    """psql pastes a bare :k into the text as it is: -v k='1) ...; DROP TABLE ...' ran its DROP. The files
    quote every variable and cast it (:'k'::integer), so a value that is not a number is an error naming it
    and nothing of it runs; a number still works (the other tests pass them as -v k=5)."""
    db.execute("CREATE TABLE canary (x int)")
    binds = {"k": "5", "max_tokens": "2000", "neighbors": "1", "query_text": "Body", "query_terms": "{}",
             "candidates": "50", "rrf_k": "60", "dense_weight": "1.0", "lexical_weight": "0.3",
             "term_weight": "10.0", "max_term_share": "0.03", "rare_term_sections": "100", "tf_weight": "0",
             "query_embedding": vec_literal(corpus_query_vectors(loaded, 1, seed=3)[0])}
    binds[variable] = "1) AS x; DROP TABLE canary; SELECT (1"
    args = [a for b, v in binds.items() for a in ("-v", f"{b}={v}")]
    # no ON_ERROR_STOP, as in a script that does not set it: psql goes on past a failed statement
    out = subprocess.run([psql_binary(), "-X", "-q", "-d", dsn, *args, "-f", str(SQL_DIR / "postgres" / name)],
                         capture_output=True, text=True)
    assert "invalid input syntax" in out.stderr and "DROP TABLE canary" in out.stderr, out.stderr
    assert db.execute("SELECT to_regclass('canary')").fetchone()[0] == "canary"


def test_headers_say_when_the_api_bucket_changes_the_hits_and_rows_agree_when_ef_search_covers_it(db, dsn, loaded,
                                                                                                    tmp_path):
    """The API scans k's bucket and keeps the k nearest; retrieve.sql keeps the first k the scan returns.
    With iterative scans on and the bucket above hnsw.ef_search the hit sets can differ (18 of 100 queries
    at k = 35 on 10,000 synthetic sections), which the headers once left out: they gave the bucket as a plan
    device only, and the function claimed the API's rows at any k. With ef_search at least the bucket,
    both read the same first batch and agree, as the notes now say."""
    from onetrip.editions import DEFAULT_EF_SEARCH
    from onetrip.retrieve import k_bucket

    note = _onetrip_note("retrieve.sql")
    assert "The bucket can change the hits" in note and "hnsw.ef_search at least the bucket" in note, note
    function_head = " ".join((SQL_DIR / "postgres" / "retrieve_function.sql").read_text()
                             .split("-- =====", 2)[1].replace("--", " ").split())
    # "for k up to <ef_search>" is exact only while the pinned ef_search is itself a bucket
    assert k_bucket(DEFAULT_EF_SEARCH) == DEFAULT_EF_SEARCH
    assert f"Python API at hnsw.ef_search = {DEFAULT_EF_SEARCH} for k up to {DEFAULT_EF_SEARCH}" in function_head
    # ... and unfiltered: a DBA review found 5 of 20 filtered calls (a small collection, searched exactly through
    # its btree index here, approximately by the API's HNSW scan) differing in a few hits
    assert "when no collections or principals are given" in function_head

    k = 35
    bucket = k_bucket(k)
    assert bucket > k
    db.execute("SET enable_seqscan = off")  # a few hundred rows: make both statements scan the HNSW index
    r = Retriever(db, ef_search=bucket)
    script = tmp_path / "retrieve.sql"
    script.write_text(f"SET hnsw.ef_search = {bucket};\nSET hnsw.iterative_scan = relaxed_order;\n"
                      "SET enable_seqscan = off;\n" + (SQL_DIR / "postgres" / "retrieve.sql").read_text())
    for q in corpus_query_vectors(loaded, 5, seed=11):
        rows = run_psql(dsn, "-q", "-v", f"k={k}", "-v", f"query_embedding={vec_literal(q)}", "-f", str(script))
        hits = r.search(q, k=k, mode="dense")
        assert sum(1 for row in rows if row["hit_rank"]) == k
        assert _key(rows) == _api_key(hits)


@pytest.mark.parametrize("name", ["retrieve.sql", "retrieve_many.sql", "retrieve_hybrid.sql",
                                  "retrieve_many_hybrid.sql", "assemble.sql"])
def test_every_index_a_plan_paragraph_names_is_in_the_files_plan(db, dsn, loaded, tmp_path, name):
    """A DBA reads the header's Plan and looks for those index names in EXPLAIN. Run as the header's psql
    line says (index scans preferred: the fixture's table is a few hundred rows), each file's plan uses
    every index its Plan paragraph names. assemble.sql's once named sections_pkey, which only the
    ancestors expansion reads (the checked-in file expands by parent and section subtree)."""
    text = (SQL_DIR / "postgres" / name).read_text()
    head = text.split("-- =====", 2)[1]
    plan = head.split("\n-- Plan ", 1)[1]
    plan = re.split(r"\n-- [A-Z][a-z]+ ", plan, maxsplit=1)[0]
    indexes = {n for n in Layout().names.values() if isinstance(n, str)
               and n.endswith(("_hnsw", "_key", "_idx", "_gin", "_pkey"))}
    named = {n for n in indexes if re.search(rf"\b{n}\b", plan)}
    assert named, plan
    q = corpus_query_vectors(loaded, 2, seed=5)
    binds = {"k": "5", "max_tokens": "2000", "query_embedding": vec_literal(q[0]),
             "query_embeddings": "{" + ",".join(f'"{vec_literal(v)}"' for v in q) + "}",
             "query_text": "Body of the section", "query_terms": "{}",
             "query_texts": '{"Body of the section","topic level"}', "query_terms_many": '{"",""}',
             "candidates": "50", "rrf_k": "60", "dense_weight": "1.0", "lexical_weight": "0.3",
             "term_weight": "10.0", "max_term_share": "0.03", "rare_term_sections": "100", "tf_weight": "0"}
    if "many" in name:
        binds["query_terms"] = binds.pop("query_terms_many")
    script = tmp_path / name
    script.write_text("SET enable_seqscan = off;\nEXPLAIN (COSTS OFF)\n" + text.split("-- =====", 2)[2].split("\n", 1)[1])
    args = [a for b, v in binds.items() for a in ("-v", f"{b}={v}")]
    out = subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, *args, "-f", str(script)],
                         check=True, capture_output=True, text=True).stdout
    missing = {n for n in named if not re.search(rf"\b{n}\b", out)}
    assert not missing, f"{name}: its Plan names {sorted(missing)}, EXPLAIN uses none of them:\n{out}"


def test_psql_runs_retrieve_many_sql_as_is_and_matches_the_api(db, dsn, loaded):
    r = Retriever(db)
    doc = next(d for d in loaded if len(d.sections) >= 6)
    two, three = _unit(doc.embeddings[2]), _unit(doc.embeddings[3])
    queries = list(corpus_query_vectors(loaded, 3, seed=19)) + [two, three]  # each one's hit the other's neighbour
    array = "{" + ",".join(f'"{vec_literal(q)}"' for q in queries) + "}"
    rows = run_psql(dsn, "-v", "k=4", "-v", f"query_embeddings={array}",
                    "-f", str(SQL_DIR / "postgres" / "retrieve_many.sql"))
    api = r.search_many(queries, k=4)
    context = [row for row in rows if not row["query_ord"]]
    assert len({(row["doc_id"], row["section_id"]) for row in context}) == len(context)  # each context row once
    for n, hits in enumerate(api, 1):
        # one query's hits plus every context row: the shape of retrieve.sql's result, linked the same way;
        # another query's hits serve as context too (a context row is none of them), so they are read as such
        others = [{**row, "hit_rank": ""} for row in rows if row["query_ord"] not in ("", str(n))]
        mine = [row for row in rows if row["query_ord"] == str(n)] + context + others
        assert _key(mine) == _api_key(hits)
    # found by review: a NULL among the query embeddings took k rows in no order as its hits; it finds nothing
    nulls = "{" + ",".join([f'"{vec_literal(queries[0])}"', "NULL"]) + "}"
    rows = run_psql(dsn, "-v", "k=4", "-v", f"query_embeddings={nulls}",
                    "-f", str(SQL_DIR / "postgres" / "retrieve_many.sql"))
    assert {row["query_ord"] for row in rows if row["query_ord"]} == {"1"}


def test_function_wrapper_returns_the_same_rows(db, dsn, loaded):
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                    "-f", str(SQL_DIR / "postgres" / "retrieve_function.sql")], check=True, capture_output=True)
    r = Retriever(db, ef_search=DEFAULT_EF_SEARCH)
    for q in corpus_query_vectors(loaded, 5, seed=10):
        rows = run_psql(dsn, "-c", f"SELECT * FROM retrieve_sections('{vec_literal(q)}'::vector, 7)")
        assert _key(rows) == _api_key(r.search(q, k=7))
    # The function pins its settings for its own execution only: they are in its SET clause (pg_proc),
    # and a session that has not set them keeps pgvector's defaults after calling it.
    config = db.execute("SELECT proconfig FROM pg_proc WHERE proname = 'retrieve_sections'").fetchone()[0]
    assert set(config) >= {f"hnsw.ef_search={DEFAULT_EF_SEARCH}", "hnsw.iterative_scan=relaxed_order",
                           "plan_cache_mode=force_custom_plan"}, config
    with psycopg.connect(dsn, autocommit=True) as fresh:  # no Retriever has set anything on this session
        got = fresh.execute("SELECT count(hit_rank) FROM retrieve_sections(%s::vector, 3)",
                            (vec_literal(loaded[0].embeddings[0]),)).fetchone()[0]
        assert got == 3
        assert fresh.execute("SHOW hnsw.ef_search").fetchone()[0] == "40"
        assert fresh.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "off"
    # PL/pgSQL, not LANGUAGE sql: planned with its arguments on every version (see the next tests and the header)
    assert db.execute("SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                      "WHERE p.proname = 'retrieve_sections'").fetchone()[0] == "plpgsql"


def test_function_filters_return_fewer_rows_past_the_callers_max_scan_tuples_as_its_header_says(db, dsn, loaded):
    """The function pins ef_search and iterative scans, not hnsw.max_scan_tuples: a filtered call returns k
    rows only while they are among the rows the scan may read. Its header once said filtered searches
    still return k rows, without that bound."""
    head = " ".join((SQL_DIR / "postgres" / "retrieve_function.sql").read_text()
                    .split("-- =====", 2)[1].replace("--", " ").split())
    assert "hnsw.max_scan_tuples rows, which is NOT pinned" in head
    # the fixture's DSN, not db.info.dsn: psycopg's newer libpq adds options (sslcertmode) an older psql refuses
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f",
                    str(SQL_DIR / "postgres" / "retrieve_function.sql")], check=True, capture_output=True)
    q = vec_literal(corpus_query_vectors(loaded, 1, seed=21)[0])
    # principal 'far' may read only the 40 sections farthest from the query (acl has no index: the filter
    # applies to the HNSW scan's rows, where a collection could be read through its btree index instead)
    db.execute("UPDATE sections SET acl = ARRAY['other']")
    db.execute("""UPDATE sections SET acl = ARRAY['far']
                   WHERE (doc_id, section_id) IN (SELECT doc_id, section_id FROM sections
                                                   ORDER BY embedding <=> %s::vector DESC LIMIT 40)""", (q,))
    db.execute("SET enable_seqscan = off")  # a few hundred rows: scan the HNSW index
    call = "SELECT count(hit_rank) FROM retrieve_sections(%s::vector, 10, principals => ARRAY['far'])"
    assert db.execute(call, (q,)).fetchone()[0] == 10  # the default bound reads the whole table
    db.execute("SET hnsw.max_scan_tuples = 50")
    assert db.execute(call, (q,)).fetchone()[0] < 10


def test_function_refuses_what_the_api_refuses_and_no_column_stands_in_for_an_argument(db, dsn, loaded):
    """LIMIT NULL would return every row as a hit; and a column named like an argument (added to sections
    later) would win over it under #variable_conflict use_column, switching the access check off."""
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                    "-f", str(SQL_DIR / "postgres" / "retrieve_function.sql")], check=True, capture_output=True)
    q = vec_literal(loaded[0].embeddings[0])
    for k in ("NULL", "0", "-1", "1001"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="k must be an integer from 1 to 1000"):
            db.execute(f"SELECT * FROM retrieve_sections(%s::vector, {k})", (q,))
    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="query_embedding must not be NULL"):
        db.execute("SELECT * FROM retrieve_sections(NULL, 5)")
    db.execute("UPDATE sections SET acl = ARRAY['hr'] WHERE doc_id = %s", (loaded[0].record.doc_id,))
    db.execute("ALTER TABLE sections ADD COLUMN principals text[], ADD COLUMN k integer")
    db.execute("UPDATE sections SET principals = ARRAY['nobody'], k = 1000")
    rows = db.execute("SELECT doc_id, hit_rank FROM retrieve_sections(%s::vector, 5, principals => ARRAY['nobody'])",
                      (q,)).fetchall()
    assert rows and loaded[0].record.doc_id not in {d for d, _ in rows}  # the caller's principals, not the column
    assert sum(r is not None for _, r in rows) == 5  # the argument k, not the column


def test_function_body_plan_uses_hnsw_when_prepared(db, loaded):
    """The wrapper's body runs with its arguments as parameters, through the plan cache.

    A forced generic plan would estimate LIMIT $2 as 10% of the table and pick a
    Seq Scan; under the default plan_cache_mode the custom plans (index scan)
    stay cheaper than the generic one, so the cache keeps choosing them. This
    checks that after more executions than the cache's five-custom-plan warm-up.
    """
    layout = Layout()
    for d in generate(3000, dim=384, seed=4, sections_per_doc=(10, 40), doc_prefix="more"):
        replace_document(db, layout, d.record, d.sections, d.embeddings)
    body = function_query(render_edition("postgres")["retrieve_function.sql"]).replace("retrieve_sections.", "")
    body = (body.replace("query_embedding", "$1").replace("LIMIT k", "LIMIT $2")
            .replace("collections", "$3::text[]").replace("principals", "$4::text[]"))
    db.execute("ANALYZE sections")
    db.execute(f"PREPARE wrapped(vector, integer, text[], text[]) AS {body}")
    q = vec_literal(loaded[0].embeddings[1])
    for _ in range(8):
        db.execute(f"EXECUTE wrapped('{q}', 5, NULL, NULL)")
    plan = "\n".join(r[0] for r in db.execute(f"EXPLAIN EXECUTE wrapped('{q}', 5, NULL, NULL)"))
    hits_part = plan.split("CTE hits", 1)[1]
    assert "Index Scan using sections_embedding_hnsw" in hits_part, plan
    # why the function pins plan_cache_mode = force_custom_plan: a server forcing generic plans gets this one
    db.execute("SET plan_cache_mode = force_generic_plan")
    generic = "\n".join(r[0] for r in db.execute(f"EXPLAIN EXECUTE wrapped('{q}', 5, NULL, NULL)"))
    db.execute("RESET plan_cache_mode")
    assert "Seq Scan on sections" in generic, generic


def test_function_reads_sections_through_its_indexes_on_every_call(db, dsn):
    """The function's body is planned with each call's k (a PL/pgSQL RETURN QUERY goes through the plan cache
    on every PostgreSQL version, and the SET clause forces a custom plan): the HNSW index for the hits and the
    (doc_id, sequence_index) key for the context, never a scan of the whole table. As LANGUAGE sql it read
    all of sections on PostgreSQL 15 (an SQL function is planned there without its argument values: LIMIT k
    taken as 10% of the table; a Seq Scan or a Hash Join over one, ~25 ms against ~1.6 on 10,000 rows).
    The scan counters are the server's own (pg_stat_user_tables), flushed after each call."""
    from onetrip.synthetic import bulk_load

    docs = list(generate(12000, dim=384, seed=21, sections_per_doc=(5, 30)))
    bulk_load(db, Layout(), docs)
    subprocess.run([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
                    "-f", str(SQL_DIR / "postgres" / "retrieve_function.sql")], check=True, capture_output=True)

    def scans() -> tuple[int, int]:
        db.execute("SELECT pg_stat_clear_snapshot()")
        return db.execute("SELECT seq_scan, idx_scan FROM pg_stat_user_tables "
                          "WHERE relid = 'sections'::regclass").fetchone()

    with psycopg.connect(dsn, autocommit=True) as caller:
        for i, q in enumerate(corpus_query_vectors(docs, 6, seed=22)):
            before = scans()
            rows = caller.execute("SELECT hit_rank FROM retrieve_sections(%s::vector, %s)",
                                  (vec_literal(q), 5 + i)).fetchall()
            caller.execute("SELECT pg_stat_force_next_flush()")  # the call's counters, as this backend idles
            after = scans()
            assert sum(r[0] is not None for r in rows) == 5 + i
            assert after[0] == before[0], f"call {i}: sections read by a sequential scan"
            assert after[1] > before[1], f"call {i}: no index scan counted"


def test_rendering_with_a_hostile_schema_never_reaches_sql():
    from onetrip import InvalidIdentifierError

    for bad in ['x"; drop table sections; --', "kb;", "k\u0431", "K"]:
        with pytest.raises(InvalidIdentifierError):
            render_edition("postgres", Layout(schema=bad))


def test_oracle_indexes_are_created_in_the_tables_schema():
    """Oracle creates an unqualified index in the schema of whoever runs the file: with --schema app the tables
    were app's and the indexes the installer's (and IF NOT EXISTS looked there, so a second user's re-run built
    duplicates). PostgreSQL takes no schema in an index name: its indexes always live beside their table."""
    layout = Layout(schema="app", prefix="ot_")
    made = re.compile(r"^CREATE (?:UNIQUE |VECTOR )?INDEX (?:IF NOT EXISTS )?(\S+)\s+ON (\S+)", re.M)
    oracle = made.findall(render_edition("oracle", layout)["schema.sql"])
    assert len(oracle) == 4 and all(name.startswith("app.ot_") and table.startswith("app.ot_")
                                    for name, table in oracle), oracle
    postgres = made.findall(render_edition("postgres", layout)["schema.sql"])
    assert len(postgres) == 6 and all(name.startswith("ot_") and table.startswith("app.ot_")
                                      for name, table in postgres), postgres
    assert all(name.startswith("ot_") for name, _ in made.findall(render_edition("oracle", Layout(prefix="ot_"))
                                                                  ["schema.sql"]))


def _code(text: str) -> str:
    """SQL without -- comments (headers mention constructs by name)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_oracle_edition_pins_each_oracle_construct():
    files = {name: (SQL_DIR / "oracle" / name).read_text() for name in ("schema.sql", "retrieve.sql", "retrieve_macro.sql")}
    schema, query, macro = (_code(files[n]) for n in ("schema.sql", "retrieve.sql", "retrieve_macro.sql"))
    assert "embedding         VECTOR(384, FLOAT32) NOT NULL" in schema
    # Oracle's documented syntax has no IF NOT EXISTS for it (a review of the edition against Oracle's docs);
    # it is the file's last statement, so a re-run's ORA-00955 comes after everything else is in place
    assert "CREATE VECTOR INDEX sections_embedding_hnsw" in schema and "VECTOR INDEX IF NOT EXISTS" not in schema
    assert schema.rstrip().rsplit(";", 2)[-2].strip().startswith("CREATE VECTOR INDEX sections_embedding_hnsw")
    assert "ORGANIZATION INMEMORY NEIGHBOR GRAPH" in schema and "DISTANCE COSINE" in schema
    assert "heading_path      JSON" in schema and "CLOB" in schema
    assert "VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE)" in query
    assert "VECTOR_DISTANCE(s.embedding, query_embedding, COSINE)" in macro  # the macro's VECTOR parameter
    # SQL*Plus runs a statement at a ';' ending its last line (psql runs what is left at end of file); a
    # lone ';' line is a SQL*Plus command of its own
    assert query.rstrip().splitlines()[-1].endswith("w.sequence_index;")
    assert not [line for line in query.splitlines() if line.strip() == ";"]
    assert "content           CLOB," in schema  # '' is NULL in Oracle: heading-only sections have no content
    assert "PARAMETERS (TYPE HNSW, NEIGHBORS 16, EFCONSTRUCTION 64)" in schema  # as the PostgreSQL index
    assert "NLSSORT(h.doc_id, 'NLS_SORT=BINARY')" in query  # ties broken the same in every session
    for q in (query, macro):
        assert "FETCH APPROX FIRST" in q and "ROWS ONLY" in q
        assert "AS MATERIALIZED" not in q and "LIMIT" not in q
        assert "<=>" not in q and "%(" not in q and "::" not in q
        # No AS before table aliases (Oracle rejects it); column aliases keep AS.
        assert not re.search(r"\b(FROM|JOIN)\s+\w+\s+AS\s+\w+", q), "table alias with AS"
        assert not re.search(r"\)\s+AS\s+\w+\s*(\)|JOIN|CROSS|WHERE|$)", q), "inline view alias with AS"
        assert "JOIN sections s" in q and "LEFT JOIN" not in q and "EXCEPT" not in q
    assert "SELECT /*+ MATERIALIZE */" in query and "MINUS" in query  # the hits CTE; Oracle's set difference
    # The macro's query has no WITH clause: a WITH subquery cannot read a table macro's scalar parameters
    # (see its header); its one search is an inline view, the context a constant row source and one join.
    inner = _macro_query()
    assert not re.search(r"\bWITH\b", _code(inner)) and "MATERIALIZE" not in inner and "MINUS" not in inner
    assert inner.count("FETCH APPROX FIRST k ROWS ONLY") == 1
    assert "NLSSORT(x.doc_id, 'NLS_SORT=BINARY')" in inner and "NLSSORT(r.doc_id, 'NLS_SORT=BINARY')" in inner
    assert re.search(r"JOIN sections s\s+ON s\.doc_id = h\.doc_id\s+AND s\.sequence_index = CASE c\.rel "
                     r"WHEN 2 THEN h\.parent_sequence_index ELSE h\.sequence_index \+ c\.rel END", inner)
    assert ":query_embedding" in query and ":k" in query
    assert "SQL_MACRO(TABLE)" in macro and "RETURN q'~" in macro and macro.rstrip().endswith("/")
    # The one context join carries doc_id and reads (doc_id, sequence_index) in both editions
    # (shard/partition-local, one index).
    for text in (query, _code((SQL_DIR / "postgres" / "retrieve.sql").read_text())):
        joins = re.findall(r"JOIN sections s\s+ON s\.(\w+) = w\.doc_id\s+AND s\.(\w+) = w\.(\w+)", text)
        assert joins == [("doc_id", "sequence_index", "sequence_index")], joins


def test_psql_runs_assemble_sql_as_is_and_matches_the_api(db, dsn, loaded):
    r = Retriever(db)
    for q in corpus_query_vectors(loaded, 4, seed=12):
        rows = run_psql(dsn, "-v", "k=6", "-v", "neighbors=1", "-v", "max_tokens=700",
                        "-v", f"query_embedding={vec_literal(q)}", "-f", str(SQL_DIR / "postgres" / "assemble.sql"))
        ctx = r.assemble(q, k=6, max_tokens=700)  # the library's default expansion
        assert [(x["doc_id"], x["section_id"], int(x["best_rank"])) for x in rows] == \
            [(p.doc_id, p.section_id, p.best_rank) for p in ctx.passages]
        assert rows, "budget left no passage"


def test_assemble_header_says_the_api_buckets_k_and_rows_agree_when_ef_search_covers_it(db, dsn, loaded,
                                                                                         tmp_path):
    """Retriever.assemble scans k's bucket and keeps the k nearest, as search does; assemble.sql has LIMIT :k.
    Its header once had no `onetrip` paragraph, so sql/README's "the differences its header lists" claimed
    none, while at k = 35 on the default ef_search (40 < the bucket, 50) the hits could differ (a DBA
    review: 4 of 20 queries on 5,000 synthetic sections). With ef_search at least the bucket they agree."""
    from onetrip.retrieve import k_bucket, plan_assemble

    k = 35
    bucket = k_bucket(k)
    assert bucket > k
    sent = plan_assemble(Layout(), np.ones(384, dtype=np.float32), k, max_tokens=100000).statement
    assert f"LIMIT {bucket}\n" in sent and "LIMIT %(k)s" in sent
    note = _onetrip_note("assemble.sql")
    assert "bucket" in note and "hnsw.ef_search at least the bucket" in note, note
    db.execute("SET enable_seqscan = off")
    r = Retriever(db, ef_search=bucket)
    script = tmp_path / "assemble.sql"
    script.write_text(f"SET hnsw.ef_search = {bucket};\nSET hnsw.iterative_scan = relaxed_order;\n"
                      "SET enable_seqscan = off;\n" + (SQL_DIR / "postgres" / "assemble.sql").read_text())
    for q in corpus_query_vectors(loaded, 4, seed=13):
        rows = run_psql(dsn, "-q", "-v", f"k={k}", "-v", "max_tokens=100000",
                        "-v", f"query_embedding={vec_literal(q)}", "-f", str(script))
        ctx = r.assemble(q, k=k, max_tokens=100000)
        assert [(x["doc_id"], x["section_id"], int(x["best_rank"])) for x in rows] == \
            [(p.doc_id, p.section_id, p.best_rank) for p in ctx.passages]
        assert sum(1 for x in rows if x["distance"]) == k


def test_citus_edition_distributes_by_doc_id_and_says_how_it_was_validated():
    text = (SQL_DIR / "citus" / "schema.sql").read_text()
    assert parse_statements(text, "postgres")
    code = _code(text)
    assert "SELECT create_distributed_table('documents', 'doc_id');" in code
    for table in ("sections", "section_history"):
        assert f"SELECT create_distributed_table('{table}', 'doc_id', colocate_with => 'documents');" in code
    assert "USING hnsw (embedding vector_cosine_ops)" in code  # created per shard by Citus
    head = text.split("-- =====", 2)[1]
    assert "NOT ON A LIVE CLUSTER" in head and "propagate_set_commands" in head and "ALTER DATABASE" in head


def test_partitioned_and_halfvec_renderings(tmp_path):
    from onetrip.editions import write_editions

    write_editions(tmp_path, ["postgres"], Layout(partitions=8, vector_type="halfvec"))
    schema = (tmp_path / "postgres" / "schema.sql").read_text()
    assert ") PARTITION BY HASH (doc_id);" in schema and "sections_p7" in schema
    assert "halfvec(384)" in schema and "halfvec_cosine_ops" in schema
    assert "::halfvec" in (tmp_path / "postgres" / "retrieve.sql").read_text()
    # the headers name the type the statements bind (a DBA review read vector(384) over a ::halfvec bind)
    for name in ("retrieve.sql", "retrieve_hybrid.sql", "assemble.sql", "retrieve_many.sql",
                 "retrieve_many_hybrid.sql"):
        head = (tmp_path / "postgres" / name).read_text().split("-- =====", 2)[1]
        assert "halfvec(384)" in head and "vector(384)" not in head.replace("halfvec(384)", ""), name
    assert "'...'::halfvec" in (tmp_path / "postgres" / "retrieve.sql").read_text()
    with pytest.raises(Exception, match="PostgreSQL and Citus editions only, not Oracle"):
        render_edition("oracle", Layout(vector_type="halfvec"))


# --------------------------------------------------------------------------- the Oracle macro's filters

def _macro_query() -> str:
    from onetrip.sqlcheck import extract_oracle_macro_query

    return extract_oracle_macro_query((SQL_DIR / "oracle" / "retrieve_macro.sql").read_text())


def test_oracle_macro_filters_hits_and_context_rows_as_the_postgres_function():
    """retrieve_sections in both editions takes (query_embedding, k, collections, principals), NULL switching a
    filter off, and applies both filters to the hits AND to the context rows (the parent/neighbor join): an
    added row never bypasses a filter."""
    import sqlglot
    from sqlglot import exp

    from onetrip.sqlcheck import ApproxFetch, Oracle23ai, PgVectorPostgres

    macro = (SQL_DIR / "oracle" / "retrieve_macro.sql").read_text()
    head, code = macro.split("-- =====", 2)[1], _code(macro)
    assert re.search(r"query_embedding VECTOR,\s+k NUMBER DEFAULT 5,\s+collections VARCHAR2 DEFAULT NULL,"
                     r"\s+principals VARCHAR2 DEFAULT NULL\s+\) RETURN VARCHAR2 SQL_MACRO\(TABLE\)", code)
    function = (SQL_DIR / "postgres" / "retrieve_function.sql").read_text()
    assert re.search(r"k integer DEFAULT 5,\s+collections text\[\] DEFAULT NULL,\s+principals text\[\] DEFAULT NULL",
                     function)  # the same argument order
    for word in ("collections      VARCHAR2", "principals       VARCHAR2", "JSON array", "SYS.ODCIVARCHAR2LIST",
                 "pre-filters", "in-filters", "'[\"hr\", \"u:42\"]'", ":collections, :principals"):
        assert word in head, word

    def places(sql: str, dialect) -> list[str]:
        """The filter text of the search's WHERE (the hits CTE in PostgreSQL, the inline view whose FETCH
        APPROX is the search in Oracle) and of the context join's ON, as sqlglot reads them."""
        tree = sqlglot.parse_one(sql, read=dialect)
        if dialect is Oracle23ai:
            (fetch,) = tree.find_all(ApproxFetch)
            hits = fetch.parent
        else:
            hits = next(c for c in tree.find_all(exp.CTE) if c.alias == "hits").this
        (join,) = [j for j in tree.find_all(exp.Join) if j.this.alias_or_name == "s"]
        return [hits.args["where"].sql(dialect=dialect), join.args["on"].sql(dialect=dialect)]

    pg = places(psql_vars_to_binds(function_query(function).replace("retrieve_sections.", "")), PgVectorPostgres)
    ora = places(_macro_query(), Oracle23ai)
    for p in pg:
        assert "(collections IS NULL OR s.collection = ANY(collections))" in p
        assert "(principals IS NULL OR s.acl IS NULL OR s.acl && principals)" in p
    for o in ora:
        assert ("(collections IS NULL OR s.collection IN (SELECT cc.collection FROM JSON_TABLE(collections, '$[*]' "
                "ERROR ON ERROR COLUMNS(collection VARCHAR2(512 CHAR) PATH '$')) cc))") in o
        assert ("(principals IS NULL OR s.acl IS NULL OR EXISTS(SELECT 1 FROM JSON_TABLE(principals, '$[*]' "
                "ERROR ON ERROR COLUMNS(principal VARCHAR2(512 CHAR) PATH '$')) cp "
                "WHERE JSON_EXISTS(s.acl, '$[*]?(@ == $p)' PASSING cp.principal AS \"p\")))") in o
    # nowhere else: the context candidates come from the hits alone (c is a constant row source)
    query = _macro_query()
    assert query.count("collections IS NULL") == 2 and query.count("principals IS NULL") == 2
    # retrieve.sql stays the unfiltered statement in both editions (its filters live in the wrappers)
    for edition in ("oracle", "postgres"):
        assert "collections" not in _code((SQL_DIR / edition / "retrieve.sql").read_text())


def test_oracle_filters_render_as_optional_binds_and_refuse_the_postgres_only_ones():
    """Outside the macro the same filters are :binds, still NULL = off (what an unset SQL*Plus VARIABLE is);
    the filters Oracle has no rendering for are refused, not dropped."""
    from onetrip.sqlcheck import check_oracle_roundtrip, oracle_constructs
    from onetrip.templates import render

    both = {"collections": True, "principals": True}
    text = render("retrieve", dialect="oracle", filters=both, include_parent=True, include_neighbors=True)
    (st,) = check_oracle_roundtrip(text)
    assert set(oracle_constructs(st.sql)["bind"]) == {"QUERY_EMBEDDING", "K", "COLLECTIONS", "PRINCIPALS"}
    assert text.count("(:collections IS NULL OR s.collection IN (") == 2
    assert text.count("(:principals IS NULL OR s.acl IS NULL OR EXISTS (") == 2
    for other in ("doc_ids", "source_prefix", "metadata"):
        with pytest.raises(ValueError, match="PostgreSQL only"):
            render("retrieve_macro", dialect="oracle", binds="function", filters={other: True},
                   include_parent=True, include_neighbors=True)


def _oracle_predicate_on_postgres(query: str) -> str:
    """The macro's hits WHERE as PostgreSQL 17+ SQL/JSON reads it: the same JSON_TABLE / JSON_EXISTS, with
    PostgreSQL's spelling of the two differences (ON ERROR after COLUMNS; text for VARCHAR2) and binds for
    the macro's parameters. Only a cross-check of the predicate's logic, not of Oracle itself."""
    where = re.search(r"\n *FROM sections s\n *WHERE (.*?)\n *ORDER BY", query, re.DOTALL).group(1)
    # the search's first condition is no filter: a NULL query_embedding finds nothing (see the macro's header)
    where = re.sub(r"^query_embedding IS NOT NULL *--[^\n]*\n *AND ", "", where)
    return _oracle_json_filters_on_postgres(where)


def _oracle_json_filters_on_postgres(sql: str) -> str:
    sql = re.sub(r"JSON_TABLE\(([%()\w]+), '(\$[^']*)' ERROR ON ERROR\s+COLUMNS \((.*?)\)\) (\w+)",
                 r"JSON_TABLE(\1::jsonb, '\2' COLUMNS (\3) ERROR ON ERROR) \4", sql, flags=re.DOTALL)
    sql = sql.replace("VARCHAR2(512 CHAR)", "text")
    return re.sub(r"\b(collections|principals)\b", r"%(\1)s::text", sql)


def test_oracle_filter_logic_matches_the_postgres_function_on_postgres_sql_json(db):
    """No Oracle server here: the Oracle predicates' logic (NULL, '[]', acl NULL, any shared principal) is
    run on PostgreSQL's SQL/JSON against the function's text[] predicates, row for row."""
    if db.info.server_version < 170000:
        pytest.skip("JSON_TABLE is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
    import json

    pg_where = function_query((SQL_DIR / "postgres" / "retrieve_function.sql").read_text()).replace("retrieve_sections.", "")
    pg_where = pg_where.split("\n     WHERE ", 1)[1].split("\n     ORDER BY", 1)[0]
    pg_where = re.sub(r"\b(collections|principals)\b", r"%(\1)s::text[]", pg_where)
    ora_where = _oracle_predicate_on_postgres(_macro_query())
    rows = [(i, coll, acl) for i, (coll, acl) in enumerate(
        (c, a) for c in ("a", "b") for a in (None, [], ["hr"], ["hr", "eng"], ["x"], ["u:42", "Hr"]))]
    db.execute("CREATE TEMP TABLE pg_s (id int, collection text, acl text[])")
    db.execute("CREATE TEMP TABLE ora_s (id int, collection text, acl jsonb)")
    for i, coll, acl in rows:
        db.execute("INSERT INTO pg_s VALUES (%s, %s, %s)", (i, coll, acl))
        db.execute("INSERT INTO ora_s VALUES (%s, %s, %s::jsonb)", (i, coll, None if acl is None else json.dumps(acl)))
    lists = (None, [], ["a"], ["a", "b"], ["zz"])
    principals = (None, [], ["hr"], ["eng", "x"], ["zz"], ["u:42"], ["HR"])
    for c in lists:
        for p in principals:
            want = {r[0] for r in db.execute(f"SELECT s.id FROM pg_s s WHERE {pg_where}",
                                             {"collections": c, "principals": p})}
            got = {r[0] for r in db.execute(f"SELECT s.id FROM ora_s s WHERE {ora_where}",
                                            {"collections": None if c is None else json.dumps(c),
                                             "principals": None if p is None else json.dumps(p)})}
            assert got == want, (c, p)
    assert db.execute("SELECT count(*) FROM pg_s").fetchone()[0] == len(rows)


# --------------------------------------------------------------------------- Oracle's rls.sql (VPD)

def _vpd_predicate() -> str:
    from onetrip.sqlcheck import extract_oracle_policy_predicate, parse_statements

    function = parse_statements((SQL_DIR / "oracle" / "rls.sql").read_text(), "oracle")[0]
    return extract_oracle_policy_predicate(function.sql)


def test_oracle_rls_is_a_static_vpd_policy_on_both_tables_named_as_the_dictionary_spells_them():
    """postgres/rls.sql's two policies as DBMS_RLS policies: SELECT only (as FOR SELECT), STATIC (the predicate
    text never varies; the user and roles in it are read per query), the policy function's signature the one
    Oracle calls, and every name DBMS_RLS reads as a string upper-cased as Oracle stores unquoted names."""
    code = _code((SQL_DIR / "oracle" / "rls.sql").read_text())
    assert re.search(r"CREATE OR REPLACE FUNCTION acl_read_predicate \(\s+object_schema IN VARCHAR2,\s+"
                     r"object_name\s+IN VARCHAR2\s+\) RETURN VARCHAR2", code)
    assert code.count("DBMS_RLS.ADD_POLICY(") == 1 and code.count("DBMS_RLS.DROP_POLICY(") == 1
    assert "statement_types => 'SELECT'" in code and "policy_type     => DBMS_RLS.STATIC" in code
    assert "policy_function => 'ACL_READ_PREDICATE'" in code
    assert "PRAGMA EXCEPTION_INIT(policy_missing, -28102)" in code  # re-run: only "policy does not exist" ignored
    assert "WHEN OTHERS" not in code
    assert re.findall(r"protect\(('\w+'), ('\w+')\);", code) == [
        ("'SECTIONS'", "'SECTIONS_ACL_READ'"), ("'DOCUMENTS'", "'DOCUMENTS_ACL_READ'")]
    assert code.count("SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA')") == 3  # where schema.sql made the tables
    # the PostgreSQL policies' names, prefixed the same; a schema is named, not the session's
    pg = (SQL_DIR / "postgres" / "rls.sql").read_text()
    assert "POLICY sections_acl_read ON sections" in pg and "POLICY documents_acl_read ON documents" in pg
    other = _code(render_edition("oracle", Layout(schema="kb", prefix="hr_"))["rls.sql"])
    assert "CREATE OR REPLACE FUNCTION kb.hr_acl_read_predicate (" in other
    assert re.findall(r"protect\(('\w+'), ('\w+')\);", other) == [
        ("'HR_SECTIONS'", "'HR_SECTIONS_ACL_READ'"), ("'HR_DOCUMENTS'", "'HR_DOCUMENTS_ACL_READ'")]
    assert other.count("'KB'") == 3 and "CURRENT_SCHEMA" not in other
    assert "policy_function => 'HR_ACL_READ_PREDICATE'" in other


def test_oracle_vpd_predicate_logic_matches_the_postgres_policy_on_postgres_sql_json(db):
    """No Oracle server here: the VPD predicate's logic (acl NULL, '[]', the user, any session role, exact case)
    is run on PostgreSQL's SQL/JSON against postgres/rls.sql's USING clause, row for row. The user and the
    session's roles are binds here (SYS_CONTEXT and SESSION_ROLES on Oracle; current_principals() here)."""
    if db.info.server_version < 170000:
        pytest.skip("JSON_EXISTS is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
    import json

    pg_using = re.search(r"CREATE POLICY sections_acl_read ON sections\s+FOR SELECT\s+USING \((.*?)\);",
                         (SQL_DIR / "postgres" / "rls.sql").read_text(), re.DOTALL).group(1)
    assert pg_using == "acl IS NULL OR acl && current_principals()"
    pg_where = pg_using.replace("current_principals()", "%(principals)s::text[]")
    ora_where = _vpd_predicate().replace("SYS_CONTEXT('USERENV', 'CURRENT_USER')", "%(user)s::text")
    ora_where = ora_where.replace("FROM sys.session_roles r", "FROM unnest(%(roles)s::text[]) AS r(role)")
    assert "SYS_CONTEXT" not in ora_where and "session_roles" not in ora_where
    acls = (None, [], ["HR"], ["HR", "ENG"], ["X"], ["APP", "hr"], ["U42"])
    db.execute("CREATE TEMP TABLE pg_s (id int, acl text[])")
    db.execute("CREATE TEMP TABLE ora_s (id int, acl jsonb)")
    for i, acl in enumerate(acls):
        db.execute("INSERT INTO pg_s VALUES (%s, %s)", (i, acl))
        db.execute("INSERT INTO ora_s VALUES (%s, %s::jsonb)", (i, None if acl is None else json.dumps(acl)))
    sessions = [("APP", []), ("APP", ["HR"]), ("U42", ["ENG", "X"]), ("APP", ["hr"]), ("HR", []), ("ZZ", ["ZZ"])]
    seen = set()
    for user, roles in sessions:
        want = {r[0] for r in db.execute(f"SELECT id FROM pg_s WHERE {pg_where}", {"principals": [user, *roles]})}
        got = {r[0] for r in db.execute(f"SELECT id FROM ora_s WHERE {ora_where}", {"user": user, "roles": roles})}
        assert got == want, (user, roles)
        seen.add(frozenset(got))
    assert len(seen) >= 5  # the sessions see different rows: the comparison is not over empty or full sets


def _macro_on_postgres(query: str) -> str:
    """The Oracle macro's query, translated mechanically to PostgreSQL 17+ (SQL/JSON), to run its LOGIC:
    VECTOR_DISTANCE -> <=>, FETCH APPROX FIRST k ROWS ONLY -> LIMIT k, NLSSORT(x, ...) -> x, FROM dual
    dropped, the hit_rank sort made real as postgres__exact does (+ 0), the parameters as binds, the JSON
    filters as in `_oracle_predicate_on_postgres` (acl, a text[] here, read through to_jsonb). Not a check
    of Oracle itself: its shape (no WITH, one search, the row source, the dedup) on a real corpus."""
    out = query.replace("VECTOR_DISTANCE(s.embedding, query_embedding, COSINE)",
                        "s.embedding <=> %(query_embedding)s::vector")
    out = out.replace("WHERE query_embedding IS NOT NULL", "WHERE %(query_embedding)s::vector IS NOT NULL")
    assert not re.search(r"(?<!%\()\bquery_embedding\b", _code(out)), "a macro parameter is left"
    out = out.replace("FETCH APPROX FIRST k ROWS ONLY", "LIMIT %(k)s")
    out = out.replace("ROW_NUMBER() OVER (ORDER BY x.distance,", "ROW_NUMBER() OVER (ORDER BY x.distance + 0,")
    out = re.sub(r"NLSSORT\(([\w.]+), 'NLS_SORT=BINARY'\)", r"\1", out)
    out = re.sub(r" FROM dual\b", "", out)
    out = out.replace("JSON_EXISTS(s.acl,", "JSON_EXISTS(to_jsonb(s.acl),")
    out = _oracle_json_filters_on_postgres(out)
    for oracle_only in ("VECTOR_DISTANCE", "FETCH", "NLSSORT", "dual", "VARCHAR2", "WITH"):
        assert oracle_only not in _code(out), oracle_only
    return out


def test_oracle_macro_query_logic_matches_the_api_on_postgres(db, loaded):
    """The macro's query, translated to PostgreSQL (`_macro_on_postgres`), returns what `Retriever.search`
    does, linked by key as a reader would (`_key`): each hit (hit_rank 1..k, distance) and each context row
    once, a context row that is a hit only as the hit, hits first. Queries include a doc's first and last
    sections and adjacent hits (a hit whose neighbour is a hit); with filters, on hits and context rows."""
    if db.info.server_version < 170000:
        pytest.skip("JSON_TABLE is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
    import json

    from psycopg.rows import dict_row

    from onetrip import Filters

    sql = _macro_on_postgres(_macro_query())
    r = Retriever(db, ef_search=DEFAULT_EF_SEARCH)

    a, b = loaded[5], loaded[17]
    queries = list(corpus_query_vectors(loaded, 4, seed=31)) + [
        _unit(a.embeddings[0] + a.embeddings[1]),  # a doc's first two sections: adjacent hits, one at index 0
        _unit(b.embeddings[-1] + b.embeddings[-2] + b.embeddings[-3]),  # a doc's last three sections
        _unit(a.embeddings[2]),
    ]
    seen = {"adjacent hits": 0, "first section hit": 0, "last section hit": 0, "parent row": 0}
    last = {d.record.doc_id: len(d.sections) - 1 for d in loaded}

    def run(q: np.ndarray, k: int, collections=None, principals=None) -> list[dict]:
        with db.cursor(row_factory=dict_row) as cur:
            return cur.execute(sql, {"query_embedding": vec_literal(q), "k": k,
                                     "collections": None if collections is None else json.dumps(collections),
                                     "principals": None if principals is None else json.dumps(principals)}
                               ).fetchall()

    def check(rows: list[dict], hits) -> None:
        assert _key(rows) == _api_key(hits)
        assert len({(x["doc_id"], x["sequence_index"]) for x in rows}) == len(rows)  # each section once
        related = {(h.section.doc_id, x.section_id) for h in hits for x in (h.parent, h.prev, h.next) if x}
        assert {(x["doc_id"], x["section_id"]) for x in rows if not x["hit_rank"]} <= related  # no stray row
        for row, hit in zip(rows, hits):
            assert row["distance"] == pytest.approx(hit.distance, abs=1e-5)
        assert all(x["distance"] is None for x in rows[len(hits):])
        keys = {(x["doc_id"], x["sequence_index"]) for x in rows[:len(hits)]}
        for x in rows[:len(hits)]:
            seen["adjacent hits"] += (x["doc_id"], x["sequence_index"] + 1) in keys
            seen["first section hit"] += x["sequence_index"] == 0
            seen["last section hit"] += x["sequence_index"] == last[x["doc_id"]]
        seen["parent row"] += any(not x["hit_rank"] and any(h.parent and h.parent.section_id == x["section_id"]
                                                            for h in hits) for x in rows)

    for q in queries:
        for k in (1, 3, 6, 10):
            check(run(q, k), r.search(q, k=k))
    assert all(seen.values()), seen

    # the filters, on hits and context rows: collections and acl set on some sections, exact searches on
    # both sides (no index), so the two sides' k hits are the same ones
    db.execute("UPDATE sections SET collection = CASE WHEN sequence_index % 3 = 0 THEN 'faq' ELSE 'manual' END, "
               "acl = CASE sequence_index % 4 WHEN 1 THEN ARRAY['hr'] WHEN 2 THEN ARRAY['eng', 'u:42'] "
               "WHEN 3 THEN ARRAY[]::text[] END")
    db.execute("SET enable_indexscan = off")
    filtered = 0
    for collections, principals in ((["manual"], None), (None, ["hr"]), (["manual", "faq"], []),
                                    (["faq"], ["eng", "x"]), ([], None), (None, None)):
        filters = Filters(collections=None if collections is None else tuple(collections),
                          principals=None if principals is None else tuple(principals))
        for q in queries[:4] + queries[-2:]:
            rows = run(q, 6, collections, principals)
            hits = r.search(q, k=6, filters=filters)
            check(rows, hits)
            filtered += len(rows)
            for x in db.execute("SELECT s.collection, s.acl FROM sections s WHERE (s.doc_id, s.section_id) IN "
                                "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                                ([x["doc_id"] for x in rows], [x["section_id"] for x in rows])):
                assert collections is None or x[0] in collections
                assert principals is None or x[1] is None or set(x[1]) & set(principals)
    assert filtered


# --------------------------------------------------------------------------- the Oracle assemble.sql

def _oracle_statement_on_postgres(text: str) -> str:
    """The statement of a checked-in Oracle file (header, comments and final ';' dropped) with the Oracle
    spellings the files share translated mechanically to PostgreSQL, to run its LOGIC: the MATERIALIZE hints
    dropped, :binds as psycopg's, TO_VECTOR(x, n, FLOAT32) -> x::vector(n), VECTOR_DISTANCE(a, b, COSINE) ->
    a <=> b, FETCH APPROX FIRST n ROWS ONLY -> LIMIT n, the hit_rank sort made real as postgres__exact does
    (+ 0), NLSSORT(x, ...) -> x, MINUS -> EXCEPT. Each caller translates the rest and asserts, with
    `_assert_no_oracle_left`, that no Oracle-only construct is left. Not a check of Oracle itself."""
    out = text.split("-- =====", 2)[2].split("\n", 1)[1] if text.startswith("-- =====") else text
    out = _code(out).rstrip()
    assert out.startswith("WITH ") and out.endswith(";"), out[:80]
    out = out[:-1].replace("/*+ MATERIALIZE */ ", "")
    out = re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", out)
    out = re.sub(r"TO_VECTOR\(([^,\n]+?), (\d+), FLOAT32\)", r"\1::vector(\2)", out)
    out = re.sub(r"VECTOR_DISTANCE\(([\w.]+), ([^,\n]+?), COSINE\)", r"\1 <=> \2", out)
    out = re.sub(r"FETCH APPROX FIRST (\S+) ROWS ONLY", r"LIMIT \1", out)
    out = re.sub(r"(row_number\(\) OVER \((?:PARTITION BY [\w.]+ )?ORDER BY h\.distance),", r"\1 + 0,", out)
    out = re.sub(r"NLSSORT\(([\w.]+), 'NLS_SORT=BINARY'\)", r"\1", out)
    return out.replace("\n    MINUS\n", "\n    EXCEPT\n")


def _assert_no_oracle_left(sql: str, *also: str) -> None:
    for oracle_only in ("VECTOR_DISTANCE", "TO_VECTOR", "FLOAT32", "FETCH", "NLSSORT", "/*+", "MATERIALIZE", "MINUS",
                        ";", *also):
        assert oracle_only not in sql, oracle_only
    assert not re.search(r"(?<![:\w]):\w", sql), "an Oracle bind is left"


def _oracle_assemble_on_postgres(text: str) -> str:
    """An Oracle rendering of assemble.sql, translated mechanically to PostgreSQL to run its LOGIC: the shared
    steps (`_oracle_statement_on_postgres`), WITH -> WITH RECURSIVE, JSON_VALUE(m, '$.key.numberOnly()'
    RETURNING NUMBER) -> the JSON number under key, else NULL (numberOnly() takes no string; NULL ON ERROR),
    BIT_OR_AGG -> bit_or. Not a check of Oracle itself: of its shape (the recursive subtree,
    the CASE aggregate, the budget's step-by-step recursion) on a real corpus. Every Oracle-only construct
    must be gone."""
    out = _oracle_statement_on_postgres(text)
    assert out.startswith("WITH hits AS ("), out[:80]
    out = "WITH RECURSIVE " + out[len("WITH "):]
    out = re.sub(r"JSON_VALUE\((\w+)\.metadata, '\$\.(\w+)\.numberOnly\(\)' RETURNING NUMBER\)",
                 r"(CASE WHEN jsonb_typeof(\1.metadata -> '\2') = 'number' THEN CAST(\1.metadata ->> '\2' AS numeric) END)",
                 out)
    out = out.replace("BIT_OR_AGG(", "bit_or(")
    _assert_no_oracle_left(out, "JSON_VALUE", "NVL", "BIT_OR_AGG")
    assert "s.embedding <=> %(query_embedding)s::vector(384)" in out
    # the translation keeps Oracle's forms that PostgreSQL also reads: no PostgreSQL-only construct crept in
    for pg_only in ("LATERAL", "LIMIT 1", "FILTER (WHERE", "AS MATERIALIZED", "generate_series", "::"):
        assert pg_only not in out.replace("%(query_embedding)s::vector(384)", ""), pg_only
    return out


def test_oracle_assemble_is_written_in_oracle_sql():
    """The Oracle assemble.sql: recursive WITH without RECURSIVE and with column lists, no LATERAL / LIMIT /
    FILTER / bit_or / array equality (PostgreSQL's spellings), a statement SQL*Plus runs at its last ';'."""
    text = (SQL_DIR / "oracle" / "assemble.sql").read_text()
    code = _code(text)
    assert code.lstrip().startswith("WITH hits AS (\n    SELECT /*+ MATERIALIZE */ s.doc_id,")
    assert "RECURSIVE" not in code and "LATERAL" not in code and "LIMIT" not in code and "FILTER" not in code
    assert "subtree (doc_id, section_id, sequence_index, hit_rank, depth) AS (" in code
    assert "packed (step, pick_order, used) AS (" in code
    # a part marker is a JSON number only (numberOnly(): Oracle's lax default reads the string "2" as 2)
    assert "JSON_VALUE(h.metadata, '$.part.numberOnly()' RETURNING NUMBER) AS part" in code
    assert "AND x.sequence_index BETWEEN p.sequence_index - p.parts_before" in code
    assert "BIT_OR_AGG(c.role_bit) AS role_bits" in code and "bit_or(" not in code
    assert "coalesce(min(CASE WHEN c.priority = 0 THEN c.hit_rank END), min(c.hit_rank)) AS pick_rank" in code
    assert "VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE)" in code
    assert "FETCH APPROX FIRST :k ROWS ONLY" in code and ":max_tokens" in code
    assert "<=>" not in code and "%(" not in code and "::" not in code and "AS MATERIALIZED" not in code
    assert not re.search(r"\b(FROM|JOIN)\s+\w+\s+AS\s+\w+", code), "table alias with AS"
    assert code.rstrip().splitlines()[-1].endswith("p.sequence_index;")
    body = text.split("-- =====", 2)[2].split("\n", 1)[1]
    assert all(line.strip() for line in body.splitlines()), "a blank line ends a SQL*Plus statement"
    # the recursive members hold none of what Oracle refuses there (ORA-32486): no aggregate, window or subquery
    for cte in ("subtree", "packed"):
        member = code.split(f"{cte} (", 1)[1].split("UNION ALL", 1)[1].split("\n),", 1)[0].split("\n)\nSELECT", 1)[0]
        assert f"FROM {cte} " in member
        for refused in ("min(", "max(", "count(", "sum(", " OVER ", "SELECT p.pick_order, p.context", "(SELECT",
                        "DISTINCT", "GROUP BY"):
            assert refused not in member, (cte, refused)
    head = text.split("-- =====", 2)[1]
    for word in ("VARIABLE max_tokens NUMBER", "VARIABLE k NUMBER", "VARIABLE query_embedding CLOB", "@assemble.sql",
                 "running its logic translated to PostgreSQL", "NOT by execution on Oracle", "ORA-32486"):
        assert word in head, word
    with pytest.raises(ValueError, match="PostgreSQL only"):
        from onetrip.templates import render

        render("assemble", dialect="oracle", parent=True, ancestors=False, neighbors=True, neighbor_scope="any",
               section=False, document=False, budget=True, max_depth=32, max_neighbors=50)


@pytest.mark.parametrize("expansion", ["default", "ancestors+document"])
def test_oracle_assemble_logic_matches_the_api_on_postgres(db, loaded, expansion):
    """The Oracle assemble.sql, translated to PostgreSQL (`_oracle_assemble_on_postgres`), returns what
    `Retriever.assemble` does: the same passages in the same order, with the same role_bits, best_rank,
    doc_rank, distance and hit_count, over queries, k and budgets. The budgets include ones where a passage
    is skipped and a later one still fits (the step-by-step recursion that replaces PostgreSQL's LATERAL
    search takes rows past the prefix) and one where everything fits (the recursion takes nothing). "default"
    is the checked-in file; the other renders the Oracle template with the ancestors and document expansions."""
    from psycopg.rows import dict_row

    from onetrip.context import ROLE_BITS
    from onetrip.editions import ASSEMBLE_DEFAULT
    from onetrip.retrieve import CONTEXT_DEFAULT, Expansion, assemble_template_options
    from onetrip.templates import render

    if expansion == "default":
        expand = CONTEXT_DEFAULT
        text = (SQL_DIR / "oracle" / "assemble.sql").read_text()
        assert render("assemble", dialect="oracle", header=True, **ASSEMBLE_DEFAULT) == text
    else:
        expand = Expansion(parent=True, neighbors=0, ancestors=True, section=True, document=True,
                           document_max_tokens=900)
        text = render("assemble", dialect="oracle", header=True, **assemble_template_options(expand, budget=True))
    sql = _oracle_assemble_on_postgres(text)
    # the rows' place in the budget, for the test only: pick_order and the running sum of the prefix
    sql = sql.replace("       p.role_bits,\n       p.best_rank,\n",
                      "       p.role_bits,\n       p.pick_order AS test_pick,\n       p.running AS test_running,\n"
                      "       p.best_rank,\n", 1)
    assert "test_pick" in sql
    # split parts (the rows marked part n of m, JSON_VALUE in Oracle): in each document with two consecutive leaf
    # siblings, they become parts 1 and 2 of one section (expanding either adds the other), and a third section
    # takes their anchor, level and heading path without being a part (two id-less sibling HTML containers look
    # so): it must not be added
    parts = {}
    for d in loaded:
        secs = d.sections
        parents = {x.parent_section_id for x in secs}
        pair = next((i for i in range(len(secs) - 2) if secs[i].parent_section_id == secs[i + 1].parent_section_id
                     and secs[i].section_id not in parents and secs[i + 1].section_id not in parents), None)
        if pair is None:
            continue
        a, b = secs[pair], secs[pair + 1]
        c = next((x for x in secs if x.sequence_index > b.sequence_index + 1), None)
        if c is None:
            continue
        parts[d.record.doc_id] = (a.sequence_index, b.sequence_index, d.embeddings[pair], d.embeddings[c.sequence_index])
        for one, n in ((a, 1), (b, 2)):
            db.execute("UPDATE sections SET metadata = metadata || jsonb_build_object('part', %s, 'parts', 2)"
                       " WHERE doc_id = %s AND section_id = %s", (n, d.record.doc_id, one.section_id))
        db.execute("UPDATE sections t SET anchor = f.anchor, heading_level = f.heading_level, "
                   "heading_path = f.heading_path FROM sections f WHERE f.doc_id = t.doc_id AND f.section_id = %s"
                   " AND t.doc_id = %s AND t.section_id = %s", (a.section_id, d.record.doc_id, c.section_id))
    assert len(parts) >= 4, "too few documents with two consecutive leaf siblings"

    r = Retriever(db, ef_search=DEFAULT_EF_SEARCH)
    queries = list(corpus_query_vectors(loaded, 5, seed=41))
    queries += [_unit(first) for _, _, first, _ in list(parts.values())[:2]]  # hits on a split part ...
    queries += [_unit(third) for _, _, _, third in list(parts.values())[:2]]  # ... and on the section that is none
    seen = {"skipped then taken": 0, "all fit": 0, "something left out": 0, "split part": 0,
            "exact fit after a skip": 0}

    def check(q: np.ndarray, k: int, max_tokens: int) -> list[dict]:
        with db.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql, {"query_embedding": vec_literal(q), "k": k, "max_tokens": max_tokens,
                                     "document_max_tokens": expand.document_max_tokens}).fetchall()
        ctx = r.assemble(q, k=k, max_tokens=max_tokens, expand=expand)
        got = [(x["doc_id"], x["section_id"], x["role_bits"], x["best_rank"], x["doc_rank"]) for x in rows]
        want = [(p.doc_id, p.section_id, sum(ROLE_BITS[role] for role in p.roles), p.best_rank, p.doc_rank)
                for p in ctx.passages]
        assert got == want, (k, max_tokens)
        for x, p in zip(rows, ctx.passages):
            assert (x["distance"] is None) == (p.distance is None)
            if p.distance is not None:
                assert x["distance"] == pytest.approx(p.distance, abs=1e-5)
        assert all(x["hit_count"] == ctx.hits for x in rows)
        assert sum(x["context_tokens"] for x in rows) <= max_tokens
        bits = {(x["doc_id"], x["sequence_index"]): x["role_bits"] for x in rows}
        for doc_id, (first, second, _, _) in parts.items():
            for hit, part in ((first, second), (second, first)):
                seen["split part"] += (bits.get((doc_id, hit), 0) & ROLE_BITS["hit"] != 0
                                       and bits.get((doc_id, part), 0) & ROLE_BITS["hit"] == 0
                                       and bits.get((doc_id, part), 0) & ROLE_BITS["section"] != 0)
        return rows

    for q in queries:
        for k in (3, 6, 10):
            everything = check(q, k, 10**6)
            seen["all fit"] += bool(everything) and all(x["test_running"] <= 10**6 for x in everything)
            # a budget a section after a skipped one fills exactly: the prefix up to j, j + 1 too large, j + 2 fits
            # with nothing to spare (what is left must then be 0, not the tokens before it)
            order = sorted(everything, key=lambda x: x["test_pick"])
            exact = [order[j]["test_running"] + order[j + 2]["context_tokens"] for j in range(len(order) - 2)
                     if order[j + 1]["context_tokens"] > order[j + 2]["context_tokens"]][:1]
            for max_tokens in (150, 400, 900, 2000, *exact):
                rows = check(q, k, max_tokens)
                taken = {x["test_pick"] for x in rows}
                seen["skipped then taken"] += any(x["test_running"] > max_tokens for x in rows)
                seen["something left out"] += len(taken) < max(taken, default=0)
                seen["exact fit after a skip"] += max_tokens in exact and sum(x["context_tokens"] for x in rows) == max_tokens
                assert len(everything) >= len(rows)
    assert all(seen.values()), seen


# --------------------------------------------------------------------------- the Oracle retrieve_many.sql

def _oracle_many_on_postgres(text: str) -> str:
    """retrieve_many.sql's Oracle edition, translated mechanically to PostgreSQL 17+ (SQL/JSON) to run its LOGIC:
    the shared steps (`_oracle_statement_on_postgres`), its JSON_TABLE over the array of query vectors in
    PostgreSQL's spelling (`_oracle_json_filters_on_postgres`: ON ERROR after COLUMNS; text for CLOB), CROSS
    APPLY -> CROSS JOIN LATERAL. So the rows PostgreSQL's JSON_TABLE numbers FOR ORDINALITY are the queries.
    Not a check of Oracle itself: of the statement's shape (one search per query, the ranks per query, each
    context row once across the queries) on a real corpus."""
    out = _oracle_statement_on_postgres(text)
    out = _oracle_json_filters_on_postgres(out.replace(" CLOB FORMAT JSON ", " text FORMAT JSON "))
    out = out.replace("CROSS APPLY (", "CROSS JOIN LATERAL (")
    _assert_no_oracle_left(out, "APPLY", "CLOB", "VARCHAR2")
    assert re.search(r"JSON_TABLE\(%\(query_embeddings\)s::jsonb, '[^']+' COLUMNS \(query_ord FOR ORDINALITY, "
                     r"embedding text FORMAT JSON PATH '\$'\) ERROR ON ERROR\) q", out), out[:400]
    assert out.count("s.embedding <=> q.embedding") == 2 and "LIMIT %(k)s" in out
    # no PostgreSQL-only construct crept in beyond what the translation wrote
    for pg_only in ("unnest", "AS MATERIALIZED", "vector[]"):
        assert pg_only not in out, pg_only
    return out


def test_oracle_retrieve_many_is_written_in_oracle_sql():
    """The Oracle retrieve_many.sql: the PostgreSQL file's template and options, the query vectors one JSON array in
    a CLOB bind (JSON_TABLE ... FOR ORDINALITY, TO_VECTOR per query), each query's search in a CROSS APPLY with
    FETCH APPROX, no PostgreSQL spelling, one statement SQL*Plus runs at its last ';'."""
    from onetrip.editions import FULL_EXPANSION
    from onetrip.templates import render

    text = (SQL_DIR / "oracle" / "retrieve_many.sql").read_text()
    assert render("retrieve_many", dialect="oracle", header=True, many=True, **FULL_EXPANSION) == text
    code = _code(text)
    assert code.lstrip().startswith("WITH queries AS (\n    SELECT q.query_ord, TO_VECTOR(q.embedding, 384, FLOAT32) "
                                    "AS embedding\n      FROM JSON_TABLE(:query_embeddings, '$[*]' ERROR ON ERROR\n")
    assert "COLUMNS (query_ord FOR ORDINALITY, embedding CLOB FORMAT JSON PATH '$')) q" in code
    assert "hits AS (\n    SELECT /*+ MATERIALIZE */ q.query_ord,\n           n.*\n      FROM queries q\n" \
           "     CROSS APPLY (\n" in code
    assert code.count("VECTOR_DISTANCE(s.embedding, q.embedding, COSINE)") == 2
    assert "FETCH APPROX FIRST :k ROWS ONLY\n           ) n\n     WHERE q.embedding IS NOT NULL  \n)," in code
    assert "PARTITION BY h.query_ord ORDER BY h.distance, NLSSORT(h.doc_id, 'NLS_SORT=BINARY'), h.sequence_index" in code
    assert "\n    MINUS\n" in code and "EXCEPT" not in code
    for pg_only in ("<=>", "%(", "::", "AS MATERIALIZED", "LIMIT", "LATERAL", "unnest", "ORDINALITY q"):
        assert pg_only not in code, pg_only
    assert not re.search(r"\b(FROM|JOIN)\s+\w+\s+AS\s+\w+", code), "table alias with AS"
    assert not re.search(r"\)\s+AS\s+\w+\s*(\)|JOIN|CROSS|WHERE|$)", code), "inline view alias with AS"
    assert code.rstrip().splitlines()[-1].endswith("w.sequence_index;")
    body = text.split("-- =====", 2)[2].split("\n", 1)[1]
    assert all(line.strip() for line in body.splitlines()), "a blank line ends a SQL*Plus statement"
    head = text.split("-- =====", 2)[1]
    for word in ("VARIABLE query_embeddings CLOB", "VARIABLE k NUMBER", "@retrieve_many.sql", "'[[0.1, ...], [0.2, ...]]'",
                 "FOR ORDINALITY", "running its logic translated to PostgreSQL", "NOT by execution on Oracle",
                 "NOT VERIFIED", "VECTOR_INDEX_SCAN(s sections_embedding_hnsw)", "CROSS APPLY", "'' as NULL"):
        assert word in " ".join(head.replace("--", " ").split()), word
    for refused in ({"mode": "hybrid"}, {"mode": "lexical"}, {"k_bucket": 8}):
        with pytest.raises(ValueError, match="PostgreSQL only"):
            render("retrieve_many", dialect="oracle", many=True, **FULL_EXPANSION, **refused)


def test_oracle_retrieve_many_logic_matches_the_api_on_postgres(db, loaded):
    """The Oracle retrieve_many.sql, translated to PostgreSQL (`_oracle_many_on_postgres`), returns what
    `Retriever.search_many` does: each query's hits (hit_rank 1..k, distances) in its order, each hit linked by
    key to its parent and neighbours among all the rows, each context row once and never a hit of any query.
    Query sets include one query twice and two that share hits, adjacent hits, a doc's first and last sections,
    and two queries each of whose hit is the other's neighbour (then a context row of neither). Broken on
    purpose (ranks not per query, the hits not subtracted, no parent keys, one query only) it fails."""
    if db.info.server_version < 170000:
        pytest.skip("JSON_TABLE is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
    import json

    from psycopg.rows import dict_row

    text = (SQL_DIR / "oracle" / "retrieve_many.sql").read_text()
    r = Retriever(db, ef_search=DEFAULT_EF_SEARCH)

    a = next(d for d in loaded[5:] if len(d.sections) >= 6)
    b = next(d for d in loaded[17:] if len(d.sections) >= 4)
    rand = list(corpus_query_vectors(loaded, 6, seed=37))
    first = _unit(a.embeddings[0] + a.embeddings[1])  # a doc's first two sections: adjacent hits, one at index 0
    last = _unit(b.embeddings[-1] + b.embeddings[-2] + b.embeddings[-3])  # a doc's last three sections
    two, three = _unit(a.embeddings[2]), _unit(a.embeddings[3])  # each hit the other's neighbour
    near = _unit(rand[0] + 0.05 * rand[1])  # most of rand[0]'s hits
    query_sets = [rand[:3], [rand[0], rand[0]], [rand[0], near, rand[3]], [first, last], [two, three],
                  [three, first, two, last, rand[4]], [rand[5]]]
    last_seq = {d.record.doc_id: len(d.sections) - 1 for d in loaded}
    api = {(i, k): r.search_many(qs, k=k) for i, qs in enumerate(query_sets) for k in (1, 3, 6, 10)}

    def check(sql: str, seen: dict[str, int]) -> None:
        for (i, k), want in api.items():
            qs = query_sets[i]
            with db.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(sql, {"query_embeddings": json.dumps([[float(x) for x in q] for q in qs]),
                                         "k": k}).fetchall()
            context = [x for x in rows if x["query_ord"] is None]
            assert all(x["hit_rank"] is None and x["distance"] is None for x in context)
            assert sorted({x["query_ord"] for x in rows} - {None}) == list(range(1, len(qs) + 1)), (i, k)
            hit_keys = {(x["doc_id"], x["sequence_index"]) for x in rows if x["query_ord"] is not None}
            keys = [(x["doc_id"], x["sequence_index"]) for x in context]
            assert len(set(keys)) == len(keys), "a context row twice"
            assert not set(keys) & hit_keys, "a hit of a query also as a context row"
            related = {(h.section.doc_id, x.section_id) for hits in want for h in hits
                       for x in (h.parent, h.prev, h.next) if x}
            assert {(x["doc_id"], x["section_id"]) for x in context} <= related, "a stray context row"
            mine = {n: sorted((x for x in rows if x["query_ord"] == n), key=lambda x: x["hit_rank"])
                    for n in range(1, len(qs) + 1)}
            for n, hits in enumerate(want, 1):
                # another query's hits serve as context too (a context row is none of them): read them as such
                others = [{**x, "hit_rank": None} for x in rows if x["query_ord"] not in (None, n)]
                assert _key(mine[n] + context + others) == _api_key(hits), (i, k, n)
                for row, hit in zip(mine[n], hits):
                    assert row["distance"] == pytest.approx(hit.distance, abs=1e-5)
                own = {(x["doc_id"], x["sequence_index"]) for x in mine[n]}
                elsewhere = {(x["doc_id"], x["sequence_index"]) for x in others}  # other queries' hits
                for x in mine[n]:
                    seen["adjacent hits"] += (x["doc_id"], x["sequence_index"] + 1) in own
                    seen["first section hit"] += x["sequence_index"] == 0
                    seen["last section hit"] += x["sequence_index"] == last_seq[x["doc_id"]]
                    seen["hit of several queries"] += (x["doc_id"], x["sequence_index"]) in elsewhere
                for h in hits:
                    near_keys = {(h.section.doc_id, x.sequence_index) for x in (h.parent, h.prev, h.next) if x}
                    seen["another query's hit as context"] += bool(near_keys & elsewhere - own)
                    seen["parent row"] += h.parent is not None and (h.parent.doc_id, h.parent.sequence_index) in keys

    seen = {"adjacent hits": 0, "first section hit": 0, "last section hit": 0, "hit of several queries": 0,
            "another query's hit as context": 0, "parent row": 0}
    check(_oracle_many_on_postgres(text), seen)
    assert all(seen.values()), seen

    broken = {"ranks not per query": text.replace("PARTITION BY h.query_ord ", ""),
              "the hits not subtracted": text.replace("    MINUS\n    SELECT h.doc_id, h.sequence_index\n      FROM hits h\n",
                                                      ""),
              "no parent keys": text.replace("    UNION ALL\n    SELECT h.doc_id, h.parent_sequence_index\n", "    UNION ALL\n"
                                             "    SELECT h.doc_id, h.sequence_index - 1\n"),
              "one query only": text.replace("'$[*]' ERROR ON ERROR", "'$[0]' ERROR ON ERROR")}
    for why, bad in broken.items():
        assert bad != text, why
        sql = _oracle_many_on_postgres(bad)  # translated as the real one: what fails is the check
        with pytest.raises(AssertionError):
            check(sql, dict(seen))


# --------------------------------------------------------------------------- a NULL query embedding (Oracle)

@pytest.mark.parametrize("name", ["retrieve.sql", "assemble.sql", "retrieve_macro.sql", "retrieve_many.sql"])
def test_oracle_null_query_embedding_finds_nothing_on_postgres(db, loaded, name):
    """Oracle: TO_VECTOR(NULL) is NULL and so is VECTOR_DISTANCE with a NULL argument, so ORDER BY it FETCH
    APPROX FIRST k takes k rows, in no order. A NULL query embedding (a SQL*Plus VARIABLE never assigned; the
    macro's argument, where the PostgreSQL function raises; a null element of retrieve_many's JSON array) must
    find nothing: retrieve.sql, assemble.sql and the macro return no rows, retrieve_many.sql no row of that
    query while the others keep their hits. Run through the translations to PostgreSQL above, where a NULL
    distance orders the same way (the unguarded files returned k hits); each is checked with a real query too,
    so an empty answer is the guard's, not a translation's."""
    import json

    from psycopg.rows import dict_row

    text = (SQL_DIR / "oracle" / name).read_text()
    q = _unit(next(iter(corpus_query_vectors(loaded, 1, seed=43))))
    k = 4
    if name == "retrieve_many.sql":
        if db.info.server_version < 170000:
            pytest.skip("JSON_TABLE is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
        sql = _oracle_many_on_postgres(text)
        # PostgreSQL's JSON_TABLE reads a JSON null as the text 'null' (FORMAT JSON), which no vector reads; so, by
        # its docs, does Oracle's, whose TO_VECTOR then refuses it (ORA-51804: an error, as the header says). Read
        # here as a NULL vector, this checks the guard itself: a NULL query embedding finds nothing
        read = "SELECT q.query_ord, q.embedding::vector(384) AS embedding"
        assert read in sql
        sql = sql.replace(read, "SELECT q.query_ord, NULLIF(q.embedding, 'null')::vector(384) AS embedding")

        def run(qs: list) -> list[dict]:
            arr = json.dumps([None if x is None else [float(v) for v in x] for x in qs])
            with db.cursor(row_factory=dict_row) as cur:
                return cur.execute(sql, {"query_embeddings": arr, "k": k}).fetchall()

        rows = run([q, None, q])
        hits = [x["query_ord"] for x in rows if x["query_ord"] is not None]
        assert sorted(hits) == [1] * k + [3] * k, "a NULL query took hits"
        assert run([None]) == []
        return

    if name == "retrieve_macro.sql":
        if db.info.server_version < 170000:
            pytest.skip("JSON_TABLE is PostgreSQL 17+ (ONETRIP_TEST_DSN names an older server)")
        sql = _macro_on_postgres(_macro_query())
        params = {"k": k, "collections": None, "principals": None}
    elif name == "retrieve.sql":
        sql = _oracle_statement_on_postgres(text)
        _assert_no_oracle_left(sql)
        params = {"k": k}
    else:
        sql = _oracle_assemble_on_postgres(text)
        params = {"k": k, "max_tokens": 10**6, "document_max_tokens": 900}
    with db.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sql, {**params, "query_embedding": vec_literal(q)}).fetchall()
        assert rows and len([x for x in rows if x["distance"] is not None]) == k
        assert cur.execute(sql, {**params, "query_embedding": None}).fetchall() == [], "a NULL query took hits"
