"""The entities of the two built-in apply steps: a work key (``generation``, refreshed
by the reconciler) and a headcount ledger row (``triage``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkItem:
    """A work key (seller, SKU, marketplace) and the reconciler's state on it."""

    seller_id: str
    sku: str
    marketplace_id: str
    generation: int
    applied_generation: int
    document: str | None = None
    document_generation: int | None = None
    applied_token: int | None = None
    refreshed_at: float | None = None
    claim_token: int | None = None
    claim_generation: int | None = None
    claimed_by: str | None = None
    claim_expires: float | None = None
    failures: int = 0
    next_attempt: float = 0.0
    last_error: str | None = None
    in_review: int = 0
    document_length: int | None = None  # of the whole document (a listing may leave it out)
    cut: tuple[str, ...] = ()  # in a listing: the values shown only in part

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.seller_id, self.sku, self.marketplace_id)

    @property
    def dirty(self) -> bool:
        return self.generation > self.applied_generation


@dataclass(frozen=True)
class LedgerRow:
    """One applied frame in the headcount ledger."""

    record_id: int
    site: str
    need: str
    headcount: int
    pri: int
