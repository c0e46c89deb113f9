"""The stored tree's pure arithmetic against the pure ``merkle`` functions, exhaustively.

For every log of 1..130 leaves: the nodes a leaf completes are exactly the complete perfect
subtrees ending at it, the root and every inclusion and consistency proof computed from the
stored nodes equal ``merkle``'s, and no proof needs a node the tree of that size lacks.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog import merkle as merkle
from agentplane_journal.tlog.tree import (
    MissingNodeError,
    TreeBuilder,
    consistency_ranges,
    frontier,
    inclusion_ranges,
    new_nodes,
    proof_from_nodes,
    range_nodes,
    root_from_nodes,
)

N = 130


def leaves(n: int) -> list[Digest]:
    return [merkle.leaf_hash(Digest.of(i.to_bytes(4, "big"))) for i in range(n)]


def build(n: int) -> dict[tuple[int, int], bytes]:
    builder, stored = TreeBuilder(), {}
    for leaf in leaves(n):
        stored.update(builder.add(bytes(leaf)))
    return stored


def test_a_leaf_completes_exactly_the_perfect_subtrees_ending_at_it() -> None:
    builder, total = TreeBuilder(), 0
    for i, leaf in enumerate(leaves(N)):
        added = [node for node, _ in builder.add(bytes(leaf))]
        ending_here = [
            (level, i >> level)
            for level in range(i.bit_length() + 1)
            if (i + 1) % (1 << level) == 0
        ]
        assert added == ending_here
        total += len(added)
    assert total < 2 * N  # amortised: the leaf and about one node more


def test_stored_nodes_are_exactly_the_complete_subtrees_and_hash_as_merkle_roots() -> None:
    stored, ls = build(N), leaves(N)
    for (level, idx), value in stored.items():
        lo, hi = idx << level, (idx + 1) << level
        assert hi <= N
        assert value == bytes(merkle.root(ls[lo:hi]))
    complete = {(lv, i) for lv in range(8) for i in range(N >> lv)}
    assert set(stored) == complete


@pytest.mark.parametrize("n", range(1, N + 1))
def test_roots_and_every_proof_from_stored_nodes_equal_merkle(n: int) -> None:
    ls, full = leaves(n), build(N)
    # only what a log of n leaves has stored (a later log's nodes must not be needed)
    stored = {(lv, i): h for (lv, i), h in full.items() if (i + 1) << lv <= n}
    assert root_from_nodes(n, stored) == bytes(merkle.root(ls))
    assert len(frontier(n)) == bin(n).count("1")
    for m in range(n):
        assert proof_from_nodes(inclusion_ranges(m, n), stored) == merkle.inclusion_proof(ls, m)
    for m in range(n + 1):
        ranges = consistency_ranges(m, n)
        assert proof_from_nodes(ranges, stored) == merkle.consistency_proof(ls, m)


def test_a_proof_lacking_a_node_names_it() -> None:
    stored = build(8)
    del stored[(1, 2)]
    with pytest.raises(MissingNodeError) as caught:
        proof_from_nodes(inclusion_ranges(7, 8), stored)
    assert caught.value.node == (1, 2) and "leaves 4..5" in str(caught.value)
    with pytest.raises(MissingNodeError):
        new_nodes(3, bytes(32), {})


def test_ranges_that_are_not_rfc_subtrees_are_refused() -> None:
    assert range_nodes(8, 13) == [(2, 2), (0, 12)]
    with pytest.raises(ValueError, match="not a subtree"):
        range_nodes(1, 5)
    with pytest.raises(ValueError, match="empty"):
        range_nodes(3, 3)
    with pytest.raises(IndexError):
        inclusion_ranges(5, 5)
    with pytest.raises(ValueError):
        consistency_ranges(6, 5)
