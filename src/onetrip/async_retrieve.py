"""`AsyncRetriever`: the same surface and results as `Retriever`, on asyncio.

Plans, SQL and row mapping are shared with the sync retriever
(`onetrip.retrieve.plan_search` / `plan_assemble` / `result_of`); only the I/O
differs. The query embedding is computed once per call, in a worker thread so
the event loop keeps running, and before a connection is taken from the pool
(never inside a transaction).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, nullcontext, suppress
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import pq

from .connection import check_row_factory, connect_async
from .context import Context
from .embedders import Embedder, SentenceTransformerEmbedder, as_vector, check_embedder_object
from .errors import ConnectionLostError
from .retrieve import (
    CANCEL_RECHECK,
    CANCEL_TIMEOUT,
    DEFAULT_ITERATIVE_SCAN,
    DEFAULT_MAX_SCAN_TUPLES,
    Hit,
    IN_SNAPSHOT,
    POOL_CHECK_DEADLINE,
    Plan,
    SEARCH_K,
    _split_search_kwargs,
    asked_settings,
    bind_vector,
    check_connection_kind,
    check_distance_range,
    check_model,
    check_no_transaction,
    check_query_text,
    connection_lost,
    statement_errors,
    plan_assemble,
    plan_search,
    result_of,
    statement_columns,
    session_settings,
    settings_of_pool,
    settings_statement,
)
from .schema import layout_from_row, layout_query
from .store import RECORD_KEYS, TABLE_READABLE, record_of_row, recorded_embedders_query
from .layout import Layout

if TYPE_CHECKING:
    from .explain import Explained


async def apply_settings_async(conn: psycopg.AsyncConnection, settings: dict[str, str]) -> None:
    """Async `onetrip.retrieve.apply_settings`: once per connection, one statement."""
    if settings:
        await conn.execute(*settings_statement(settings))


async def read_layout_async(conn: psycopg.AsyncConnection, schema: str | None, prefix: str) -> Layout:
    """`schema.read_layout` on asyncio: one catalog read, a clear error when the tables are not (onetrip's)."""
    cur = await conn.execute(*layout_query(schema, prefix))
    return layout_from_row(await cur.fetchone(), schema, prefix)


async def _recorded_record(conn: psycopg.AsyncConnection, layout: Layout) -> tuple[list[str], Any]:
    """`store.recorded_record`, on asyncio."""
    cur = await conn.execute(TABLE_READABLE, (layout.tables["documents"],))
    readable = await cur.fetchone()
    if not (readable and readable[0]):
        return [], None
    cur = await conn.execute(recorded_embedders_query(layout), RECORD_KEYS)
    return record_of_row(await cur.fetchone())


async def _take_connection(conn: psycopg.AsyncConnection) -> bool:
    """`retrieve.take_connection` for an async connection: its lock, the call another task has under way on
    it cancelled until it has ended, CANCEL_TIMEOUT at most; True when taken (release it after the close).

    Each wait for the lock is timed, whether or not it looks free: an asyncio.Lock just released to a waiting
    task reads unlocked until that task runs, and an untimed acquire then queued behind it, sent no cancel,
    and waited for its whole statement (a review: 20 s, where CANCEL_TIMEOUT is 5)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CANCEL_TIMEOUT
    while True:
        if conn.lock.locked():
            try:
                await conn.cancel_safe(timeout=max(deadline - loop.time(), 0.1))
            except psycopg.Error:  # the close goes on, as in Retriever.close
                return False
        try:
            await asyncio.wait_for(conn.lock.acquire(), min(CANCEL_RECHECK, max(deadline - loop.time(), 0.0)))
        except asyncio.TimeoutError:
            if loop.time() >= deadline:
                return False
        else:
            return True


#: The (retriever, connection) of the `AsyncRetriever.snapshot` block this task runs in, if any.
_SNAPSHOT: ContextVar[tuple[Any, Any, psycopg.AsyncConnection] | None] = ContextVar("onetrip_snapshot",
                                                                                      default=None)


_NO_LOCK = nullcontext()  # `AsyncRetriever.snapshot` over a pool: each block has a connection of its own


async def _end_snapshot(conn: psycopg.AsyncConnection, failed: bool) -> None:
    """As `retrieve.end_snapshot`: COMMIT, or after an error a ROLLBACK whose own error does not hide it."""
    if not failed:
        await conn.execute("COMMIT")
    elif conn.info.transaction_status != pq.TransactionStatus.IDLE:  # in it, or busy with another call on it
        with suppress(Exception):  # a connection of its own must not stay in this transaction
            await conn.execute("ROLLBACK")


class AsyncRetriever:
    """Async twin of `Retriever`. Create it with ``await AsyncRetriever.create(...)``.

    ``conn`` is a psycopg AsyncConnection, a ``psycopg_pool.AsyncConnectionPool``
    (see `onetrip.pool.make_async_pool`), a DSN, or None. A lost connection is
    handled as `Retriever` does: that call raises ConnectionLostError; one made
    from a DSN is reopened on the next call, a given one stays the caller's.
    """

    def __init__(self) -> None:
        raise TypeError("use `await AsyncRetriever.create(...)`")

    @classmethod
    async def create(
        cls,
        conn: Any = None,
        *,
        schema: str | None = None,
        prefix: str = "",
        embedder: Embedder | None = None,
        ef_search: int | None = None,
        iterative_scan: str | None = DEFAULT_ITERATIVE_SCAN,
        max_scan_tuples: int | None = DEFAULT_MAX_SCAN_TUPLES,
    ) -> AsyncRetriever:
        from psycopg_pool import AsyncConnectionPool

        from .psycopg_adapters import register_adapters_async

        layout_query(schema, prefix)  # an invalid or hostile name is refused before anything is sent
        check_embedder_object(embedder)
        self = object.__new__(cls)
        self.settings = session_settings(ef_search, iterative_scan, max_scan_tuples)
        self.pool = conn if isinstance(conn, AsyncConnectionPool) else None
        if self.pool is not None:
            self.settings = settings_of_pool(self.pool, asked_settings(ef_search, iterative_scan, max_scan_tuples))
        elif not isinstance(conn, psycopg.AsyncConnection):
            check_connection_kind(conn, asynchronous=True)
        check_row_factory(conn)
        self._owns_conn = self.pool is None and not isinstance(conn, psycopg.AsyncConnection)
        self._dsn = conn if self._owns_conn else None  # what a lost connection is reopened from (`_reopen`)
        self._closed = False
        self._reopening = asyncio.Lock()  # one new connection, however many tasks found the old one lost
        self._snapshot_lock = asyncio.Lock()  # `snapshot` over one connection: its blocks and their BEGIN
        # pool checks still running past their deadline (`_lost`), and snapshot ends and pooled connections' returns
        # whose caller was cancelled (`_shielded`)
        self._checks: set[asyncio.Future[None]] = set()
        self.conn = None
        opened = False  # as in Retriever: a transaction this opened on the caller's connection is ended here
        if self.pool is None:
            self.conn = await connect_async(conn) if self._owns_conn else conn
            opened = not self.conn.autocommit and self.conn.info.transaction_status == pq.TransactionStatus.IDLE
        self._embedder = embedder
        try:
            if self.conn is not None:
                if not self._owns_conn:  # as in Retriever: `connect_async` registered them (a cancellation of
                    # the second registration, outside this try, left the new connection open)
                    await register_adapters_async(self.conn)
                await apply_settings_async(self.conn, self.settings)
            async with self._connection() as c:
                self.layout = await read_layout_async(c, schema, prefix)
                self.recorded_embedders, self.recorded_probe = await _recorded_record(c, self.layout)
        except BaseException:
            if self._owns_conn:
                if self.conn is not None:  # None: lost under the layout read (`_lost` closed it)
                    await self.conn.close()
            elif opened:
                await self.conn.rollback()
            raise
        if opened:
            await self.conn.commit()
        self._embedder_checked = False
        self._probe: list[float] | None | bool = False  # as Retriever's
        return self

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncRetriever]:
        """Run this task's calls inside the block on one connection, in one REPEATABLE READ, read-only
        transaction: they read one state of the tables (BEGIN and COMMIT cost a round trip each).

        For a caller that needs two result shapes (hits and an assembled context: two statements) to agree:
        taken from two states, a re-ingest committed between them had given new hits and an old context
        (the HTTP service's /search asking both, found by review). Over a pool, other tasks' calls (a task
        started inside the block too) take connections of their own. Over one connection they share it, and
        so its snapshot: a block another task opens meanwhile joins the open one, and the last block to end
        commits (as `Retriever.snapshot`).
        """
        if self._pinned() is not None:  # nested: the outer block's snapshot
            yield self
            return
        async with self._connection() as conn:
            # over one connection, the count of its blocks and their BEGIN, one task at a time (a block joining
            # while the first one's BEGIN was on its way had read outside the transaction)
            async with (self._snapshot_lock if self.pool is None else _NO_LOCK):
                blocks = IN_SNAPSHOT.get(conn, 0)
                if not blocks:
                    check_no_transaction(conn)
                    try:
                        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    except BaseException:  # a cancellation too: psycopg ends the BEGIN before it raises
                        await _end_snapshot(conn, failed=True)
                        raise
                IN_SNAPSHOT[conn] = blocks + 1
            token = _SNAPSHOT.set((self, asyncio.current_task(), conn))
            failed = True
            try:
                yield self
                failed = False
            finally:
                _SNAPSHOT.reset(token)
                # shielded, and begun before any await: a cancellation while the COMMIT waited for the connection
                # (another task's statement on it) had left the transaction open for good, every later call
                # reading it (found by review); the task that ends it is held until it has
                end = asyncio.ensure_future(self._leave_snapshot(conn, failed))
                self._checks.add(end)
                end.add_done_callback(self._checks.discard)
                await asyncio.shield(end)

    async def _leave_snapshot(self, conn: psycopg.AsyncConnection, failed: bool) -> None:
        """One block fewer on ``conn``; the last one commits. Under the lock the BEGIN takes (over one
        connection), as `Retriever.snapshot` does: with the count dropped before the COMMIT was sent, a block
        another task opened meanwhile sent its BEGIN first, and this COMMIT ended the transaction that block
        read in; its calls ran outside any snapshot, and its own COMMIT found none (found by review)."""
        async with (self._snapshot_lock if self.pool is None else _NO_LOCK):
            left = IN_SNAPSHOT.pop(conn, 1) - 1
            if left:
                IN_SNAPSHOT[conn] = left
            else:
                await _end_snapshot(conn, failed)

    def _pinned(self) -> psycopg.AsyncConnection | None:
        """The connection of this retriever's `snapshot` block that this task runs in. A task started inside the
        block inherits the context variable, not the block: it takes a connection of its own (a pooled one
        pinned to it could have been used after the block gave it back)."""
        pinned = _SNAPSHOT.get()
        if pinned is not None and pinned[0] is self and pinned[1] is asyncio.current_task():
            return pinned[2]
        return None

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """As `Retriever._connection`: a connection lost under the block is ConnectionLostError (`_lost`);
        inside `snapshot`, its connection."""
        pinned = self._pinned()
        if pinned is not None:  # lost under a call in the block: ConnectionLostError too, as `Retriever`'s (it
            async with self._lost_errors(pinned):  # had been psycopg's error, the dead connection kept a call more)
                yield pinned
            return
        if self.pool is not None:
            taken = self.pool.connection()
            c = await taken.__aenter__()
            try:
                async with self._lost_errors(c):
                    yield c
            except BaseException as e:
                await self._shielded(taken.__aexit__(type(e), e, e.__traceback__))
                raise
            else:
                await self._shielded(taken.__aexit__(None, None, None))
        else:
            c = self.conn if self.conn is not None else await self._reopen()
            async with self._lost_errors(c):
                yield c

    async def _shielded(self, ending: Any) -> None:
        """Run ``ending`` (a pooled connection's return) to its end whatever cancels the caller, held here until
        done: psycopg_pool's putconn cancelled while it waited for the pool's lock neither put the connection back
        nor counted it gone, and callers cancelled under load (asyncio.wait_for, an HTTP client that left) took
        every connection of a pool this way, each later call a PoolTimeout (found by review)."""
        end = asyncio.ensure_future(ending)
        self._checks.add(end)
        end.add_done_callback(self._checks.discard)
        await asyncio.shield(end)

    async def _reopen(self) -> psycopg.AsyncConnection:
        """As `Retriever._reopen`: a new connection of this retriever's own, for the one `_lost` dropped, with
        the first one's setup (`connect_async`: autocommit, pgvector's adapters; then this retriever's settings)."""
        async with self._reopening:
            if self.conn is None:
                if self._closed:
                    raise psycopg.OperationalError("the connection is closed (AsyncRetriever.close() was called)")
                conn = await connect_async(self._dsn)
                try:
                    await apply_settings_async(conn, self.settings)
                    if self._closed:  # close() ran while this connected (it found no connection to close)
                        raise psycopg.OperationalError("the connection is closed (AsyncRetriever.close() was called)")
                except BaseException:
                    await conn.close()
                    raise
                self.conn = conn
            return self.conn

    @asynccontextmanager
    async def _lost_errors(self, conn: psycopg.AsyncConnection) -> AsyncIterator[None]:
        """psycopg's error on ``conn`` broken under the block as ConnectionLostError (`_lost`: the pool checked)."""
        try:
            yield
        except psycopg.OperationalError as e:
            if not conn.broken:
                raise
            raise await self._lost(e, conn) from None

    async def refresh_embedder_record(self, conn: psycopg.AsyncConnection | None = None) -> list[str]:
        """Same as `Retriever.refresh_embedder_record`."""
        if conn is None:
            async with self._connection() as c:
                return await self.refresh_embedder_record(c)
        async with self._lost_errors(conn):  # the HTTP service's /health: the pool's idle connections checked too
            self.recorded_embedders, self.recorded_probe = await _recorded_record(conn, self.layout)
        self._embedder_checked = False
        return self.recorded_embedders

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = SentenceTransformerEmbedder()
        if not self._embedder_checked:  # as `Retriever.embedder` (its probe: one embedding, once per retriever)
            self._embedder_checked = check_model(self, self._embedder)
        return self._embedder

    async def query_vector(self, query: str | Sequence[float] | np.ndarray) -> np.ndarray:
        """Same as `Retriever.query_vector`; a text is embedded in a worker thread."""
        if isinstance(query, str):
            check_query_text(query)
            return as_vector(await asyncio.to_thread(lambda: self.embedder.embed_query(query)), self.layout.dim)
        return as_vector(query, self.layout.dim)

    async def run(self, plan: Plan) -> Any:
        """Embed in a worker thread (once, outside any transaction), then send ONE statement."""
        vector = None
        if plan.embed is not None:
            vector = await asyncio.to_thread(lambda: self.embedder.embed_query(plan.embed))  # the check too
        return await self._execute(plan, bind_vector(plan, vector, self.layout.dim))

    async def _execute(self, plan: Plan, params: dict[str, Any]) -> Any:
        """Send the plan's ONE statement with these binds; map its rows."""
        async with self._connection() as c:  # a lost connection: ConnectionLostError (`_connection`)
            async with c.cursor() as cur:
                with statement_errors(c):
                    await cur.execute(plan.statement, params, binary=True)  # as retrieve._fetch
                rows = await cur.fetchall()
                names = statement_columns(plan.statement, cur)
        return check_distance_range(plan, params, result_of(plan, names, rows))

    async def _lost(self, e: psycopg.Error, conn: psycopg.AsyncConnection) -> ConnectionLostError:
        """The error for a statement whose connection closed under it; over a pool, its idle connections are
        checked first (as `Retriever` does), shielded: a check cancelled halfway would lose the ones it held.
        This retriever's own connection is dropped, so the next call opens another (as `Retriever._forget`)."""
        if self.pool is not None:  # waited for POOL_CHECK_DEADLINE at most, as `check_pool`: a hung idle one
            check = asyncio.ensure_future(self.pool.check())  # keeps the check (held here), not the caller
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)
            with suppress(Exception):  # TimeoutError, or the check's own (a closed pool): the loss is the error
                await asyncio.wait_for(asyncio.shield(check), POOL_CHECK_DEADLINE)
        elif self._owns_conn:
            if self.conn is conn:  # not one another task has opened since, nor one given to refresh_embedder_record
                self.conn = None
                await conn.close()
        return connection_lost(e, pooled=self.pool is not None, reopens=self._owns_conn)

    async def search(self, query: str | Sequence[float] | np.ndarray, k: int | None = None, **options: Any) -> Any:
        """Same as `Retriever.search`."""
        assemble, options = _split_search_kwargs(dict(options))
        if assemble:
            return await self.assemble(query, k, **options)
        return await self.run(plan_search(self.layout, query, SEARCH_K if k is None else k, **options))

    async def assemble(self, query: str | Sequence[float] | np.ndarray, k: int | None = None,
                       **options: Any) -> Context:
        """Same as `Retriever.assemble`."""
        return await self.run(plan_assemble(self.layout, query, k, **options))

    async def search_many(self, queries: Sequence[str | Sequence[float] | np.ndarray], k: int | None = None, *,
                          parent: bool = True, neighbors: bool = True, filters: Any = None, mode: str = "auto",
                          texts: Sequence[str] | None = None, hybrid: Any = None) -> list[list[Hit]]:
        """Same as `Retriever.search_many` (texts are embedded in a worker thread, before the statement)."""
        from .search_many import plan_many, resolve_many

        queries, mode, texts = resolve_many(queries, mode, texts, hybrid)
        vectors = None if mode == "lexical" else await self._query_vectors(queries)
        plan, query, options = plan_many(self.layout, queries, vectors, k, mode=mode, texts=texts, hybrid=hybrid,
                                         parent=parent, neighbors=neighbors, filters=filters)
        if plan is None:
            return [await self.search(query, k, **options)]
        return await self._execute(plan, plan.params)

    async def _query_vectors(self, queries: list[str | Sequence[float] | np.ndarray]) -> list[np.ndarray]:
        """As `Retriever._query_vectors`, the texts embedded in a worker thread."""
        from .search_many import query_vectors

        texts = [q for q in queries if isinstance(q, str)]
        embedded = iter(await asyncio.to_thread(lambda: [self.embedder.embed_query(t) for t in texts]))
        return query_vectors([next(embedded) if isinstance(q, str) else q for q in queries], self.layout.dim)

    async def explain(self, query: str | Sequence[float] | np.ndarray, k: int | None = None, *,
                      assemble: bool = False, kind: str = "analyze", **options: Any) -> Explained:
        """Same as `Retriever.explain`."""
        from .explain import explain_statement_async, plan_to_explain

        plan = plan_to_explain(self.layout, query, k, assemble=assemble, kind=kind, options=options)
        vector = None
        if plan.embed is not None:
            vector = await asyncio.to_thread(lambda: self.embedder.embed_query(plan.embed))  # the check too
        params = bind_vector(plan, vector, self.layout.dim)
        async with self._connection() as c:
            return await explain_statement_async(c, plan, params, self.layout, kind=kind)

    async def explain_many(self, queries: Sequence[str | Sequence[float] | np.ndarray], k: int | None = None, *,
                           kind: str = "analyze", parent: bool = True, neighbors: bool = True,
                           filters: Any = None, mode: str = "auto", texts: Sequence[str] | None = None,
                           hybrid: Any = None) -> Explained:
        """Same as `Retriever.explain_many`."""
        from .explain import check_kind, explain_statement_async
        from .search_many import plan_many, resolve_many

        check_kind(kind)
        queries, mode, texts = resolve_many(queries, mode, texts, hybrid)
        vectors = None if mode == "lexical" else await self._query_vectors(queries)
        plan, query, options = plan_many(self.layout, queries, vectors, k, mode=mode, texts=texts, hybrid=hybrid,
                                         parent=parent, neighbors=neighbors, filters=filters)
        if plan is None:
            return await self.explain(query, k, kind=kind, **options)
        async with self._connection() as c:
            return await explain_statement_async(c, plan, plan.params, self.layout, kind=kind)

    def __deepcopy__(self, memo: dict) -> AsyncRetriever:
        """Itself: a handle on a connection (or pool), which a deep copy of a structure holding it (LangChain's
        ``model_copy(deep=True)``) shares rather than duplicates."""
        return self

    async def close(self) -> None:
        """Close the connection this retriever opened, after which its calls raise; over a connection or pool
        you gave, do nothing (they stay yours to close, and the retriever keeps working over them).

        A statement running on it (another task's call) is cancelled first, as `Retriever.close` does."""
        if self._owns_conn:
            self._closed = True
            conn, self.conn = self.conn, None  # later calls: "close() was called" (`_reopen`)
            if conn is not None:
                taken = False
                try:
                    taken = await _take_connection(conn)
                finally:  # also when this close is itself cancelled while the cancel request is under way
                    try:
                        await conn.close()
                    finally:
                        if taken:
                            conn.lock.release()

    async def __aenter__(self) -> AsyncRetriever:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
