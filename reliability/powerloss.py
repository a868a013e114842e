"""Power-loss simulation for the SQLite store: nothing acked is lost, nothing applied twice.

Each run copies a synced template store, forks a child that opens it through the
power-loss VFS shim (``_powerloss_vfs``) and runs a seeded workload of many small
transactions: ingests that are accepted, redelivered, rejected or conflict into
quarantine, an operator's resolve, explicit seals and a reconciler completion. The
child reports every decision to a plain file (outside the VFS) only after the call
returned, which is after its commit. At a call chosen uniformly over all write, sync
and truncate calls of the run (counted in a dry run of the same workload) the power
fails: unsynced sectors come back old, new or any version between, and the child dies
with ``os._exit``.

The parent then runs ``PRAGMA integrity_check``, compares the store with what the
child acked, checks that every effect sits beside its record exactly once, runs
``recover`` and ``verify``, and finally redelivers the whole workload the way a
sender that never saw its acks would: no redelivery may be accepted a second time
and the effects must still add up.

Where a variant seals inline, the SQLite writer appends its log entries inside the
deciding transaction, so a record and its seal commit together: after any cut, no
record may lack its log entry and nothing may wait in the seal queue ("unsealed").

Duplicates are counted without a flush (a transaction that writes nothing but counts
commits at ``synchronous=NORMAL``), so a cut may take back the counts acked since the
last flushed commit, and nothing else: a duplicate acked before a later flushed commit
returned must still be counted, and no count may exceed the deliveries made of its
identity up to the cut. The workload sends duplicates alone, in batches of duplicates
only, and mixed with new deliveries.

Four negative controls show that the figures can fail. ``synchronous=NORMAL`` does not
sync the WAL at commit: it must show acked-but-lost commits. A mutant store whose every
statement commits on its own (no ``BEGIN``/``COMMIT``, only in the crashing child) must
show half-applied transactions. A mutant that decides and seals in two transactions, as
the core did before the lean ingest (the store claims to let several writers in, so the
decision commits unflushed and a durable seal follows), must show records committed
without their seal. A mutant that commits every ingest as relaxed as a duplicate's counts
(records, their effects and seals included) must show acked records lost. If any shows
nothing, the harness is broken.

    .venv/bin/python reliability/powerloss.py --runs 2000

The child checkpoints the WAL every few dozen pages (SQLite's default is 1000) so that
cuts also land in checkpoints and WAL restarts; the store's own settings (WAL,
``synchronous``, ``BEGIN IMMEDIATE``) are untouched. Half the workload variants seal
inline (the default), half defer sealing to explicit seal steps.

Not modelled: directory fsync (file creation and deletion are durable at once), bit
flips and other damage inside a sector, tearing inside a 512-byte sector (each one is
written whole or not at all), and disks that lie about flushes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oncebox
from _powerloss_check import (
    CATEGORIES,
    Findings,
    Snapshot,
    acked,
    counts_bounded,
    integrity,
    load,
    structure,
    unsealed,
)
from _powerloss_vfs import CRASHED, Faults, PowerLossVFS
from oncebox import Delivery, ManualClock
from oncebox.engine.reconciler import ReadResult
from oncebox.formats.ussd_h1 import make_frame

VFS_NAME = "powerloss"
START = 1_800_000_000.0
# Checkpoint the WAL every few dozen pages (the default is 1000) so that power cuts
# also land in checkpoints and WAL restarts, not only in commits.
AUTOCHECKPOINT_PAGES = 24
STEPS = 36
VARIANTS = 12
SITES = ("K01", "K02", "K03")
NEEDS = ("MED", "WAT", "FOO")
SKUS = ("SKU-1", "SKU-2", "SKU-3")
# What each campaign runs: the store's synchronous setting, and the mutant (if any).
MODES = {
    "FULL": ("FULL", "synchronous=FULL"),
    "NORMAL": ("NORMAL", "negative control: synchronous=NORMAL"),
    "AUTOCOMMIT": ("FULL", "negative control: every statement its own transaction"),
    "TWO_TX": ("FULL", "negative control: the decision and its seal in two transactions"),
    "RELAX_ALL": ("FULL", "negative control: every ingest committed as relaxed as counts"),
}
LABELS = {
    "integrity": "integrity failures",
    "lost": "acked-but-lost",
    "half": "half-applied transactions",
    "twice": "applied twice",
    "uncovered": "log not covering records after recovery",
    "unsealed": "records committed apart from their seal (inline sealing)",
    "overcounted": "counts above the deliveries made",
}


# -- the workload ------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One thing the child does; ``deliveries`` are (inbox, body, frame id)."""

    kind: str
    deliveries: tuple[tuple[str, bytes, str | None], ...] = ()
    inbox: str = ""
    action: str = ""
    key: tuple[str, str, str] = ("", "", "")


def listing_event(number: int, sku: str, status: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "source": "powerloss",
        "subscription": "sub-1",
        "notification_id": f"n-{number}",
        "seller_id": "SELLER-1",
        "sku": sku,
        "marketplace_id": "MKT-1",
        "notification_type": "listing_status_changed",
        "event_time": "2026-11-01T10:00:00Z",
        "payload": {"status": status},
    }


def body_of(event: dict[str, Any], shuffle: random.Random | None = None) -> bytes:
    """A JSON body; member order shuffled for a redelivery (the canonical form ignores it)."""
    items = list(event.items())
    if shuffle is not None:
        shuffle.shuffle(items)
    return json.dumps(dict(items)).encode()


def inline_seal(variant: int) -> bool:
    """Even variants seal inside each call (the default); odd ones only on a seal step."""
    return variant % 2 == 0


def plan(variant: int, steps: int = STEPS) -> list[Step]:
    """A seeded mix of small transactions; the same variant always gives the same plan."""
    rng = random.Random(variant)
    frames: list[tuple[str, str]] = []
    events: list[dict[str, Any]] = []
    conflicts: list[str] = []
    out: list[Step] = []

    def new_frame() -> tuple[str, bytes, str | None]:
        frame_id = f"rec{len(frames)}-1"
        text = make_frame(len(frames), rng.choice(SITES), rng.choice(NEEDS), rng.randint(1, 40), 50)
        frames.append((frame_id, text))
        return ("ussd", text.encode(), frame_id)

    def resend_frame() -> tuple[str, bytes, str | None]:
        frame_id, text = rng.choice(frames)
        return ("ussd", text.encode(), frame_id)

    kinds = ["frame", "dup_frame", "conflict_frame", "event", "dup_event", "conflict_event"]
    kinds += ["bad", "batch", "resolve", "seal", "work", "dups"]
    # Odd variants defer sealing to explicit seal steps, so those drain real queues.
    weights = [4, 2, 1, 4, 2, 1, 1, 1, 1, 1 if inline_seal(variant) else 3, 1, 2]
    for _ in range(steps):
        kind = rng.choices(kinds, weights)[0]
        if kind in ("dup_frame", "conflict_frame", "dups") and not frames:
            kind = "frame"
        if kind in ("dup_event", "conflict_event", "work") and not events:
            kind = "event"
        if kind == "resolve" and not conflicts:
            kind = "seal"
        if kind == "frame":
            out.append(Step("ingest", (new_frame(),)))
        elif kind == "dup_frame":
            out.append(Step("ingest", (resend_frame(),)))
        elif kind == "conflict_frame":
            frame_id, _ = rng.choice(frames)
            seq = int(frame_id[3:].split("-")[0])
            other = make_frame(seq, rng.choice(SITES), rng.choice(NEEDS), rng.randint(41, 90), 60)
            out.append(Step("ingest", (("ussd", other.encode(), frame_id),)))
            conflicts.append("ussd")
        elif kind == "event":
            events.append(listing_event(len(events), rng.choice(SKUS), "ACTIVE"))
            out.append(Step("ingest", (("listing", body_of(events[-1]), None),)))
        elif kind == "dup_event":
            body = body_of(rng.choice(events), shuffle=rng)
            out.append(Step("ingest", (("listing", body, None),)))
        elif kind == "conflict_event":
            changed = dict(rng.choice(events), payload={"status": "INACTIVE"})
            if rng.random() < 0.5:
                changed["sku"] = rng.choice(SKUS)  # accepting it moves the event's work key
            out.append(Step("ingest", (("listing", body_of(changed), None),)))
            conflicts.append("listing")
        elif kind == "bad":
            out.append(Step("ingest", (("ussd", b"H1|9|K01|MED|3|50|#00", "bad-1"),)))
        elif kind == "batch":
            batch = tuple(
                resend_frame() if frames and rng.random() < 0.4 else new_frame() for _ in range(3)
            )
            out.append(Step("batch", batch))
        elif kind == "dups":  # a batch of duplicates only: its counts commit unflushed
            out.append(Step("batch", tuple(resend_frame() for _ in range(3))))
        elif kind == "resolve":
            inbox = conflicts.pop(0)
            out.append(Step("resolve", inbox=inbox, action=rng.choice(("keep", "accept"))))
        elif kind == "seal":
            out.append(Step("seal"))
        else:
            event = rng.choice(events)
            out.append(
                Step("work", key=(event["seller_id"], event["sku"], event["marketplace_id"]))
            )
    return out


def identity_of(inbox: str, body: bytes, key: str | None) -> str:
    """The identity the store keys a delivery by: the frame id, or the listing event's
    (source, subscription, notification id)."""
    if inbox == "ussd":
        return str(key)
    event = json.loads(body)
    parts = [event["source"], event["subscription"], event["notification_id"]]
    return json.dumps(parts, separators=(",", ":"))


def delivered(variant: int, steps: int, made: int) -> Counter[str]:
    """Deliveries of each identity in the first ``made`` steps: the truth no count may
    exceed."""
    ran = plan(variant, steps)[:made]
    return Counter(identity_of(*delivery) for step in ran for delivery in step.deliveries)


def decision_facts(decision: oncebox.Decision) -> dict[str, Any]:
    return {
        "inbox": decision.inbox,
        "verdict": str(decision.verdict),
        "may_ack": decision.may_ack,
        "reason": decision.reason,
        "identity": decision.identity,
        "record_id": decision.record_id,
        "quarantine_id": decision.quarantine_id,
        "first_quarantine": decision.first_quarantine,
        "dead_letter_id": decision.dead_letter_id,
        "log_position": decision.log_position,
    }


def perform(box: oncebox.Oncebox, step: Step, open_rows: dict[str, list[int]]) -> dict[str, Any]:
    """Run one step; what it returns is what the child may ack."""
    if step.kind in ("ingest", "batch"):
        inbox = step.deliveries[0][0]
        deliveries = [Delivery(body, key=key) for _, body, key in step.deliveries]
        decisions = box.ingest_batch(inbox, deliveries)
        for d in decisions:
            if d.first_quarantine and d.quarantine_id is not None:
                open_rows.setdefault(d.inbox, []).append(d.quarantine_id)
        return {"op": step.kind, "decisions": [decision_facts(d) for d in decisions]}
    if step.kind == "resolve":
        rows = open_rows.get(step.inbox, [])
        if not rows:
            return {"op": "skip"}
        qid = rows.pop(0)
        box.resolve(qid, step.action, "power-loss harness")
        return {"op": "resolve", "quarantine_id": qid, "action": step.action}
    if step.kind == "seal":
        return {"op": "seal", "positions": {str(r): s for r, s in box.seal().items()}}
    worker = box.reconciler("listing", worker="powerloss")
    ticket = worker.begin_refresh(step.key)
    assert ticket is not None
    outcome = worker.complete(
        ticket, ReadResult(ticket.key, {"status": "READ", "g": ticket.generation})
    )
    report = {"op": "complete", "key": list(ticket.key), "generation": ticket.generation}
    return report if outcome == "applied" else {"op": "skip"}


# -- one run -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    index: int
    mode: str  # a key of MODES
    variant: int
    seed: int
    crash_at: int | None  # None: the dry run, which only counts calls
    steps: int = STEPS


@dataclass
class RunResult:
    spec: RunSpec
    findings: Findings = field(default_factory=Findings)
    calls: int = 0  # write, sync and truncate calls until the cut (or in all, dry)
    kinds: dict[str, int] = field(default_factory=dict)
    during: str = ""
    step: str = ""  # the step the cut hit
    faults: Faults = field(default_factory=Faults)
    acked: int = 0
    harness: str = ""  # set when the run itself went wrong
    seconds: float = 0.0


def store_url(path: Path, mode: str, vfs: str | None = None) -> str:
    # The store sets its own wal_autocheckpoint on every connection, so the child's
    # frequent checkpoints are asked of the store, in its URL.
    query = (
        f"?vfs={vfs}&synchronous={mode}&wal_autocheckpoint={AUTOCHECKPOINT_PAGES}" if vfs else ""
    )
    return f"sqlite:///{path}{query}"


def split_transactions() -> None:
    """The mutant of the second negative control: no BEGIN or COMMIT, so every statement
    of a transaction commits on its own. It patches a private method on purpose: only
    the crashing child runs it, to show the harness sees half-applied transactions."""
    from oncebox.store import sqlite
    from oncebox.store.sqlitetx import SQLiteTx

    @contextlib.contextmanager
    def autocommit(
        store: sqlite.SQLiteStore, begin: str, durable: bool = True
    ) -> Iterator[SQLiteTx]:
        yield SQLiteTx(store._connect(), store._clock, not durable)

    def autocommit_once(store: sqlite.SQLiteStore, work: Any, durable: bool = True) -> Any:
        return work(SQLiteTx(store._connect(), store._clock, not durable))

    sqlite.SQLiteStore._transaction = autocommit  # type: ignore[method-assign,assignment]
    # atomic's transaction, which does not go through _transaction
    sqlite.SQLiteStore._once = autocommit_once  # type: ignore[method-assign,assignment]


def seal_apart() -> None:
    """The mutant of the third negative control: the SQLite store says it lets several
    writers in, so the engine commits each decision without a flush and seals it in a
    second, durable transaction (the core before the lean ingest), a single delivery's
    too (on a store of many writers, PostgreSQL, that one is sealed in its own
    transaction instead). Only the crashing child runs it, to show the harness sees a
    record committed apart from its seal."""
    from oncebox.engine import box, durability
    from oncebox.store import sqlite

    sqlite.SQLiteStore.single_writer = False  # type: ignore[misc]
    two = durability.commit_sealed

    def commit_sealed(*args: Any, **kwargs: Any) -> Any:
        return two(*args, **{**kwargs, "alone": False})

    box.commit_sealed = commit_sealed  # type: ignore[attr-defined]


def relax_everything() -> None:
    """The mutant of the fourth negative control: every ingest is taken for one that
    writes nothing but counts, so records, their effects and seals commit at
    ``synchronous=NORMAL`` like a duplicate's counts. Only the crashing child runs it,
    to show the harness sees acked records lost when the relaxation reaches them."""
    from oncebox.engine import box, decide

    decide.heavier = lambda *args: False  # type: ignore[assignment]
    decide.counted = lambda walk: True  # type: ignore[assignment]
    box.counted = lambda walk: True  # type: ignore[assignment]


def child(spec: RunSpec, db: Path, report_path: Path) -> NoReturn:
    """The forked process: the workload over the shim, reports after each return."""
    status = 3
    try:
        fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        current = ["open"]

        def say(line: dict[str, Any]) -> None:
            os.write(fd, json.dumps(line).encode() + b"\n")

        def on_crash(cut: dict[str, Any]) -> None:
            say({"op": "crash", "step": current[0], **cut})

        vfs = PowerLossVFS(VFS_NAME, spec.crash_at, random.Random(spec.seed * 2 + 1), on_crash)
        if spec.mode == "AUTOCOMMIT":
            split_transactions()
        elif spec.mode == "TWO_TX":
            seal_apart()
        elif spec.mode == "RELAX_ALL":
            relax_everything()
        clock = ManualClock(START)
        box = oncebox.open(
            store_url(db, MODES[spec.mode][0], VFS_NAME),
            clock=clock,
            seal=inline_seal(spec.variant),
        )
        open_rows: dict[str, list[int]] = {}
        for step in plan(spec.variant, spec.steps):
            current[0] = step.kind
            clock.advance(1.0)
            say(perform(box, step, open_rows))
        say({"op": "done", "call": vfs.calls.total, "kinds": dict(vfs.calls.kinds)})
        status = 0
    except BaseException:
        with contextlib.suppress(Exception):
            say({"op": "error", "error": traceback.format_exc()[-2000:]})
    os._exit(status)


def restart(spec: RunSpec, db: Path, snap: Snapshot, findings: Findings) -> None:
    """Open, recover and verify as a restarted service would, then take every delivery
    again, as a sender that never saw its acks would: none may be accepted twice."""
    with oncebox.open(store_url(db, "FULL"), clock=ManualClock(START + 100_000)) as box:
        box.recover()
        verified = box.verify()
        if not verified.ok:
            findings.add(
                "uncovered",
                f"after recover: broken at {verified.broken_at} ({verified.broken_why}), "
                f"uncovered {verified.uncovered[:10]}",
            )
        stored = {(r["inbox_id"], r["identity"]) for r in snap.records.values()}
        ids = {name: box.inbox(name).row.id for name in ("ussd", "listing")}
        for step in plan(spec.variant, spec.steps):
            for inbox, body, key in step.deliveries:
                decision = box.ingest(inbox, Delivery(body, key=key))
                if (
                    str(decision.verdict) == "accepted"
                    and (ids[inbox], decision.identity) in stored
                ):
                    findings.add("twice", f"redelivered {decision.identity} was accepted again")
        verified = box.verify()
        if not verified.ok:
            findings.add("uncovered", f"after redelivery: uncovered {verified.uncovered[:10]}")


def inspect(spec: RunSpec, db: Path, reports: list[dict[str, Any]], result: RunResult) -> None:
    """Everything the parent checks after the cut, in the order a restart would see it."""
    findings = result.findings
    conn = apsw.Connection(str(db))
    try:
        broken = integrity(conn)
        if broken:
            findings.add("integrity", broken)
            return
        snap = load(conn)
    finally:
        conn.close()
    structure(snap, findings)
    if inline_seal(spec.variant):
        unsealed(snap, findings)
    result.acked = acked(snap, reports, findings)
    # The steps that ran: each reported, and the one the cut hit.
    counts_bounded(snap, delivered(spec.variant, spec.steps, len(reports) + 1), findings)
    try:
        restart(spec, db, snap, findings)
    except oncebox.OnceboxError as exc:
        # A store that cannot open, recover or take deliveries again is not intact.
        findings.add("integrity", f"after the crash the store fails: {exc}")
        return
    conn = apsw.Connection(str(db))
    try:
        after = Findings()
        structure(load(conn), after)
    finally:
        conn.close()
    for category in ("half", "twice"):
        for what in after.found[category]:
            findings.add(category, f"after redelivery: {what}")


def run_one(spec: RunSpec, template: Path, workdir: Path) -> RunResult:
    started = time.monotonic()
    result = RunResult(spec)
    where = workdir / f"run-{spec.mode}-{spec.index}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    db, report_path = where / "store.db", where / "acks.jsonl"
    shutil.copyfile(template, db)
    pid = os.fork()
    if pid == 0:
        child(spec, db, report_path)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    lines = report_path.read_text().splitlines() if report_path.exists() else []
    reports: list[dict[str, Any]] = [json.loads(line) for line in lines]
    last: dict[str, Any] = reports[-1] if reports else {"op": "none"}
    expected = (0, "done") if spec.crash_at is None else (CRASHED, "crash")
    if (code, last["op"]) != expected:
        result.harness = f"child exited {code} after {last}"[:3000]
    else:
        result.calls = int(last["call"]) + (0 if spec.crash_at is None else 1)
        result.kinds = last["kinds"]
        result.during = last.get("during", "")
        result.step = last.get("step", "")
        result.faults = Faults(**last.get("faults", {}))
        try:
            inspect(spec, db, reports[:-1], result)
        except Exception:
            result.harness = traceback.format_exc()[-3000:]
    shutil.rmtree(where, ignore_errors=True)
    result.seconds = time.monotonic() - started
    return result


def make_template(workdir: Path) -> Path:
    """A fresh store with the default inboxes, checkpointed into one synced file."""
    path = workdir / "template.db"
    with oncebox.open(store_url(path, "FULL"), clock=ManualClock(START)):
        pass
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


# -- the campaign --------------------------------------------------------------------------
_STATE: dict[str, Path] = {}


def _init(template: Path, workdir: Path) -> None:
    _STATE["template"], _STATE["workdir"] = template, workdir


def _work(specs: Sequence[RunSpec]) -> list[RunResult]:
    return [run_one(spec, _STATE["template"], _STATE["workdir"]) for spec in specs]


def _chunks(specs: Sequence[RunSpec], size: int) -> Iterator[Sequence[RunSpec]]:
    for start in range(0, len(specs), size):
        yield specs[start : start + size]


def execute(specs: Sequence[RunSpec], template: Path, workdir: Path, jobs: int) -> list[RunResult]:
    if jobs <= 1:
        _init(template, workdir)
        return _work(specs)
    context = multiprocessing.get_context("fork")
    with context.Pool(jobs, initializer=_init, initargs=(template, workdir)) as pool:
        return [r for chunk in pool.imap_unordered(_work, _chunks(specs, 10)) for r in chunk]


def dry_counts(
    mode: str, variants: int, steps: int, template: Path, workdir: Path, jobs: int
) -> dict[int, RunResult]:
    """Each variant run once without a cut: its call count, and a clean store to check."""
    specs = [RunSpec(-1 - v, mode, v, 0, None, steps) for v in range(variants)]
    return {r.spec.variant: r for r in execute(specs, template, workdir, jobs)}


def campaign_specs(
    mode: str, runs: int, seed: int, variants: int, steps: int, calls: dict[int, int]
) -> list[RunSpec]:
    """Run i: a seeded variant and a call index uniform over that variant's calls."""
    specs = []
    for index in range(runs):
        run_seed = seed * 1_000_003 + index + 300_000 * list(MODES).index(mode)
        rng = random.Random(run_seed)
        variant = rng.randrange(variants)
        specs.append(RunSpec(index, mode, variant, run_seed, rng.randrange(calls[variant]), steps))
    return specs


@dataclass
class Summary:
    """The figures of one campaign."""

    mode: str
    results: list[RunResult]
    dry: dict[int, RunResult]

    def anomalies(self, category: str) -> tuple[int, int]:
        """(anomalies, runs with one) in a category."""
        counts = [r.findings.count(category) for r in self.results]
        return sum(counts), sum(1 for c in counts if c)

    @property
    def harness_failures(self) -> list[RunResult]:
        return [r for r in self.results + list(self.dry.values()) if r.harness]

    def dry_anomalies(self) -> int:
        return sum(sum(r.findings.count(c) for c in CATEGORIES) for r in self.dry.values())

    def print(self, out: Any = sys.stdout) -> None:
        rs = self.results
        calls = [r.calls for r in rs]
        full = sorted(r.calls for r in self.dry.values())
        kinds: Counter[str] = Counter()
        for r in rs:
            kinds.update(r.kinds)
        faults = Faults()
        for r in rs:
            faults.add(r.faults)
        deciles = Counter(
            min(9, 10 * r.spec.crash_at // self.dry[r.spec.variant].calls)
            for r in rs
            if r.spec.crash_at is not None
        )

        def p(line: str) -> None:
            print(line, file=out)

        steps = rs[0].spec.steps if rs else 0
        by_kind = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        by_call = ", ".join(f"{k} {v}" for k, v in Counter(r.during for r in rs).most_common())
        by_step = ", ".join(f"{k} {v}" for k, v in Counter(r.step for r in rs).most_common())
        p(f"== {MODES[self.mode][1]}: {len(rs)} runs ==")
        p(
            f"workload: {len(self.dry)} seeded variants of {steps} steps; write+sync+truncate "
            f"calls per complete run: min {full[0]}, median {statistics.median(full):.0f}, "
            f"max {full[-1]}"
        )
        p(f"operations until the cut: {sum(calls)} calls ({by_kind})")
        p(f"acked results checked: {sum(r.acked for r in rs)}")
        taken = [r.findings.counts_taken_back for r in rs]
        p(
            f"acked duplicates whose counts a cut took back (allowed: acked after the last "
            f"flush): {sum(taken)} (in {sum(1 for t in taken if t)} runs)"
        )
        p(
            f"faults: {len(rs)} power cuts; unsynced sectors {faults.sectors}: reverted "
            f"{faults.reverted}, latest write {faults.latest}, older write {faults.older}; "
            f"file lengths rolled back {faults.lengths_changed}"
        )
        p("crash point by tenth of the run: " + " ".join(str(deciles[d]) for d in range(10)))
        p(f"crash point by call: {by_call}")
        p(f"crash point by step: {by_step}")
        for category in CATEGORIES:
            n, runs = self.anomalies(category)
            p(f"{LABELS[category]}: {n} (in {runs} runs)")
        p(
            f"complete runs without a cut, anomalies: {self.dry_anomalies()}; "
            f"harness failures: {len(self.harness_failures)}"
        )
        shown = 0
        for r in rs + list(self.dry.values()):
            for category in CATEGORIES:
                for what in r.findings.found[category][:2]:
                    if shown < 8:
                        p(
                            f"  run {r.spec.index} (seed {r.spec.seed}, variant {r.spec.variant}, "
                            f"call {r.spec.crash_at}): {category}: {what}"
                        )
                        shown += 1
        for r in self.harness_failures[:3]:
            p(f"  harness failure in run {r.spec.index} (seed {r.spec.seed}): {r.harness}")


def campaign(
    mode: str,
    runs: int,
    seed: int,
    variants: int,
    steps: int,
    template: Path,
    workdir: Path,
    jobs: int,
) -> Summary:
    dry = dry_counts(mode, variants, steps, template, workdir, jobs)
    calls = {v: r.calls for v, r in dry.items()}
    if any(r.harness for r in dry.values()):
        return Summary(mode, [], dry)
    specs = campaign_specs(mode, runs, seed, variants, steps, calls)
    results = sorted(execute(specs, template, workdir, jobs), key=lambda r: r.spec.index)
    return Summary(mode, results, dry)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs with synchronous=FULL")
    parser.add_argument("--control-runs", type=int, default=200, help="synchronous=NORMAL runs")
    parser.add_argument("--mutant-runs", type=int, default=100, help="autocommit mutant runs")
    parser.add_argument(
        "--two-tx-runs", type=int, default=100, help="runs of the mutant that seals apart"
    )
    parser.add_argument(
        "--relax-all-runs", type=int, default=100, help="runs of the mutant relaxing every ingest"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", type=int, default=VARIANTS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = parser.parse_args(argv)
    logging.getLogger("oncebox").setLevel(logging.ERROR)  # conflicts are the workload's own
    print("oncebox power-loss simulation: SQLite through an APSW VFS shim, 512-byte sectors")
    summaries: dict[str, Summary] = {}
    with tempfile.TemporaryDirectory(prefix="oncebox-powerloss-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        template = make_template(workdir)
        common = (args.seed, args.variants, args.steps, template, workdir, args.jobs)
        for mode, runs in (
            ("FULL", args.runs),
            ("NORMAL", args.control_runs),
            ("AUTOCOMMIT", args.mutant_runs),
            ("TWO_TX", args.two_tx_runs),
            ("RELAX_ALL", args.relax_all_runs),
        ):
            if runs:
                started = time.monotonic()
                summaries[mode] = campaign(mode, runs, *common)
                summaries[mode].print()
                print(f"wall time: {time.monotonic() - started:.1f} s", flush=True)
    return verdict(summaries)


def verdict(summaries: dict[str, Summary]) -> int:
    """0 only when FULL shows no anomaly and each negative control shows its failure."""
    if any(s.harness_failures for s in summaries.values()):
        print("HARNESS FAILURE: see above")
        return 3
    broken = [
        f"{MODES[mode][1]} showed no {LABELS[category]}"
        for mode, category in (
            ("NORMAL", "lost"),
            ("AUTOCOMMIT", "half"),
            ("TWO_TX", "unsealed"),
            ("RELAX_ALL", "lost"),
        )
        if mode in summaries and summaries[mode].anomalies(category)[0] == 0
    ]
    if broken:
        print(f"NEGATIVE CONTROL FAILED ({'; '.join(broken)}): the harness is broken")
        return 2
    full = summaries.get("FULL")
    if full and (sum(full.anomalies(c)[0] for c in CATEGORIES) or full.dry_anomalies()):
        print("ANOMALIES with synchronous=FULL: see above")
        return 1
    print("result: synchronous=FULL shows no anomaly; every negative control detects its own")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
