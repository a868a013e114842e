"""A batch leaves exactly what deciding its deliveries one by one leaves: the same
decisions and, table by table, the same rows (records and their counts, quarantine, dead
letters and their attempts, the log and its Merkle nodes, the apply steps' tables, the
verdict counters), over generated streams cut into batches at random.

The streams mix what the fast paths beside the general one must decide alike: one
identity several times in a batch (same and other content), refused deliveries between
them (bad format, a key with a NUL or a lone surrogate, a missing key, an oversize
body), deliveries again of dead letters (the same one twice, one of no inbox), records
retention turned into tombstones, records not sealed yet (sealing deferred, or a
dedicated sealer holding the log), stale fencing tokens, and a user's apply step that
fails on some records. Every commit made at the relaxed level (``synchronous=NORMAL``,
no flush) is watched as well: it may write counts and nothing else
(docs/concepts.md#power-cut)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import apsw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oncebox
from helpers import event_body
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.engine.sealing import Sealer
from oncebox.formats.ussd_h1 import make_frame
from oncebox.store.sqlite import SQLiteStore

KEYS = ["0", "1", "2", "3", "0", "1", "2", "3", "é", "a\x00b", "\ud800", ""]
DAY = 86_400.0
# What a commit without a flush may change: duplicate and late-replay counts on records,
# and the verdict counters.
COUNTS = {
    ("records", apsw.SQLITE_UPDATE),
    ("verdict_counts", apsw.SQLITE_INSERT),
    ("verdict_counts", apsw.SQLITE_UPDATE),
}


def _picky(tx: Any, change: Any) -> None:
    """A user's apply step that writes a row of its own, and fails on identity 2."""
    tx.execute("CREATE TABLE IF NOT EXISTS picked (identity TEXT, revision INTEGER)")
    tx.execute("INSERT INTO picked VALUES (?, ?)", (change.identity, change.revision))
    if change.identity == "2":
        raise ValueError("identity 2 is refused by this step")


INBOXES: dict[str, tuple[str, Any]] = {
    "keyed": ("keyed", "none"),
    "picky": ("keyed", _picky),
    "ussd": ("ussd-h1", "triage"),
    "event": ("json-event", "generation"),
    "feed": ("feed", "none"),
}


def _body(kind: str, variant: int, key: str) -> bytes:
    """Variant 0 and 1: two contents of one identity; 2: one the codec refuses (keyed:
    an oversize body)."""
    if kind in ("keyed", "picky"):
        return [b"a", b"b", b"x" * 1_048_577][variant]
    if kind == "event":
        return (
            b'{"schema_version":1}'
            if variant == 2
            else event_body(f"n-{key}", payload={"v": variant})
        )
    if kind == "feed":
        head = key[:1].encode("utf-8", "replace")
        return [head + b"a", head + b"b", b""][variant]
    if variant == 2:
        return b"H1|1|K1|MED|3|50|#zz"  # a broken trailer
    return make_frame(len(key), "K1", "MED", 3 + variant, 50).encode()


@contextmanager
def _relaxed_commits_write_only_counts() -> Iterator[list[int]]:
    """Watch every write transaction of the SQLite store: one committed at the relaxed
    level must have changed nothing but counts. Yields how many were relaxed."""
    begin, commit = SQLiteStore._begin, SQLiteStore._commit
    changed: dict[int, list[tuple[str, int]]] = {}
    relaxed = [0]

    def watched_begin(self: SQLiteStore, how: str, durable: bool) -> Any:
        session = begin(self, how, durable)
        seen = changed.setdefault(id(session.conn), [])
        seen.clear()
        session.conn.set_update_hook(lambda op, _db, table, _rowid: seen.append((table, op)))
        return session

    def watched_commit(session: Any) -> None:
        conn = session.conn
        if conn.execute("PRAGMA synchronous").get == 1:  # NORMAL
            relaxed[0] += 1
            beyond = set(changed.get(id(conn), ())) - COUNTS
            assert not beyond, f"a commit without a flush wrote {beyond}"
        commit(session)

    with (
        mock.patch.object(SQLiteStore, "_begin", watched_begin),
        mock.patch.object(SQLiteStore, "_commit", staticmethod(watched_commit)),
    ):
        yield relaxed


def _rows(path: str) -> dict[str, list[str]]:
    conn = apsw.Connection(path)
    try:
        names = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        found = {}
        for name in names:
            if name.startswith("sqlite_") or name in ("schema_version", "step_schema"):
                continue
            rows = [repr(row) for row in conn.execute(f'SELECT * FROM "{name}"')]
            if name == "meta":  # the store's own identity and birth differ, of course
                rows = [r for r in rows if "store_id" not in r and "created" not in r]
            found[name] = sorted(rows)
        return found
    finally:
        conn.close()


Stream = list[tuple[int, int, int | None, int]]


def _run(kind: str, evict: bool, sealing: str, stream: Stream, cuts: list[int], path: str,
         batched: bool) -> tuple[list[tuple[Any, ...]], dict[str, list[str]]]:  # fmt: skip
    codec, apply = INBOXES[kind]
    clock = ManualClock()
    spec = InboxSpec("i", codec=codec, apply=apply)
    deferred = sealing == "deferred"
    with oncebox.open(f"sqlite:///{path}", inboxes=[spec], clock=clock, seal=not deferred) as box:
        sealer = None
        if sealing == "dedicated":
            sealer = Sealer(box.store, "dedicated", ttl=1e9)
            sealer.acquire()
        tokens: dict[str, list[int | None]] = {}

        def leases() -> None:
            for scope in ("s1", "s2"):
                old = box.lease("i", scope, 1e9).token
                tokens[scope] = [box.lease("i", scope, 1e9).token, old, None]

        def facts(key: str, token: int) -> dict[str, Any]:
            if kind != "feed":
                return {"key": key}
            scope = "s1" if key in ("0", "2", "é") else "s2"
            return {"snapshot_id": scope, "lease_token": tokens[scope][token]}

        if kind == "feed":
            leases()
        for key in ("0", "1"):
            box.ingest("i", Delivery(_body(kind, 0, key), **facts(key, 0)))
        letters: list[int | None] = []
        for key in ("2", "3"):
            if kind in ("keyed", "picky"):
                refused = Delivery(b"a", key="")
            else:
                refused = Delivery(_body(kind, 2, key), **facts(key, 0))
            letters.append(box.ingest("i", refused).dead_letter_id)
        letters.append(999_999)  # no dead letter of this inbox
        if evict:
            clock.advance(31 * DAY)
            box.evict()
            if kind == "feed":
                leases()
        box.ingest("i", Delivery(_body(kind, 1, "3"), **facts("3", 0)))
        clock.advance(10)
        deliveries = [
            Delivery(
                _body(kind, variant, KEYS[key]),
                dead_letter=None if letter is None else letters[letter],
                **facts(KEYS[key], token),
            )
            for key, variant, letter, token in stream
        ]
        decisions = []
        if batched:
            start, cut = 0, 0
            while start < len(deliveries):
                size = cuts[cut % len(cuts)]
                decisions += box.ingest_all("i", deliveries[start : start + size])
                start, cut = start + size, cut + 1
        else:
            for delivery in deliveries:
                decisions += box.ingest_all("i", [delivery])
        if deferred:
            box.recover(grace=0)
        if sealer is not None:
            sealer.seal()
        assert box.verify().ok
        answers = [tuple(d.__dict__.values()) for d in decisions]
    return answers, _rows(path)


streams = st.lists(
    st.tuples(
        st.integers(0, len(KEYS) - 1),  # the key
        st.integers(0, 2),  # the content (2: refused by the codec)
        st.none() | st.integers(0, 2),  # a dead letter it delivers again
        st.sampled_from([0, 0, 0, 1, 2]),  # the scope's token: current, stale, none
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.sampled_from(sorted(INBOXES)),
    st.booleans(),
    st.sampled_from(["inline", "deferred", "dedicated"]),
    streams,
    st.lists(st.integers(1, 6), min_size=1, max_size=5),
)
def test_a_batch_leaves_what_one_by_one_leaves(
    kind: str, evict: bool, sealing: str, stream: Stream, cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as where, _relaxed_commits_write_only_counts():
        batched = _run(kind, evict, sealing, stream, cuts, os.path.join(where, "a.db"), True)
        alone = _run(kind, evict, sealing, stream, cuts, os.path.join(where, "b.db"), False)
    assert batched[0] == alone[0]
    assert batched[1].keys() == alone[1].keys()
    for table, rows in batched[1].items():
        assert rows == alone[1][table], table


def test_the_watch_sees_relaxed_commits() -> None:
    """The watch above is not idle: a stream of duplicates commits relaxed."""
    with tempfile.TemporaryDirectory() as where, _relaxed_commits_write_only_counts() as relaxed:
        _run(
            "keyed", False, "inline", [(0, 0, None, 0)] * 3, [1], os.path.join(where, "c.db"), True
        )
    assert relaxed[0] >= 2
