"""A decided batch, written and not yet committed, and the decisions it gives once it
has committed (:mod:`oncebox.engine.decide` decides and writes it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oncebox.domain import CONFLICT_REASON, LATE_REPLAY, Decision, Verdict
from oncebox.engine.counting import counted
from oncebox.engine.decision import decision_of, quick_decisions, repeat_decision

if TYPE_CHECKING:
    from oncebox.domain import StoredRow
    from oncebox.engine.ingest import Prepared
    from oncebox.engine.walk import Outcome, Walk


class Decided:
    """A batch decided and written, not yet committed: :meth:`decisions` gives the
    decisions once it has (they are built only then, so none can leave early)."""

    def __init__(
        self,
        inbox: str,
        walk: Walk,
        kept: Sequence[tuple[int, bool]],
        letter_ids: Sequence[int],
        opened: set[int],
        positions: dict[int, int],
    ) -> None:
        self.inbox = inbox
        self.walk = walk
        self.kept = kept
        self.letter_ids = letter_ids
        self.opened = opened  # the outcomes that opened a quarantine row
        self.positions = positions  # record id -> log position, when sealed in the batch

    @property
    def only_counts(self) -> bool:
        """Whether it wrote nothing but counts (:func:`~oncebox.engine.counting.counted`)."""
        return counted(self.walk)

    def decisions(self, positions: Mapping[int, int] | None = None) -> list[Decision]:
        """The committed decisions, in delivery order; ``positions`` gives the log
        positions of records sealed after the commit."""
        sealed, walk = self.positions if positions is None else positions, self.walk
        return quick_decisions(self.inbox, walk.outcomes, walk.records, sealed, self._decision)

    def _decision(self, index: int, outcome: Outcome, sealed: Mapping[int, int]) -> Decision:
        name, verdict, item = self.inbox, outcome.verdict, outcome.item
        if outcome.fenced:
            # Fenced out: nothing stored, so nothing may be acked; lease again, resend.
            return decision_of(name, verdict, False, reason=outcome.reason, detail=outcome.detail)
        if verdict is Verdict.REJECTED and index in self.walk.retried:  # its dead letter still
            return decision_of(
                name, verdict, True, reason=outcome.reason, detail=outcome.detail,
                identity=item.delivery.key, dead_letter_id=self.walk.retried[index].id,
            )  # fmt: skip
        if verdict is Verdict.REJECTED:
            letter = self.walk.letters[outcome.row]
            return decision_of(
                name, verdict, True, reason=letter.reason, detail=letter.detail,
                identity=letter.key, dead_letter_id=self.letter_ids[outcome.row],
            )  # fmt: skip
        assert item.identity is not None
        facts = {"identity": item.identity.identity, "witness": item.identity.witness}
        if verdict is Verdict.ACCEPTED:
            record_id = self.walk.records[outcome.row][0]  # its id
            return decision_of(
                name, Verdict.ACCEPTED, True, record_id=record_id, revision=1,
                log_position=sealed.get(record_id), **facts,
            )  # fmt: skip
        assert outcome.seen is not None
        record_id, _, _, revision, evicted_at, _, log_seq = outcome.seen
        against = {
            "record_id": record_id,
            "revision": revision,
            "log_position": log_seq if log_seq is not None else sealed.get(record_id),
        }
        if verdict is Verdict.DUPLICATE and outcome.reason == LATE_REPLAY:
            return decision_of(
                name, verdict, True, reason=LATE_REPLAY, late_replay=True, **against, **facts
            )
        if verdict is Verdict.DUPLICATE:
            return decision_of(name, verdict, True, **against, **facts)
        return decision_of(
            name, Verdict.CONFLICT, True, reason=CONFLICT_REASON,
            quarantine_id=self.kept[outcome.row][0], first_quarantine=index in self.opened,
            late_replay=evicted_at is not None, **against, **facts,
        )  # fmt: skip


class Repeated:
    """A single delivery decided as a plain duplicate and counted, not yet committed
    (:func:`oncebox.engine.decide._one_duplicate`): what :class:`Decided` gives for it,
    without a walk. It writes nothing but counts."""

    __slots__ = ("inbox", "item", "seen")
    only_counts = True

    def __init__(self, inbox: str, item: Prepared, seen: StoredRow) -> None:
        self.inbox, self.item, self.seen = inbox, item, seen

    def decisions(self, positions: Mapping[int, int] | None = None) -> list[Decision]:
        """Its one decision, once committed (its record was sealed before: no position
        to look up)."""
        return [repeat_decision(self.inbox, self.item, self.seen)]
