"""Servers for bench/peers.py: Debian's packages, on free ports, with their data in the
run's temporary directory, stopped when the run ends or fails, and killed with it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def log(message: str) -> None:
    print(f"[peers] {message}", file=sys.stderr, flush=True)


def ensure_installed(binary: str) -> str:
    """The server's path; apt-get installs the Debian package of that name if missing."""
    def find() -> str | None:
        return shutil.which(binary, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")

    if (found := find()) is None:
        log(f"installing {binary} from Debian's packages")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", binary]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, check=True)
        if (found := find()) is None:
            raise SystemExit(f"{binary}: not found after apt-get install {binary}")
    return found


def server_version(path: str) -> str:
    text = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"v=?(\d+\.\d+\.\d+)", text)
    return match.group(1) if match else text.strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process: SIGKILL when this benchmark dies, however it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def server(argv: list[str], port: int, log_path: Path) -> Iterator[None]:
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[0]} did not start (exit {proc.returncode}):\n"
                                 f"{log_path.read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
