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


@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught"])
@pytest.mark.parametrize(
    "statement", ["COMMIT", "ROLLBACK", "COMMIT AND CHAIN", "ROLLBACK AND CHAIN"]
)
def test_a_step_that_ends_the_transaction_stores_and_acks_nothing(
    make_box: BoxFactory, statement: str, caught: bool
) -> None:
    def step(tx: Any, change: Any) -> None:
        tx.execute("SELECT 1")
        try:
            tx.execute(statement)
        except Exception:
            if not caught:
                raise

    box = make_box([InboxSpec("k", codec="keyed", apply=step)])
    if "CHAIN" in statement and box.store.dialect != "postgres":
        pytest.skip("PostgreSQL's own spelling (a syntax error to SQLite)")
    with pytest.raises(oncebox.OnceboxError):
        box.ingest("k", Delivery(b"x", key="k-1"))
    assert box.records("k") == []
