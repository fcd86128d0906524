"""The SQL validator itself: sqlglot must neither reject nor silently rewrite our SQL.

No database: these tests pin the parser/generator behaviour that the edition
tests rely on, including negative cases showing the checks can fail (stock
sqlglot rewrites ``<=>``, cannot read Oracle 23ai's VECTOR features, and a
lossy round trip is caught by the same comparison the checks use).
"""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.dialects.oracle import Oracle
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError

from onetrip.editions import render_edition
from onetrip.sqlcheck import (
    ApproxFetch,
    CosineDistance,
    CreateVectorIndex,
    Oracle23ai,
    PgVectorPostgres,
    SqlValidationError,
    VectorDistance,
    assert_oracle_constructs_kept,
    assert_vector_ops_kept,
    check_oracle_roundtrip,
    check_roundtrip,
    dialect_for,
    extract_oracle_macro_query,
    extract_oracle_policy_predicate,
    oracle_constructs,
    parse_statements,
    psql_vars_to_binds,
    split_statements,
)


def ws(sql: str) -> str:
    """Whitespace-collapsed, for comparing a regeneration with its source."""
    return re.sub(r"\s+", " ", sql).strip()


def tight(sql: str) -> str:
    """Whitespace-collapsed with no blanks around ( ) , -- layout differences only."""
    return re.sub(r"\s*([(),])\s*", r"\1", ws(sql))


def ora(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read=Oracle23ai)


def ora_rt(sql: str) -> str:
    return ora(sql).sql(dialect=Oracle23ai)


# --------------------------------------------------------------------------- (a) pgvector operators


def test_stock_sqlglot_rewrites_cosine_operator_silently():
    """The hazard PgVectorPostgres exists for: <=> becomes null-safe equality, <#> does not parse."""
    out = sqlglot.transpile("SELECT a <=> b FROM t", read="postgres", write="postgres")[0]
    assert "IS NOT DISTINCT FROM" in out and "<=>" not in out
    with pytest.raises(ParseError):
        sqlglot.parse_one("SELECT a <#> b FROM t", read="postgres")


PG_QUERY = (
    "SELECT s.id, s.embedding {op} %(query_embedding)s::vector AS distance "
    "FROM sections AS s "
    "WHERE s.doc_id = %(doc)s "
    "ORDER BY s.embedding {op} %(query_embedding)s::vector "
    "LIMIT %(k)s"
)


@pytest.mark.parametrize("op", ["<=>", "<#>", "<+>", "<->"])
def test_check_roundtrip_keeps_each_pgvector_operator(op):
    """In the select list and in ORDER BY, next to %(name)s binds and ::vector casts."""
    (st,) = check_roundtrip(PG_QUERY.format(op=op))
    assert st.roundtrip is not None and not st.opaque
    assert st.roundtrip.count(f" {op} ") == 2
    assert "IS NOT DISTINCT FROM" not in st.roundtrip
    assert st.roundtrip.count("%(query_embedding)s") == 2 and "%(k)s" in st.roundtrip
    assert st.tree.find(exp.Cast) is not None  # ::vector is a real cast, regenerated as CAST(... AS VECTOR)


def test_vector_operators_are_distinct_expression_classes():
    tree = sqlglot.parse_one("SELECT a <=> b FROM t", read=PgVectorPostgres)
    assert isinstance(tree.selects[0], CosineDistance)
    assert tree.find(exp.NullSafeEQ) is None


def test_broken_pipeline_is_detected_by_the_same_comparison():
    """Regenerating with stock Postgres must fail the check check_roundtrip relies on."""
    src = PG_QUERY.format(op="<=>")
    broken = sqlglot.parse_one(src, read=Postgres).sql(dialect=Postgres)
    with pytest.raises(SqlValidationError, match="vector operators"):
        assert_vector_ops_kept(src, broken)
    assert_vector_ops_kept(src, sqlglot.parse_one(src, read=PgVectorPostgres).sql(dialect=PgVectorPostgres))


def test_introduced_null_safe_equality_is_detected_even_when_operators_match():
    with pytest.raises(SqlValidationError, match="IS NOT DISTINCT FROM"):
        assert_vector_ops_kept("SELECT a = b FROM t", "SELECT a IS NOT DISTINCT FROM b FROM t")


def test_apostrophe_in_a_comment_does_not_hide_the_query():
    """A header like "a document's first" must not open a string that swallows the SQL after it."""
    src = "-- the hit's neighbours; a document's first section\nSELECT a <=> b AS d FROM t ORDER BY a <=> b"
    (st,) = check_roundtrip(src)
    assert st.roundtrip.count("<=>") == 2
    with pytest.raises(SqlValidationError):
        assert_vector_ops_kept(src, "/* the hit's neighbours; a document's first section */ SELECT a AS d FROM t")


# --------------------------------------------------------------------------- (b) psql variables


def test_psql_vars_become_binds_and_casts_stay():
    src = "SELECT x::int, :'q'::vector, :k, :\"name\", a::vector(3) FROM t WHERE t.ts::date = :day"
    assert psql_vars_to_binds(src) == (
        "SELECT x::int, %(q)s::vector, %(k)s, %(name)s, a::vector(3) FROM t WHERE t.ts::date = %(day)s"
    )


def test_psql_vars_to_binds_leaves_sql_without_variables_alone():
    src = "SELECT '2024-01-01 12:30'::timestamp, a::text FROM t"
    assert psql_vars_to_binds(src) == src


# --------------------------------------------------------------------------- (c) splitting


def test_split_keeps_dollar_quoted_bodies_and_strings_whole():
    script = """
CREATE FUNCTION f(k integer) RETURNS integer LANGUAGE plpgsql AS $function$
BEGIN
    PERFORM 1; RETURN k;
END;
$function$;
SELECT 'a;b' AS s, $$c;d$$ AS t;
-- a trailing comment; with a semicolon
"""
    pieces = split_statements(script, "postgres")
    assert len(pieces) == 2
    assert pieces[0].startswith("CREATE FUNCTION") and pieces[0].endswith("$function$")
    assert "PERFORM 1; RETURN k;" in pieces[0]
    assert pieces[1] == "SELECT 'a;b' AS s, $$c;d$$ AS t"


def test_split_oracle_keeps_string_literals_whole():
    assert split_statements("SELECT 'a;b' FROM dual; SELECT q'[c;d]' FROM dual;", "oracle") == [
        "SELECT 'a;b' FROM dual",
        "SELECT q'[c;d]' FROM dual",
    ]



def test_split_oracle_refuses_lines_sqlplus_would_end_a_statement_at():
    """SQL*Plus reads lines, not SQL: a ';' ending a comment or string line, or a blank line, ends the statement."""
    header = "-- an example block:\n--   :k := 5;\n--   END;\nSELECT 1\n  FROM dual;\n"
    assert split_statements(header, "oracle") == ["-- an example block:\n--   :k := 5;\n--   END;\nSELECT 1\n  FROM dual"]
    with pytest.raises(SqlValidationError, match=r"line 1: ends in ';' inside a statement"):
        split_statements("SELECT 1 -- one;\n  FROM dual;\n", "oracle")
    with pytest.raises(SqlValidationError, match=r"line 2: ends in ';'"):
        split_statements("SELECT 'a\nb;\nc' FROM dual;\n", "oracle")
    with pytest.raises(SqlValidationError, match=r"line 2: a blank line inside a statement"):
        split_statements("SELECT 1\n\n  FROM dual;\n", "oracle")
    # PL/SQL blocks run at their '/' line: ';' ends and blank lines inside them are SQL*Plus's to keep
    assert len(split_statements("BEGIN\n  NULL; -- x;\n\nEND;\n/\n", "oracle")) == 1


# --------------------------------------------------------------------------- (d) the Oracle edition


def test_dialect_for_oracle_is_oracle23ai():
    assert dialect_for("oracle") is Oracle23ai
    assert dialect_for("postgres") is PgVectorPostgres


def test_every_oracle_statement_parses_and_only_plsql_is_opaque():
    """Opaque = kept as an unparsed Command. Pinned: only PL/SQL. The SQL macros' queries and the VPD policy
    function's predicate are parsed; the one anonymous block left unparsed is rls.sql's DBMS_RLS calls."""
    edition = render_edition("oracle")
    opaque = []
    for name, text in edition.items():
        for st in parse_statements(text, "oracle"):
            if st.opaque:
                assert isinstance(st.tree, exp.Command)
                if st.tree.this == "DECLARE":
                    opaque.append((name, "block"))
                    assert st.inner is None
                    assert re.findall(r"\b(DBMS_\w+\.\w+)\(", st.sql) == ["DBMS_RLS.DROP_POLICY", "DBMS_RLS.ADD_POLICY"]
                    continue
                assert st.tree.this == "CREATE"
                assert re.match(r"OR\s+REPLACE\s+FUNCTION\b", st.tree.text("expression").strip())
                assert st.inner is not None and not st.inner.opaque
                assert isinstance(st.inner.tree, (exp.Select, exp.Union))  # retrieve.sql: hits UNION ALL context
                opaque.append((name, "macro" if "SQL_MACRO" in st.sql else "policy"))
            else:
                assert not isinstance(st.tree, exp.Command), (name, st.sql[:80])
                assert st.inner is None
    assert opaque == [(n, "macro") for n, t in edition.items() if "SQL_MACRO" in t] + [
        ("rls.sql", "policy"), ("rls.sql", "block")]


def test_vpd_policy_function_is_opaque_but_its_predicate_is_parsed_and_checked():
    """rls.sql's policy function is PL/SQL; the predicate it returns is what Oracle adds to every query of the
    two tables, so it is parsed (as SELECT 1 FROM dual WHERE ...) and its JSON_EXISTS calls must survive."""
    function = parse_statements(render_edition("oracle")["rls.sql"], "oracle")[0]
    predicate = extract_oracle_policy_predicate(function.sql)
    assert predicate.startswith("acl IS NULL") and function.inner.sql == f"SELECT 1 FROM dual WHERE {predicate}"
    found = oracle_constructs(function.inner.roundtrip)
    assert found["JSON_EXISTS"] == {
        "JSON_EXISTS(ACL,'$[*]?(@ == $p)' PASSING SYS_CONTEXT('USERENV','CURRENT_USER')AS \"p\")": 1,
        "JSON_EXISTS(ACL,'$[*]?(@ == $p)' PASSING R.ROLE AS \"p\")": 1,
    }
    where = function.inner.tree.args["where"].this
    assert isinstance(where, exp.Or) and len(list(where.flatten())) == 3  # public, the user, a session role
    assert check_oracle_roundtrip(function.sql + "\n/\n")[0].inner is not None
    # a broken predicate fails the check instead of reaching a DBA (Oracle would refuse every query: ORA-28113)
    with pytest.raises(SqlValidationError, match="does not parse"):
        parse_statements(function.sql.replace('AS "p"))~', 'AS "p")~', 1) + "\n/\n",
                         "oracle")
    with pytest.raises(SqlValidationError, match="one condition, without ';'"):
        parse_statements(function.sql.replace("acl IS NULL", "acl IS NULL; DROP TABLE sections", 1) + "\n/\n",
                         "oracle")


def test_extract_oracle_policy_predicate_negative():
    with pytest.raises(SqlValidationError, match="not a VPD policy function"):
        extract_oracle_policy_predicate("CREATE FUNCTION f RETURN VARCHAR2 IS BEGIN RETURN 'x = 1'; END;")
    with pytest.raises(SqlValidationError, match="builds its predicate dynamically"):
        extract_oracle_policy_predicate(
            "CREATE FUNCTION f (s IN VARCHAR2, o IN VARCHAR2) RETURN VARCHAR2 IS "
            "BEGIN RETURN 'owner = ' || USER; END;")
    with pytest.raises(SqlValidationError, match="found 2"):
        extract_oracle_policy_predicate(
            "CREATE FUNCTION f (s VARCHAR2, o VARCHAR2) RETURN VARCHAR2 IS "
            "BEGIN IF s IS NULL THEN RETURN '1 = 0'; END IF; RETURN 'acl IS NULL'; END;")
    assert extract_oracle_policy_predicate(
        "CREATE FUNCTION f (s VARCHAR2, o VARCHAR2) RETURN VARCHAR2 IS BEGIN RETURN q'[ a = 'b' ]'; END;") == "a = 'b'"


def test_oracle_schema_is_fully_parsed_including_the_vector_index():
    checked = check_oracle_roundtrip(render_edition("oracle")["schema.sql"])
    kinds = [type(st.tree).__name__ for st in checked]
    assert kinds == ["Create", "Create", "Create", "Create", "Create", "CreateVectorIndex"]
    vtypes = [dt for st in checked for dt in st.tree.find_all(exp.DataType) if dt.is_type(exp.DType.VECTOR)]
    assert [dt.sql(dialect=Oracle23ai) for dt in vtypes] == ["VECTOR(384, FLOAT32)"]
    index = checked[-1].tree
    assert not index.args.get("exists") and index.args["distance"].name == "COSINE"
    assert index.args["organization"].name == "INMEMORY NEIGHBOR GRAPH"
    assert index.args["accuracy"].name == "95"
    for st in checked:  # beyond the named constructs: every schema statement comes back token for token
        assert tight(st.roundtrip.split("*/")[-1]) == tight(re.sub(r"--[^\n]*", "", st.sql))


def test_oracle_retrieve_keeps_its_oracle_constructs():
    (st,) = check_oracle_roundtrip(render_edition("oracle")["retrieve.sql"])
    found = oracle_constructs(st.roundtrip)
    assert found["FETCH APPROX"] == {"FETCH APPROX FIRST :K ROWS ONLY": 1}
    assert found["hint"] == {"MATERIALIZE": 1}
    # the bind is a CLOB of text, read by TO_VECTOR (SQL*Plus has no VECTOR bind type)
    assert found["VECTOR_DISTANCE"] == {"VECTOR_DISTANCE(S.EMBEDDING,TO_VECTOR(:QUERY_EMBEDDING,384,FLOAT32),COSINE)": 2}
    assert set(found["bind"]) == {"QUERY_EMBEDDING", "K"}
    fetch = st.tree.find(ApproxFetch)
    assert fetch is not None and fetch.args["approx"] == "APPROX"
    cte = st.tree.find(exp.CTE)
    assert cte.find(exp.Hint) is not None and cte.find(ApproxFetch) is fetch
    assert {p.name for p in st.tree.find_all(exp.Placeholder)} == {"query_embedding", "k"}
    for vd in st.tree.find_all(VectorDistance):
        assert isinstance(vd.args["metric"], exp.Var) and vd.args["metric"].name == "COSINE"
    assert not [c for c in st.tree.find_all(exp.Column) if c.name.upper() == "COSINE"]


def test_oracle_macro_keeps_its_json_filters():
    """The SQL macro's collection and access filters (JSON_TABLE over the caller's list, JSON_EXISTS on acl)
    come back from sqlglot with their paths, ERROR ON ERROR and PASSING clause; losing any is caught."""
    (st,) = check_oracle_roundtrip(render_edition("oracle")["retrieve_macro.sql"])
    inner = st.inner
    found = oracle_constructs(inner.roundtrip)
    assert found["JSON_TABLE"] == {
        "JSON_TABLE(COLLECTIONS,'$[*]' ERROR ON ERROR COLUMNS(COLLECTION VARCHAR2(512 CHAR)PATH '$'))": 2,
        "JSON_TABLE(PRINCIPALS,'$[*]' ERROR ON ERROR COLUMNS(PRINCIPAL VARCHAR2(512 CHAR)PATH '$'))": 2,
    }  # hits and context rows
    assert found["JSON_EXISTS"] == {"JSON_EXISTS(S.ACL,'$[*]?(@ == $p)' PASSING CP.PRINCIPAL AS \"p\")": 2}
    assert not found["bind"]  # the macro's parameters are referenced by name, never as :binds
    # no WITH clause (a WITH subquery cannot read a table macro's scalar parameters): one search, in an
    # inline view, whose FETCH APPROX sqlglot keeps; the context through a plain CROSS JOIN, no LATERAL
    assert inner.tree.find(exp.With) is None and inner.tree.find(exp.CTE) is None
    assert found["FETCH APPROX"] == {"FETCH APPROX FIRST K ROWS ONLY": 1}
    assert found["VECTOR_DISTANCE"] == {"VECTOR_DISTANCE(S.EMBEDDING,QUERY_EMBEDDING,COSINE)": 2}
    (fetch,) = inner.tree.find_all(ApproxFetch)
    assert isinstance(fetch.parent, exp.Select) and isinstance(fetch.parent.parent, exp.Subquery)
    assert "CROSS JOIN (SELECT 0 AS rel FROM dual" in inner.roundtrip and "LATERAL" not in inner.roundtrip
    assert len(list(inner.tree.find_all(exp.JSONTable))) == 4 and len(list(inner.tree.find_all(exp.JSONExists))) == 2
    src = inner.sql
    for lossy in (src.replace(" ERROR ON ERROR", "", 1), src.replace("'$[*]?(@ == $p)'", "'$[*]'", 1),
                  src.replace(' PASSING cp.principal AS "p"', "", 1),
                  # case matters inside quotes: a JSON path variable and its PASSING name are case-sensitive
                  src.replace('AS "p"', 'AS "P"', 1), src.replace("(@ == $p)", "(@ == $P)", 1)):
        with pytest.raises(SqlValidationError, match="JSON_(TABLE|EXISTS)"):
            assert_oracle_constructs_kept(src, lossy)


def test_oracle_assemble_keeps_its_oracle_constructs():
    """assemble.sql's Oracle edition comes back from sqlglot with its search, its split-part numbers (JSON_VALUE)
    and its BIT_OR_AGG; recursive WITHs with their column lists and no RECURSIVE keyword; dropping either is caught."""
    (st,) = check_oracle_roundtrip(render_edition("oracle")["assemble.sql"])
    found = oracle_constructs(st.roundtrip)
    assert found["FETCH APPROX"] == {"FETCH APPROX FIRST :K ROWS ONLY": 1}
    assert found["hint"] == {"MATERIALIZE": 2}  # the hits and the passages
    assert found["VECTOR_DISTANCE"] == {"VECTOR_DISTANCE(S.EMBEDDING,TO_VECTOR(:QUERY_EMBEDDING,384,FLOAT32),COSINE)": 2}
    assert found["JSON_VALUE"] == {"JSON_VALUE(H.METADATA,'$.part.numberOnly()' RETURNING NUMBER)": 1,
                                   "JSON_VALUE(H.METADATA,'$.parts.numberOnly()' RETURNING NUMBER)": 1}
    assert found["BIT_OR_AGG"] == {"BIT_OR_AGG(C.ROLE_BIT)": 1}
    assert set(found["bind"]) == {"QUERY_EMBEDDING", "K", "MAX_TOKENS"}
    ctes = {c.alias: c for c in st.tree.find_all(exp.CTE)}
    assert [c.name for c in ctes["subtree"].args["alias"].columns] == [
        "doc_id", "section_id", "sequence_index", "hit_rank", "depth"]
    assert [c.name for c in ctes["packed"].args["alias"].columns] == ["step", "pick_order", "used"]
    assert not st.tree.find(exp.With).args.get("recursive") and st.tree.find(exp.Lateral) is None
    src = st.sql
    for lossy, name in ((src.replace("'$.parts.numberOnly()' RETURNING NUMBER", "'$.parts.numberOnly()'"),
                         "JSON_VALUE"),
                        (src.replace("JSON_VALUE(h.metadata, '$.part.", "JSON_VALUE(h.metadata, '$.Part.", 1),
                         "JSON_VALUE"),
                        (src.replace("BIT_OR_AGG(c.role_bit)", "BIT_OR(c.role_bit)"), "BIT_OR_AGG")):
        with pytest.raises(SqlValidationError, match=name):
            assert_oracle_constructs_kept(src, lossy)


def test_oracle_retrieve_many_keeps_its_oracle_constructs():
    """retrieve_many.sql's Oracle edition comes back from sqlglot with its JSON_TABLE over the array of query
    vectors (FOR ORDINALITY, FORMAT JSON, ERROR ON ERROR), TO_VECTOR per query, and its per-query search in a
    CROSS APPLY. Stock sqlglot wrote CROSS APPLY back as INNER JOIN LATERAL (...) AS n, which Oracle refuses
    (an inline view's alias takes no AS); the Oracle generator keeps it, and a rewrite is caught."""
    (st,) = check_oracle_roundtrip(render_edition("oracle")["retrieve_many.sql"])
    found = oracle_constructs(st.roundtrip)
    assert found["FETCH APPROX"] == {"FETCH APPROX FIRST :K ROWS ONLY": 1}
    assert found["hint"] == {"MATERIALIZE": 1}
    assert found["VECTOR_DISTANCE"] == {"VECTOR_DISTANCE(S.EMBEDDING,Q.EMBEDDING,COSINE)": 2}
    assert found["TO_VECTOR"] == {"TO_VECTOR(Q.EMBEDDING,384,FLOAT32)": 1}
    assert found["JSON_TABLE"] == {"JSON_TABLE(:QUERY_EMBEDDINGS,'$[*]' ERROR ON ERROR COLUMNS(QUERY_ORD FOR "
                                   "ORDINALITY,EMBEDDING CLOB FORMAT JSON PATH '$'))": 1}
    assert found["APPLY"] == {"CROSS APPLY": 1} and not found["LATERAL"]
    assert set(found["bind"]) == {"QUERY_EMBEDDINGS", "K"}
    # the view's alias without AS, then the guard that has a NULL query embedding find nothing
    assert ") n WHERE NOT q.embedding IS NULL /* a NULL one finds nothing" in st.roundtrip
    (lateral,) = st.tree.find_all(exp.Lateral)
    assert lateral.args["cross_apply"] is True and lateral.find(ApproxFetch) is not None
    src = st.sql
    for lossy, name in ((src.replace("CROSS APPLY (", "INNER JOIN LATERAL ("), "APPLY"),
                        (src.replace("CROSS APPLY (", "CROSS JOIN LATERAL ("), "APPLY"),
                        (src.replace("query_ord FOR ORDINALITY, ", ""), "JSON_TABLE"),
                        (src.replace("CLOB FORMAT JSON", "CLOB"), "JSON_TABLE"),
                        (src.replace("TO_VECTOR(q.embedding, 384, FLOAT32)", "q.embedding"), "TO_VECTOR")):
        assert lossy != src
        with pytest.raises(SqlValidationError, match=name):
            assert_oracle_constructs_kept(src, lossy)
    # OUTER APPLY and LATERAL come back as written too
    for sql in ("SELECT q.a, n.b FROM q OUTER APPLY (SELECT t.b FROM t WHERE t.a = q.a) n",
                "SELECT q.a, n.b FROM q CROSS JOIN LATERAL (SELECT t.b FROM t WHERE t.a = q.a) n"):
        (one,) = check_oracle_roundtrip(sql)
        assert one.roundtrip == sql


# --------------------------------------------------------------------------- (e) each construct


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE t (v VECTOR(384, FLOAT32))",
        "CREATE TABLE t (v VECTOR(768, FLOAT64), w VECTOR(16, INT8), b VECTOR(1024, BINARY))",
        "CREATE TABLE t (v VECTOR(*, FLOAT32), w VECTOR(*, *), x VECTOR(3), y VECTOR)",
        "CREATE TABLE t (v VECTOR(1000, FLOAT32, SPARSE))",
        "SELECT CAST(:q AS VECTOR(384, FLOAT32)) FROM dual",
    ],
)
def test_vector_type_round_trips_identically(ddl):
    assert ora_rt(ddl) == ddl


def test_vector_type_negative():
    with pytest.raises(ParseError):  # stock sqlglot reads VECTOR's arguments element type first
        sqlglot.parse_one("CREATE TABLE t (v VECTOR(384, FLOAT32))", read=Oracle)
    with pytest.raises(ParseError, match="VECTOR format"):
        ora("CREATE TABLE t (v VECTOR(384, FLOAT16))")
    with pytest.raises(SqlValidationError, match="VECTOR type"):
        assert_oracle_constructs_kept("CREATE TABLE t (v VECTOR(384, FLOAT32))", "CREATE TABLE t (v VECTOR(384))")


def test_vector_constructor_function_is_not_taken_for_the_type():
    tree = ora("SELECT VECTOR('[1, 2]', 2, FLOAT32) FROM dual")
    assert isinstance(tree.selects[0], exp.Anonymous)
    assert tree.sql(dialect=Oracle23ai) == "SELECT VECTOR('[1, 2]', 2, FLOAT32) FROM dual"


@pytest.mark.parametrize(
    "query",
    [
        "SELECT x FROM t ORDER BY d FETCH APPROX FIRST :k ROWS ONLY",
        "SELECT x FROM t ORDER BY d FETCH APPROXIMATE NEXT 1 ROW ONLY",
        "SELECT x FROM t ORDER BY d FETCH APPROX FIRST 10 ROWS ONLY WITH TARGET ACCURACY 90",
        "SELECT x FROM t ORDER BY d FETCH APPROX FIRST 10 ROWS ONLY WITH TARGET ACCURACY PARAMETERS (EFSEARCH 500)",
        "SELECT x FROM t ORDER BY d FETCH APPROX FIRST ROWS ONLY",
    ],
)
def test_fetch_approx_round_trips_identically(query):
    tree = ora(query)
    assert isinstance(tree.args["limit"], ApproxFetch)
    assert tree.sql(dialect=Oracle23ai) == query


def test_exact_fetch_stays_exact():
    tree = ora("SELECT x FROM t ORDER BY d FETCH FIRST 5 ROWS ONLY")
    assert type(tree.args["limit"]) is exp.Fetch
    assert tree.sql(dialect=Oracle23ai) == "SELECT x FROM t ORDER BY d FETCH FIRST 5 ROWS ONLY"


def test_fetch_approx_negative():
    with pytest.raises(ParseError):
        sqlglot.parse_one("SELECT x FROM t ORDER BY d FETCH APPROX FIRST 5 ROWS ONLY", read=Oracle)
    with pytest.raises(ParseError, match="ROWS ONLY"):
        ora("SELECT x FROM t ORDER BY d FETCH APPROX FIRST 5 ROWS WITH TIES")
    # A lossy pipeline that turns the approximate fetch into an exact one is caught.
    src = "SELECT x FROM t ORDER BY d FETCH APPROX FIRST :k ROWS ONLY"
    tree = ora(src)
    approx = tree.args["limit"]
    tree.set("limit", exp.Fetch(direction="FIRST", count=approx.args["count"].copy()))
    lossy = tree.sql(dialect=Oracle23ai)
    assert lossy == "SELECT x FROM t ORDER BY d FETCH FIRST :k ROWS ONLY"
    with pytest.raises(SqlValidationError, match="FETCH APPROX"):
        assert_oracle_constructs_kept(src, lossy)


HINTED = "WITH hits AS (SELECT /*+ MATERIALIZE */ a FROM t) SELECT a FROM hits"


def test_hint_inside_a_cte_is_kept():
    tree = ora(HINTED)
    hint = tree.find(exp.CTE).find(exp.Hint)
    assert hint is not None and hint.expressions[0].name == "MATERIALIZE"
    assert tree.sql(dialect=Oracle23ai) == HINTED


def test_hint_negative():
    assert ora(HINTED.replace("/*+", "/*")).find(exp.Hint) is None  # without '+' it is a mere comment
    with pytest.raises(SqlValidationError, match="hint"):
        assert_oracle_constructs_kept(HINTED, HINTED.replace("/*+ MATERIALIZE */ ", ""))
    with pytest.raises(SqlValidationError, match="hint"):
        assert_oracle_constructs_kept(HINTED, HINTED.replace("/*+", "/*"))


@pytest.mark.parametrize("metric", ["COSINE", "DOT", "EUCLIDEAN", "EUCLIDEAN_SQUARED", "MANHATTAN", "HAMMING"])
def test_vector_distance_metric_is_a_keyword_and_round_trips(metric):
    src = f"SELECT VECTOR_DISTANCE(s.embedding, :q, {metric}) AS d FROM sections s"
    tree = ora(src)
    vd = tree.find(VectorDistance)
    assert isinstance(vd.args["metric"], exp.Var) and vd.args["metric"].name == metric
    assert tree.find(exp.Column, bfs=False) is not None
    assert {c.name for c in tree.find_all(exp.Column)} == {"embedding"}
    assert tree.sql(dialect=Oracle23ai) == src


def test_vector_distance_negative():
    stock = sqlglot.parse_one("SELECT VECTOR_DISTANCE(a, :q, COSINE) FROM t", read=Oracle)
    assert "COSINE" in {c.name for c in stock.find_all(exp.Column)}  # stock: the metric is a column
    with pytest.raises(ParseError, match="metric"):
        ora("SELECT VECTOR_DISTANCE(a, :q, COSIN) FROM t")
    with pytest.raises(SqlValidationError, match="VECTOR_DISTANCE"):
        assert_oracle_constructs_kept(
            "SELECT VECTOR_DISTANCE(a, :q, COSINE) FROM t", "SELECT VECTOR_DISTANCE(a, :q) FROM t"
        )


def test_vector_distance_without_metric_and_nested():
    for src in [
        "SELECT VECTOR_DISTANCE(a, :q) FROM t",
        "SELECT (VECTOR_DISTANCE(TO_VECTOR(:q), a, COSINE)) AS d FROM t",
    ]:
        assert ora_rt(src) == src


def test_named_binds_are_kept_and_a_renamed_bind_is_caught():
    src = "SELECT a FROM t WHERE b = :b_1 AND c = :Name ORDER BY VECTOR_DISTANCE(v, :q, COSINE)"
    assert ora_rt(src) == src
    assert set(oracle_constructs(src)["bind"]) == {"B_1", "NAME", "Q"}
    with pytest.raises(SqlValidationError, match="bind"):
        assert_oracle_constructs_kept(src, src.replace(":Name", ":other"))
    # A ':' inside a string or a comment is no bind.
    assert not oracle_constructs("SELECT '12:30 :x' FROM t -- :y")["bind"]


def test_oracle_shorthand_distance_operators_are_not_rewritten():
    src = "SELECT a <=> :q, a <-> :q, a <#> :q FROM t"
    assert "IS NOT DISTINCT FROM" in sqlglot.transpile("SELECT a <=> :q FROM t", read="oracle", write="oracle")[0]
    assert ora_rt(src) == src


def test_create_table_if_not_exists_json_default_not_null_round_trip():
    src = (
        "CREATE TABLE IF NOT EXISTS d (id VARCHAR2(512) NOT NULL, meta JSON DEFAULT '{}' NOT NULL, "
        "n NUMBER(10) DEFAULT 0 NOT NULL, at TIMESTAMP WITH TIME ZONE DEFAULT SYSTIMESTAMP NOT NULL, "
        "CONSTRAINT d_pkey PRIMARY KEY (id))"
    )
    assert ora_rt(src) == src
    with pytest.raises(SqlValidationError, match="IF NOT EXISTS"):
        assert_oracle_constructs_kept(src, src.replace(" IF NOT EXISTS", ""))


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE VECTOR INDEX IF NOT EXISTS ix ON sections (embedding) ORGANIZATION INMEMORY NEIGHBOR GRAPH "
        "DISTANCE COSINE WITH TARGET ACCURACY 95",
        "CREATE VECTOR INDEX s.ix ON s.t (emb) ORGANIZATION NEIGHBOR PARTITIONS DISTANCE EUCLIDEAN "
        "WITH TARGET ACCURACY 90 PARAMETERS (TYPE IVF, NEIGHBOR PARTITIONS 10) PARALLEL 4",
        "CREATE VECTOR INDEX ix ON t (emb) ORGANIZATION INMEMORY NEIGHBOR GRAPH DISTANCE DOT "
        "PARAMETERS (TYPE HNSW, NEIGHBORS 32, EFCONSTRUCTION 200)",
        "CREATE VECTOR INDEX ix ON t (emb)",
    ],
)
def test_create_vector_index_round_trips_identically(ddl):
    tree = ora(ddl)
    assert isinstance(tree, CreateVectorIndex)
    assert tree.sql(dialect=Oracle23ai) == ddl


def test_create_vector_index_negative():
    ddl = "CREATE VECTOR INDEX ix ON t (emb) ORGANIZATION INMEMORY NEIGHBOR GRAPH DISTANCE COSINE"
    assert isinstance(sqlglot.parse_one(ddl, read=Oracle), exp.Command)  # stock: opaque
    with pytest.raises(ParseError):
        ora(ddl.replace("ORGANIZATION", "ORGANISATION"))
    with pytest.raises(ParseError, match="metric"):
        ora(ddl.replace("COSINE", "COSIN"))
    with pytest.raises(SqlValidationError, match="DISTANCE"):
        assert_oracle_constructs_kept(ddl, ddl.replace(" DISTANCE COSINE", ""))


def test_unparsable_oracle_statement_names_the_failure():
    with pytest.raises(SqlValidationError, match="does not parse"):
        parse_statements("SELECT x FROM t ORDER BY d FETCH APPROX FIRST 5 ROWS WITH TIES;", "oracle")


# --------------------------------------------------------------------------- (f) PL/SQL and SQL macros

MACRO = """CREATE OR REPLACE FUNCTION top_k (
    query_embedding VECTOR,
    k NUMBER DEFAULT 5
) RETURN VARCHAR2 SQL_MACRO(TABLE)
IS
BEGIN
    RETURN q'~
SELECT /*+ MATERIALIZE */ s.id, VECTOR_DISTANCE(s.v, query_embedding, COSINE) AS d
  FROM t s
 WHERE s.note <> 'it''s; fine'
 ORDER BY VECTOR_DISTANCE(s.v, query_embedding, COSINE)
 FETCH APPROX FIRST k ROWS ONLY
~';
END;"""

SCRIPT = f"""-- a header; with a semicolon and a document's apostrophe
CREATE TABLE IF NOT EXISTS t (id NUMBER(10) NOT NULL, note VARCHAR2(100), v VECTOR(3, FLOAT32));

{MACRO}
/

SELECT * FROM top_k(:q, 3);
"""


def test_plsql_block_is_one_statement_up_to_its_slash_line():
    pieces = split_statements(SCRIPT, "oracle")
    assert len(pieces) == 3
    assert pieces[1] == MACRO  # inner semicolons kept, the '/' line dropped
    assert pieces[2] == "SELECT * FROM top_k(:q, 3)"


def test_sql_macro_is_opaque_but_its_query_is_parsed_and_checked():
    checked = check_oracle_roundtrip(SCRIPT)
    assert [st.opaque for st in checked] == [False, True, False]
    macro = checked[1]
    assert isinstance(macro.tree, exp.Command) and macro.inner is not None
    assert isinstance(macro.inner.tree, exp.Select)
    assert macro.inner.tree.find(ApproxFetch) is not None
    assert macro.inner.tree.find(exp.Hint) is not None


def test_extract_oracle_macro_query():
    query = extract_oracle_macro_query(MACRO)
    assert query.startswith("SELECT /*+ MATERIALIZE */") and query.endswith("FETCH APPROX FIRST k ROWS ONLY")
    assert "'it''s; fine'" in query
    bracketed = "CREATE FUNCTION f RETURN VARCHAR2 SQL_MACRO IS BEGIN RETURN q'[ SELECT 'x' AS s FROM dual ]'; END;"
    assert extract_oracle_macro_query(bracketed) == "SELECT 'x' AS s FROM dual"
    assert ora_rt(extract_oracle_macro_query(bracketed)) == "SELECT 'x' AS s FROM dual"


def test_plsql_negative():
    with pytest.raises(SqlValidationError, match="not ended by a line holding only '/'"):
        split_statements(SCRIPT.replace("END;\n/\n", "END;\n"), "oracle")
    with pytest.raises(SqlValidationError, match="run it twice"):
        split_statements("SELECT 1 FROM dual;\n/\n", "oracle")
    # Without the SQL*Plus rule, the block would be cut at its inner semicolons.
    assert len(split_statements(SCRIPT, "postgres")) > 3
    with pytest.raises(SqlValidationError, match="not a SQL macro"):
        extract_oracle_macro_query("CREATE FUNCTION f RETURN NUMBER IS BEGIN RETURN 1; END;")
    with pytest.raises(SqlValidationError, match="dynamically"):
        extract_oracle_macro_query(
            "CREATE FUNCTION f RETURN VARCHAR2 SQL_MACRO IS BEGIN RETURN q'~SELECT 1 FROM ~' || 'dual'; END;"
        )
    with pytest.raises(SqlValidationError, match="does not parse"):
        parse_statements(MACRO.replace("FETCH APPROX FIRST k ROWS ONLY", "FETCH APPROX k") + "\n/\n", "oracle")


def test_statement_ended_by_slash_line_instead_of_semicolon():
    assert split_statements("SELECT 1 FROM dual\n/\nSELECT 2 FROM dual;", "oracle") == [
        "SELECT 1 FROM dual",
        "SELECT 2 FROM dual",
    ]
