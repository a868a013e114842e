"""The seeded histories that reliability/differential.py plays on both sides.

Pure: no oncebox import, so a broken tree under test cannot change the calls it is
given (its USSD trailers are computed here, not by the codec being checked). A history
is a list of steps, each a tuple whose first item names the call; a delivery is a dict
of ``Delivery`` keywords whose ``lease`` names a token symbolically (the player turns
it into the token the store issued). The same (seed, number) always gives the same
steps, and :func:`fingerprint` lets both sides prove they played the same ones.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

Step = tuple[Any, ...]
Delivery = dict[str, Any]

FEED_SCOPES = ("s1", "s2")
SITES = ("Kakuma1", "Dadaab2", "Ifo3")
NEEDS = ("MED", "WAT", "FOOD")


def inbox_specs() -> list[dict[str, Any]]:
    """The inboxes of every history, as ``InboxSpec`` keywords (names fixed)."""
    return [
        # Retention under the floor, so that an hour or two of the clock evicts.
        {
            "name": "ussd",
            "codec": "ussd-h1",
            "apply": "triage",
            "retention": "1h",
            "tombstones": "3h",
            "retention_override": "differential: evict within a history",
        },
        {"name": "listing", "codec": "json-event", "apply": "generation"},
        {"name": "feed", "codec": "feed"},
        {
            "name": "queue",
            "codec": "keyed",
            "retention": "forever",
            "tombstones": "forever",
            "forward": {
                "sink": {
                    "url": "http://127.0.0.1:9/hook",
                    "retry": ["0s", "5s", "1m"],
                    "circuit_failures": 3,
                }
            },
        },
        {
            "name": "orders",
            "codec": "json",
            "apply": "triage",
            "settings": {
                "identity": ["/id"],
                "witness_ignore": ["/attempt"],
                "max_bytes": 2048,
                "fields": {"site": "/site", "need": "/need", "headcount": "/count", "pri": "/pri"},
            },
        },
    ]


def cksum(data: bytes) -> int:
    """POSIX ``cksum``: CRC-32 (0x04C11DB7, MSB first) over the data, then its length."""
    crc = 0
    length = len(data)
    tail = bytearray()
    while length:
        tail.append(length & 0xFF)
        length >>= 8
    for byte in bytes(data) + bytes(tail):
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return ~crc & 0xFFFFFFFF


def frame(seq: int, site: str, need: str, headcount: int, pri: int) -> str:
    body = f"H1|{seq}|{site}|{need}|{headcount}|{pri}"
    return f"{body}|#{cksum(body.encode()) % 256:02x}"


class Maker:
    """Deliveries for each inbox from small pools of identities, so repeats and
    conflicts come often; about one in six is invalid, oversize or refused."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def bad(self) -> bool:
        return self.rng.random() < 0.17

    def ussd(self) -> Delivery:
        r = self.rng
        n, variant = r.randint(1, 12), r.choice((0, 0, 0, 1))
        text = frame(n, SITES[n % 3], NEEDS[(n + variant) % 3], n + 5 * variant, 40 + n)
        key = f"rec{n % 4}-{n}"
        if self.bad():
            kind = r.choice(("checksum", "format", "oversize", "mismatch", "nokey"))
            if kind == "checksum":
                text = text[:-2] + ("00" if not text.endswith("00") else "01")
            elif kind == "format":
                text = "H1|" + text[3:].replace("|", ";", 1)
            elif kind == "oversize":
                text = frame(n, "X" * 170, "MED", 1, 1)
            elif kind == "mismatch":
                key = f"rec{n % 4}-{n + 1}"
            else:
                return {"body": text}
        return {"body": text, "key": key, "device_time": f"2026-11-0{n % 9 + 1}T10:00:00Z"}

    def listing(self) -> Delivery:
        r = self.rng
        n, variant = r.randint(1, 10), r.choice((0, 0, 1))
        event: dict[str, Any] = {
            "schema_version": 1,
            "source": "feedsrc",
            "subscription": "sub-1",
            "notification_id": f"n-{n}",
            "seller_id": f"S{n % 3}",
            "sku": f"SKU-{n % 4}",
            "marketplace_id": "M1",
            "notification_type": "listing_status_changed",
            "event_time": f"2026-11-{n % 28 + 1:02d}T10:00:00Z",
            "payload": {"status": ("ACTIVE", "INACTIVE")[variant], "n": n},
        }
        members = list(event.items())
        if r.random() < 0.3:
            r.shuffle(members)  # another member order: the same canonical content
        body = json.dumps(dict(members), indent=r.choice((None, 1)))
        if self.bad():
            kind = r.choice(("unknown", "json", "time", "oversize", "number"))
            if kind == "unknown":
                body = body[:-1] + ', "extra": 1}'
            elif kind == "json":
                body = body[: len(body) // 2]
            elif kind == "time":
                body = body.replace(event["event_time"], "2026-02-30T10:00:00Z")
            elif kind == "oversize":
                body = body[:-1] + ', "pad": "' + "x" * 66_000 + '"}'
            else:
                body = body.replace(f'"n": {n}', f'"n": {n}.0')  # another spelling
        return {"body": body, "delivery_id": f"d{r.randint(1, 99)}"}

    def feed(self) -> Delivery:
        r = self.rng
        scope = r.choice(FEED_SCOPES)
        lease = r.choice(("current",) * 6 + ("stale", "forged", "none", "other"))
        body = f"row-{r.randint(1, 15)}|{r.choice(('a', 'a', 'b'))}"
        if self.bad():
            body = r.choice(("", "x" * (1_048_576 + 1)))
        return {"body": body, "snapshot_id": scope, "lease": lease}

    def queue(self) -> Delivery:
        r = self.rng
        key = f"k{r.randint(1, 10)}"
        body = f"payload {key} v{r.choice((1, 1, 1, 2))}"
        if self.bad():
            if r.random() < 0.5:
                return {"body": body}  # no key: refused missing_key
            body = "y" * 2_000  # valid here: the bound is 1 MiB; a large body all the same
        return {"body": body, "key": key}

    def orders(self) -> Delivery:
        r = self.rng
        n, variant = r.randint(1, 8), r.choice((0, 0, 1))
        doc: dict[str, Any] = {
            "id": f"o{n}",
            "site": SITES[n % 3],
            "need": NEEDS[n % 3],
            "count": n + variant,
            "pri": 10 * variant + n,
            "attempt": r.randint(1, 5),
        }
        body = json.dumps(doc)
        if self.bad():
            kind = r.choice(("noid", "json", "shape", "oversize", "field", "dupe"))
            body = {
                "noid": json.dumps({**doc, "id": ""}),
                "json": body + "}",
                "shape": "[1, 2]",
                "oversize": json.dumps({**doc, "pad": "z" * 3_000}),
                "field": json.dumps({**doc, "count": "3"}),
                "dupe": body[:-1] + ', "id": "o0"}',
            }[kind]
        return {"body": body, "key": f"ord-{n}"}

    def any(self, inbox: str) -> Delivery:
        return dict(getattr(self, inbox)())


INBOXES = ("ussd", "listing", "feed", "queue", "orders")
WEIGHTS = {
    "ingest": 30,
    "batch": 12,
    "all": 8,
    "each": 4,
    "lease": 7,
    "release": 2,
    "advance": 9,
    "evict": 3,
    "seal": 3,
    "recover": 2,
    "checkpoint": 2,
    "resolve": 4,
    "replay": 4,
    "archive": 1,
    "consume": 3,
    "forward": 3,
    "reconcile": 3,
    "reopen": 2,
    "read": 4,
    "bulk": 2,
}


RECONCILING = ("once", "claim", "takeover", "complete", "fail")


def history(seed: int, number: int, steps: int = 70) -> tuple[bool, list[Step]]:
    """(seal inline at first, the steps) of history ``number`` under ``seed``."""
    rng = random.Random(f"oncebox-differential:{seed}:{number}")
    make = Maker(rng)
    plan: list[Step] = [("lease", scope, 300.0) for scope in FEED_SCOPES]
    # Every history opens on a lease's last instant: a write at its expiry is taken, one
    # a millisecond later is not (the fence's boundary, where an off-by-one would hide).
    probe = {"body": f"probe-{number}", "snapshot_id": "s2", "lease": "current"}
    plan += [("lease", "s2", 2.0), ("advance", 2.0), ("ingest", "feed", probe)]
    plan += [("advance", 0.001), ("ingest", "feed", dict(probe, body=f"late-{number}"))]
    plan.append(("lease", "s2", 300.0))
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    for _ in range(steps):
        kind = rng.choices(names, weights)[0]
        inbox = rng.choice(INBOXES)
        if kind == "ingest":
            plan.append(("ingest", inbox, make.any(inbox)))
        elif kind in ("batch", "all", "each"):
            items = [make.any(inbox) for _ in range(rng.randint(1, 8))]
            for _ in range(rng.randint(0, 2)):  # exact repeats inside the batch
                items.insert(rng.randint(0, len(items)), dict(rng.choice(items)))
            plan.append((kind, inbox, items))
        elif kind == "lease":
            plan.append(("lease", rng.choice(FEED_SCOPES), rng.choice((2.0, 30.0, 300.0))))
        elif kind == "release":
            plan.append(("release", rng.choice(FEED_SCOPES), rng.choice(("current", "stale"))))
        elif kind == "advance":
            long = rng.random() < 0.25  # past the leases, the retention, the tombstones
            plan.append(
                (
                    "advance",
                    rng.choice((3_700.0, 7_300.0))
                    if long
                    else rng.choice((0.5, 1.0, 2.0, 2.001, 29.0, 31.0)),
                )
            )
        elif kind in ("resolve", "replay", "archive"):
            plan.append((kind, rng.randint(0, 50), rng.choice(("keep", "accept", "fix", "as is"))))
        elif kind == "consume":
            plan.append(
                (
                    "consume",
                    rng.choice(("h1", "h2")),
                    rng.randint(1, 6),
                    rng.choice(("ack", "ack", "stale ack", "none")),
                )
            )
        elif kind == "forward":
            plan.append(
                (
                    "forward",
                    rng.choice(("d1", "d2")),
                    rng.randint(1, 4),
                    [rng.choice((200, 200, 500, 429, None, 410)) for _ in range(4)],
                )
            )
        elif kind == "reconcile":
            worker, mode = rng.choice(("w1", "w2")), rng.choice(RECONCILING)
            if mode == "takeover":  # a claim run out, taken over, then completed: stale
                other = "w2" if worker == "w1" else "w1"
                plan.append(("reconcile", worker, "claim"))
                plan.append(("advance", 31.0))
                plan.append(("reconcile", other, "takeover"))
                plan.append(("reconcile", worker, "complete"))
            else:
                plan.append(("reconcile", worker, mode))
        elif kind == "read":
            plan.append(("read", inbox, f"rec{rng.randint(0, 3)}-{rng.randint(1, 12)}"))
        elif kind == "bulk":
            plan.append(("bulk", inbox, rng.choice(("replay", "archive", "keep", "accept"))))
        else:
            plan.append((kind,))
    plan.append(("read", "ussd", "rec1-1"))
    plan.append(("seal",))
    plan.append(("recover",))
    return rng.random() < 0.5, plan


def fingerprint(seal: bool, plan: list[Step]) -> str:
    """A digest of the calls, so the parent can tell both sides played the same ones."""
    text = json.dumps([seal, plan], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()
