"""Webhook senders at the HTTP edge: who may deliver without a bearer token, and how.

A webhook's sender cannot hold an oncebox token, so on an inbox whose codec declares a
webhook it authenticates each delivery by its signature instead. Three steps, all here
so that the gate, the body reader and the route read one rule:

- from the head (:meth:`Senders.begin`, for the gate): the headers the scheme needs,
  read and checked (their syntax, the signed time against the server clock, a second
  upload of one message id and signature while the first is still arriving), and room
  for the body in the worker's budget of unverified bytes; the most body such a request
  may send is its inbox codec's bound;
- as the body arrives (:class:`Signing`, for the body reader): the signature computed
  over it, so that a body is never held longer than it takes to arrive, and never past
  the budget;
- in the group commit turn (:meth:`Sender.delivery`): the signed time checked again at
  the server clock's time. A refusal is a 401 naming its reason, and nothing is stored.

Which request is a sender's, and when each step runs, the gate decides
(:mod:`oncebox.surfaces.http.auth`).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from oncebox.engine.box import Oncebox
from oncebox.errors import OnceboxError
from oncebox.formats import Delivery, Overflow, Unverified, Verified, WebhookConfig
from oncebox.formats.codec import HEAD_KEPT
from oncebox.formats.webhooks import BodyMac
from oncebox.surfaces.http.problems import RETRY_AFTER, ProblemError

DEFAULT_BUDGET = 32 * 1024 * 1024  # bytes of unverified bodies one worker holds at once
# Once this much was held, the heap's free pages are handed back when it is all let go:
# not after every small delivery, which would cost each one a walk of the heap.
HAND_BACK_AFTER = 4 * 1024 * 1024


def webhook_of(box: Oncebox, inbox: str) -> WebhookConfig | None:
    """The webhook a declared inbox's codec takes, if any."""
    try:
        codec = box.inbox(inbox).codec
    except OnceboxError:
        return None
    found = getattr(codec, "webhook", None)
    return found if isinstance(found, WebhookConfig) else None


def bound_of(box: Oncebox, inbox: str) -> int | None:
    """The most body one delivery to a declared inbox may have: its codec's bound."""
    try:
        return box.inbox(inbox).codec.max_bytes
    except OnceboxError:
        return None


class ServerClock:
    """The server clock (the store's; the database's on PostgreSQL) as the gate reads
    it for every signed head: read from the store at most every ``refresh`` seconds,
    carried forward on the monotonic clock in between, so a flood of heads costs the
    store nothing. The group commit turn still reads the store's own clock."""

    def __init__(self, read: Callable[[], float], refresh: float = 1.0) -> None:
        self._read = read
        self._refresh = refresh
        self._base = 0.0
        self._at: float | None = None

    async def now(self) -> float:
        at = self._at
        if at is None or time.monotonic() - at > self._refresh:
            base = await run_in_threadpool(self._read)
            self._base, self._at = base, at = base, time.monotonic()
        return self._base + (time.monotonic() - at)


@dataclass
class Budget:
    """The bytes of unverified bodies this worker holds (see :class:`Signing`)."""

    capacity: int
    held: int = 0
    peak: int = 0  # the most held since the heap's free pages were last handed back

    def take(self, size: int) -> bool:
        if self.held + size > self.capacity:
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def give(self, size: int) -> None:
        self.held -= size
        if self.held == 0 and self.peak >= HAND_BACK_AFTER:
            self.peak = 0
            hand_back_free_memory()


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator gives memory back itself
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def hand_back_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``). glibc
    keeps freed pages that are not at the top of its heap: the bodies a flood of idle
    uploads held, freed once they ended, stayed in the worker's RSS (+34 MiB for a
    32 MiB budget, RELIABILITY.md) until something else reused them."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@dataclass
class Signing:
    """A sender-signed request between its head and the end of its body: the signature
    computed as the body arrives, the body held within the worker's budget, and the
    message id it holds until then."""

    webhook: WebhookConfig
    mac: BodyMac
    budget: Budget
    flights: set[Hashable]
    flight: Hashable
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0  # of the chunks held
    reserved: int = 0
    done: bool = False

    def update(self, chunk: bytes) -> None:
        """Feed a chunk of the body to the signature."""
        self.mac.update(chunk)

    def hold(self, size: int) -> bool:
        """Room for ``size`` bytes of this body in the budget (False: none left)."""
        if size <= self.reserved:
            return True
        if not self.budget.take(size - self.reserved):
            return False
        self.reserved = size
        return True

    def add(self, chunk: bytes) -> bool:
        """Keep a chunk of the body, if the budget has room for it (False: none left)."""
        if not self.hold(self.size + len(chunk)):
            return False
        self.chunks.append(chunk)
        self.size += len(chunk)
        return True

    def spill(self) -> bytes:
        """The body so far, once it is past its bound: from now on only a dead letter's
        head of it is kept, and the rest of its room is given back."""
        start = self._take()
        if self.reserved > HEAD_KEPT:
            self.budget.give(self.reserved - HEAD_KEPT)
            self.reserved = HEAD_KEPT
        return start

    def finish(self) -> tuple[Verified | Unverified, bytes]:
        """The signature's verdict over the whole body, and the body if it verified;
        the budget is given back."""
        try:
            verdict: Verified | Unverified = self.mac.verdict()
        except Unverified as exc:
            verdict = exc
        body = self._take() if isinstance(verdict, Verified) else b""
        self.release()
        return verdict, body

    def release(self) -> None:
        """Let go of everything the upload held (once: it may end in several ways)."""
        if not self.done:
            self.done = True
            self.chunks, self.size = [], 0
            self.budget.give(self.reserved)
            self.reserved = 0
            self.flights.discard(self.flight)

    def _take(self) -> bytes:
        body = b"".join(self.chunks)
        self.chunks, self.size = [], 0
        return body


class Senders:
    """This worker's webhook senders: their inboxes, budget and uploads in flight."""

    def __init__(
        self,
        box: Oncebox,
        budget: int = DEFAULT_BUDGET,
        count: Callable[[str, str], None] = lambda _inbox, _reason: None,
    ) -> None:
        self.box = box
        self.budget = Budget(budget)
        self.count = count
        self.clock = ServerClock(box.store.now)
        self._flights: set[Hashable] = set()

    def webhook(self, inbox: str) -> WebhookConfig | None:
        return webhook_of(self.box, inbox)

    async def begin(
        self, inbox: str, webhook: WebhookConfig, headers: Mapping[str, str], declared: int
    ) -> Signing:
        """Check a signed request's head (see the module) and make room for its body of
        ``declared`` bytes (0 when unknown: it is then made room for as it arrives, and
        a body over the inbox's bound holds only the head a dead letter keeps). Raises
        the :class:`ProblemError` to answer instead (401, or 503 past the budget)."""
        try:
            head = webhook.head(headers, await self.clock.now())
        except Unverified as exc:
            self.count(inbox, exc.reason)
            raise refused(exc.reason, exc.detail) from None
        # An upload in flight is known by its signatures as well as its message id: a
        # stranger's slow upload under a known id and a made-up signature must not hold
        # off the sender's own (GitHub retries nothing); a replay of a real one is held.
        verified = head.verified
        flight = (inbox, verified.key or head.prefix, head.given)
        if flight in self._flights:
            self.count(inbox, "in_flight")
            raise busy("in_flight", "an upload of this message is still arriving")
        signing = Signing(webhook, webhook.mac(head), self.budget, self._flights, flight)
        bound = bound_of(self.box, inbox) or 0
        if not signing.hold(min(declared, HEAD_KEPT) if declared > bound else declared):
            self.count(inbox, "over_budget")
            raise over_budget()
        self._flights.add(flight)
        return signing


def refused(reason: str, detail: str) -> ProblemError:
    """A 401 for a sender's signature, with its reason (``missing_signature``,
    ``bad_signature_header``, ``stale_signature``, ``bad_signature``) as a member."""
    return ProblemError(
        401,
        "unauthorized",
        detail or reason,
        headers={"WWW-Authenticate": "Bearer"},  # a token is the other way in
        extra={"reason": reason},
    )


def busy(reason: str, detail: str) -> ProblemError:
    """A 503 for a sender's upload that cannot be taken now (``over_budget``,
    ``in_flight``): nothing was read or stored; the sender's retry will be."""
    return ProblemError(
        503, "busy", detail, headers={"Retry-After": RETRY_AFTER}, extra={"reason": reason}
    )


def over_budget() -> ProblemError:
    detail = "too many unverified webhook bodies are arriving at once: retry later"
    return busy("over_budget", detail)


def missing_headers(webhook: WebhookConfig) -> ProblemError:
    names = ", ".join(" or ".join(reversed(alternatives)) for alternatives in webhook.headers)
    return refused("missing_signature", f"send Authorization: Bearer <token>, or sign ({names})")


@dataclass(frozen=True)
class Sender:
    """A webhook's sender as the gate admitted it: its signature checked as its body
    arrived (``verified``; None: it had no body to stream, and the whole ``body`` is
    checked in the turn), what it delivered (``body``, or ``overflow``: the head, length
    and SHA-256 of a body over its inbox's bound), and where its refusals are counted."""

    webhook: WebhookConfig
    headers: Mapping[str, str]
    body: bytes
    verified: Verified | None
    overflow: Overflow | None
    count: Callable[[str], None]

    def delivery(self, now: float) -> Delivery:
        """In the group commit turn, at the server clock's ``now``: the delivery to
        decide (the webhook's own id as its key, the signature's facts beside it), or
        the 401 to answer if its signed time went stale as its body arrived."""
        try:
            if self.verified is None:
                facts = self.webhook.verify(self.headers, self.body, now)
            else:
                facts = self.webhook.still_fresh(self.verified, now)
        except Unverified as exc:
            self.count(exc.reason)
            raise refused(exc.reason, exc.detail) from None
        if self.overflow is not None:
            return self.overflow.delivery(key=facts.key, signature=facts)
        return Delivery(body=self.body, key=facts.key, signature=facts)
