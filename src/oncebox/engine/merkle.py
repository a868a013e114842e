"""A Merkle tree over the append-only log, hashed as in RFC 6962 / RFC 9162.

Why a Merkle tree on top of the hash chain: the chain proves order only to someone who
replays all of it, while a tree root lets an auditor check one entry (an inclusion proof)
or that a later log extends an earlier one (a consistency proof) with O(log n) hashes.

Log entry ``seq`` (1-based) is leaf index ``seq - 1``. The store keeps the hash of every
complete, aligned subtree: node ``(level, index)`` covers leaves
``[index * 2**level, (index + 1) * 2**level)``, and level 0 holds the leaf hashes. Such a
node never changes once the log has grown past it, so it can be written once at append
time; every root and proof for any tree size is then assembled from O(log n) of them.

Everything here is pure: the store is reached only through a ``NodeGetter``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "NodeGetter",
    "appended_nodes",
    "completed_nodes",
    "consistency_proof",
    "entry_leaf_data",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "range_hash",
    "root_of",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32

EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""The root of the empty tree: the hash of nothing, so an empty log still has a root."""

NodeGetter = Callable[[int, int], bytes]
"""``(level, index) -> hash`` of a stored complete aligned subtree."""


def leaf_hash(data: bytes) -> bytes:
    """Hash a leaf; the 0x00 prefix keeps a leaf from ever passing for an inner node."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Hash an inner node; the 0x01 prefix separates it from leaves (second preimages)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def entry_leaf_data(seq: int, step: str, state: str, chain_hash: str) -> bytes:
    """What a log entry contributes as a leaf: all it says, its chain hash included, so
    the tree commits to the chain too and a proof names one exact entry."""
    return f"{seq}|{step}|{state}|{chain_hash}".encode()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2): where the tree splits."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_size(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """The tree head of a whole list of leaf hashes, straight from the definition.

    Why: a reference to check the stored-node code against, and the simplest way to hash
    a small list. Pairs level by level, so it is O(n) and needs the whole list.
    """
    if not leaf_hashes:
        return EMPTY_ROOT
    # Reduce each level pairwise; an odd last node is carried up unchanged. This equals
    # the recursive split at the largest power of two below n.
    level = list(leaf_hashes)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def completed_nodes(leaf_index: int, leaf: bytes, get: NodeGetter) -> list[tuple[int, int, bytes]]:
    """The nodes to store after appending leaf ``leaf_index`` whose hash is ``leaf``.

    Why: each append completes the leaf itself and, when the new leaf closes a right
    child, every aligned subtree it closes; storing them then is what keeps every later
    root and proof O(log n). Reads each closed subtree's left sibling through ``get``.
    """
    _check_size("leaf_index", leaf_index)
    nodes = [(0, leaf_index, leaf)]
    level, index, current = 0, leaf_index, leaf
    while index % 2 == 1:
        current = node_hash(get(level, index - 1), current)
        level += 1
        index //= 2
        nodes.append((level, index, current))
    return nodes


def appended_nodes(
    first_index: int,
    leaves: Sequence[bytes],
    get: NodeGetter,
    stride: int = 0,
    edge: dict[int, bytes] | None = None,
) -> list[tuple[int, int, bytes]]:
    """What :func:`completed_nodes` gives for consecutive leaves from ``first_index``,
    in order, in one pass; with ``stride``, only those of levels ``stride``,
    ``2 * stride``, ... (the ones a store keeps: the others are built, never listed).

    Why: the sealer appends a batch at a time; a left sibling completed earlier in the
    batch is taken from memory instead of a lookup. ``edge`` is what the caller already
    knows of the tree's right edge (level -> the complete subtree that ends the first
    ``first_index`` leaves at that level, for some of the levels set in ``first_index``);
    the siblings it lacks are read through ``get``. It is left as the edge after the
    batch, so that the next append (of the same tree) reads nothing it already knew.

    A batch is built a level at a time, each level's pairs hashed in one comprehension
    (a climb a leaf, with its loop and lookups, cost more than its hashing); a node is
    listed after the leaf that completes it, above the lower nodes that leaf completes.
    """
    _check_size("first_index", first_index)
    if edge is None:
        edge = {}
    if len(leaves) == 1:  # a single delivery's entry: its own climb, no levels to set up
        return _climb(first_index, leaves[0], get, stride, edge)
    sha256 = hashlib.sha256
    found: list[tuple[int, int, int, bytes]] = []  # (completing leaf, level, index, hash)
    row, start, level = list(leaves), first_index, 0
    while row:
        if not stride or (level and not level % stride):
            found += [((i + 1) << level, level, i, h) for i, h in enumerate(row, start)]
        left = edge.pop(level, None)
        if start & 1:  # the first node is a right child: its left sibling came before
            row.insert(0, get(level, start - 1) if left is None else left)
            start -= 1
        count = len(row)
        if count & 1:  # the last node waits for its right sibling
            edge[level] = row[-1]
        if count > 2:
            pairs = iter(row)  # one iterator zipped with itself: its pairs, an odd last left
            row = [sha256(b"\x01" + a + b).digest() for a, b in zip(pairs, pairs, strict=False)]
        elif count == 2:  # a single delivery's usual climb: no comprehension to set up
            row = [sha256(b"\x01" + row[0] + row[1]).digest()]
        else:
            break
        start >>= 1
        level += 1
    if not found:
        return []
    found.sort(key=_completion)
    return [(level, index, value) for _, level, index, value in found]


def _climb(
    index: int, leaf: bytes, get: NodeGetter, stride: int, edge: dict[int, bytes]
) -> list[tuple[int, int, bytes]]:
    """:func:`appended_nodes` of one leaf: up from it while it closes a right child."""
    nodes = [] if stride else [(0, index, leaf)]
    level, current = 0, leaf
    while index & 1:  # each set bit of ``index`` is a complete subtree to its left
        left = edge.pop(level, None)
        if left is None:
            left = get(level, index - 1)
        current = hashlib.sha256(b"\x01" + left + current).digest()
        level += 1
        index >>= 1
        if not stride or not level % stride:
            nodes.append((level, index, current))
    edge[level] = current
    return nodes


def _completion(node: tuple[int, int, int, bytes]) -> tuple[int, int]:
    return node[0], node[1]


def _decompose(start: int, end: int) -> list[tuple[int, int]]:
    """The complete aligned subtrees ``(level, index)`` that make up ``[start, end)``,
    left to right, largest first (the binary digits of the width)."""
    parts: list[tuple[int, int]] = []
    offset = start
    remaining = end - start
    while remaining:
        level = remaining.bit_length() - 1
        parts.append((level, offset >> level))
        offset += 1 << level
        remaining -= 1 << level
    return parts


def range_hash(get: NodeGetter, start: int, end: int) -> bytes:
    """MTH(D[start:end]) from stored complete subtrees, with O(log n) gets.

    Why it works: splitting at the largest power of two below the width, recursively,
    cuts the range into complete subtrees whose widths are the binary digits of the
    width, largest first; the hash folds them right to left. They are stored nodes only
    if ``start`` is a multiple of the largest, which holds for every range the RFC
    recursion visits, so other starts are refused.
    """
    _check_size("start", start)
    if end < start:
        raise ValueError(f"range end {end} is before its start {start}")
    if start == end:
        return EMPTY_ROOT
    top = 1 << ((end - start).bit_length() - 1)
    if start % top:
        raise ValueError(
            f"range [{start}, {end}) is not aligned: start must be a multiple of {top}"
        )
    parts = _decompose(start, end)
    level, index = parts[-1]
    result = get(level, index)
    for level, index in reversed(parts[:-1]):
        result = node_hash(get(level, index), result)
    return result


def tree_root(get: NodeGetter, size: int) -> bytes:
    """The root of the tree of the first ``size`` leaves: what a checkpoint signs."""
    _check_size("size", size)
    return range_hash(get, 0, size)


def inclusion_proof(get: NodeGetter, index: int, size: int) -> list[bytes]:
    """The audit path for leaf ``index`` in the tree of ``size`` leaves (RFC 9162 PATH).

    Why: with it and the leaf, anyone can recompute the root, so a signed root vouches
    for the entry. Walks down from the root, taking each sibling as one stored node when
    it is complete or as a ``range_hash`` when it is the ragged right edge: O(log^2 n)
    gets at most. Ordered from the leaf's sibling up to the root's children.
    """
    _check_size("index", index)
    _check_size("size", size)
    if index >= size:
        raise ValueError(f"leaf index {index} is not in a tree of size {size}")
    siblings: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        middle = start + k
        if index < middle:
            siblings.append(range_hash(get, middle, end))
            end = middle
        else:
            # The left half is a complete aligned subtree: one stored node.
            level = k.bit_length() - 1
            siblings.append(get(level, start >> level))
            start = middle
    siblings.reverse()
    return siblings


def consistency_proof(get: NodeGetter, old_size: int, new_size: int) -> list[bytes]:
    """The proof that the tree of ``new_size`` leaves extends the tree of ``old_size``
    (RFC 9162 PROOF); empty when the sizes are equal.

    Why: it lets an auditor holding an old signed root check that a newer one only
    appended, never rewrote. A proof from the empty tree says nothing, so ``old_size``
    0 is refused.
    """
    _check_size("old_size", old_size)
    _check_size("new_size", new_size)
    if old_size == 0:
        raise ValueError("a consistency proof needs an old tree size of at least 1")
    if old_size > new_size:
        raise ValueError(f"old tree size {old_size} is larger than new tree size {new_size}")
    items: list[bytes] = []
    start, end, m = 0, new_size, old_size
    whole = True  # whether [start, end) still starts at the old tree's root
    while True:
        n = end - start
        if m == n:
            if not whole:
                items.append(range_hash(get, start, end))
            break
        k = _split(n)
        if m <= k:
            items.append(range_hash(get, start + k, end))
            end = start + k
        else:
            level = k.bit_length() - 1
            items.append(get(level, start >> level))
            start += k
            m -= k
            whole = False
    items.reverse()
    return items


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size``
    leaves whose root is ``root`` (the RFC 9162 section 2.1.3.2 procedure).

    Why: this is the auditor's side; it trusts nothing but the root, and answers False,
    never raises, for any proof that does not check out, malformed ones included. The
    size only shapes the path, so a caller must get it from the same signed checkpoint
    as the root.
    """
    if not (_is_hash(leaf) and _is_hash(root) and _is_count(index) and _is_count(size)):
        return False
    if index >= size:
        return False
    try:
        items = list(proof)
    except TypeError:
        return False
    if not all(_is_hash(item) for item in items):
        return False
    fn, sn = index, size - 1
    current = leaf
    for item in items:
        if sn == 0:
            return False  # more path than the tree has levels
        if fn % 2 == 1 or fn == sn:
            current = node_hash(item, current)
            # Skip the levels where this node is the last one and has no sibling.
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            current = node_hash(current, item)
        fn >>= 1
        sn >>= 1
    return sn == 0 and current == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether ``proof`` shows the tree of ``new_size`` leaves with root ``new_root``
    extends the tree of ``old_size`` leaves with root ``old_root`` (the RFC 9162 section
    2.1.4.2 procedure).

    Why: the auditor's side of ``consistency_proof``; both roots are rebuilt from the
    one proof, so a log that rewrote its past cannot produce one. Answers False, never
    raises, for anything that does not check out. Equal sizes need an empty proof and
    equal roots; an old size of 0 is refused, as the generator refuses it.
    """
    if not (_is_hash(old_root) and _is_hash(new_root)):
        return False
    if not (_is_count(old_size) and _is_count(new_size)):
        return False
    try:
        items = list(proof)
    except TypeError:
        return False
    if not all(_is_hash(item) for item in items):
        return False
    if old_size == 0 or old_size > new_size:
        return False
    if old_size == new_size:
        return not items and old_root == new_root
    if not items:
        return False
    if old_size & (old_size - 1) == 0:
        # The old tree is a complete subtree of the new one, so the proof omits its
        # root: the verifier already holds it.
        items.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    # Climb past the levels where the old tree's last leaf is a right child: the path
    # starts at the highest complete subtree that ends the old tree.
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    old_hash = new_hash = items[0]
    for item in items[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            old_hash = node_hash(item, old_hash)
            new_hash = node_hash(item, new_hash)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            new_hash = node_hash(new_hash, item)
        fn >>= 1
        sn >>= 1
    return sn == 0 and old_hash == old_root and new_hash == new_root
