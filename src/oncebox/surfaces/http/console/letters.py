"""The dead letters page: filtered by inbox, reason, time and content, a page at a
time, each downloadable as an ``oncebox ingest`` line and replayable after a fix.

The filters are a plain GET form, so a filtered page is a link an operator can share;
the query is :class:`oncebox.surfaces.letters.Query`, the same the API and the CLI use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from oncebox.domain import DeadLetter
from oncebox.engine.box import Oncebox
from oncebox.engine.reads import SEARCH_BYTES, search_term
from oncebox.engine.sessions import Session
from oncebox.engine.tokens import Scope
from oncebox.errors import InvalidOperation
from oncebox.surfaces import letters
from oncebox.surfaces.http.console import html as h
from oncebox.surfaces.http.console.html import BASE
from oncebox.surfaces.views import iso, parse_when

PAGE = 50
HEAD_SHOWN = 600  # characters of a kept head shown in the table


@dataclass(frozen=True)
class Asked:
    """The filters as the form sent them (shown back), the query they make, the inboxes
    chosen, and what could not be read."""

    fields: dict[str, str]
    query: letters.Query
    inboxes: list[str]
    problems: list[str]


def asked(params: Mapping[str, str], covered: list[str]) -> Asked:
    fields = {
        name: params.get(name, "").strip()[:1024]
        for name in ("inbox", "reason", "since", "until", "search", "after")
    }
    problems = []
    try:
        search_term(fields["search"])
    except InvalidOperation as exc:
        problems.append(f"search: {exc}")
    times: dict[str, float | None] = {"since": None, "until": None}
    for name in times:
        if fields[name]:
            try:
                times[name] = parse_when(fields[name])
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
    after = int(fields["after"]) if fields["after"].isdigit() and len(fields["after"]) < 19 else 0
    inboxes = [fields["inbox"]] if fields["inbox"] in covered else covered
    query = letters.Query(
        fields["reason"] or None, times["since"], times["until"], fields["search"] or None, after
    )
    return Asked(fields, query, inboxes, problems)


def _link(fields: dict[str, str], **changed: str) -> str:
    kept = {k: v for k, v in {**fields, **changed}.items() if v}
    return f"{BASE}/dead-letters" + (f"?{urlencode(kept)}" if kept else "")


def _form(ask: Asked, covered: list[str], reasons: list[str]) -> str:
    f = ask.fields
    options = '<option value="">every inbox</option>' + "".join(
        f'<option value="{h.e(n)}"{" selected" if n == f["inbox"] else ""}>{h.e(n)}</option>'
        for n in covered
    )
    known = "".join(f'<option value="{h.e(r)}"></option>' for r in reasons)

    def text(name: str, label: str, hint: str, extra: str = "") -> str:
        return (
            f'<label><span>{label}</span><input name="{name}" value="{h.e(f[name])}" '
            f'placeholder="{h.e(hint)}"{extra}></label>'
        )

    # Times typed without an offset are UTC; the script takes them in the browser's own
    # zone instead, sending them with their offset (and shows sent ones in local time).
    zone = "(<span data-zone>UTC</span>)"

    return (
        f'<form class="filters" method="get" action="{BASE}/dead-letters">'
        f'<label><span>Inbox</span><select name="inbox">{options}</select></label>'
        f"{text('reason', 'Reason', 'bad_checksum', ' list=reasons')}"
        f"<datalist id=reasons>{known}</datalist>"
        f"{text('since', f'Since {zone}', '2030-01-15T08:00', ' data-when')}"
        f"{text('until', f'Until {zone}', '2030-01-16T08:00', ' data-when')}"
        f"{text('search', 'Head contains', 'Kakuma1', f' maxlength={SEARCH_BYTES}')}"
        f'<button type="submit">Filter</button> <a href="{BASE}/dead-letters">Clear</a></form>'
    )


def _replay(inbox: str, letter: DeadLetter, who: Session, fenced: bool) -> str:
    done = ""
    if letter.replayed_at is not None:
        done = (
            f'<p class="replayed">replayed {h.when(letter.replayed_at)} by '
            f"{h.name(letter.replayed_by)}: {h.code(letter.replay_verdict)}</p>"
        )
    why = letters.unreplayable(letter)
    if why is not None:
        return f'{done}<p class="cannot">{h.e(why)}</p>'
    if not who.token.allows(Scope.OPERATOR, inbox):
        return done or "-"
    token = (
        '<input name="lease_token" inputmode="numeric" placeholder="lease token" size="10">'
        if fenced
        else ""
    )
    return (
        f'{done}<form class="replay" method="post" action="{BASE}/dead-letters/{letter.id}/replay">'
        f'{h.hidden(who)}<input name="note" maxlength="4096" placeholder="note" '
        'title="what was fixed">'
        f'{token}<button type="submit">Replay</button></form>'
    )


def _head(letter: DeadLetter) -> str:
    """The head's first characters; all of it is a link away when the listing cut it."""
    text = h.content_text(letter.head, "head" in letter.cut)
    cut = "…" if len(text) > HEAD_SHOWN or "head" in letter.cut else ""
    shown = f"<pre>{h.e(text[:HEAD_SHOWN])}{cut}</pre>"
    if "head" not in letter.cut:
        return shown
    return f"{shown}{h.link(f'{BASE}/dead-letters/{letter.id}/head', 'all of the head')}"


def _size(letter: DeadLetter) -> str:
    kept = letter.kept if letter.kept is not None else len(letter.head)
    if letter.length == kept:
        return h.e(f"{letter.length:,}")
    return h.e(f"{letter.length:,} (kept {kept:,})")


def page(box: Oncebox, who: Session, covered: list[str], ask: Asked) -> str:
    reasons = sorted(
        {k.split(":", 1)[1] for n in ask.inboxes for k in box.stats(n)["reasons"] if ":" in k}
    )
    form = _form(ask, covered, reasons)
    if ask.problems:
        return form + "".join(h.notice(p, "bad") for p in ask.problems)
    found = letters.page(box, ask.inboxes, ask.query, PAGE + 1)
    more, found = len(found) > PAGE, found[:PAGE]
    fenced = {n: box.inbox(n).row.fenced for n in ask.inboxes}
    rows = [
        [
            h.e(letter.id),
            h.e(name),
            h.when(letter.received_at),
            f"{h.code(letter.reason)}<br><small>{h.e(letter.detail)}</small>",
            h.code(letter.key),
            _size(letter),
            _head(letter),
            _replay(name, letter, who, fenced[name]),
        ]
        for name, letter in found
    ]
    paging = []
    if ask.query.after:
        paging.append(h.link(_link(ask.fields, after=""), "First page"))
    if more:
        paging.append(h.link(_link(ask.fields, after=str(found[-1][1].id)), "Next page"))
    if len(ask.inboxes) == 1:
        lines = {**ask.fields, "inbox": ask.inboxes[0], "after": ""}
        query = urlencode({k: v for k, v in lines.items() if v})
        paging.append(
            f'<a class="download" href="{BASE}/dead-letters.ndjson?{h.e(query)}">'
            "Download NDJSON (oncebox ingest lines)</a>"
        )
    else:
        paging.append('<span class="muted">Choose one inbox to download its lines.</span>')
    shown = (
        f"{len(found)} dead letter{'s' if len(found) != 1 else ''}, oldest first"
        + (f", ids {found[0][1].id} to {found[-1][1].id}" if found else "")
        + (f", received since {iso(ask.query.since)}" if ask.query.since else "")
    )
    table = (
        h.table(
            ["id", "inbox", "received", "reason", "key", "bytes", "head", "replay"],
            rows,
            "dead-letters",
        )
        if rows
        else '<p class="empty">No dead letters.</p>'
    )
    nav = f'<p class="paging">{" · ".join(paging)}</p>'
    return (
        f'{form}<section class="card" id="letters"><p class="muted">{h.e(shown)}</p>'
        f"{table}{nav}</section>"
    )
