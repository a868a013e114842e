"""A user's apply step cannot end the deciding transaction from inside it.

On PostgreSQL a step's ``tx.execute("ROLLBACK")`` threw the records away, the statements
after it ran on their own in autocommit, and the store's COMMIT was answered as done: the
delivery was decided ``accepted`` (``may_ack`` true) and nothing of it was stored. A
``COMMIT`` committed the records before the rest of the transaction (their log entry, the
step's later changes), half a transaction; ``... AND CHAIN`` did the same and went on in a
new transaction. SQLite's commit hook already refused both; now
PostgreSQL refuses them too: the step fails and nothing of the transaction is kept, even
where the step catches the error and carries on."""

from __future__ import annotations

from typing import Any

import pytest

import oncebox
from conftest import BoxFactory
from oncebox import Delivery, InboxSpec

# PostgreSQL's own spellings too (a syntax error to SQLite, which refuses it anyway).
CHAINED = ["COMMIT AND CHAIN", "ROLLBACK AND CHAIN"]


@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught"])
def test_a_step_that_ends_the_transaction_stores_and_acks_nothing(
    make_box: BoxFactory, caught: bool
) -> None:
    chosen = [""]

    def step(tx: Any, change: Any) -> None:
        tx.execute("SELECT 1")
        try:
            tx.execute(chosen[0])
        except Exception:
            if not caught:
                raise

    box = make_box([InboxSpec("k", codec="keyed", apply=step)])
    statements = ["COMMIT", "ROLLBACK", *(CHAINED if box.store.dialect == "postgres" else [])]
    for n, statement in enumerate(statements):
        chosen[0] = statement
        with pytest.raises(oncebox.OnceboxError):
            box.ingest("k", Delivery(b"x", key=f"k-{n}"))
        assert box.records("k") == [], statement
