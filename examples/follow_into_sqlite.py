"""Exactly-once effects from an oncebox feed, in your own database.

The tracking-record pattern: the reader keeps its cursor (the feed position it has
handled up to) in its own database, and writes it in the same transaction as the effects
of the entries it handled. A crash before that commit leaves neither, and the next run
reads those entries again; a crash after it leaves both, and the next run starts past
them. So each entry's effect is made exactly once, with no help from oncebox beyond a
feed that never skips.

    python examples/follow_into_sqlite.py http://127.0.0.1:8080 payments ledger.db

The token is read from ONCEBOX_TOKEN (a read token for the inbox). ``--once`` stops when
caught up instead of following.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys

import httpx

SCHEMA = """
CREATE TABLE IF NOT EXISTS cursor (inbox TEXT PRIMARY KEY, position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS payments (
    idempotency_key TEXT NOT NULL,
    record_id       INTEGER NOT NULL,
    revision        INTEGER NOT NULL,
    content         TEXT
);
"""


def apply(db: sqlite3.Connection, entry: dict) -> None:
    """The effect of one entry: here a row; in your system, whatever it does."""
    content = entry["content"] or {}
    db.execute(
        "INSERT INTO payments VALUES (?, ?, ?, ?)",
        (entry["idempotency_key"], entry["record_id"], entry["revision"], content.get("text")),
    )


def follow(base: str, inbox: str, path: str, once: bool) -> None:
    db = sqlite3.connect(path, isolation_level=None)  # transactions written out below
    db.executescript(SCHEMA)
    found = db.execute("SELECT position FROM cursor WHERE inbox = ?", (inbox,)).fetchone()
    after = found[0] if found else 0
    headers = {"Authorization": f"Bearer {os.environ['ONCEBOX_TOKEN']}"}
    with httpx.Client(base_url=base, headers=headers, timeout=40) as http:
        while True:
            params = {"after": after, "limit": 100, "wait": 0 if once else 25}
            answer = http.get(f"/v1/inboxes/{inbox}/feed", params=params)
            answer.raise_for_status()
            page = answer.json()
            db.execute("BEGIN IMMEDIATE")
            for entry in page["entries"]:
                apply(db, entry)
            db.execute(
                "INSERT INTO cursor VALUES (?, ?) "
                "ON CONFLICT (inbox) DO UPDATE SET position = excluded.position",
                (inbox, page["next_after"]),
            )
            db.execute("COMMIT")  # the effects and the cursor, together or not at all
            after = page["next_after"]
            if once and not page["entries"]:
                return


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--once"]
    if len(arguments) != 3:
        sys.exit(json.dumps({"usage": "follow_into_sqlite.py BASE_URL INBOX DB [--once]"}))
    follow(*arguments, once="--once" in sys.argv)
