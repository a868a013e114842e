"""The forwarding campaign's victims (reliability/forward.py): its processes, killed with
SIGKILL and started again at once, and with ``--backend postgres --kill-pg`` the
PostgreSQL server.

A process that exits on its own is started again too, as a supervisor (systemd's
``Restart=always``) would: an ``oncebox serve`` or ``oncebox forward`` started while its
PostgreSQL server is down cannot open its store and exits, where one already running
rides the restart out (its pool reconnects).

A, its dispatcher and B keep their stores in one PostgreSQL server of the campaign's own
(tests/pgcluster.py), started durable (fsync and synchronous commit on, as a real server
runs them: with them off, a kill would take back commits the server had acknowledged,
which says nothing about oncebox). Its postmaster is killed with SIGKILL a random time
after it is up again. The backends it leaves behind exit once they see it gone, and
until the last one has, a new postmaster refuses to start on the shared memory they
still hold; so the restart, on the same data directory, socket and port, is tried again
until it takes, and the server then runs crash recovery. Meanwhile every oncebox process
loses its connections, some mid-statement or mid-commit, and must find its way back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Any

import httpx

import oncebox
from pgcluster import PgCluster

STARTED: list[subprocess.Popen[bytes]] = []  # killed on the way out, whatever happened


class Process:
    """One of the campaign's processes, started again at once after each SIGKILL. Its
    next kill is drawn from when it is up again (``health``: a URL that answers 200, or
    a test), so that each kill lands in a working process, however slowly it starts on
    a loaded machine."""

    def __init__(self, command: list[str], env: dict[str, str], health: Any = None):
        self.command, self.env, self.health = command, env, health
        self.exits = 0  # times it exited on its own, and was started again
        self.proc = self.start()
        while not callable(health) and not self.up():
            if self.proc.poll() is not None or time.monotonic() > self.began + 600:
                raise SystemExit(f"{self.command} did not start")
            time.sleep(0.1)

    def start(self) -> subprocess.Popen[bytes]:
        self.began, self.ready = time.monotonic(), self.health is None
        self.since = self.health() if callable(self.health) else None
        proc = subprocess.Popen(self.command, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        STARTED.append(proc)
        return proc

    def up(self) -> bool:
        if self.ready or self.health is None:
            return True
        if callable(self.health):
            self.ready = self.health() > self.since
            return self.ready
        with contextlib.suppress(httpx.HTTPError):
            self.ready = httpx.get(self.health, timeout=0.5).status_code == 200
        return self.ready

    def supervise(self) -> None:
        """Start it again if it exited on its own."""
        if self.proc.poll() is not None:
            self.exits += 1
            self.proc = self.start()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = self.start()

    def stop(self) -> None:
        while not self.up():  # a server killed last is still starting: let it finish
            self.supervise()
            time.sleep(0.1)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


class Postmaster:
    """The server as one of the campaign's victims: ``up``, ``kill`` (SIGKILL, then
    started again in a thread of its own, so that the other victims' kills go on) and
    ``stop`` (wait until it is up: the campaign reads both stores at the end)."""

    def __init__(self, server: Any) -> None:
        if not isinstance(server, PgCluster):
            raise SystemExit("--kill-pg needs the campaign's own server: unset ONCEBOX_TEST_PG")
        self.server = server
        self.ready = True
        self.refused = 0  # restarts refused while the old backends held on
        self.down = 0.0  # seconds without a server, over every kill

    def up(self) -> bool:
        return self.ready

    def supervise(self) -> None:
        """Nothing: it is started again by :meth:`kill` itself."""

    def kill(self) -> None:
        pid = int((self.server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        self.ready = False
        os.kill(pid, signal.SIGKILL)
        threading.Thread(target=self._restart, daemon=True).start()

    def _restart(self) -> None:
        began = time.monotonic()
        while self.server.is_running():  # the SIGKILL is on its way
            time.sleep(0.05)
        while True:
            try:
                self.server.start_again()
                break
            except RuntimeError:
                self.refused += 1
                time.sleep(0.2)
        self.down += time.monotonic() - began
        self.ready = True

    def stop(self) -> None:
        while not self.ready:
            time.sleep(0.1)

    def figures(self) -> dict[str, Any]:
        return {"restarts_refused": self.refused, "seconds_down": round(self.down, 1)}


def again(read: Any) -> Any:
    """``read()``, tried again while the store is unavailable: the campaign's own
    connections to a server killed under it are dead until its pool finds them so."""
    for _ in range(100):
        try:
            return read()
        except oncebox.StorageUnavailable:
            time.sleep(0.5)
    return read()
