"""Checking a feed segment offline (:mod:`oncebox.engine.segment`): with nothing but the
segment, a checkpoint and the public key, that it is the log's range whole.

Every refusal is a :class:`~oncebox.engine.checkpoint.ProofError` naming its reason:
``malformed``, the checkpoint's (``bad_key``, ``unsigned``, ``bad_signature``),
``wrong_tree``, ``wrong_range``, ``wrong_inbox``, ``size_mismatch``, then what the
segment got wrong: ``reordered``, ``withheld``, ``root_mismatch`` (the frontier or its
proof is not the checkpoint's tree before the range), ``altered`` (the range's entries,
a record's content), ``foreign_entry`` (an entry shown as this inbox's record is not).
Pure: no file or database I/O.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from oncebox.engine import merkle
from oncebox.engine.checkpoint import (
    Checkpoint,
    ProofError,
    is_int,
    malformed,
    verify_checkpoint_signature,
)
from oncebox.engine.segment import (
    CONTENT_BOUND,
    MAX_ENTRIES,
    SEGMENT_TYPE,
    SEGMENT_VERSION,
    content_bytes,
    extend,
    feed_inbox,
    fold,
    hashes,
    parse_state,
)

__all__ = ["SegmentReport", "verify_segment"]

_LEAF_KEYS = frozenset({"seq", "leaf"})
_ENTRY_KEYS = frozenset({"seq", "step", "state", "hash"})
_CONTENT_KEYS = frozenset({"content", "content_length", "content_sha256", "cut"})


@dataclass(frozen=True)
class SegmentReport:
    """What a segment showed: this inbox's records of the range, in log order, each as
    its entry sealed it (``sealed``) with its content as checked against the witness.
    ``hidden`` entries were given by their leaf hash only: the checkpoint vouches that
    they are the log's, not what they are. ``signed`` as in
    :class:`~oncebox.engine.proofs.ProofReport`."""

    inbox: str
    start: int
    end: int
    tree_size: int
    signed: bool
    entries: int
    hidden: int
    details: str
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    seq: int
    leaf: bytes
    step: str | None = None  # None: given by its leaf hash only
    state: str | None = None
    content: dict[str, Any] | None = None  # the content members, for a record


def _header(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise malformed("a segment is a JSON object")
    if doc.get("type") != SEGMENT_TYPE:
        raise malformed(f"not a {SEGMENT_TYPE} document (type {doc.get('type')!r:.80})")
    version = doc.get("version")
    if not is_int(version) or version != SEGMENT_VERSION:
        raise malformed(f"unsupported {SEGMENT_TYPE} version {version!r:.80}")
    for name in ("origin", "inbox"):
        if not isinstance(doc.get(name), str):
            raise malformed(f"the segment's {name} must be a string")
    return doc


def _count(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if not is_int(value) or value < 1:
        raise malformed(f"the segment's {name} must be an integer >= 1, not {value!r:.80}")
    return value


def _entry(item: Any) -> _Entry:
    if not isinstance(item, dict) or not is_int(item.get("seq")) or item["seq"] < 1:
        raise malformed("each entry is an object with a seq (an integer >= 1)")
    seq, keys = item["seq"], set(item)
    if keys == _LEAF_KEYS:
        leaf = hashes({"leaf": [item["leaf"]]}, "leaf")[0]
        return _Entry(seq, leaf)
    if keys not in (_ENTRY_KEYS, _ENTRY_KEYS | _CONTENT_KEYS):
        raise malformed(f"entry {seq} is neither a leaf hash nor a whole entry")
    step, state, chain = item["step"], item["state"], item["hash"]
    if not (isinstance(step, str) and isinstance(state, str) and isinstance(chain, str)):
        raise malformed(f"entry {seq}'s step, state and hash must be strings")
    leaf = merkle.leaf_hash(merkle.entry_leaf_data(seq, step, state, chain))
    content = {name: item[name] for name in _CONTENT_KEYS} if keys > _ENTRY_KEYS else None
    return _Entry(seq, leaf, step, state, content)


def _in_order(entries: list[_Entry], start: int, end: int) -> None:
    """Each position of the range once, in order: else the first thing that is off."""
    seqs = [entry.seq for entry in entries]
    for before, after in itertools.pairwise(seqs):
        if after < before:
            raise ProofError(
                "reordered", f"entry {after} comes after entry {before}: not in log order"
            )
    if len(set(seqs)) != len(seqs):
        repeated = next(s for s, t in itertools.pairwise(seqs) if s == t)
        raise malformed(f"entry {repeated} is given twice")
    outside = [seq for seq in seqs if not start <= seq <= end]
    if outside:
        raise malformed(f"entry {outside[0]} is outside the range {start} to {end}")
    missing = sorted(set(range(start, end + 1)) - set(seqs))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ProofError("withheld", f"entry {missing[0]} of the range is missing{more}")


def _check_tree(
    start: int, end: int, nodes: list[bytes], leaves: list[bytes], doc: dict[str, Any],
    cp: Checkpoint,
) -> None:  # fmt: skip
    """The frontier hashes to the tree before the range, and with the range's leaves to
    the tree at its end; each a prefix of the checkpoint's tree."""
    before, root = start - 1, bytes.fromhex(cp.root)
    if len(nodes) != before.bit_count():
        raise malformed(
            f"the tree before entry {start} is made of {before.bit_count()} subtrees, "
            f"the frontier gives {len(nodes)}"
        )
    before_proof, end_proof = hashes(doc, "before_proof"), hashes(doc, "end_proof")
    if before == 0:
        if before_proof:
            raise malformed("a segment from entry 1 has nothing before it to prove")
    elif not merkle.verify_consistency(before, cp.tree_size, fold(nodes), root, before_proof):
        raise ProofError(
            "root_mismatch",
            f"the frontier is not the tree of the {before} entries before the range that "
            f"the checkpoint's tree of size {cp.tree_size} extends",
        )
    at_end = fold(extend(nodes, before, leaves))
    if not merkle.verify_consistency(end, cp.tree_size, at_end, root, end_proof):
        raise ProofError(
            "altered",
            f"entries {start} to {end} do not hash to the checkpoint's tree of size "
            f"{cp.tree_size}: an entry was altered or replaced (or its position rewritten)",
        )


def _record(entry: _Entry, inbox: str) -> dict[str, Any]:
    """A record entry, once its entry is shown to be this inbox's feed entry and its
    content the one its witness binds."""
    assert entry.step is not None and entry.state is not None and entry.content is not None
    seq, state = entry.seq, parse_state(entry.state)
    owner = feed_inbox(entry.step, state)
    if owner != inbox or state is None:
        what = f"of inbox {owner}" if owner else f"a {entry.step} entry, no record"
        raise ProofError(
            "foreign_entry", f"entry {seq} is shown as a record of {inbox}, but it is {what}"
        )
    witness = state.get("witness")
    shown = entry.content
    length, sha, cut = shown["content_length"], shown["content_sha256"], shown["cut"]
    if shown["content"] is not None:
        data = content_bytes(shown["content"])
        if hashlib.sha256(data).hexdigest() != witness:
            raise ProofError(
                "altered", f"entry {seq}'s content is not the one its witness {witness} binds"
            )
        if not is_int(length) or (length, sha, cut) != (len(data), witness, []):
            raise ProofError("altered", f"entry {seq}'s content length or SHA-256 is not its own")
        kept = True
    elif cut == ["content"]:
        if not is_int(length) or length <= CONTENT_BOUND:
            raise ProofError(
                "withheld",
                f"entry {seq}'s content is left out, though not over {CONTENT_BOUND:,} bytes",
            )
        if sha != witness:
            raise ProofError("altered", f"entry {seq}'s content SHA-256 is not its witness")
        kept = True
    elif (length, sha, cut) == (None, None, []):
        kept = False  # retention evicted it; the entry still proves what it was
    else:
        raise malformed(f"entry {seq}'s content members do not fit together")
    return {
        "seq": seq,
        "step": entry.step,
        "sealed": state,
        "content": shown["content"],
        "content_length": length,
        "cut": cut,
        "kept": kept,
    }


def verify_segment(
    doc: Any,
    checkpoint: Checkpoint,
    public_pem: bytes | None = None,
    *,
    start: int | None = None,
    end: int | None = None,
    inbox: str | None = None,
    whole: bool = False,
) -> SegmentReport:
    """Check a segment against a checkpoint (and its signature, given a key), and that
    it is of the range ``start`` to ``end`` and of ``inbox`` when those are given.
    ``whole``: refuse an entry given by its leaf hash only (``withheld``), for a segment
    asked for whole.

    Why the order: what cannot be read or was not signed makes every later answer
    meaningless; then whether it is the segment asked for; then the positions (a gap
    is named as the entry missing, before any hash says only that something is off);
    then the tree, which vouches for every entry; last what each entry is.
    """
    body = _header(doc)
    first, last, size = _count(body, "from"), _count(body, "to"), _count(body, "tree_size")
    name, origin = body["inbox"], body["origin"]
    nodes = hashes(body, "frontier")
    items = body.get("entries")
    if not isinstance(items, list) or len(items) > MAX_ENTRIES:
        raise malformed(f"the segment's entries must be a list of at most {MAX_ENTRIES:,}")
    entries = [_entry(item) for item in items]
    if not first <= last <= size:
        raise malformed(f"the segment needs 1 <= from ({first}) <= to ({last}) <= {size}")
    if last - first + 1 > MAX_ENTRIES:
        raise malformed(f"a segment is of at most {MAX_ENTRIES:,} entries, not {first} to {last}")

    signed = False
    if public_pem is not None:
        verify_checkpoint_signature(checkpoint, public_pem)
        signed = True
    if origin != checkpoint.origin:
        raise ProofError(
            "wrong_tree", f"the segment is of {origin:.80}, the checkpoint of {checkpoint.origin}"
        )
    if (start is not None and start != first) or (end is not None and end != last):
        raise ProofError(
            "wrong_range",
            f"the segment is of entries {first} to {last}, not {start} to {end} as asked",
        )
    if inbox is not None and inbox != name:
        raise ProofError("wrong_inbox", f"the segment is of inbox {name:.80}, not {inbox}")
    if size != checkpoint.tree_size:
        raise ProofError(
            "size_mismatch",
            f"the segment is proven to a tree of size {size}, the checkpoint is of size "
            f"{checkpoint.tree_size}: ask for the segment with its tree size",
        )
    _in_order(entries, first, last)
    _check_tree(first, last, nodes, [entry.leaf for entry in entries], body, checkpoint)

    records, hidden = [], 0
    for entry in entries:
        if entry.step is None:
            if whole:
                raise ProofError(
                    "withheld", f"entry {entry.seq} is given by its leaf hash only, not whole"
                )
            hidden += 1
        elif entry.content is not None:
            records.append(_record(entry, name))
        elif feed_inbox(entry.step, parse_state(entry.state or "")) == name:
            raise ProofError(
                "withheld", f"entry {entry.seq} is a record of {name}, given without its content"
            )
    others = (
        f"{hidden} other entries by leaf hash only (the checkpoint vouches they are the "
        f"log's, not that none is a record of {name})"
        if hidden
        else "no entry by leaf hash only"
    )
    keys = "signature not checked (no public key given)"
    if signed:
        keys = f"signed by key {checkpoint.key_id or '?'}"
    details = (
        f"entries {first} to {last} of {checkpoint.origin}'s tree of size {size} with root "
        f"{checkpoint.root}: {len(records)} records of inbox {name} in log order, {others}; "
        f"{keys}"
    )
    return SegmentReport(name, first, last, size, signed, len(entries), hidden, details, records)
