"""A protocol-level round-trip counter: a tiny proxy between psycopg and a PostgreSQL
server that counts turns: each time the client asks for the server's answers (a Sync,
a Flush or a simple Query) and the server has not answered since it last asked.

Timing says nothing about round trips on a shared machine; the wire does. A client that
sends ten statements and one Sync, then reads their ten answers, makes one turn; one
that waits for each answer before the next makes ten. (Counting each time the client
speaks after the server did overcounts: a client writing a long pipeline reads whatever
answers have come meanwhile and then writes on, without waiting.) The proxy listens on a
unix socket of its own (``url`` is the server's URL pointed at it) and relays bytes
unchanged (tests/pgproxy.py), reading the client's messages as they pass.

It counts statements too: each Execute of the extended protocol and each simple Query
is one statement the client sent and the server ran (what psycopg handles one by one,
pipelined or not), and :attr:`TurnCounter.sent` keeps each one's SQL text, so a test
or a profile can say which statements a delivery costs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from pgproxy import ASKS, ClientMessages, Relay

RUNS = (b"E", b"Q")  # Execute, simple Query: one statement each


def _cstring(body: bytes, at: int) -> tuple[str, int]:
    end = body.index(b"\0", at)
    return body[at:end].decode("utf-8", "replace"), end + 1


class _Connection:
    """One connection's client messages, the statements it prepared, and whether it has
    asked for answers the server has not begun."""

    def __init__(self) -> None:
        self.messages = ClientMessages()
        self.prepared: dict[str, str] = {}  # statement name -> SQL, as Parse gave it
        self.bound = ""  # the SQL of the statement the last Bind named
        self.asked = False


class TurnCounter(Relay):
    """Counts turns on every connection through it; :meth:`counting` reads a window."""

    def __init__(self, server_url: str) -> None:
        self.turns = 0
        self.statements = 0
        self.sent: list[str] = []  # each statement's SQL, in the order sent
        self._lock = threading.Lock()
        super().__init__(server_url, "pgturns-")
        self.url = self.via(server_url)

    def opened(self) -> _Connection:
        return _Connection()

    def passing(self, state: _Connection, client: bool, data: bytes) -> None:
        if not client:
            with self._lock:
                state.asked = False
            return
        for kind, message in state.messages.feed(data):
            if kind in ASKS:
                with self._lock:
                    self.turns += not state.asked
                    state.asked = True
            if kind == b"P":
                name, at = _cstring(message, 5)
                state.prepared[name] = _cstring(message, at)[0]
            elif kind == b"B":
                state.bound = state.prepared.get(_cstring(message, _cstring(message, 5)[1])[0], "")
            if kind in RUNS:
                text = _cstring(message, 5)[0] if kind == b"Q" else state.bound
                with self._lock:
                    self.statements += 1
                    self.sent.append(text)

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
