"""Deadlines for a request's head and body, and a bound on open connections.

uvicorn (0.54, httptools) enforces neither. It arms no timer on a new connection, and its
keep-alive timer runs only between a response and the next request's first byte: a client
that sends a head one byte a second, or a body that never completes, holds its connection
(and what it sent) for as long as it likes. Its ``limit_concurrency`` answers 503 only once
a whole head has arrived, so idle connections over the bound are held as well.

:class:`GuardedProtocol` is uvicorn's httptools protocol with three additions, each at the
parser callback where the state it guards begins or ends:

- the **head deadline**: a request's head must be complete ``header_timeout`` seconds after
  the connection opened (for the first request) or after the request's first byte (for the
  next one on a kept-alive connection; the idle time before that byte is uvicorn's
  keep-alive timeout);
- the **body deadline**: its body must be complete ``body_timeout`` seconds after its head;
- the **connection bound**: a connection beyond ``max_connections`` open ones is answered
  503 and closed as soon as it is accepted, before anything of it is read;
- the **head bound**: a request's head (its request line and headers) holds at most
  ``max_head`` bytes. httptools sets no bound of its own and keeps a header's pieces
  until it ends, so a client sending one endless header held all of it until the head
  deadline: tens of MiB a second per connection. A head is fed to the parser a slice
  at a time and counted; one over the bound is answered 431 and closed. A chunked
  body's trailer fields are kept the same way: past its head, ``max_head`` bytes that
  carry none of the body (an endless trailer, or chunk extension) are refused alike.

A deadline that passes closes the connection, with a 408 if no response had started.
These are whole-phase deadlines, not idle timers: a byte now and then does not extend them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from oncebox.surfaces.http.problems import MEDIA_TYPE, problem_body


@dataclass(frozen=True)
class Limits:
    """What ``oncebox serve`` enforces per connection (each worker process on its own)."""

    header_timeout: float = 5.0
    body_timeout: float = 20.0
    max_connections: int = 1024
    max_head: int = 65_536  # bytes of a request's line and headers


def _canned(status: int, kind: str, detail: str, *extra: str) -> bytes:
    """A whole HTTP response with a problem document, written straight to the transport."""
    body = problem_body(status, kind, detail)
    head = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"content-type: {MEDIA_TYPE}",
        f"content-length: {len(body)}",
        "connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


TIMED_OUT = _canned(408, "timeout", "the request did not arrive in time")
# The status a connection was answered outside the app (a deadline's 408), kept in the
# request's scope for the access log.
ANSWERED = "oncebox.answered"
BUSY = _canned(503, "busy", "too many open connections", "retry-after: 1")
HEAD_TOO_LARGE = _canned(
    431, "head-too-large", "the request's line, header or trailer fields are too large"
)
# A head is parsed this much at a time, so that its size is known within this much.
HEAD_SLICE = 16_384


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and bound above (see the module)."""

    limits: ClassVar[Limits] = Limits()
    _deadline: asyncio.TimerHandle | None = None
    _head: int | None = 0  # bytes of the head arriving so far; None: not in a head
    _stalled = 0  # bytes past the head since the body last moved on (a trailer's)

    @classmethod
    def with_limits(cls, limits: Limits) -> type[GuardedProtocol]:
        """A subclass enforcing ``limits`` (uvicorn takes a protocol class, not an instance)."""
        return cast(type[GuardedProtocol], type(cls.__name__, (cls,), {"limits": limits}))

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            # Nothing of this connection has been read; nothing will be.
            transport.write(BUSY)
            transport.close()
            return
        self._arm(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a later request on a kept-alive connection
            self._arm(self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._head = None
        self._stalled = 0
        self._arm(self.limits.body_timeout)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._stalled = 0

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head = 0  # what comes next is the next request's head
        self._disarm()

    def data_received(self, data: bytes) -> None:
        while data:
            if self._head is None:  # a body, or a request being answered: as it is
                self._stalled += len(data)
                super().data_received(data)
                if self._head is None and self._stalled > self.limits.max_head:
                    self._refuse_head()  # none of it was body: a trailer's fields
                return
            piece, data = data[:HEAD_SLICE], data[HEAD_SLICE:]
            super().data_received(piece)
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # refused, or upgraded: the rest is not this parser's
            if self._head is not None:
                self._head += len(piece)
                if self._head > self.limits.max_head:
                    self._refuse_head()
                    return

    def _refuse_head(self) -> None:
        """A head (or trailer) over the bound: 431 unless an answer has started on this
        connection, and the connection closed; a request the app still runs sees a
        disconnect, as at a deadline."""
        self._disarm()
        self._close_with(HEAD_TOO_LARGE, 431)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self._close_with(TIMED_OUT, 408)

    def _close_with(self, answer: bytes, status: int) -> None:
        """Answer ``answer`` unless a response has started on this connection, then
        close it."""
        cycle: Any = self.cycle
        idle = cycle is None or cycle.response_complete  # waiting for a head
        if idle or not cycle.response_started:
            self.transport.write(answer)
            if not idle:
                cycle.scope[ANSWERED] = status  # what the access log reports for it
        if not idle:
            # The app may still be running: from now on its receive() sees a disconnect
            # and its send() writes nothing (what connection_lost will also say).
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()
