"""Dead letters as every surface pages and downloads them: one query, several inboxes.

The engine filters and pages one inbox (or all); a console session or a token may cover
only some, so :func:`page` merges the covered inboxes' pages by id (ids are global and
grow). A download is one NDJSON line per dead letter, in the line form ``oncebox
ingest`` reads for its inbox's codec (:func:`oncebox.surfaces.lines.line_for`): fed back
to ``oncebox ingest`` or the batch route it re-delivers the very delivery a replay
would decide. A dead letter kept only in part, or one its codec's line form cannot
carry, has no line and is left out (:func:`line_of` says why).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from oncebox.domain import DeadLetter, DeadLetterFilter, Preview
from oncebox.engine.box import Oncebox
from oncebox.engine.reads import search_term
from oncebox.engine.replay import kept_in_part, replayable
from oncebox.engine.views import LISTED
from oncebox.errors import InvalidOperation, OnceboxError
from oncebox.formats import Delivery
from oncebox.surfaces.lines import line_for
from oncebox.surfaces.paging import pages_after

PAGE = 200  # dead letters read per engine call while downloading


@dataclass(frozen=True)
class Query:
    """Which dead letters: each unset filter lets any through (``since <= t < until``,
    server-clock seconds; ``search``: bytes the kept head contains; ``status``: open,
    replayed or archived)."""

    reason: str | None = None
    since: float | None = None
    until: float | None = None
    search: str | None = None
    after: int = 0
    status: str | None = None
    newest: bool = False  # newest first (a page: below id ``after``, when set)


def checked(box: Oncebox, inboxes: Sequence[str], query: Query) -> DeadLetterFilter:
    """The engine's filter for a bulk action on ``inboxes``: an unknown reason or status
    is refused here, naming the known ones."""
    return box.letter_filter(
        inboxes,
        reason=query.reason,
        status=query.status,
        since=query.since,
        until=query.until,
        search=search_term(query.search),
        after=query.after,
    )


def page(
    box: Oncebox,
    inboxes: Sequence[str],
    query: Query,
    limit: int,
    preview: Preview | None = LISTED,
) -> list[tuple[str, DeadLetter]]:
    """Up to ``limit`` dead letters of ``inboxes`` after id ``query.after``, in id order,
    each with its inbox's name; shown cut to ``preview`` (None: whole, as a download
    needs them)."""
    found: list[tuple[str, DeadLetter]] = []
    for name in inboxes:
        rows = box.dead_letters(
            name,
            limit,
            reason=query.reason,
            since=query.since,
            until=query.until,
            search=query.search,
            after=query.after,
            preview=preview,
            status=query.status,
            newest=query.newest,
        )
        found += [(name, row) for row in rows]
    found.sort(key=lambda pair: pair[1].id, reverse=query.newest)
    return found[:limit]


def pages(
    box: Oncebox,
    inboxes: Sequence[str],
    query: Query,
    limit: int,
    size: int,
    preview: Preview | None = LISTED,
) -> Iterator[list[tuple[str, DeadLetter]]]:
    """Up to ``limit`` dead letters in pages of ``size``, each page read on its own (a
    search, too, a page at a time, each in its own budget)."""
    query = replace(query, newest=False)

    def read(after: int, want: int) -> list[tuple[str, DeadLetter]]:
        return page(box, inboxes, replace(query, after=after), want, preview)

    yield from pages_after(read, limit, query.after, size, lambda found: found[1].id)


def unreplayable(letter: DeadLetter) -> str | None:
    """Why ``letter`` (whole or a listing's preview) cannot be replayed (kept only in
    part), or None if it can."""
    return kept_in_part(letter)


def line_of(box: Oncebox, inbox: str, letter: DeadLetter) -> tuple[bytes | None, str]:
    """The NDJSON line that re-delivers ``letter`` (None if none can) and why not."""
    try:
        delivery = replace(replayable(letter), dead_letter=letter.id)
    except InvalidOperation as exc:
        return None, str(exc)
    line = line_for(box.inbox(inbox).codec.name, delivery)
    if line is None:
        return None, (
            f"dead letter {letter.id} has no {inbox} line: its body spans lines, or it came "
            "with a key or facts that the codec's line (the object itself) cannot carry"
        )
    return line, ""


def lines(
    box: Oncebox, inboxes: Sequence[str], query: Query, limit: int, left_out: list[int]
) -> Iterator[bytes]:
    """Up to ``limit`` downloadable dead letters as NDJSON lines (each ending in a
    newline), reading a page at a time; the ids of those without a line are appended
    to ``left_out`` as the download goes."""
    return (line for _, line in numbered_lines(box, inboxes, query, limit, left_out))


def numbered_lines(
    box: Oncebox, inboxes: Sequence[str], query: Query, limit: int, left_out: list[int]
) -> Iterator[tuple[int, bytes]]:
    """:func:`lines`, each beside its dead letter's id: where an export cut short by its
    limit goes on (``--after``)."""
    after, sent, query = query.after, 0, replace(query, newest=False)
    while sent < limit:
        batch = page(box, inboxes, replace(query, after=after), PAGE, preview=None)
        if not batch:
            return
        for name, letter in batch:
            line, _ = line_of(box, name, letter)
            if line is None:
                left_out.append(letter.id)
                continue
            yield letter.id, line + b"\n"
            sent += 1
            if sent >= limit:
                return
        after = batch[-1][1].id


def resent_only(box: Oncebox, inbox: str, deliveries: Sequence[Delivery]) -> list[Delivery]:
    """``deliveries`` as a sender may deliver them: each naming a dead letter keeps that
    name only where it re-delivers what the dead letter kept (its bytes and key), as an
    export's line fed back does. Other bytes in a dead letter's name are a correction,
    an operator's replay: from a sender they are decided as any delivery, and the dead
    letter is left as it was."""
    return [
        d if d.dead_letter is None or _resends(box, inbox, d) else replace(d, dead_letter=None)
        for d in deliveries
    ]


def _resends(box: Oncebox, inbox: str, delivery: Delivery) -> bool:
    try:
        found = box.get_dead_letter(delivery.dead_letter or 0)
    except OnceboxError:  # of an inbox this process does not declare
        return False
    if found is None or found[0] != inbox or found[1].key != delivery.key:
        return False
    return found[1].sha256 == hashlib.sha256(delivery.body).hexdigest()
