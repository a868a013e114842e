"""What the power-loss harness checks in a store after a crash, read with plain SQL.

Two kinds of check. Structural ones need nothing but the store: every effect must sit
beside the record that caused it, exactly once (a record without its ledger row, or
totals that disagree with the ledger, is a half-applied transaction; totals or
generations above what one application gives are an effect applied twice). Acked ones
compare the store with what the crashed child reported as ``may_ack``: each of those
must have survived. Where the child sealed inline on SQLite, one more structural check:
every record carries its log entry and nothing waits in the seal queue (a record and
its seal commit together, so no cut can part them).

Counts are the exception the store allows: a transaction that writes nothing but a
duplicate's counts commits without a flush, so a cut may take back the counts acked
since the last flushed commit, and only those. A duplicate acked before a later flushed
commit returned must still be counted ("lost" otherwise), and no count may exceed the
deliveries of its identity made up to the cut ("overcounted").
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import apsw

Key = tuple[str, str, str]
CATEGORIES = ("integrity", "lost", "half", "twice", "uncovered", "unsealed", "overcounted")


@dataclass
class Findings:
    """Anomalies by category; each entry says what was wrong."""

    found: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    # Not an anomaly: duplicates acked after the last flush whose counts the cut took back.
    counts_taken_back: int = 0

    def add(self, category: str, what: str) -> None:
        self.found[category].append(what)

    def count(self, category: str) -> int:
        return len(self.found[category])

    def any(self) -> bool:
        return any(self.found.values())


@dataclass
class Snapshot:
    """The rows the checks need, keyed for lookup."""

    inbox_names: dict[int, str]
    records: dict[int, dict[str, Any]]
    revisions: dict[int, list[tuple[int, dict[str, Any]]]]
    ledger: dict[int, tuple[int, str, str, int, int]]
    totals: dict[tuple[int, str, str], tuple[int, int]]
    work: dict[tuple[int, Key], dict[str, Any]]
    quarantine: dict[int, dict[str, Any]]
    dead_letters: set[int]
    verdicts: Counter[tuple[int, str]]
    log: dict[int, tuple[str, dict[str, Any]]]
    pending: list[tuple[str, dict[str, Any], int | None]]
    # The record (revision) each entry seals: an accept names it in its state as well, a
    # resolution that accepted a newcomer only here.
    sealing: dict[int, int | None] = field(default_factory=dict)


def integrity(conn: apsw.Connection) -> str | None:
    """None when ``PRAGMA integrity_check`` and the foreign key check are clean."""
    rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    if rows != ["ok"]:
        return "; ".join(rows[:5])
    bad = list(conn.execute("PRAGMA foreign_key_check"))
    return f"foreign key violations: {bad[:5]}" if bad else None


def load(conn: apsw.Connection) -> Snapshot:
    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql)]

    records = {
        rid: {
            "inbox_id": inbox_id,
            "identity": identity,
            "witness": bytes(witness).hex(),
            "revision": revision,
            "fields": json.loads(fields) if fields else {},
            "seen_count": seen,
            "log_seq": log_seq,
        }
        for rid, inbox_id, identity, witness, revision, fields, seen, log_seq in rows(
            "SELECT id, inbox_id, identity, witness, revision, fields, seen_count, log_seq "
            "FROM records"
        )
    }
    revisions: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for rid, revision, fields in rows(
        "SELECT record_id, revision, fields FROM revisions ORDER BY record_id, revision"
    ):
        revisions[rid].append((revision, json.loads(fields) if fields else {}))
    return Snapshot(
        inbox_names={i: n for i, n in rows("SELECT id, name FROM inboxes")},
        records=records,
        revisions=dict(revisions),
        ledger={
            r[0]: (r[1], r[2], r[3], r[4], r[5])
            for r in rows(
                "SELECT record_id, inbox_id, site, need, headcount, pri FROM triage_ledger"
            )
        },
        totals={
            (i, s, n): (h, c)
            for i, s, n, h, c in rows(
                "SELECT inbox_id, site, need, headcount, cases FROM triage_totals"
            )
        },
        work={
            (r[0], (r[1], r[2], r[3])): {
                "generation": r[4],
                "applied": r[5],
                "document_generation": r[6],
                "has_document": r[7] is not None,
                "applied_token": r[8],
            }
            for r in rows(
                "SELECT inbox_id, seller_id, sku, marketplace_id, generation, "
                "applied_generation, document_generation, document, applied_token "
                "FROM work_keys"
            )
        },
        quarantine={
            qid: {
                "inbox_id": inbox_id,
                "record_id": record_id,
                "witness": bytes(witness).hex(),
                "status": status,
                "seen_count": seen,
            }
            for qid, inbox_id, record_id, witness, status, seen in rows(
                "SELECT id, inbox_id, record_id, witness, status, seen_count FROM quarantine"
            )
        },
        dead_letters={r[0] for r in rows("SELECT id FROM dead_letters")},
        verdicts=Counter(
            {
                (i, v): n
                for i, v, n in rows(
                    "SELECT inbox_id, verdict, sum(n) FROM verdict_counts "
                    "GROUP BY inbox_id, verdict"
                )
            }
        ),
        log={
            seq: (step, json.loads(state))
            for seq, step, state in rows("SELECT seq, step, state FROM log")
        },
        pending=[
            (step, json.loads(state), rid)
            for step, state, rid in rows("SELECT step, state, record_id FROM log_pending")
        ],
        sealing={seq: rid for seq, rid in rows("SELECT seq, record_id FROM log")},
    )


def _work_key(fields: dict[str, Any]) -> Key:
    return (fields["seller_id"], fields["sku"], fields["marketplace_id"])


def expected_generations(snap: Snapshot) -> Counter[tuple[int, Key]]:
    """Generation bumps one application of every stored revision gives (seed 002)."""
    expected: Counter[tuple[int, Key]] = Counter()
    for rid, record in snap.records.items():
        if snap.inbox_names.get(record["inbox_id"]) != "listing":
            continue
        chain = [fields for _, fields in snap.revisions.get(rid, [])] + [record["fields"]]
        inbox = record["inbox_id"]
        expected[(inbox, _work_key(chain[0]))] += 1
        for before, after in itertools.pairwise(chain):
            expected[(inbox, _work_key(after))] += 1
            if _work_key(before) != _work_key(after):
                expected[(inbox, _work_key(before))] += 1
    return expected


def _events(snap: Snapshot) -> list[tuple[str, dict[str, Any], int | None]]:
    """Every log event, sealed or still queued; a sealed seal names its record."""
    sealed = [(step, state, state.get("record")) for step, state in snap.log.values()]
    return sealed + snap.pending


def _off_by(findings: Findings, got: Any, want: Any, what: str) -> None:
    """More than one application gives is ``twice``; less is ``half``."""
    if got != want:
        findings.add("twice" if got > want else "half", f"{what}: {got}, expected {want}")


def _triage(snap: Snapshot, findings: Findings) -> None:
    """One ledger row per ussd record, equal to its current fields; totals = ledger sums."""
    for rid, record in snap.records.items():
        if snap.inbox_names.get(record["inbox_id"]) != "ussd":
            continue
        f = record["fields"]
        entry = snap.ledger.get(rid)
        if entry is None:
            findings.add("half", f"ussd record {rid} has no ledger row")
        elif entry[1:] != (f["site"], f["need"], f["headcount"], f["pri"]):
            findings.add("half", f"ussd record {rid}'s ledger row {entry[1:]} is not {f}")
    for rid in snap.ledger.keys() - snap.records.keys():
        findings.add("half", f"ledger row for record {rid}, which is not stored")
    sums: Counter[tuple[int, str, str]] = Counter()
    cases: Counter[tuple[int, str, str]] = Counter()
    for inbox, site, need, headcount, _ in snap.ledger.values():
        sums[(inbox, site, need)] += headcount
        cases[(inbox, site, need)] += 1
    for cell in snap.totals.keys() | sums.keys():
        total = snap.totals.get(cell, (0, 0))
        _off_by(findings, total, (sums[cell], cases[cell]), f"triage totals {cell}")


def _work(snap: Snapshot, findings: Findings) -> None:
    """Exactly one bump per stored revision; completions only with their document."""
    expected = expected_generations(snap)
    for wk in snap.work.keys() | expected.keys():
        generation = snap.work[wk]["generation"] if wk in snap.work else 0
        _off_by(findings, generation, expected[wk], f"work key {wk[1]} generation")
    for (_, key), row in snap.work.items():
        if row["applied"] > row["generation"]:
            findings.add("half", f"work key {key} applied beyond its generation: {row}")
        if row["applied"] and (
            not row["has_document"] or row["document_generation"] != row["applied"]
        ):
            findings.add("half", f"work key {key} applied without that generation's read: {row}")


def _verdicts(snap: Snapshot, findings: Findings) -> None:
    """Verdict counts move in the deciding transaction, with the rows they count."""
    rows: dict[int, Counter[str]] = defaultdict(Counter)
    for record in snap.records.values():
        rows[record["inbox_id"]]["accepted"] += 1
        rows[record["inbox_id"]]["duplicate"] += record["seen_count"] - 1
    for quarantined in snap.quarantine.values():
        rows[quarantined["inbox_id"]]["conflict"] += quarantined["seen_count"]
    for inbox, name in snap.inbox_names.items():
        for verdict in ("accepted", "duplicate", "conflict"):
            counted = snap.verdicts[(inbox, verdict)]
            _off_by(findings, counted, rows[inbox][verdict], f"{name} {verdict} count")
    rejected = sum(n for (_, verdict), n in snap.verdicts.items() if verdict == "rejected")
    _off_by(findings, rejected, len(snap.dead_letters), "rejected count against dead letters")


def _revisions(snap: Snapshot, findings: Findings) -> None:
    """An accepted quarantine row revised its record, keeping the old revision; only then."""
    accepted = Counter(
        q["record_id"] for q in snap.quarantine.values() if q["status"] == "accepted"
    )
    for rid, record in snap.records.items():
        kept = [revision for revision, _ in snap.revisions.get(rid, [])]
        if kept != list(range(1, record["revision"])):
            findings.add("half", f"record {rid} at revision {record['revision']} keeps {kept}")
        _off_by(findings, record["revision"] - 1, accepted[rid], f"record {rid} revisions")


def _log_events(snap: Snapshot, findings: Findings) -> None:
    """Each change's log event was queued in its own transaction, exactly once."""
    seals: Counter[int] = Counter()
    quarantined: Counter[int] = Counter()
    resolved: Counter[int] = Counter()
    completed: Counter[tuple[Key, int]] = Counter()
    for step, state, rid in _events(snap):
        if step in ("accept", "recover") and rid is not None:
            seals[int(rid)] += 1
        elif step == "quarantine":
            quarantined[int(state["quarantine"])] += 1
        elif step == "resolve":
            resolved[int(state["quarantine"])] += 1
        elif step == "complete":
            k = state["key"]
            completed[((k[0], k[1], k[2]), int(state["generation"]))] += 1
    for rid, record in snap.records.items():
        _off_by(findings, seals[rid], 1, f"seals (sealed or queued) of record {rid}")
        if record["log_seq"] is not None:
            entry = snap.log.get(record["log_seq"])
            if entry is None or entry[1].get("record") != rid:
                findings.add("half", f"record {rid} names log entry {record['log_seq']}: {entry}")
    for qid, row in snap.quarantine.items():
        _off_by(findings, quarantined[qid], 1, f"quarantine events of quarantine {qid}")
        want = 0 if row["status"] == "open" else 1
        _off_by(
            findings, resolved[qid], want, f"resolve events of {row['status']} quarantine {qid}"
        )
    for (_, key), work in snap.work.items():
        if work["applied"]:
            _off_by(findings, completed[(key, work["applied"])], 1, f"completions of {key}")


def structure(snap: Snapshot, findings: Findings) -> None:
    """Effects beside their records, exactly once; every change with its log event."""
    _triage(snap, findings)
    _work(snap, findings)
    _verdicts(snap, findings)
    _revisions(snap, findings)
    _log_events(snap, findings)


def unsealed(snap: Snapshot, findings: Findings) -> None:
    """Where the writer seals its own log events in the deciding transaction (SQLite,
    inline sealing), no commit can leave a record without its log entry or an event
    queued for a later seal: any such row after a power cut means a record committed
    apart from its seal, the window the one-transaction ingest closed."""
    for rid, record in sorted(snap.records.items()):
        if record["log_seq"] is None:
            findings.add("unsealed", f"record {rid} committed without its log entry")
    for step, state, rid in snap.pending:
        findings.add("unsealed", f"{step} event queued, not sealed: record {rid}, {state}")


def flushed(report: dict[str, Any]) -> bool:
    """Whether the reported call returned only after a flushed commit: it wrote more
    than counts (a record, a newcomer, a dead letter, a resolution, a completion, seals)."""
    if report["op"] in ("resolve", "complete"):
        return True
    if report["op"] == "seal":
        return bool(report["positions"])
    return any(
        d["may_ack"] and d["verdict"] in ("accepted", "conflict", "rejected")
        for d in report.get("decisions", [])
    )


def counts_bounded(
    snap: Snapshot, delivered: Mapping[str, int], findings: Findings
) -> None:
    """No count above the truth: a record's seen count, or a newcomer's, is at most the
    deliveries of its identity made up to the cut (the call in flight included)."""
    for rid, record in snap.records.items():
        made = delivered.get(record["identity"], 0)
        if record["seen_count"] > made:
            findings.add(
                "overcounted", f"record {rid} seen {record['seen_count']} times, {made} sent"
            )
    for qid, row in snap.quarantine.items():
        record = snap.records.get(row["record_id"])
        made = delivered.get(record["identity"], 0) if record else 0
        if row["seen_count"] > made:
            findings.add("overcounted", f"quarantine {qid} seen {row['seen_count']}, {made} sent")


def acked(snap: Snapshot, reports: list[dict[str, Any]], findings: Findings) -> int:
    """Every ``may_ack`` decision the child reported must have survived; returns how many.
    A duplicate's count only if a flushed commit returned after it (see the module)."""

    def lost(what: str) -> None:
        findings.add("lost", what)

    duplicates: Counter[int] = Counter()  # acked before a later flush: durable
    since: Counter[int] = Counter()  # acked since the last flush: a cut may take them back
    conflicts: Counter[int] = Counter()
    count = 0
    for report in reports:
        op = report["op"]
        for d in report.get("decisions", []):
            if not d["may_ack"]:
                continue
            count += 1
            record = snap.records.get(d["record_id"]) if d["record_id"] else None
            verdict = d["verdict"]
            if verdict in ("accepted", "duplicate") and (
                record is None or record["identity"] != d["identity"]
            ):
                lost(f"{verdict} {d['identity']} (record {d['record_id']}) is not stored")
                continue
            if verdict == "accepted" and d["log_position"] is not None:
                entry = snap.log.get(d["log_position"])
                if entry is None or entry[1].get("record") != d["record_id"]:
                    lost(f"record {d['record_id']}'s seal at {d['log_position']} is gone")
            if verdict == "duplicate":
                since[d["record_id"]] += 1
            elif verdict == "conflict":
                conflicts[d["quarantine_id"]] += 1
            elif verdict == "rejected" and d["dead_letter_id"] not in snap.dead_letters:
                lost(f"dead letter {d['dead_letter_id']} ({d['reason']}) is not stored")
        if op == "resolve":
            count += 1
            row = snap.quarantine.get(report["quarantine_id"])
            status = {"keep": "kept", "accept": "accepted"}[report["action"]]
            if row is None or row["status"] != status:
                lost(f"quarantine {report['quarantine_id']} resolved {status}, now {row}")
        elif op == "complete":
            count += 1
            work = next((w for (_, k), w in snap.work.items() if list(k) == report["key"]), None)
            if work is None or work["applied"] < report["generation"]:
                lost(f"work key {report['key']} completed {report['generation']}, now {work}")
        elif op == "seal":
            count += 1
            for rid, seq in report["positions"].items():
                if snap.sealing.get(int(seq)) != int(rid):
                    lost(f"seal of record {rid} at {seq} is gone")
        if flushed(report):  # its flush made every count before it durable
            duplicates.update(since)
            since.clear()
    for rid, n in (duplicates + since).items():
        record = snap.records.get(rid)
        counted = record["seen_count"] - 1 if record else 0
        findings.counts_taken_back += max(0, n - counted)
    for rid, n in duplicates.items():
        record = snap.records[rid]
        if record["seen_count"] - 1 < n:
            lost(
                f"record {rid} counts {record['seen_count'] - 1} duplicates, {n} were acked "
                f"before a flushed commit"
            )
    for qid, n in conflicts.items():
        row = snap.quarantine.get(qid)
        if row is None or row["seen_count"] < n:
            lost(f"quarantine {qid} is {row}, {n} conflicts were acked")
    return count
