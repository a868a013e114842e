"""kill -9 at every named crash point, on SQLite and on PostgreSQL (issue 7, part 2).

Each run forks a child that ingests a workload (new deliveries, redeliveries, conflicts,
invalid frames; single calls and batches) into a fresh store and reports every decision
it got back, after ``ingest`` returned. In the child, ``oncebox.engine.crashpoints.reach``
is replaced (harness only, ``src`` is untouched) by a function that, the k-th time the
armed point is reached, tells the parent and waits; the parent then sends it a real
SIGKILL. k is drawn at random, so crashes fall at varied moments of the workload.

After the kill the parent measures recovery (open the store, ``recover``, ``verify`` until
ok), checks the store against what the child was told (acked-but-lost, half-applied,
applied twice), then redelivers every delivery the child had attempted, as an
at-least-once client does, sends the rest of the workload, and checks each verdict and
the final state against a model: the first valid content of an identity wins, a
redelivery of it is a duplicate (never a conflict), each record is applied once.

``before_xack`` is exercised through the Redis Streams consumer: the child consumes a
stream and is killed between a batch's commit and its XACK; a second consumer takes the
pending entries over.

Recovery's count is checked too. On SQLite, where one writer is let in at a time, the
writer appends its log entries inside the deciding transaction: no kill can leave a
committed record unsealed, so recovery must seal nothing at any point. On PostgreSQL
the decision commits first and its seal follows in a second transaction, so only
``after_commit`` may leave records for recovery, and over a row's runs it must leave
some (else the point would not be the window it names).

    .venv/bin/python reliability/crashpoints.py                 # 50 runs per point and backend
    .venv/bin/python reliability/crashpoints.py --runs 5 --xack-runs 5 --json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import os
import random
import select
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import oncebox
from oncebox import Delivery, InboxSpec, Oncebox
from oncebox.domain import Decision
from oncebox.engine import crashpoints as engine_points
from oncebox.engine.decide import Decided
from oncebox.engine.ingest import prepare
from oncebox.formats import get_codec
from oncebox.formats.ussd_h1 import make_frame
from oncebox.store import open_store, sqlite_path

ROOT = Path(__file__).resolve().parent.parent
for _extra in (ROOT / "bench", ROOT / "tests"):
    if str(_extra) not in sys.path:
        sys.path.append(str(_extra))

from synthetic import frame_delivery, json_body  # noqa: E402  (bench/, put on sys.path above)

INBOXES = (
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    InboxSpec("listing", codec="json-event", apply="generation"),
)
STORE_POINTS = engine_points.POINTS
XACK_POINT = engine_points.BEFORE_XACK
CONTROL_POINT = "control_before_commit"  # harness only: inside the transaction, decisions told
CHILD_TIMEOUT_S = 60.0
BIG = 1_000_000  # list limit that always covers a run's rows


# -- the workload ----------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One delivery and what the model needs to know about it."""

    inbox: str
    delivery: Delivery
    identity: str | None  # None: invalid, dead-lettered
    witness: str | None
    headcount: int = 0  # ussd: what the triage ledger adds for it
    work_key: tuple[str, str, str] | None = None  # listing: the generation it bumps


@dataclass(frozen=True)
class Step:
    """One client call: ``ingest`` (one item) or ``ingest_batch`` (several)."""

    inbox: str
    items: tuple[Item, ...]
    batch: bool


def _item(inbox: str, delivery: Delivery) -> Item:
    codec = get_codec(dict((s.name, s.codec) for s in INBOXES)[inbox])
    prepared = prepare(codec, delivery)
    if prepared.identity is None or prepared.decoded is None:
        return Item(inbox, delivery, None, None)
    f = prepared.decoded.fields
    return Item(
        inbox,
        delivery,
        prepared.identity.identity,
        prepared.identity.witness,
        headcount=int(f["headcount"]) if inbox == "ussd" else 0,
        work_key=(f["seller_id"], f["sku"], f["marketplace_id"]) if inbox == "listing" else None,
    )


def _ussd_variants(i: int) -> tuple[Delivery, Delivery, Delivery]:
    """The frame, one with the same frame id and another headcount, one with a bad cksum."""
    good = frame_delivery(i)
    text = good.body.decode()
    seq, site, need, headcount, pri = text.split("|")[1:6]
    other = make_frame(int(seq), site, need, int(headcount) + 100, int(pri))
    bad = text[:-1] + ("0" if text[-1] != "0" else "1")
    return good, Delivery(other.encode(), key=good.key), Delivery(bad.encode(), key=good.key)


def _listing_variants(i: int) -> tuple[Delivery, Delivery, Delivery, Delivery]:
    """The event; the same event reformatted (members reversed, spaces: canonically equal);
    the same notification with another price; the event cut short (invalid)."""
    body = json_body(i)
    event = json.loads(body)
    same = json.dumps(dict(reversed(list(event.items()))), indent=1).encode()
    event["payload"]["price"] += 1
    other = json.dumps(event, separators=(",", ":")).encode()
    return Delivery(body), Delivery(same), Delivery(other), Delivery(body[:-7])


def workload(seed: int, messages: int, inboxes: Sequence[str] = ("ussd", "listing")) -> list[Item]:
    """Originals in order; redeliveries and conflicts after their original; some invalid
    copies before it. Deterministic for a seed."""
    rng = random.Random(seed)
    offset = rng.randrange(1_000_000)
    items: list[Item] = []
    later: list[tuple[Item, Item]] = []  # (original, copy to place after it)
    for m in range(messages):
        inbox = rng.choice(list(inboxes))
        i = offset + m * 3  # spread frame ids over records and sequence numbers
        if inbox == "ussd":
            good, other, bad = _ussd_variants(i)
            resend = good
        else:
            good, resend, other, bad = _listing_variants(i)
        original = _item(inbox, good)
        if rng.random() < 0.1:
            items.append(_item(inbox, bad))
        items.append(original)
        for _ in range(rng.choice((0, 1, 1, 2))):
            later.append((original, _item(inbox, resend)))
        if rng.random() < 0.15:
            conflict = _item(inbox, other)
            later.append((original, conflict))
            if rng.random() < 0.4:
                later.append((original, conflict))  # the same conflict, redelivered
    for original, copy in later:
        at = next(n for n, it in enumerate(items) if it is original)
        items.insert(rng.randrange(at + 1, len(items) + 1), copy)
    return items


def steps_of(items: Sequence[Item], rng: random.Random) -> list[Step]:
    """Consecutive items of one inbox grouped into single calls and batches of up to 6."""
    steps: list[Step] = []
    n = 0
    while n < len(items):
        size = rng.choice((1, 1, 1, 2, 3, 4, 6))
        chunk = [items[n]]
        while len(chunk) < size and n + len(chunk) < len(items):
            nxt = items[n + len(chunk)]
            if nxt.inbox != chunk[0].inbox:
                break
            chunk.append(nxt)
        steps.append(Step(chunk[0].inbox, tuple(chunk), batch=len(chunk) > 1))
        n += len(chunk)
    return steps


class Model:
    """The verdicts the store must give: first valid content of an identity wins."""

    def __init__(self, stored: dict[tuple[str, str], str] | None = None) -> None:
        self.witness: dict[tuple[str, str], str] = dict(stored or {})

    def expect(self, item: Item) -> str:
        if item.identity is None or item.witness is None:
            return "rejected"
        key = (item.inbox, item.identity)
        known = self.witness.get(key)
        if known is None:
            self.witness[key] = item.witness
            return "accepted"
        return "duplicate" if known == item.witness else "conflict"


def winners(items: Sequence[Item]) -> dict[tuple[str, str], Item]:
    won: dict[tuple[str, str], Item] = {}
    for it in items:
        if it.identity is not None:
            won.setdefault((it.inbox, it.identity), it)
    return won


# -- figures ---------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one crash run found; every field but the first four must be 0."""

    killed: int = 0  # 1 when the child died of SIGKILL
    recovery_s: float = 0.0
    sealed_at_recovery: int = 0
    acked: int = 0  # may_ack decisions (or XACKed entries) checked after the crash
    acked_but_lost: int = 0
    half_applied: int = 0  # a record without its effects, or effects without a record
    applied_twice: int = 0  # effects, records or quarantine rows above one application
    wrong_winner: int = 0  # a record holding other content than the first valid one
    wrongly_conflict: int = 0  # same content again, classed as a conflict
    misclassified: int = 0  # any other verdict the model did not expect
    not_ackable: int = 0  # a redelivery's decision without may_ack
    log_bad: int = 0  # verify not ok after recovery, or at the end
    integrity_bad: int = 0  # SQLite PRAGMA integrity_check not ok
    lost_final: int = 0  # an identity missing after everything was redelivered
    unexpected: int = 0  # a record for an identity the child never sent
    unsealed_committed: int = 0  # records recovery sealed where none can be unsealed
    inflight_committed: int = 0  # 1: the step in flight at the kill had committed (not
    # an anomaly: expected at after_commit, after_seal and before_xack, never before)
    notes: list[str] = field(default_factory=list)

    ANOMALIES = (
        "acked_but_lost",
        "half_applied",
        "applied_twice",
        "wrong_winner",
        "wrongly_conflict",
        "misclassified",
        "not_ackable",
        "log_bad",
        "integrity_bad",
        "lost_final",
        "unexpected",
        "unsealed_committed",
    )

    def anomalies(self) -> int:
        return sum(int(getattr(self, name)) for name in self.ANOMALIES) + (1 - self.killed)

    def check_recovery(self, backend: Backend, point: str) -> None:
        """Records sealed by recovery where the backend leaves none unsealed."""
        if self.sealed_at_recovery and point not in backend.unsealed_after:
            self.note(
                "unsealed_committed",
                f"{backend.name}/{point}: recovery sealed {self.sealed_at_recovery} "
                f"committed records",
                self.sealed_at_recovery,
            )

    def note(self, counter: str, text: str, n: int = 1) -> None:
        setattr(self, counter, getattr(self, counter) + n)
        if len(self.notes) < 20:
            self.notes.append(f"{counter}: {text}")


@dataclass
class Row:
    """Totals for one (backend, point)."""

    backend: str
    point: str
    window: bool = False  # the point lies between a commit and its seal on this backend
    runs: int = 0
    not_reached: int = 0  # the child finished before the k-th reach; run again
    totals: Counter[str] = field(default_factory=Counter)
    recovery_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, result: RunResult) -> None:
        self.runs += 1
        for f in fields(RunResult):
            if f.name not in ("recovery_s", "notes"):
                self.totals[f.name] += int(getattr(result, f.name))
        self.recovery_s.append(result.recovery_s)
        self.notes.extend(result.notes[: max(0, 20 - len(self.notes))])

    def anomalies(self) -> int:
        return sum(self.totals[name] for name in RunResult.ANOMALIES) + (
            self.runs - self.totals["killed"]
        )

    def window_unseen(self) -> bool:
        """A point named as the window between a commit and its seal whose runs never
        left recovery a record to seal: the point does not crash where it says."""
        return self.window and self.runs > 0 and self.totals["sealed_at_recovery"] == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "point": self.point,
            "runs": self.runs,
            "killed_by_sigkill": self.totals["killed"],
            "not_reached_rerun": self.not_reached,
            "acked_checked": self.totals["acked"],
            "sealed_at_recovery": self.totals["sealed_at_recovery"],
            "inflight_committed": self.totals["inflight_committed"],
            **{name: self.totals[name] for name in RunResult.ANOMALIES},
            "recovery_ms_p50": round(percentile(self.recovery_s, 50) * 1000, 1),
            "recovery_ms_p99": round(percentile(self.recovery_s, 99) * 1000, 1),
            "anomalies": self.anomalies(),
            "notes": self.notes,
        }


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- backends --------------------------------------------------------------------------


class Admin(Protocol):
    def create_database(self, name: str, template: str | None = None) -> str: ...
    def drop_database(self, name: str) -> None: ...


class Backend(ABC):
    """Where a run's fresh store lives, and the crash points at which a committed record
    may still wait for its seal (recovery seals it; at any other point it must find
    nothing to seal)."""

    name = "?"
    unsealed_after: tuple[str, ...] = ()

    @abstractmethod
    def fresh(self) -> str: ...

    @abstractmethod
    def discard(self, url: str) -> None: ...

    def integrity_ok(self, url: str) -> bool:
        return True


class SqliteBackend(Backend):
    """One file per run (WAL, synchronous=FULL: the store's defaults). One writer at a
    time: a record and its log entry commit in one transaction, never apart."""

    name = "sqlite"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def fresh(self) -> str:
        return f"sqlite:///{self.directory / f'run-{uuid.uuid4().hex[:10]}.db'}"

    def discard(self, url: str) -> None:
        path = sqlite_path(url)
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")

    def integrity_ok(self, url: str) -> bool:
        conn = sqlite3.connect(sqlite_path(url))
        try:
            return bool(conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)])
        finally:
            conn.close()


class PostgresBackend(Backend):
    """One database per run, copied from a migrated template, on a durable server. The
    decision commits first and a second, durable transaction seals it."""

    name = "postgres"
    unsealed_after = (engine_points.AFTER_COMMIT,)

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.template = f"crash_template_{uuid.uuid4().hex[:8]}"
        oncebox.open(admin.create_database(self.template), inboxes=[]).close()
        self._names: dict[str, str] = {}

    def fresh(self) -> str:
        name = f"crash_{uuid.uuid4().hex[:12]}"
        url = self.admin.create_database(name, template=self.template)
        self._names[url] = name
        return url

    def discard(self, url: str) -> None:
        self.admin.drop_database(self._names.pop(url))

    def close(self) -> None:
        self.admin.drop_database(self.template)


@contextlib.contextmanager
def durable_postgres() -> Iterator[Admin]:
    """A throwaway durable server (tests/pgcluster.py), stopped and wiped afterwards."""
    from pgcluster import throwaway_server

    with throwaway_server("oncebox-crash-pg-", durable=True) as server:
        yield server


# -- the child -------------------------------------------------------------------------


def _arm(armed: str, nth: int, say: Callable[[dict[str, Any]], None]) -> None:
    """Replace the engine's crash hook: the nth reach of ``point`` reports and waits for
    the parent's SIGKILL. Every call site goes through the module attribute."""
    reached = 0

    def reach(point: str) -> None:
        nonlocal reached
        if point != armed:
            return
        reached += 1
        if reached == nth:
            say({"crash": point, "nth": nth})
            while True:
                time.sleep(60)

    engine_points.reach = reach
    engine_points.ARMED = True  # the hot paths call reach only where a point is armed


def _fork_child(work: Callable[[Callable[[dict[str, Any]], None]], None]) -> tuple[int, int]:
    """Fork a child running ``work(say)``; returns (pid, read end of its report pipe)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        return pid, rfd
    code = 1
    try:
        os.close(rfd)
        out = os.fdopen(wfd, "w", buffering=1)

        def say(message: dict[str, Any]) -> None:
            out.write(json.dumps(message) + "\n")
            out.flush()

        try:
            work(say)
            say({"done": True})
            code = 0
        except BaseException:
            say({"error": traceback.format_exc()})
    finally:
        os._exit(code)


def _ingest_child(
    url: str,
    steps: Sequence[Step],
    point: str,
    nth: int,
    *,
    ack_early: bool = False,
    seal: bool = True,
) -> Callable[[Callable[[dict[str, Any]], None]], None]:
    """The client: ingest each step, report its decisions once ``ingest`` returned.
    ``ack_early`` is the negative control's broken client: it reports the decisions from
    inside the deciding transaction, before the commit, where CONTROL_POINT then dies.
    ``seal=False`` leaves every seal queued (the suite's control for recovery's count)."""

    def work(say: Callable[[dict[str, Any]], None]) -> None:
        _arm(point, nth, say)
        box = oncebox.open(url, inboxes=INBOXES, seal=seal)
        current = -1
        if ack_early:
            real = box.store.atomic

            def atomic(work: Callable[[Any], Any], durable: bool = True) -> Any:
                def early(tx: Any) -> Any:
                    out = work(tx)
                    if isinstance(out, Decided):
                        # What the decisions will say once committed, told before it.
                        told = [d.to_dict() for d in out.decisions()]
                        say({"decided": current, "decisions": told})
                        engine_points.reach(CONTROL_POINT)
                    return out

                return real(early, durable)

            box.store.atomic = atomic  # type: ignore[method-assign]
        for n, step in enumerate(steps):
            current = n
            say({"attempt": n})
            deliveries = [it.delivery for it in step.items]
            if step.batch:
                decisions = box.ingest_batch(step.inbox, deliveries)
            else:
                decisions = [box.ingest(step.inbox, deliveries[0])]
            if not ack_early:
                # Only now, after ingest returned, does the client hold the decisions.
                say({"decided": n, "decisions": [d.to_dict() for d in decisions]})

    return work


def _watch(pid: int, rfd: int) -> tuple[list[dict[str, Any]], str]:
    """Read the child's reports until it is at the crash point (then SIGKILL it), done or
    dead. Returns the reports and how it ended: killed, done, hung, error or died."""
    reports: list[dict[str, Any]] = []
    buffer = b""
    outcome = "died"
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    with os.fdopen(rfd, "rb", buffering=0) as pipe:
        while outcome == "died":
            left = deadline - time.monotonic()
            if left <= 0:
                outcome = "hung"
                break
            ready, _, _ = select.select([pipe], [], [], left)
            if not ready:
                continue
            chunk = pipe.read(65536)
            if not chunk:
                break  # EOF: the child exited
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                reports.append(message)
                if "crash" in message:
                    outcome = "killed"
                elif "done" in message:
                    outcome = "done"
                elif "error" in message:
                    outcome = "error"
        if outcome in ("killed", "hung"):
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if outcome == "killed" and not (
        os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    ):
        outcome = "died"
    return reports, outcome


def _kill_run(
    work: Callable[[Callable[[dict[str, Any]], None]], None],
) -> tuple[list[dict[str, Any]], RunResult] | None:
    """Fork ``work``, watch it to its crash point: its reports and a fresh result, or
    None when it finished without reaching the point."""
    pid, rfd = _fork_child(work)
    reports, outcome = _watch(pid, rfd)
    if outcome == "done":
        return None
    result = RunResult(killed=int(outcome == "killed"))
    if outcome != "killed":
        result.notes.append(f"child {outcome}: {reports[-1] if reports else ''}")
    return reports, result


# -- the parent's checks ---------------------------------------------------------------


class RecordingBox(Oncebox):
    """An Oncebox that keeps every (delivery, decision) pair, so the takeover consumer's
    verdicts can be checked one by one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.seen: list[tuple[Delivery, Decision]] = []
        super().__init__(*args, **kwargs)

    def ingest_batch(self, inbox: str, deliveries: Sequence[Delivery]) -> list[Decision]:
        decisions = super().ingest_batch(inbox, deliveries)
        self.seen.extend(zip(deliveries, decisions, strict=True))
        return decisions


def _recover(url: str, result: RunResult) -> RecordingBox:
    """Open after the crash and recover until the log verifies; times it."""
    t0 = time.perf_counter()
    box = RecordingBox(open_store(url), INBOXES)
    result.sealed_at_recovery = box.recovered_at_open + box.recover()
    verification = box.verify()
    result.recovery_s = time.perf_counter() - t0
    if not verification.ok:
        result.note("log_bad", f"after recovery: {verification.to_dict()}")
    return box


def _check_acked(box: Oncebox, decisions: Sequence[dict[str, Any]], result: RunResult) -> None:
    """Everything the child was told it may ack is in the store, as it was told."""
    quarantine = {q.id: q for q in box.quarantined(None, status=None, limit=BIG)}
    letters = {dl.id for dl in box.dead_letters(None, limit=BIG)}
    for d in decisions:
        if not d["may_ack"]:
            continue
        result.acked += 1
        verdict = d["verdict"]
        if verdict in ("accepted", "duplicate"):
            record = box.record(d["inbox"], d["identity"])
            if record is None or record.witness.hex() != d["witness"]:
                result.note("acked_but_lost", f"{verdict} {d['inbox']}/{d['identity']}")
        elif verdict == "conflict":
            row = quarantine.get(d["quarantine_id"])
            if row is None or row.witness.hex() != d["witness"]:
                result.note("acked_but_lost", f"conflict {d['inbox']}/{d['identity']}")
        elif d["dead_letter_id"] not in letters:
            result.note("acked_but_lost", f"rejected {d['inbox']}/{d['identity']}")


def _stored(box: Oncebox, items: Sequence[Item]) -> dict[tuple[str, str], str]:
    """(inbox, identity) -> stored witness, for every identity the workload names."""
    found: dict[tuple[str, str], str] = {}
    for it in items:
        if it.identity is not None and (it.inbox, it.identity) not in found:
            record = box.record(it.inbox, it.identity)
            if record is not None:
                found[(it.inbox, it.identity)] = record.witness.hex()
    return found


def _check_effects(
    box: Oncebox, items: Sequence[Item], result: RunResult, *, final: bool
) -> dict[tuple[str, str], str]:
    """Records, ledger, generations and quarantine rows against one application of each
    stored record. ``final``: everything was delivered, so every winner must be there."""
    won = winners(items)
    stored = _stored(box, items)
    by_content = {(it.inbox, it.identity, it.witness): it for it in items if it.identity}
    inboxes = {it.inbox for it in items}
    for key, witness in stored.items():
        if witness != won[key].witness:
            result.note("wrong_winner", f"{key} holds {witness[:12]}")
    if final:
        for key in won.keys() - stored.keys():
            result.note("lost_final", f"{key} missing after redelivery")
    for inbox in inboxes:
        mine = {k: w for k, w in stored.items() if k[0] == inbox}
        figures = box.stats(inbox)
        extra = figures["records"] - len(mine)
        if extra:
            result.note("applied_twice" if extra > 0 else "half_applied", f"{inbox} records")
        effects = [by_content[(inbox, ident, w)] for (_, ident), w in mine.items()]
        if inbox == "ussd":
            triage = box.triage("ussd")
            for name, want in (
                ("cases", len(effects)),
                ("headcount", sum(it.headcount for it in effects)),
            ):
                got = int(triage[name])
                if got != want:
                    counter = "applied_twice" if got > want else "half_applied"
                    result.note(counter, f"triage {name} {got} != {want}")
        else:
            want_gen = Counter(it.work_key for it in effects if it.work_key)
            got_gen = {
                (w.seller_id, w.sku, w.marketplace_id): w.generation for w in box.work_keys(inbox)
            }
            for wk in want_gen.keys() | got_gen.keys():
                got, want = got_gen.get(wk, 0), want_gen.get(wk, 0)
                if got != want:
                    counter = "applied_twice" if got > want else "half_applied"
                    result.note(counter, f"generation {wk} {got} != {want}")
        conflicts = {
            (it.identity, it.witness)
            for it in items
            if it.inbox == inbox and it.identity and it.witness != won[(inbox, it.identity)].witness
        }
        rows = [(q.identity, q.witness.hex()) for q in box.quarantined(inbox, None, BIG)]
        if len(rows) != len(set(rows)):
            result.note("applied_twice", f"{inbox} quarantine row twice")
        if not set(rows) <= conflicts:
            result.note("misclassified", f"{inbox} quarantined content that is no conflict")
        if final and set(rows) != conflicts:
            result.note("lost_final", f"{inbox} quarantine {len(set(rows))} != {len(conflicts)}")
    return stored


def _check_verdict(
    model: Model,
    item: Item,
    decision: Decision | dict[str, Any],
    result: RunResult,
    *,
    redelivery: bool,
) -> None:
    got = str(decision.verdict if isinstance(decision, Decision) else decision["verdict"])
    may_ack = decision.may_ack if isinstance(decision, Decision) else decision["may_ack"]
    want = model.expect(item)
    if got != want:
        counter = "wrongly_conflict" if got == "conflict" else "misclassified"
        result.note(counter, f"{item.inbox}/{item.identity}: {got}, expected {want}")
    if redelivery and not may_ack:
        result.note("not_ackable", f"{item.inbox}/{item.identity}: {got} without may_ack")


def _check_inflight(
    stored: dict[tuple[str, str], str],
    told: set[tuple[str, str]],
    sent: set[tuple[str, str | None]],
    result: RunResult,
) -> None:
    """Records beyond what the child was told of can only come from the step in flight
    when it died (it committed); beyond what it sent, they are unexpected."""
    extra = stored.keys() - told
    result.inflight_committed = int(bool(extra))
    for key in extra - sent:
        result.note("unexpected", f"{key} stored, never sent")


def _final_log(box: Oncebox, result: RunResult) -> None:
    verification = box.verify()
    if not verification.ok:
        result.note("log_bad", f"at the end: {verification.to_dict()}")


# -- one run ---------------------------------------------------------------------------


def _inserting_steps(steps: Sequence[Step]) -> int:
    seen: set[tuple[str, str]] = set()
    count = 0
    for step in steps:
        new = {(it.inbox, it.identity) for it in step.items if it.identity} - seen
        seen |= new
        count += bool(new)
    return count


def store_run(
    backend: Backend, point: str, seed: int, messages: int = 24, *, seal: bool = True
) -> RunResult | None:
    """One crash at ``point`` on a fresh store; None when the workload ended first.
    CONTROL_POINT runs the broken client that acks before the commit; ``seal=False`` a
    client that leaves its seals queued."""
    rng = random.Random(seed)
    items = workload(seed, messages)
    steps = steps_of(items, rng)
    # The insert points are reached once per transaction that inserts (at least once per
    # step with a new identity); a k beyond the real count just reruns the seed's next.
    inserting = _inserting_steps(steps)
    reaches = {
        engine_points.BEFORE_INSERT: inserting,
        engine_points.AFTER_INSERT: inserting,
        engine_points.AFTER_COMMIT: len(steps),
        engine_points.AFTER_SEAL: len(steps),
        CONTROL_POINT: len(steps),
    }[point]
    nth = rng.randint(1, reaches)
    url = backend.fresh()
    try:
        child = _ingest_child(url, steps, point, nth, ack_early=point == CONTROL_POINT, seal=seal)
        run = _kill_run(child)
        if run is None:
            return None
        reports, result = run
        attempted = max((r["attempt"] for r in reports if "attempt" in r), default=-1)
        told = [r for r in reports if "decided" in r]
        box = _recover(url, result)
        result.check_recovery(backend, point)
        try:
            if not backend.integrity_ok(url):
                result.note("integrity_bad", url)
            # What the child was told before it died: every verdict as the model says,
            # and every may_ack decision still in the store.
            model = Model()
            for r in told:
                for it, d in zip(steps[r["decided"]].items, r["decisions"], strict=True):
                    _check_verdict(model, it, d, result, redelivery=False)
            _check_acked(box, [d for r in told for d in r["decisions"]], result)
            stored = _check_effects(box, items, result, final=False)
            sent = {(it.inbox, it.identity) for st in steps[: attempted + 1] for it in st.items}
            _check_inflight(stored, set(model.witness), sent, result)
            # The client redelivers everything it had sent or attempted, then goes on.
            model = Model(stored)
            for n, step in enumerate(steps):
                deliveries = [it.delivery for it in step.items]
                decisions = (
                    box.ingest_batch(step.inbox, deliveries)
                    if step.batch
                    else [box.ingest(step.inbox, deliveries[0])]
                )
                for it, d in zip(step.items, decisions, strict=True):
                    _check_verdict(model, it, d, result, redelivery=n <= attempted)
            _check_effects(box, items, result, final=True)
            _final_log(box, result)
        finally:
            box.close()
        return result
    finally:
        backend.discard(url)


def xack_run(backend: Backend, redis_url: str, seed: int, messages: int = 40) -> RunResult | None:
    """One consumer killed between a batch's commit and its XACK; another takes over."""
    import redis

    from oncebox.surfaces.consume import StreamConsumer

    rng = random.Random(seed)
    items = workload(seed, messages, inboxes=("ussd",))
    batch = rng.choice((4, 6, 8))
    nth = rng.randint(1, math.ceil(len(items) / batch))
    stream = f"crash-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(redis_url)
    ids: dict[str, Item] = {}
    for it in items:
        entry: Any = client.xadd(stream, {"body": it.delivery.body, "key": it.delivery.key or ""})
        ids[_text(entry)] = it
    url = backend.fresh()

    def work(say: Callable[[dict[str, Any]], None]) -> None:
        _arm(XACK_POINT, nth, say)
        box = oncebox.open(url, inboxes=INBOXES)
        consumer = StreamConsumer(
            box, redis_url, stream, "g", "doomed", "ussd", batch=batch, claim_idle_ms=600_000
        )
        consumer.run_once()

    try:
        run = _kill_run(work)
        if run is None:
            return None
        _, result = run
        box = _recover(url, result)
        result.check_recovery(backend, XACK_POINT)
        try:
            if not backend.integrity_ok(url):
                result.note("integrity_bad", url)
            acked, delivered = _xacked(client, stream, "g")
            _check_acked_entries(box, [(eid, ids[eid]) for eid in acked], result)
            stored = _check_effects(box, items, result, final=False)
            told = Model()
            for eid in acked:
                told.expect(ids[eid])
            sent = {(it.inbox, it.identity) for eid, it in ids.items() if eid in delivered}
            _check_inflight(stored, set(told.witness), sent, result)
            taker = StreamConsumer(
                box, redis_url, stream, "g", "taker", "ussd", batch=batch, claim_idle_ms=0
            )
            taker.run_once()
            taker.close()
            model = Model(stored)
            redelivered = {d.delivery_id for d, _ in box.seen}
            for delivery, decision in box.seen:
                _check_verdict(
                    model, ids[delivery.delivery_id or ""], decision, result, redelivery=True
                )
            for eid in set(ids) - set(acked) - redelivered:
                result.note("lost_final", f"entry {eid} never decided by the taker")
            pending = int(client.xpending(stream, "g")["pending"])
            if pending:
                result.note("lost_final", f"{pending} entries still pending")
            _check_effects(box, items, result, final=True)
            _final_log(box, result)
        finally:
            box.close()
        return result
    finally:
        client.delete(stream)
        client.close()
        backend.discard(url)


def _xacked(client: Any, stream: str, group: str) -> tuple[list[str], set[str]]:
    """Entry ids the group acknowledged, and those it delivered (redis's own view)."""
    [info] = [g for g in client.xinfo_groups(stream) if g["name"] in (group, group.encode())]
    last = _entry_key(info["last-delivered-id"])
    pending = {
        _text(p["message_id"])
        for p in client.xpending_range(stream, group, min="-", max="+", count=BIG)
    }
    delivered = [_text(eid) for eid, _ in client.xrange(stream) if _entry_key(eid) <= last]
    return [eid for eid in delivered if eid not in pending], set(delivered)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_key(entry_id: bytes | str) -> tuple[int, int]:
    ms, seq = _text(entry_id).split("-")
    return int(ms), int(seq)


def _check_acked_entries(
    box: Oncebox, acked: Sequence[tuple[str, Item]], result: RunResult
) -> None:
    """An XACKed entry left its record, quarantine row or dead letter."""
    quarantine = {(q.identity, q.witness.hex()) for q in box.quarantined(None, None, BIG)}
    letters = {dl.delivery_id for dl in box.dead_letters(None, limit=BIG)}
    for eid, it in acked:
        result.acked += 1
        if it.identity is None:
            if eid not in letters:
                result.note("acked_but_lost", f"entry {eid}: dead letter missing")
            continue
        record = box.record(it.inbox, it.identity)
        if record is None:
            result.note("acked_but_lost", f"entry {eid}: record {it.identity} missing")
        elif record.witness.hex() != it.witness and (it.identity, it.witness) not in quarantine:
            result.note("acked_but_lost", f"entry {eid}: conflict {it.identity} not quarantined")


# -- the campaign ----------------------------------------------------------------------


def run_point(
    row: Row,
    run: Callable[[int], RunResult | None],
    runs: int,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> None:
    """``runs`` crashes at one point (workloads that end before the drawn reach are run
    again with another seed and counted as not reached)."""
    n = 0
    while row.runs < runs:
        n += 1
        result = run(seed * 100_003 + n)
        if result is None:
            row.not_reached += 1
            if row.not_reached > 10 * runs:
                raise RuntimeError(f"{row.point}: the crash point is never reached")
            continue
        row.add(result)
    if progress:
        progress(f"{row.backend:8} {row.point:14} runs {row.runs:4}  anomalies {row.anomalies()}")


def _store_run_at(backend: Backend, point: str, messages: int, seed: int) -> RunResult | None:
    return store_run(backend, point, seed, messages)


@dataclass
class Campaign:
    """The crash rows (all anomalies must be 0) and the negative control's rows (its
    acked-but-lost must be above 0, or the harness cannot see a loss)."""

    rows: list[Row]
    controls: list[Row]

    def anomalies(self) -> int:
        return sum(row.anomalies() for row in self.rows)

    def control_blind(self) -> bool:
        return any(row.totals["acked_but_lost"] == 0 for row in self.controls)

    def windows_unseen(self) -> list[Row]:
        return [row for row in self.rows if row.window_unseen()]


def campaign(
    backends: Sequence[Backend],
    runs: int,
    xack_runs: int,
    redis_url: str | None,
    *,
    control_runs: int = 0,
    messages: int = 24,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
) -> Campaign:
    """Every store point on every backend, before_xack on the first backend, then the
    negative control on every backend. ``messages``: distinct messages per workload
    (the Redis runs use 5/3 as many, all USSD)."""
    logging.disable(logging.CRITICAL)  # conflicts log a warning each; figures say enough
    os.environ.pop("ONCEBOX_CRASH_AT", None)
    done = Campaign([], [])
    for b, backend in enumerate(backends):
        for p, point in enumerate(STORE_POINTS):
            row = Row(backend.name, point, window=point in backend.unsealed_after)
            run = functools.partial(_store_run_at, backend, point, messages)
            run_point(row, run, runs, seed * 100 + b * 10 + p, progress)
            done.rows.append(row)
    if xack_runs and redis_url and backends:
        backend = backends[0]
        row = Row(backend.name, XACK_POINT)
        run = functools.partial(_xack_run_at, backend, redis_url, messages * 5 // 3)
        run_point(row, run, xack_runs, seed * 100 + 99, progress)
        done.rows.append(row)
    for b, backend in enumerate(backends):
        if control_runs:
            row = Row(backend.name, CONTROL_POINT)
            run = functools.partial(_store_run_at, backend, CONTROL_POINT, messages)
            run_point(row, run, control_runs, seed * 100 + b * 10 + 9, progress)
            done.controls.append(row)
    return done


def _xack_run_at(backend: Backend, redis_url: str, messages: int, seed: int) -> RunResult | None:
    return xack_run(backend, redis_url, seed, messages)


COLUMNS = (
    ("backend", "backend", 8),
    ("point", "point", 13),
    ("runs", "runs", 5),
    ("killed_by_sigkill", "SIGKILL", 7),
    ("not_reached_rerun", "rerun", 5),
    ("acked_checked", "acked", 6),
    ("acked_but_lost", "lost", 4),
    ("half_applied", "half", 4),
    ("applied_twice", "twice", 5),
    ("wrongly_conflict", "wr-confl", 8),
    ("misclassified", "miscl", 5),
    ("wrong_winner", "winner", 6),
    ("log_bad", "log", 3),
    ("integrity_bad", "integ", 5),
    ("lost_final", "final", 5),
    ("unexpected", "unexp", 5),
    ("unsealed_committed", "unseal", 6),
    ("inflight_committed", "inflight", 8),
    ("sealed_at_recovery", "sealed", 6),
    ("recovery_ms_p50", "rec p50 ms", 10),
    ("recovery_ms_p99", "rec p99 ms", 10),
)


def table(rows: Sequence[Row]) -> str:
    lines = ["  ".join(f"{title:>{width}}" for _, title, width in COLUMNS)]
    for row in rows:
        data = row.to_dict()
        lines.append("  ".join(f"{data[key]!s:>{width}}" for key, _, width in COLUMNS))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="crashes per point and backend")
    parser.add_argument(
        "--xack-runs",
        type=int,
        default=50,
        help="crashes at before_xack (Redis consumer, SQLite); 0 skips",
    )
    parser.add_argument(
        "--control-runs",
        type=int,
        default=20,
        help="negative-control runs per backend (a client that acks before the commit)",
    )
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.backends.split(",") if name.strip()]
    started = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        backends: list[Backend] = []
        for name in wanted:
            if name == "sqlite":
                work = Path(tempfile.mkdtemp(prefix="oncebox-crash-", dir="/tmp"))
                stack.callback(shutil.rmtree, work, ignore_errors=True)
                backends.append(SqliteBackend(work))
            elif name == "postgres":
                pg = PostgresBackend(stack.enter_context(durable_postgres()))
                stack.callback(pg.close)
                backends.append(pg)
            else:
                parser.error(f"unknown backend {name!r}")
        redis_url = None
        if args.xack_runs:
            from redisserver import RedisServer

            redis_dir = Path(tempfile.mkdtemp(prefix="oncebox-crash-redis-", dir="/tmp"))
            stack.callback(shutil.rmtree, redis_dir, ignore_errors=True)
            server = RedisServer.start(redis_dir)
            stack.callback(server.stop)
            redis_url = server.url
        result = campaign(
            backends,
            args.runs,
            args.xack_runs,
            redis_url,
            control_runs=args.control_runs,
            seed=args.seed,
            progress=progress,
        )
    wall = time.monotonic() - started
    print(report(result, wall, args.seed))
    if args.json:
        figures = {
            "rows": [r.to_dict() for r in result.rows],
            "negative_control": [r.to_dict() for r in result.controls],
            "anomalies": result.anomalies(),
            "wall_s": round(wall, 1),
            "seed": args.seed,
        }
        print(json.dumps(figures, indent=1))
    return 1 if result.anomalies() or result.control_blind() or result.windows_unseen() else 0


def report(result: Campaign, wall: float, seed: int) -> str:
    """The figures as printed: the table, totals, any anomaly's notes, the control."""
    rows = result.rows
    lines = [table(rows)]
    lines.append(
        f"runs {sum(r.runs for r in rows)} (each killed by SIGKILL at its point), "
        f"anomalies {result.anomalies()}, wall {wall:.1f} s, seed {seed}"
    )
    for row in rows:
        lines.extend(f"  {row.backend}/{row.point}: {note}" for note in row.notes)
    for row in result.rows:
        if row.window and row.runs:
            seen = "WINDOW NEVER SEEN" if row.window_unseen() else "as it should"
            lines.append(
                f"{row.backend}/{row.point} lies between a commit and its seal: recovery "
                f"sealed {row.totals['sealed_at_recovery']} records over {row.runs} runs, {seen}"
            )
    for row in result.controls:
        verdict = "harness sees the loss" if row.totals["acked_but_lost"] else "HARNESS BLIND"
        lines.append(
            f"negative control ({row.backend}, client acks inside the transaction, killed "
            f"before the commit): runs {row.runs}, acked-but-lost "
            f"{row.totals['acked_but_lost']} of {row.totals['acked']} acked: {verdict}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
