"""The statement counter itself must count, or every 'one statement' test is void."""


def test_counter_sees_each_statement(db, statement_log):
    with statement_log.watch(db) as w:
        db.execute("SELECT 1")
        db.execute("SELECT %s::int", (2,))
        db.execute("SELECT 3; SELECT 4")  # one simple-protocol message, logged once
    assert len(w.statements) == 3
    assert w.statements[1].startswith("SELECT $1::int")


def test_counter_ignores_other_backends(db, dsn, statement_log):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as other:
        with statement_log.watch(db) as w:
            other.execute("SELECT 1")
            db.execute("SELECT 2")
    assert w.statements == ["SELECT 2"]
