"""A destination moved in the configuration from one inbox to another: it is sent only
its new inbox's forwards (claims), and what operators see of it is only those too (its
backlog, dead letters, listings, bulk retries, one forward by id); what the first inbox
still owed waits, as for a destination removed (docs/forwarding.md#destinations)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import oncebox
from oncebox import Delivery, ForwardFilter, ForwardStatus, InboxSpec, ManualClock
from oncebox.engine.outbox import Sent
from oncebox.errors import InvalidOperation
from oncebox.surfaces.http import create_app


def hooks(**destination: Any) -> dict[str, Any]:
    return {"ledger": {"url": "http://127.0.0.1:9/h", "retry": ["0s"], **destination}}


def test_a_moved_destination_shows_only_its_new_inboxs_forwards(
    shared_url: str, clock: ManualClock
) -> None:
    # Backlog, dead letters and listings asked for the destination's name alone: the
    # first inbox's leftovers (never to be sent) stayed in its backlog for good, their
    # age its lag, and a token for the new inbox alone read them, one by one too.
    before = [InboxSpec("a", codec="keyed", forward=hooks()), InboxSpec("b", codec="keyed")]
    with oncebox.open(shared_url, inboxes=before, clock=clock) as box:
        box.ingest_batch("a", [Delivery(b"a1", key="k1"), Delivery(b"a2", key="k2")])
        [claim] = box.claim_forwards("ledger", "d1", 1)
        box.settle_forwards("ledger", [Sent(claim, 404, 0.01)], "d1")  # one dead, one owed
        leftovers = [f.id for f in box.forwards()]
    after = [InboxSpec("a", codec="keyed"), InboxSpec("b", codec="keyed", forward=hooks())]
    clock.advance(3600)
    with oncebox.open(shared_url, inboxes=after, clock=clock) as box:
        box.ingest("b", b"b's own", key="k")
        [standing] = box.forwarding()
        assert (standing.backlog, standing.dead, standing.oldest_seconds) == (1, 0, 0.0)
        [own] = box.forwards(ForwardFilter("ledger"))
        assert own.id not in leftovers
        assert box.forwards(ForwardFilter("ledger", ForwardStatus.DEAD)) == []
        assert box.forwards(ForwardFilter("ledger", record_id=1)) == []
        assert box.retry_forwards(ForwardFilter("ledger"), actor="ops") == 0
        assert len(box.forwards()) == 3  # the leftovers are still in the store
        reader = box.create_token("reader", ["b"], ["read"]).secret
        http = TestClient(create_app(box), headers={"Authorization": f"Bearer {reader}"})
        listed = http.get("/v1/forwarding/ledger/deliveries").json()["deliveries"]
        assert [f["id"] for f in listed] == [own.id]
        for forward_id in leftovers:  # inbox a's: not the b token's to read
            assert http.get(f"/v1/forwarding/deliveries/{forward_id}").status_code == 404
        assert http.get(f"/v1/forwarding/deliveries/{own.id}").status_code == 200


def test_a_moved_ordered_destination_is_not_held_back_by_the_first_inboxs_keys(
    shared_url: str, clock: ManualClock
) -> None:
    # Under ordered = "key" a forward waited while an earlier unfinished one had its key,
    # of any inbox: the first inbox's leftovers, never sent, held back for good each of
    # the new inbox's identities that the first one had too.
    ordered = hooks(ordered="key")
    before = [InboxSpec("a", codec="keyed", forward=ordered), InboxSpec("b", codec="keyed")]
    with oncebox.open(shared_url, inboxes=before, clock=clock) as box:
        box.ingest("a", b"a's own", key="k")
    after = [InboxSpec("a", codec="keyed"), InboxSpec("b", codec="keyed", forward=ordered)]
    with oncebox.open(shared_url, inboxes=after, clock=clock) as box:
        box.ingest("b", b"b's own", key="k")
        assert box.forwards_due("ledger")
        [claim] = box.claim_forwards("ledger", "d1", 10)
        assert (claim.entry.identity, claim.forward.inbox_id) == ("k", box.inbox("b").row.id)


def test_a_moved_destinations_leftover_is_not_revived_by_a_retry(
    shared_url: str, clock: ManualClock
) -> None:
    # The API and the console answer 404 for the first inbox's leftovers; the library and
    # the CLI's `forwarding retry ID` revived one all the same, "failed" and due at once,
    # though no dispatcher would ever claim it: a retry that said it was done.
    before = [InboxSpec("a", codec="keyed", forward=hooks()), InboxSpec("b", codec="keyed")]
    with oncebox.open(shared_url, inboxes=before, clock=clock) as box:
        box.ingest("a", b"a's own", key="k")
        [claim] = box.claim_forwards("ledger", "d1", 1)
        box.settle_forwards("ledger", [Sent(claim, 404, 0.01)], "d1")  # dead
    after = [InboxSpec("a", codec="keyed"), InboxSpec("b", codec="keyed", forward=hooks())]
    with oncebox.open(shared_url, inboxes=after, clock=clock) as box:
        with pytest.raises(InvalidOperation, match="inbox b"):
            box.retry_forward(claim.forward.id, actor="ops")
        [left] = box.forwards()
        assert left.status is ForwardStatus.DEAD
