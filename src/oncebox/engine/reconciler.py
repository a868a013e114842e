"""The reconciler: refresh dirty work keys from a trusted reader, fenced by generation.

Seed 002's contract: ``dirty`` means ``generation > applied_generation``. A ticket
captures a key and its generation; the reader runs outside any transaction; completing
stores the document and advances ``applied_generation`` only while the stored generation
still equals the ticket's and was not applied yet (I6). Otherwise the read is
``superseded`` and the key stays dirty for the next pass.

Beyond that contract, many workers share the keys. A ticket is also a claim: a lease on one
key whose token comes from the store's single fencing counter and whose expiry is on the
server clock. Two workers never hold one key; an expired claim can be taken over, and
the old holder's completion is then refused by its stale token. Failures back off
exponentially with jitter; a key that keeps failing goes to operator review instead of
looping.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, TypeVar

from oncebox.domain import STALE_TOKEN, Preview, WorkItem
from oncebox.engine import fence, log
from oncebox.engine.checks import whole_number
from oncebox.engine.documents import document_text
from oncebox.engine.ingest import ActiveInbox
from oncebox.engine.steps import generation as work
from oncebox.engine.views import listed, to_read
from oncebox.errors import InvalidDocument, InvalidOperation, NotFound, WrongKey
from oncebox.logtext import escaped
from oncebox.store.base import Events, FencePort, StepTx, Store, Tx

T = TypeVar("T")


CLAIM_ATTEMPTS = 8  # keys found claimed meanwhile before a worker calls the pass idle


class WorkTx(StepTx, FencePort, Events, Protocol):
    """What a reconciler takes of a transaction: the work keys' statements (the
    ``generation`` step's), the fence its claims are leases of, and the log."""


class Intake(Protocol):
    """What a reconciler needs of the :class:`oncebox.Oncebox` it works for: its store,
    its inboxes, and write transactions whose log events are sealed with them."""

    store: Store

    def inbox(self, name: str) -> ActiveInbox: ...

    def write(self, work: Callable[[Tx], T]) -> T: ...


logger = logging.getLogger("oncebox")


class WorkKey(NamedTuple):
    seller_id: str
    sku: str
    marketplace_id: str

    def to_dict(self) -> dict[str, str]:
        return self._asdict()


class Outcome(StrEnum):
    """What one :meth:`Reconciler.refresh_once` did."""

    APPLIED = "applied"
    SUPERSEDED = "superseded"
    FAILED = "failed"
    IDLE = "idle"


class Completion(StrEnum):
    APPLIED = "applied"
    SUPERSEDED = "superseded"  # a newer event arrived during the read: still dirty
    STALE = "stale"  # another worker took the key over after this claim expired
    REPEATED = "repeated"  # this ticket already completed: nothing changes


@dataclass(frozen=True)
class Ticket:
    """A claim on one work key at one generation."""

    inbox: str
    key: WorkKey
    generation: int
    token: int
    worker: str
    expires_at: float


@dataclass(frozen=True)
class ReadResult:
    """What a reader returns: the key it actually read, and the document.

    A reader is a trusted adapter. Before returning it must check the response status and
    body, the datasets it asked for and that the response is about this seller, SKU and
    marketplace, and it must raise rather than return ``{}`` for missing data: an empty
    object is a valid document and would mark the key clean.
    """

    key: WorkKey | tuple[str, str, str]
    document: Mapping[str, Any] | str | bytes


Reader = Callable[[WorkKey], ReadResult]


@dataclass
class Backoff:
    """Exponential, capped, with jitter from an injectable random source."""

    base: float = 1.0
    cap: float = 300.0
    rng: Callable[[], float] = field(default=random.random)

    def delay(self, failures: int) -> float:
        # The exponent held under a float's range (2.0 ** 1024 raises OverflowError): far
        # past any cap, so the ceiling is the cap all the same.
        ceiling = min(self.cap, self.base * 2.0 ** min(1023, max(0, failures - 1)))
        return ceiling / 2 + self.rng() * ceiling / 2


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Reconciler:
    """One worker's view of an inbox's work keys. Make one per thread."""

    def __init__(
        self,
        box: Intake,
        inbox: str,
        reader: Reader | None = None,
        *,
        worker: str | None = None,
        claim_ttl: float = 30.0,
        max_failures: int = 5,
        backoff: Backoff | None = None,
    ) -> None:
        fence.check_ttl(claim_ttl)  # a worker that died would hold its key for good
        whole_number(max_failures, "max_failures", least=1)
        if worker is not None and not (isinstance(worker, str) and worker.isprintable()):
            raise InvalidOperation(f"a worker's name is printable text, not {worker!r:.40}")
        self.box = box
        self.store = box.store
        self.inbox = inbox
        self.inbox_id = box.inbox(inbox).row.id
        self.reader = reader
        self.worker = worker or default_worker_name()
        self.claim_ttl = claim_ttl
        self.max_failures = max_failures
        self.backoff = backoff or Backoff()

    # -- the work-key contract (docs/concepts.md#work-keys) ----------------------------
    def dirty_keys(self, limit: int = 10_000) -> list[WorkItem]:
        whole_number(limit, "a page's limit")  # SQLite's LIMIT -1 is no limit at all
        with self.store.reading() as tx:
            return work.dirty(tx, self.inbox_id, limit)

    def begin_refresh(self, key: tuple[str, str, str] | None = None) -> Ticket | None:
        """Claim ``key`` (or the next dirty key that is due) and capture its generation:
        the claim is a lease of the one fence on the key, until ``claim_ttl`` from now."""

        wanted = None if key is None else work.checked(key)

        def claim(tx: WorkTx) -> Ticket | None:
            now = tx.now()
            if wanted is not None:
                row = work.get(tx, self.inbox_id, wanted, lock=True)
                if row is None:
                    raise NotFound(f"no work key {list(wanted)} in inbox {self.inbox}")
                try:
                    return take(tx, row, now)
                except fence.LeaseHeld as held:
                    raise InvalidOperation(
                        f"work key {list(row.key)} is held by {held.lease.holder} until "
                        f"{held.lease.expires_at}"
                    ) from None
            for _ in range(CLAIM_ATTEMPTS):
                found = work.next_claimable(tx, self.inbox_id, now)
                if found is None:
                    return None
                try:
                    return take(tx, found, now)
                except fence.LeaseHeld:
                    # Claimed meanwhile: the search read the key's lease as it stood when
                    # the statement began, and another worker's claim committed since (on
                    # PostgreSQL, rows skipped while locked come free mid-statement). The
                    # next search, a new statement, sees it.
                    continue
            return None

        def take(tx: WorkTx, row: WorkItem, now: float) -> Ticket:
            lease = fence.take(
                tx, work.resource(self.inbox_id, row.key), self.worker, self.claim_ttl, now
            )
            work.claimed(tx, self.inbox_id, row.key)
            return Ticket(
                self.inbox, WorkKey(*row.key), row.generation, lease.token, self.worker,
                lease.expires_at,
            )  # fmt: skip

        return self.store.atomic(claim)

    def complete(self, ticket: Ticket, result: ReadResult) -> Completion:
        """Store the read and mark the key clean, only for the generation it was read for
        and only under the ticket's claim (the fence: its token still current, its lease
        not run out by the server clock)."""
        if not isinstance(result, ReadResult):
            raise WrongKey(f"a reader returns a ReadResult(key, document), not {result!r:.80}")
        if not isinstance(result.key, tuple | list):
            raise WrongKey(
                f"a ReadResult's key is (seller_id, sku, marketplace_id), not {result.key!r:.80}"
            )
        if tuple(result.key) != tuple(ticket.key):
            raise WrongKey(
                f"the result is for {list(result.key)}, the ticket for {list(ticket.key)}"
            )
        text = document_text(result.document)

        def settle(tx: WorkTx) -> Completion:
            row = work.get(tx, self.inbox_id, ticket.key, lock=True)
            if row is None:
                raise NotFound(f"no work key {list(ticket.key)}")
            if row.applied_token == ticket.token:
                return Completion.REPEATED
            now = tx.now()
            lease = fence.held(tx, work.resource(self.inbox_id, ticket.key))
            if fence.refused(lease, ticket.token, now) is not None:
                return Completion.STALE
            fence.release(tx, lease, ticket.token, now)
            # The generation fence (I6): equal to the ticket's and not applied yet.
            if row.generation != ticket.generation or row.applied_generation >= ticket.generation:
                work.unclaimed(tx, self.inbox_id, ticket.key)
                return Completion.SUPERSEDED
            work.apply_document(
                tx, self.inbox_id, ticket.key, text, ticket.generation, ticket.token, now
            )
            log.event(
                tx,
                "complete",
                {
                    "inbox": self.inbox,
                    "key": list(ticket.key),
                    "generation": ticket.generation,
                    "token": ticket.token,
                    "worker": ticket.worker,
                    "document_sha256": hashlib.sha256(text.encode()).hexdigest(),
                },
            )
            return Completion.APPLIED

        return self.box.write(settle)

    def fail(self, ticket: Ticket, error: str) -> bool:
        """A read failed: back off, or send the key to operator review. False if the
        failure was not counted: another worker holds the key now."""

        def count(tx: WorkTx) -> int | None:
            row = work.get(tx, self.inbox_id, ticket.key, lock=True)
            now = tx.now()
            lease = fence.held(tx, work.resource(self.inbox_id, ticket.key))
            if row is None or fence.refused(lease, ticket.token, now) == STALE_TOKEN:
                return None  # the claim is someone else's now; their attempt counts, not ours
            # A claim that ran out but that nobody took over is still this attempt's: a read
            # that hangs past it (a reader's timeout as long as the claim) counts, backs
            # off and goes to review, instead of being asked again at once without end.
            fence.release(tx, lease, ticket.token, now)
            failures = row.failures + 1
            review = failures >= self.max_failures
            work.record_failure(
                tx,
                self.inbox_id,
                ticket.key,
                failures,
                now + self.backoff.delay(failures),
                error[:2000],
                review,
            )
            if review:
                log.event(
                    tx,
                    "review",
                    {
                        "inbox": self.inbox,
                        "key": list(ticket.key),
                        "failures": failures,
                        "error": error[:500],
                    },
                )
            return failures if review else 0

        reviewed_after = self.box.write(count)
        if reviewed_after is None:
            return False
        if reviewed_after:
            # The key's repr escapes what is not printable already; the reader's error
            # may quote what the remote sent.
            logger.warning(
                "oncebox work key %r in %s failed %d times and went to review: %s",
                list(ticket.key),
                self.inbox,
                reviewed_after,
                escaped(error[:200]),
            )
        return True

    def refresh_once(self) -> Outcome:
        """Claim one due key, read it outside any transaction, and complete it. A read
        that raises, or returns what :meth:`complete` refuses (another key, a document
        that is not one, not a :class:`ReadResult` at all), is that key's failure: the
        reader is the user's code, and one key's bad read must not stop the workers."""
        if self.reader is None:
            raise InvalidOperation("this reconciler has no reader")
        ticket = self.begin_refresh()
        if ticket is None:
            return Outcome.IDLE
        try:
            result = self.reader(ticket.key)
        except Exception as exc:
            self.fail(ticket, f"{type(exc).__name__}: {exc}")
            return Outcome.FAILED
        try:
            completion = self.complete(ticket, result)
        except (WrongKey, InvalidDocument) as exc:
            self.fail(ticket, f"{type(exc).__name__}: {exc}")
            return Outcome.FAILED
        if completion is Completion.APPLIED:
            return Outcome.APPLIED
        if completion is Completion.STALE and self.fail(
            ticket, f"the read outlasted its claim ({self.claim_ttl:g} s): its result was refused"
        ):
            # Nobody took the key over: a read slower than the claim would otherwise be
            # asked again at once, and refused again, without end.
            return Outcome.FAILED
        return Outcome.SUPERSEDED

    # -- operators -----------------------------------------------------------------------
    def review(self, limit: int = 2**62, preview: Preview | None = None) -> list[WorkItem]:
        """The keys in review, in key order (with a ``preview``: as a listing shows them)."""
        whole_number(limit, "a page's limit")
        with self.store.scanning() as tx:
            rows = work.page(tx, self.inbox_id, limit, review=True, preview=to_read(preview))
        return listed(rows, preview)

    def retry(self, key: tuple[str, str, str], actor: str | None = None) -> None:
        """Send a key back from review: its failure count starts again. ``actor`` (who
        sent it: an API token's name) is recorded in the log."""

        wanted = work.checked(key)

        def send_back(tx: WorkTx) -> None:
            if not work.retry(tx, self.inbox_id, wanted):
                raise InvalidOperation(f"work key {list(wanted)} is not in review")
            log.event(tx, "retry", {"inbox": self.inbox, "key": list(wanted), "actor": actor})

        self.box.write(send_back)

    def figures(self) -> dict[str, int]:
        with self.store.reading() as tx:
            return work.figures(tx, self.inbox_id, tx.now())


def run_workers(
    box: Intake,
    inbox: str,
    reader: Reader,
    *,
    workers: int = 1,
    once: bool = False,
    stop: threading.Event | None = None,
    idle_sleep: float = 0.5,
    on_outcome: Callable[[Outcome], None] | None = None,
    **options: Any,
) -> Counter[Outcome]:
    """Run ``workers`` threads, each with its own connection, until ``stop`` is set or,
    with ``once``, until no key is due."""
    stop = stop or threading.Event()
    totals: Counter[Outcome] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    # Made here, before any thread starts: a bad option is the caller's error, raised,
    # not a traceback in each thread and no outcome at all.
    made = [
        Reconciler(box, inbox, reader, worker=f"{default_worker_name()}-{n}", **options)
        for n in range(workers)
    ]

    def run_one(number: int) -> None:
        worker = made[number]
        try:
            while not stop.is_set():
                outcome = worker.refresh_once()
                with lock:
                    totals[outcome] += 1
                if on_outcome:
                    on_outcome(outcome)
                if outcome is Outcome.IDLE:
                    if once:
                        return
                    stop.wait(idle_sleep)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run_one, args=(n,), daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return totals
