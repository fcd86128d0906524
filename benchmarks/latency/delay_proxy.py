"""User-space TCP delay proxy that emulates network round-trip time to PostgreSQL.

Why it exists: the latency benchmark has to show how retrieval strategies behave
when every client/server round trip costs d milliseconds, and `tc netem` is not
available on the benchmark machines.  The proxy sits between psycopg and the
(embedded, Unix-socket-only) PostgreSQL and holds each chunk of bytes for d/2 in
each direction, so one request/response exchange pays an extra d.

Design notes (why it looks like this):

* It models *latency, not bandwidth*: every chunk read from a socket is released
  no earlier than its own arrival time + d/2 and chunks stay in order per
  direction; pipelined bytes that arrive together leave together.
* CPython rounds epoll/poll timeouts up to whole milliseconds, which would
  destroy sub-millisecond delays, so the loop uses ``select.select`` (microsecond
  timeout) in a single background thread with a heap of deadlines.  The last
  ``SPIN_S`` before a deadline is spent polling (select with a zero timeout, so
  I/O is still serviced) instead of sleeping, to hit the deadline precisely
  without burning a core for long on a 2-core machine.
* With d = 0 data still goes through the same code path, so the proxy's own
  overhead is present in every variant equally.

Limits: select() only handles fds < 1024 (ample for tens of connections).  In
process, the loop thread needs the GIL at each deadline, so if other Python
threads keep running while requests are in flight, use DelayProxyProcess.  When
the CPUs are saturated no user-space proxy is on time; `lateness_stats()` shows
how late it actually was.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Union

from psycopg.conninfo import conninfo_to_dict

__all__ = [
    "DelayProxy",
    "DelayProxyProcess",
    "Upstream",
    "measure_rtt",
    "proxied_dsn",
    "upstream_from_dsn",
]

# ("unix", path) or ("tcp", host, port)
Upstream = Union[tuple[str, str], tuple[str, str, int]]

SPIN_S = 200e-6  # poll instead of sleeping when the next deadline is this close
RECV_SIZE = 256 * 1024
MAX_PENDING = 8 * 1024 * 1024  # per direction; stop reading beyond this (backpressure)
CONNECT_TIMEOUT_S = 5.0

_perf = time.perf_counter


def upstream_from_dsn(dsn: str) -> Upstream:
    """Where a libpq DSN points, as ("unix", socket_file) or ("tcp", host, port).

    Only the first host of a multi-host DSN is used; PGHOST/PGPORT fill gaps the
    way libpq would.
    """
    params = conninfo_to_dict(dsn)
    host = (params.get("hostaddr") or params.get("host") or os.environ.get("PGHOST") or "").split(",")[0]
    port_s = (str(params.get("port") or os.environ.get("PGPORT") or "")).split(",")[0]
    port = int(port_s) if port_s else 5432
    if not host:
        raise ValueError(f"DSN has no host and PGHOST is unset; cannot locate server: {dsn!r}")
    if host.startswith("/"):
        return ("unix", os.path.join(host, f".s.PGSQL.{port}"))
    return ("tcp", host, port)


def proxied_dsn(dsn: str, host: str, port: int) -> str:
    """Rewrite `dsn` so it connects to the proxy at host:port, keeping user/dbname/etc.

    When the DSN pointed at a Unix socket, SSL/GSS negotiation is disabled (unless
    the DSN set it) because libpq never negotiates them over Unix sockets; without
    this the proxied connection would do different work than the direct one.
    """
    params = conninfo_to_dict(dsn)
    was_unix = upstream_from_dsn(dsn)[0] == "unix"
    params.pop("hostaddr", None)
    params["host"] = host
    params["port"] = str(port)
    if was_unix:
        params.setdefault("sslmode", "disable")
        params.setdefault("gssencmode", "disable")
    return " ".join(f"{k}={_quote(str(v))}" for k, v in params.items())


def _quote(v: str) -> str:
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Conn:
    """A proxied connection: client socket, upstream socket and both directions."""

    __slots__ = ("client", "upstream", "c2u", "u2c", "closed")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.c2u = _Pipe(self, client, upstream)
        self.u2c = _Pipe(self, upstream, client)
        self.closed = False


class _Pipe:
    """One direction: chunks read from src wait in `queue` until due, then go to dst."""

    __slots__ = ("conn", "src", "dst", "src_fd", "dst_fd", "queue", "out", "pending", "eof_read", "eof_due", "shut")

    def __init__(self, conn: _Conn, src: socket.socket, dst: socket.socket) -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.src_fd = src.fileno()  # kept: fileno() is -1 after close
        self.dst_fd = dst.fileno()
        self.queue: deque[tuple[float, bytes | None]] = deque()  # None = EOF marker
        self.out = bytearray()  # due bytes the kernel has not accepted yet
        self.pending = 0  # bytes in queue + out, for backpressure
        self.eof_read = False
        self.eof_due = False
        self.shut = False  # EOF forwarded to dst (SHUT_WR) — this direction is done


class DelayProxy:
    """Forward TCP connections from host:port to `upstream`, adding `delay_ms` of RTT.

    Use as a context manager or call start()/stop().  `set_delay_ms` changes the
    delay for data arriving from then on, so one proxy can serve several RTT levels.
    """

    def __init__(
        self,
        upstream: Upstream | str,
        delay_ms: float = 0.0,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        spin_us: float = SPIN_S * 1e6,
    ) -> None:
        self.upstream: Upstream = _normalize_upstream(upstream)
        self.spin_s = spin_us / 1e6
        self.host = host
        self._req_port = port
        self._port: int | None = None
        self._half_s = 0.0
        self._delay_ms = 0.0
        self.set_delay_ms(delay_ms)
        self._lsock: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._heap: list[tuple[float, int, _Pipe]] = []
        self._seq = itertools.count()
        self._conns: set[_Conn] = set()
        # keyed by fd: select() handles plain ints faster than socket objects
        self._by_src: dict[int, _Pipe] = {}
        self._by_dst: dict[int, _Pipe] = {}
        self.error: BaseException | None = None  # set if the loop thread crashed
        self.connections_accepted = 0
        self._late: list[float] = []  # seconds each chunk left after its due time

    @classmethod
    def from_dsn(cls, dsn: str, delay_ms: float = 0.0, **kw: Any) -> DelayProxy:
        """Proxy in front of the server a libpq DSN points to."""
        return cls(upstream_from_dsn(dsn), delay_ms, **kw)

    # -- public API ---------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("proxy not started")
        return self._port

    @property
    def delay_ms(self) -> float:
        return self._delay_ms

    @property
    def active_connections(self) -> int:
        """Proxied connections still open (approximate when read from another thread)."""
        return len(self._conns)

    def set_delay_ms(self, delay_ms: float) -> None:
        """Set the added RTT; applies to chunks that arrive after the call."""
        if delay_ms < 0:
            raise ValueError("delay_ms must be >= 0")
        self._delay_ms = float(delay_ms)
        self._half_s = float(delay_ms) / 2000.0  # single float store: atomic for the loop thread

    def lateness_stats(self, reset: bool = True) -> dict[str, float]:
        """How late (µs) chunks left the proxy relative to arrival + d/2.

        Lets the benchmark show that the proxy itself hit its deadlines; the rest
        of any RTT excess is the endpoints (e.g. slower wake-up after idling).
        """
        xs = self._late
        if reset:
            self._late = []
        xs = sorted(xs[:])
        if not xs:
            return {"n": 0.0}
        return {
            "n": float(len(xs)),
            "median_us": statistics.median(xs) * 1e6,
            "p95_us": xs[int(0.95 * (len(xs) - 1))] * 1e6,
            "max_us": xs[-1] * 1e6,
        }

    def dsn(self, upstream_dsn: str) -> str:
        """`upstream_dsn` rewritten to connect through this proxy."""
        return proxied_dsn(upstream_dsn, self.host, self.port)

    def start(self) -> DelayProxy:
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        self._stopping = False
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.host, self._req_port))
        ls.listen(128)
        ls.setblocking(False)
        self._lsock = ls
        self._port = ls.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name=f"DelayProxy:{self._port}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close every socket and join the loop thread."""
        if self._thread is None:
            return
        self._stopping = True
        self._wake()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("DelayProxy thread did not stop")
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._thread = None

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> DelayProxy:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- loop thread ----------------------------------------------------------

    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def _run(self) -> None:
        assert self._lsock is not None and self._wake_r is not None
        lsock, wake_r = self._lsock, self._wake_r
        lfd, wfd = lsock.fileno(), wake_r.fileno()
        heap = self._heap
        by_src, by_dst = self._by_src, self._by_dst
        try:
            while not self._stopping:
                now = _perf()
                while heap and heap[0][0] <= now:
                    p = heapq.heappop(heap)[2]
                    if not p.conn.closed:
                        self._pump(p, now)
                timeout: float | None = None
                if heap:
                    # Sleep until spin_s before the deadline, then poll (spin) to hit it.
                    timeout = max(0.0, heap[0][0] - _perf() - self.spin_s)
                rlist = [lfd, wfd]
                wlist = []
                for fd, p in by_src.items():
                    if not p.eof_read and p.pending < MAX_PENDING:
                        rlist.append(fd)
                    if p.out:
                        wlist.append(p.dst_fd)
                r, w, _ = select.select(rlist, wlist, [], timeout)
                if not r and not w:
                    continue
                now = _perf()  # arrival time of everything readable now
                for fd in w:
                    p = by_dst.get(fd)
                    if p is not None and not p.conn.closed:
                        self._pump(p, now)
                for fd in r:
                    if fd == lfd:
                        self._accept()
                    elif fd == wfd:
                        try:
                            wake_r.recv(4096)
                        except OSError:
                            pass
                    else:
                        p = by_src.get(fd)
                        if p is not None and not p.conn.closed:
                            self._read(p, now)
        except BaseException as e:  # pragma: no cover - surfaced via .error
            self.error = e
            raise
        finally:
            for c in list(self._conns):
                self._close(c)
            heap.clear()
            lsock.close()

    def _accept(self) -> None:
        assert self._lsock is not None
        while True:
            try:
                cs, _ = self._lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                us = self._connect_upstream()
            except OSError:
                cs.close()  # upstream down: the client sees the connection closed
                continue
            cs.setblocking(False)
            _nodelay(cs)
            conn = _Conn(cs, us)
            self._conns.add(conn)
            for p in (conn.c2u, conn.u2c):
                self._by_src[p.src_fd] = p
                self._by_dst[p.dst_fd] = p
            self.connections_accepted += 1

    def _connect_upstream(self) -> socket.socket:
        """Blocking connect with a timeout: simple, and instant for local servers."""
        if self.upstream[0] == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr: Any = self.upstream[1]
        else:
            _, host, port = self.upstream  # type: ignore[misc]
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            addr = (host, port)
        try:
            s.settimeout(CONNECT_TIMEOUT_S)
            s.connect(addr)
            s.setblocking(False)
            _nodelay(s)
        except OSError:
            s.close()
            raise
        return s

    def _read(self, p: _Pipe, now: float) -> None:
        try:
            data = p.src.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(p.conn)
            return
        due = now + self._half_s
        if data:
            p.queue.append((due, data))
            p.pending += len(data)
        else:
            p.eof_read = True
            p.queue.append((due, None))
        if due <= now:
            self._pump(p, now)  # d = 0: forward right away, no extra loop iteration
        else:
            heapq.heappush(self._heap, (due, next(self._seq), p))

    def _pump(self, p: _Pipe, now: float) -> None:
        """Move due chunks to the output buffer and write what the kernel accepts."""
        q = p.queue
        if q and q[0][0] <= now:
            t = _perf()
            late = self._late
            while q and q[0][0] <= now:
                due, data = q.popleft()
                if data is None:
                    p.eof_due = True
                else:
                    p.out += data
                    if len(late) < 100_000:
                        late.append(t - due)
        if p.out:
            try:
                n = p.dst.send(p.out)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._close(p.conn)
                return
            del p.out[:n]
            p.pending -= n
        if p.eof_due and not p.out and not p.shut:
            p.shut = True
            try:
                p.dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            other = p.conn.u2c if p is p.conn.c2u else p.conn.c2u
            if other.shut:
                self._close(p.conn)

    def _close(self, c: _Conn) -> None:
        if c.closed:
            return
        c.closed = True
        self._conns.discard(c)
        for p in (c.c2u, c.u2c):
            self._by_src.pop(p.src_fd, None)
            self._by_dst.pop(p.dst_fd, None)
        for s in (c.client, c.upstream):
            try:
                s.close()
            except OSError:
                pass


def _nodelay(s: socket.socket) -> None:
    if s.family in (socket.AF_INET, socket.AF_INET6):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _normalize_upstream(u: Upstream | str | tuple[str, int]) -> Upstream:
    """Accept ("unix", path), ("tcp", host, port), a bare socket path or (host, port)."""
    if isinstance(u, str):
        return ("unix", u)
    if len(u) == 2 and u[0] == "unix":
        return ("unix", str(u[1]))
    if len(u) == 3 and u[0] == "tcp":
        return ("tcp", str(u[1]), int(u[2]))  # type: ignore[misc]
    if len(u) == 2:
        return ("tcp", str(u[0]), int(u[1]))  # type: ignore[arg-type]
    raise ValueError(f"bad upstream: {u!r}")


# -- measurement ---------------------------------------------------------------

Target = Union[str, Callable[[], Any]]


def _select1_times_ms(target: Target, n: int, warmup: int) -> list[float]:
    import psycopg

    conn = psycopg.connect(target, autocommit=True) if isinstance(target, str) else target()
    try:
        cur = conn.cursor()
        for _ in range(warmup):
            cur.execute("SELECT 1")
            cur.fetchone()
        out = []
        for _ in range(n):
            t0 = _perf()
            cur.execute("SELECT 1")
            cur.fetchone()
            out.append((_perf() - t0) * 1000.0)
        return out
    finally:
        conn.close()


def _summary(xs: list[float], prefix: str = "") -> dict[str, float]:
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
    return {
        f"{prefix}median_ms": statistics.median(xs),
        f"{prefix}p5_ms": q[4],
        f"{prefix}p95_ms": q[94],
        f"{prefix}mean_ms": statistics.fmean(xs),
    }


def measure_rtt(target: Target, n: int = 200, *, direct: Target | None = None, warmup: int = 20) -> dict[str, float]:
    """Time `SELECT 1` n times through the proxy (and optionally directly).

    Reported beside every benchmark row so the *achieved* RTT is visible rather
    than assumed.  `target`/`direct` are a DSN (an autocommit connection is
    opened and closed here) or a callable returning a new psycopg connection
    (closed here too; make it autocommit, or the first query pays for BEGIN).
    Returns median/p5/p95/mean in ms; with `direct` also direct_* and
    added_median_ms = median(proxy) - median(direct).
    """
    res: dict[str, float] = {"n": float(n)}
    res.update(_summary(_select1_times_ms(target, n, warmup)))
    if direct is not None:
        res.update(_summary(_select1_times_ms(direct, n, warmup), "direct_"))
        res["added_median_ms"] = res["median_ms"] - res["direct_median_ms"]
    return res


# -- separate process -------------------------------------------------------------


class DelayProxyProcess:
    """The same proxy run in a child process, with the same small API.

    Why: in-process, the proxy thread needs the GIL at each deadline; a
    benchmark that runs Python code in other threads while requests are in
    flight (e.g. concurrent clients) can hold the GIL for up to the 5 ms switch
    interval and make delays late.  A child process has its own GIL.
    """

    def __init__(
        self,
        upstream: Upstream | str,
        delay_ms: float = 0.0,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        spin_us: float = SPIN_S * 1e6,
    ) -> None:
        self.upstream = _normalize_upstream(upstream)
        self.host = host
        self.spin_us = spin_us
        self._req_port = port
        self._delay_ms = float(delay_ms)
        self._port: int | None = None
        self._proc: subprocess.Popen[str] | None = None

    @classmethod
    def from_dsn(cls, dsn: str, delay_ms: float = 0.0, **kw: Any) -> DelayProxyProcess:
        return cls(upstream_from_dsn(dsn), delay_ms, **kw)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("proxy not started")
        return self._port

    @property
    def delay_ms(self) -> float:
        return self._delay_ms

    def dsn(self, upstream_dsn: str) -> str:
        return proxied_dsn(upstream_dsn, self.host, self.port)

    def start(self) -> DelayProxyProcess:
        u = self.upstream
        spec = u[1] if u[0] == "unix" else f"{u[1]}:{u[2]}"  # type: ignore[misc]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "benchmarks.latency.delay_proxy", "--control", "--upstream", spec,
               "--delay-ms", repr(self._delay_ms), "--host", self.host, "--port", str(self._req_port), "--spin-us", repr(self.spin_us)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._port = int(self._reply("port "))
        return self

    def _reply(self, prefix: str) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise RuntimeError(f"proxy process exited (rc={self._proc.wait()})")

    def set_delay_ms(self, delay_ms: float) -> None:
        if delay_ms < 0:
            raise ValueError("delay_ms must be >= 0")
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(f"delay {float(delay_ms)!r}\n")
        self._proc.stdin.flush()
        self._reply("ok")
        self._delay_ms = float(delay_ms)

    def lateness_stats(self) -> dict[str, float]:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write("stats\n")
        self._proc.stdin.flush()
        return {k: float(v) for k, v in (kv.split("=") for kv in self._reply("stats").split())}

    def stop(self, timeout: float = 5.0) -> None:
        """Closing stdin tells the child to stop its proxy and exit."""
        if self._proc is None:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        finally:
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None

    def __enter__(self) -> DelayProxyProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- CLI ---------------------------------------------------------------------------


def _control(proxy: DelayProxy) -> None:
    """Line commands on stdin ("delay MS", "stats"); returns at EOF."""
    for line in sys.stdin:
        cmd, *args = line.split() or [""]
        try:
            if cmd == "delay":
                proxy.set_delay_ms(float(args[0]))
                print(f"ok delay {proxy.delay_ms!r}", flush=True)
            elif cmd == "stats":
                print("stats " + " ".join(f"{k}={v:.1f}" for k, v in proxy.lateness_stats().items()), flush=True)
            elif cmd:
                print(f"error unknown command {cmd!r}", flush=True)
        except (ValueError, IndexError) as e:
            print(f"error {e}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="TCP delay proxy: adds --delay-ms of RTT in front of PostgreSQL.")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--upstream-dsn", help="libpq DSN of the server to proxy to")
    g.add_argument("--upstream", help="upstream as HOST:PORT or a Unix socket file path")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added round-trip time (ms)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="listen port (0 = pick a free one)")
    ap.add_argument("--spin-us", type=float, default=SPIN_S * 1e6, help="poll instead of sleeping this close to a deadline")
    ap.add_argument("--measure", type=int, default=0, metavar="N", help="with --upstream-dsn: print SELECT 1 RTT over N queries")
    ap.add_argument("--control", action="store_true", help='read "delay MS" / "stats" lines on stdin; exit at EOF')
    a = ap.parse_args(argv)

    if a.upstream_dsn:
        up = upstream_from_dsn(a.upstream_dsn)
    elif a.upstream.startswith("/"):
        up = ("unix", a.upstream)
    else:
        h, _, p = a.upstream.rpartition(":")
        up = ("tcp", h.strip("[]"), int(p))
    proxy = DelayProxy(up, a.delay_ms, host=a.host, port=a.port, spin_us=a.spin_us).start()
    print(f"listening on {proxy.host}:{proxy.port} -> {up} delay_ms={a.delay_ms}", flush=True)
    print(f"port {proxy.port}", flush=True)
    try:
        if a.upstream_dsn:
            print(f"dsn {proxy.dsn(a.upstream_dsn)}", flush=True)
            if a.measure:
                r = measure_rtt(proxy.dsn(a.upstream_dsn), a.measure, direct=a.upstream_dsn)
                print("rtt " + " ".join(f"{k}={v:.3f}" for k, v in r.items()), flush=True)
        if a.control:
            _control(proxy)
        else:
            while proxy.is_alive():
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0 if proxy.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
