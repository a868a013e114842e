"""The proof documents an outside auditor checks offline: a record's inclusion in a
signed tree, and one signed tree's consistency with a later one.

A document carries everything its check needs (the log entry, the Merkle path, the
checkpoints); :func:`verify_inclusion_document` and :func:`verify_consistency_document`
trust nothing in it but what the key signed. Pure: no file or database I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncebox.engine import merkle
from oncebox.engine.checkpoint import (
    CONSISTENCY_TYPE,
    DOCUMENT_VERSION,
    HASH_HEX,
    INCLUSION_TYPE,
    Checkpoint,
    ProofError,
    is_int,
    malformed,
    verify_checkpoint_signature,
)
from oncebox.engine.log import SEALING_STEPS

__all__ = [
    "RECORD_FIELDS",
    "ProofReport",
    "consistency_document",
    "inclusion_document",
    "verify_consistency_document",
    "verify_inclusion_document",
]

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
        raise malformed("a proof document is a JSON object")
    if doc.get("type") != kind:
        raise malformed(f"not an {kind} document (type {doc.get('type')!r})")
    version = doc.get("version")
    if not is_int(version) or version != DOCUMENT_VERSION:
        raise malformed(f"unsupported {kind} version {version!r}")
    return doc


def _count(doc: dict[str, Any], name: str, minimum: int) -> int:
    value = doc.get(name)
    if not is_int(value) or value < minimum:
        raise malformed(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _path(doc: dict[str, Any]) -> list[bytes]:
    path = doc.get("path")
    if not isinstance(path, list):
        raise malformed("the path must be a list of hashes")
    nodes = []
    for node in path:
        if not isinstance(node, str) or not HASH_HEX.fullmatch(node):
            raise malformed("each path hash must be 64 lowercase hex digits")
        nodes.append(bytes.fromhex(node))
    return nodes


def _entry(doc: dict[str, Any]) -> tuple[int, str, str, str]:
    entry = doc.get("entry")
    if not isinstance(entry, dict):
        raise malformed("the document has no entry object")
    seq = entry.get("seq")
    if not is_int(seq) or seq < 1:
        raise malformed(f"the entry's seq must be an integer >= 1, not {seq!r}")
    fields = [entry.get(name) for name in ("step", "state", "hash")]
    if not all(isinstance(value, str) for value in fields):
        raise malformed("the entry's step, state and hash must be strings")
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
        raise malformed("the record must be an object")
    unknown = sorted(str(name) for name in record if name not in RECORD_FIELDS)
    if unknown:
        raise malformed(f"the record shows fields no log entry seals: {', '.join(unknown)}")
    for name, value in record.items():
        if name in _INTEGER:
            ok = is_int(value)
        else:
            ok = isinstance(value, str) or (value is None and name in _NULLABLE)
        if not ok:
            raise malformed(f"the record's {name} has the wrong type: {value!r:.80}")
    return record


def _check_claims(claims: dict[str, Any], seq: int, step: str, state: str) -> dict[str, Any]:
    """The claims, once each is shown equal to what log entry ``seq`` sealed. Only a
    seal's step seals a record: an eviction or a forward's give-up names one too."""
    try:
        sealed = json.loads(state)
    except ValueError:
        sealed = None
    if step not in SEALING_STEPS or not isinstance(sealed, dict) or "record" not in sealed:
        raise ProofError("record_mismatch", f"log entry {seq} ({step:.40}) seals no record")
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
        raise malformed(f"leaf index {leaf_index} is not in a tree of size {tree_size}")
    if leaf_index != seq - 1:
        raise malformed(f"log entry {seq} is leaf {seq - 1}, not leaf {leaf_index}")
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
    proven = _check_claims(claims, seq, step, state) if claims is not None else None
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
        raise malformed(f"old size {old_size} is larger than new size {new_size}")

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
