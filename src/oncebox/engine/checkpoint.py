"""Signed checkpoints and the proof documents an outside auditor checks offline.

Why: a Merkle root alone proves nothing to someone who cannot trust the store; signed
with the operator's Ed25519 key it becomes a statement ("this log had these entries")
that a proof can be checked against anywhere, with nothing but this module and the
public key. Everything here is pure: no file or database I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from oncebox.engine import merkle
from oncebox.errors import OnceboxError

__all__ = [
    "CONSISTENCY_TYPE",
    "GENESIS",
    "INCLUSION_TYPE",
    "Checkpoint",
    "ProofError",
    "ProofReport",
    "consistency_document",
    "generate_key",
    "inclusion_document",
    "key_id",
    "sign_checkpoint",
    "verify_checkpoint_signature",
    "verify_consistency_document",
    "verify_inclusion_document",
]

GENESIS = "GENESIS"
BODY_HEADER = b"oncebox checkpoint v1\n"
INCLUSION_TYPE = "oncebox-inclusion-proof"
CONSISTENCY_TYPE = "oncebox-consistency-proof"
DOCUMENT_VERSION = 1
SIGNATURE_SIZE = 64

_HASH_HEX = re.compile(r"[0-9a-f]{64}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_CHECKPOINT_FIELDS = {"origin", "tree_size", "root", "log_head", "signature", "key_id"}

_REASONS = {
    "malformed": "the checkpoint or proof document is not well-formed",
    "bad_key": "the key is not a usable Ed25519 key",
    "unsigned": "the checkpoint is not signed",
    "bad_signature": "the checkpoint's signature does not verify with this key",
    "size_mismatch": "the proof is for a different tree size than the checkpoint",
    "root_mismatch": "the proof does not lead to the checkpoint's root",
    "wrong_tree": "the checkpoints are of different logs",
    "record_mismatch": "the record the proof shows is not the one the log entry sealed",
}
# What a proof may show about its record, by the name of the sealed state's member that
# proves it (engine/log.py record_state); nothing else can be shown as proven.
RECORD_FIELDS = {
    "inbox": "inbox",
    "id": "record",
    "identity": "identity",
    "revision": "revision",
    "witness": "witness",
    "snapshot_id": "snapshot_id",
}
_NULLABLE = frozenset({"identity", "snapshot_id"})
_INTEGER = frozenset({"id", "revision"})


class ProofError(OnceboxError):
    """A checkpoint or proof does not check out."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        self.reason = reason
        self.message = message or _REASONS.get(reason, reason)
        super().__init__(self.message)


def _malformed(message: str) -> ProofError:
    return ProofError("malformed", message)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Checkpoint:
    """The tree's size and root at one moment, with the chain head it ends at.

    ``log_head`` is the chain hash of the last entry, or ``GENESIS`` for an empty log;
    ``key_id`` (first 16 hex of the SHA-256 of the raw public key) only says which key
    to try, it is not signed. A checkpoint that could not be signed unambiguously
    (a newline in the origin, a root that is not 64 lowercase hex, ...) cannot be
    built at all: the constructor raises ``ProofError("malformed")``.
    """

    origin: str
    tree_size: int
    root: str
    log_head: str
    signature: str | None = None
    key_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin:
            raise _malformed("the origin must be a non-empty string without newlines")
        if not _is_int(self.tree_size) or self.tree_size < 0:
            raise _malformed(f"the tree size must be an integer >= 0, not {self.tree_size!r}")
        if not isinstance(self.root, str) or not _HASH_HEX.fullmatch(self.root):
            raise _malformed("the root must be 64 lowercase hex digits")
        if not isinstance(self.log_head, str) or not (
            self.log_head == GENESIS or _HASH_HEX.fullmatch(self.log_head)
        ):
            raise _malformed(f"the log head must be {GENESIS} or 64 lowercase hex digits")
        if (self.tree_size == 0) != (self.log_head == GENESIS):
            raise _malformed(f"the log head is {GENESIS} exactly when the tree is empty")
        if self.signature is not None:
            if not isinstance(self.signature, str):
                raise _malformed("the signature must be a base64 string")
            try:
                raw = base64.b64decode(self.signature, validate=True)
            except (binascii.Error, ValueError):
                raise _malformed("the signature is not valid base64") from None
            if len(raw) != SIGNATURE_SIZE:
                raise _malformed(f"an Ed25519 signature is {SIGNATURE_SIZE} bytes")
        if self.key_id is not None:
            if not isinstance(self.key_id, str) or not _KEY_ID.fullmatch(self.key_id):
                raise _malformed("the key id must be 16 lowercase hex digits")
            if self.signature is None:
                raise _malformed("a key id without a signature")

    def body(self) -> bytes:
        """The exact bytes the signature covers: one field a line, so none can spill
        into another, under a versioned header so no other message can pass for one."""
        text = f"{self.origin}\n{self.tree_size}\n{self.root}\n{self.log_head}\n"
        return BODY_HEADER + text.encode()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root": self.root,
            "log_head": self.log_head,
        }
        if self.signature is not None:
            data["signature"] = self.signature
        if self.key_id is not None:
            data["key_id"] = self.key_id
        return data

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        """Read a checkpoint an auditor was handed; anything off is ``malformed``."""
        if not isinstance(data, dict):
            raise _malformed("a checkpoint is a JSON object")
        unknown = set(data) - _CHECKPOINT_FIELDS
        if unknown:
            raise _malformed(f"unknown checkpoint fields: {', '.join(sorted(map(str, unknown)))}")
        for name in ("origin", "tree_size", "root", "log_head"):
            if name not in data:
                raise _malformed(f"the checkpoint has no {name}")
        return cls(
            origin=data["origin"],
            tree_size=data["tree_size"],
            root=data["root"],
            log_head=data["log_head"],
            signature=data.get("signature"),
            key_id=data.get("key_id"),
        )


def generate_key() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair as (private PKCS8 PEM, public SubjectPublicKeyInfo PEM)."""
    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


def key_id(public: Ed25519PublicKey) -> str:
    """A short name for a public key, so a checkpoint can say which key signed it."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _private_key(private_pem: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(private_pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ProofError("bad_key", f"cannot read the private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ProofError("bad_key", "the private key is not an Ed25519 key")
    return key


def _public_key(public_pem: bytes) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(public_pem)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ProofError("bad_key", f"cannot read the public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ProofError("bad_key", "the public key is not an Ed25519 key")
    return key


def sign_checkpoint(cp: Checkpoint, private_pem: bytes) -> Checkpoint:
    """``cp`` with an Ed25519 signature over its body and the signing key's id."""
    key = _private_key(private_pem)
    signature = base64.b64encode(key.sign(cp.body())).decode("ascii")
    return replace(cp, signature=signature, key_id=key_id(key.public_key()))


def verify_checkpoint_signature(cp: Checkpoint, public_pem: bytes) -> None:
    """Raise unless ``cp`` is signed by the key in ``public_pem``: ``bad_key`` for a
    key that cannot be used, ``unsigned`` for no signature, ``bad_signature`` else."""
    key = _public_key(public_pem)
    if cp.signature is None:
        raise ProofError("unsigned", f"the checkpoint of {cp.origin} is not signed")
    expected_id = key_id(key)
    if cp.key_id is not None and cp.key_id != expected_id:
        raise ProofError(
            "bad_signature",
            f"the checkpoint was signed by key {cp.key_id}, not by this key {expected_id}",
        )
    try:
        key.verify(base64.b64decode(cp.signature, validate=True), cp.body())
    except (InvalidSignature, binascii.Error, ValueError):
        raise ProofError(
            "bad_signature",
            f"the checkpoint's signature does not verify with key {expected_id}: "
            f"it was altered or signed by another key",
        ) from None


def _hex_path(path: Sequence[bytes]) -> list[str]:
    return [node.hex() for node in path]


def inclusion_document(
    entry: dict[str, Any],
    leaf_index: int,
    tree_size: int,
    path: Sequence[bytes],
    record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A self-contained JSON proof that ``entry`` is leaf ``leaf_index`` of the tree
    of ``tree_size`` leaves; ``record`` says what the entry is about, for the reader."""
    for name in ("seq", "step", "state", "hash"):
        if name not in entry:
            raise ValueError(f"the log entry has no {name}")
    if not 0 <= leaf_index < tree_size:
        raise ValueError(f"leaf index {leaf_index} is not in a tree of size {tree_size}")
    if leaf_index != entry["seq"] - 1:
        raise ValueError(f"log entry {entry['seq']} is leaf {entry['seq'] - 1}, not {leaf_index}")
    document: dict[str, Any] = {
        "type": INCLUSION_TYPE,
        "version": DOCUMENT_VERSION,
        "tree_size": tree_size,
        "leaf_index": leaf_index,
        "entry": {name: entry[name] for name in ("seq", "step", "state", "hash")},
        "path": _hex_path(path),
    }
    if record is not None:
        document["record"] = dict(record)
    return document


def consistency_document(old_size: int, new_size: int, path: Sequence[bytes]) -> dict[str, Any]:
    """A self-contained JSON proof that the tree of ``new_size`` leaves extends the
    tree of ``old_size`` leaves."""
    if not 0 < old_size <= new_size:
        raise ValueError(f"a consistency proof needs 0 < old ({old_size}) <= new ({new_size})")
    return {
        "type": CONSISTENCY_TYPE,
        "version": DOCUMENT_VERSION,
        "old_size": old_size,
        "new_size": new_size,
        "path": _hex_path(path),
    }


@dataclass(frozen=True)
class ProofReport:
    """What a proof document showed. ``signed`` is true only when a signature was
    checked (a public key was given) and held; ``record`` holds exactly the record
    fields that were checked against the sealed entry (None when none were shown)."""

    kind: str
    tree_size: int
    leaf_index: int | None
    signed: bool
    details: str
    record: dict[str, Any] | None = None


def _header(doc: Any, kind: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise _malformed("a proof document is a JSON object")
    if doc.get("type") != kind:
        raise _malformed(f"not an {kind} document (type {doc.get('type')!r})")
    version = doc.get("version")
    if not _is_int(version) or version != DOCUMENT_VERSION:
        raise _malformed(f"unsupported {kind} version {version!r}")
    return doc


def _count(doc: dict[str, Any], name: str, minimum: int) -> int:
    value = doc.get(name)
    if not _is_int(value) or value < minimum:
        raise _malformed(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _path(doc: dict[str, Any]) -> list[bytes]:
    path = doc.get("path")
    if not isinstance(path, list):
        raise _malformed("the path must be a list of hashes")
    nodes = []
    for node in path:
        if not isinstance(node, str) or not _HASH_HEX.fullmatch(node):
            raise _malformed("each path hash must be 64 lowercase hex digits")
        nodes.append(bytes.fromhex(node))
    return nodes


def _entry(doc: dict[str, Any]) -> tuple[int, str, str, str]:
    entry = doc.get("entry")
    if not isinstance(entry, dict):
        raise _malformed("the document has no entry object")
    seq = entry.get("seq")
    if not _is_int(seq) or seq < 1:
        raise _malformed(f"the entry's seq must be an integer >= 1, not {seq!r}")
    fields = [entry.get(name) for name in ("step", "state", "hash")]
    if not all(isinstance(value, str) for value in fields):
        raise _malformed("the entry's step, state and hash must be strings")
    step, state, chain = (str(value) for value in fields)
    return seq, step, state, chain


def _check_signatures(public_pem: bytes | None, *checkpoints: Checkpoint) -> bool:
    if public_pem is None:
        return False
    for cp in checkpoints:
        verify_checkpoint_signature(cp, public_pem)
    return True


def _signed_note(signed: bool, *checkpoints: Checkpoint) -> str:
    if not signed:
        return "signature not checked (no public key given)"
    ids = sorted({cp.key_id or "?" for cp in checkpoints})
    return f"signed by key {', '.join(ids)}"


def _claims(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The record fields the document shows, each of a type the sealed state could hold;
    a field no entry seals is refused rather than shown unproven beside proven ones."""
    record = doc.get("record")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise _malformed("the record must be an object")
    unknown = sorted(str(name) for name in record if name not in RECORD_FIELDS)
    if unknown:
        raise _malformed(f"the record shows fields no log entry seals: {', '.join(unknown)}")
    for name, value in record.items():
        if name in _INTEGER:
            ok = _is_int(value)
        else:
            ok = isinstance(value, str) or (value is None and name in _NULLABLE)
        if not ok:
            raise _malformed(f"the record's {name} has the wrong type: {value!r:.80}")
    return record


def _check_claims(claims: dict[str, Any], seq: int, state: str) -> dict[str, Any]:
    """The claims, once each is shown equal to what log entry ``seq`` sealed."""
    try:
        sealed = json.loads(state)
    except ValueError:
        sealed = None
    if not isinstance(sealed, dict) or "record" not in sealed:
        raise ProofError("record_mismatch", f"log entry {seq} seals no record")
    for name, value in claims.items():
        member = RECORD_FIELDS[name]
        if member not in sealed:
            raise ProofError(
                "record_mismatch", f"log entry {seq} does not seal the record's {name}"
            )
        # Compared as JSON: 1 and true, or 1 and 1.0, are different claims.
        if json.dumps(sealed[member]) != json.dumps(value):
            raise ProofError(
                "record_mismatch",
                f"the record's {name} {value!r:.80} is not the {sealed[member]!r:.80} "
                f"log entry {seq} sealed",
            )
    return {name: claims[name] for name in RECORD_FIELDS if name in claims}


def verify_inclusion_document(
    doc: Any, checkpoint: Checkpoint, public_pem: bytes | None = None
) -> ProofReport:
    """Check an inclusion proof against a checkpoint (and its signature, given a key).

    Why the order: a document that cannot be read, or a checkpoint nobody signed, makes
    every later answer meaningless, so those fail first; then the size (the path's
    shape depends on it and the verifier cannot tell otherwise), then the root, and
    last whether every field the document shows about its record (:data:`RECORD_FIELDS`)
    is the one the entry sealed.
    """
    body = _header(doc, INCLUSION_TYPE)
    tree_size = _count(body, "tree_size", 1)
    leaf_index = _count(body, "leaf_index", 0)
    seq, step, state, chain = _entry(body)
    path = _path(body)
    if leaf_index >= tree_size:
        raise _malformed(f"leaf index {leaf_index} is not in a tree of size {tree_size}")
    if leaf_index != seq - 1:
        raise _malformed(f"log entry {seq} is leaf {seq - 1}, not leaf {leaf_index}")
    claims = _claims(body)

    signed = _check_signatures(public_pem, checkpoint)
    if tree_size != checkpoint.tree_size:
        raise ProofError(
            "size_mismatch",
            f"the proof is for a tree of size {tree_size}, "
            f"the checkpoint is of size {checkpoint.tree_size}",
        )
    leaf = merkle.leaf_hash(merkle.entry_leaf_data(seq, step, state, chain))
    if not merkle.verify_inclusion(
        leaf, leaf_index, tree_size, path, bytes.fromhex(checkpoint.root)
    ):
        raise ProofError(
            "root_mismatch",
            f"log entry {seq} with this path does not hash to the checkpoint's root "
            f"{checkpoint.root}: the proof is for another tree or was altered",
        )
    proven = _check_claims(claims, seq, state) if claims is not None else None
    sealing = ""
    if proven:
        sealing = " sealing " + ", ".join(f"{name} {value}" for name, value in proven.items())
    details = (
        f"log entry {seq} ({step}){sealing} is leaf {leaf_index} of {checkpoint.origin}'s "
        f"tree of size {tree_size} with root {checkpoint.root}; "
        f"{_signed_note(signed, checkpoint)}"
    )
    return ProofReport("inclusion", tree_size, leaf_index, signed, details, proven)


def verify_consistency_document(
    doc: Any, old: Checkpoint, new: Checkpoint, public_pem: bytes | None = None
) -> ProofReport:
    """Check that ``new`` extends ``old`` by a consistency proof (and both signatures,
    given a key): the log only grew between the two checkpoints, nothing was rewritten."""
    body = _header(doc, CONSISTENCY_TYPE)
    old_size = _count(body, "old_size", 1)
    new_size = _count(body, "new_size", 1)
    path = _path(body)
    if old_size > new_size:
        raise _malformed(f"old size {old_size} is larger than new size {new_size}")

    signed = _check_signatures(public_pem, old, new)
    if old.origin != new.origin:
        raise ProofError(
            "wrong_tree", f"the checkpoints are of different logs: {old.origin}, {new.origin}"
        )
    if (old_size, new_size) != (old.tree_size, new.tree_size):
        raise ProofError(
            "size_mismatch",
            f"the proof is from size {old_size} to {new_size}, the checkpoints are of "
            f"sizes {old.tree_size} and {new.tree_size}",
        )
    if not merkle.verify_consistency(
        old_size, new_size, bytes.fromhex(old.root), bytes.fromhex(new.root), path
    ):
        raise ProofError(
            "root_mismatch",
            f"the proof does not show the tree of size {new_size} (root {new.root}) extends "
            f"the tree of size {old_size} (root {old.root})",
        )
    details = (
        f"{new.origin}'s tree of size {new_size} extends its tree of size {old_size}; "
        f"{_signed_note(signed, old, new)}"
    )
    return ProofReport("consistency", new_size, None, signed, details)
