"""Signed checkpoints and the proof documents an auditor checks offline."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from oncebox.engine import merkle
from oncebox.engine.checkpoint import (
    Checkpoint,
    ProofError,
    generate_key,
    sign_checkpoint,
    verify_checkpoint_signature,
)
from oncebox.engine.proofs import (
    ProofReport,
    consistency_document,
    inclusion_document,
    verify_consistency_document,
    verify_inclusion_document,
)
from oncebox.errors import OnceboxError

PRIVATE, PUBLIC = generate_key()
OTHER_PRIVATE, OTHER_PUBLIC = generate_key()
ORIGIN = "oncebox:test-store"


def reason_of(call: Callable[..., object], *args: Any) -> str:
    """The reason ``call(*args)`` gives for refusing."""
    with pytest.raises(ProofError) as caught:
        call(*args)
    assert isinstance(caught.value, OnceboxError)
    assert caught.value.message and str(caught.value)
    return caught.value.reason


# --- a small log, kept the way the engine keeps it ----------------------------------------


class Log:
    """Entries chained by SHA-256 from GENESIS, with the Merkle nodes each completes."""

    def __init__(self, origin: str = ORIGIN, salt: str = "") -> None:
        self.origin = origin
        self.entries: list[dict[str, Any]] = []
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.salt = salt

    def get(self, level: int, index: int) -> bytes:
        return self.nodes[(level, index)]

    def append(self, step: str, state: dict[str, Any]) -> dict[str, Any]:
        prev = self.entries[-1]["hash"] if self.entries else "GENESIS"
        text = json.dumps(state, sort_keys=True, separators=(",", ":"))
        chain = hashlib.sha256(f"{prev}|{step}|{text}".encode()).hexdigest()
        seq = len(self.entries) + 1
        entry: dict[str, Any] = {"seq": seq, "step": step, "state": text, "hash": chain}
        self.entries.append(entry)
        data = merkle.entry_leaf_data(seq, step, text, chain)
        for level, index, value in merkle.completed_nodes(
            seq - 1, merkle.leaf_hash(data), self.get
        ):
            self.nodes[(level, index)] = value
        return entry

    def checkpoint(self, size: int | None = None, key: bytes | None = PRIVATE) -> Checkpoint:
        size = len(self.entries) if size is None else size
        head = self.entries[size - 1]["hash"] if size else "GENESIS"
        root = merkle.tree_root(self.get, size).hex()
        point = Checkpoint(self.origin, size, root, head)
        return sign_checkpoint(point, key) if key else point

    def prove(self, seq: int, size: int | None = None, record: bool = True) -> dict[str, Any]:
        size = len(self.entries) if size is None else size
        entry = self.entries[seq - 1]
        path = merkle.inclusion_proof(self.get, seq - 1, size)
        about = None
        if record:
            about = {"id": seq, "witness": json.loads(entry["state"])["witness"]}
        return inclusion_document(entry, seq - 1, size, path, about)

    def prove_consistency(self, old: int, new: int) -> dict[str, Any]:
        return consistency_document(old, new, merkle.consistency_proof(self.get, old, new))


def make_log(count: int, salt: str = "", origin: str = ORIGIN) -> Log:
    log = Log(origin, salt)
    for i in range(1, count + 1):
        witness = hashlib.sha256(f"{salt}content {i}".encode()).hexdigest()
        log.append("accept", {"record": i, "witness": witness, "inbox": "feed"})
    return log


LOG = make_log(21)
OTHER = make_log(21, salt="other ")  # another tree of the same size


def roundtrip(doc: dict[str, Any]) -> Any:
    return json.loads(json.dumps(doc))


# --- checkpoints and signatures ------------------------------------------------------------


def test_generate_key_gives_ed25519_pems() -> None:
    assert PRIVATE.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert PUBLIC.startswith(b"-----BEGIN PUBLIC KEY-----")
    assert PRIVATE != OTHER_PRIVATE
    private = serialization.load_pem_private_key(PRIVATE, password=None)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert public == PUBLIC


def test_body_is_the_exact_signed_text() -> None:
    cp = Checkpoint("oncebox:abc", 3, "ab" * 32, "cd" * 32)
    assert cp.body() == (
        b"oncebox checkpoint v1\noncebox:abc\n3\n" + b"ab" * 32 + b"\n" + b"cd" * 32 + b"\n"
    )
    empty = Checkpoint("o", 0, merkle.EMPTY_ROOT.hex(), "GENESIS")
    assert empty.body().endswith(b"\n0\n" + merkle.EMPTY_ROOT.hex().encode() + b"\nGENESIS\n")


def test_sign_and_verify_round_trip() -> None:
    cp = LOG.checkpoint(key=None)
    assert cp.signature is None and cp.key_id is None
    signed = sign_checkpoint(cp, PRIVATE)
    assert replace(signed, signature=None, key_id=None) == cp
    assert signed.signature is not None
    assert len(base64.b64decode(signed.signature)) == 64
    public = serialization.load_pem_public_key(PUBLIC)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert signed.key_id == hashlib.sha256(raw).hexdigest()[:16]
    verify_checkpoint_signature(signed, PUBLIC)
    again = Checkpoint.from_json(roundtrip(signed.to_json()))
    assert again == signed
    verify_checkpoint_signature(again, PUBLIC)
    empty = sign_checkpoint(make_log(0).checkpoint(key=None), PRIVATE)
    verify_checkpoint_signature(empty, PUBLIC)
    assert empty.root == merkle.EMPTY_ROOT.hex() and empty.log_head == "GENESIS"


def test_other_key_is_a_bad_signature() -> None:
    signed = LOG.checkpoint()
    assert reason_of(verify_checkpoint_signature, signed, OTHER_PUBLIC) == "bad_signature"
    # Without the key id hint the signature itself must fail.
    bare = replace(signed, key_id=None)
    verify_checkpoint_signature(bare, PUBLIC)
    assert reason_of(verify_checkpoint_signature, bare, OTHER_PUBLIC) == "bad_signature"
    # A key id claiming the right key does not make another key's signature good.
    theirs = sign_checkpoint(replace(signed, signature=None, key_id=None), OTHER_PRIVATE)
    forged = replace(theirs, key_id=signed.key_id)
    assert reason_of(verify_checkpoint_signature, forged, PUBLIC) == "bad_signature"


@pytest.mark.parametrize(
    "change",
    [
        {"tree_size": 20, "log_head": LOG.entries[19]["hash"]},
        {"tree_size": 22},
        {"root": "00" * 32},
        {"root": OTHER.checkpoint().root},
        {"log_head": LOG.entries[0]["hash"]},
        {"origin": "oncebox:another-store"},
        {"origin": ORIGIN + " "},
    ],
)
def test_changed_body_is_a_bad_signature(change: dict[str, Any]) -> None:
    signed = LOG.checkpoint()
    altered = replace(signed, **change)
    assert altered.body() != signed.body()
    assert reason_of(verify_checkpoint_signature, altered, PUBLIC) == "bad_signature"


def test_flipped_signature_is_a_bad_signature() -> None:
    signed = LOG.checkpoint()
    assert signed.signature is not None
    raw = bytearray(base64.b64decode(signed.signature))
    for at in (0, 31, 63):
        changed = bytearray(raw)
        changed[at] ^= 0x40
        altered = replace(signed, signature=base64.b64encode(bytes(changed)).decode())
        assert reason_of(verify_checkpoint_signature, altered, PUBLIC) == "bad_signature"


def test_unsigned_with_a_key() -> None:
    cp = LOG.checkpoint(key=None)
    assert reason_of(verify_checkpoint_signature, cp, PUBLIC) == "unsigned"


def ec_key() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def test_garbage_keys_are_bad_keys() -> None:
    ec_private, ec_public = ec_key()
    cp = LOG.checkpoint(key=None)
    signed = LOG.checkpoint()
    encrypted = serialization.load_pem_private_key(PRIVATE, None).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    for bad in (b"", b"not a key", PUBLIC, ec_private, encrypted, PRIVATE[:60]):
        assert reason_of(sign_checkpoint, cp, bad) == "bad_key"
    for bad in (b"", b"garbage", PRIVATE, ec_public, PUBLIC[:50]):
        assert reason_of(verify_checkpoint_signature, signed, bad) == "bad_key"


GOOD = LOG.checkpoint().to_json()


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "checkpoint",
        {},
        {k: v for k, v in GOOD.items() if k != "origin"},
        {k: v for k, v in GOOD.items() if k != "tree_size"},
        {k: v for k, v in GOOD.items() if k != "root"},
        {k: v for k, v in GOOD.items() if k != "log_head"},
        {k: v for k, v in GOOD.items() if k != "signature"},  # a key id without a signature
        {**GOOD, "origin": 5},
        {**GOOD, "origin": ""},
        {**GOOD, "origin": "two\nlines"},
        {**GOOD, "tree_size": "21"},
        {**GOOD, "tree_size": 21.0},
        {**GOOD, "tree_size": True},
        {**GOOD, "tree_size": -1},
        {**GOOD, "root": "zz" * 32},
        {**GOOD, "root": GOOD["root"][:-2]},
        {**GOOD, "root": GOOD["root"].upper()},
        {**GOOD, "root": None},
        {**GOOD, "log_head": "genesis"},
        {**GOOD, "log_head": "GENESIS"},  # an empty log's head on a tree of 21
        {**GOOD, "log_head": 7},
        {**GOOD, "tree_size": 0, "root": merkle.EMPTY_ROOT.hex()},  # size 0, a real head
        {**GOOD, "signature": "***"},
        {**GOOD, "signature": base64.b64encode(b"short").decode()},
        {**GOOD, "signature": 12},
        {**GOOD, "key_id": "XYZ"},
        {**GOOD, "key_id": 1},
        {**GOOD, "extra": 1},
    ],
)
def test_from_json_rejects_malformed(data: Any) -> None:
    assert reason_of(Checkpoint.from_json, data) == "malformed"


def test_from_json_accepts_unsigned_and_null_signature() -> None:
    unsigned = LOG.checkpoint(key=None)
    assert "signature" not in unsigned.to_json()
    assert Checkpoint.from_json(unsigned.to_json()) == unsigned
    data = {**unsigned.to_json(), "signature": None, "key_id": None}
    assert Checkpoint.from_json(data) == unsigned


# --- inclusion documents -------------------------------------------------------------------


def test_inclusion_document_shape() -> None:
    doc = LOG.prove(5)
    assert doc["type"] == "oncebox-inclusion-proof" and doc["version"] == 1
    assert doc["tree_size"] == 21 and doc["leaf_index"] == 4
    assert doc["entry"] == LOG.entries[4]
    assert all(isinstance(h, str) and len(h) == 64 for h in doc["path"])
    assert doc["record"]["id"] == 5
    assert "record" not in LOG.prove(5, record=False)
    assert roundtrip(doc) == doc


@pytest.mark.parametrize("size", [1, 2, 7, 8, 16, 21])
def test_inclusion_documents_verify(size: int) -> None:
    cp = LOG.checkpoint(size)
    for seq in range(1, size + 1):
        doc = roundtrip(LOG.prove(seq, size))
        report = verify_inclusion_document(doc, cp, PUBLIC)
        assert report == ProofReport(
            "inclusion", size, seq - 1, True, report.details, doc["record"]
        )
        assert f"log entry {seq}" in report.details
        unchecked = verify_inclusion_document(doc, cp)
        assert not unchecked.signed and "not checked" in unchecked.details
        assert verify_inclusion_document(doc, LOG.checkpoint(size, key=None)).leaf_index == seq - 1


def test_inclusion_against_another_tree_is_a_root_mismatch() -> None:
    assert OTHER.checkpoint().tree_size == LOG.checkpoint().tree_size
    for seq in (1, 11, 21):
        doc = LOG.prove(seq)
        theirs = OTHER.checkpoint()
        assert reason_of(verify_inclusion_document, doc, theirs, PUBLIC) == "root_mismatch"
        # Another log's proof for its own entry does not fit our checkpoint either.
        foreign = OTHER.prove(seq)
        ours = LOG.checkpoint()
        assert reason_of(verify_inclusion_document, foreign, ours) == "root_mismatch"


def test_inclusion_for_another_size_is_a_size_mismatch() -> None:
    doc = LOG.prove(3, 20)
    for size in (19, 21):
        cp = LOG.checkpoint(size)
        assert reason_of(verify_inclusion_document, doc, cp, PUBLIC) == "size_mismatch"


def flip_hex(value: str) -> str:
    return ("1" if value[0] == "0" else "0") + value[1:]


def mutated(doc: dict[str, Any], change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    copied = copy.deepcopy(doc)
    change(copied)
    return copied


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["entry"].update(state=d["entry"]["state"] + " "),
        lambda d: d["entry"].update(step="revise"),
        lambda d: d["entry"].update(hash="00" * 32),
        lambda d: d["path"].reverse(),
        lambda d: d["path"].pop(),
        lambda d: d["path"].append("00" * 32),
        lambda d: d["path"].__setitem__(0, flip_hex(d["path"][0])),
        lambda d: d.update(leaf_index=5, entry={**d["entry"], "seq": 6}),
    ],
)
def test_tampered_inclusion_is_a_root_mismatch(change: Callable[[dict[str, Any]], object]) -> None:
    doc = mutated(LOG.prove(5, record=False), change)
    cp = LOG.checkpoint()
    assert reason_of(verify_inclusion_document, doc, cp, PUBLIC) == "root_mismatch"


BROKEN: list[Callable[[dict[str, Any]], object]] = [
    lambda d: d.update(type="oncebox-consistency-proof"),
    lambda d: d.pop("type"),
    lambda d: d.update(version=2),
    lambda d: d.update(version="1"),
    lambda d: d.pop("tree_size"),
    lambda d: d.update(tree_size="21"),
    lambda d: d.update(tree_size=True),
    lambda d: d.update(tree_size=0),
    lambda d: d.update(leaf_index=-1),
    lambda d: d.update(leaf_index=None),
    lambda d: d.update(leaf_index=5),  # entry 5 is leaf 4
    lambda d: d.update(leaf_index=21, entry={**d["entry"], "seq": 22}),  # past the tree
    lambda d: d.pop("entry"),
    lambda d: d.update(entry=[1, 2]),
    lambda d: d["entry"].pop("state"),
    lambda d: d["entry"].update(seq="5"),
    lambda d: d["entry"].update(seq=0),
    lambda d: d["entry"].update(step=None),
    lambda d: d["entry"].update(hash=5),
    lambda d: d.pop("path"),
    lambda d: d.update(path="00" * 32),
    lambda d: d["path"].append(5),
    lambda d: d["path"].append("xyz"),
    lambda d: d["path"].append("AA" * 32),
    lambda d: d["path"].append("00" * 31),
    lambda d: d.update(record="record"),
    lambda d: d["record"].update(witness=5),
]


@pytest.mark.parametrize("change", BROKEN)
def test_broken_inclusion_documents_are_malformed(
    change: Callable[[dict[str, Any]], object],
) -> None:
    doc = mutated(LOG.prove(5), change)
    cp = LOG.checkpoint()
    assert reason_of(verify_inclusion_document, doc, cp, PUBLIC) == "malformed"


@pytest.mark.parametrize("doc", [None, [], "proof", 5, {}])
def test_non_documents_are_malformed(doc: Any) -> None:
    cp = LOG.checkpoint()
    assert reason_of(verify_inclusion_document, doc, cp) == "malformed"
    assert reason_of(verify_consistency_document, doc, cp, cp) == "malformed"


def test_record_witness_must_match_the_entry() -> None:
    cp = LOG.checkpoint()
    doc = LOG.prove(7)
    verify_inclusion_document(doc, cp, PUBLIC)
    other_witness = hashlib.sha256(b"other content").hexdigest()
    wrong = mutated(doc, lambda d: d["record"].update(witness=other_witness))
    assert reason_of(verify_inclusion_document, wrong, cp, PUBLIC) == "record_mismatch"
    # The record of another entry in the same log.
    swapped = mutated(doc, lambda d: d.update(record=LOG.prove(8)["record"]))
    assert reason_of(verify_inclusion_document, swapped, cp) == "record_mismatch"
    # A record without a witness claims nothing to check.
    verify_inclusion_document(mutated(doc, lambda d: d["record"].pop("witness")), cp)
    verify_inclusion_document(mutated(doc, lambda d: d.update(record=None)), cp)


def test_record_witness_against_an_entry_without_one() -> None:
    log = make_log(3)
    log.append("release", {"inbox": "feed", "token": 4})
    log.append("note", {"list": ["not", "an", "object"]})
    cp = log.checkpoint()
    for seq in (4, 5):
        entry = log.entries[seq - 1]
        path = merkle.inclusion_proof(log.get, seq - 1, 5)
        bare = inclusion_document(entry, seq - 1, 5, path)
        verify_inclusion_document(bare, cp, PUBLIC)
        claimed = inclusion_document(entry, seq - 1, 5, path, {"witness": "ab" * 32})
        assert reason_of(verify_inclusion_document, claimed, cp) == "record_mismatch"
    raw = {"seq": 1, "step": "x", "state": "not json", "hash": "ab" * 32}
    tiny = Log()
    tiny.nodes[(0, 0)] = merkle.leaf_hash(merkle.entry_leaf_data(1, "x", "not json", "ab" * 32))
    point = Checkpoint(ORIGIN, 1, merkle.tree_root(tiny.get, 1).hex(), "ab" * 32)
    verify_inclusion_document(inclusion_document(raw, 0, 1, []), point)
    claimed = inclusion_document(raw, 0, 1, [], {"witness": "ab" * 32})
    assert reason_of(verify_inclusion_document, claimed, point) == "record_mismatch"


def test_inclusion_signature_is_checked_when_a_key_is_given() -> None:
    doc = LOG.prove(9)
    unsigned = LOG.checkpoint(key=None)
    assert reason_of(verify_inclusion_document, doc, unsigned, PUBLIC) == "unsigned"
    theirs = LOG.checkpoint(key=OTHER_PRIVATE)
    assert reason_of(verify_inclusion_document, doc, theirs, PUBLIC) == "bad_signature"
    assert verify_inclusion_document(doc, theirs, OTHER_PUBLIC).signed
    assert reason_of(verify_inclusion_document, doc, theirs, b"junk") == "bad_key"
    # A signed checkpoint whose root was swapped for the other tree's: the signature
    # no longer covers it.
    spliced = replace(LOG.checkpoint(), root=OTHER.checkpoint().root)
    assert reason_of(verify_inclusion_document, doc, spliced, PUBLIC) == "bad_signature"


def test_inclusion_document_refuses_bad_arguments() -> None:
    entry = LOG.entries[4]
    path = merkle.inclusion_proof(LOG.get, 4, 21)
    with pytest.raises(ValueError):
        inclusion_document(entry, 5, 21, path)
    with pytest.raises(ValueError):
        inclusion_document(entry, 4, 4, path)
    with pytest.raises(ValueError):
        inclusion_document({"seq": 5, "step": "accept"}, 4, 21, path)


# --- consistency documents ---------------------------------------------------------------


def test_consistency_documents_verify() -> None:
    for old in range(1, 22):
        for new in (old, old + 1, 21):
            if new > 21:
                continue
            doc = roundtrip(LOG.prove_consistency(old, new))
            assert doc["type"] == "oncebox-consistency-proof" and doc["version"] == 1
            assert (doc["old_size"], doc["new_size"]) == (old, new)
            report = verify_consistency_document(
                doc, LOG.checkpoint(old), LOG.checkpoint(new), PUBLIC
            )
            assert report == ProofReport("consistency", new, None, True, report.details)
            unchecked = verify_consistency_document(
                doc, LOG.checkpoint(old, key=None), LOG.checkpoint(new, key=None)
            )
            assert not unchecked.signed


def test_wrong_consistency_documents_are_rejected() -> None:
    old, new = LOG.checkpoint(6), LOG.checkpoint(21)
    doc = LOG.prove_consistency(6, 21)
    verify_consistency_document(doc, old, new, PUBLIC)

    def reason(d: Any, a: Checkpoint = old, b: Checkpoint = new) -> str:
        return reason_of(verify_consistency_document, d, a, b, PUBLIC)

    # A proof for other sizes, or checkpoints of other sizes.
    assert reason(LOG.prove_consistency(5, 21)) == "size_mismatch"
    assert reason(LOG.prove_consistency(6, 20)) == "size_mismatch"
    assert reason(doc, LOG.checkpoint(7)) == "size_mismatch"
    # The other sizes' path relabelled with these sizes.
    relabelled = {**LOG.prove_consistency(5, 21), "old_size": 6}
    assert reason(relabelled) == "root_mismatch"
    # Tampered paths.
    for k in range(len(doc["path"])):
        flipped = copy.deepcopy(doc)
        flipped["path"][k] = flip_hex(flipped["path"][k])
        assert reason(flipped) == "root_mismatch"
    assert reason(mutated(doc, lambda d: d["path"].pop())) == "root_mismatch"
    assert reason(mutated(doc, lambda d: d["path"].append("00" * 32))) == "root_mismatch"
    # A forked log: same origin and sizes, another history.
    fork = make_log(21, salt="fork ")
    assert reason(doc, old, fork.checkpoint(21)) == "root_mismatch"
    assert reason(fork.prove_consistency(6, 21)) == "root_mismatch"
    # Two different logs.
    elsewhere = make_log(21, origin="oncebox:elsewhere")
    assert reason(doc, old, elsewhere.checkpoint(21)) == "wrong_tree"
    # Equal sizes need equal roots.
    same = LOG.prove_consistency(21, 21)
    assert reason(same, new, OTHER.checkpoint()) == "root_mismatch"
    # Signatures of both.
    assert reason(doc, LOG.checkpoint(6, key=None)) == "unsigned"
    assert reason(doc, old, LOG.checkpoint(21, key=OTHER_PRIVATE)) == "bad_signature"
    assert reason(doc, old, replace(new, log_head=LOG.entries[0]["hash"])) == "bad_signature"
    # Broken documents.
    for change in (
        lambda d: d.update(type="oncebox-inclusion-proof"),
        lambda d: d.update(version=0),
        lambda d: d.update(old_size=0),
        lambda d: d.update(old_size=22),
        lambda d: d.update(new_size="21"),
        lambda d: d.pop("path"),
        lambda d: d["path"].append("not hex"),
    ):
        assert reason(mutated(doc, change)) == "malformed"


def test_consistency_document_refuses_bad_arguments() -> None:
    for old, new in [(0, 5), (6, 5), (-1, 3)]:
        with pytest.raises(ValueError):
            consistency_document(old, new, [])
