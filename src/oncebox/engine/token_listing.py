"""The tokens a listing shows, a page at a time, each bounded in bytes.

A token's name is short (at most 64 characters) and its scopes few, but its inbox list
is as long as the inboxes it names: a listing reads that list's JSON text only to a
preview's cut (``Preview.text``), with the whole length beside, and shows the names that
fit whole, saying in ``cut`` that there are more.
"""

from __future__ import annotations

import json
from dataclasses import replace

from oncebox.domain import WHOLE, ListedToken, Preview
from oncebox.engine.tokens import Token, from_row
from oncebox.store.base import Access


def listing(
    tx: Access, after: int, limit: int, newest: bool = False, preview: Preview | None = None
) -> list[Token]:
    """A page of tokens after id ``after`` (``newest``: newest first, below it); with a
    ``preview``, each inbox list read only to ``preview.text`` characters of its JSON
    (the names that fit whole are shown, and ``cut`` says so)."""
    rows = tx.list_tokens(after, limit, newest, (preview or WHOLE).text)
    return [_listed(row) for row in rows]


def one(tx: Access, name_or_id: str) -> Token | None:
    """The token a name or id stands for, read whole: a live name wins (as in revoking),
    then the newest token that had the name, then the token with that id."""
    row = tx.token_named(name_or_id)
    # isascii too: isdigit is also true of digits int() refuses ("²", other scripts').
    if row is None and name_or_id.isascii() and name_or_id.isdigit() and len(name_or_id) < 19:
        row = tx.token_by_id(int(name_or_id))
    return None if row is None else from_row(row)


def _listed(row: ListedToken) -> Token:
    if len(row.inboxes) >= row.inboxes_length:
        return from_row(row)
    token = from_row(replace(row, inboxes=json.dumps(_leading_names(row.inboxes))))
    return replace(token, cut=("inboxes",))


def _leading_names(cut: str) -> list[str]:
    """The names a JSON array of strings cut short holds whole."""
    names: list[str] = []
    decoder, at = json.JSONDecoder(), cut.find("[") + 1
    while at:
        while at < len(cut) and cut[at] in " ,":
            at += 1
        try:
            name, at = decoder.raw_decode(cut, at)
        except json.JSONDecodeError:
            return names
        names.append(name)
    return names
