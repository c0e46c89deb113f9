"""The stored Merkle tree's arithmetic: which nodes a leaf completes, which a proof needs.

Pure, like :mod:`agentplane_journal.tlog.merkle`, whose answers these must equal exactly; the SQL
that stores and fetches the nodes is :mod:`agentplane_journal.journal.log`'s.

A *node* ``(level, index)`` is the root of the perfect subtree over leaves
``[index * 2**level, (index + 1) * 2**level)``: level 0 is the leaf hashes themselves. Only
complete subtrees are ever stored, and once complete a subtree never changes, so the nodes
stored for a log of ``n`` leaves are exactly those with ``(index + 1) * 2**level <= n``
(Go's sumdb calls these "stored hashes"). Leaf ``i`` completes the nodes on its way up while
it is a right child: one node per leaf on average beyond the leaf itself, at most log2 n.

Every subtree the RFC 6962 tree is built from, ``D[lo:hi]``, starts at a multiple of the
largest power of two not above its size, so its root is a right fold of at most log2 n
stored nodes: its perfect pieces from the largest down (:func:`range_nodes`). The tree of
``n`` leaves is the pieces of ``n``'s binary expansion (:func:`frontier`), which are also
the left siblings a new leaf ``n`` pairs with on its way up.

Proofs are computed from a mapping of stored nodes to their hashes; a node missing from it
is :class:`MissingNodeError` (the store fetches every node a proof can need in one
statement, so a missing one means the stored tree is damaged).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.merkle import raw_node, split_point

__all__ = [
    "MAX_LEVEL",
    "MissingNodeError",
    "Node",
    "TreeBuilder",
    "consistency_ranges",
    "frontier",
    "inclusion_ranges",
    "new_nodes",
    "proof_from_nodes",
    "range_nodes",
    "root_from_nodes",
    "root_with",
    "sibling_nodes",
]

MAX_LEVEL = 62
"""The highest level a stored node can have: a log of 2**63 leaves would not fit a BIGINT
position anyway."""

Node = tuple[int, int]
"""``(level, index)``: the perfect subtree over leaves ``[index << level, (index+1) << level)``."""


class MissingNodeError(LookupError):
    """A proof or root needs a stored node that is not there (a damaged stored tree)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        level, index = node
        first = index << level
        super().__init__(
            f"the stored tree lacks node (level {level}, index {index}), which covers leaves "
            f"{first}..{first + (1 << level) - 1}"
        )


def frontier(size: int) -> list[Node]:
    """The perfect subtrees the tree of ``size`` leaves is made of, largest (leftmost) first."""
    return range_nodes(0, size)


def range_nodes(lo: int, hi: int) -> list[Node]:
    """The stored nodes whose right fold is the root of the RFC subtree ``D[lo:hi]``."""
    if not 0 <= lo < hi:
        raise ValueError(f"leaf range {lo}..{hi} is empty or negative")
    out: list[Node] = []
    at = lo
    while at < hi:
        level = (hi - at).bit_length() - 1
        if at & ((1 << level) - 1):
            raise ValueError(f"leaf range {lo}..{hi} is not a subtree of an RFC 6962 tree")
        out.append((level, at >> level))
        at += 1 << level
    return out


def _fold(nodes: list[Node], hashes: Mapping[Node, bytes]) -> bytes:
    try:
        acc = hashes[nodes[-1]]
        for node in reversed(nodes[:-1]):
            acc = raw_node(hashes[node], acc)
    except KeyError as missing:
        raise MissingNodeError(missing.args[0]) from None
    return acc


def root_from_nodes(size: int, hashes: Mapping[Node, bytes]) -> bytes:
    """The root of the tree of ``size`` (> 0) leaves from its :func:`frontier` nodes."""
    return _fold(frontier(size), hashes)


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """RFC 6962 PATH(index, D[0:size]) as the leaf ranges whose roots it lists, leaf upwards."""
    if not 0 <= index < size:
        raise IndexError(f"leaf index {index} is outside a tree of {size} leaves")
    out: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = split_point(hi - lo)
        if index < lo + k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo += k
    out.reverse()
    return out


def consistency_ranges(old_size: int, size: int) -> list[tuple[int, int]]:
    """RFC 6962 PROOF(old_size, D[0:size]) as leaf ranges, in the proof's order."""
    if not 0 <= old_size <= size:
        raise ValueError(f"old_size {old_size} is not within 0..{size}")
    if old_size in (0, size):
        return []
    out: list[tuple[int, int]] = []
    m, lo, hi, complete = old_size, 0, size, True
    while True:
        if m == hi - lo:
            if not complete:
                out.append((lo, hi))
            break
        k = split_point(hi - lo)
        if m <= k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            m -= k
            lo += k
            complete = False
    out.reverse()
    return out


def proof_from_nodes(ranges: list[tuple[int, int]], hashes: Mapping[Node, bytes]) -> list[Digest]:
    """The proof whose entries are the roots of ``ranges``, from stored node hashes."""
    return [Digest._trusted(_fold(range_nodes(lo, hi), hashes)) for lo, hi in ranges]


def new_nodes(position: int, leaf: bytes, hashes: Mapping[Node, bytes]) -> list[tuple[Node, bytes]]:
    """The nodes leaf ``position`` (hash ``leaf``) completes, itself first, bottom-up.

    ``hashes`` must hold the :func:`frontier` of ``position`` (the log before the leaf): a
    right child pairs with its left sibling, which is one of those.
    """
    out = [((0, position), leaf)]
    acc, level, index = leaf, 0, position
    while index & 1:
        left = (level, index - 1)
        if left not in hashes:
            raise MissingNodeError(left)
        acc = raw_node(hashes[left], acc)
        level, index = level + 1, index >> 1
        out.append(((level, index), acc))
    return out


class TreeBuilder:
    """Builds the stored nodes of a log leaf by leaf, keeping only its frontier in memory.

    For adopting existing logs and for bulk loads: ``add(leaf)`` returns the nodes to store
    for the next position, exactly what a seal stores for it.
    """

    def __init__(self, size: int = 0, frontier_hashes: Mapping[Node, bytes] | None = None) -> None:
        self.size = size
        self._frontier: dict[Node, bytes] = dict(frontier_hashes or {})
        missing = [n for n in frontier(size) if n not in self._frontier] if size else []
        if missing:
            raise MissingNodeError(missing[0])

    def add(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        nodes = new_nodes(self.size, leaf, self._frontier)
        self.size += 1
        # The new frontier: the node just completed (the smallest piece of the new size)
        # replaces the pieces it absorbed; the larger pieces stay.
        self._frontier = {n: self._frontier[n] for n in frontier(self.size)[:-1]}
        self._frontier[nodes[-1][0]] = nodes[-1][1]
        return nodes

    def root(self) -> bytes | None:
        return root_from_nodes(self.size, self._frontier) if self.size else None

    def frontier_hashes(self) -> Iterator[tuple[Node, bytes]]:
        yield from self._frontier.items()


def sibling_nodes(size: int, level: int, lo: int, hi: int) -> list[Node]:
    """The stored nodes that, with the nodes ``(level, lo..hi-1)``, make the root of the
    tree of ``size`` leaves: at most ~2 log2 n, the proof of that range.

    How a tile is checked against a verified root (``serve``): hash the tile's nodes up
    with these and compare. ``hi << level`` must not exceed ``size``.
    """
    if not 0 <= lo < hi or hi << level > size:
        raise ValueError(f"nodes ({level}, {lo}..{hi - 1}) are not within {size} leaves")
    first, end = lo << level, hi << level
    out: list[Node] = []
    todo = list(reversed(frontier(size)))
    while todo:
        lev, idx = node = todo.pop()
        if (idx + 1) << lev <= first or idx << lev >= end:
            out.append(node)
        elif lev > level:
            todo += [(lev - 1, 2 * idx + 1), (lev - 1, 2 * idx)]
    return out


def root_with(
    size: int, level: int, lo: int, given: list[bytes], hashes: Mapping[Node, bytes]
) -> bytes:
    """The root of the tree of ``size`` leaves from the nodes ``(level, lo + i) = given[i]``
    and the stored :func:`sibling_nodes` around them in ``hashes``; every node above the
    given ones is computed, never read."""
    known = {(level, lo + i): h for i, h in enumerate(given)}
    first, end = lo << level, (lo + len(given)) << level

    def node_hash(node: Node) -> bytes:
        lev, idx = node
        if (idx + 1) << lev <= first or idx << lev >= end:
            if node not in hashes:
                raise MissingNodeError(node)
            return hashes[node]
        if lev == level:
            return known[node]
        return raw_node(node_hash((lev - 1, 2 * idx)), node_hash((lev - 1, 2 * idx + 1)))

    pieces = [node_hash(n) for n in frontier(size)]
    acc = pieces[-1]
    for piece in reversed(pieces[:-1]):
        acc = raw_node(piece, acc)
    return acc
