"""Signed checkpoints: a tree size and root an operator's Ed25519 key vouches for.

Why: a Merkle root alone proves nothing to someone who cannot trust the store; signed
with the operator's Ed25519 key it becomes a statement ("this log had these entries")
that a proof (:mod:`oncebox.engine.proofs`) can be checked against anywhere, with nothing
but these modules and the public key. Everything here is pure: no file or database I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from oncebox.errors import OnceboxError

__all__ = [
    "GENESIS",
    "Checkpoint",
    "ProofError",
    "generate_key",
    "key_id",
    "sign_checkpoint",
    "verify_checkpoint_signature",
]

GENESIS = "GENESIS"
BODY_HEADER = b"oncebox checkpoint v1\n"
INCLUSION_TYPE = "oncebox-inclusion-proof"
CONSISTENCY_TYPE = "oncebox-consistency-proof"
DOCUMENT_VERSION = 1
SIGNATURE_SIZE = 64

HASH_HEX = re.compile(r"[0-9a-f]{64}")
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
    "wrong_range": "the segment is not of the range asked for",
    "wrong_inbox": "the segment is of another inbox than the one asked for",
    "withheld": "an entry of the range, or a record's content, was left out",
    "reordered": "the segment's entries are not in log order",
    "altered": "the segment's entries are not the log's",
    "foreign_entry": "an entry shown as this inbox's record is not one",
}


class ProofError(OnceboxError):
    """A checkpoint or proof does not check out."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        self.reason = reason
        self.message = message or _REASONS.get(reason, reason)
        super().__init__(self.message)


def malformed(message: str) -> ProofError:
    return ProofError("malformed", message)


def is_int(value: object) -> TypeGuard[int]:
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
            raise malformed("the origin must be a non-empty string without newlines")
        if not is_int(self.tree_size) or self.tree_size < 0:
            raise malformed(f"the tree size must be an integer >= 0, not {self.tree_size!r}")
        if not isinstance(self.root, str) or not HASH_HEX.fullmatch(self.root):
            raise malformed("the root must be 64 lowercase hex digits")
        if not isinstance(self.log_head, str) or not (
            self.log_head == GENESIS or HASH_HEX.fullmatch(self.log_head)
        ):
            raise malformed(f"the log head must be {GENESIS} or 64 lowercase hex digits")
        if (self.tree_size == 0) != (self.log_head == GENESIS):
            raise malformed(f"the log head is {GENESIS} exactly when the tree is empty")
        if self.signature is not None:
            if not isinstance(self.signature, str):
                raise malformed("the signature must be a base64 string")
            try:
                raw = base64.b64decode(self.signature, validate=True)
            except (binascii.Error, ValueError):
                raise malformed("the signature is not valid base64") from None
            if len(raw) != SIGNATURE_SIZE:
                raise malformed(f"an Ed25519 signature is {SIGNATURE_SIZE} bytes")
        if self.key_id is not None:
            if not isinstance(self.key_id, str) or not _KEY_ID.fullmatch(self.key_id):
                raise malformed("the key id must be 16 lowercase hex digits")
            if self.signature is None:
                raise malformed("a key id without a signature")

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
            raise malformed("a checkpoint is a JSON object")
        unknown = set(data) - _CHECKPOINT_FIELDS
        if unknown:
            raise malformed(f"unknown checkpoint fields: {', '.join(sorted(map(str, unknown)))}")
        for name in ("origin", "tree_size", "root", "log_head"):
            if name not in data:
                raise malformed(f"the checkpoint has no {name}")
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
