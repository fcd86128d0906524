"""Connection pools (psycopg_pool) whose connections are ready for one-statement retrieval.

Each new pooled connection is configured ONCE by the pool's ``configure``
hook: autocommit on (so a search is one statement, no BEGIN), pgvector's
adapters registered, and the session's pgvector settings (ef_search,
iterative scans) applied. Queries then pay no extra round trip for them.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import psycopg_pool

from .connection import _connect_error, _one_line, resolve_dsn, timeout_kwargs
from .errors import ConnectionFailedError
from .retrieve import POOL_SETTINGS, apply_settings, session_settings


#: The attribute `make_pool` / `make_async_pool` keep their `Opened` record under (the HTTP service tells down
#: from busy by its count; the pools name its failure in their PoolTimeout).
POOL_OPENED = "onetrip_opened"


@dataclass
class Opened:
    """The connections a pool has opened, each counted once configured, and why its last attempt failed.

    psycopg_pool's get_stats counts an attempt when it starts (connections_num)
    and its failure when it ends (connections_errors): attempts minus failures
    take one under way for one opened. psycopg_pool only logs why an attempt
    failed; this keeps it (libpq's reason, or the setup's: no pgvector, a refused
    setting) for the pool's PoolTimeout (`unreachable`). Attempts are numbered
    as they start, so one that started before a success and failed after it (a
    connect that waited out its connect_timeout meanwhile) does not name a pool
    that connects again as unreachable.
    """

    count: int = 0
    failure: str | None = None
    failed_attempt: int = 0  # the latest-started attempt that failed: ``failure`` is its reason
    opened_attempt: int = 0  # the latest-started attempt that opened a connection
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def started(self) -> int:
        """A number for an attempt starting now."""
        with self._lock:
            return next(self._numbers)

    def failed(self, attempt: int, why: str) -> None:
        with self._lock:
            if attempt > self.failed_attempt:
                self.failed_attempt, self.failure = attempt, why

    def succeeded(self, attempt: int) -> None:
        with self._lock:
            self.count += 1
            self.opened_attempt = max(self.opened_attempt, attempt)

    def unreachable(self) -> str | None:
        """Why no connection could be had, or None: the pool has opened connections since its last failure."""
        with self._lock:
            if self.failed_attempt > self.opened_attempt:
                return f"the pool could not open a connection: {self.failure}"
            if self.count == 0:  # nothing opened, none failed yet: it cannot be busy
                return ("the pool has not opened a connection yet and its first attempt has not ended (the server is "
                        "slow to answer, or does not answer: libpq waits for it up to connect_timeout)")
            return None


class PoolUnreachableError(ConnectionFailedError, psycopg_pool.PoolTimeout):
    """No pooled connection within the pool's timeout, and the pool's last attempt to open one failed (or its
    first one has not ended): the message names why (the server refused or did not answer, no pgvector, ...).

    Also a ``psycopg_pool.PoolTimeout``, which is what callers caught before. psycopg_pool's own said only
    "couldn't get a connection after 10.00 sec", for a DSN that does not answer as for a busy pool; its
    reason was in a log line. A pool whose connections are all busy still raises the plain PoolTimeout.
    """

    def __init__(self, *args: Any) -> None:
        # psycopg.Error's own set-up (diag, pgconn, pgresult), which OSError's, first in the bases, skips
        psycopg_pool.PoolTimeout.__init__(self, *args)


def _named(e: psycopg_pool.PoolTimeout, opened: Opened | None) -> psycopg_pool.PoolTimeout:
    """``e`` with the reason the pool could not connect, when it could not."""
    why = None if opened is None else opened.unreachable()
    return e if why is None else PoolUnreachableError(f"{e}: {why}")


def _failure(e: BaseException, conninfo: str) -> str:
    """A failed connect's reason, the DSN's password not shown (as `connect`'s errors)."""
    if isinstance(e, (psycopg.OperationalError, psycopg.ProgrammingError)):
        return str(_connect_error(e, conninfo))
    return f"{type(e).__name__}: {_one_line(e)}"


def _setup_failure(e: BaseException) -> str:
    """Why ``configure`` failed on a connection the server accepted."""
    message = _one_line(e)
    if "vector type not found" in message:  # pgvector-python's register_vector
        return ("the vector extension is not created in this database: run `onetrip init` (or CREATE EXTENSION "
                "vector), or connect to the database the sections are in")
    return f"it connected, then setting the connection up failed: {type(e).__name__}: {message}"


#: the attribute a pooled connection keeps its attempt's number under, for ``configure`` to report on
_ATTEMPT = "_onetrip_attempt"


@contextmanager
def _attempt(opened: Opened, conninfo: str) -> Iterator[Callable[[Any], Any]]:
    """One connection attempt of a pool, numbered: its failure recorded in ``opened``, its connection marked
    with its number (for ``configure`` to report on) by the function this yields."""
    attempt = opened.started()

    def numbered(conn: Any) -> Any:
        setattr(conn, _ATTEMPT, attempt)
        return conn

    try:
        yield numbered
    except Exception as e:
        opened.failed(attempt, _failure(e, conninfo))
        raise


@contextmanager
def _setting_up(opened: Opened, conn: Any) -> Iterator[None]:
    """A pool's ``configure`` of a new connection: its failure recorded in ``opened``, else the connection
    counted as opened (under the number `_attempt` gave it)."""
    attempt = getattr(conn, _ATTEMPT, 0)
    try:
        yield
    except Exception as e:
        opened.failed(attempt, _setup_failure(e))
        raise
    opened.succeeded(attempt)


def _recording(base: type[Any], opened: Opened) -> type[Any]:
    """``base`` (psycopg's Connection, or the caller's ``connection_class``) with a connect() that records its
    failure in ``opened``: the pool calls it, catches the error and only logs it."""

    class Recording(base):  # type: ignore[misc, valid-type]
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            if not _records(cls, Recording):
                return super().connect(conninfo, **kwargs)
            with _attempt(opened, conninfo) as numbered:
                return numbered(super().connect(conninfo, **kwargs))

    return _named_as(Recording, base)


def _recording_async(base: type[Any], opened: Opened) -> type[Any]:
    """`_recording` for an AsyncConnection class."""

    class Recording(base):  # type: ignore[misc, valid-type]
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            if not _records(cls, Recording):
                return await super().connect(conninfo, **kwargs)
            with _attempt(opened, conninfo) as numbered:
                return numbered(await super().connect(conninfo, **kwargs))

    return _named_as(Recording, base)


def _named_as(cls: type[Any], base: type[Any]) -> type[Any]:
    """``cls`` under ``base``'s names, so that its connections' reprs stay psycopg's (or the caller's)."""
    cls.__name__, cls.__qualname__, cls.__module__ = base.__name__, base.__qualname__, base.__module__
    setattr(cls, _RECORDED, base)
    return cls


#: the attribute a recording class keeps the class it wraps under
_RECORDED = "_onetrip_recorded"


def _records(cls: type[Any], recording: type[Any]) -> bool:
    """Whether ``recording`` is the recording class nearest ``cls`` (the one its pool made): another onetrip
    pool's ``connection_class``, given to a new pool or subclassed for it, is inside the new pool's, and had
    recorded the new pool's attempts in the other pool's record too (found by review)."""
    return next(c for c in cls.__mro__ if _RECORDED in c.__dict__) is recording


class ConnectionPool(psycopg_pool.ConnectionPool):  # type: ignore[type-arg]
    """psycopg_pool's pool whose PoolTimeout names why it could not connect (`PoolUnreachableError`)."""

    def getconn(self, timeout: float | None = None) -> Any:
        try:
            return super().getconn(timeout)
        except psycopg_pool.PoolTimeout as e:
            raise _named(e, getattr(self, POOL_OPENED, None)) from None

    def wait(self, timeout: float = 30.0) -> None:
        try:
            super().wait(timeout)
        except psycopg_pool.PoolTimeout as e:
            raise _named(e, getattr(self, POOL_OPENED, None)) from None


class AsyncConnectionPool(psycopg_pool.AsyncConnectionPool):  # type: ignore[type-arg]
    """`ConnectionPool`'s asyncio twin."""

    async def getconn(self, timeout: float | None = None) -> Any:
        try:
            return await super().getconn(timeout)
        except psycopg_pool.PoolTimeout as e:
            raise _named(e, getattr(self, POOL_OPENED, None)) from None

    async def wait(self, timeout: float = 30.0) -> None:
        try:
            await super().wait(timeout)
        except psycopg_pool.PoolTimeout as e:
            raise _named(e, getattr(self, POOL_OPENED, None)) from None


def statement_timeout_setting(seconds: float | None) -> dict[str, str]:
    """PostgreSQL's statement_timeout for the pool's sessions, set with the pgvector settings (no extra statement)."""
    if seconds is None:
        return {}
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 2**31 / 1000:
        raise ValueError(f"statement_timeout must be a positive number of seconds (None: no limit), got {seconds!r}")
    return {"statement_timeout": f"{max(1, round(seconds * 1000))}ms"}


#: psycopg_pool's own options a caller may add (they go to the pool; the others are onetrip's to set)
POOL_OPTIONS = frozenset({"check", "reset", "name", "close_returns", "max_waiting", "max_lifetime", "max_idle",
                          "reconnect_timeout", "reconnect_failed", "num_workers", "connection_class"})
#: psycopg's connect() options besides libpq's connection parameters
#: row_factory / cursor_factory are not among them: a retriever reads rows as tuples by position, through
#: its own cursors (a dict_row pool had failed in every Retriever with an unnamed unpacking error)
_CONNECT_OPTIONS = frozenset({"prepare_threshold", "context"})


def split_options(kwargs: dict[str, Any], maker: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A maker's extra keywords as (pool options, connection options); TypeError naming any that is neither.

    Why: every extra keyword had gone to each new connection, so a pool option (``max_idle=60``) made every
    connection fail and the pool time out opening, with a PoolTimeout that did not name the keyword.
    """
    from psycopg import pq

    libpq = {o.keyword.decode() for o in pq.Conninfo.get_defaults()}
    pool = {k: v for k, v in kwargs.items() if k in POOL_OPTIONS}
    conn = {k: v for k, v in kwargs.items() if k in libpq or k in _CONNECT_OPTIONS}
    unknown = [k for k in kwargs if k not in pool and k not in conn]
    if unknown:
        raise TypeError(
            f"{maker}() got {', '.join(map(repr, unknown))}: neither one of its own options, a psycopg_pool option "
            f"({', '.join(sorted(POOL_OPTIONS))}) nor a connection parameter (libpq's, or {', '.join(sorted(_CONNECT_OPTIONS))})"
        )
    return pool, conn


def make_pool(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    ef_search: int | None = None,
    iterative_scan: str | None = "relaxed_order",
    max_scan_tuples: int | None = 20000,
    statement_timeout: float | None = None,
    timeout: float = 10.0,
    open: bool = True,
    **kwargs: Any,
) -> Any:
    """A `psycopg_pool.ConnectionPool` for `Retriever(pool)`, whose PoolTimeout is `PoolUnreachableError`,
    naming why, when the pool could not open a connection (psycopg_pool's only logs it).

    ``statement_timeout`` (seconds) has the server cancel a statement that runs
    longer (psycopg raises ``QueryCanceled``), so that a search blocked by a lock
    gives its connection back instead of pinning it: a service's choice. Other
    keywords: psycopg_pool's options (`POOL_OPTIONS`: ``max_idle``, ``name``, ...)
    go to the pool, connection parameters (``application_name``, ``sslmode``,
    ``prepare_threshold``, ...) to each connection; anything else is a TypeError.
    """
    pool_options, conn_options = split_options(kwargs, "make_pool")
    from .psycopg_adapters import register_adapters

    settings = session_settings(ef_search, iterative_scan, max_scan_tuples) | statement_timeout_setting(statement_timeout)
    opened = Opened()

    def configure(conn: psycopg.Connection) -> None:
        with _setting_up(opened, conn):
            conn.autocommit = True
            register_adapters(conn)
            apply_settings(conn, settings)

    target = resolve_dsn(dsn)
    pool_options["connection_class"] = _recording(pool_options.get("connection_class", psycopg.Connection), opened)
    pool = ConnectionPool(
        target, min_size=min_size, max_size=max_size, timeout=timeout, open=False,
        configure=configure, kwargs={**timeout_kwargs(target), **conn_options}, **pool_options,
    )
    setattr(pool, POOL_SETTINGS, settings)  # what a Retriever over it reports (retrieve.settings_of_pool)
    setattr(pool, POOL_OPENED, opened)
    if open:
        pool.open()
    return pool


def make_async_pool(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    ef_search: int | None = None,
    iterative_scan: str | None = "relaxed_order",
    max_scan_tuples: int | None = 20000,
    statement_timeout: float | None = None,
    timeout: float = 10.0,
    **kwargs: Any,
) -> Any:
    """A `psycopg_pool.AsyncConnectionPool` for ``await AsyncRetriever.create(pool)``; open it first with
    ``await pool.open()``. ``statement_timeout`` and other keywords as in `make_pool`."""
    if "open" in kwargs:
        raise TypeError("make_async_pool() makes the pool closed (it has no open=): open it with await pool.open()")
    pool_options, conn_options = split_options(kwargs, "make_async_pool")
    from .psycopg_adapters import register_adapters_async

    settings = session_settings(ef_search, iterative_scan, max_scan_tuples) | statement_timeout_setting(statement_timeout)

    from .async_retrieve import apply_settings_async

    opened = Opened()

    async def configure(conn: psycopg.AsyncConnection) -> None:
        with _setting_up(opened, conn):
            await conn.set_autocommit(True)
            await register_adapters_async(conn)
            await apply_settings_async(conn, settings)

    target = resolve_dsn(dsn)
    pool_options["connection_class"] = _recording_async(
        pool_options.get("connection_class", psycopg.AsyncConnection), opened)
    pool = AsyncConnectionPool(
        target, min_size=min_size, max_size=max_size, timeout=timeout, open=False,
        configure=configure, kwargs={**timeout_kwargs(target), **conn_options}, **pool_options,
    )
    setattr(pool, POOL_SETTINGS, settings)
    setattr(pool, POOL_OPENED, opened)
    return pool
