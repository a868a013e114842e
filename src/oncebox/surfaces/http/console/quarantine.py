"""The quarantine page: open conflicts grouped by the record they conflict with.

Each record is shown once, beside every open newcomer that conflicts with it; each
newcomer says what differs (``headcount 3 -> 9``) or, where the fields agree, which bytes
do (:mod:`oncebox.surfaces.diffing`), and has its own resolve form. Below, what was
resolved lately and by whom. Contents are shown as a listing cuts them (their first
1,024 bytes, with their length and SHA-256, and a link to all of it), so that the page
stays small however large the conflicts are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from oncebox.domain import Quarantined, QuarantineStatus, Record
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import LISTED, fields_of
from oncebox.surfaces.choices import RESOLUTIONS
from oncebox.surfaces.diffing import ByteDifference, byte_difference, field_changes, shown, visible
from oncebox.surfaces.http.console.html import BASE, content_text, render

OPEN_ROWS = 200  # open rows read per inbox
RESOLVED_ROWS = 50  # recently resolved rows shown


@dataclass(frozen=True)
class Content:
    """A content as the page shows it: its first bytes as text (the listing's cut), and
    when that is not all of it, how long it is, its SHA-256 and where all of it is."""

    text: str
    cut: bool
    kept: int | None  # bytes shown; None when the content is no longer kept
    length: int
    sha256: str
    whole: str


def _content(item: Record | Quarantined, whole: str) -> Content:
    cut = "content" in item.cut
    kept = len(item.content) if item.content is not None else None
    text = content_text(item.content, cut)
    return Content(text, cut, kept, item.content_length or 0, item.witness.hex(), whole)


@dataclass(frozen=True)
class Differs:
    """What differs, said one of three ways: a sentence (``said``), the fields that
    changed (name, old, new), or the bytes around the first difference."""

    said: str = ""
    changes: list[tuple[str, str, str]] = field(default_factory=list)
    agree: str = ""
    offset: int = 0
    lines: list[tuple[str, str, str, str]] = field(default_factory=list)


def _bytes_line(label: str, diff: ByteDifference, middle: bytes) -> tuple[str, str, str, str]:
    """label, the bytes before, the differing ones (marked), and after, every byte shown."""
    before = ("…" if diff.cut_before else "") + visible(diff.before)
    after = visible(diff.after) + ("…" if diff.cut_after else "")
    return label, before, visible(middle) if middle else "", after


def _differences(row: Quarantined, record: Record | None) -> Differs | None:
    """What differs: the fields, else the bytes (the witness differs by definition)."""
    if record is None:
        return None
    if "fields" in row.cut or "fields" in record.cut:
        return Differs(said="The fields are too long to compare here.")
    changes = field_changes(fields_of(record), fields_of(row))
    if changes:
        return Differs(changes=[(c.name, shown(c.old), shown(c.new)) for c in changes])
    diff = byte_difference(record.content or b"", row.content)
    if diff is None:
        if "content" in row.cut or "content" in record.cut:
            said = f"The first {len(row.content):,} bytes agree; they differ past them."
            return Differs(said=said)
        return None
    agree = "The fields agree" if fields_of(row) else "Nothing is named in them"
    lines = [_bytes_line("original", diff, diff.old), _bytes_line("newcomer", diff, diff.new)]
    return Differs(agree=agree, offset=diff.offset, lines=lines)


@dataclass(frozen=True)
class Newcomer:
    row: Quarantined
    content: Content
    differs: Differs | None


@dataclass(frozen=True)
class Card:
    """One record and the open newcomers that conflict with it."""

    inbox: str
    anchor: str
    identity: str
    count: str
    record: Record | None
    original: Content | None
    newcomers: list[Newcomer]
    may_resolve: bool


def _card(inbox: str, rows: list[Quarantined], record: Record | None, who: Session) -> Card:
    first = rows[0]
    anchor = f"record-{record.id}" if record is not None else f"ident-{first.ident.hex()[:16]}"
    count = f"{len(rows)} open newcomer{'s' if len(rows) > 1 else ''}"
    original = None
    if record is not None:
        original = _content(record, f"{BASE}/quarantine/{first.id}/original")
    newcomers = [
        Newcomer(
            row,
            _content(row, f"{BASE}/quarantine/{row.id}/content"),
            _differences(row, record),
        )
        for row in rows
    ]
    may = who.token.allows(Scope.OPERATOR, inbox)
    return Card(inbox, anchor, first.identity, count, record, original, newcomers, may)


@dataclass(frozen=True)
class Bulk:
    """A bulk resolution asked for (keep or accept what an identity prefix selects in
    one inbox) and, once previewed, how many and which it would resolve."""

    action: str = ""
    inbox: str = ""
    prefix: str = ""
    count: int | None = None
    ids: list[int] = field(default_factory=list)


def previewed(box: Oncebox, who: Session, wanted: Bulk) -> Bulk:
    """``wanted`` with its preview, when it names an action and an inbox the session
    may resolve in; else as it was."""
    if wanted.action not in RESOLUTIONS or not who.token.allows(Scope.OPERATOR, wanted.inbox):
        return wanted
    count, rows = box.conflicts_matching(wanted.inbox, wanted.prefix or None)
    return replace(wanted, count=count, ids=[row.id for row in rows])


def page(
    box: Oncebox,
    who: Session,
    inboxes: list[str],
    banner: str | None = None,
    kind: str = "ok",
    wanted: Bulk | None = None,
) -> str:
    cards = []
    opened = 0
    resolved: list[tuple[str, Quarantined]] = []
    for name in inboxes:
        groups: dict[bytes, list[Quarantined]] = {}
        found = box.quarantined(name, QuarantineStatus.OPEN, OPEN_ROWS, preview=LISTED)
        originals = box.originals(found, LISTED)
        for row in found:
            groups.setdefault(row.ident, []).append(row)
            opened += 1
        for rows in groups.values():
            cards.append(_card(name, rows, originals.get(rows[0].id), who))
        resolved += [
            (name, row)
            for row in box.quarantined(name, None, 500, preview=LISTED)
            if row.status != QuarantineStatus.OPEN
        ]
    resolved.sort(key=lambda pair: pair[1].resolved_at or 0.0, reverse=True)
    return render(
        "quarantine.html",
        who,
        "Quarantine",
        banner=banner,
        banner_kind=kind,
        bulk=previewed(box, who, wanted or Bulk()),
        operable=[n for n in inboxes if who.token.allows(Scope.OPERATOR, n)],
        resolutions=RESOLUTIONS,
        opened=opened,
        cards=cards,
        resolved=resolved[:RESOLVED_ROWS],
    )
