"""The access log of ``oncebox serve``: one line per request, in the usual combined
format or as JSON lines (``--log-format json``).

A JSON line holds what an operator greps for: the method, the path (without its query),
the status, the inbox, the verdict of a single delivery, the latency, the bytes sent and
the client. Nothing of a request's head or body is logged beyond that, so a token never
is: not the ``Authorization`` header, not the console's sign-in form. The verdict is read
from a single delivery's answer (``"verdict":"accepted"``, a few hundred bytes), so no
handler needs to report it.

Whatever of a line the client chose (the request line, the referer, the User-Agent, the
address a trusted proxy forwarded, the path and inbox of a JSON line) is escaped by
:mod:`oncebox.logtext`, so that no request can end its line or forge another.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from datetime import UTC, datetime
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oncebox.logtext import escaped, json_line
from oncebox.surfaces.http.limits import ANSWERED

FORMATS = ("combined", "json")
Q = '"'  # escaped as well inside a combined line's quoted fields
logger = logging.getLogger("oncebox.access")
_INBOX = re.compile(r"^/v1/inboxes/([^/]+)/")
_VERDICT = re.compile(rb'"verdict":\s*"([a-z]+)"')


def install(stream: object = None) -> None:
    """Send access lines to stderr (or ``stream``) as they are, once per process."""
    if not logger.handlers:
        handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class AccessLog:
    """ASGI middleware: one access line per HTTP request, when its answer is sent."""

    def __init__(self, app: ASGIApp, form: str = "combined") -> None:
        if form not in FORMATS:
            raise ValueError(f"log format {form!r}: one of {', '.join(FORMATS)}")
        self.app = app
        self.form = form

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status, sent = 0, 0
        verdict: str | None = None
        delivery = scope["method"] == "POST" and scope["path"].endswith("/deliveries")

        async def sending(message: Message) -> None:
            nonlocal status, sent, verdict
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                sent += len(body)
                if delivery and verdict is None:
                    found = _VERDICT.search(body[:2048])
                    verdict = found.group(1).decode() if found else None
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            latency = time.perf_counter() - start
            if not status:
                # The app never answered: the server did (a deadline's 408), or the
                # client went away first (499, as nginx logs it).
                status = scope.get(ANSWERED, 499)
            logger.info(self._line(scope, status, sent, verdict, latency))

    def _line(
        self, scope: Scope, status: int, sent: int, verdict: str | None, latency: float
    ) -> str:
        client = scope.get("client") or ("-", 0)
        path: str = scope["path"]
        if self.form == "json":
            params = scope.get("path_params") or {}
            inbox = params.get("inbox")
            if inbox is None and (found := _INBOX.match(path)):
                inbox = unquote(found.group(1))
            return json_line(
                {
                    "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "client": client[0],
                    "method": scope["method"],
                    "path": path,
                    "status": status,
                    "inbox": inbox,
                    "verdict": verdict,
                    "latency_ms": round(latency * 1000, 3),
                    "bytes": sent,
                }
            )
        headers = dict(scope["headers"])
        target = scope.get("raw_path") or path.encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        request = f"{scope['method']} {target.decode('latin-1')} HTTP/{scope['http_version']}"
        stamp = datetime.now().astimezone().strftime("%d/%b/%Y:%H:%M:%S %z")
        referer = headers.get(b"referer", b"-").decode("latin-1")
        agent = headers.get(b"user-agent", b"-").decode("latin-1")
        # The client field is not quoted: a space in it (an odd forwarded value) would
        # shift every field after it, so it is escaped too, and so is a quote.
        return (
            f'{escaped(client[0], " " + Q)} - - [{stamp}] "{escaped(request, Q)}" {status} '
            f'{sent or "-"} "{escaped(referer, Q)}" "{escaped(agent, Q)}"'
        )
