"""Issue 13, item 6: without a public key, ``verify-proof`` does not pass anything as
verified unless it is told ``--unsigned``, and then says ``"trusted": false``.

Before the fix a forged, unsigned checkpoint (of a size and root of the forger's choosing)
and a proof made up to fit it gave exit 0 and ``"ok": true``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import oncebox
from conftest import INBOXES
from oncebox import Delivery
from oncebox.engine import merkle
from oncebox.engine.checkpoint import Checkpoint, generate_key
from oncebox.engine.proofs import inclusion_document
from oncebox.formats.ussd_h1 import make_frame

pytestmark = pytest.mark.slow  # every test runs oncebox verify-proof as a process

PRIVATE, PUBLIC = generate_key()


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncebox", "verify-proof", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


def forged(tmp_path: Path) -> None:
    """A proof and an unsigned checkpoint that fit each other and nothing real: record
    77 of inbox ussd, in a one-entry tree the forger made up."""
    state = json.dumps(
        {"identity": "rec77-1", "inbox": "ussd", "record": 77, "revision": 1,
         "snapshot_id": None, "witness": hashlib.sha256(b"made up").hexdigest()},
        separators=(",", ":"), sort_keys=True,
    )  # fmt: skip
    chain = hashlib.sha256(f"GENESIS|accept|{state}".encode()).hexdigest()
    entry = {"seq": 1, "step": "accept", "state": state, "hash": chain}
    root = merkle.leaf_hash(merkle.entry_leaf_data(1, "accept", state, chain)).hex()
    record = json.loads(state)
    about = {"id": 77, **{k: record[k] for k in ("inbox", "identity", "revision", "witness")}}
    (tmp_path / "forged.json").write_text(json.dumps(inclusion_document(entry, 0, 1, [], about)))
    cp = Checkpoint("oncebox:forged", 1, root, chain)
    (tmp_path / "forged-cp.json").write_text(json.dumps(cp.to_json()))


def genuine(tmp_path: Path) -> None:
    """A real proof with a signed checkpoint and an unsigned one, and a consistency proof."""
    with oncebox.open(f"sqlite:///{tmp_path / 'real.db'}", inboxes=INBOXES) as box:
        frame = make_frame(1, "Kakuma1", "MED", 3, 86).encode()
        record_id = box.ingest("ussd", Delivery(frame, key="rec1-1")).record_id
        assert record_id is not None
        (tmp_path / "old-cp.json").write_text(json.dumps(box.checkpoint(PRIVATE).to_json()))
        old_size = box.checkpoint().tree_size
        box.ingest("ussd", Delivery(make_frame(2, "Kakuma1", "MED", 4, 86).encode(), key="r2-2"))
        (tmp_path / "proof.json").write_text(json.dumps(box.prove(record_id)))
        (tmp_path / "cp.json").write_text(json.dumps(box.checkpoint(PRIVATE).to_json()))
        (tmp_path / "unsigned-cp.json").write_text(json.dumps(box.checkpoint().to_json()))
        (tmp_path / "consistency.json").write_text(json.dumps(box.prove_consistency(old_size)))
    (tmp_path / "key.pub").write_bytes(PUBLIC)


def shown(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def refused_untrusted(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode != 0 and result.stdout == "", result.stdout
    assert "--public-key" in result.stderr and "--unsigned" in result.stderr, result.stderr


def test_a_forged_unsigned_checkpoint_is_not_passed_as_verified(tmp_path: Path) -> None:
    forged(tmp_path)
    refused_untrusted(run(tmp_path, "forged.json", "--checkpoint", "forged-cp.json"))
    told = shown(run(tmp_path, "forged.json", "--checkpoint", "forged-cp.json", "--unsigned"))
    assert told["ok"] and told["trusted"] is False and told["signed"] is False
    (tmp_path / "key.pub").write_bytes(PUBLIC)
    keyed = run(
        tmp_path, "forged.json", "--checkpoint", "forged-cp.json", "--public-key", "key.pub"
    )
    assert keyed.returncode != 0 and "not signed" in keyed.stderr


@pytest.mark.parametrize("checkpoint", ["cp.json", "unsigned-cp.json"])
def test_without_a_key_nothing_is_trusted(tmp_path: Path, checkpoint: str) -> None:
    genuine(tmp_path)
    refused_untrusted(run(tmp_path, "proof.json", "--checkpoint", checkpoint))
    told = shown(run(tmp_path, "proof.json", "--checkpoint", checkpoint, "--unsigned"))
    assert told["ok"] and told["trusted"] is False and told["signed"] is False


def test_with_the_key_a_signed_checkpoint_is_trusted(tmp_path: Path) -> None:
    genuine(tmp_path)
    report = shown(
        run(tmp_path, "proof.json", "--checkpoint", "cp.json", "--public-key", "key.pub")
    )
    assert report["ok"] and report["trusted"] is True and report["signed"] is True
    both = run(
        tmp_path, "proof.json", "--checkpoint", "cp.json", "--public-key", "key.pub", "--unsigned"
    )
    assert both.returncode != 0 and both.stdout == ""


def test_a_consistency_proof_without_a_key_needs_unsigned_too(tmp_path: Path) -> None:
    genuine(tmp_path)
    args = ["consistency.json", "--checkpoint", "cp.json", "--old-checkpoint", "old-cp.json"]
    refused_untrusted(run(tmp_path, *args))
    assert shown(run(tmp_path, *args, "--unsigned"))["trusted"] is False
    assert shown(run(tmp_path, *args, "--public-key", "key.pub"))["trusted"] is True
