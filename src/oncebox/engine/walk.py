"""Step 4 of the decision path, pure: every delivery of a batch decided in order against
what is stored and what the deliveries before it in the batch left
(:mod:`oncebox.engine.decide` reads before it and writes after it)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

from oncebox.domain import (
    CONFLICT_REASON,
    LATE_REPLAY,
    UNSTORED,
    DeadLetter,
    Letter,
    Newcomer,
    NewRecordRow,
    StoredRow,
    Verdict,
)
from oncebox.engine import leases
from oncebox.engine.decision import classify
from oncebox.engine.ingest import (
    DEAD_LETTER_HEAD,
    NO_ARRIVAL,
    Prepared,
    arrival,
    fields_json,
    refused,
)
from oncebox.formats import Invalid, Oversize


class Outcome(NamedTuple):
    """One delivery's verdict before anything is written: ``row`` indexes the walk's
    records, newcomers or letters (by verdict: accepted, conflict, rejected and stored);
    ``seen`` is the record it was decided against (stored, or accepted earlier in the
    batch); ``reason`` is the decision's (a late replay's, a refusal's)."""

    verdict: Verdict
    item: Prepared
    row: int = -1
    seen: StoredRow | None = None
    reason: str = ""
    detail: str = ""

    @property
    def fenced(self) -> bool:
        """Refused by the fence: nothing of it stored."""
        return self.verdict is Verdict.REJECTED and self.reason in UNSTORED


# Named tuples built from all their fields at C speed (their own __new__ is Python):
# one of each is built per delivery.
_outcome = partial(tuple.__new__, Outcome)
# The verdicts as plain names: on Python 3.11 every ``Verdict.X`` goes through
# EnumType.__getattr__'s slot, about 1.8k instructions a lookup, in loops over every
# delivery of a batch.
_ACCEPTED, _DUPLICATE, _CONFLICT = Verdict.ACCEPTED, Verdict.DUPLICATE, Verdict.CONFLICT


class Walk:
    """Step 4, pure: every delivery's verdict, in delivery order, and what to write."""

    def __init__(
        self, stored: Mapping[bytes, StoredRow], new_ids: Sequence[int],
        retried: Mapping[int, DeadLetter] | None = None,
    ) -> None:  # fmt: skip
        # What each identity was decided against so far: a stored record, or the row (in
        # ``records``) of one accepted earlier in the batch, made a row only when a
        # later delivery repeats it (:meth:`_accepted`): most never are.
        self.seen: dict[bytes, StoredRow | int] = dict(stored)
        # The dead letters deliveries again come from, by index: refused again, they make
        # no new dead letter (the one they came from counts the attempt).
        self.retried = retried or {}
        self._ids = iter(new_ids)
        self.outcomes: list[Outcome] = []
        self.records: list[NewRecordRow] = []  # plain tuples (see NewRecordRow)
        self.firsts: list[int] = []  # the delivery index of each new record
        self.repeats: dict[int, int] = {}  # record id -> duplicates
        self.late: dict[int, tuple[int, float]] = {}  # record id -> (count, most late)
        self.newcomers: list[Newcomer] = []
        self._newcomer_rows: dict[tuple[bytes, bytes], int] = {}
        self.letters: list[Letter] = []

    def reject(self, index: int, item: Prepared) -> None:
        invalid = item.invalid or Invalid("bad_format")
        if index in self.retried:
            self.outcomes.append(
                Outcome(Verdict.REJECTED, item, reason=invalid.reason, detail=invalid.detail)
            )
            return
        delivery = item.delivery
        body = delivery.body
        if isinstance(delivery, Oversize):  # the head only: its length and hash came with it
            length, digest = delivery.length, delivery.sha256
        else:
            length, digest = len(body), hashlib.sha256(body).hexdigest()
        self.letters.append(
            Letter(
                invalid.reason,
                invalid.detail,
                body[:DEAD_LETTER_HEAD],
                length,
                digest,
                delivery.key,
                arrival(delivery),
            )
        )
        self.outcomes.append(
            Outcome(Verdict.REJECTED, item, len(self.letters) - 1, reason=invalid.reason)
        )

    def fence(self, item: Prepared, reason: str, detail: str) -> None:
        self.outcomes.append(Outcome(Verdict.REJECTED, item, reason=reason, detail=detail))

    def walk(self, items: Sequence[Prepared], fenced: Mapping[int, str], now: float) -> None:
        """Every delivery of a batch in order: what :meth:`fence`, :meth:`reject` and
        :meth:`decide` give one by one (tests/test_cpu_round_four.py), with the two
        usual verdicts (new, plain repeat) written out in line, since this loop runs over
        every delivery of every batch; any other goes through :meth:`decide`."""
        seen, records, repeats, ids = self.seen, self.records, self.repeats, self._ids
        find: Callable[[bytes], Any] = seen.get  # a StoredRow, a row of records or None
        add_record, add_first = records.append, self.firsts.append
        add_outcome = self.outcomes.append
        accepted, duplicate = _ACCEPTED, _DUPLICATE
        # Named tuples made by tuple.__new__ called directly: a partial over it adds a call.
        new, outcome = tuple.__new__, Outcome
        for index, item in enumerate(items):
            ident = item[4]
            if fenced and index in fenced:
                reason = fenced[index]
                self.fence(item, reason, leases.fence_detail(reason, item.delivery))
                continue
            if ident is None:
                self.reject(index, item)
                continue
            found = find(ident)
            if found is None:
                delivery, decoded, identity, _, _, witness = item
                assert decoded is not None and identity is not None and witness is not None
                fields = "{}" if not decoded.fields else self._fields(index, item)
                if fields is None:
                    continue
                record_id = next(ids)
                if (
                    delivery.device_time is None
                    and delivery.snapshot_id is None
                    and delivery.delivery_id is None
                    and delivery.signature is None
                ):
                    arrived = NO_ARRIVAL  # what arrival() gives it, without a call
                else:
                    arrived = arrival(delivery)
                row = len(records)
                add_record((record_id, ident, identity.identity, witness, decoded.content, fields,
                            arrived, None, delivery.key))  # fmt: skip
                add_first(index)
                seen[ident] = row
                add_outcome(new(outcome, (accepted, item, row, None, "", "")))
                continue
            try:  # a StoredRow; an int is a record accepted earlier in the batch (no check to run)
                found_id, _, found_witness, _, evicted_at, _, _ = found
            except TypeError:
                found = self._accepted(ident, found, now)
                found_id, _, found_witness, _, evicted_at, _, _ = found
            if found_witness == item[5] and evicted_at is None:
                repeats[found_id] = repeats.get(found_id, 0) + 1
                add_outcome(new(outcome, (duplicate, item, -1, found, "", "")))
            else:
                self.decide(index, item, now)

    def _fields(self, index: int, item: Prepared) -> str | None:
        """The fields a new record or newcomer keeps, written before it takes an id or a
        row; None where the codec gave fields that cannot be written, the delivery then
        refused here as its own dead letter (``codec_error``), not its batch's failure."""
        assert item.decoded is not None
        try:
            return fields_json(item.decoded)
        except Exception as exc:
            self.reject(index, refused(item.delivery, exc))
            return None

    def _accepted(self, ident: bytes, row: int, now: float) -> StoredRow:
        """The record accepted earlier in the batch at ``row`` as a delivery repeating it
        finds it (kept from now on): revision 1, first seen now, not sealed yet."""
        record = self.records[row]
        found = self.seen[ident] = (record[0], ident, record[3], 1, None, now, None)
        return found

    def decide(self, index: int, item: Prepared, now: float) -> None:
        delivery, decoded, identity, _, ident, witness = item  # unpacked at once: it is a tuple
        assert ident is not None and witness is not None
        assert decoded is not None and identity is not None
        found = self.seen.get(ident)
        seen = self._accepted(ident, found, now) if isinstance(found, int) else found
        # The two usual verdicts first, as classify gives them: new, and a plain repeat.
        if seen is None:
            fields = self._fields(index, item)
            if fields is None:
                return
            record_id = next(self._ids)
            self.records.append((record_id, ident, identity.identity, witness, decoded.content,
                                 fields, arrival(delivery), None, delivery.key))  # fmt: skip
            self.firsts.append(index)
            row = self.seen[ident] = len(self.records) - 1
            self.outcomes.append(_outcome((_ACCEPTED, item, row, None, "", "")))
            return
        seen_id, _, seen_witness, _, evicted_at, first_seen, _ = seen
        if seen_witness == witness and evicted_at is None:
            self.repeats[seen_id] = self.repeats.get(seen_id, 0) + 1
            self.outcomes.append(_outcome((_DUPLICATE, item, -1, seen, "", "")))
            return
        verdict = classify(seen_witness, witness)
        if verdict is Verdict.DUPLICATE:
            # A resend from beyond the retention window: recognised by its tombstone,
            # never applied again.
            count, most = self.late.get(seen_id, (0, 0.0))
            self.late[seen_id] = (count + 1, max(most, now - first_seen))
            self.outcomes.append(Outcome(verdict, item, seen=seen, reason=LATE_REPLAY))
        else:
            # Conflict: first write wins. The record and its effects stay exactly as they
            # are; the newcomer is kept for an operator, never merged and never dropped.
            row = self._newcomer_rows.get((ident, witness), len(self.newcomers))
            if row == len(self.newcomers):
                fields = self._fields(index, item)
                if fields is None:
                    return
                self._newcomer_rows[(ident, witness)] = row
                self.newcomers.append(
                    Newcomer(ident, identity.identity, seen_id, witness, decoded.content,
                             fields, arrival(item.delivery), 0, item.delivery.key)
                )  # fmt: skip
            newcomer = self.newcomers[row]
            self.newcomers[row] = newcomer._replace(times=newcomer.times + 1)
            self.outcomes.append(Outcome(verdict, item, row, seen, CONFLICT_REASON))
