"""``oncebox serve`` as a real process on a free port, and raw-socket tools to probe it."""

from __future__ import annotations

import contextlib
import json
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
from typing import IO

import oncebox

ONCEBOX = [sys.executable, "-m", "oncebox"]


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
    proc: subprocess.Popen[bytes]
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
    command = [*ONCEBOX, "serve", "--port", str(port), *workers, *args]
    proc = subprocess.Popen(command, env=env, stderr=stderr)
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
