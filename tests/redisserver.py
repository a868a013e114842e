"""A throwaway redis-server on 127.0.0.1 for the tests: no persistence, stopped afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

MISSING = (
    "redis-server not found: `bash test.sh` installs it from Debian's packages "
    "(apt-get install redis-server)"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    @classmethod
    def start(cls, workdir: Path, attempts: int = 3) -> RedisServer:
        """Start on a free port (another, if that one was taken meanwhile)."""
        failure = ""
        for _ in range(attempts):
            port = free_port()
            log = workdir / f"redis-{port}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        "redis-server",
                        "--port", str(port),
                        "--bind", "127.0.0.1",
                        "--save", "",
                        "--appendonly", "no",
                        "--daemonize", "no",
                        "--dir", str(workdir),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            server = cls(process, port, log)
            if server._wait_ready(timeout=15):
                return server
            server.stop()
            failure = log.read_text("utf-8", "replace")
        raise RuntimeError(f"redis-server did not start:\n{failure}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
