"""The Merkle tree: RFC 6962 known answers, a reference built straight from the recursive
definitions, tampered proofs, and the O(log^2 n) bound on store reads."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncebox.engine.merkle import (
    EMPTY_ROOT,
    NodeGetter,
    completed_nodes,
    consistency_proof,
    entry_leaf_data,
    inclusion_proof,
    leaf_hash,
    node_hash,
    range_hash,
    root_of,
    tree_root,
    verify_consistency,
    verify_inclusion,
)

# --- the RFC 6962 test tree -----------------------------------------------------------

RFC_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
RFC_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
RFC_PATH_5_OF_8 = [
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
]
RFC_PROOF_3_TO_8 = [
    "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
]


# --- a reference written from the recursive definitions, over plain lists -------------


def split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node_hash(ref_mth(leaves[:k]), ref_mth(leaves[k:]))


def ref_path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = split(n)
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_mth(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: Sequence[bytes], whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [ref_mth(leaves)]
    k = split(n)
    if m <= k:
        return [*ref_subproof(m, leaves[:k], whole), ref_mth(leaves[k:])]
    return [*ref_subproof(m - k, leaves[k:], False), ref_mth(leaves[:k])]


def path_shape(m: int, n: int) -> list[bool]:
    """For each path element, leaf side up: whether the sibling is on the left."""
    if n == 1:
        return []
    k = split(n)
    if m < k:
        return [*path_shape(m, k), False]
    return [*path_shape(m - k, n - k), True]


# --- a node store built the way the log builds it ----------------------------------------


def build_store(leaves: Sequence[bytes]) -> dict[tuple[int, int], bytes]:
    store: dict[tuple[int, int], bytes] = {}
    for index, leaf in enumerate(leaves):
        for level, i, value in completed_nodes(index, leaf, lambda lv, ix: store[(lv, ix)]):
            assert (level, i) not in store, "a node is written once"
            store[(level, i)] = value
    return store


def getter_for(store: dict[tuple[int, int], bytes], size: int) -> NodeGetter:
    """A getter that refuses any node not complete within the first ``size`` leaves: a
    proof about an older tree must not lean on anything appended later."""

    def get(level: int, index: int) -> bytes:
        assert (index + 1) << level <= size, f"node ({level}, {index}) is not in size {size}"
        return store[(level, index)]

    return get


def leaves_of(count: int, salt: str = "") -> list[bytes]:
    return [leaf_hash(f"{salt}leaf {i}".encode()) for i in range(count)]


RFC_HASHES = [leaf_hash(d) for d in RFC_LEAVES]
RFC_STORE = build_store(RFC_HASHES)
BIG = 300
BIG_LEAVES = leaves_of(BIG)
BIG_STORE = build_store(BIG_LEAVES)
RNG_SEED = 6962


def flip(value: bytes, at: int = 0) -> bytes:
    return value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]


# --- known answers --------------------------------------------------------------------


def test_empty_root() -> None:
    expected = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert EMPTY_ROOT.hex() == expected
    assert root_of([]).hex() == expected
    assert tree_root(lambda level, index: pytest.fail("no node to read"), 0) == EMPTY_ROOT


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    a, b = b"\xaa" * 32, b"\xbb" * 32
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert node_hash(a, b) != node_hash(b, a)
    assert leaf_hash(a + b) != node_hash(a, b)


def test_entry_leaf_data() -> None:
    data = entry_leaf_data(7, "accept", '{"witness":"ab"}', "ff" * 32)
    assert data == ('7|accept|{"witness":"ab"}|' + "ff" * 32).encode()
    assert entry_leaf_data(1, "é", "", "x") == "1|é||x".encode()


@pytest.mark.parametrize("size", range(1, 9))
def test_rfc6962_roots(size: int) -> None:
    expected = RFC_ROOTS[size - 1]
    assert root_of(RFC_HASHES[:size]).hex() == expected
    assert ref_mth(RFC_HASHES[:size]).hex() == expected
    assert tree_root(getter_for(RFC_STORE, size), size).hex() == expected


def test_rfc6962_inclusion_proof() -> None:
    path = inclusion_proof(getter_for(RFC_STORE, 8), 5, 8)
    assert [p.hex() for p in path] == RFC_PATH_5_OF_8
    root = bytes.fromhex(RFC_ROOTS[7])
    assert verify_inclusion(RFC_HASHES[5], 5, 8, path, root)


def test_rfc6962_consistency_proof() -> None:
    proof = consistency_proof(getter_for(RFC_STORE, 8), 3, 8)
    assert [p.hex() for p in proof] == RFC_PROOF_3_TO_8
    old, new = bytes.fromhex(RFC_ROOTS[2]), bytes.fromhex(RFC_ROOTS[7])
    assert verify_consistency(3, 8, old, new, proof)


def test_rfc_tree_all_proofs() -> None:
    for n in range(1, 9):
        root = bytes.fromhex(RFC_ROOTS[n - 1])
        for i in range(n):
            path = inclusion_proof(getter_for(RFC_STORE, n), i, n)
            assert path == ref_path(i, RFC_HASHES[:n])
            assert verify_inclusion(RFC_HASHES[i], i, n, path, root)
        for m in range(1, n + 1):
            proof = consistency_proof(getter_for(RFC_STORE, n), m, n)
            assert proof == ref_subproof(m, RFC_HASHES[:n], True)
            old = bytes.fromhex(RFC_ROOTS[m - 1])
            assert verify_consistency(m, n, old, root, proof)


# --- the node store -------------------------------------------------------------------


def test_store_holds_exactly_the_complete_aligned_subtrees() -> None:
    for n in (1, 2, 3, 7, 8, 13, 64, 100):
        store = build_store(BIG_LEAVES[:n])
        expected = {(lv, i) for lv in range(8) for i in range(n) if (i + 1) << lv <= n}
        assert set(store) == expected
        for (lv, i), value in store.items():
            assert value == ref_mth(BIG_LEAVES[i << lv : (i + 1) << lv])


def test_completed_nodes_reads_only_left_siblings() -> None:
    reads: list[tuple[int, int]] = []

    def get(level: int, index: int) -> bytes:
        reads.append((level, index))
        return BIG_STORE[(level, index)]

    # Leaf 7 closes the subtrees of 2, 4 and 8 leaves ending at it.
    nodes = completed_nodes(7, BIG_LEAVES[7], get)
    assert [(lv, i) for lv, i, _ in nodes] == [(0, 7), (1, 3), (2, 1), (3, 0)]
    assert reads == [(0, 6), (1, 2), (2, 0)]
    assert [h for _, _, h in nodes] == [BIG_STORE[(lv, i)] for lv, i, _ in nodes]
    reads.clear()
    assert completed_nodes(8, BIG_LEAVES[8], get) == [(0, 8, BIG_LEAVES[8])]
    assert reads == []


def test_range_hash_matches_reference() -> None:
    for start, end in [(0, 0), (0, 1), (0, 300), (256, 300), (128, 200), (64, 128), (5, 6)]:
        got = range_hash(getter_for(BIG_STORE, BIG), start, end)
        assert got == ref_mth(BIG_LEAVES[start:end])


@pytest.mark.parametrize(("start", "end"), [(1, 3), (3, 7), (64, 200), (2, 6)])
def test_range_hash_refuses_unaligned_ranges(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="aligned"):
        range_hash(getter_for(BIG_STORE, BIG), start, end)


def test_generators_refuse_bad_arguments() -> None:
    get = getter_for(BIG_STORE, BIG)
    bad: list[Callable[[], object]] = [
        lambda: range_hash(get, 5, 4),
        lambda: range_hash(get, -1, 4),
        lambda: tree_root(get, -1),
        lambda: completed_nodes(-1, BIG_LEAVES[0], get),
        lambda: inclusion_proof(get, 10, 10),
        lambda: inclusion_proof(get, 0, 0),
        lambda: inclusion_proof(get, -1, 10),
        lambda: inclusion_proof(get, 0, -1),
        lambda: consistency_proof(get, 0, 10),
        lambda: consistency_proof(get, 11, 10),
        lambda: consistency_proof(get, -1, 10),
        lambda: consistency_proof(get, 1, -1),
    ]
    for call in bad:
        with pytest.raises(ValueError):
            call()


# --- random sizes against the reference ------------------------------------------------


def test_tree_root_equals_reference_for_every_size() -> None:
    for n in range(BIG + 1):
        expected = ref_mth(BIG_LEAVES[:n])
        assert root_of(BIG_LEAVES[:n]) == expected
        assert tree_root(getter_for(BIG_STORE, n), n) == expected


def test_inclusion_proofs_verify() -> None:
    rng = random.Random(RNG_SEED)
    sizes = [*range(1, 65), *rng.sample(range(65, BIG + 1), 40), BIG]
    for n in sizes:
        root = tree_root(getter_for(BIG_STORE, n), n)
        indexes = range(n) if n <= 64 else sorted([*rng.sample(range(n), 16), 0, n - 1])
        for i in indexes:
            path = inclusion_proof(getter_for(BIG_STORE, n), i, n)
            assert path == ref_path(i, BIG_LEAVES[:n])
            assert len(path) <= (n - 1).bit_length()
            assert verify_inclusion(BIG_LEAVES[i], i, n, path, root)


def test_consistency_proofs_verify() -> None:
    rng = random.Random(RNG_SEED)
    pairs = [(m, n) for n in range(1, 49) for m in range(1, n + 1)]
    for _ in range(200):
        low, high = sorted(rng.sample(range(1, BIG + 1), 2))
        pairs.append((low, high))
    pairs += [(1, BIG), (BIG, BIG), (256, BIG), (255, 256), (257, BIG)]
    for m, n in pairs:
        proof = consistency_proof(getter_for(BIG_STORE, n), m, n)
        assert proof == ref_subproof(m, BIG_LEAVES[:n], True)
        old = ref_mth(BIG_LEAVES[:m])
        new = ref_mth(BIG_LEAVES[:n])
        assert verify_consistency(m, n, old, new, proof), (m, n)
        if m == n:
            assert proof == []


# --- tampering --------------------------------------------------------------------------


def inclusion_cases() -> list[tuple[int, int]]:
    rng = random.Random(RNG_SEED + 1)
    cases = [(i, n) for n in (1, 2, 3, 5, 8, 13) for i in range(n)]
    for _ in range(60):
        n = rng.randrange(1, BIG + 1)
        cases.append((rng.randrange(n), n))
    return cases


@pytest.mark.parametrize(("i", "n"), inclusion_cases())
def test_tampered_inclusion_proofs_fail(i: int, n: int) -> None:
    leaf = BIG_LEAVES[i]
    path = inclusion_proof(getter_for(BIG_STORE, n), i, n)
    root = tree_root(getter_for(BIG_STORE, n), n)
    assert verify_inclusion(leaf, i, n, path, root)
    for k in range(len(path)):
        for at in (0, 31):
            changed = [*path[:k], flip(path[k], at), *path[k + 1 :]]
            assert not verify_inclusion(leaf, i, n, changed, root)
        assert not verify_inclusion(leaf, i, n, path[:k] + path[k + 1 :], root)
        assert not verify_inclusion(leaf, i, n, [*path[:k], root, *path[k:]], root)
    assert not verify_inclusion(leaf, i, n, [*path, path[-1] if path else leaf], root)
    assert not verify_inclusion(leaf, i, n, [leaf, *path], root)
    assert not verify_inclusion(flip(leaf), i, n, path, root)
    assert not verify_inclusion(leaf, i, n, path, flip(root, 17))
    if n < BIG:
        other_root = tree_root(getter_for(BIG_STORE, n + 1), n + 1)
        assert not verify_inclusion(leaf, i, n, path, other_root)
    for j in {0, i - 1, i + 1, n - 1, n, n + 5} - {i}:
        if j >= 0:
            assert not verify_inclusion(leaf, j, n, path, root), j
    # A wrong size is caught only where it changes the path's shape: the verifier takes
    # the size on trust, which is why a checkpoint signs size and root together.
    for m in {1, i + 1, n - 1, n + 1, 2 * n, BIG} - {n}:
        if m > i:
            expected = path_shape(i, m) == path_shape(i, n)
            assert verify_inclusion(leaf, i, m, path, root) is expected, m
    assert not verify_inclusion(leaf, i, i, path, root)


def test_malformed_inclusion_inputs_are_false_not_errors() -> None:
    path = inclusion_proof(getter_for(BIG_STORE, 10), 3, 10)
    root = tree_root(getter_for(BIG_STORE, 10), 10)
    leaf = BIG_LEAVES[3]
    assert verify_inclusion(leaf, 3, 10, path, root)
    odd: list[tuple[object, object, object, object, object]] = [
        (leaf, 3, 10, [*path[:-1], path[-1][:31]], root),
        (leaf, 3, 10, [*path[:-1], path[-1] + b"\x00"], root),
        (leaf, 3, 10, [*path[:-1], path[-1].hex()], root),
        (leaf, 3, 10, [*path[:-1], None], root),
        (leaf, 3, 10, None, root),
        (leaf, 3, 10, 5, root),
        (leaf, 3, 10, path, root.hex()),
        (leaf, 3, 10, path, root[:16]),
        (leaf[:31], 3, 10, path, root),
        (leaf, -1, 10, path, root),
        (leaf, 3, -10, path, root),
        (leaf, 3.0, 10, path, root),
        (leaf, 3, "10", path, root),
        (leaf, True, 10, path, root),
        (leaf, 3, 10, [], root),
    ]
    for args in odd:
        assert verify_inclusion(*args) is False  # type: ignore[arg-type]


def consistency_cases() -> list[tuple[int, int]]:
    rng = random.Random(RNG_SEED + 2)
    cases = [(1, 2), (1, 8), (2, 8), (3, 8), (4, 8), (5, 8), (7, 8), (3, 5), (6, 7)]
    for _ in range(60):
        m, n = sorted(rng.sample(range(1, BIG + 1), 2))
        cases.append((m, n))
    return cases


@pytest.mark.parametrize(("m", "n"), consistency_cases())
def test_tampered_consistency_proofs_fail(m: int, n: int) -> None:
    proof = consistency_proof(getter_for(BIG_STORE, n), m, n)
    old = ref_mth(BIG_LEAVES[:m])
    new = ref_mth(BIG_LEAVES[:n])
    assert verify_consistency(m, n, old, new, proof)
    for k in range(len(proof)):
        for at in (0, 31):
            changed = [*proof[:k], flip(proof[k], at), *proof[k + 1 :]]
            assert not verify_consistency(m, n, old, new, changed)
        assert not verify_consistency(m, n, old, new, proof[:k] + proof[k + 1 :])
        assert not verify_consistency(m, n, old, new, [*proof[:k], old, *proof[k:]])
    assert not verify_consistency(m, n, old, new, [*proof, proof[-1]])
    assert not verify_consistency(m, n, old, new, [old, *proof])
    assert not verify_consistency(m, n, old, new, [])
    assert not verify_consistency(m, n, flip(old), new, proof)
    assert not verify_consistency(m, n, old, flip(new, 9), proof)
    assert not verify_consistency(m, n, new, old, proof)
    assert not verify_consistency(n, m, new, old, proof)
    # A forked log: the same sizes, one early entry different.
    forked = [*BIG_LEAVES[:n]]
    forked[m - 1] = leaf_hash(b"rewritten")
    assert not verify_consistency(m, n, old, ref_mth(forked), proof)
    # Rewriting inside the old tree of a power-of-two size leaves the proof (which then
    # holds only hashes from after it) valid for the rewritten pair of roots; otherwise
    # the proof carries the old tree's last subtree and catches the rewrite.
    power_of_two = m & (m - 1) == 0
    assert verify_consistency(m, n, ref_mth(forked[:m]), ref_mth(forked), proof) is power_of_two
    # Wrong sizes with the right roots: caught whenever the proof for those sizes would
    # have another length (the shape check), and never by accident through a crash.
    for m2, n2 in {(m - 1, n), (m + 1, n), (m, n - 1), (m, n + 1), (m + 1, n + 1)}:
        if 0 < m2 < n2 <= BIG and (m2, n2) != (m, n):
            expected_len = len(ref_subproof(m2, BIG_LEAVES[:n2], True))
            if expected_len != len(proof):
                assert not verify_consistency(m2, n2, old, new, proof), (m2, n2)


def test_consistency_edge_cases() -> None:
    root5 = ref_mth(BIG_LEAVES[:5])
    root6 = ref_mth(BIG_LEAVES[:6])
    assert verify_consistency(5, 5, root5, root5, [])
    assert not verify_consistency(5, 5, root5, root6, [])
    assert not verify_consistency(5, 5, root5, root5, [root5])
    # From the empty tree: the generator refuses it, so the verifier does too.
    assert not verify_consistency(0, 5, EMPTY_ROOT, root5, [])
    assert not verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    proof = consistency_proof(getter_for(BIG_STORE, 6), 5, 6)
    odd: list[tuple[object, object, object, object, object]] = [
        (5, 6, root5, root6, [*proof[:-1], proof[-1][:5]]),
        (5, 6, root5, root6, [*proof[:-1], "00" * 32]),
        (5, 6, root5, root6, None),
        (5, 6, root5, root6, 7),
        (5, 6, root5.hex(), root6, proof),
        (5, 6, root5, root6[:31], proof),
        (-5, 6, root5, root6, proof),
        (5, -6, root5, root6, proof),
        (5.0, 6, root5, root6, proof),
        (5, True, root5, root6, proof),
        (6, 5, root6, root5, proof),
    ]
    for args in odd:
        assert verify_consistency(*args) is False  # type: ignore[arg-type]


# --- cost: O(log^2 n) store reads at a million leaves -----------------------------------

MILLION = 1_000_003


@pytest.fixture(scope="module")
def million_levels() -> list[list[bytes]]:
    """Every complete aligned subtree of a tree of ~1M leaves, level by level. The leaf
    hashes are arbitrary distinct 32-byte values (the tree never looks inside them);
    every node above is a real node hash."""
    levels = [[i.to_bytes(32, "big") for i in range(MILLION)]]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(list(map(node_hash, below[0:-1:2], below[1::2])))
    return levels


class CountingGetter:
    def __init__(self, levels: list[list[bytes]], size: int) -> None:
        self.levels = levels
        self.size = size
        self.calls = 0

    def __call__(self, level: int, index: int) -> bytes:
        assert (index + 1) << level <= self.size
        self.calls += 1
        return self.levels[level][index]


def test_a_million_leaves_costs_log_squared_reads(million_levels: list[list[bytes]]) -> None:
    n = MILLION
    bits = n.bit_length()  # 20
    get = CountingGetter(million_levels, n)
    root = tree_root(get, n)
    assert get.calls <= bits
    rng = random.Random(RNG_SEED + 3)
    for i in [0, 1, 2**19 - 1, 2**19, n // 2, n - 2, n - 1, *rng.sample(range(n), 8)]:
        get.calls = 0
        path = inclusion_proof(get, i, n)
        assert get.calls <= bits * bits < 2_000, (i, get.calls)
        assert verify_inclusion(million_levels[0][i], i, n, path, root)
        assert not verify_inclusion(million_levels[0][i], i ^ 1, n, path, root)
    for m in [1, 3, 2**19, 2**19 + 1, n // 2, n - 1, n, *rng.sample(range(1, n), 8)]:
        get.calls = 0
        proof = consistency_proof(get, m, n)
        assert get.calls <= bits * bits, (m, get.calls)
        old_get = CountingGetter(million_levels, m)
        assert verify_consistency(m, n, tree_root(old_get, m), root, proof)
    get.calls = 0
    nodes = completed_nodes(2**19 - 1, million_levels[0][2**19 - 1], get)
    assert len(nodes) == 20 and get.calls == 19
    assert nodes[-1] == (19, 0, million_levels[19][0])


# --- properties over tree sizes (derandomized, as the whole suite) -----------------------


@given(st.integers(1, BIG), st.data())
def test_an_inclusion_proof_holds_only_for_its_own_leaf_and_position(
    n: int, data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, n - 1))
    j = data.draw(st.integers(0, BIG))
    path = inclusion_proof(getter_for(BIG_STORE, n), i, n)
    root = ref_mth(BIG_LEAVES[:n])
    assert verify_inclusion(BIG_LEAVES[i], i, n, path, root)
    if j != i:  # another position of the same signed size, or past its end
        assert not verify_inclusion(BIG_LEAVES[i], j, n, path, root)
    if j % n != i:  # another entry's leaf in this one's place
        assert not verify_inclusion(BIG_LEAVES[j % n], i, n, path, root)
    other = leaves_of(n, salt="other ")  # a tree that is not this one
    assert not verify_inclusion(BIG_LEAVES[i], i, n, path, ref_mth(other))


@given(st.integers(1, BIG), st.data())
def test_a_consistency_proof_holds_only_between_prefixes_of_its_sizes(
    n: int, data: st.DataObject
) -> None:
    m = data.draw(st.integers(1, n))
    m2 = data.draw(st.integers(1, n))
    proof = consistency_proof(getter_for(BIG_STORE, n), m, n)
    new = ref_mth(BIG_LEAVES[:n])
    assert verify_consistency(m, n, ref_mth(BIG_LEAVES[:m]), new, proof)
    if m2 != m:  # another old size, with that size's true root
        assert not verify_consistency(m2, n, ref_mth(BIG_LEAVES[:m2]), new, proof)
    # An old tree that is no prefix of the new one (its last leaf differs).
    forked = [*BIG_LEAVES[: m - 1], leaf_hash(b"not this log")]
    assert not verify_consistency(m, n, ref_mth(forked), new, proof)
    # The same proof for the tree one entry longer (size + 1), with its true root.
    if n < BIG:
        longer = ref_mth(BIG_LEAVES[: n + 1])
        assert not verify_consistency(m, n + 1, ref_mth(BIG_LEAVES[:m]), longer, proof)
