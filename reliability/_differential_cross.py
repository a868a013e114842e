"""What ``differential.py --cross`` compares: one code's histories on two backends.

oncebox promises the same decisions on SQLite and PostgreSQL. The normal differential
compares two code versions on one backend, where the stores' every byte must agree;
across backends some values legitimately differ, so this compares what must not, and
normalises only this:

- **Ids the store allocates** (``record_id``, ``quarantine_id``, ``dead_letter_id``,
  and the same ids named in error messages and log lines): PostgreSQL's sequences skip
  values (a decision draws an id for every identity it has not found, and a retried or
  conflicting insert spends one), and it writes a batch's quarantine rows in (identity,
  witness) order, so that concurrent batches queue instead of deadlocking, where SQLite
  writes them in arrival order. They may differ, but only as a renaming: an id must stand
  for the same thing on the other backend at every step (one to one, per kind).
- **Anything derived from those ids**, which is therefore not compared: log entries'
  states and hashes (they name records and quarantine rows), Merkle roots, proofs,
  checkpoints, idempotency keys, listings in id order, and table rows.

Compared exactly: every decision's other fields (verdict, reason, detail, identity,
witness, revision, ``may_ack``, ``first_quarantine``, ``late_replay``, and
``log_position``, since both logs hold the same entries in the same order), every error's
type and message, the library's log lines, what operators read as counts (``stats``,
dead-letter counts, the triage totals; the ranking's record ids as a renaming), and at
the end the log's steps in order, ``verify``'s verdict, and how many rows each table
both backends have holds (``meta`` aside: its rows are each backend's own bookkeeping).

The histories must be the same calls on both: the player runs with ``--cross``, which
picks quarantine rows and dead letters by what they hold instead of by id position,
derives a corrected body from the pick rather than from a letter's id, and has bulk
actions take every row instead of the first three by id (reliability/_differential_play.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

ID_FIELDS = ("record_id", "quarantine_id", "dead_letter_id")
# An id named in a message or a log line, as (kind, the text before the number).
NAMED_ID = re.compile(r"\b(record|quarantine|dead letter)([ =])(\d+)\b")
NAMED_KIND = {"record": "record_id", "quarantine": "quarantine_id", "dead letter": "dead_letter_id"}
# Tables whose rows are each backend's own bookkeeping, not what was decided.
OWN_TABLES = {"meta"}


class Renaming:
    """Ids one backend allocated, paired with the other's: a pair seen once must hold."""

    def __init__(self) -> None:
        self.ahead: dict[tuple[str, Any], Any] = {}
        self.back: dict[tuple[str, Any], Any] = {}

    def same(self, kind: str, a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is None and b is None
        paired = self.ahead.setdefault((kind, a), b)
        returned = self.back.setdefault((kind, b), a)
        return bool(paired == b and returned == a)


def answers(value: Any) -> Iterator[dict[str, Any]]:
    """The decisions and errors in a step's result, in the order they were dumped."""
    if isinstance(value, dict):
        if ("verdict" in value and "may_ack" in value) or ("error" in value and "message" in value):
            yield value
        for inner in value.values():
            yield from answers(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from answers(inner)


def logged(value: Any) -> list[str]:
    return list(value.get("logged", [])) if isinstance(value, dict) else []


def reads(value: Any) -> tuple[dict[str, Any], list[Any]]:
    """What a ``read`` step's operator saw as counts (no listing in id order), and the
    record ids of its triage ranking, taken out of it."""
    value = value.get("out", value) if isinstance(value, dict) else value
    if not isinstance(value, dict) or "stats" not in value:
        return {}, []
    seen = {name: value[name] for name in ("stats", "letters", "triage") if name in value}
    copied: dict[str, Any] = json.loads(json.dumps(seen))
    ranking = copied.get("triage", {}).get("ok", {}).get("ranking", [])
    return copied, [row.pop("record_id", None) for row in ranking]


class Cross:
    """The differences between one history's dumps from two backends, one line each."""

    def __init__(self, names: tuple[str, str], where: str) -> None:
        self.names, self.where = names, where
        self.ids = Renaming()
        self.found: list[str] = []

    def differ(self, at: str, what: str, a: Any, b: Any) -> None:
        first, second = self.names
        self.found.append(f"{self.where} {at}: {what}: {first} {_short(a)} / {second} {_short(b)}")

    def text(self, at: str, what: str, a: str, b: str) -> None:
        """Two messages: the same words, and ids that are the same renaming."""
        named_a, named_b = NAMED_ID.findall(a), NAMED_ID.findall(b)
        words_a, words_b = NAMED_ID.sub(r"\1\2#", a), NAMED_ID.sub(r"\1\2#", b)
        renamed = len(named_a) == len(named_b) and all(
            x[0] == y[0] and self.ids.same(NAMED_KIND[x[0]], int(x[2]), int(y[2]))
            for x, y in zip(named_a, named_b, strict=True)
        )
        if words_a != words_b or not renamed:
            self.differ(at, what, a, b)

    def answer(self, at: str, a: dict[str, Any], b: dict[str, Any]) -> None:
        if "error" in a or "error" in b:
            if a.get("error") != b.get("error"):
                self.differ(
                    at, "error", a.get("error", a.get("verdict")), b.get("error", b.get("verdict"))
                )
            else:
                self.text(at, "error message", a["message"], b["message"])
            return
        for key in [*a, *(k for k in b if k not in a)]:
            x, y = a.get(key, "<absent>"), b.get(key, "<absent>")
            if key in ID_FIELDS:
                if not self.ids.same(key, x, y):
                    self.differ(at, f"{key} (not the same renaming)", x, y)
            elif x != y:
                self.differ(at, key, x, y)

    def step(self, number: int, a: Any, b: Any) -> None:
        at = f"step {number}"
        ours, theirs = list(answers(a)), list(answers(b))
        if len(ours) != len(theirs):
            self.differ(at, "how many decisions and errors", len(ours), len(theirs))
        for index, (x, y) in enumerate(zip(ours, theirs, strict=False)):
            self.answer(f"{at} [{index}]", x, y)
        lines_a, lines_b = logged(a), logged(b)
        if len(lines_a) != len(lines_b):
            self.differ(at, "log lines", lines_a, lines_b)
        for line_a, line_b in zip(lines_a, lines_b, strict=False):
            self.text(at, "log line", line_a, line_b)
        (seen_a, ranked_a), (seen_b, ranked_b) = reads(a), reads(b)
        for id_a, id_b in zip(ranked_a, ranked_b, strict=False):
            if not self.ids.same("record_id", id_a, id_b):
                self.differ(at, "triage ranking record_id (not the same renaming)", id_a, id_b)
        if seen_a != seen_b:
            self.differ(at, "what operators read", seen_a, seen_b)

    def end(self, a: dict[str, Any], b: dict[str, Any]) -> None:
        steps_a, steps_b = [e["step"] for e in a["log"]], [e["step"] for e in b["log"]]
        if steps_a != steps_b:
            self.differ("at the end", "the log's steps", steps_a, steps_b)
        verdict_a, verdict_b = _verified(a["verify"]), _verified(b["verify"])
        if verdict_a != verdict_b:
            self.differ("at the end", "verify", verdict_a, verdict_b)
        for table in sorted((set(a["tables"]) & set(b["tables"])) - OWN_TABLES):
            rows_a, rows_b = len(a["tables"][table]["rows"]), len(b["tables"][table]["rows"])
            if rows_a != rows_b:
                self.differ("at the end", f"table {table} rows", rows_a, rows_b)


def _verified(result: dict[str, Any]) -> Any:
    """``verify``'s verdict without its hashes (they name record ids)."""
    if "ok" not in result:
        return result
    report = result["ok"]
    return {
        "ok": report["ok"],
        "entries": report["entries"],
        "broken_at": report["broken_at"],
        "uncovered": len(report["uncovered_records"]),
    }


def compare_cross(
    first: dict[str, Any], second: dict[str, Any], names: tuple[str, str]
) -> Iterator[str]:
    """Every difference between two backends' dumps of the same histories."""
    for number, (a, b) in enumerate(zip(first["histories"], second["histories"], strict=True)):
        if a["plan"] != b["plan"]:
            raise ValueError(f"history {number} was not the same calls on both backends")
        cross = Cross(names, f"history {number}")
        for step, (x, y) in enumerate(zip(a["steps"], b["steps"], strict=True)):
            cross.step(step, x, y)
        cross.end(a, b)
        yield from cross.found


def _short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[: width - 3] + "..."
