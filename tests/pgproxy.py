"""A relay between PostgreSQL clients and a server, on a unix socket of its own, that shows
every piece of traffic to a subclass as it passes: tests/pgturns.py counts round trips
and statements with it, bench/pgceiling.py records what a client sent.

Bytes are relayed unchanged, each connection by two threads (one a direction). A
subclass sees each piece twice, through :meth:`Relay.passing` before it is forwarded and
:meth:`Relay.passed` after, with the state :meth:`Relay.opened` made for its connection.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ASKS = (b"S", b"H", b"Q")  # Sync, Flush, simple Query: the client may now wait for answers


def socket_path(url: str) -> str:
    """The unix socket a ``postgresql://...?host=DIR&port=N`` URL reaches."""
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    return str(Path(query["host"]) / f".s.PGSQL.{query.get('port', '5432')}")


class ClientMessages:
    """Cuts one client's bytes into whole messages as they come: the first (the startup)
    has no type byte, each later one a type byte and then its length."""

    def __init__(self) -> None:
        self._pending = b""
        self._started = False

    def feed(self, data: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Each message ``data`` completes: its type (``b""`` for the startup) and its
        bytes, type and length included."""
        self._pending += data
        while True:
            head = 5 if self._started else 4
            if len(self._pending) < head:
                return
            whole = int.from_bytes(self._pending[head - 4 : head], "big") + (head == 5)
            if len(self._pending) < whole:
                return
            message, self._pending = self._pending[:whole], self._pending[whole:]
            kind, self._started = (message[:1] if self._started else b""), True
            yield kind, message


class Relay:
    """Listens beside the server ``server_url`` names; :meth:`via` gives a URL through it."""

    def __init__(self, server_url: str, prefix: str = "pgproxy-") -> None:
        self._upstream = socket_path(server_url)
        self._dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        Path(self._dir).chmod(0o755)
        port = self._upstream.rsplit(".", 1)[1]
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(Path(self._dir) / f".s.PGSQL.{port}"))
        self._listener.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def via(self, url: str) -> str:
        """``url`` (any database on the server) reached through this relay."""
        parts = urllib.parse.urlsplit(url)
        query = {**dict(urllib.parse.parse_qsl(parts.query)), "host": self._dir}
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))

    # What a subclass sees; ``client`` says which way the piece goes.
    def opened(self) -> Any:
        """The state kept for a new connection, handed to the two methods below."""
        return None

    def passing(self, state: Any, client: bool, data: bytes) -> None:
        """A piece about to be forwarded."""

    def passed(self, state: Any, client: bool, data: bytes) -> None:
        """A piece forwarded: the other side may have it now."""

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._upstream)
            state = self.opened()
            for source, sink, from_client in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._relay, args=(state, source, sink, from_client),
                                 daemon=True).start()  # fmt: skip

    def _relay(self, state: Any, source: socket.socket, sink: socket.socket, client: bool) -> None:
        try:
            while data := source.recv(65536):
                self.passing(state, client, data)
                sink.sendall(data)
                self.passed(state, client, data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)
