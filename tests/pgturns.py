"""A protocol-level round-trip counter: a tiny proxy between psycopg and a PostgreSQL
server that counts turns: each time the client asks for the server's answers (a Sync,
a Flush or a simple Query) and the server has not answered since it last asked.

Timing says nothing about round trips on a shared machine; the wire does. A client that
sends ten statements and one Sync, then reads their ten answers, makes one turn; one
that waits for each answer before the next makes ten. (Counting each time the client
speaks after the server did overcounts: a client writing a long pipeline reads whatever
answers have come meanwhile and then writes on, without waiting.) The proxy listens on a
unix socket of its own (``url`` is the server's URL pointed at it) and relays bytes
unchanged, reading the client's messages as they pass.

It counts statements too: each Execute of the extended protocol and each simple Query
is one statement the client sent and the server ran (what psycopg handles one by one,
pipelined or not), and :attr:`TurnCounter.sent` keeps each one's SQL text, so a test
or a profile can say which statements a delivery costs.
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

ASKS = (b"S", b"H", b"Q")  # Sync, Flush, simple Query: the client waits for answers
RUNS = (b"E", b"Q")  # Execute, simple Query: one statement each


def _cstring(body: bytes, at: int) -> tuple[str, int]:
    end = body.index(b"\0", at)
    return body[at:end].decode("utf-8", "replace"), end + 1


class TurnCounter:
    """Counts turns on every connection through it; :meth:`counting` reads a window."""

    def __init__(self, server_url: str) -> None:
        parts = urllib.parse.urlsplit(server_url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        port = query.get("port", "5432")
        self._upstream = str(Path(query["host"]) / f".s.PGSQL.{port}")
        self._dir = tempfile.mkdtemp(prefix="pgturns-", dir="/tmp")
        Path(self._dir).chmod(0o755)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(Path(self._dir) / f".s.PGSQL.{port}"))
        self._listener.listen(64)
        self.url = urllib.parse.urlunsplit(
            parts._replace(query=urllib.parse.urlencode({**query, "host": self._dir}))
        )
        self.turns = 0
        self.statements = 0
        self.sent: list[str] = []  # each statement's SQL, in the order sent
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._upstream)
            asked = [False]  # the client asked for answers the server has not begun
            threading.Thread(target=self._relay, args=(client, server, asked, True),
                             daemon=True).start()  # fmt: skip
            threading.Thread(target=self._relay, args=(server, client, asked, False),
                             daemon=True).start()  # fmt: skip

    def _relay(
        self, source: socket.socket, sink: socket.socket, asked: list[bool], from_client: bool
    ) -> None:
        pending, started = b"", False  # the client's first message (startup) has no type
        prepared: dict[str, str] = {}  # statement name -> SQL, as Parse gave it
        bound = ""  # the SQL of the statement the last Bind named
        try:
            while data := source.recv(65536):
                if not from_client:
                    with self._lock:
                        asked[0] = False
                else:
                    pending += data
                    while True:
                        head = 4 if not started else 5
                        if len(pending) < head:
                            break
                        size = int.from_bytes(pending[head - 4 : head], "big")
                        whole = size if not started else size + 1
                        if len(pending) < whole:
                            break
                        kind = pending[:1] if started else b""
                        if kind in ASKS:
                            with self._lock:
                                self.turns += not asked[0]
                                asked[0] = True
                        if kind == b"P":
                            name, at = _cstring(pending, 5)
                            prepared[name] = _cstring(pending, at)[0]
                        elif kind == b"B":
                            bound = prepared.get(_cstring(pending, _cstring(pending, 5)[1])[0], "")
                        if kind in RUNS:
                            text = _cstring(pending, 5)[0] if kind == b"Q" else bound
                            with self._lock:
                                self.statements += 1
                                self.sent.append(text)
                        pending, started = pending[whole:], True
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[int]]:
        """The turns made inside the block, in a one-item list filled when it ends."""
        found = [0]
        with self._lock:
            start = self.turns
        yield found
        with self._lock:
            found[0] = self.turns - start

    @contextlib.contextmanager
    def listing(self) -> Iterator[list[str]]:
        """The statements sent inside the block, their SQL in order, filled when it ends."""
        found: list[str] = []
        with self._lock:
            start = len(self.sent)
        yield found
        with self._lock:
            found += self.sent[start:]

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)
