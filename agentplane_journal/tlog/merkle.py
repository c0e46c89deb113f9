"""The per-tenant Merkle log of sealed runs, exactly as RFC 6962 / RFC 9162 define it.

A checkpoint (size, root) commits to every sealed run's final chain head in seal order.
Inclusion proofs show one run is in it; consistency proofs show a later log extends an
earlier one, so history cannot be rewritten once someone has kept a checkpoint. Because
this is the RFC's tree, any transparency-log tool can check our proofs — which is also
why the empty root is ``SHA-256("")`` (agentplane 0.4.0's 32 zero bytes was a bug its
later releases fixed).

Every function here takes *leaf hashes* (``leaf_hash(chain_head)``), not raw values.
The tree is built bottom-up: pairing neighbours level by level and carrying an odd last
node up unchanged gives exactly the RFC's "split at the largest power of two below n"
tree, in O(n) hashes with no recursion — logs reach 100k leaves.

Verifiers follow RFC 9162 §2.1.3.2 and §2.1.4.2, take the tree sizes explicitly, and
answer ``False`` (never raise) on any malformed input, since their input is untrusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from agentplane_journal.core.ids import Digest

__all__ = [
    "EMPTY_ROOT",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = Digest.of(b"")
"""Root of the empty log: ``SHA-256("")`` per RFC 6962 §2.1."""

_sha256 = hashlib.sha256


def leaf_hash(value: Digest) -> Digest:
    """``SHA-256(0x00 || value)``: the 0x00 prefix keeps a leaf from posing as a node."""
    if not isinstance(value, Digest):
        raise TypeError(f"leaf_hash takes a Digest, not {type(value).__name__}")
    return Digest._trusted(raw_leaf(bytes(value)))


def raw_leaf(value: bytes) -> bytes:
    """:func:`leaf_hash` over raw bytes (the stored tree and its audit): the one definition
    of a leaf, so the log and every check of it hash a sealed head the same way."""
    return _sha256(b"\x00" + value).digest()


def node_hash(left: Digest, right: Digest) -> Digest:
    """``SHA-256(0x01 || left || right)``."""
    if not (isinstance(left, Digest) and isinstance(right, Digest)):
        raise TypeError("node_hash takes two Digests")
    return Digest._trusted(_sha256(b"\x01" + bytes(left) + bytes(right)).digest())


def raw_node(left: bytes, right: bytes) -> bytes:
    """:func:`node_hash` over raw bytes (the inner loops of proofs and the stored tree)."""
    return _sha256(b"\x01" + left + right).digest()


def _raw(leaves: Sequence[Digest]) -> list[bytes]:
    out = []
    for leaf in leaves:
        if not isinstance(leaf, Digest):
            raise TypeError(f"Merkle leaves are Digest leaf hashes, not {type(leaf).__name__}")
        out.append(bytes(leaf))
    return out


def _next_level(level: list[bytes]) -> list[bytes]:
    up = [raw_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    if len(level) % 2:
        up.append(level[-1])
    return up


def _root_of(level: list[bytes]) -> bytes:
    """Root of a non-empty list of raw leaf hashes."""
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def root(leaves: Sequence[Digest]) -> Digest:
    """The tree head over ``leaves`` (leaf hashes); ``EMPTY_ROOT`` for none."""
    level = _raw(leaves)
    if not level:
        return EMPTY_ROOT
    return Digest._trusted(_root_of(level))


def inclusion_proof(leaves: Sequence[Digest], index: int) -> list[Digest]:
    """RFC 6962 PATH: sibling subtree roots from the leaf upwards."""
    n = len(leaves)
    _check_int(index, "index")
    if not 0 <= index < n:
        raise IndexError(f"leaf index {index} is outside a tree of {n} leaves")
    level = _raw(leaves)
    proof: list[Digest] = []
    while len(level) > 1:
        sibling = index ^ 1
        # A last node without a right neighbour is carried up unchanged: no proof entry.
        if sibling < len(level):
            proof.append(Digest._trusted(level[sibling]))
        level = _next_level(level)
        index >>= 1
    return proof


def consistency_proof(leaves: Sequence[Digest], old_size: int) -> list[Digest]:
    """RFC 6962 PROOF(m, D[n]): shows the first ``old_size`` leaves are a prefix.

    Empty for ``old_size`` 0 (everything extends the empty log) and for ``old_size == n``.
    """
    n = len(leaves)
    _check_int(old_size, "old_size")
    if old_size < 0:
        raise ValueError(f"old_size {old_size} is negative")
    if old_size > n:
        raise ValueError(
            f"old_size {old_size} is larger than the log ({n} leaves); "
            "a log cannot be consistent with a longer one"
        )
    if old_size in (0, n):
        return []
    raw = _raw(leaves)
    proof: list[bytes] = []
    _subproof(old_size, raw, 0, n, True, proof)
    return [Digest._trusted(p) for p in proof]


def _subproof(
    m: int, raw: list[bytes], lo: int, hi: int, complete: bool, proof: list[bytes]
) -> None:
    # RFC 6962 §2.1.2 SUBPROOF(m, D[lo:hi], b). Recursion depth is log2(n); every subtree
    # root computed is over a disjoint range, so the total work is O(n).
    n = hi - lo
    if m == n:
        if not complete:
            proof.append(_root_of(raw[lo:hi]))
        return
    k = split_point(n)
    if m <= k:
        _subproof(m, raw, lo, lo + k, complete, proof)
        proof.append(_root_of(raw[lo + k : hi]))
    else:
        _subproof(m - k, raw, lo + k, hi, False, proof)
        proof.append(_root_of(raw[lo : lo + k]))


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _raw_proof(proof: Sequence[Digest]) -> list[bytes] | None:
    try:
        items = list(proof)
    except TypeError:
        return None
    if not all(isinstance(p, Digest) for p in items):
        return None
    return [bytes(p) for p in items]


def verify_inclusion(
    leaf: Digest, index: int, size: int, proof: Sequence[Digest], root: Digest
) -> bool:
    """RFC 9162 §2.1.3.2: does ``proof`` put ``leaf`` at ``index`` in the tree ``root``?"""
    if not (isinstance(leaf, Digest) and isinstance(root, Digest)):
        return False
    if not (_is_size(index) and _is_size(size)) or index >= size:
        return False
    path = _raw_proof(proof)
    if path is None:
        return False
    fn, sn = index, size - 1
    r = bytes(leaf)
    for p in path:
        if sn == 0:
            return False  # proof longer than the path
        if fn & 1 or fn == sn:
            r = raw_node(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = raw_node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == bytes(root)


def verify_consistency(
    old_size: int,
    old_root: Digest,
    new_size: int,
    new_root: Digest,
    proof: Sequence[Digest],
) -> bool:
    """RFC 9162 §2.1.4.2: is the tree (``old_size``, ``old_root``) a prefix of the new one?"""
    if not (isinstance(old_root, Digest) and isinstance(new_root, Digest)):
        return False
    if not (_is_size(old_size) and _is_size(new_size)) or old_size > new_size:
        return False
    path = _raw_proof(proof)
    if path is None:
        return False
    if old_size == 0:
        # Every log extends the empty one, but only if the claimed old root really is the
        # empty root (agentplane 0.4.0 ignored it; later releases and the RFC do not).
        return not path and old_root == EMPTY_ROOT
    if old_size == new_size:
        return not path and old_root == new_root
    if not path:
        return False
    if old_size & (old_size - 1) == 0:
        # The old tree is a complete left subtree; the RFC proof omits its root.
        path.insert(0, bytes(old_root))
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = raw_node(c, fr)
            sr = raw_node(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = raw_node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == bytes(old_root) and sr == bytes(new_root)
