"""Correctness tests for the latency benchmark's TCP delay proxy.

Timing is only ever checked as a lower bound (a delay can't be shorter than
configured); upper bounds would flake on noisy machines.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.latency.delay_proxy import (
    DelayProxy,
    DelayProxyProcess,
    proxied_dsn,
    upstream_from_dsn,
)

WAIT_S = 10.0  # generous bound for "eventually"; not a timing assertion


def _wait_until(pred, timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


class EchoServer:
    """Threaded echo server (TCP or Unix); records how many client connections it saw end."""

    def __init__(self, family: int, mode: str = "echo") -> None:
        self.family = family
        self.mode = mode  # "echo" or "hello_close" (send b"hello" then close)
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            self._dir = tempfile.mkdtemp(prefix="dp_echo_")
            self.addr: object = os.path.join(self._dir, "echo.sock")
        else:
            self.addr = ("127.0.0.1", 0)
        self.sock.bind(self.addr)
        self.addr = self.sock.getsockname()
        self.sock.listen(128)
        self.accepted = 0
        self.closed = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = False
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    @property
    def upstream(self) -> tuple:
        if self.family == socket.AF_UNIX:
            return ("unix", self.addr)
        return ("tcp", self.addr[0], self.addr[1])

    def _serve(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            t = threading.Thread(target=self._handle, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)

    def _handle(self, c: socket.socket) -> None:
        try:
            if self.mode == "hello_close":
                c.sendall(b"hello")
                return
            while True:
                data = c.recv(65536)
                if not data:
                    return
                c.sendall(data)
        except OSError:
            pass
        finally:
            c.close()
            with self._lock:
                self.closed += 1

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._t.join(5)
        if self.family == socket.AF_UNIX:
            shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture(params=["tcp", "unix"])
def echo(request) -> Iterator[EchoServer]:
    srv = EchoServer(socket.AF_INET if request.param == "tcp" else socket.AF_UNIX)
    yield srv
    srv.close()


@pytest.fixture
def tcp_echo() -> Iterator[EchoServer]:
    srv = EchoServer(socket.AF_INET)
    yield srv
    srv.close()


def _connect(proxy: DelayProxy | DelayProxyProcess) -> socket.socket:
    s = socket.create_connection((proxy.host, proxy.port), timeout=WAIT_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise EOFError(f"got {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _roundtrip_s(s: socket.socket, payload: bytes = b"x") -> float:
    t0 = time.perf_counter()
    s.sendall(payload)
    assert _recv_exact(s, len(payload)) == payload
    return time.perf_counter() - t0


def _echo_session(proxy: DelayProxy, seed: int, rounds: int = 40) -> None:
    """Random payloads, sometimes pipelined several at once, must come back exactly and in order."""
    rng = random.Random(seed)
    with _connect(proxy) as s:
        for _ in range(rounds):
            batch = [rng.randbytes(rng.choice([1, 7, 100, 1500, 20000, 70000])) for _ in range(rng.randint(1, 4))]
            s.sendall(b"".join(batch))  # pipelined: several messages in flight
            for p in batch:
                assert _recv_exact(s, len(p)) == p


@pytest.mark.parametrize("delay_ms", [0.0, 1.0])
def test_echo_concurrent_connections(echo: EchoServer, delay_ms: float) -> None:
    with DelayProxy(echo.upstream, delay_ms) as proxy:
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: _echo_session(proxy, i), range(8)))
        assert proxy.error is None


def test_thirty_concurrent_connections(echo: EchoServer) -> None:
    with DelayProxy(echo.upstream, 0.5) as proxy:
        with ThreadPoolExecutor(30) as ex:
            list(ex.map(lambda i: _echo_session(proxy, 1000 + i, rounds=10), range(30)))
        assert proxy.connections_accepted == 30
        assert _wait_until(lambda: proxy.active_connections == 0)


def test_large_payload_intact(echo: EchoServer) -> None:
    payload = random.Random(7).randbytes(6 * 1024 * 1024)
    with DelayProxy(echo.upstream, 1.0) as proxy, _connect(proxy) as s:
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(_recv_exact(s, len(payload))))
        reader.start()  # read concurrently, or both sides' buffers fill up
        s.sendall(payload)
        reader.join(60)
        assert got and got[0] == payload


def test_order_kept_when_delay_drops(tcp_echo: EchoServer) -> None:
    """Lowering the delay mid-stream must not let later chunks overtake earlier ones."""
    with DelayProxy(tcp_echo.upstream, 40.0) as proxy, _connect(proxy) as s:
        msgs = [f"<{i:04d}>".encode() for i in range(200)]
        for i, m in enumerate(msgs):
            if i == 50:
                proxy.set_delay_ms(0.0)
            s.sendall(m)
            if i % 10 == 0:
                time.sleep(0.001)  # spread the messages over several chunks
        assert _recv_exact(s, sum(map(len, msgs))) == b"".join(msgs)


def test_client_close_closes_upstream(echo: EchoServer) -> None:
    with DelayProxy(echo.upstream, 2.0) as proxy:
        s = _connect(proxy)
        _roundtrip_s(s, b"ping")
        s.close()
        assert _wait_until(lambda: echo.closed == 1)
        assert _wait_until(lambda: proxy.active_connections == 0)


def test_half_close_propagates(tcp_echo: EchoServer) -> None:
    """Client shuts down writing: the upstream sees EOF, still answers, then the client sees EOF."""
    with DelayProxy(tcp_echo.upstream, 1.0) as proxy, _connect(proxy) as s:
        s.sendall(b"last words")
        s.shutdown(socket.SHUT_WR)
        assert _recv_exact(s, 10) == b"last words"
        assert s.recv(10) == b""
        assert _wait_until(lambda: proxy.active_connections == 0)


def test_upstream_close_closes_client() -> None:
    srv = EchoServer(socket.AF_INET, mode="hello_close")
    try:
        with DelayProxy(srv.upstream, 1.0) as proxy, _connect(proxy) as s:
            assert _recv_exact(s, 5) == b"hello"
            assert s.recv(10) == b""
    finally:
        srv.close()


def test_upstream_down_closes_client_and_proxy_survives(tcp_echo: EchoServer) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    with DelayProxy(("tcp", "127.0.0.1", dead_port), 0.0) as proxy, _connect(proxy) as s:
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
        assert proxy.is_alive()


def test_set_delay_ms_lower_bound(tcp_echo: EchoServer) -> None:
    with DelayProxy(tcp_echo.upstream, 0.0) as proxy, _connect(proxy) as s:
        _roundtrip_s(s)
        proxy.set_delay_ms(20.0)
        assert proxy.delay_ms == 20.0
        assert min(_roundtrip_s(s) for _ in range(3)) >= 0.019
        proxy.set_delay_ms(40.0)
        assert min(_roundtrip_s(s) for _ in range(3)) >= 0.039
        proxy.set_delay_ms(0.0)
        _roundtrip_s(s, b"still works")  # echoed back whole (checked inside)
        with pytest.raises(ValueError):
            proxy.set_delay_ms(-1)


def test_pipelined_chunk_each_delayed_from_own_arrival(tcp_echo: EchoServer) -> None:
    """Two bursts sent 30 ms apart: the second echo can't arrive before its own send + d."""
    with DelayProxy(tcp_echo.upstream, 20.0) as proxy, _connect(proxy) as s:
        t0 = time.perf_counter()
        s.sendall(b"a" * 10)
        time.sleep(0.03)
        t1 = time.perf_counter()
        s.sendall(b"b" * 10)
        assert _recv_exact(s, 20) == b"a" * 10 + b"b" * 10
        assert time.perf_counter() - t1 >= 0.019
        assert time.perf_counter() - t0 >= 0.049


def test_stop_cleans_up(echo: EchoServer) -> None:
    proxy = DelayProxy(echo.upstream, 1.0).start()
    thread = proxy._thread
    port = proxy.port
    clients = [_connect(proxy) for _ in range(5)]
    for c in clients:
        _roundtrip_s(c)
    proxy.stop()
    assert thread is not None and not thread.is_alive()
    assert not proxy.is_alive() and proxy.active_connections == 0
    for c in clients:
        try:
            assert c.recv(10) == b""  # proxy closed its side
        except ConnectionResetError:
            pass
        c.close()
    assert _wait_until(lambda: echo.closed == 5)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    proxy.stop()  # idempotent


def test_port_zero_picks_free_port(tcp_echo: EchoServer) -> None:
    with DelayProxy(tcp_echo.upstream) as a, DelayProxy(tcp_echo.upstream) as b:
        assert a.port != b.port and a.port > 0 and a.host == "127.0.0.1"
    with pytest.raises(RuntimeError):
        DelayProxy(tcp_echo.upstream).port


def test_upstream_from_dsn() -> None:
    assert upstream_from_dsn("postgresql://postgres:@/postgres?host=/tmp/x/data") == (
        "unix",
        "/tmp/x/data/.s.PGSQL.5432",
    )
    assert upstream_from_dsn("host=/run/pg port=5433 dbname=x") == ("unix", "/run/pg/.s.PGSQL.5433")
    assert upstream_from_dsn("postgresql://u:p@db.example:6543/x") == ("tcp", "db.example", 6543)
    assert upstream_from_dsn("host=localhost dbname=x") == ("tcp", "localhost", 5432)
    assert upstream_from_dsn("host=a,b port=7,8") == ("tcp", "a", 7)
    assert upstream_from_dsn("host=name hostaddr=10.0.0.1") == ("tcp", "10.0.0.1", 5432)


def test_proxied_dsn_keeps_credentials() -> None:
    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(proxied_dsn("postgresql://postgres:secret@/mydb?host=/tmp/x", "127.0.0.1", 4242))
    assert d["host"] == "127.0.0.1" and d["port"] == "4242"
    assert d["user"] == "postgres" and d["password"] == "secret" and d["dbname"] == "mydb"
    assert d["sslmode"] == "disable"  # Unix-socket upstream: no SSL there either


def test_process_proxy(tcp_echo: EchoServer) -> None:
    with DelayProxyProcess(tcp_echo.upstream, 0.0) as proxy, _connect(proxy) as s:
        _roundtrip_s(s, b"hi")  # echoed back whole (checked inside)
        proxy.set_delay_ms(20.0)
        assert min(_roundtrip_s(s) for _ in range(3)) >= 0.019
        assert proxy.lateness_stats()["n"] >= 6


def test_cli_runs_until_interrupted(tcp_echo: EchoServer) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    host, port = tcp_echo.addr
    p = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.latency.delay_proxy", "--upstream", f"{host}:{port}", "--delay-ms", "1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    try:
        assert p.stdout is not None
        lines = [p.stdout.readline(), p.stdout.readline()]
        assert lines[1].startswith("port ")
        proxy_port = int(lines[1].split()[1])
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=WAIT_S) as s:
            s.sendall(b"cli")
            assert _recv_exact(s, 3) == b"cli"
        p.send_signal(signal.SIGINT)
        assert p.wait(WAIT_S) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


# -- optional: a real PostgreSQL ----------------------------------------------------


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    pgserver = pytest.importorskip("pgserver")
    d = tempfile.mkdtemp(prefix="dp_pg_")
    srv = pgserver.get_server(d, cleanup_mode="delete")
    try:
        yield srv.get_uri()
    finally:
        srv.cleanup()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_postgres_select1_through_proxy(pg_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from benchmarks.latency.delay_proxy import measure_rtt

    assert upstream_from_dsn(pg_dsn)[0] == "unix"
    with DelayProxy.from_dsn(pg_dsn, 0.5) as proxy:
        with psycopg.connect(proxy.dsn(pg_dsn), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.execute("SELECT repeat('x', 1000000)").fetchone()[0] == "x" * 1_000_000
        r = measure_rtt(proxy.dsn(pg_dsn), n=20, direct=pg_dsn, warmup=2)
        assert r["median_ms"] >= 0.5 - 0.01  # lower bound only
        assert {"p5_ms", "p95_ms", "direct_median_ms", "added_median_ms"} <= set(r)
        assert r["p5_ms"] <= r["median_ms"] <= r["p95_ms"]
        assert _wait_until(lambda: proxy.active_connections == 0)
