"""`python -m onetrip.cli ...` for the tests, forked from a process that has already imported torch and
sentence-transformers.

Why: a fresh interpreter spends ~9 s of CPU importing them (sklearn, scipy, transformers, torch) before the CLI
embeds anything, and the suite runs the CLI about a hundred times. A child forked from a warm server is still its
own process running the real CLI as `python -m` does (``runpy._run_module_as_main``): its own pid, exit code
(a KeyboardInterrupt ends it by SIGINT, as the interpreter does), environment, working directory, ``sys.path``
(the working directory first, then ``PYTHONPATH``), atexit handlers and non-daemon threads waited for at exit;
stdout and stderr are pipes read until both close, decoded as ``text=True`` decodes them (strict, the locale's
encoding, universal newlines), so a leftover process holding them open still holds the call.

What it does not share with a fresh interpreter: anything decided at interpreter start (``PYTHON*`` and the
other variables in `START_VARIABLES`, ``-X`` options), stdin (/dev/null here, inherited by a subprocess: a run
with a terminal on stdin, ``pytest -s``, therefore uses real subprocesses), and the imports of `WARM_IMPORTS`,
done once (onetrip itself is imported fresh in each child, after its environment is set). If those imports print
anything (a warning a fresh process would show on the CLI's stderr), the server is not used. A call with a
different start variable, every call under ``ONETRIP_TEST_CLI=exec`` (to check that both ways agree), and every
call where ``os.fork`` does not exist run as real subprocesses.
"""

from __future__ import annotations

import atexit
import base64
import json
import locale
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any

#: Imported by the server before it forks: what every CLI call that embeds would import anyway.
WARM_IMPORTS = ("torch", "transformers", "sentence_transformers", "psycopg", "numpy")
#: Variables those modules (or the interpreter) read as they start: a call that sets one differently from the
#: server's start runs as a real subprocess (HF_HUB_OFFLINE is a constant of huggingface_hub's from its import).
START_VARIABLES = ("PYTHON", "HF_", "HUGGINGFACE", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS", "TOKENIZERS", "TORCH",
                   "OMP_", "MKL_", "OPENBLAS", "CUDA", "PYTORCH", "LD_")


def _send(fd: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    os.write(fd, struct.pack("!I", len(data)) + data)


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> Any:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack("!I", head)[0])
    return None if body is None else json.loads(body)


# ------------------------------------------------------------------ server side


def _run_child(req: dict[str, Any], out_fd: int, err_fd: int) -> None:
    """In the forked child: run the CLI as `python -m onetrip.cli` would, then leave with its exit code."""
    import runpy
    import types

    code: Any = 0
    interrupted = False
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.path.insert(0, os.getcwd())  # `python -m` puts the working directory first, before PYTHONPATH
        sys.argv = ["-m", *req["args"]]
        sys.modules["__main__"] = types.ModuleType("__main__")  # the CLI's own, as `python -m` makes it
        runpy._run_module_as_main("onetrip.cli", alter_argv=True)  # type: ignore[attr-defined]
    except SystemExit as e:
        code = e.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)  # as the interpreter: before atexit's output
            code = 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted = True
    except BaseException:  # noqa: BLE001 - an uncaught exception: the interpreter prints it and exits 1
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter: wait for non-daemon threads
        atexit._run_exitfuncs()
    finally:
        code = 0 if code is None else code
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                code = 120 if code == 0 else code
        if interrupted:  # the interpreter ends by the signal itself: the parent sees -SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def _collect(pid: int, out_r: int, err_r: int, timeout: float) -> tuple[int | None, bytes, bytes]:
    """The child's exit status (None if it outlived ``timeout`` and was killed) and what it wrote, read until
    both pipes close, as `subprocess.run` reads them (a process the child left holding them holds the call)."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    status, timed_out = None, False
    while sel.get_map() or status is None:
        left = deadline - time.monotonic()
        if left <= 0:  # as subprocess.run: the child killed (if not gone already), TimeoutExpired
            timed_out = True
            if status is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            break
        if sel.get_map():
            for key, _ in sel.select(timeout=min(left, 0.05)):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
        else:
            time.sleep(min(left, 0.005))
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                if not sel.get_map():
                    break
    sel.close()
    os.close(out_r)
    os.close(err_r)
    return None if timed_out else status, b"".join(chunks[out_r]), b"".join(chunks[err_r])


def serve(request_fd: int, response_fd: int) -> None:
    """Answer requests (args, env, cwd, timeout) one at a time, each in a forked child, until the pipe closes.
    The first answer says what the warm imports printed (the client stops using the server if anything)."""
    import importlib
    import tempfile
    import warnings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as onetrip.cli.main sets them before anything imports them
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # the interpreter's own warning filters, as a fresh CLI process has them: what it would print is recorded
    with tempfile.TemporaryFile() as err, warnings.catch_warnings(record=True) as caught:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            for name in WARM_IMPORTS:
                importlib.import_module(name)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        printed = err.read().decode("utf-8", "replace") + "".join(f"{w.category.__name__}: {w.message}\n"
                                                                  for w in caught)
    _send(response_fd, {"printed": printed})
    while True:
        req = _receive(request_fd)
        if req is None:
            return
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(request_fd)
            os.close(response_fd)
            os.close(out_r)
            os.close(err_r)
            _run_child(req, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        status, out, err_bytes = _collect(pid, out_r, err_r, req["timeout"])
        _send(response_fd, {"returncode": None if status is None else os.waitstatus_to_exitcode(status),
                            "stdout": base64.b64encode(out).decode(), "stderr": base64.b64encode(err_bytes).decode()})


# ------------------------------------------------------------------ client side

_lock = threading.Lock()
_server: dict[str, Any] = {}


def _start_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(START_VARIABLES)}


def _start(env: dict[str, str]) -> dict[str, Any]:
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(req_r), str(resp_w)],
                            pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL, env=env,
                            stdout=subprocess.DEVNULL)  # not a terminal, as the CLI's captured stdout is not
    os.close(req_r)
    os.close(resp_w)

    stopped = []

    def stop() -> None:  # at a restart, and at exit: once (a closed fd's number may be another file's by then)
        if stopped:
            return
        stopped.append(True)
        os.close(req_w)  # the server leaves at end of input
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.close(resp_r)

    atexit.register(stop)
    hello = _receive(resp_r)
    if hello is None or hello["printed"]:  # died, or its imports printed what each CLI call would print
        sys.stderr.write("tests/cli_forkserver.py: not forking the CLI, its warm imports printed: "
                         f"{(hello or {}).get('printed', 'nothing, and the server died')}\n")
    return {"proc": proc, "req": req_w, "resp": resp_r, "start": _start_variables(env), "stop": stop,
            "usable": hello is not None and not hello["printed"]}


def _decode(raw: bytes) -> str:
    """As ``text=True`` reads a pipe: the locale's encoding, strict, universal newlines."""
    text = raw.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, onetrip.cli, *args], capture_output=True, text=True, env=env)`, forked."""
    cmd = [sys.executable, "-m", "onetrip.cli", *args]

    def plain() -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)

    if not hasattr(os, "fork") or os.environ.get("ONETRIP_TEST_CLI") == "exec" or os.isatty(0):
        return plain()
    with _lock:
        # started again, with the caller's environment, when it died or when a variable read at import changed
        # (the test process sets some itself as it runs, TOKENIZERS_PARALLELISM, TORCHINDUCTOR_CACHE_DIR: a plain
        # subprocess for every later call had made the suite as slow as without the server)
        if _server and (_server["proc"].poll() is not None or _start_variables(env) != _server["start"]):
            _server["stop"]()
            _server.clear()
        if not _server:
            _server.update(_start(env))
        if not _server["usable"]:
            return plain()
        _send(_server["req"], {"args": args, "env": env, "cwd": os.getcwd(), "timeout": timeout})
        res = _receive(_server["resp"])
    if res is None:
        raise RuntimeError("the CLI fork server died; run with ONETRIP_TEST_CLI=exec to see the CLI alone")
    out, err = base64.b64decode(res["stdout"]), base64.b64decode(res["stderr"])
    if res["returncode"] is None:
        raise subprocess.TimeoutExpired(cmd, timeout, out, err)
    return subprocess.CompletedProcess(cmd, res["returncode"], _decode(out), _decode(err))


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: the tests' modules are not the server's
    serve(int(sys.argv[1]), int(sys.argv[2]))
