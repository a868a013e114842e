"""Issue 13, item 5: a proof binds every field it shows to the sealed entry state.

Before the fix ``verify-proof`` compared only the record's witness with the sealed entry:
a genuine, signed proof for record ``rec1-1``, relabelled as another record with the
same bytes, or as a record id that never existed, verified with ``signed=true``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import oncebox
from conftest import INBOXES
from oncebox import Delivery, Oncebox
from oncebox.engine import log, merkle
from oncebox.engine.checkpoint import Checkpoint, ProofError, generate_key
from oncebox.engine.proofs import inclusion_document, verify_inclusion_document
from oncebox.formats.ussd_h1 import make_frame

PRIVATE, PUBLIC = generate_key()
FRAME = make_frame(1, "Kakuma1", "MED", 3, 86).encode()


@dataclass
class Sealed:
    box: Oncebox
    first: int  # rec1-1
    twin: int  # rec9-1: another record with the same bytes (so the same witness)
    fed: int  # a feed record under snapshot S1

    def proof(self, record_id: int) -> dict[str, Any]:
        return self.box.prove(record_id)

    def checkpoint(self) -> Checkpoint:
        return self.box.checkpoint(PRIVATE)


@pytest.fixture
def sealed(tmp_path: Path) -> Iterator[Sealed]:
    box = oncebox.open(f"sqlite:///{tmp_path / 'proofs.db'}", inboxes=INBOXES)
    first = box.ingest("ussd", Delivery(FRAME, key="rec1-1")).record_id
    twin = box.ingest("ussd", Delivery(FRAME, key="rec9-1")).record_id
    token = box.lease("feed", "S1", 600).token
    fed = box.ingest("feed", Delivery(b"row-A", snapshot_id="S1", lease_token=token)).record_id
    assert first and twin and fed
    yield Sealed(box, first, twin, fed)
    box.close()


def reason(doc: dict[str, Any], cp: Checkpoint) -> str:
    with pytest.raises(ProofError) as caught:
        verify_inclusion_document(doc, cp, PUBLIC)
    return caught.value.reason


def relabelled(doc: dict[str, Any], **claims: Any) -> dict[str, Any]:
    changed = copy.deepcopy(doc)
    changed["record"].update(claims)
    return changed


def test_a_proof_shows_and_proves_every_field_of_the_seal(sealed: Sealed) -> None:
    for record_id in (sealed.first, sealed.fed):
        doc = sealed.proof(record_id)
        state = json.loads(doc["entry"]["state"])
        assert doc["record"] == {
            "inbox": state["inbox"],
            "id": state["record"],
            "identity": state["identity"],
            "revision": state["revision"],
            "witness": state["witness"],
            "snapshot_id": state["snapshot_id"],
        }
        report = verify_inclusion_document(doc, sealed.checkpoint(), PUBLIC)
        assert report.signed and report.record == doc["record"]
    assert sealed.proof(sealed.fed)["record"]["snapshot_id"] == "S1"


def test_a_proof_relabelled_as_a_twin_or_a_record_that_never_was_fails(sealed: Sealed) -> None:
    doc, cp = sealed.proof(sealed.first), sealed.checkpoint()
    twin = sealed.proof(sealed.twin)["record"]
    assert twin["witness"] == doc["record"]["witness"]  # same bytes, another record
    assert reason(relabelled(doc, id=sealed.twin), cp) == "record_mismatch"
    assert reason(relabelled(doc, id=9_999), cp) == "record_mismatch"
    assert reason(relabelled(doc, id=twin["id"], identity=twin["identity"]), cp) == (
        "record_mismatch"
    )


@pytest.mark.parametrize(
    "claims",
    [
        {"identity": "rec9-1"},
        {"inbox": "feed"},
        {"revision": 2},
        {"revision": True},  # 1 == True in Python; not in JSON
        {"snapshot_id": "S1"},
        {"witness": "ab" * 32},
    ],
)
def test_every_shown_field_is_checked(sealed: Sealed, claims: dict[str, Any]) -> None:
    doc = relabelled(sealed.proof(sealed.first), **claims)
    assert reason(doc, sealed.checkpoint()) in ("record_mismatch", "malformed")


def test_a_field_the_seal_does_not_cover_is_not_shown_as_proven(sealed: Sealed) -> None:
    doc, cp = sealed.proof(sealed.first), sealed.checkpoint()
    assert reason(relabelled(doc, headcount=3), cp) == "malformed"
    assert reason(relabelled(doc, note="kept"), cp) == "malformed"
    # Fewer claims prove less, and the report shows only what was proven.
    bare = copy.deepcopy(doc)
    del bare["record"]["identity"], bare["record"]["snapshot_id"]
    report = verify_inclusion_document(bare, cp, PUBLIC)
    assert report.record is not None and set(report.record) == {
        "inbox",
        "id",
        "revision",
        "witness",
    }


def test_a_record_claim_on_an_entry_that_seals_no_record_fails(sealed: Sealed) -> None:
    entries = sealed.box.log_entries()
    lease = next(e for e in entries if e.step == "lease")
    size = len(entries)
    with sealed.box.store.reading() as tx:
        path = merkle.inclusion_proof(log.Nodes(tx), lease.seq - 1, size)
    entry = {"seq": lease.seq, "step": lease.step, "state": lease.state, "hash": lease.hash}
    cp = sealed.checkpoint()
    verify_inclusion_document(inclusion_document(entry, lease.seq - 1, size, path), cp, PUBLIC)
    claimed = inclusion_document(entry, lease.seq - 1, size, path, {"inbox": "feed", "id": 1})
    assert reason(claimed, cp) == "record_mismatch"


def test_a_record_claim_on_an_eviction_that_names_the_record_fails(tmp_path: Path) -> None:
    # An eviction's entry names the record, its inbox and witness, but seals nothing: a
    # genuine proof of it, given the record fields of the evicted record's seal, passed
    # as if it proved that seal ("record" was all the check looked for in the state).
    clock = oncebox.ManualClock(1_800_000_000.0)
    with oncebox.open(f"sqlite:///{tmp_path / 'e.db'}", inboxes=INBOXES, clock=clock) as box:
        record_id = box.ingest("ussd", Delivery(FRAME, key="rec1-1")).record_id
        assert record_id
        sealed = box.prove(record_id)
        clock.advance(31 * 86_400)
        box.evict("ussd")
        entries = box.log_entries()
        evict = next(e for e in entries if e.step == "evict")
        size = len(entries)
        with box.store.reading() as tx:
            path = merkle.inclusion_proof(log.Nodes(tx), evict.seq - 1, size)
        cp = box.checkpoint(PRIVATE)
    entry = {"seq": evict.seq, "step": evict.step, "state": evict.state, "hash": evict.hash}
    claims = {name: sealed["record"][name] for name in ("inbox", "id", "witness")}
    plain = inclusion_document(entry, evict.seq - 1, size, path)
    assert verify_inclusion_document(plain, cp, PUBLIC).record is None
    claimed = inclusion_document(entry, evict.seq - 1, size, path, claims)
    assert reason(claimed, cp) == "record_mismatch"


# -- through the command an auditor runs ---------------------------------------------------
def verify(tmp_path: Path, doc: dict[str, Any], cp: Checkpoint) -> subprocess.CompletedProcess[str]:
    (tmp_path / "proof.json").write_text(json.dumps(doc))
    (tmp_path / "cp.json").write_text(json.dumps(cp.to_json()))
    (tmp_path / "key.pub").write_bytes(PUBLIC)
    return subprocess.run(
        [sys.executable, "-m", "oncebox", "verify-proof", "proof.json", "--checkpoint", "cp.json",
         "--public-key", "key.pub"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip


Change = Callable[[Sealed, dict[str, Any]], dict[str, Any]]
RELABELS: dict[str, Change] = {
    "as the twin": lambda s, d: relabelled(d, id=s.twin),
    "as a record that never was": lambda s, d: relabelled(d, id=424_242),
    "as another identity": lambda s, d: relabelled(d, identity="rec9-1"),
    "as another inbox": lambda s, d: relabelled(d, inbox="listing"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RELABELS))
def test_verify_proof_refuses_a_relabelled_genuine_proof(
    sealed: Sealed, tmp_path: Path, name: str
) -> None:
    doc, cp = sealed.proof(sealed.first), sealed.checkpoint()
    genuine = verify(tmp_path, doc, cp)
    assert genuine.returncode == 0, genuine.stderr
    shown = json.loads(genuine.stdout)
    assert shown["ok"] and shown["trusted"] and shown["record"] == doc["record"]
    forged = verify(tmp_path, RELABELS[name](sealed, doc), cp)
    assert forged.returncode != 0 and "record" in forged.stderr, forged.stdout
    assert forged.stdout == ""
