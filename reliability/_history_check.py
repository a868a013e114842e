"""The delivery-history checker: the clients' histories against the final store.

In the spirit of Jepsen's queue checker, it trusts only what a client saw and what the
store holds at the end, never the engine's own bookkeeping:

- **lost**: a delivery the client was told it may acknowledge whose trace is not in the
  store (accepted or duplicate: a record of that identity with that content; conflict: a
  quarantine row for that newcomer; rejected: a dead letter of those bytes);
- **duplicated**: applied more than once: an identity accepted twice across all
  histories, two records for one identity, a triage ledger that is not one row per
  record or whose totals are not the sum of the distinct records, a work key whose
  generation is not the number of events stored for it;
- **unexpected**: a record, quarantine row or dead letter that no client ever sent;
- **conflicts**: every distinct newcomer (same identity, other content than the record)
  must be quarantined exactly once, and nothing else;
- **indeterminate**: attempts with no outcome (the client was killed inside the call)
  or with an error, and whether redelivery resolved each of them;
- **leases**: decided only by the database clock and the token: a delivery accepted
  after its lease expired (``t0`` read from the server before the call is past the
  expiry), fenced as expired before expiry (``t1`` read after the call is not past it),
  or with a superseded token, and fenced probes that were stored;
- **reconciler**: completions that landed with a stale claim, a generation completed
  twice, a document read for another generation than the one applied, keys left dirty.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _history_client import FENCED, read_history, settled

FRAME = re.compile(rb"H1\|[0-9]+\|([A-Za-z0-9]+)\|([A-Z]{3})\|([0-9]+)\|")
# How store/postgres.py words the refusal of an ingest whose relaxed decision a server
# restart may have lost before its durable seal (a figure, not a check).
RESTART_REFUSAL = "PostgreSQL restarted after a commit that was not yet durable"


@dataclass(frozen=True)
class Rec:
    inbox: str
    id: int
    ident: bytes
    witness: str
    content: bytes
    fields: dict[str, Any]


@dataclass
class Snapshot:
    """The final store, read in one snapshot after recovery."""

    records: list[Rec]
    quarantine: list[tuple[str, bytes, str, int]]  # inbox, ident, witness, seen_count
    dead_letters: list[tuple[str, str]]  # inbox, sha256 of the body
    ledger: list[tuple[str, int, str, str, int]]  # inbox, record_id, site, need, headcount
    totals: list[tuple[str, str, int, int]]  # site, need, headcount, cases (ussd)
    work_keys: list[dict[str, Any]]
    completes: list[dict[str, Any]]  # the log's complete entries
    recovered: int
    verify_ok: bool
    uncovered: int


def snapshot(box: Any) -> Snapshot:
    """Recover, verify, then read every table the checker needs in one snapshot."""
    recovered = int(box.recover())
    report = box.verify()
    with box.store.reading() as tx:
        names = {int(i): str(n) for i, n in tx.execute("SELECT id, name FROM inboxes")}
        records = [
            Rec(names[int(inbox)], int(rid), bytes(ident), bytes(witness).hex(),
                bytes(content or b""), json.loads(fields or "{}"))
            for inbox, rid, ident, witness, content, fields in tx.execute(
                "SELECT inbox_id, id, ident, witness, content, fields FROM records")
        ]  # fmt: skip
        quarantine = [
            (names[int(inbox)], bytes(ident), bytes(witness).hex(), int(seen))
            for inbox, ident, witness, seen in tx.execute(
                "SELECT inbox_id, ident, witness, seen_count FROM quarantine")
        ]  # fmt: skip
        letters = [
            (names[int(inbox)], str(sha))
            for inbox, sha in tx.execute("SELECT inbox_id, sha256 FROM dead_letters")
        ]
        ledger = [
            (names[int(inbox)], int(rid), str(site), str(need), int(head))
            for inbox, rid, site, need, head in tx.execute(
                "SELECT inbox_id, record_id, site, need, headcount FROM triage_ledger")
        ]  # fmt: skip
        completes = [
            json.loads(state)
            for (state,) in tx.execute("SELECT state FROM log WHERE step = 'complete'")
        ]
    triage = box.triage("ussd")
    totals = [
        (t["site"], t["need"], int(t["headcount"]), int(t["cases"])) for t in triage["totals"]
    ]
    work = [
        {
            "key": tuple(k.key),
            "generation": k.generation,
            "applied_generation": k.applied_generation,
            "document": json.loads(k.document) if k.document else None,
            "document_generation": k.document_generation,
            "dirty": k.dirty,
            "in_review": bool(k.in_review),
        }
        for k in box.work_keys("listing")
    ]
    return Snapshot(
        records,
        quarantine,
        letters,
        ledger,
        totals,
        work,
        completes,
        recovered,
        bool(report.ok),
        len(report.uncovered),
    )


def _ident(identity: str) -> bytes:
    return hashlib.sha256(identity.encode("utf-8")).digest()


@dataclass
class Report:
    """Every figure the run prints; ``anomalies`` must be zero."""

    clients: int = 0
    client_starts: int = 0
    attempts: int = 0
    deliveries: int = 0  # planned items the clients sent
    decided: int = 0
    undecided: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    acked: int = 0  # acknowledged decisions the lost check examined
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    misdecided: int = 0
    duplicated: int = 0
    duplicated_by: Counter[str] = field(default_factory=Counter)
    unexpected: int = 0
    unexpected_by: Counter[str] = field(default_factory=Counter)
    conflict_deliveries: int = 0
    conflict_decisions: int = 0
    conflicts_injected: int = 0  # distinct newcomers that reached a decision
    conflicts_quarantined: int = 0
    conflicts_missing: int = 0
    conflicts_extra: int = 0
    indeterminate: int = 0
    indeterminate_resolved: int = 0
    resolved_as: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    errors_resolved: int = 0
    # Ingests the store refused because the server restarted between the relaxed decision
    # commit and the durable seal meant to cover it (store/postgres.py, _covered).
    restart_refusals: int = 0
    setup_errors: Counter[str] = field(default_factory=Counter)  # before anything was sent
    fenced_redelivered: int = 0
    leases_taken: int = 0
    lease_deliveries: int = 0
    lease_violations: Counter[str] = field(default_factory=Counter)
    probes: Counter[str] = field(default_factory=Counter)
    device_clock_disagreed: int = 0  # decisions a device clock would have got wrong
    skewed_deliveries: int = 0
    worker_tickets: int = 0
    worker_outcomes: Counter[str] = field(default_factory=Counter)
    reconciler_violations: Counter[str] = field(default_factory=Counter)
    records: Counter[str] = field(default_factory=Counter)
    recovered: int = 0
    verify_ok: bool = False
    uncovered: int = 0

    @property
    def anomalies(self) -> int:
        return (
            self.lost
            + self.misdecided
            + self.duplicated
            + self.unexpected
            + self.conflicts_missing
            + self.conflicts_extra
            + sum(self.lease_violations.values())
            + sum(self.reconciler_violations.values())
            + self.undecided
            + self.uncovered
            + (0 if self.verify_ok else 1)
        )


@dataclass
class _Item:
    inbox: str
    kind: str
    identity: str | None
    witness: str | None
    body_sha256: str
    outcomes: list[tuple[int, dict[str, Any] | None]] = field(default_factory=list)


Lines = list[dict[str, Any]]


def load_histories(directory: Path) -> tuple[dict[int, Lines], dict[str, Lines]]:
    clients = {
        int(p.stem.split("-")[1]): read_history(p) for p in sorted(directory.glob("client-*.jsonl"))
    }
    workers = {p.stem: read_history(p) for p in sorted(directory.glob("worker-*.jsonl"))}
    return clients, workers


def check(
    clients: dict[int, Lines],
    workers: dict[str, Lines],
    snap: Snapshot,
) -> Report:
    """Judge the histories against the final store."""
    report = Report(
        clients=len(clients),
        recovered=snap.recovered,
        verify_ok=snap.verify_ok,
        uncovered=snap.uncovered,
    )
    items: dict[tuple[int, int], _Item] = {}
    indeterminate: list[tuple[int, int, list[int]]] = []  # client, attempt, items
    errored: list[tuple[int, int, list[int]]] = []
    sent_pairs: set[tuple[str, bytes, str]] = set()
    sent_bodies: set[tuple[str, str]] = set()
    probe_idents: set[tuple[str, bytes]] = set()
    accepted: Counter[tuple[str, str]] = Counter()

    for c, lines in clients.items():
        decided, _ = settled(lines)
        report.client_starts += sum(1 for line in lines if line["t"] == "start")
        report.leases_taken += sum(1 for line in lines if line["t"] == "lease")
        skew = next((line["skew"] for line in lines if line["t"] == "start"), 0.0)
        attempts: dict[int, dict[str, Any]] = {}
        answered: set[int] = set()
        for line in lines:
            if line["t"] == "attempt":
                attempts[line["a"]] = line
                report.attempts += 1
                for sent in line["items"]:
                    key = (c, sent["k"])
                    if key not in items:
                        items[key] = _Item(
                            sent["inbox"],
                            sent["kind"],
                            sent["identity"],
                            sent["witness"],
                            sent["body_sha256"],
                        )
                    items[key].outcomes.append((line["a"], None))
                    sent_bodies.add((sent["inbox"], sent["body_sha256"]))
                    if sent["identity"] is not None:
                        pair = (sent["inbox"], _ident(sent["identity"]), sent["witness"])
                        sent_pairs.add(pair)
                        if sent["kind"].startswith("probe"):
                            probe_idents.add(pair[:2])
            elif line["t"] == "setup_error":
                report.setup_errors[line["error"]] += 1
            elif line["t"] == "outcome":
                answered.add(line["a"])
                attempt = attempts[line["a"]]
                ks = [sent["k"] for sent in attempt["items"]]
                if line["kind"] == "error":
                    report.errors[line["error"]] += 1
                    report.restart_refusals += RESTART_REFUSAL in line.get("message", "")
                    errored.append((c, line["a"], ks))
                    continue
                for sent, d in zip(attempt["items"], line["decisions"], strict=True):
                    item = items[(c, sent["k"])]
                    item.outcomes[-1] = (line["a"], d)
                    report.verdicts[d["reason"] if d["reason"] in FENCED else d["verdict"]] += 1
                    if d["verdict"] == "accepted":
                        accepted[(item.inbox, str(d["identity"]))] += 1
                    if d["verdict"] == "conflict":
                        report.conflict_decisions += 1
                if attempt.get("lease"):
                    _check_lease(report, attempt, line, skew)
        for a, attempt in attempts.items():
            if a not in answered:
                indeterminate.append((c, a, [sent["k"] for sent in attempt["items"]]))
        for (cc, k), item in items.items():
            if cc != c:
                continue
            report.deliveries += 1
            report.kinds[item.kind] += 1
            if k in decided:
                report.decided += 1
            else:
                report.undecided += 1

    # Indeterminate and errored attempts: did a later attempt of the same items decide?
    def later_decision(c: int, a: int, k: int) -> dict[str, Any] | None:
        for later, d in items[(c, k)].outcomes:
            probe = items[(c, k)].kind.startswith("probe")
            if later > a and d is not None and (d["may_ack"] or probe):
                return d
        return None

    for c, a, ks in indeterminate:
        report.indeterminate += 1
        found = [later_decision(c, a, k) for k in ks]
        if all(found):
            report.indeterminate_resolved += 1
            for d in found:
                assert d is not None
                report.resolved_as[d["reason"] if d["reason"] in FENCED else d["verdict"]] += 1
    for c, a, ks in errored:
        if all(later_decision(c, a, k) for k in ks):
            report.errors_resolved += 1
    for item in items.values():
        fenced = [d for _, d in item.outcomes if d is not None and d["reason"] in FENCED]
        if fenced and not item.kind.startswith("probe"):
            report.fenced_redelivered += 1

    # The store, indexed.
    by_ident: dict[tuple[str, bytes], list[Rec]] = defaultdict(list)
    for rec in snap.records:
        by_ident[(rec.inbox, rec.ident)].append(rec)
        report.records[rec.inbox] += 1
    quarantined = Counter((inbox, ident, w) for inbox, ident, w, _ in snap.quarantine)
    letters = set(snap.dead_letters)

    # Lost, and decisions that do not match what was sent.
    for (c, k), item in items.items():
        ident = _ident(item.identity) if item.identity is not None else None
        missing = False
        for _, d in item.outcomes:
            if d is None:
                continue
            report.misdecided += _misdecided(item, d)
            if not d["may_ack"]:
                continue
            report.acked += 1
            if d["verdict"] in ("accepted", "duplicate"):
                stored = by_ident.get((item.inbox, ident or b""), [])
                missing |= not any(rec.witness == item.witness for rec in stored)
            elif d["verdict"] == "conflict":
                missing |= quarantined[(item.inbox, ident or b"", item.witness or "")] == 0
            elif d["verdict"] == "rejected":
                missing |= (item.inbox, item.body_sha256) not in letters
        if missing:
            report.lost += 1
            if len(report.lost_examples) < 5:
                report.lost_examples.append(f"client {c} item {k} {item.inbox} {item.identity}")

    # Duplicated: applied more than once.
    report.duplicated_by["accepted twice"] = sum(n - 1 for n in accepted.values() if n > 1)
    report.duplicated_by["records per identity"] = sum(
        len(recs) - 1 for recs in by_ident.values() if len(recs) > 1
    )
    _check_ledger(report, snap)
    _check_generations(report, snap)
    report.duplicated = sum(report.duplicated_by.values())

    # Unexpected: stored, never sent. Probes are sent, but must never be stored.
    for rec in snap.records:
        if (rec.inbox, rec.ident) in probe_idents:
            report.lease_violations["fenced probe stored"] += 1
        elif (rec.inbox, rec.ident, rec.witness) not in sent_pairs:
            report.unexpected_by["records"] += 1
    for inbox, ident, witness, _ in snap.quarantine:
        if (inbox, ident, witness) not in sent_pairs:
            report.unexpected_by["quarantine rows"] += 1
    for inbox, sha in snap.dead_letters:
        if (inbox, sha) not in sent_bodies:
            report.unexpected_by["dead letters"] += 1
    report.unexpected = sum(report.unexpected_by.values())

    # Conflicts: each distinct newcomer quarantined exactly once, nothing else.
    reached: dict[tuple[str, bytes], set[str]] = defaultdict(set)
    maybe: dict[tuple[str, bytes], set[str]] = defaultdict(set)
    for item in items.values():
        if item.identity is None or item.kind.startswith("probe"):
            continue
        report.conflict_deliveries += item.kind == "conflict"
        at = (item.inbox, _ident(item.identity))
        maybe[at].add(str(item.witness))
        if any(d is not None and d["verdict"] != "rejected" for _, d in item.outcomes):
            reached[at].add(str(item.witness))
    expected: set[tuple[str, bytes, str]] = set()
    for at, witnesses in reached.items():
        stored = by_ident.get(at, [])
        winner = stored[0].witness if stored else None
        expected |= {(at[0], at[1], w) for w in witnesses if w != winner}
    report.conflicts_injected = len(expected)
    report.conflicts_quarantined = sum(quarantined.values())
    report.conflicts_missing = len(expected - set(quarantined))
    # Extra: a second row for one newcomer, or a row for content no decided delivery
    # explains (rows for content never sent at all are already counted as unexpected).
    explained = expected | {(at[0], at[1], w) for at, ws in maybe.items() for w in ws - reached[at]}
    report.conflicts_extra = sum(n - 1 for n in quarantined.values()) + sum(
        1 for q in quarantined if q not in explained and q in sent_pairs
    )
    _check_workers(report, workers, snap)
    return report


def _misdecided(item: _Item, d: dict[str, Any]) -> bool:
    """A corrupt body not rejected, a valid one rejected, or another identity/witness."""
    if item.identity is None:
        return bool(d["verdict"] != "rejected")
    if d["verdict"] == "rejected":
        return d["reason"] not in FENCED
    return bool(d["identity"] != item.identity or d["witness"] != item.witness)


def _check_lease(
    report: Report, attempt: dict[str, Any], outcome: dict[str, Any], skew: float
) -> None:
    """Only the database clock and the token may decide; device clocks never."""
    lease = attempt["lease"]
    [d] = outcome["decisions"]
    report.lease_deliveries += 1
    if skew:
        report.skewed_deliveries += 1
    expires, t0, t1 = lease["expires_at"], attempt.get("t0"), outcome.get("t1")
    reason = d["reason"]
    stale_token = lease["use_token"] != lease["token"]
    if lease["expect"]:
        report.probes[f"{lease['expect']} sent"] += 1
        report.probes[f"{lease['expect']} fenced"] += reason in FENCED
    if reason not in FENCED:
        if t0 is not None and t0 > expires:
            report.lease_violations["accepted after expiry"] += 1
        if stale_token:
            report.lease_violations["accepted with a superseded token"] += 1
    elif reason == "expired_lease":
        if t1 is not None and t1 <= expires and not stale_token:
            report.lease_violations["expired before expiry"] += 1
    elif reason == "stale_token" and not stale_token and not lease["expect"]:
        report.lease_violations["own current token called stale"] += 1
    device = float(attempt["device_time"])
    by_device = "expired_lease" if device > expires else None
    by_server = "expired_lease" if reason == "expired_lease" else None
    if not stale_token and by_device != by_server:
        report.device_clock_disagreed += 1


def _check_ledger(report: Report, snap: Snapshot) -> None:
    """Apply-once for triage: one ledger row per record, totals = sum of distinct records."""
    ussd = {rec.id: rec for rec in snap.records if rec.inbox == "ussd"}
    rows: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for inbox, rid, site, need, head in snap.ledger:
        if inbox == "ussd":
            rows[rid].append((site, need, head))
    bad = 0
    expect: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for rid, rec in ussd.items():
        match = FRAME.match(rec.content)
        assert match is not None, rec.content
        site, need, head = match.group(1).decode(), match.group(2).decode(), int(match.group(3))
        expect[(site, need)][0] += head
        expect[(site, need)][1] += 1
        if rows.get(rid) != [(site, need, head)]:
            bad += 1
    report.duplicated_by["ledger rows not one per record"] = bad + sum(
        len(r) for rid, r in rows.items() if rid not in ussd
    )
    got = {(s, n): [h, c] for s, n, h, c in snap.totals}
    report.duplicated_by["triage totals off"] = sum(
        got.get(cell, [0, 0]) != expect.get(cell, [0, 0]) for cell in set(got) | set(expect)
    )


def _check_generations(report: Report, snap: Snapshot) -> None:
    """Apply-once for listing: each stored event bumped its work key exactly once."""
    events: Counter[tuple[str, str, str]] = Counter(
        (r.fields["seller_id"], r.fields["sku"], r.fields["marketplace_id"])
        for r in snap.records
        if r.inbox == "listing"
    )
    keys = {k["key"]: k["generation"] for k in snap.work_keys}
    report.duplicated_by["work key generation off"] = sum(
        keys.get(key, 0) != events.get(key, 0) for key in set(keys) | set(events)
    )


def _check_workers(report: Report, workers: dict[str, Lines], snap: Snapshot) -> None:
    stale_tokens: set[int] = set()
    for lines in workers.values():
        for line in lines:
            if line["t"] == "ticket":
                report.worker_tickets += 1
            elif line["t"] == "complete":
                report.worker_outcomes[line["outcome"]] += 1
                if line["outcome"] in ("stale", "superseded"):
                    stale_tokens.add(line["token"])
    landed = Counter((tuple(e["key"]), e["generation"]) for e in snap.completes)
    violations = report.reconciler_violations
    violations["generation completed twice"] = sum(n - 1 for n in landed.values() if n > 1)
    violations["stale completion landed"] = sum(e["token"] in stale_tokens for e in snap.completes)
    violations["keys dirty at the end"] = sum(k["dirty"] for k in snap.work_keys)
    violations["keys in review"] = sum(k["in_review"] for k in snap.work_keys)
    violations["document of another generation"] = sum(
        k["document"] is not None
        and (
            k["document"]["read_at_generation"] != k["document_generation"]
            or k["document_generation"] != k["applied_generation"]
        )
        for k in snap.work_keys
    )


def lines_of(report: Report, extra: Iterable[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The figures, in print order."""
    r = report
    out: list[tuple[str, Any]] = [
        ("clients", r.clients),
        ("client process starts", r.client_starts),
        ("deliveries planned and sent", r.deliveries),
        ("  by kind", dict(sorted(r.kinds.items()))),
        ("delivery attempts (operations)", r.attempts),
        ("  decisions by verdict", dict(sorted(r.verdicts.items()))),
        ("deliveries decided", r.decided),
        ("deliveries never decided", r.undecided),
        *extra,
        ("records in the store", dict(sorted(r.records.items()))),
        ("acked decisions checked against the store", r.acked),
        ("LOST (acked, not stored)", r.lost),
        ("DUPLICATED (applied more than once)", r.duplicated),
        ("  checks", dict(r.duplicated_by)),
        ("UNEXPECTED (stored, never sent)", r.unexpected),
        ("  by table", dict(r.unexpected_by)),
        ("decisions not matching what was sent", r.misdecided),
        ("conflict deliveries sent", r.conflict_deliveries),
        ("conflict verdicts (redeliveries included)", r.conflict_decisions),
        ("conflicts injected (distinct newcomers)", r.conflicts_injected),
        ("conflicts quarantined (rows)", r.conflicts_quarantined),
        (
            "  newcomers not quarantined / extra rows",
            f"{r.conflicts_missing} / {r.conflicts_extra}",
        ),
        ("indeterminate attempts (killed mid-call)", r.indeterminate),
        ("  resolved by redelivery", r.indeterminate_resolved),
        ("  redelivery verdicts", dict(sorted(r.resolved_as.items()))),
        ("attempts failed with an error", sum(r.errors.values())),
        ("  by class", dict(sorted(r.errors.items()))),
        ("  resolved by redelivery", r.errors_resolved),
        ("  refused: server restarted before the seal", r.restart_refusals),
        ("errors before sending (open, lease, clock read)", dict(sorted(r.setup_errors.items()))),
        ("fenced deliveries redelivered under a new lease", r.fenced_redelivered),
        ("leases taken", r.leases_taken),
        (
            "lease-fenced deliveries (from skewed clients)",
            f"{r.lease_deliveries} ({r.skewed_deliveries})",
        ),
        ("  probes", dict(sorted(r.probes.items()))),
        ("  decisions a device clock would have got wrong", r.device_clock_disagreed),
        ("LEASE VIOLATIONS", sum(r.lease_violations.values())),
        ("  checks", dict(r.lease_violations)),
        ("reconciler tickets", r.worker_tickets),
        ("  completions", dict(sorted(r.worker_outcomes.items()))),
        ("RECONCILER VIOLATIONS", sum(r.reconciler_violations.values())),
        ("  checks", dict(r.reconciler_violations)),
        ("records sealed by recovery at the end", r.recovered),
        ("log verifies / records not covered", f"{r.verify_ok} / {r.uncovered}"),
        ("ANOMALIES", r.anomalies),
    ]
    return out
