"""``generation``: a listing event makes its work key (seller, SKU, marketplace) dirty, one
generation more, whatever its event time (docs/concepts.md#work-keys); the reconciler
(:mod:`oncebox.engine.reconciler`) refreshes dirty keys. The work keys' statements are
here, the reconciler's as well as the step's, since the step owns the table.

A reconciler worker's claim on a key is a lease of the one fence
(:mod:`oncebox.engine.fence`), named by the key's three parts joined by U+001F (a work
key part is a bounded string without control characters, so the name is the key's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from oncebox.domain import WHOLE, Fenced, Preview, Resource, WorkItem
from oncebox.engine.step import Change
from oncebox.errors import InvalidOperation
from oncebox.formats import Invalid
from oncebox.formats.json_event import bounded_string
from oncebox.store.base import StepTx
from oncebox.store.sqlfile import Query, read_migrations, read_queries

PACKAGE = "oncebox.engine.steps"
WORK_KEY = ("seller_id", "sku", "marketplace_id")
WorkKey = tuple[str, str, str]
_SQL = {dialect: read_queries(PACKAGE, "sql", dialect, "generation.sql")
        for dialect in ("sqlite", "postgres")}  # fmt: skip


def _q(tx: StepTx, name: str) -> Query:
    return _SQL[tx.dialect][name]


def key_of(fields: Mapping[str, Any]) -> WorkKey:
    return (fields["seller_id"], fields["sku"], fields["marketplace_id"])


def resource(inbox_id: int, key: WorkKey) -> Resource:
    """The fence's resource a worker's claim on ``key`` is a lease of."""
    return Resource(Fenced.WORK, inbox_id, "\x1f".join(key))


class Generation:
    """The ``generation`` step."""

    name = "generation"
    needs_fields = WORK_KEY

    def check_fields(self, fields: Mapping[str, Any]) -> None:
        """A work key of three bounded strings: the usual one (what ``bounded_string``
        accepts at once, the three together) passed in one expression, since every
        delivery's fields are checked; any other by :func:`check_each`, for its reason."""
        # Read with get, as ``in`` reads them: a mapping with defaults (defaultdict) must
        # not make up a part that is missing.
        get = fields.get
        seller, sku, market = get("seller_id"), get("sku"), get("marketplace_id")
        if not (
            type(seller) is type(sku) is type(market) is str
            and 0 < len(seller) <= 256
            and 0 < len(sku) <= 256
            and 0 < len(market) <= 256
            and f"{seller}{sku}{market}".isprintable()  # each of them printable
            and seller[0] != " " != seller[-1]
            and sku[0] != " " != sku[-1]
            and market[0] != " " != market[-1]
        ):
            check_each(fields)

    def migrations(self, dialect: str) -> list[tuple[int, str]]:
        return read_migrations(PACKAGE, "sql", dialect, "generation")

    def apply(self, tx: StepTx, changes: Sequence[Change]) -> None:
        keys = []
        for change in changes:
            key = key_of(change.fields)
            keys.append(key)
            if change.previous is not None and key_of(change.previous) != key:
                # The accepted revision moved the event to another key: the old key's
                # refreshed state was derived from an event that no longer says that.
                keys.append(key_of(change.previous))
        if keys:
            bump(tx, changes[0].inbox_id, keys)


def check_each(fields: Mapping[str, Any]) -> None:
    """:meth:`Generation.check_fields` name by name: each part there and bounded."""
    for name in WORK_KEY:
        if name not in fields:
            raise Invalid("missing_field", f"field {name} is missing (the step needs it)")
        bounded_string(fields[name], name)


def bump(tx: StepTx, inbox_id: int, keys: Sequence[WorkKey]) -> None:
    """One generation more per occurrence of a key."""
    # Summed per key and sorted: one row per key, locked in one order by every batch.
    bumps = Counter(keys)
    tx.many(_q(tx, "bump_generations"), [(inbox_id, *k, n) for k, n in sorted(bumps.items())])


def page(
    tx: StepTx,
    inbox_id: int,
    limit: int,
    after: WorkKey | None = None,
    *,
    dirty: bool = False,
    review: bool = False,
    preview: Preview = WHOLE,
) -> list[WorkItem]:
    """A page in key order after ``after``: only dirty keys, or only those in review, if
    asked; documents and errors read cut to ``preview``."""
    s, k, m = after or (None, None, None)
    params = {"inbox": inbox_id, "limit": limit, "dirty": dirty, "review": review,
              "s": s, "k": k, "m": m, "text": preview.text, "fields": preview.fields}  # fmt: skip
    return tx.rows(_q(tx, "list_work_keys"), params, WorkItem)


def checked(key: object) -> WorkKey:
    """A work key as a caller gave it: three strings (seller_id, sku, marketplace_id).
    Anything else is the caller's error, said as one, not an IndexError, a TypeError, the
    store's refusal, or a string of three characters read as three parts."""
    if isinstance(key, tuple | list) and len(key) == 3 and all(isinstance(p, str) for p in key):
        return (key[0], key[1], key[2])
    raise InvalidOperation(
        f"a work key is (seller_id, sku, marketplace_id), three strings, not {key!r:.80}"
    )


def storable(key: WorkKey) -> bool:
    """Whether a store can hold ``key``: a lone surrogate (a command line's undecodable
    byte) is not text, and PostgreSQL's text holds no NUL; no key holds either (the
    step's fields are checked), so such a key is not there rather than a store error."""
    joined = "".join(key)
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in joined


def get(tx: StepTx, inbox_id: int, key: WorkKey, lock: bool = False) -> WorkItem | None:
    """A work key; ``lock`` holds it against other writers until the transaction ends."""
    if not storable(key):
        return None
    name = (
        "work_key_for_update"
        if lock and "work_key_for_update" in _SQL[tx.dialect]
        else ("work_key")
    )
    found = tx.rows(_q(tx, name), (inbox_id, *key), WorkItem)
    return found[0] if found else None


def dirty(tx: StepTx, inbox_id: int, limit: int) -> list[WorkItem]:
    return tx.rows(_q(tx, "dirty_keys"), (inbox_id, limit), WorkItem)


def next_claimable(tx: StepTx, inbox_id: int, now: float) -> WorkItem | None:
    """A dirty key due now that nobody holds a live claim on (locked for this claim)."""
    found = tx.rows(_q(tx, "next_claimable"), {"inbox": inbox_id, "now": now}, WorkItem)
    return found[0] if found else None


def claimed(tx: StepTx, inbox_id: int, key: WorkKey) -> None:
    """Remember the generation a new claim on ``key`` reads for."""
    tx.run(_q(tx, "claimed"), (inbox_id, *key))


def unclaimed(tx: StepTx, inbox_id: int, key: WorkKey) -> None:
    tx.run(_q(tx, "unclaimed"), (inbox_id, *key))


def apply_document(
    tx: StepTx, inbox_id: int, key: WorkKey, document: str, generation: int, token: int,
    now: float,
) -> None:  # fmt: skip
    params = (document, generation, generation, token, now, inbox_id, *key)
    tx.run(_q(tx, "apply_document"), params)


def record_failure(
    tx: StepTx, inbox_id: int, key: WorkKey, failures: int, next_attempt: float, error: str,
    in_review: bool,
) -> None:  # fmt: skip
    params = (failures, next_attempt, error, int(in_review), inbox_id, *key)
    tx.run(_q(tx, "record_failure"), params)


def retry(tx: StepTx, inbox_id: int, key: WorkKey) -> bool:
    """Send a key back from review; False if it was not in review."""
    if not storable(key):
        return False
    return tx.run(_q(tx, "retry_work"), (inbox_id, *key)) > 0


def figures(tx: StepTx, inbox_id: int, now: float) -> dict[str, int]:
    keys, dirty_, review, claims = (
        int(v) for v in tx.one(_q(tx, "work_figures"), {"inbox": inbox_id, "now": now})
    )
    return {"keys": keys, "dirty": dirty_, "in_review": review, "claimed": claims}


GENERATION = Generation()
