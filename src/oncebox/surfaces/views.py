"""Rows as JSON for people and scripts: digests in hex, content as text where it is text."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import sys
import unicodedata
from dataclasses import is_dataclass
from datetime import UTC, datetime
from typing import Any

from oncebox.domain import Kind, WorkItem
from oncebox.domain.kinds import meanings


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


# The times an operator may type, as patterns (published in OpenAPI as they are): unix
# seconds, or an ISO 8601 date with an optional time (RFC 3339's date-time among them).
SECONDS_PATTERN = r"^[0-9]{1,12}(\.[0-9]{0,9})?$"
ISO_PATTERN = (
    r"^((?!0000)[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]))"
    r"(?:[Tt ]((?:[01][0-9]|2[0-3]):[0-5][0-9])(?:(:[0-5][0-9])(\.[0-9]+)?)?"
    r"([Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
_SECONDS = re.compile(SECONDS_PATTERN)
_ISO = re.compile(ISO_PATTERN)


def parse_when(text: str) -> float:
    """A time an operator typed, as unix seconds: ISO 8601 (``2030-01-15T08:00``,
    ``...Z`` or with an offset; without one it is UTC, the clock oncebox shows) or unix
    seconds. Nothing else (no milliseconds guessed from a large number, no negative
    seconds): raises ValueError saying what it takes."""
    text = text.strip()
    if _SECONDS.match(text):
        return float(text)
    found = _ISO.match(text)
    try:
        if found is None:
            raise ValueError
        day, time, secs, fraction, offset = found.groups()
        offset = "+00:00" if offset in (None, "Z", "z") else offset
        # Python reads at most microseconds; a finer fraction is cut, never rounded up.
        spelled = f"{day}T{time or '00:00'}{secs or ':00'}{(fraction or '')[:7]}{offset}"
        return datetime.fromisoformat(spelled).timestamp()
    except ValueError:
        raise ValueError(
            f"{text[:40]!r} is not a time: give ISO 8601 (2030-01-15T08:00Z) or unix seconds"
        ) from None


def _content(data: bytes, cut: bool = False) -> dict[str, Any]:
    """Text if the bytes are UTF-8, else base64; a cut content's last character may
    have lost its last bytes to the cut, and is left out rather than make it base64."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data":
            return {"text": data[: exc.start].decode("utf-8")}
        return {"base64": base64.b64encode(data).decode("ascii")}


def as_json(row: Any, **extra: Any) -> dict[str, Any]:
    """An entity as JSON, each field shown as its kind says (see
    :mod:`oncebox.domain.kinds`). A record or newcomer also gets ``content_sha256`` (its
    witness: the SHA-256 of its whole content), which a listing's cut content needs."""
    cut = getattr(row, "cut", ())
    out = {
        name: _shown(getattr(row, name), meaning.kind, name in cut)
        for name, meaning in meanings(type(row)).items()
    }
    if "content_length" in out:
        out["content_sha256"] = out["witness"] if out["content"] is not None else None
    for name, value in extra.items():
        out[name] = as_json(value) if is_dataclass(value) else value
    return out


def _shown(value: Any, kind: Kind | None, cut: bool) -> Any:
    if value is None:
        return None
    if kind is Kind.DIGEST:
        return value.hex()
    if kind is Kind.INSTANT:
        return iso(value)
    if kind is Kind.CONTENT:
        return _content(value, cut)
    if kind in (Kind.JSON, Kind.SIGNED):
        return json.loads(value)
    if isinstance(value, tuple):
        return list(value)
    return value


# Python refuses to convert integers longer than this to or from text (a guard against
# quadratic conversions); documents may hold longer ones, which the strict reader keeps.
_INT_DIGITS = sys.get_int_max_str_digits() or 4300


def _exact_int(spelling: str) -> int | str:
    """An integer of a stored document; one too long for Python's int conversion comes
    back as a string of its exact digits rather than failing the whole view."""
    if len(spelling.lstrip("-")) <= _INT_DIGITS:
        return int(spelling)
    return spelling


def work_key_json(row: WorkItem) -> dict[str, Any]:
    return {
        "key": {"seller_id": row.seller_id, "sku": row.sku, "marketplace_id": row.marketplace_id},
        "generation": row.generation,
        "applied_generation": row.applied_generation,
        "dirty": row.dirty,
        "failures": row.failures,
        "last_error": row.last_error,
        "in_review": bool(row.in_review),
        "claimed_by": row.claimed_by,
        "document": json.loads(row.document, parse_int=_exact_int) if row.document else None,
        "document_generation": row.document_generation,
        "document_length": row.document_length,
        "cut": list(row.cut),
    }


# -- the triage ledger as tables ---------------------------------------------------------------
TRIAGE_TABLES = ("totals", "ranking")
TOTALS = ("site", "need", "headcount", "cases", "every_arrival_headcount", "arrivals")


Table = tuple[list[str], list[list[Any]]]


def triage_table(triage: dict[str, Any], table: str = "totals") -> Table:
    """The head and rows of one of the triage view's tables: ``totals`` (per site and
    need, beside what counting every arrival would have given) or ``ranking``."""
    if table == "ranking":
        head = ["rank", "pri", "site", "need", "headcount", "record_id"]
        return head, [
            [i, r["pri"], r["site"], r["need"], r["headcount"], r["record_id"]]
            for i, r in enumerate(triage["ranking"], 1)
        ]
    head = [*TOTALS, "suppressed_headcount"]
    return head, [
        [*(t[name] for name in TOTALS), t["every_arrival_headcount"] - t["headcount"]]
        for t in triage["totals"]
    ]


def csv_text(head: list[str], rows: list[list[Any]]) -> str:
    """RFC 4180 CSV. A text cell a spreadsheet could take for a formula (see
    :func:`opens_formula`) gets a leading apostrophe: sites and needs come from senders."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(head)
    for row in rows:
        writer.writerow([_cell(value) for value in row])
    return out.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, str) and opens_formula(value):
        return "'" + value
    return value


FORMULA_OPENERS = ("=", "+", "-", "@")


def opens_formula(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: it starts with a tab or a
    carriage return (OWASP's list), or its first character that is neither blank nor
    invisible, read as NFKC folds it, opens one. Spreadsheets skip a leading line feed,
    space or separator (``\\x1c``, U+0085) before a formula, and take the full-width
    and small forms of ``= + - @`` for the ASCII ones."""
    if text[:1] in ("\t", "\r"):
        return True
    for char in unicodedata.normalize("NFKC", text):
        if not char.isspace() and char.isprintable():
            return char in FORMULA_OPENERS
    return False
