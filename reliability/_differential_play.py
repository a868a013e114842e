"""One side of reliability/differential.py: play the histories, write a canonical dump.

Run by the parent as ``python _differential_play.py --backend B --out FILE ...`` with
``PYTHONPATH=<side>/src``, so ``oncebox`` is that side's and no module is shared with
the other side. Every history runs on a fresh store under a ``ManualClock``; the dump
holds each step's results (decisions as their dicts, errors as type and message), then
every table of the store with its rows in a stable order, the log's entries, ``verify``
and proofs (made plain in reliability/_differential_dump.py). ``meta.store_id``, which
the schema draws at random and which names checkpoints and idempotency keys, is set to a
fixed value right after opening; the only values not compared are ``NOT_COMPARED``.
With ``--cross`` (one code on two backends, reliability/_differential_cross.py) the
picks that would go by id position go by what the rows hold, since each backend numbers
its rows in its own way.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import oncebox
from _differential_dump import Logged, fix_eviction_order, outcome, plain, tables
from _differential_history import Delivery, Maker, Step, fingerprint, frame, history, inbox_specs
from oncebox.engine.outbox import Sent
from oncebox.engine.reconciler import Backoff, ReadResult

START = 1_800_000_000.0
STORE_ID = "differential-store"
# With ``cross``, picks go by what rows hold, never by their ids (see Player.in_order).
QUARANTINE_ORDER = ("inbox_id", "ident", "witness", "first_seen", "last_seen", "seen_count")
LETTER_ORDER = ("inbox_id", "received_at", "sha256", "reason", "key", "attempts")
BULK_ALL = 500


class Player:
    """Plays one history on one store, turning symbolic tokens and picks into calls."""

    def __init__(
        self, url: str, seal: bool, reopenable: bool, backend: str, cross: bool = False
    ) -> None:
        self.url, self.seal, self.reopenable, self.backend = url, seal, reopenable, backend
        self.cross = cross
        self.clock = oncebox.ManualClock(START)
        self.tokens: dict[str, list[int]] = {}
        self.holders: dict[str, int] = {}
        self.tickets: list[Any] = []
        self.reads = 0
        self.deliveries = 0
        self.box = self._open()
        mark = "?" if backend == "sqlite" else "%s"
        self.box.write(
            lambda tx: tx.execute(
                f"UPDATE meta SET value = {mark} WHERE key = 'store_id'", (STORE_ID,)
            )
        )

    def _open(self) -> oncebox.Oncebox:
        specs = [oncebox.InboxSpec(**spec) for spec in inbox_specs()]
        return oncebox.open(self.url, inboxes=specs, clock=self.clock, seal=self.seal)

    def token(self, scope: str, which: str | None) -> int | None:
        held = self.tokens.get(scope, [])
        if which == "current":
            return held[-1] if held else None
        if which == "stale":
            return held[-2] if len(held) > 1 else None
        if which == "forged":
            return (held[-1] if held else 0) + 1000
        if which == "other":
            other = [s for s in self.tokens if s != scope]
            return self.tokens[other[0]][-1] if other else None
        return None

    def delivery(self, item: Delivery) -> oncebox.Delivery:
        self.deliveries += 1
        facts = {k: v for k, v in item.items() if k not in ("body", "lease")}
        if "lease" in item:
            facts["lease_token"] = self.token(item["snapshot_id"], item["lease"])
        return oncebox.Delivery(item["body"].encode(), **facts)

    def reader(self, failing: bool) -> Callable[[Any], ReadResult]:
        def read(key: Any) -> ReadResult:
            if failing:
                raise RuntimeError(f"reader down for {list(key)}")
            self.reads += 1
            return ReadResult(key, {"key": list(key), "read": self.reads})

        return read

    def reconciler(self, worker: str, failing: bool = False) -> Any:
        return self.box.reconciler(
            "listing",
            self.reader(failing),
            worker=worker,
            claim_ttl=30.0,
            max_failures=2,
            backoff=Backoff(rng=lambda: 0.5),
        )

    def step(self, step: Step) -> Any:
        box, kind = self.box, step[0]
        if kind == "ingest":
            return outcome(lambda: box.ingest(step[1], self.delivery(step[2])).to_dict())
        if kind in ("batch", "all", "each"):
            items = [self.delivery(item) for item in step[2]]
            call: dict[str, Callable[[str, list[oncebox.Delivery]], Sequence[Any]]] = {
                "batch": box.ingest_batch,
                "all": box.ingest_all,
                "each": box.ingest_each,
            }
            return outcome(
                lambda: [
                    d.to_dict()
                    if hasattr(d, "to_dict")
                    else {"error": type(d).__name__, "message": str(d)}
                    for d in call[kind](step[1], items)
                ]
            )
        if kind == "lease":
            got = outcome(lambda: box.lease("feed", step[1], step[2]))
            if "ok" in got:
                self.tokens.setdefault(step[1], []).append(got["ok"]["token"])
            return got
        if kind == "release":
            return outcome(lambda: box.release("feed", step[1], self.token(step[1], step[2]) or 0))
        if kind == "advance":
            self.clock.advance(step[1])
            return self.clock.now
        if kind == "evict":
            return outcome(box.evict)
        if kind == "seal":
            return outcome(box.seal)
        if kind == "recover":
            return outcome(box.recover)
        if kind == "checkpoint":
            return [outcome(box.checkpoint), outcome(lambda: box.verify().to_dict())]
        if kind == "resolve":
            return self.resolve(step[1], step[2])
        if kind == "replay":
            return self.replay(step[1], step[2])
        if kind == "archive":
            return outcome(lambda: box.archive(self.letter(step[1]), "ops", "set aside"))
        if kind == "consume":
            return self.consume(*step[1:])
        if kind == "forward":
            return self.forward(*step[1:])
        if kind == "reconcile":
            return self.reconcile(*step[1:])
        if kind == "read":
            return self.read(step[1], step[2])
        if kind == "bulk":
            return self.bulk(step[1], step[2])
        if kind == "reopen":
            if not self.reopenable:
                return "in memory: not reopened"
            box.close()
            self.seal = not self.seal
            self.box = self._open()
            return {"seal": self.seal, "recovered_at_open": self.box.recovered_at_open}
        raise ValueError(f"unknown step {kind}")

    def resolve(self, pick: int, how: str) -> Any:
        rows = self.in_order(self.box.quarantined(None, "open"), QUARANTINE_ORDER)
        if not rows:
            return "no open conflict"
        action = "accept" if how in ("accept", "fix") else "keep"
        chosen = rows[pick % len(rows)].id
        return outcome(lambda: self.box.resolve(chosen, action, f"{action} it", actor="ops"))

    def letter(self, pick: int) -> int:
        rows = self.in_order(self.box.dead_letters(None, status="open"), LETTER_ORDER)
        return rows[pick % len(rows)].id if rows else 0

    def in_order(self, rows: list[Any], fields: tuple[str, ...]) -> list[Any]:
        """Rows in id order, or with ``cross`` by what they hold: ids are allocated
        differently by each backend, so a pick by id position is not the same pick."""
        if not self.cross:
            return rows
        return sorted(rows, key=lambda row: json.dumps(plain([getattr(row, f) for f in fields])))

    def replay(self, pick: int, how: str) -> Any:
        letter_id = self.letter(pick)
        found = self.box.get_dead_letter(letter_id)
        if found is None:
            return outcome(lambda: self.box.replay(letter_id, actor="ops"))
        inbox, row = found
        token = self.token(row.snapshot_id, "current") if row.snapshot_id else None
        if how != "fix":
            return outcome(lambda: self.box.replay(letter_id, actor="ops", lease_token=token))
        # A corrected body, the same on both sides: a valid delivery of the letter's inbox.
        number = pick if self.cross else row.id
        key = row.key or f"fix-{number}"
        if inbox == "ussd":
            body, key = frame(number, "Ifo3", "MED", 2, 9), f"fix-{number}"
        elif inbox in ("listing", "orders"):
            body = Maker(random.Random(number)).any(inbox)["body"]
        else:
            body = f"fixed {number}"
        return outcome(
            lambda: self.box.replay(
                letter_id,
                actor="ops",
                lease_token=token,
                note="fixed by hand",
                body=body.encode(),
                key=key,
            )
        )

    def read(self, inbox: str, key: str) -> Any:
        """What operators and consumers read: counts, ledgers, pages, a key's story."""
        box = self.box
        reads: dict[str, Callable[[], Any]] = {
            "stats": lambda: box.stats(inbox),
            "records": lambda: box.records(inbox, order="oldest", limit=20),
            "feed": lambda: box.feed(inbox, after=0, limit=20),
            "letters": lambda: box.dead_letter_counts(inbox),
            "quarantined": lambda: box.quarantined(inbox, None, limit=20),
            "lookup": lambda: box.lookup(inbox, key),
        }
        if inbox in ("ussd", "orders"):
            reads["triage"] = lambda: box.triage(inbox)
        if inbox == "listing":
            reads["work"] = lambda: box.work_keys("listing")
        return {name: outcome(read) for name, read in reads.items()}

    def bulk(self, inbox: str, what: str) -> Any:
        box = self.box
        # Three from the lowest id, or with ``cross`` all of them (which three is the
        # ids' business, and ids are allocated differently by each backend).
        most = BULK_ALL if self.cross else 3
        if what in ("keep", "accept"):
            return outcome(lambda: box.bulk_resolve(inbox, what, "in bulk", "ops", limit=most))
        filters = box.letter_filter([inbox], status="open")
        if what == "replay":
            return outcome(lambda: box.bulk_replay([inbox], filters, "ops", limit=most))
        return outcome(lambda: box.bulk_archive([inbox], filters, "ops", "aside", limit=most))

    def consume(self, holder: str, limit: int, mode: str) -> Any:
        out: dict[str, Any] = {}
        consumer = self.box.consumer("c1", "ussd")
        if holder not in self.holders or mode == "ack":
            out["lease"] = outcome(lambda: consumer.lease(holder, 30.0))
            if "ok" in out["lease"]:
                self.holders[holder] = out["lease"]["ok"]["token"]
        token = self.holders.get(holder)
        out["next"] = page = outcome(lambda: consumer.next(limit, token=token))
        after = page["ok"]["next_after"] if "ok" in page else 1
        if mode in ("ack", "stale ack") and token is not None:
            used = token if mode == "ack" else token - 1
            out["ack"] = outcome(lambda: consumer.ack(after, token=used))
        return out

    def forward(self, holder: str, limit: int, statuses: list[int | None]) -> Any:
        claims = self.box.claim_forwards("sink", holder, limit)
        sent = [
            Sent(
                claim,
                status=status,
                latency=0.25,
                answer=b"ok" if status else None,
                error=None if status else "timed out",
            )
            for claim, status in zip(claims, statuses * limit, strict=False)
        ]
        settled = outcome(lambda: self.box.settle_forwards("sink", sent, holder, rng=lambda: 0.5))
        return {"claims": plain(claims), "settled": settled}

    def reconcile(self, worker: str, mode: str) -> Any:
        if mode in ("once", "fail"):
            return outcome(self.reconciler(worker, mode == "fail").refresh_once)
        if mode == "claim":
            got = outcome(self.reconciler(worker).begin_refresh, self.tickets)
            return got
        if not self.tickets:
            return "no ticket"
        if mode == "takeover":  # the oldest ticket's key, claimed by this worker by name
            wanted = self.tickets[0].key
            return outcome(lambda: self.reconciler(worker).begin_refresh(wanted), self.tickets)
        ticket = self.tickets.pop(0)
        key = tuple(ticket.key)
        return outcome(
            lambda: self.reconciler(ticket.worker).complete(
                ticket, ReadResult(key, {"key": list(key), "completed": True})
            )
        )

    def finish(self) -> dict[str, Any]:
        box = self.box
        entries = box.log_entries(1, 1_000_000)
        accepted = sorted({e.record_id for e in entries if e.record_id is not None})
        size = len(entries)
        proofs = [outcome(partial(box.prove, r)) for r in accepted[:1] + accepted[-1:]]
        proofs.append(outcome(lambda: box.prove_consistency(max(1, size // 2), size)))
        return {
            "log": plain(entries),
            "verify": outcome(lambda: box.verify().to_dict()),
            "checkpoint": outcome(box.checkpoint),
            "proofs": proofs,
            "tables": tables(box, self.backend),
        }


def run_one(
    backend: str, url: str, seed: int, number: int, steps: int, cross: bool = False
) -> dict[str, Any]:
    seal, plan = history(seed, number, steps)
    dialect = "postgres" if backend == "postgres" else "sqlite"
    player = Player(url, seal, backend != "sqlite-memory", dialect, cross)
    fixed = fix_eviction_order(player.box) if dialect == "postgres" else None
    logged = Logged()
    logging.getLogger("oncebox").addHandler(logged)
    try:
        results = [logged.around(player.step(step)) for step in plan]
    finally:
        logging.getLogger("oncebox").removeHandler(logged)
    end = player.finish()
    player.box.close()
    return {
        "plan": fingerprint(seal, plan),
        "seal": seal,
        "steps": results,
        "deliveries": player.deliveries,
        "eviction_order_fixed": fixed,
        **end,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--pg-admin", help="admin URL of the throwaway server (postgres)")
    parser.add_argument("--side", default="side")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--histories", type=int, default=20)
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cross", action="store_true", help="picks by content, not by id")
    args = parser.parse_args()
    dumps = []
    with tempfile.TemporaryDirectory(prefix="oncebox-diff-") as tmp:
        for number in range(args.histories):
            url, drop = store_url(args, Path(tmp), number)
            try:
                dumps.append(run_one(args.backend, url, args.seed, number, args.steps, args.cross))
            finally:
                drop()
    Path(args.out).write_text(json.dumps({"oncebox": oncebox.__file__, "histories": dumps}))
    return 0


def store_url(args: argparse.Namespace, tmp: Path, number: int) -> tuple[str, Callable[[], None]]:
    """A fresh store for one history, and what removes it."""
    if args.backend == "sqlite-memory":
        return "sqlite:///:memory:", lambda: None
    if args.backend == "sqlite-file":
        return f"sqlite:///{tmp / f'h{number}.db'}", lambda: None
    import psycopg

    name = f"diff_{args.side}_{os.getpid()}_{number}"
    with psycopg.connect(args.pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(args.pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    parts = args.pg_admin.split("?", 1)
    base = parts[0].rsplit("/", 1)[0] + "/" + name
    return (base + "?" + parts[1] if len(parts) > 1 else base), drop


if __name__ == "__main__":
    sys.exit(main())
