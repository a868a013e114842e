"""A write transaction that SQLite rolled back under the work writes nothing at all.

SQLite undoes a whole transaction by itself on some errors (an interrupt of a write, and
under some conditions a full disk, an I/O error or no memory: "Response To Errors Within
A Transaction" in its documentation). If an apply step catches that error and carries
on, every statement after it would run outside any transaction, each committed at once:
the batch's verdict counts and forwards written for records that were rolled back, while
the caller is told the ingest failed. The store refuses any commit but its own while the
work runs, so those statements fail and nothing of the batch is kept (docs/concepts.md:
counts never above the truth)."""

from __future__ import annotations

from typing import Any

import apsw
import pytest

import oncebox
from oncebox import Delivery, InboxSpec, ManualClock
from oncebox.errors import StorageError


def _swallowing_step(tx: Any, change: Any) -> None:
    """A user's apply step that meets an error which rolls the whole transaction back
    (an interrupt, standing for a disk error) and carries on as if it had not."""
    conn = tx._conn
    conn.set_progress_handler(lambda: True, 1)  # every statement interrupted at once
    try:
        tx.execute("CREATE TABLE IF NOT EXISTS seen (identity TEXT)")
    except apsw.Error:
        pass  # swallowed: the step's author thought it harmless
    finally:
        conn.set_progress_handler(None)


def test_nothing_is_kept_of_a_batch_rolled_back_under_its_apply_step(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'box.db'}"
    inboxes = [InboxSpec("k", codec="keyed", apply=_swallowing_step)]
    with oncebox.open(url, inboxes=inboxes, clock=ManualClock()) as box:
        batch = [Delivery(b"payload %d" % i, key=f"k-{i}") for i in range(3)]
        with pytest.raises(StorageError, match="rolled the transaction back"):
            box.ingest_batch("k", batch)
        assert box.records("k") == []
        assert list(box.log_entries()) == []
        # No verdict counted for deliveries that were not stored.
        assert [counts for _, counts in box.verdict_history("k") if counts] == []


def test_the_store_still_takes_deliveries_afterwards(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'box.db'}"
    calls = {"n": 0}

    def once(tx: Any, change: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            _swallowing_step(tx, change)

    with oncebox.open(url, inboxes=[InboxSpec("k", codec="keyed", apply=once)],
                      clock=ManualClock()) as box:  # fmt: skip
        with pytest.raises(StorageError):
            box.ingest("k", Delivery(b"one", key="a"))
        decision = box.ingest("k", Delivery(b"one", key="a"))
        assert decision.verdict == "accepted" and decision.may_ack
        assert [r.identity for r in box.records("k")] == ["a"]


def test_work_whose_last_statement_was_rolled_back_is_not_reported_committed(
    tmp_path: Any,
) -> None:
    """The rollback caught by the work itself, with no statement after it: the store's
    commit finds no transaction to commit and says so, instead of returning."""
    with oncebox.open(f"sqlite:///{tmp_path / 'box.db'}", clock=ManualClock()) as box:
        box.store.atomic(lambda tx: tx.execute("CREATE TABLE notes (n INTEGER)"))

        def work(tx: Any) -> str:
            tx.execute("INSERT INTO notes VALUES (1)")
            _swallowing_step(tx, None)  # rolls back the insert above, and swallows it
            return "done"

        with pytest.raises(StorageError, match="rolled the transaction back"):
            box.store.atomic(work)
        assert box.store.atomic(lambda tx: tx.execute("SELECT count(*) FROM notes")) == [(0,)]
