"""A webhook receiver for the forwarding tests: it verifies every request with the official
``standardwebhooks`` package, keeps what it got, and answers as its script says."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import standardwebhooks
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example key


class Receiver:
    """Answers ``answer(n)`` to its n-th request (default 200); dedups by ``webhook-id``
    as a careful receiver does, counting what it applied."""

    def __init__(self, answer: Callable[[int], tuple[int, dict[str, str]]] | None = None) -> None:
        self.answer = answer or (lambda _n: (200, {}))
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.applied: dict[str, bytes] = {}
        self.unverified = 0
        self.lock = threading.Lock()
        self.verifier = standardwebhooks.Webhook(SECRET)
        self.app = Starlette(routes=[Route("/hooks", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        with self.lock:
            self.requests.append((headers, body))
            number = len(self.requests)
        try:
            self.verifier.verify(body, headers)
        except standardwebhooks.webhooks.WebhookVerificationError:
            with self.lock:
                self.unverified += 1
            return Response(status_code=401)
        status, extra = self.answer(number)
        if 200 <= status < 300:
            with self.lock:
                self.applied.setdefault(headers["webhook-id"], body)
        return Response(b'{"seen": %d}' % number, status_code=status, headers=extra)

    def ids(self) -> list[Any]:
        return [h["webhook-id"] for h, _ in self.requests]
