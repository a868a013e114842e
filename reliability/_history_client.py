"""The processes of the delivery-history run: the clients and the reconciler workers.

A client owns a deterministic queue of deliveries (its plan, regenerated from the seed on
every start) and an append-only JSON-lines history. Before each call it writes an
``attempt`` line (what it sends: inbox, identity, content digest, kind) and after it an
``outcome`` line (the decision, or the exception class), flushed each time. A SIGKILL
mid-call leaves an attempt without an outcome: indeterminate. On restart the client
reads its history, skips every delivery that has a decision and sends the rest again,
the cut-off one first: at-least-once, as a real sender with no receipts would.

A worker refreshes the ``listing`` inbox's work keys with claims and records each ticket
before its read and each completion after it, so a worker paused past its claim shows
up as a ``stale`` completion in its history.

Run by reliability/history.py; ``python _history_client.py client|worker ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LEASE_TTL = 20.0  # seconds on the server clock
PROBE_TTL = 0.5  # an expired-lease probe waits this long on the server clock
CLAIM_TTL = 1.5  # a reconciler claim; the nemesis pauses a worker longer than this
READ_SECONDS = 0.15  # a worker's read: most of its time is spent holding a claim
SHARED = 48  # identities per inbox that every client may send
RETRY_LIMIT = 400  # attempts of one delivery before the client gives it up
SURPRISE_LIMIT = 10  # ... when the errors are not StorageError (a bug, not an outage)
BATCH = 4  # USSD frames per ingest_batch attempt, when batched

SITES = ("K01", "K02", "K03", "K04", "K05", "K06")
NEEDS = ("MED", "FOO", "WAT", "SHL", "NFI")
SELLERS = 5
SKUS = 8  # SELLERS x SKUS work keys: small, so events arrive while workers read
MARKETPLACE = "A1PA6795UKMFR9"


@dataclass(frozen=True)
class Item:
    """One planned delivery: what is sent and why."""

    k: int
    inbox: str
    kind: str  # new, shared, redelivery, conflict, corrupt, probe_expired, probe_stale
    body: bytes
    key: str | None  # the gateway's frame id (ussd)
    identity: str | None  # None when the body is deliberately invalid
    witness: str | None
    origin: int  # the item this one redelivers (itself otherwise)

    @property
    def probe(self) -> bool:
        return self.kind.startswith("probe")

    def sent(self) -> dict[str, Any]:
        """What an attempt line says about this item."""
        return {
            "k": self.k,
            "inbox": self.inbox,
            "kind": self.kind,
            "identity": self.identity,
            "witness": self.witness,
            "body_sha256": _sha256(self.body),
        }


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# -- the plan ---------------------------------------------------------------------------


def _frame(seq: int, n: int, variant: int) -> bytes:
    from oncebox.formats.ussd_h1 import make_frame

    headcount = 1 + n % 9 + 10 * variant
    site, need = SITES[n % len(SITES)], NEEDS[n % len(NEEDS)]
    return make_frame(seq, site, need, headcount, n % 100).encode()


def _event(notification_id: str, n: int, variant: int) -> bytes:
    event = {
        "schema_version": 1,
        "source": "sp-api",
        "subscription": "sub-eu-1",
        "notification_id": notification_id,
        "seller_id": f"SELLER{n % SELLERS}",
        "sku": f"SKU-{(n // SELLERS) % SKUS:02d}",
        "marketplace_id": MARKETPLACE,
        "notification_type": ("listing_status_changed", "listing_issues_changed")[n % 2],
        "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_772_280_000 + n)),
        "payload": {"status": "BUYABLE", "price": n % 1000 + 1000 * variant},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def _corrupt(frame: bytes) -> bytes:
    """The same frame with a checksum trailer that cannot match."""
    body, _, trailer = frame.rpartition(b"|#")
    wrong = (int(trailer, 16) + 1) % 256
    return body + b"|#" + f"{wrong:02x}".encode()


def _identify(inbox: str, body: bytes, key: str | None) -> tuple[str | None, str | None]:
    """Identity and witness by the inbox's codec (the pure layer), or None if invalid."""
    from oncebox import Delivery
    from oncebox.engine.config import DEFAULT_INBOXES
    from oncebox.engine.ingest import prepare
    from oncebox.formats import get_codec

    codec = get_codec(next(spec.codec for spec in DEFAULT_INBOXES if spec.name == inbox))
    prepared = prepare(codec, Delivery(body, key=key))
    if prepared.identity is None:
        return None, None
    return prepared.identity.identity, prepared.identity.witness


def make_plan(seed: int, client: int, count: int) -> list[Item]:
    """The client's queue: ``count`` planned deliveries plus the valid copies that follow
    corrupted ones. Deterministic, so a restarted client rebuilds the same queue."""
    rng = random.Random(seed * 1_000_003 + client)
    items: list[Item] = []
    own: dict[str, list[int]] = {"ussd": [], "listing": []}
    own_n: dict[int, int] = {}  # an own item's number, to build its conflicting variants

    def add(inbox: str, kind: str, body: bytes, key: str | None, origin: int | None = None) -> None:
        k = len(items)
        identity, witness = _identify(inbox, body, key)
        first = k if origin is None else origin
        items.append(Item(k, inbox, kind, body, key, identity, witness, first))

    for j in range(count):
        redeliverable = [
            i for i in items if i.kind not in ("corrupt", "redelivery") and not i.probe
        ]
        if redeliverable and rng.random() < 0.30:
            first = rng.choice(redeliverable)
            add(first.inbox, "redelivery", first.body, first.key, first.k)
            continue
        inbox = rng.choices(("ussd", "listing", "feed"), weights=(45, 35, 20))[0]
        r = rng.random()
        if inbox == "feed":
            if r < 0.015:
                add("feed", "probe_expired", f"probe c{client} j{j} expired".encode(), None)
            elif r < 0.03:
                add("feed", "probe_stale", f"probe c{client} j{j} stale".encode(), None)
            elif r < 0.18:
                add("feed", "shared", f"feed row shared {rng.randrange(SHARED)}".encode(), None)
            else:
                add("feed", "new", f"feed row c{client} j{j} {rng.random():.6f}".encode(), None)
            continue
        n = rng.randrange(1_000_000)
        if r < 0.12 or (r < 0.17 and not own[inbox]):
            s = rng.randrange(SHARED)
            if r < 0.12:
                kind, variant = "shared", 0
            else:
                kind, variant = "conflict", rng.choice((1, 2))
            if inbox == "ussd":
                add(inbox, kind, _frame(1, s, variant), f"s{s}-1")
            else:
                add(inbox, kind, _event(f"s-n{s}", s, variant), None)
        elif r < 0.17:  # a conflicting variant of one of this client's own identities
            first = items[rng.choice(own[inbox])]
            variant = rng.choice((1, 2))
            if inbox == "ussd":
                add(inbox, "conflict", _frame(1, own_n[first.k], variant), first.key)
            else:
                nid = json.loads(first.body)["notification_id"]
                add(inbox, "conflict", _event(nid, own_n[first.k], variant), None)
        elif r < 0.19 and inbox == "ussd":  # corrupted in transit, then a valid copy
            key = f"c{client}r{n}x{j}-1"
            frame = _frame(1, n, 0)
            add(inbox, "corrupt", _corrupt(frame), key)
            add(inbox, "new", frame, key)
            own[inbox].append(len(items) - 1)
            own_n[len(items) - 1] = n
        else:
            if inbox == "ussd":
                add(inbox, "new", _frame(1, n, 0), f"c{client}r{n}x{j}-1")
            else:
                add(inbox, "new", _event(f"c{client}-j{j}x{n}", n, 0), None)
            own[inbox].append(len(items) - 1)
            own_n[len(items) - 1] = n
    return items


# -- histories --------------------------------------------------------------------------


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every complete line; a torn last line (killed mid-write) is ignored."""
    lines: list[dict[str, Any]] = []
    if not path.exists():
        return lines
    for raw in path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines


class History:
    """An append-only JSON-lines file, flushed after every line."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a")

    def write(self, **line: Any) -> None:
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()


def _decision(d: Any) -> dict[str, Any]:
    return {
        "verdict": str(d.verdict),
        "may_ack": d.may_ack,
        "reason": d.reason,
        "identity": d.identity,
        "witness": d.witness,
        "record_id": d.record_id,
        "quarantine_id": d.quarantine_id,
        "first_quarantine": d.first_quarantine,
        "dead_letter_id": d.dead_letter_id,
    }


FENCED = ("stale_token", "expired_lease")


def settled(lines: list[dict[str, Any]]) -> tuple[set[int], set[int]]:
    """From a client's history: the items that have a decision the client may act on
    (acknowledged, or a probe answered), and those whose last attempt has no outcome."""
    attempts: dict[int, list[dict[str, Any]]] = {}
    decided: set[int] = set()
    answered: set[int] = set()
    for line in lines:
        if line["t"] == "attempt":
            attempts[line["a"]] = line["items"]
        elif line["t"] == "outcome":
            answered.add(line["a"])
            if line["kind"] == "decision":
                for sent, d in zip(attempts.get(line["a"], []), line["decisions"], strict=True):
                    if d["may_ack"] or sent["kind"].startswith("probe"):
                        decided.add(sent["k"])
    last: dict[int, int] = {}
    for a, sent_items in attempts.items():
        for sent in sent_items:
            last[sent["k"]] = max(a, last.get(sent["k"], 0))
    cut_off = {k for k, a in last.items() if a not in answered and k not in decided}
    return decided, cut_off


# -- the client -------------------------------------------------------------------------


class Client:
    """Delivers its plan at least once, whatever happens to it or to the server."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.number: int = args.client
        self.url: str = args.url
        self.plan = make_plan(args.seed, args.client, args.deliveries)
        self.path = Path(args.history)
        past = read_history(self.path)
        self.decided, self.cut_off = settled(past)
        self.next_attempt = 1 + max((line["a"] for line in past if "a" in line), default=0)
        self.tries: dict[int, int] = {}
        for line in past:
            if line["t"] == "attempt":
                for sent in line["items"]:
                    self.tries[sent["k"]] = self.tries.get(sent["k"], 0) + 1
        self.restarts = sum(1 for line in past if line["t"] == "start")
        self.history = History(self.path)
        self.history.write(t="start", pid=os.getpid(), skew=args.skew, restarts=self.restarts)
        self.box: Any = None
        self.lease: Any = None
        self.surprises = 0
        self.lease_taken = 0.0

    # Everything the client says goes through the history first.
    def run(self) -> None:
        pending = [item for item in self.plan if item.k not in self.decided]
        i = 0
        while i < len(pending):
            item = pending[i]
            group = [item]
            if item.inbox == "ussd" and item.k % 3 == 0:
                while (
                    len(group) < BATCH
                    and i + len(group) < len(pending)
                    and pending[i + len(group)].inbox == "ussd"
                ):
                    group.append(pending[i + len(group)])
            self.deliver(group)
            i += len(group)
        self.history.write(t="done")

    def deliver(self, group: list[Item]) -> None:
        """Send until every item has a decision it may act on."""
        self.surprises = 0
        while True:
            tries = max(self.tries.get(item.k, 0) for item in group)
            if tries >= RETRY_LIMIT or self.surprises >= SURPRISE_LIMIT:
                self.history.write(t="abandoned", items=[item.k for item in group])
                return
            if self.attempt(group):
                return

    def attempt(self, group: list[Item]) -> bool:
        import oncebox
        from oncebox import Delivery

        item = group[0]
        try:  # before anything is sent: opening the store, taking a lease, reading t0
            box = self.open()
            facts: dict[str, Any] = {"device_time": f"{time.time():.3f}"}
            lease: dict[str, Any] | None = None
            if item.inbox == "feed":
                lease = self.feed_lease(item)
                facts |= {"snapshot_id": lease["scope"], "lease_token": lease["use_token"]}
            t0 = box.store.now() if lease else None
        except Exception as exc:
            self.history.write(t="setup_error", error=type(exc).__name__, message=str(exc)[:300])
            self.trouble(exc)
            return False
        a = self.next_attempt
        self.next_attempt += 1
        for sent in group:
            self.tries[sent.k] = self.tries.get(sent.k, 0) + 1
        resend = any(sent.k in self.cut_off for sent in group)
        self.cut_off.difference_update(sent.k for sent in group)
        self.history.write(
            t="attempt", a=a, items=[i.sent() for i in group], resend=resend,
            lease=lease, t0=t0, device_time=facts["device_time"],
        )  # fmt: skip
        try:
            if len(group) == 1:
                decisions = [box.ingest(item.inbox, Delivery(item.body, key=item.key, **facts))]
            else:
                decisions = box.ingest_batch(
                    item.inbox, [Delivery(i.body, key=i.key, **facts) for i in group]
                )
        except Exception as exc:
            self.history.write(
                t="outcome", a=a, kind="error", error=type(exc).__name__, message=str(exc)[:300]
            )
            self.trouble(exc)
            return False
        t1 = None
        if lease:
            with contextlib.suppress(oncebox.StorageError):
                t1 = box.store.now()
        self.history.write(
            t="outcome", a=a, kind="decision", decisions=[_decision(d) for d in decisions], t1=t1
        )
        if item.inbox == "feed" and not item.probe and decisions[0].reason in FENCED:
            self.lease = None  # fenced out: take a fresh lease and deliver again
            return False
        return all(d.may_ack for d in decisions) or item.probe

    def trouble(self, exc: Exception) -> None:
        """After an error: a fresh connection if it was not the store's, and a pause."""
        import oncebox

        if not isinstance(exc, oncebox.StorageError):
            self.surprises += 1
            self.close()
        time.sleep(random.uniform(0.05, 0.3))

    def feed_lease(self, item: Item) -> dict[str, Any]:
        """The lease this feed delivery is sent under: the client's own, or a probe's."""
        box = self.box
        scope = f"probe-{self.number}"
        if item.kind == "probe_expired":
            lease = box.lease("feed", scope, PROBE_TTL)
            self.history.write(
                t="lease", scope=scope, token=lease.token, expires_at=lease.expires_at
            )
            while box.store.now() <= lease.expires_at:  # past it on the server clock
                time.sleep(0.1)
            return {
                "scope": scope,
                "token": lease.token,
                "use_token": lease.token,
                "expires_at": lease.expires_at,
                "expect": "expired_lease",
            }
        if item.kind == "probe_stale":
            old = box.lease("feed", scope, LEASE_TTL)
            new = box.lease("feed", scope, LEASE_TTL)
            self.history.write(t="lease", scope=scope, token=old.token, expires_at=old.expires_at)
            self.history.write(t="lease", scope=scope, token=new.token, expires_at=new.expires_at)
            return {
                "scope": scope,
                "token": new.token,
                "use_token": old.token,
                "expires_at": old.expires_at,
                "expect": "stale_token",
            }
        if self.lease is None or time.monotonic() - self.lease_taken > LEASE_TTL / 2:
            scope = f"client-{self.number}"
            self.lease = box.lease("feed", scope, LEASE_TTL)
            self.lease_taken = time.monotonic()
            self.history.write(
                t="lease", scope=scope, token=self.lease.token, expires_at=self.lease.expires_at
            )
        return {
            "scope": self.lease.scope,
            "token": self.lease.token,
            "use_token": self.lease.token,
            "expires_at": self.lease.expires_at,
            "expect": None,
        }

    def open(self) -> Any:
        import oncebox

        if self.box is None:
            self.box = oncebox.open(self.url)
        return self.box

    def close(self) -> None:
        if self.box is not None:
            with contextlib.suppress(Exception):
                self.box.close()
        self.box = None
        self.lease = None


# -- the reconciler worker ----------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Refresh listing work keys until the stop file appears and nothing is due."""
    import oncebox
    from oncebox.engine.reconciler import Backoff, ReadResult
    from oncebox.engine.steps import generation

    history = History(Path(args.history))
    history.write(t="start", pid=os.getpid())
    stop = Path(args.stop)
    box = None
    while box is None:
        try:
            box = oncebox.open(args.url)
        except oncebox.StorageError:
            time.sleep(0.2)
    inbox_id = box.inbox("listing").row.id
    recon = box.reconciler(
        "listing",
        None,
        worker=args.name,
        claim_ttl=CLAIM_TTL,
        max_failures=10_000,
        backoff=Backoff(base=0.05, cap=0.5),
    )
    while True:
        try:
            ticket = recon.begin_refresh()
        except oncebox.StorageError:
            time.sleep(0.2)
            continue
        if ticket is None:
            if stop.exists():
                break
            time.sleep(0.05)
            continue
        history.write(
            t="ticket",
            key=list(ticket.key),
            generation=ticket.generation,
            token=ticket.token,
            expires_at=ticket.expires_at,
        )
        try:
            with box.store.reading() as tx:
                row = generation.get(tx, inbox_id, ticket.key)
                seen = row.generation if row else -1
            time.sleep(READ_SECONDS)  # a trusted reader's round trip
            document = {"read_at_generation": seen, "worker": args.name, "token": ticket.token}
            completion = recon.complete(ticket, ReadResult(ticket.key, document))
        except oncebox.StorageError as exc:
            history.write(
                t="complete", token=ticket.token, outcome="error", error=type(exc).__name__
            )
            time.sleep(0.2)
            continue
        history.write(t="complete", token=ticket.token, outcome=str(completion))
    history.write(t="done")


def _iter_args(argv: list[str]) -> Iterator[argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    c = sub.add_parser("client")
    c.add_argument("--url", required=True)
    c.add_argument("--client", type=int, required=True)
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--deliveries", type=int, required=True)
    c.add_argument("--history", required=True)
    c.add_argument("--skew", type=float, default=0.0)
    w = sub.add_parser("worker")
    w.add_argument("--url", required=True)
    w.add_argument("--name", required=True)
    w.add_argument("--history", required=True)
    w.add_argument("--stop", required=True)
    yield parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = next(_iter_args(argv))
    if args.role == "client" and args.skew:
        # This host's clock is wrong: device times (and anything else reading time.time)
        # are off by the skew. Only the database clock may decide leases.
        real = time.time
        time.time = lambda: real() + args.skew
    if args.role == "client":
        Client(args).run()
    else:
        worker(args)


if __name__ == "__main__":
    main(sys.argv[1:])
