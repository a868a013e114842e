"""The console's pages: each one or two engine calls, rendered (no rule lives here)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import Quarantined, Record, WorkItem, fields_of
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.views import iso

HOURS = 24
VERDICTS = ("accepted", "duplicate", "conflict", "rejected")


def chart(history: list[tuple[int, dict[str, int]]]) -> str:
    """Stacked bars per hour as inline SVG (presentation by class; no inline styles)."""
    width, height, bar = 24, 120, 18
    peak = max([sum(c.values()) for _, c in history] + [1])
    bars = []
    for i, (start, counts) in enumerate(history):
        y = height
        total = sum(counts.values())
        label = f"{iso(start)}: " + (
            ", ".join(f"{v} {counts[v]}" for v in VERDICTS if counts.get(v)) or "nothing"
        )
        parts = [f"<title>{h.e(label)}</title>"]
        for verdict in VERDICTS:
            n = counts.get(verdict, 0)
            if not n:
                continue
            tall = max(1, round(n * (height - 10) / peak))
            y -= tall
            parts.append(
                f'<rect class="v-{verdict}" x="{i * width + 3}" y="{y}" '
                f'width="{bar}" height="{tall}"></rect>'
            )
        if not total:
            parts.append(
                f'<rect class="v-none" x="{i * width + 3}" y="{height - 1}" '
                f'width="{bar}" height="1"></rect>'
            )
        bars.append(f"<g>{''.join(parts)}</g>")
    first = iso(history[0][0]) if history else ""
    last = iso(history[-1][0]) if history else ""
    legend = "".join(f'<span class="key v-{v}">{v}</span>' for v in VERDICTS)
    return (
        f'<figure class="chart"><svg viewBox="0 0 {width * len(history)} {height}" '
        'preserveAspectRatio="none" '
        f'role="img" aria-label="deliveries per hour by verdict">{"".join(bars)}</svg>'
        f"<figcaption>per hour, {h.e(first)} to {h.e(last)} (server clock) {legend}"
        f"</figcaption></figure>"
    )


def overview(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    sections = []
    for name in inboxes:
        stats = box.stats(name)
        history = box.verdict_history(name, HOURS)
        verdicts = stats["verdicts"]
        totals = "".join(
            f'<div class="count v-{v}"><span>{h.e(v)}</span><b>{h.e(verdicts.get(v, 0))}</b></div>'
            for v in VERDICTS
        )
        facts = h.table(
            ["records", "open quarantine", "dead letters", "duplicates", "codec", "apply"],
            [
                [
                    h.e(stats["records"]),
                    h.link(f"{BASE}/quarantine?inbox={quote(name)}", stats["quarantine_open"]),
                    h.link(f"{BASE}/dead-letters?inbox={quote(name)}", stats["dead_letters"]),
                    h.e(stats["duplicates"]),
                    h.e(stats["codec"]),
                    h.e(stats["apply"]),
                ]
            ],
        )
        sections.append(
            f'<section class="inbox" id="inbox-{h.e(name)}"><h2>{h.e(name)}</h2>'
            f'<div class="counts">{totals}</div>{chart(history)}{facts}</section>'
        )
    return "".join(sections) or "<p>This token covers no declared inbox.</p>"


def _side(title: str, content: str, fields: str, facts: list[tuple[str, object]]) -> str:
    dl = "".join(f"<dt>{h.e(k)}</dt><dd>{h.e(v)}</dd>" for k, v in facts)
    head = f'<div class="side"><h3>{h.e(title)}</h3><dl>{dl}</dl>'
    return f"{head}<pre>{h.e(content)}</pre>{fields}</div>"


def _quarantine_card(inbox: str, row: Quarantined, original: Record | None, who: Session) -> str:
    theirs = fields_of(row)
    if original is not None:
        ours = fields_of(original)
        left = _side(
            f"Original: record {original.id}",
            h.content_text(original.content),
            h.fields_table(ours, theirs),
            [
                ("revision", original.revision),
                ("first seen", iso(original.first_seen)),
                ("seen", original.seen_count),
                ("witness", original.witness.hex()[:16]),
                ("snapshot", original.snapshot_id or "-"),
                ("delivery id", original.delivery_id or "-"),
            ],
        )
    else:
        ours = {}
        left = '<div class="side"><h3>Original</h3><p>The original record was evicted.</p></div>'
    right = _side(
        "Newcomer (quarantined)",
        h.content_text(row.content),
        h.fields_table(theirs, ours if original is not None else None),
        [
            ("first seen", iso(row.first_seen)),
            ("last seen", iso(row.last_seen)),
            ("seen", row.seen_count),
            ("witness", row.witness.hex()[:16]),
            ("snapshot", row.snapshot_id or "-"),
            ("delivery id", row.delivery_id or "-"),
        ],
    )
    form = ""
    if who.token.allows(Scope.OPERATOR, inbox):
        form = (
            f'<form class="resolve" method="post" action="{BASE}/quarantine/{row.id}/resolve">'
            f"{h.hidden(who)}"
            "<fieldset><legend>Resolve</legend>"
            '<label><input type="radio" name="action" value="keep" checked> keep the original'
            "</label>"
            '<label><input type="radio" name="action" value="accept"> accept the newcomer as '
            "the next revision</label>"
            '<label class="note">Note <textarea name="note" required maxlength="4096" '
            'rows="2"></textarea></label>'
            '<button type="submit">Resolve</button></fieldset></form>'
        )
    return (
        f'<article class="conflict" id="q-{row.id}" data-quarantine-id="{row.id}">'
        f"<h2>#{row.id} · {h.e(inbox)} · {h.e(row.identity)} "
        f'<small>{h.e(row.reason)}</small></h2><div class="pair">{left}{right}</div>{form}'
        "</article>"
    )


def quarantine(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    cards = []
    resolved = []
    for name in inboxes:
        for row in box.quarantined(name, "open", 200):
            cards.append(_quarantine_card(name, row, box.original(row), who))
        for row in box.quarantined(name, None, 500):
            if row.status != "open":
                resolved.append((name, row))
    resolved.sort(key=lambda pair: pair[1].resolved_at or 0.0, reverse=True)
    open_html = "".join(cards) or '<p class="empty">No open conflicts.</p>'
    done = h.table(
        ["id", "inbox", "identity", "status", "resolved", "note"],
        [
            [
                h.e(row.id),
                h.e(name),
                h.e(row.identity),
                h.e(row.status),
                h.e(iso(row.resolved_at)),
                h.e(row.note),
            ]
            for name, row in resolved[:50]
        ],
        "resolved",
    )
    return (
        f'<section id="open"><h2>Open ({len(cards)})</h2>{open_html}</section>'
        f'<section id="resolved"><h2>Recently resolved</h2>{done}</section>'
    )


def dead_letters(box: Oncebox, inboxes: list[str]) -> str:
    rows = []
    for name in inboxes:
        for row in box.dead_letters(name, 500):
            rows.append(
                (
                    row.received_at,
                    [
                        h.e(row.id),
                        h.e(name),
                        h.e(iso(row.received_at)),
                        f"<code>{h.e(row.reason)}</code>",
                        h.e(row.detail),
                        h.e(row.key or "-"),
                        h.e(row.length),
                        f"<pre>{h.e(h.content_text(row.head))}</pre>",
                    ],
                )
            )
    if not rows:
        return '<p class="empty">No dead letters.</p>'
    rows.sort(key=lambda r: r[0], reverse=True)
    return h.table(
        ["id", "inbox", "received", "reason", "detail", "key", "bytes", "head"],
        [cells for _, cells in rows],
        "dead-letters",
    )


def _work_row(name: str, row: WorkItem, who: Session, retry: bool) -> list[str]:
    key = f"{row.seller_id} / {row.sku} / {row.marketplace_id}"
    cells = [
        h.e(key),
        h.e(row.generation),
        h.e(row.applied_generation),
        h.e(row.failures),
        h.e(row.last_error or "-"),
    ]
    if retry:
        button = ""
        if who.token.allows(Scope.OPERATOR, name):
            button = (
                f'<form method="post" action="{BASE}/work/retry">{h.hidden(who)}'
                f'<input type="hidden" name="inbox" value="{h.e(name)}">'
                f'<input type="hidden" name="seller_id" value="{h.e(row.seller_id)}">'
                f'<input type="hidden" name="sku" value="{h.e(row.sku)}">'
                f'<input type="hidden" name="marketplace_id" value="{h.e(row.marketplace_id)}">'
                '<button type="submit">Retry</button></form>'
            )
        cells.append(button)
    return cells


def work(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    sections = []
    head = ["key (seller / sku / marketplace)", "generation", "applied", "failures", "last error"]
    for name in inboxes:
        keys = box.work_keys(name)
        if not keys and box.inbox(name).row.apply != "generation":
            continue
        figures = box.work_figures(name)
        review = [r for r in keys if r.in_review]
        dirty = [r for r in keys if r.dirty and not r.in_review]
        summary = " · ".join(f"{k.replace('_', ' ')} {v}" for k, v in figures.items())
        review_html = (
            h.table([*head, ""], [_work_row(name, r, who, True) for r in review], "review")
            if review
            else '<p class="empty">Nothing in review.</p>'
        )
        dirty_html = (
            h.table(head, [_work_row(name, r, who, False) for r in dirty[:500]], "dirty")
            if dirty
            else '<p class="empty">No dirty keys.</p>'
        )
        sections.append(
            f'<section class="inbox" id="work-{h.e(name)}"><h2>{h.e(name)}</h2>'
            f"<p>{h.e(summary)}</p><h3>In review</h3>{review_html}"
            f"<h3>Dirty</h3>{dirty_html}</section>"
        )
    return "".join(sections) or '<p class="empty">No inbox here keeps work keys.</p>'


def log(box: Oncebox, who: Session, private_key: bytes | None, verified: str) -> str:
    point = box.checkpoint(private_key)
    lag = box.seal_lag()
    facts = [
        ("origin", point.origin),
        ("tree size", point.tree_size),
        ("root", point.root),
        ("log head", point.log_head),
        ("signed", f"yes (key {point.key_id})" if point.signature else "no (no key configured)"),
        ("waiting to be sealed", lag),
    ]
    dl = "".join(f"<dt>{h.e(k)}</dt><dd><code>{h.e(v)}</code></dd>" for k, v in facts)
    verify = (
        f'<form method="post" action="{BASE}/log/verify">{h.hidden(who)}'
        '<button type="submit">Verify the log</button></form>'
    )
    if "*" in who.token.inboxes:
        start = max(1, point.tree_size - 24)
        entries = list(reversed(box.log_entries(start, 25)))
        rows = [
            [
                h.e(x.seq),
                h.e(x.step),
                f"<code>{h.e(x.state[:240])}</code>",
                f"<code>{h.e(x.hash[:16])}</code>",
            ]
            for x in entries
        ]
        tail = h.table(["seq", "step", "state", "hash"], rows, "log") if rows else "<p>Empty.</p>"
    else:
        tail = "<p>The entries are shown only to tokens that cover every inbox.</p>"
    return (
        f'<section id="checkpoint"><h2>Latest checkpoint</h2><dl class="facts">{dl}</dl>'
        f"{verify}{verified}</section><section><h2>Log head</h2>{tail}</section>"
    )


def verification(result: dict[str, Any]) -> str:
    ok = bool(result.get("ok"))
    rows = "".join(f"<dt>{h.e(k)}</dt><dd><code>{h.e(v)}</code></dd>" for k, v in result.items())
    verdict = "The log verifies." if ok else "The log does NOT verify."
    return (
        f'<div class="verification {"ok" if ok else "bad"}" id="verification" role="status">'
        f'<p><b>{verdict}</b></p><dl class="facts">{rows}</dl></div>'
    )
