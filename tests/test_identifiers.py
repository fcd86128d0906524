"""Hostile identifiers are refused before any SQL is built; bad DSNs fail clearly."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from onetrip import ConnectionFailedError, InvalidIdentifierError, Layout, Retriever, connect
from onetrip.identifiers import quote_ident, validate_identifier
from onetrip.templates import render

HOSTILE = [
    'sections"; DROP TABLE documents; --',
    "x;y",
    "a b",
    "a--b",
    "a/*c*/",
    "Sections",          # upper case would need quoting and differs from sections
    "sect\u0456ons",     # Cyrillic i look-alike
    "\u0455ections",     # Cyrillic s look-alike
    "sections\u200b",    # zero-width space
    "ﬁle",               # ligature that NFKC-normalises to 'file'
    "1abc",
    "",
    "a" * 64,
    "select",
    "tab\tle",
    "new\nline",
    "quote'd",
    "back`tick",
    "dollar$",
    "$1",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_schema_names_are_refused(name):
    with pytest.raises(InvalidIdentifierError):
        Layout(schema=name)


@pytest.mark.parametrize("name", [h for h in HOSTILE if h and h != "select"])
def test_hostile_prefixes_are_refused(name):
    with pytest.raises(InvalidIdentifierError) as e:
        Layout(prefix=name)
    assert "prefix" in str(e.value)


def test_error_names_the_value_and_rule():
    with pytest.raises(InvalidIdentifierError, match=r"schema name 'a;b' is not allowed: use lower-case ASCII"):
        Layout(schema="a;b")


def test_valid_names_render_bare_and_reserved_words_are_refused():
    assert quote_ident(validate_identifier("tenant_42")) == "tenant_42"
    with pytest.raises(InvalidIdentifierError, match="reserved"):
        validate_identifier("order")
    sql = render("retrieve", layout=Layout(schema="kb", prefix="v2_"), related=[], include_parent=False,
                 include_neighbors=False)
    assert "FROM kb.v2_sections s" in sql


def test_hostile_prefix_via_retriever_touches_no_database(db, statement_log):
    import asyncio

    from onetrip.async_retrieve import AsyncRetriever

    with statement_log.watch(db) as w:
        with pytest.raises(InvalidIdentifierError):
            Retriever(db, prefix="x; DROP TABLE sections; --")
        with pytest.raises(InvalidIdentifierError):
            Retriever(db, schema="public; DROP TABLE sections")
    assert w.statements == []  # refused before the adapters' registration or the settings were sent

    async def hostile_async() -> None:
        conn = await psycopg.AsyncConnection.connect(db.info.dsn, autocommit=True)
        try:
            with statement_log.watch(conn) as aw, pytest.raises(InvalidIdentifierError):
                await AsyncRetriever.create(conn, prefix="x; DROP TABLE sections; --")
            assert aw.statements == []
        finally:
            await conn.close()
    asyncio.run(hostile_async())


def test_unreachable_dsn_is_a_clear_error():
    with pytest.raises(ConnectionFailedError, match=r"could not connect to PostgreSQL at .*port=1\b"):
        connect("host=127.0.0.1 port=1 dbname=nothing user=nobody password=secret connect_timeout=2")


def test_password_is_not_echoed_in_errors():
    with pytest.raises(ConnectionFailedError) as e:
        connect("host=127.0.0.1 port=1 dbname=x user=u password=hunter2 connect_timeout=2")
    assert "hunter2" not in str(e.value)


@pytest.mark.parametrize("dsn", [
    "not a dsn", "mysql://bob:hunter2@127.0.0.1:1/x", "postgresql://bob:hunter2@127.0.0.1:1/x?bogus_opt=1",
    "host=127.0.0.1 password='hunter2' stray",
    # libpq quotes the part it cannot read, and here that is the password, whole or in part
    "postgresql://bob:hunter2@[::1/x", "postgresql://bob:hunter2@[]/x", "postgresql://bob:hun\"ter2@[::1/x",
    "postgresql://h/x?password=hun%zzter2&sslmode=require", "mysql://bob:hun ter2@h/x",
    "host=h password=hun ter2 battery", "postgresql://h/x?password=hun ter2",
    "postgresql://h/x?pass%77ord=hun%zzter2",  # libpq decodes the keyword
    # they parse, but libpq splits at the wrong '@' and the password's pieces become host, port or dbname
    "postgresql://alice:hun@ter2@db.example.invalid:5432/app", "postgresql://alice:hun/ter2@localhost:5432/app",
])
def test_a_dsn_libpq_cannot_read_is_named_without_its_password(dsn, monkeypatch):
    """psycopg's own error quotes the DSN, password included, and is not a ConnectionFailedError."""
    from onetrip import InvalidDsnError, make_pool

    for attempt in (lambda: connect(dsn), lambda: make_pool(dsn, open=False)):
        with pytest.raises(InvalidDsnError, match="the DSN is (not a PostgreSQL connection string|a URI with an '@')") \
                as e:
            attempt()
        assert "hun" not in str(e.value) and "ter2" not in str(e.value) and "\n" not in str(e.value)
        assert isinstance(e.value, ConnectionFailedError) and isinstance(e.value, ValueError)  # CLI exit 2
    monkeypatch.setenv("ONETRIP_DSN", dsn)
    with pytest.raises(InvalidDsnError):
        connect()


def test_an_empty_dsn_and_a_value_libpq_cannot_read_are_named(monkeypatch):
    """Found by review: `--dsn "$UNSET"` (an empty DSN) fell back to $ONETRIP_DSN or the embedded server and wrote
    there without a word; connect_timeout=abc reached the caller as psycopg's ProgrammingError (CLI exit 1)."""
    import asyncio

    from onetrip import InvalidDsnError
    from onetrip.connection import connect_async

    monkeypatch.setenv("ONETRIP_DSN", "host=127.0.0.1 port=1")
    for dsn in ("", "  "):
        with pytest.raises(InvalidDsnError, match="the DSN given is empty"):
            connect(dsn)
    with pytest.raises(InvalidDsnError, match="connect_timeout is not a number of seconds: 'abc'") as e:
        connect("host=127.0.0.1 password=hunter2 connect_timeout=abc")
    assert "hunter2" not in str(e.value)
    with pytest.raises(InvalidDsnError, match="connect_timeout"):
        asyncio.run(connect_async("host=127.0.0.1 connect_timeout=abc"))
    from onetrip import make_pool  # a pool (onetrip serve) had retried it for ever
    with pytest.raises(InvalidDsnError, match="connect_timeout"):
        make_pool("host=127.0.0.1 connect_timeout=abc", open=False)
    # a blank $ONETRIP_DSN is unset (the embedded server), not libpq's defaults
    from onetrip.connection import resolve_dsn

    monkeypatch.setenv("ONETRIP_DSN", "  ")
    monkeypatch.setattr("onetrip.connection.embedded_dsn", lambda: "embedded")
    assert resolve_dsn() == "embedded"


@pytest.mark.parametrize("dsn", [
    "postgresql://u:hunter2@127.0.0.1:99999/db",
    "host=127.0.0.1 port=1 password=hunter2 sslmode=bogus",
    "host=127.0.0.1,127.0.0.2 port=1,2,3 password=hunter2",
    "host=127.0.0.1 port=abc password=hunter2",
])
def test_a_dsn_value_libpq_refuses_before_connecting_is_bad_input(dsn):
    """Found by review: port=99999 or sslmode=bogus (libpq refuses them before it tries a server) were
    ConnectionFailedError, the CLI's exit 1, as a server down; they are InvalidDsnError (exit 2), naming the value
    libpq refused, never the password. A server that does not answer stays ConnectionFailedError."""
    import asyncio

    from onetrip import InvalidDsnError
    from onetrip.connection import connect_async

    for attempt in (lambda: connect(dsn), lambda: asyncio.run(connect_async(dsn))):
        with pytest.raises(InvalidDsnError, match="the DSN has a value libpq refuses") as e:
            attempt()
        assert "hunter2" not in str(e.value) and e.value.__cause__ is None and e.value.__suppress_context__
    run = subprocess.run([sys.executable, "-m", "onetrip.cli", "documents", "--dsn", dsn],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "libpq refuses" in run.stderr and "hunter2" not in run.stderr, run.stderr
    with pytest.raises(ConnectionFailedError) as e:
        connect("host=127.0.0.1 port=1 connect_timeout=2")
    assert not isinstance(e.value, InvalidDsnError)


def test_every_password_keyword_is_redacted():
    from onetrip.connection import redact

    assert "hunter2" not in redact("host=h port=1 user=u password=hunter2 sslpassword=hunter2")
    with pytest.raises(ConnectionFailedError) as e:
        connect("host=127.0.0.1 port=1 sslpassword=hunter2 sslmode=disable connect_timeout=2")
    assert "hunter2" not in str(e.value)
    import asyncio

    from onetrip.connection import connect_async
    for dsn in ("host=127.0.0.1 port=1 user=u password=hunter2 connect_timeout=2",
                "postgresql://u:hunter2@127.0.0.1:1/x?connect_timeout=2"):  # the async twin says the same
        with pytest.raises(ConnectionFailedError, match=r"127\.0\.0\.1") as e:
            asyncio.run(connect_async(dsn))
        assert "hunter2" not in str(e.value), e.value


def test_a_refused_connection_is_one_line():
    """libpq adds its hint ("Is the server running ...") on a second line; the error keeps one."""
    with pytest.raises(ConnectionFailedError) as e:
        connect("host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert "\n" not in str(e.value) and "Is the server running" in str(e.value)


def test_the_dsns_own_connect_timeout_holds(dsn, monkeypatch):
    """Found by review: connect passed connect_timeout=5 as a keyword, which overrides the DSN's (and
    $PGCONNECT_TIMEOUT): a server slower than 5 s to answer could never be reached, and the error quoted
    the value it had ignored. Read back from the connection's own conninfo, sync, async and pooled."""
    import asyncio

    from onetrip import make_pool
    from onetrip.connection import connect_async

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)

    def used(conninfo: str) -> str:
        return dict(p.split("=", 1) for p in conninfo.split() if "=" in p)["connect_timeout"]

    with connect(f"{dsn} connect_timeout=17") as conn:
        assert used(conn.info.dsn) == "17"
    with connect(dsn) as conn:
        assert used(conn.info.dsn) == "5"  # none named: 5, not libpq's wait forever
    with connect(dsn, connect_timeout=3) as conn:
        assert used(conn.info.dsn) == "3"

    async def twin() -> str:
        conn = await connect_async(f"{dsn} connect_timeout=17")
        try:
            return used(conn.info.dsn)
        finally:
            await conn.close()

    assert asyncio.run(twin()) == "17"
    with make_pool(f"{dsn} connect_timeout=17", min_size=1, max_size=1) as pool, pool.connection() as conn:
        assert used(conn.info.dsn) == "17"
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "23")
    with connect(dsn) as conn:
        assert used(conn.info.dsn) == "23"


def test_longest_prefix_builds_every_object_and_one_more_is_refused(db):
    from onetrip.identifiers import MAX_PREFIX_LENGTH
    from onetrip.schema import init_schema

    prefix = ("p" * MAX_PREFIX_LENGTH)[:-1] + "_"
    init_schema(db, Layout(prefix=prefix, partitions=2))
    names = [r[0] for r in db.execute("SELECT relname FROM pg_class WHERE relname LIKE %s", (prefix + "%",))]
    assert f"{prefix}sections_embedding_hnsw" in names  # not truncated by PostgreSQL's 63-byte limit
    assert all(len(n) <= 63 for n in names)
    with pytest.raises(InvalidIdentifierError, match=f"the limit is {MAX_PREFIX_LENGTH}"):
        Layout(prefix="p" + prefix)


@pytest.mark.parametrize("word", ["left", "join", "verbose", "tablesample", "current_schema"])
def test_postgres_reserved_function_or_type_words_are_refused(word):
    """Reserved in PostgreSQL's grammar ("can be function or type name"): `CREATE SCHEMA left` is a
    syntax error, so an unquoted identifier must not be one of them."""
    with pytest.raises(InvalidIdentifierError, match="reserved"):
        Layout(schema=word)


@pytest.mark.parametrize("word", ["date", "update", "by", "exists", "integer", "privileges"])
def test_oracle_reserved_words_are_refused(word):
    """Reserved in Oracle (V$RESERVED_WORDS): the Oracle edition writes the schema bare (`FROM date.sections`
    had been rendered), so the name is refused for every edition, as PostgreSQL's reserved words are."""
    with pytest.raises(InvalidIdentifierError, match="reserved"):
        Layout(schema=word)


def test_a_schema_oracle_cannot_write_bare_has_no_oracle_edition(tmp_path):
    """`_kb` is a fine PostgreSQL name, but an unquoted Oracle name begins with a letter (`FROM _kb.sections`
    had been rendered): the Oracle edition is refused naming why; `--dialect all` renders the others."""
    from onetrip.editions import render_edition

    assert "FROM _kb.sections s" in render_edition("postgres", Layout(schema="_kb"))["retrieve.sql"]
    with pytest.raises(InvalidIdentifierError, match="schema name '_kb' cannot be written bare in Oracle"):
        render_edition("oracle", Layout(schema="_kb"))
    assert "FROM kb.sections s" in render_edition("oracle", Layout(schema="kb"))["retrieve.sql"]
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "sql", "render", "--out", str(tmp_path),
                          "--schema", "_kb"], capture_output=True, text=True)
    assert res.returncode == 0 and "no Oracle edition for schema '_kb'" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["citus", "postgres"]


def test_the_public_schema_can_be_named_and_has_no_oracle_edition(db, tmp_path):
    """Found by review: `--schema public`, PostgreSQL's default schema (where default tables are), was refused as
    a reserved SQL word; it is reserved in Oracle only."""
    from onetrip.editions import render_edition
    from onetrip.schema import init_schema

    layout = init_schema(db, Layout(schema="public", prefix="pub_"))
    assert db.execute("SELECT to_regclass('public.pub_sections')").fetchone()[0] == "pub_sections"
    assert "FROM public.sections s" in render_edition("postgres", Layout(schema="public"))["retrieve.sql"]
    with pytest.raises(InvalidIdentifierError, match="schema name 'public' is a reserved word in Oracle"):
        render_edition("oracle", Layout(schema="public"))
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "sql", "render", "--out", str(tmp_path),
                          "--schema", "public"], capture_output=True, text=True)
    assert res.returncode == 0 and "no Oracle edition for schema 'public'" in res.stderr, res.stderr
    assert layout.schema == "public"


@pytest.mark.parametrize("schema,dialect", [("describe", "postgres"), ("qualify", "postgres"),
                                            ("systimestamp", "oracle")])
def test_a_schema_sqlglot_reads_as_a_keyword_is_named_when_rendering(tmp_path, schema, dialect):
    """PostgreSQL takes these schema names (onetrip runs on them), but sqlglot, which checks every rendered
    statement, reads them as keywords: `sql render` had failed with a parse error naming neither."""
    from onetrip.editions import render_edition

    with pytest.raises(InvalidIdentifierError, match=f"schema name '{schema}' is a keyword to sqlglot"):
        render_edition(dialect, Layout(schema=schema))
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "sql", "render", "--out", str(tmp_path),
                          "--schema", schema, "--dialect", dialect], capture_output=True, text=True)
    assert res.returncode == 2 and f"schema name '{schema}' is a keyword to sqlglot" in res.stderr, res.stderr
    assert not list(tmp_path.iterdir())
    if dialect == "postgres":  # every edition fails: the error alone, no note that the Oracle one is skipped
        res = subprocess.run([sys.executable, "-m", "onetrip.cli", "sql", "render", "--out", str(tmp_path),
                              "--schema", schema, "--dialect", "all"], capture_output=True, text=True)
        assert res.returncode == 2 and res.stderr.startswith(f"onetrip: error: schema name '{schema}'"), res.stderr
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dim", ["384", None, [384], 384.0, True])
def test_a_dimension_that_is_not_an_integer_is_named(dim):
    with pytest.raises(ValueError, match="embedding dimension must be an integer"):
        Layout(dim=dim)


def test_quote_ident_quotes_every_word_postgresql_would_and_the_result_is_usable_sql(db):
    """quote_ident is the last line of defence (validate_identifier refuses reserved words first): on its own it
    still quotes every name PostgreSQL's quote_ident() quotes, and whatever it returns works as an identifier."""
    from onetrip.identifiers import _RESERVED

    words = sorted(_RESERVED) + ["tenant_42", "_x", "sections", "a1"]
    theirs = dict(zip(words, db.execute("SELECT quote_ident(w) FROM unnest(%s::text[]) w", (words,)).fetchall()))
    quoted_by_postgres = [w for w in words if theirs[w][0] != w]
    assert {"select", "table", "order", "user"} <= set(quoted_by_postgres)  # the check below is not vacuous
    for w in quoted_by_postgres:
        assert quote_ident(w) == theirs[w][0] == f'"{w}"', w
    for w in words:  # every name, as onetrip emits it, is a column alias PostgreSQL accepts and reads back
        row = db.execute(f"SELECT 1 AS {quote_ident(w)}")
        assert row.description[0].name == w and row.fetchone() == (1,), w
    assert quote_ident("tenant_42") == "tenant_42"  # bare when safe, as hand-written SQL
    # a double quote inside is doubled, as PostgreSQL's quote_ident() does (no validated name holds one, so
    # only this checks it: a mutation review found that dropping the doubling passed every test)
    odd = 'a"b; DROP TABLE x; --'
    assert quote_ident(odd) == db.execute("SELECT quote_ident(%s)", (odd,)).fetchone()[0] == '"a""b; DROP TABLE x; --"'
    row = db.execute(f"SELECT 1 AS {quote_ident(odd)}")
    assert row.description[0].name == odd and row.fetchone() == (1,)


def test_a_schema_name_postgresql_reserves_for_system_schemas_is_refused_before_anything_is_sent(db, dsn,
                                                                                                 statement_log):
    """`onetrip init --schema pg_foo` had passed the check and the server refused it (ReservedName, exit 1):
    CREATE SCHEMA reserves the prefix pg_ (case-sensitively; upper case is refused here anyway)."""
    from onetrip.schema import init_schema

    for name in ("pg_foo", "pg_", "pg_catalog", "pg_temp"):
        with pytest.raises(InvalidIdentifierError, match=f"schema name '{name}' is not allowed: PostgreSQL reserves "
                                                         "names starting with 'pg_' for system schemas"):
            Layout(schema=name)
    with pytest.raises(InvalidIdentifierError, match="schema name 'PG_foo' is not allowed: use lower-case"):
        Layout(schema="PG_foo")
    with statement_log.watch(db) as w, pytest.raises(InvalidIdentifierError, match="'pg_foo'"):
        Retriever(db, schema="pg_foo")
    assert w.statements == []
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "init", "--schema", "pg_foo", "--dsn", dsn],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "onetrip: error: schema name 'pg_foo' is not allowed" in res.stderr, res.stderr
    assert db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pg_foo'").fetchone()[0] == 0
    # only schemas, and only that prefix: names PostgreSQL takes stay valid
    for name in ("pgfoo", "pg", "_pg_foo", "kb_pg_", "information_schema"):
        assert Layout(schema=name).schema == name
    init_schema(db, Layout(schema="pgx_kb"))
    assert Layout(prefix="pg_").prefix == "pg_"
    init_schema(db, Layout(prefix="pg_"))
    assert db.execute("SELECT to_regclass('pgx_kb.sections'), to_regclass('pg_sections')").fetchone() == \
        ("pgx_kb.sections", "pg_sections")


def test_a_dsn_that_is_not_a_string_is_a_type_error_naming_its_type(monkeypatch):
    """connect(5) had said 'the DSN given is empty (5: an unset variable?)'."""
    import asyncio

    from onetrip import InvalidDsnError, make_pool, resolve_dsn
    from onetrip.connection import connect_async

    monkeypatch.setenv("ONETRIP_DSN", "host=127.0.0.1 port=1")
    for value, kind in ((5, "int"), (b"host=x", "bytes"), (0, "int"), (False, "bool"), (["x"], "list")):
        for call in (resolve_dsn, connect, lambda d: asyncio.run(connect_async(d)),
                     lambda d: make_pool(d, open=False)):
            with pytest.raises(TypeError, match=rf"^the DSN must be a string \(str\), got {kind}:") as e:
                call(value)
            assert not isinstance(e.value, InvalidDsnError) and "empty" not in str(e.value)
    for blank in ("", "  "):  # a blank string keeps its own message
        with pytest.raises(InvalidDsnError, match="the DSN given is empty"):
            resolve_dsn(blank)
