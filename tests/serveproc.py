"""``oncebox serve`` as a real process on a free port, and raw-socket tools to probe it."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from multiprocessing import reduction
from typing import IO, Any, Protocol

import oncebox

ONCEBOX = [sys.executable, "-m", "oncebox"]

# What `oncebox serve` imports before it answers: two seconds of CPU per start, paid once
# per test worker by a fork server that imports them and then forks a server per test.
PRELOAD = [
    "oncebox.surfaces.cli",
    "oncebox.surfaces.serve",
    "oncebox.surfaces.http",
    "oncebox.surfaces.http.server",
    "oncebox.surfaces.http.limits",
    "oncebox.surfaces.forwarding.dispatcher",
    "oncebox.store.sqlite",
    "oncebox.store.postgres",
    "uvloop",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
]
_forks: Any = None


class Process(Protocol):
    """What the tests use of a server's process: a :class:`subprocess.Popen`'s."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


class _Fd:
    """A descriptor of this process's, given to the forked child (a copy of it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        return (_detached, (reduction.DupFd(self.fd),))


def _detached(dup: Any) -> int:
    return int(dup.detach())


def _run_cli(args: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> None:
    """In the fork: ``oncebox ARGS`` as ``python -m oncebox`` runs it, with the caller's
    environment, directory and standard output and error (the test's capture, or its
    log), and /dev/null for input, as the process it stands for."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for target, fd in zip((1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = ["oncebox", *args]
    from oncebox.surfaces.cli import main

    main()


class Forked:
    """A server forked from the fork server, seen as a :class:`subprocess.Popen`."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        self.pid = int(process.pid or 0)

    def poll(self) -> int | None:
        return None if self._process.is_alive() else self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["oncebox", "serve"], timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        self._process.kill()


def forked(args: list[str], env: Mapping[str, str], stderr: IO[bytes] | None) -> Forked:
    """``oncebox ARGS`` in a child of the fork server (started at the first call)."""
    global _forks
    if _forks is None:
        _forks = multiprocessing.get_context("forkserver")
        _forks.set_forkserver_preload(PRELOAD)
    sys.stdout.flush()
    sys.stderr.flush()
    err = stderr.fileno() if stderr is not None else 2
    process = _forks.Process(
        target=_run_cli, args=(args, dict(env), os.getcwd(), [_Fd(1), _Fd(err)])
    )
    process.start()
    return Forked(process)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def create_token(url: str, *scopes: str) -> str:
    """A token for every inbox of the store at ``url`` (built-in inboxes)."""
    box = oncebox.open(url)
    try:
        return box.create_token("probe", ["*"], list(scopes) or ["write"]).secret
    finally:
        box.close()


@dataclass
class Served:
    proc: Process
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


def get(url: str, secret: str | None = None, body: bytes | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request; error statuses are returned, not raised."""
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@contextlib.contextmanager
def serving(
    url: str,
    *args: str,
    started: float = 120.0,
    env: Mapping[str, str] | None = None,
    stderr: IO[bytes] | None = None,
) -> Iterator[Served]:
    """``oncebox --db URL serve --port P [--workers 1] ARGS`` until the block ends
    (then SIGTERM), with ``env`` added to the environment (``ONCEBOX_CONFIG``, a
    webhook's secret) and its standard error (the access log among it) to ``stderr``
    when given."""
    port = free_port()
    env = {**os.environ, **(env or {}), "ONCEBOX_DB": url}
    # One worker process unless the test asks for more: the default, one per CPU, is
    # whatever the machine running the suite has (so no test could count on it), and
    # each worker builds the app again, a second of CPU. test_serve_workers.py and
    # test_forward_serve.py ask for two and prove what several workers must do.
    workers = [] if "--workers" in args else ["--workers", "1"]
    command = ["serve", "--port", str(port), *workers, *args]
    # A crash point is read when its module is imported, which the fork server did
    # before this test armed one: such a server starts as a process of its own.
    proc: Process
    if "ONCEBOX_CRASH_AT" in env:
        proc = subprocess.Popen([*ONCEBOX, *command], env=env, stderr=stderr)
    else:
        proc = forked(command, env, stderr)
    if os.environ.get("ONCEBOX_TEST_CPU"):  # counted beside each test's CPU (conftest.py)
        with open(os.environ["ONCEBOX_TEST_CPU"], "a") as log:
            log.write(json.dumps({"serve": os.environ.get("PYTEST_CURRENT_TEST", "")}) + "\n")
    served = Served(proc, port)
    try:
        deadline = time.monotonic() + started
        while True:
            try:
                if get(f"{served.base}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, "oncebox serve exited"
            assert time.monotonic() < deadline, "oncebox serve did not start"
            time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def head(path: str, length: int | None, *headers: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the peer closes (True) or ``seconds`` pass (False); what was read."""
    deadline = time.monotonic() + seconds
    got = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, got
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False, got
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk


def status_of(answer: bytes) -> int | None:
    """The status code of the first response in ``answer``, if one began."""
    if not answer.startswith(b"HTTP/1.1 "):
        return None
    return int(answer.split(b" ", 2)[1])


def json_of(answer: bytes) -> dict:
    return dict(json.loads(answer.split(b"\r\n\r\n", 1)[1]))
