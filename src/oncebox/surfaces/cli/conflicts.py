"""A quarantined newcomer beside its original, as the console shows it: the two side by
side, each changed field marked ``3 -> 9`` (:mod:`oncebox.surfaces.diffing`, the diff
the console uses), or where the fields agree, the bytes that differ."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from oncebox.surfaces.cli.output import PANEL_WIDEST, cell, console, panel
from oncebox.surfaces.diffing import ABSENT, byte_difference, field_changes, shown, visible


def _fields(item: Mapping[str, Any] | None) -> dict[str, Any]:
    fields = (item or {}).get("fields")
    return dict(fields) if isinstance(fields, Mapping) else {}


def _bytes(content: Any) -> bytes:
    if not isinstance(content, Mapping):
        return b""
    if "base64" in content:
        return base64.b64decode(content["base64"])
    return str(content.get("text", "")).encode("utf-8")


def diff_json(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each field that differs between the original and the newcomer: its name, the
    original's value and the newcomer's (``null`` where one has no such field, said in
    ``text``), and ``text``, the change as the console writes it (``3 -> 9``)."""
    original = row.get("original")
    if not isinstance(original, Mapping):
        return []
    return [
        {
            "field": change.name,
            "old": None if change.old is ABSENT else change.old,
            "new": None if change.new is ABSENT else change.new,
            "text": change.text,
        }
        for change in field_changes(_fields(original), _fields(row))
    ]


def show_conflict(row: Mapping[str, Any]) -> None:
    """The newcomer and its original side by side, the fields that differ marked."""
    from rich.table import Table
    from rich.text import Text

    original = row.get("original") if isinstance(row.get("original"), Mapping) else None
    head = {
        "quarantine": row.get("id"),
        "inbox": row.get("inbox"),
        "identity": row.get("identity"),
        "status": row.get("status"),
        "reason": row.get("reason"),
        "resolved_at": row.get("resolved_at"),
        "resolved_by": row.get("resolved_by"),
        "note": row.get("note"),
    }
    panel({k: v for k, v in head.items() if v is not None})
    if original is None:
        console().print(Text("No original record is kept beside it (evicted)."))
        panel(row, title="newcomer", leave_out=("original",))
        return
    changes = {c.name: c for c in field_changes(_fields(original), _fields(row))}
    grid = Table(title=f"original (record {original.get('id')}) beside newcomer",
                 title_justify="left")  # fmt: skip
    for heading in ("", "original", "newcomer", "change"):
        grid.add_column(heading, overflow="fold", max_width=PANEL_WIDEST // 3)
    names = [*_fields(original), *(n for n in _fields(row) if n not in _fields(original))]
    for name in names:
        change = changes.get(name)
        old, new = _fields(original).get(name, ABSENT), _fields(row).get(name, ABSENT)
        style = "bold yellow" if change else ""
        grid.add_row(
            Text(name, style=style),
            Text(cell(shown(old), name), style=style),
            Text(cell(shown(new), name), style=style),
            Text(cell(change.text, name) if change else "", style=style),
        )
    for label, key in (("content", "content"), ("sha256", "content_sha256"),
                       ("length", "content_length"), ("key", "key"),
                       ("first seen", "first_seen"), ("last seen", "last_seen"),
                       ("seen", "seen_count")):  # fmt: skip
        old, new = original.get(key), row.get(key)
        widest = 24 if key == "content_sha256" else PANEL_WIDEST // 3
        differs = old != new and not key.endswith(("seen", "count"))
        grid.add_row(
            Text(label, style="dim"),
            Text(cell(old, key, widest)),
            Text(cell(new, key, widest)),
            Text("differs" if differs else ""),
        )
    console().print(grid)
    if not changes:
        _bytes_differ(original, row)


def _bytes_differ(original: Mapping[str, Any], row: Mapping[str, Any]) -> None:
    diff = byte_difference(_bytes(original.get("content")), _bytes(row.get("content")))
    if diff is None:
        return
    from rich.text import Text

    lead = "…" if diff.cut_before else ""
    tail = "…" if diff.cut_after else ""
    lines = [f"The fields agree; the bytes differ from byte {diff.offset:,}:"]
    for label, middle in (("original", diff.old), ("newcomer", diff.new)):
        spelled = f"{lead}{visible(diff.before)}[{visible(middle)}]{visible(diff.after)}{tail}"
        lines.append(f"  {label:<9} {spelled}")
    console().print(Text("\n".join(lines)))
