"""The embedded PostgreSQL around CLI processes: it stops when the last onetrip process using it ends, however
that process was asked to end.

Each test runs the CLI with a fresh ONETRIP_HOME (no ONETRIP_DSN), so it starts and stops a server of its own
(a few seconds), never the tests' server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .test_http_service import _free_port, call


def embedded_env(home: Path) -> dict[str, str]:
    """The environment of a user with no DSN of their own: onetrip's embedded server in ``home``."""
    env = {k: v for k, v in os.environ.items() if k != "ONETRIP_DSN"}
    return {**env, "ONETRIP_HOME": str(home), "HF_HUB_OFFLINE": "1"}


def server_running(pgdata: Path) -> bool:
    """A postmaster runs for ``pgdata`` (its postmaster.pid names a live process), as pgserver itself tells."""
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running()


def stops(pgdata: Path, seconds: float = 60) -> bool:
    """Whether the server for ``pgdata`` is stopped within ``seconds`` (a generous deadline, not a timing check)."""
    deadline = time.monotonic() + seconds
    while server_running(pgdata):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


#: The start of a `python -c` script whose process gets SIGTERM as pgserver's initdb is called (`kill`,
#: `docker stop`, `systemctl stop` while the embedded server is made), not on a timer.
SIGTERM_AS_INITDB_RUNS = (
    "import os, signal, sys\n"
    "import pgserver.postgres_server as ps\n"
    "real = ps.initdb\n"
    "def initdb(*args, **kwargs):\n"
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "    return real(*args, **kwargs)\n"
    "ps.initdb = initdb\n"
)


@contextmanager
def stopped_afterwards(pgdata: Path) -> Iterator[None]:
    """Stop a server the test leaves running (when what it tests is broken), so it does not outlive the tests."""
    try:
        yield
    finally:
        from pgserver.utils import PostmasterInfo

        try:
            info = PostmasterInfo.read_from_pgdata(pgdata)
        except AssertionError:  # no postmaster's file (a test's own: initdb's bootstrap backend's); no `return`
            info = None  # here: in a finally it would swallow the test's own failure
        if info is not None and info.is_running() and info.pid is not None:
            os.kill(info.pid, signal.SIGINT)  # PostgreSQL's fast shutdown


@pytest.mark.slow
def test_serve_stopped_by_sigterm_stops_the_embedded_server(tmp_path):
    """`kill`, systemd and `docker stop` send SIGTERM. uvicorn shut down, then raised SIGTERM again with Python's
    default action, which ends the process without atexit: pgserver never took the process out of
    pgdata/.handle_pids.json, so that server ran on and no later onetrip process stopped it. Now `serve` exits 0,
    as after Ctrl-C, and the server is stopped."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        init = subprocess.run([sys.executable, "-m", "onetrip.cli", "init"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert init.returncode == 0, init.stderr
        assert stops(pgdata), "a command that ended normally left the embedded server running"
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "serve", "--port", str(port),
                                 "--no-access-log", "--log-level", "warning"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, proc.communicate()[1]
                try:
                    if call(f"127.0.0.1:{port}", "GET", "/health")[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "onetrip serve did not become healthy"
                time.sleep(0.3)
            assert server_running(pgdata)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        assert stops(pgdata), f"onetrip serve stopped by SIGTERM left the embedded server running ({err})"
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == []


@pytest.mark.slow
def test_embedded_runs_the_server_for_psql_until_sigterm(tmp_path):
    """sql/README.md says to run the SQL editions with psql, but with the embedded default nothing printed the
    DSN and every command stopped the server as it exited. `onetrip embedded` keeps it running, prints its DSN
    and a psql line that work, shares it with other commands meanwhile, and stops it on SIGTERM (exit 0)."""
    import shlex

    import psycopg

    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "embedded"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            said: dict[str, str] = {}
            for line in proc.stdout:  # ends at EOF if the command fails
                key, _, value = line.rstrip("\n").partition(": ")
                said[key] = value.strip()
                if key == "psql":
                    break
            assert {"DSN", "psql"} <= set(said), (said, proc.poll())
            with psycopg.connect(said["DSN"]) as conn:
                assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            # another command uses the same server and leaves it running as it exits
            init = subprocess.run([sys.executable, "-m", "onetrip.cli", "init"], env=env, capture_output=True,
                                  text=True, timeout=300)
            assert init.returncode == 0, init.stderr
            assert server_running(pgdata)
            res = subprocess.run([*shlex.split(said["psql"]), "-XAt", "-c", "SELECT to_regclass('sections')"],
                                 capture_output=True, text=True, timeout=60)
            assert (res.returncode, res.stdout) == (0, "sections\n"), res.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        assert stops(pgdata), f"onetrip embedded stopped by SIGTERM left the server running ({err})"
        assert proc.returncode == 0, err
        assert err == "", err


def test_embedded_has_nothing_to_run_with_a_dsn(tmp_path):
    """With $ONETRIP_DSN the user has a server: exit 2 naming it, and no embedded server is started."""
    env = {**embedded_env(tmp_path / "home"), "ONETRIP_DSN": "postgresql://someone@db.example/app"}
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "embedded"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "$ONETRIP_DSN is set" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "home").exists()


@pytest.mark.slow
def test_a_process_gone_without_its_atexit_no_longer_keeps_the_server_running(tmp_path):
    """pgserver stops the server when the last process on pgdata/.handle_pids.json leaves; one killed without
    its atexit (SIGKILL, a crash) stayed listed, and the server then outlived every later onetrip process. The
    next process to start the server takes such pids off the list."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)

    def init() -> None:
        res = subprocess.run([sys.executable, "-m", "onetrip.cli", "init"], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr

    with stopped_afterwards(pgdata):
        init()  # makes the data folder
        assert stops(pgdata)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        (pgdata / ".handle_pids.json").write_text(json.dumps([gone.pid]))  # as a killed process leaves it
        init()
        assert stops(pgdata), "a pid of a process long gone kept the embedded server running"
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == []


@pytest.mark.slow
def test_a_list_of_users_left_cut_short_is_rebuilt_and_written_whole(tmp_path, monkeypatch):
    """Found by review: pgserver wrote its list of the server's users (write_text: emptied, then written), and a
    process killed in between left it empty; every later onetrip command then failed to start the server
    ('Expecting value: line 1 column 1 (char 0)', and a traceback at exit). The list is written whole (a file
    renamed over it), and one that cannot be read is started again empty, with a warning."""
    from onetrip.connection import _import_pgserver

    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        res = _cli(env, "init")  # makes the data folder
        assert res.returncode == 0, res.stderr
        assert stops(pgdata)
        for cut in ("", "[12"):
            (pgdata / ".handle_pids.json").write_text(cut)  # as a process killed while writing it left it
            res = _cli(env, "documents")
            assert res.returncode == 0, res.stderr
            assert "could not be read; it starts again empty" in res.stderr and "Traceback" not in res.stderr
            assert "Exception ignored" not in res.stderr, res.stderr
            assert stops(pgdata), "the server outlived the process that started it again"
            assert json.loads((pgdata / ".handle_pids.json").read_text()) == []
    # pgserver's own writes go through a renamed file: a write that fails leaves the list as it was
    pgserver = _import_pgserver()
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError):
        pgserver.utils.DiskList(listed).put([1])
    assert listed.read_text() == "[1, 2]" and list(tmp_path.glob("list.json.*")) == []


@pytest.mark.slow
def test_serve_stopped_by_sigterm_before_it_serves_exits_0_and_stops_the_embedded_server(tmp_path):
    """`serve` exited 0 on a SIGTERM once uvicorn ran, but 143 on one that came earlier, while the embedded server
    started or the service's modules were imported (seen with `kill` 0.4 s after the start): a service manager
    reads 143 as a failure of a stop it asked for. The SIGTERM is sent as `serve` makes the embedded server (a
    wrapper around pgserver's initdb, not a timer; taken once the server runs); the command exits 0 and the
    embedded server it started is stopped."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    script = SIGTERM_AS_INITDB_RUNS + (
        "from onetrip import cli\n"
        "sys.exit(cli.main(['serve', '--port', sys.argv[1], '--log-level', 'warning']))\n"
    )
    with stopped_afterwards(pgdata):
        res = subprocess.run([sys.executable, "-c", script, str(_free_port())], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr, res.stderr
        assert (pgdata / "PG_VERSION").is_file(), "no embedded server was made: the test tested nothing"
        assert stops(pgdata), "onetrip serve stopped by SIGTERM left the embedded server running"


def test_sigterm_while_the_embedded_server_is_made_is_taken_once_it_runs(tmp_path):
    """SIGTERM raised Terminated wherever the command was, also inside the subprocess.run of pgserver's initdb,
    which then killed initdb: a data folder cut short kept its PG_VERSION, so no later start ran initdb again and
    every command failed ('database "postgres" does not exist', seen with `kill` 0.6 s into a first `onetrip
    init`). Now the signal is taken once the server runs: exit 143 still, the server stopped at exit, and the
    next command works. The SIGTERM is sent as initdb is called (a wrapper around pgserver's), not on a timer."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    script = SIGTERM_AS_INITDB_RUNS + (
        "from onetrip import cli, connection\n"
        "with cli.sigterm_unwinds():\n"
        "    try:\n"
        "        connection.embedded_dsn()\n"
        "    except cli.Terminated:\n"
        "        print('running' if connection.embedded_running(connection.embedded_data_dir()) else 'not running')\n"
        "        sys.exit(143)\n"
        "print('not terminated')\n"
    )
    with stopped_afterwards(pgdata):
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert (res.returncode, res.stdout) == (143, "running\n"), res.stderr
        assert stops(pgdata), "the server made before the SIGTERM was taken was left running"
        init = subprocess.run([sys.executable, "-m", "onetrip.cli", "init"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert init.returncode == 0, init.stderr


def _cli(env: dict[str, str], *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onetrip.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_first_starts_at_once_share_one_server_and_one_database(tmp_path):
    """Processes starting the embedded server together on a fresh home each made the onetrip database (and the
    vector extension) after finding none: all but one failed on a duplicate key (found by review)."""
    home = tmp_path / "home"
    env = embedded_env(home)
    code = "import onetrip; c = onetrip.connect(); onetrip.connection.ensure_pgvector(c); c.close(); print('ok')"
    with stopped_afterwards(home / "pgdata"):
        # two of them with runtime folders of their own (a review: pgserver's lock and onetrip's start lock lived
        # there only, so processes whose XDG_RUNTIME_DIR or TMPDIR differ had started one server at once, one
        # calling the folder the other's initdb was writing half-made); the home's own lock serializes them
        runtimes = [tmp_path / f"run{i}" for i in range(2)]
        for r in runtimes:
            r.mkdir(mode=0o700)
        envs = [env, env, *({**env, "XDG_RUNTIME_DIR": str(r), "TMPDIR": str(r)} for r in runtimes)]
        procs = [subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for e in envs]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        assert all(rc == 0 and out == "ok\n" for rc, out, _ in results), results
        assert stops(home / "pgdata")
    if os.geteuid() == 0:  # each start saw the modes pgserver had not opened yet (one start at a time)
        assert tmp_path.stat().st_mode & 0o044 == 0, oct(tmp_path.stat().st_mode)


@contextmanager
def initialized_home(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A home whose data folder `onetrip init` made, its server stopped again (and stopped after the test)."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        assert _cli(env, "init").returncode == 0
        assert stops(pgdata)
        yield pgdata, env


@pytest.mark.slow
def test_a_stale_pid_file_naming_another_live_process_is_not_taken_for_the_server(tmp_path):
    """After a crash, postmaster.pid's pid may belong to another process: pgserver took it for the server, failed
    to connect, and at exit signalled it (as root, killed it; found by review). The file is removed first."""
    with initialized_home(tmp_path) as (pgdata, env):
        bystander = subprocess.Popen(["sleep", "300"])
        try:
            (pgdata / "postmaster.pid").write_text(f"{bystander.pid}\n{pgdata}\n")  # as if the old pid were taken
            res = _cli(env, "documents", "--json")
            assert res.returncode == 0 and json.loads(res.stdout) == [], res.stderr
            assert bystander.poll() is None, "the process that took the old pid was signalled"
            assert stops(pgdata)
        finally:
            bystander.kill()


@pytest.mark.slow
def test_a_stale_pid_file_naming_the_server_of_another_folder_leaves_that_server_alone(tmp_path):
    """The first check compared path strings: a server of .../pgdata2 passed for one of .../pgdata (and a server
    reached through a bind mount or a symlink failed it, its pid file removed under it; found by review). The
    folder is now compared as a folder: the postmaster's working directory, by device and inode."""
    home = tmp_path / "h"
    other = home / "pgdata2"
    env = embedded_env(home)
    script = ("import sys, onetrip.connection as c\n"
              "c.embedded_dsn(sys.argv[1]); print('up', flush=True); sys.stdin.read()\n")
    with stopped_afterwards(home / "pgdata"), stopped_afterwards(other):
        assert _cli(env, "init").returncode == 0
        assert stops(home / "pgdata")
        b = subprocess.Popen([sys.executable, "-c", script, str(other)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            assert b.stdout.readline() == "up\n"
            pid = int((other / "postmaster.pid").read_text().split()[0])
            (home / "pgdata" / "postmaster.pid").write_text(f"{pid}\n{home / 'pgdata'}\n")
            res = _cli(env, "documents", "--json")
            assert res.returncode == 0 and json.loads(res.stdout) == [], res.stderr
            assert server_running(other), "the other folder's server was stopped"
            (alias := tmp_path / "alias").symlink_to(other)  # the same folder by another path: not stale
            from onetrip.connection import _forget_stale_postmaster

            _forget_stale_postmaster(alias)
            assert (other / "postmaster.pid").is_file()
        finally:
            b.stdin.close()
            b.wait(timeout=60)
        assert stops(other) and stops(home / "pgdata")


def test_a_data_folder_path_the_server_cannot_take_is_named(tmp_path):
    """pgserver hands the folder to pg_ctl's shell unquoted and puts it in a URI unencoded: a space failed with
    pg_ctl's status, '#' connected elsewhere, '&' ran a command. Refused naming the character, before any start."""
    for name, bad in (("with space", "' '"), ("hash#1", "'#'"), ("q?x=1&y", "'?'"), ("a,b", "','"), ("a=b", "'='")):
        res = _cli(embedded_env(tmp_path / name), "documents", timeout=120)
        assert res.returncode == 1 and f"holds {bad}" in res.stderr and "ONETRIP_HOME" in res.stderr, (
            name, res.stderr)
        assert not (tmp_path / name).exists()
    target = tmp_path / "x$(touch INJ)y"  # a symlink's target is what pgserver hands to the shell
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    res = subprocess.run([sys.executable, "-m", "onetrip.cli", "documents"], env=embedded_env(tmp_path / "link"),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 1 and "(or the path it links to) holds '$'" in res.stderr, res.stderr
    assert not (tmp_path / "INJ").exists() and not (target / "pgdata").exists()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # Path.resolve raises RuntimeError (Python < 3.13)
    res = _cli(embedded_env(tmp_path / "loop"), "documents", timeout=120)
    assert res.returncode == 1 and "cannot be reached" in res.stderr and "Traceback" not in res.stderr, res.stderr
    (tmp_path / "afile").write_text("")
    res = _cli(embedded_env(tmp_path / "afile"), "documents", timeout=120)
    assert res.returncode == 1 and "must be a folder onetrip may write in" in res.stderr, res.stderr
    # a path too long for the socket: pgserver had put it in a folder of its runtime path open to every user
    # (777 as root), where any local user connected as the server's superuser (found by review)
    from onetrip.connection import MAX_SOCKET_PATH

    long = tmp_path / ("h" * (MAX_SOCKET_PATH - len(str(tmp_path)) - len("//pgdata/.s.PGSQL.5432") + 1))
    res = _cli(embedded_env(long), "documents", timeout=120)
    assert res.returncode == 1 and f"socket's path would be {MAX_SOCKET_PATH + 1} bytes" in res.stderr, res.stderr
    assert not long.exists()
    assert len(os.fsencode(long.parent / long.name[1:] / "pgdata/.s.PGSQL.5432")) == MAX_SOCKET_PATH  # the longest taken


def test_a_stale_pid_file_naming_a_process_an_unprivileged_user_may_not_inspect_is_removed(tmp_path, monkeypatch):
    """A review: after a reboot, a system PostgreSQL (another user's) may hold the old pid; psutil may not read
    its working folder, and the file was left to pgserver, which failed every command on it and at exit printed
    a psutil.AccessDenied traceback. An unprivileged user's own server runs as that user: the file is stale."""
    import psutil

    from onetrip import connection

    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n{pgdata}\n")

    class Foreign(psutil.Process):  # another user's postgres: its name shows, its working folder does not
        def name(self) -> str:
            return "postgres"

        def cwd(self) -> str:
            raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil, "Process", Foreign)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    connection._forget_stale_postmaster(pgdata)
    assert (pgdata / "postmaster.pid").is_file()  # root may read any process: this one is left to pgserver
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    connection._forget_stale_postmaster(pgdata)
    assert not (pgdata / "postmaster.pid").exists()


def test_a_folder_that_is_no_data_folder_is_one_line_and_kept(tmp_path):
    """pgserver printed initdb's whole output and the error named a log that did not exist; the line now says
    why initdb stopped, and the folder's files stay."""
    pgdata = tmp_path / "home" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "notes.txt").write_text("mine")
    res = _cli(embedded_env(tmp_path / "home"), "documents", timeout=120)
    assert res.returncode == 1, res.stderr
    assert res.stderr.count("\n") == 1 and "initdb exited with status 1 (initdb: error: directory" in res.stderr, (
        res.stderr)
    assert "its log is" not in res.stderr and (pgdata / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_half_made_data_folder_is_named_with_what_to_do(tmp_path):
    """A Ctrl-C at a terminal also stops initdb itself: the folder it leaves lacks the postgres database, and every
    later command failed with psycopg's 'database "postgres" does not exist'. The start now says what happened."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        script = ("import psycopg, onetrip.connection as c\n"
                  "admin = c.embedded_dsn().replace('/onetrip?', '/template1?')\n"
                  "with psycopg.connect(admin, autocommit=True) as conn:\n"
                  "    conn.execute('DROP DATABASE postgres')\n")
        made = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr
        assert stops(pgdata)
        res = _cli(env, "documents")
        assert res.returncode == 1 and "is half-made (a first start was interrupted" in res.stderr, res.stderr
        assert "delete the folder and run again" in res.stderr


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="pgserver opens folders only as root")
def test_as_root_the_folders_above_the_data_folder_are_not_left_listable(tmp_path):
    """As root, pgserver chmods every folder above the data folder g+rx,o+rx, so /root became listable by every
    user (found by review); onetrip takes the read bits back and keeps g+x,o+x, all its server user needs."""
    private = tmp_path / "private" / "secret"
    private.mkdir(parents=True)
    for folder in (private.parent, private):
        folder.chmod(0o700)
    home = private / "home"
    with stopped_afterwards(home / "pgdata"):
        res = _cli(embedded_env(home), "init")
        assert res.returncode == 0, res.stderr
        assert [oct(f.stat().st_mode & 0o777) for f in (private.parent, private)] == ["0o711", "0o711"]
        # the server keeps working with the folders so (a checkpoint reads global/pg_control by its full path)
        check = _cli(embedded_env(home), "documents", "--json")
        assert check.returncode == 0 and json.loads(check.stdout) == [], check.stderr
        assert stops(home / "pgdata")


def test_a_start_failure_names_the_tools_reason_not_pgserver_labels():
    """pgserver's own record says 'error:' on a line of its own; a killed initdb had been reported as
    'exited with status -9 (error:)', and a failure chained behind pgserver's handler as that handler's."""
    import subprocess as sp

    from onetrip.connection import _start_failure

    killed = sp.CalledProcessError(-9, ["/x/bin/initdb", "-D", "/d"])
    label = "Failed postgres command (...):\nerror:\nCommand '...' died with <Signals.SIGKILL: 9>.\nstdout:\n\n---"
    assert _start_failure(killed, [label]) == "initdb was killed by signal 9"
    failed = sp.CalledProcessError(1, ["/x/bin/pg_ctl", "start"])
    log = "pg_ctl: directory \"/d\" is not a database cluster directory\ninitdb: hint: remove it"
    try:
        try:
            raise failed
        except sp.CalledProcessError:
            raise FileNotFoundError(2, "No such file or directory", "/d/log")  # pgserver's handler, failing
    except FileNotFoundError as chained:
        assert _start_failure(chained, [log]) == (
            'pg_ctl exited with status 1 (pg_ctl: directory "/d" is not a database cluster directory)')


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="pgserver opens folders only as root")
@pytest.mark.slow
def test_first_starts_of_two_homes_beside_each_other_leave_their_parent_closed(tmp_path):
    """The start lock was per home: a start in a sibling home read the shared parent's mode as the other's pgserver
    had just opened it, and kept it open (755; found by review). The lock is one for all of a user's starts."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    code = "import onetrip; onetrip.connect().close(); print('ok')"
    homes = [shared / "a", shared / "b"]
    with stopped_afterwards(homes[0] / "pgdata"), stopped_afterwards(homes[1] / "pgdata"):
        procs = [subprocess.Popen([sys.executable, "-c", code], env=embedded_env(h), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for h in homes]
        assert [(p.wait(timeout=300), p.communicate()[0]) for p in procs] == [(0, "ok\n")] * 2
        assert oct(shared.stat().st_mode & 0o777) == "0o711"
        assert all(stops(h / "pgdata") for h in homes)


def test_embedded_takes_a_blank_onetrip_dsn_as_unset(tmp_path):
    """Every command reads a blank $ONETRIP_DSN as unset; `embedded` had refused it as set."""
    env = {**embedded_env(tmp_path / "home"), "ONETRIP_DSN": "  "}
    proc = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "embedded"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with stopped_afterwards(tmp_path / "home" / "pgdata"):
        try:
            line = proc.stdout.readline()
            assert "embedded PostgreSQL" in line and "is running on" in line, (line, proc.poll())
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err


def test_embedded_exits_0_on_a_stop_that_comes_while_it_writes_its_lines(dsn, tmp_path, monkeypatch, capsys):
    """Found by a clean-clone CI run (test_embedded_takes_a_blank_onetrip_dsn_as_unset, once): a caller that sends
    SIGTERM on reading the first line can reach `embedded` still writing the next ones, outside the wait that took
    the stop as exit 0, so it left with 143. Here the stop comes as the psql line is made."""
    import argparse

    import onetrip.connection as connection
    from onetrip.cli import Terminated, cmd_embedded

    def stop() -> None:
        raise Terminated()

    monkeypatch.delenv("ONETRIP_DSN", raising=False)
    monkeypatch.setattr(connection, "embedded_dsn", lambda: dsn)
    monkeypatch.setattr(connection, "embedded_data_dir", lambda: tmp_path)
    monkeypatch.setattr(connection, "embedded_psql", stop)
    assert cmd_embedded(argparse.Namespace()) == 0
    assert "is running on" in capsys.readouterr().out


def test_the_home_lock_is_skipped_where_the_home_takes_no_lock_file(tmp_path):
    """A review of the home lock: a home onetrip may not write in (root's, around a service's own pgdata) failed
    every start on the lock file, and a home deleted before the exit printed a traceback at exit. There the lock
    is skipped, and pgserver's own orders starts and exits, as before."""
    from onetrip.connection import _home_lock

    with _home_lock(tmp_path / "gone" / "pgdata"):  # no such home: no lock file can be made
        pass
    assert not (tmp_path / "gone").exists()
    with _home_lock(tmp_path / "pgdata"):
        assert (tmp_path / ".onetrip-server.lock").is_file()


#: A process that uses the embedded server (its pid on pgserver's list) until its stdin closes.
HOLD = "import sys, onetrip.connection as c\nc.embedded_dsn()\nprint('up', flush=True)\nsys.stdin.read()\n"


def _holder(env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


def _postgres_gone(pgdata: Path, postmaster: int, seconds: float = 60) -> None:
    """Wait until a killed postmaster is reaped and its backends have ended (a new start needs its shared memory
    free); a deadline against hanging, not a timing check."""
    import psutil

    deadline = time.monotonic() + seconds
    while True:
        left = [p.pid for p in psutil.process_iter(["name", "cwd"])
                if p.info["name"] == "postgres" and p.info["cwd"] and os.path.samefile(p.info["cwd"], pgdata)]
        if not left and not psutil.pid_exists(postmaster):
            return
        assert time.monotonic() < deadline, f"the killed server's processes are still there: {left}"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_last_process_to_leave_stops_the_server_though_another_user_was_killed(tmp_path):
    """Found by review: the dead users were taken off pgserver's list on a start only, so with two processes on
    one server, one killed (SIGKILL, the OOM killer) and the other leaving normally, the server outlived both
    until some later onetrip process came and went. The exit takes them off too."""
    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        leaving, killed = _holder(env), _holder(env)
        killed.kill()
        killed.wait(60)
        assert server_running(pgdata)
        assert leaving.communicate(timeout=120)[0] == "" and leaving.returncode == 0
        assert stops(pgdata, 30), "the server outlived every onetrip process"


@pytest.mark.slow
def test_the_last_process_to_leave_stops_a_server_another_process_started_again(tmp_path):
    """Found by review: after its postmaster was killed and another onetrip process started the server again, the
    process leaving last knew only the dead postmaster, and left the new one running for good."""
    from pgserver.utils import PostmasterInfo

    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        first = _holder(env)
        info = PostmasterInfo.read_from_pgdata(pgdata)
        assert info is not None and info.pid is not None
        os.kill(info.pid, signal.SIGKILL)
        _postgres_gone(pgdata, info.pid)
        res = _cli(env, "init")  # starts the server again, and leaves it to `first`
        assert res.returncode == 0, res.stderr
        assert server_running(pgdata) and PostmasterInfo.read_from_pgdata(pgdata).pid != info.pid
        assert first.communicate(timeout=120)[0] == "" and first.returncode == 0
        assert stops(pgdata, 30), "the server started again outlived every onetrip process"


@pytest.mark.slow
def test_a_data_folder_initdb_left_in_its_bootstrap_is_named_half_made(tmp_path):
    """Found by review: initdb killed after it wrote global/pg_control leaves the postmaster.pid of its bootstrap
    backend (a negative pid, 7 lines), and every later command failed with pgserver's assertion on its lines."""
    with initialized_home(tmp_path) as (pgdata, env):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        standalone = f"-{gone.pid}\n{pgdata}\n1796000000\n5432\n\n\n  3408238         0\n"
        (pgdata / "postmaster.pid").write_text(standalone)
        # a folder a postmaster has run (postmaster.opts): the file is a killed `postgres --single`'s, the data
        # whole (a review: it had been called half-made, to be deleted); the stale file is removed
        res = _cli(env, "documents", "--json")
        assert res.returncode == 0 and json.loads(res.stdout) == [], res.stderr
        assert stops(pgdata)
        (pgdata / "postmaster.opts").unlink()  # no postmaster ever ran: initdb's bootstrap was cut short
        (pgdata / "postmaster.pid").write_text(standalone)
        res = _cli(env, "documents")
        assert res.returncode == 1, res.stderr
        assert "is half-made" in res.stderr and "initdb's bootstrap backend, which has ended" in res.stderr, res.stderr
        assert "_lines" not in res.stderr


@pytest.mark.slow
def test_a_pid_file_naming_a_postmaster_not_yet_reaped_waits_for_it(tmp_path):
    """Found by review: just after a kill -9 of the postmaster, until its parent reaped it, pgserver took the
    zombie for a running server and the next command failed on a refused connection. The start waits for it."""
    import psutil

    home = tmp_path / "home"
    pgdata = home / "pgdata"
    env = embedded_env(home)
    with stopped_afterwards(pgdata):
        holder = _holder(env)
        text = (pgdata / "postmaster.pid").read_text()  # a real file: its socket folder, its shared memory key
        holder.communicate(timeout=120)
        assert stops(pgdata)
        named = tmp_path / "postgres"  # a process named as the postmaster is (its comm: the file name it ran)
        named.symlink_to(shutil.which("true") or "/bin/true")
        zombie = subprocess.Popen([str(named)])  # this test's child: a zombie until it waits for it
        deadline = time.monotonic() + 60
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (pgdata / "postmaster.pid").write_text(f"{zombie.pid}\n" + text.split("\n", 1)[1])
        cli = subprocess.Popen([sys.executable, "-m", "onetrip.cli", "init"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)  # the command meets the zombie (it had failed at once); then it is reaped, as init would
        zombie.wait()
        out, err = cli.communicate(timeout=300)
        assert cli.returncode == 0, err
        assert stops(pgdata)


def test_an_initdb_failure_names_its_cause_not_the_clean_up_after_it():
    """Found by review: on a full disk initdb's output ends with its clean-up ("removing contents of data
    directory") after a PANIC, and the message named that instead of the FATAL that says why."""
    import subprocess as sp

    from onetrip.connection import _start_failure

    failed = sp.CalledProcessError(1, ["/x/bin/initdb", "-D", "/d"])
    record = ("Failed postgres command (1, ['/x/bin/initdb', '-D', '/d']):\nerror:\nCommand '...' returned non-zero "
              "exit status 1.\nstdout:\nrunning bootstrap script ... \n---\nstderr:\n"
              '2026-12-07 04:23:07.243 UTC [8325] FATAL:  could not extend file "base/1/2691": No space left on device\n'
              "2026-12-07 04:23:07.243 UTC [8325] HINT:  Check free disk space.\n"
              "2026-12-07 04:23:07.243 UTC [8325] PANIC:  cannot abort transaction 1, it was already committed\n"
              "Aborted\nchild process exited with exit code 134\n"
              'initdb: removing contents of data directory "/d"\n\n---')
    assert _start_failure(failed, [record]) == (
        'initdb exited with status 1 (FATAL:  could not extend file "base/1/2691": No space left on device)')
    # a failed start's record holds the whole server log, earlier runs' too: its last line stays the one
    start = sp.CalledProcessError(1, ["/x/bin/pg_ctl", "-w", "start"])
    log = ("2026-12-06 10:00:00.000 UTC [1] FATAL:  terminating connection due to administrator command\n"
           "pg_ctl: could not start server")
    assert _start_failure(start, [log]) == "pg_ctl exited with status 1 (pg_ctl: could not start server)"
