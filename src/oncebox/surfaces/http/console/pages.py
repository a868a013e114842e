"""The console's overview, work keys and log pages: each one or two engine calls,
rendered (no rule lives here). Triage, quarantine and dead letters have modules of
their own."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from oncebox.domain import LogEntry, WorkItem
from oncebox.engine.box import Oncebox
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.engine.views import LISTED
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.views import iso

HOURS = 24
WORK_ROWS = 500  # keys shown in review, and dirty, per inbox
VERDICTS = ("accepted", "duplicate", "conflict", "rejected")
History = list[tuple[int, dict[str, int]]]

# The chart's geometry, in SVG units: one column per hour. Its labels are HTML beside
# and below it, so that they keep their size however wide the chart is drawn.
COLUMN, BAR, TALL, EVERY = 24, 18, 100, 3


def chart(history: History, peak: int) -> str:
    """Stacked bars per hour, on a scale of 0 to ``peak`` (the same for every inbox on
    the page), with an hour axis; inline SVG, presented by class."""
    peak = max(peak, 1)
    width = COLUMN * len(history)
    bars = []
    for i, (start, counts) in enumerate(history):
        label = f"{iso(start)}: " + (
            ", ".join(f"{v} {counts[v]}" for v in VERDICTS if counts.get(v)) or "nothing"
        )
        parts = [f"<title>{h.e(label)}</title>"]
        y = float(TALL)
        for verdict in VERDICTS:
            n = counts.get(verdict, 0)
            if n:
                tall = max(1.0, n * TALL / peak)
                y -= tall
                parts.append(
                    f'<rect class="v-{verdict}" x="{i * COLUMN + 3}" y="{y:.1f}" '
                    f'width="{BAR}" height="{tall:.1f}"></rect>'
                )
        bars.append(f"<g>{''.join(parts)}</g>")
    # Every third hour labelled, in UTC as served; the script shows local hours.
    hours = "".join(
        f'<span data-hour="{iso(start)}">{(iso(start) or "")[11:13]}</span>'
        for start, _ in history[::EVERY]
    )
    legend = "".join(f'<span class="key v-{v}">{v}</span>' for v in VERDICTS)
    return (
        f'<figure class="chart"><div class="plot"><div class="scale"><span>{peak}</span>'
        f'<span>0</span></div><svg viewBox="0 0 {width} {TALL}" preserveAspectRatio="none" '
        f'role="img" aria-label="deliveries per hour by verdict">'
        f'<line class="grid" x1="0" y1="0.5" x2="{width}" y2="0.5"></line>{"".join(bars)}'
        f'</svg><div class="hours hours-{len(history[::EVERY])}">{hours}</div></div>'
        f"<figcaption>Deliveries per hour over the last {len(history)} hours (hours in "
        f"<span data-zone>UTC</span>), 0 to {peak} an hour: one scale for every inbox. "
        f"{legend}</figcaption></figure>"
    )


def overview(box: Oncebox, who: Session, inboxes: list[str]) -> str:
    histories = {name: box.verdict_history(name, HOURS) for name in inboxes}
    peak = max(
        [sum(counts.values()) for history in histories.values() for _, counts in history] + [1]
    )
    sections = []
    for name in inboxes:
        stats = box.stats(name)
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
                    h.code(stats["codec"]),
                    _apply(name, stats["apply"]),
                ]
            ],
        )
        sections.append(
            f'<section class="inbox" id="inbox-{h.e(name)}"><h2>{h.e(name)}</h2>'
            f'<div class="counts">{totals}</div>{chart(histories[name], peak)}{facts}</section>'
        )
    return "".join(sections) or "<p>This token covers no declared inbox.</p>"


def _apply(inbox: str, apply: str) -> str:
    if apply == "triage":
        return h.link(f"{BASE}/triage/{quote(inbox)}", "triage ledger")
    return h.code(apply)


# -- work keys --------------------------------------------------------------------------------
def _work_row(name: str, row: WorkItem, who: Session, retry: bool) -> list[str]:
    cells = [
        h.code(f"{row.seller_id} / {row.sku} / {row.marketplace_id}"),
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
        figures = box.work_figures(name)
        if not figures["keys"] and box.inbox(name).row.apply != "generation":
            continue
        review = box.reconciler(name).review(WORK_ROWS, LISTED)
        dirty = box.work_keys(name, limit=WORK_ROWS, dirty=True, preview=LISTED)
        dirty = [r for r in dirty if not r.in_review]
        summary = " · ".join(f"{k.replace('_', ' ')} {v}" for k, v in figures.items())
        review_html = (
            h.table([*head, ""], [_work_row(name, r, who, True) for r in review], "review")
            if review
            else '<p class="empty">Nothing in review.</p>'
        )
        dirty_html = (
            h.table(head, [_work_row(name, r, who, False) for r in dirty], "dirty")
            if dirty
            else '<p class="empty">No dirty keys.</p>'
        )
        sections.append(
            f'<section class="inbox" id="work-{h.e(name)}"><h2>{h.e(name)}</h2>'
            f"<p>{h.e(summary)}</p><h3>In review</h3>{review_html}"
            f"<h3>Dirty</h3>{dirty_html}</section>"
        )
    return "".join(sections) or '<p class="empty">No inbox here keeps work keys.</p>'


# -- the log ----------------------------------------------------------------------------------
def _facts(facts: list[tuple[str, str]]) -> str:
    """A definition list; values are HTML already."""
    rows = "".join(f"<dt>{h.e(k)}</dt><dd>{v}</dd>" for k, v in facts)
    return f'<dl class="facts">{rows}</dl>'


def _state(entry: LogEntry) -> tuple[str, str]:
    """An entry's actor (who acted: resolve, retry, replay) and its state as
    ``name=value`` pairs, shortened."""
    try:
        state = json.loads(entry.state)
    except ValueError:
        return "-", h.e(entry.state[:240])
    if not isinstance(state, dict):
        return "-", h.e(entry.state[:240])
    actor = state.pop("actor", None)
    pairs = " ".join(
        f'<span class="kv">{h.e(k)}=<code>{h.e(_short(v))}</code></span>'
        for k, v in state.items()
        if v is not None
    )
    return h.name(actor), pairs


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 64 else text[:61] + "…"


def log(box: Oncebox, who: Session, private_key: bytes | None, verified: str) -> str:
    point = box.checkpoint(private_key)
    facts = [
        ("origin", h.code(point.origin)),
        ("tree size", h.e(point.tree_size)),
        ("root", h.code(point.root)),
        ("log head", h.code(point.log_head)),
        ("signed", h.e(f"yes, key {point.key_id}" if point.signature else "no (no key)")),
        ("waiting to be sealed", h.e(box.seal_lag())),
    ]
    verify = (
        f'<form method="post" action="{BASE}/log/verify">{h.hidden(who)}'
        '<button type="submit">Verify the log</button></form>'
    )
    if "*" in who.token.inboxes:
        start = max(1, point.tree_size - 24)
        rows = []
        for x in reversed(box.log_entries(start, 25)):
            actor, state = _state(x)
            rows.append([h.e(x.seq), h.code(x.step), actor, state, h.code(x.hash[:16])])
        tail = (
            h.table(["seq", "step", "by", "state", "hash"], rows, "log")
            if rows
            else '<p class="empty">No entries yet.</p>'
        )
    else:
        tail = "<p>The entries are shown only to tokens that cover every inbox.</p>"
    return (
        f'<section id="checkpoint" class="card"><h2>Latest checkpoint</h2>{_facts(facts)}'
        f'{verify}{verified}</section><section class="card"><h2>The latest entries</h2>'
        f"{tail}</section>"
    )


def verification(result: dict[str, Any]) -> str:
    """What ``verify`` found, said in words: no Python values, no empty labels."""
    ok = bool(result.get("ok"))
    broken = result.get("broken_at")
    uncovered = result.get("uncovered_records") or []
    checkpoint = result.get("checkpoint_ok")
    facts = [
        ("entries replayed", h.e(result.get("entries", 0))),
        ("chain head", h.code(result.get("head"))),
        ("Merkle root", h.code(result.get("root"))),
        (
            "chain",
            h.e("intact")
            if broken is None
            else h.e(f"broken at entry {broken}: {result.get('broken_why') or 'no reason given'}"),
        ),
        (
            "records covered",
            h.e("every one")
            if not uncovered
            else h.e(f"{len(uncovered)} not covered: " + ", ".join(map(str, uncovered[:20]))),
        ),
    ]
    if checkpoint is not None:
        why = result.get("checkpoint_why") or ""
        facts.append(("checkpoint", h.e("matches" if checkpoint else f"does not match: {why}")))
    verdict = "The log verifies." if ok else "The log does NOT verify."
    return (
        f'<div class="verification {"ok" if ok else "bad"}" id="verification" role="status">'
        f"<p><b>{verdict}</b></p>{_facts(facts)}</div>"
    )
