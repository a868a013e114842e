"""Which decisions write nothing but counts, and may commit without waiting for the disk
(:mod:`oncebox.engine.durability`): duplicates of sealed records, late replays, the
verdict counters; never a record, a newcomer, a dead letter or a log entry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING

from oncebox.domain import StoredRow, Verdict
from oncebox.engine.ingest import Prepared

if TYPE_CHECKING:
    from oncebox.engine.decided import Decided, Repeated
    from oncebox.engine.walk import Walk


def heavier(
    items: Sequence[Prepared], stored: Mapping[bytes, StoredRow], fenced: Mapping[int, str]
) -> bool:
    """Before the walk, from the stored records alone: whether a delivery would write
    more than counts (invalid, new, not the stored content) or repeats a record not yet
    sealed. Only a delivery again from a dead letter is left for :func:`counted` to see."""
    find = stored.get
    for index, item in enumerate(items):
        if fenced and index in fenced:
            continue  # fenced out: it stores nothing
        _, _, _, _, ident, witness = item  # unpacked at once: this runs over every delivery
        seen = find(ident) if ident is not None else None
        if seen is None or seen[2] != witness or seen[6] is None:  # its witness, its seal
            return True
    return False


def counted(walk: Walk) -> bool:
    """Whether what ``walk`` decided writes nothing but counts (duplicates, late replays,
    verdict counters): no record, newcomer, dead letter or log entry. Each duplicate's
    record must also be sealed: the seal's flush made it durable (on PostgreSQL a record
    is visible between its relaxed commit and that flush), so nothing acknowledged here
    rests on what a power cut could take back."""
    if walk.records or walk.newcomers or walk.letters or walk.retried:
        return False
    for outcome in walk.outcomes:
        seen = outcome[3]  # what it was decided against, if anything
        if seen is not None and seen[6] is None:  # not sealed yet
            return False
    return True


def only_counts(decided: Decided | Repeated) -> bool:
    """:func:`counted` of a decided batch's walk (a lone plain duplicate: always)."""
    return decided.only_counts


_VERDICT_REASON = itemgetter(0, 4)  # an Outcome's (verdict, reason)


def verdict_counts(walk: Walk) -> dict[tuple[str, str], int]:
    """(verdict, reason) -> how many, for the per-hour counters; not a delivery again
    refused again (its first refusal was counted). Counted by ``Counter`` over the
    outcomes' own fields, at C speed: it runs over every delivery of every batch."""
    outcomes = walk.outcomes
    if walk.retried:
        outcomes = [o for i, o in enumerate(outcomes)
                    if i not in walk.retried or o.verdict is not Verdict.REJECTED]  # fmt: skip
    if len(outcomes) == 1:  # a single delivery's: no Counter to build and read back
        verdict, reason = _VERDICT_REASON(outcomes[0])
        return {(verdict.value, reason): 1}
    counts = Counter(map(_VERDICT_REASON, outcomes))
    return {(verdict.value, reason): n for (verdict, reason), n in counts.items()}
