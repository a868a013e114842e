"""The quarantine page: open conflicts grouped by the record they conflict with.

Each record is shown once, beside every open newcomer that conflicts with it; each
newcomer says what differs (``headcount 3 -> 9``) or, where the fields agree, which bytes
do (:mod:`oncebox.surfaces.diffing`), and has its own resolve form. Below, what was
resolved lately and by whom. Contents are shown as a listing cuts them (their first
1,024 bytes, with their length and SHA-256, and a link to all of it), so that the page
stays small however large the conflicts are.
"""

from __future__ import annotations

from oncebox.domain import Quarantined, Record
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import LISTED, fields_of
from oncebox.surfaces.diffing import ByteDifference, byte_difference, field_changes, shown, visible
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE

OPEN_ROWS = 200  # open rows read per inbox
RESOLVED_ROWS = 50  # recently resolved rows shown


def _facts(facts: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{h.e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _content(item: Record | Quarantined, whole: str) -> str:
    """A content as the page shows it: its first bytes (the listing's cut), and when
    that is not all of it, how long it is, its SHA-256 and a link to all of it."""
    cut = "content" in item.cut
    shown = f"<pre>{h.e(h.content_text(item.content, cut))}{'…' if cut else ''}</pre>"
    if not cut or item.content is None:
        return shown
    return (
        f'{shown}<p class="cut">The first {len(item.content):,} of '
        f"{item.content_length or 0:,} bytes, SHA-256 {h.code(item.witness.hex())}: "
        f"{h.link(whole, 'all of it')}.</p>"
    )


def _original(record: Record | None, quarantine_id: int) -> str:
    if record is None:
        return (
            '<div class="side original"><h3>Original</h3>'
            '<p class="empty">The original record was evicted.</p></div>'
        )
    facts = [
        ("revision", h.e(record.revision)),
        ("first seen", h.when(record.first_seen)),
        ("seen", h.e(record.seen_count)),
        ("witness", h.code(record.witness.hex()[:16])),
        ("snapshot", h.code(record.snapshot_id)),
        ("delivery id", h.code(record.delivery_id)),
    ]
    whole = f"{BASE}/quarantine/{quarantine_id}/original"
    return (
        f'<div class="side original"><h3>Original: record {record.id}</h3>{_facts(facts)}'
        f"{_content(record, whole)}</div>"
    )


def _bytes_line(label: str, diff: ByteDifference, middle: bytes) -> str:
    before = ("…" if diff.cut_before else "") + visible(diff.before)
    after = visible(diff.after) + ("…" if diff.cut_after else "")
    mark = f"<mark>{h.e(visible(middle))}</mark>" if middle else '<mark class="none">∅</mark>'
    return f"<tr><th>{h.e(label)}</th><td><code>{h.e(before)}{mark}{h.e(after)}</code></td></tr>"


def _differences(row: Quarantined, record: Record | None) -> str:
    """What differs: the fields, else the bytes (the witness differs by definition)."""
    if record is None:
        return ""
    if "fields" in row.cut or "fields" in record.cut:
        return "<h4>What differs</h4><p>The fields are too long to compare here.</p>"
    changes = field_changes(fields_of(record), fields_of(row))
    if changes:
        rows = "".join(
            f'<tr><th>{h.e(c.name)}</th><td class="change"><del>{h.e(shown(c.old))}</del>'
            f' <span class="arrow">-&gt;</span> <ins>{h.e(shown(c.new))}</ins></td></tr>'
            for c in changes
        )
        return f'<h4>What differs</h4><table class="changes">{rows}</table>'
    diff = byte_difference(record.content or b"", row.content)
    if diff is None:
        if "content" in row.cut or "content" in record.cut:
            return (
                f"<h4>What differs</h4><p>The first {len(row.content):,} bytes agree; "
                "they differ past them.</p>"
            )
        return ""
    agree = "The fields agree" if fields_of(row) else "Nothing is named in them"
    lines = _bytes_line("original", diff, diff.old) + _bytes_line("newcomer", diff, diff.new)
    return (
        f"<h4>What differs</h4><p>{agree}; the bytes differ from byte {diff.offset}:</p>"
        f'<table class="bytes">{lines}</table>'
    )


def _resolve_form(row: Quarantined, who: Session) -> str:
    return (
        f'<form class="resolve" method="post" action="{BASE}/quarantine/{row.id}/resolve">'
        f"{h.hidden(who)}<fieldset><legend>Resolve #{row.id}</legend>"
        '<label><input type="radio" name="action" value="keep" checked> keep the original'
        "</label>"
        '<label><input type="radio" name="action" value="accept"> accept the newcomer as '
        "the next revision</label>"
        '<label class="note">Note <textarea name="note" required maxlength="4096" '
        'rows="2"></textarea></label>'
        '<button type="submit">Resolve</button></fieldset></form>'
    )


def _newcomer(inbox: str, row: Quarantined, record: Record | None, who: Session) -> str:
    facts = [
        ("first seen", h.when(row.first_seen)),
        ("last seen", h.when(row.last_seen)),
        ("seen", h.e(row.seen_count)),
        ("witness", h.code(row.witness.hex()[:16])),
        ("snapshot", h.code(row.snapshot_id)),
        ("delivery id", h.code(row.delivery_id)),
        ("device time", h.code(row.device_time)),
    ]
    form = _resolve_form(row, who) if who.token.allows(Scope.OPERATOR, inbox) else ""
    return (
        f'<section class="side newcomer" id="q-{row.id}" data-quarantine-id="{row.id}">'
        f"<h3>Newcomer #{row.id} <small>{h.code(row.reason)}</small></h3>{_facts(facts)}"
        f"{_content(row, f'{BASE}/quarantine/{row.id}/content')}"
        f"{_differences(row, record)}{form}"
        "</section>"
    )


def _card(inbox: str, rows: list[Quarantined], record: Record | None, who: Session) -> str:
    first = rows[0]
    anchor = f"record-{record.id}" if record is not None else f"ident-{first.ident.hex()[:16]}"
    count = f"{len(rows)} open newcomer{'s' if len(rows) > 1 else ''}"
    newcomers = "".join(_newcomer(inbox, row, record, who) for row in rows)
    return (
        f'<article class="conflict" id="{h.e(anchor)}">'
        f"<h2>{h.e(inbox)} · {h.code(first.identity)} <small>{count}</small></h2>"
        f'<div class="pair">{_original(record, first.id)}'
        f'<div class="newcomers">{newcomers}</div></div>'
        "</article>"
    )


def page(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    cards = []
    opened = 0
    resolved: list[tuple[str, Quarantined]] = []
    for name in inboxes:
        groups: dict[bytes, list[Quarantined]] = {}
        found = box.quarantined(name, "open", OPEN_ROWS, preview=LISTED)
        originals = box.originals(found, LISTED)
        for row in found:
            groups.setdefault(row.ident, []).append(row)
            opened += 1
        for rows in groups.values():
            cards.append(_card(name, rows, originals.get(rows[0].id), who))
        resolved += [
            (name, row)
            for row in box.quarantined(name, None, 500, preview=LISTED)
            if row.status != "open"
        ]
    resolved.sort(key=lambda pair: pair[1].resolved_at or 0.0, reverse=True)
    open_html = "".join(cards) or '<p class="empty">No open conflicts.</p>'
    done = '<p class="empty">Nothing resolved yet.</p>'
    if resolved:
        done = h.table(
            ["id", "inbox", "identity", "status", "resolved", "by", "note"],
            [
                [
                    h.e(row.id),
                    h.e(name),
                    h.code(row.identity),
                    h.code(row.status),
                    h.when(row.resolved_at),
                    h.name(row.resolved_by),
                    h.e(row.note),
                ]
                for name, row in resolved[:RESOLVED_ROWS]
            ],
            "resolved",
        )
    records = f"{len(cards)} record{'s' if len(cards) != 1 else ''}"
    return (
        f'<section id="open"><h2>Open ({opened}, on {records})</h2>{open_html}</section>'
        f'<section id="resolved" class="card"><h2>Recently resolved</h2>{done}</section>'
    )
