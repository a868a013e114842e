"""A feed segment: every log entry of a range, shaped so that a consumer can check offline,
against a signed checkpoint, that it got the range whole.

Why a range and not one inclusion proof per record: inclusion proofs show that what a
consumer got is in the log, never that nothing beside it was left out. A segment gives
every entry from ``start`` to ``end``: this inbox's feed entries whole (with the record's
content at that revision, which the entry's witness binds) and every other entry as its
leaf hash; plus the *frontier* of the tree before the range (the roots of its perfect
subtrees, left to right) and two consistency proofs to the checkpoint's tree, from the
size before the range and from the size at its end. The verifier hashes the frontier to
the root of the tree before the range and, appending the range's leaves to it, the root
of the tree at its end; both proofs must lead to the checkpoint's root. Then the leaves
it was given are exactly the tree's, none left out, added, moved or changed (short of a
SHA-256 collision).

What a leaf hash cannot show is what its entry was: an entry given by its leaf hash only
is taken on the service's word to be none of this inbox's feed entries. A segment made
``whole`` gives every entry whole, and ``verify_segment(..., whole=True)`` then accepts
no leaf-only entry, so that nothing rests on the service's word (docs/log.md#segments).

Pure: the store is reached by the caller (:func:`oncebox.engine.audit.segment`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from oncebox.domain import LogEntry
from oncebox.engine import merkle
from oncebox.engine.checkpoint import HASH_HEX, is_int, malformed
from oncebox.engine.views import LISTED

__all__ = [
    "CONTENT_BOUND",
    "MAX_ENTRIES",
    "SEGMENT_TYPE",
    "SEGMENT_VERSION",
    "check_range",
    "content_bytes",
    "content_json",
    "extend",
    "feed_inbox",
    "fold",
    "frontier",
    "hashes",
    "parse_state",
    "segment_document",
]

SEGMENT_TYPE = "oncebox-feed-segment"
SEGMENT_VERSION = 1
MAX_ENTRIES = 1000  # log entries one segment gives at most (a feed page's worth)
# A record's content above this many bytes is left out of a segment (its length and
# SHA-256 stay, and its entry's witness binds it): the listings' bound, so that a segment
# stays bounded in bytes as every listing is.
CONTENT_BOUND = LISTED.content
FEED_STEPS = ("accept", "recover")  # entries that seal a record's revision
REVISING_STEP = "resolve"  # an operator's resolution; with action accept, a new revision


def parse_state(text: str) -> dict[str, Any] | None:
    """An entry's state as an object, or None for text that is not one JSON object
    without repeated members (no such state can name an inbox's record)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            raise ValueError("a repeated member")
        return found

    try:
        value = json.loads(text, object_pairs_hook=unique)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def feed_inbox(step: str, state: Mapping[str, Any] | None) -> str | None:
    """The inbox whose feed lists this entry (a record sealed, a revision an operator
    accepted), or None: the one rule of what a segment gives whole with its content."""
    if state is None:
        return None
    inbox = state.get("inbox")
    if not isinstance(inbox, str):
        return None
    if step in FEED_STEPS and "record" in state:
        return inbox
    if step == REVISING_STEP and state.get("action") == "accept":
        return inbox
    return None


def content_json(data: bytes) -> dict[str, str]:
    """Content as JSON: ``{"text": ...}`` when it is UTF-8, else ``{"base64": ...}``."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def content_bytes(value: Any) -> bytes:
    """The bytes :func:`content_json` wrote; anything else is ``malformed``."""
    if isinstance(value, dict) and len(value) == 1:
        if isinstance(value.get("text"), str):
            try:
                return str(value["text"]).encode("utf-8")
            except UnicodeEncodeError:
                raise malformed("a content's text is not valid Unicode") from None
        if isinstance(value.get("base64"), str):
            try:
                return base64.b64decode(value["base64"], validate=True)
            except (binascii.Error, ValueError):
                raise malformed("a content's base64 is not valid") from None
    raise malformed('a content is {"text": ...} or {"base64": ...}')


# -- the frontier: the perfect subtrees a tree of some size is made of -------------------


def _widths(size: int) -> list[int]:
    """The widths of the perfect subtrees of a tree of ``size`` leaves, largest first
    (the binary digits of ``size``)."""
    return [1 << bit for bit in reversed(range(size.bit_length())) if size >> bit & 1]


def frontier(get: merkle.NodeGetter, size: int) -> list[bytes]:
    """The roots of the perfect subtrees of the tree of ``size`` leaves, left to right."""
    nodes, offset = [], 0
    for width in _widths(size):
        level = width.bit_length() - 1
        nodes.append(get(level, offset >> level))
        offset += width
    return nodes


def fold(nodes: Sequence[bytes]) -> bytes:
    """The tree head of a frontier: its subtrees hashed together right to left, as the
    RFC 6962 recursion splits a tree (the empty tree's root for none)."""
    if not nodes:
        return merkle.EMPTY_ROOT
    result = nodes[-1]
    for node in reversed(nodes[:-1]):
        result = merkle.node_hash(node, result)
    return result


def extend(nodes: Sequence[bytes], size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """The frontier of the tree of ``size + len(leaves)`` leaves, from the frontier
    ``nodes`` of the tree of ``size`` and the leaf hashes that follow: each leaf is a
    subtree of width 1, and two neighbours of one width merge, as a binary counter
    carries (the widths come from ``size``, never from the caller)."""
    stack = list(zip(_widths(size), nodes, strict=True))
    for leaf in leaves:
        width, node = 1, leaf
        while stack and stack[-1][0] == width:
            left = stack.pop()[1]
            width, node = width * 2, merkle.node_hash(left, node)
        stack.append((width, node))
    return [node for _, node in stack]


# -- making one -------------------------------------------------------------------------


def check_range(start: int, end: int, tree_size: int) -> None:
    """Refuse a range a segment cannot be made for: ``1 <= start <= end <= tree_size``
    and at most :data:`MAX_ENTRIES` entries."""
    if not (is_int(start) and is_int(end) and is_int(tree_size)):
        raise ValueError("a segment's range and tree size are integers")
    if not 1 <= start <= end:
        raise ValueError(f"a segment needs 1 <= from ({start}) <= to ({end})")
    if end > tree_size:
        raise ValueError(f"to ({end}) is past the tree's {tree_size} entries")
    if end - start + 1 > MAX_ENTRIES:
        raise ValueError(
            f"a segment gives at most {MAX_ENTRIES:,} entries; from {start} to {end} is "
            f"{end - start + 1:,}: ask for {start} to {start + MAX_ENTRIES - 1}, then on"
        )


def _record(entry: LogEntry, content: bytes | None) -> dict[str, Any]:
    shown: dict[str, Any] = _whole(entry)
    if content is None:  # not kept any more (retention evicted it)
        shown.update(content=None, content_length=None, content_sha256=None, cut=[])
    else:
        sha = hashlib.sha256(content).hexdigest()
        cut = len(content) > CONTENT_BOUND
        shown.update(
            content=None if cut else content_json(content),
            content_length=len(content),
            content_sha256=sha,
            cut=["content"] if cut else [],
        )
    return shown


def _whole(entry: LogEntry) -> dict[str, Any]:
    return {"seq": entry.seq, "step": entry.step, "state": entry.state, "hash": entry.hash}


def segment_document(
    *,
    origin: str,
    inbox: str,
    start: int,
    end: int,
    tree_size: int,
    get: merkle.NodeGetter,
    entries: Sequence[LogEntry],
    contents: Mapping[int, bytes | None],
    whole: bool = False,
) -> dict[str, Any]:
    """The segment of entries ``start`` to ``end`` (log positions, both included) for
    ``inbox``, proven against the tree of ``tree_size`` entries.

    ``entries`` are the log's entries of the range, in order; ``contents`` the content
    of each of this inbox's feed entries by position (None: not kept any more); ``get``
    the tree's node getter. ``whole`` gives every other entry whole too, instead of its
    leaf hash.
    """
    check_range(start, end, tree_size)
    if [entry.seq for entry in entries] != list(range(start, end + 1)):
        raise ValueError(f"the entries given are not the log's {start} to {end}")
    shown = []
    for entry in entries:
        if feed_inbox(entry.step, parse_state(entry.state)) == inbox:
            shown.append(_record(entry, contents.get(entry.seq)))
        elif whole:
            shown.append(_whole(entry))
        else:
            leaf = merkle.leaf_hash(
                merkle.entry_leaf_data(entry.seq, entry.step, entry.state, entry.hash)
            )
            shown.append({"seq": entry.seq, "leaf": leaf.hex()})
    before = start - 1
    before_proof = merkle.consistency_proof(get, before, tree_size) if before else []
    return {
        "type": SEGMENT_TYPE,
        "version": SEGMENT_VERSION,
        "origin": origin,
        "inbox": inbox,
        "from": start,
        "to": end,
        "tree_size": tree_size,
        "frontier": [node.hex() for node in frontier(get, before)],
        "entries": shown,
        "before_proof": [node.hex() for node in before_proof],
        "end_proof": [node.hex() for node in merkle.consistency_proof(get, end, tree_size)],
    }


def hashes(doc: Mapping[str, Any], name: str) -> list[bytes]:
    """A document's list of hashes ``name``, each 64 lowercase hex digits."""
    value = doc.get(name)
    if not isinstance(value, list):
        raise malformed(f"the segment's {name} must be a list of hashes")
    nodes = []
    for node in value:
        if not isinstance(node, str) or not HASH_HEX.fullmatch(node):
            raise malformed(f"each hash of the segment's {name} must be 64 lowercase hex digits")
        nodes.append(bytes.fromhex(node))
    return nodes
