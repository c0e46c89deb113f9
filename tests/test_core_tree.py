"""The stored tree's arithmetic, small and fast: each rule held by a test that fails without it
(tlog/tree.py; tests/test_tree.py checks every log up to 130 leaves against merkle).

Written against the mutants that survived (tools/mutation.py tree); kept to logs of at most
33 leaves so that every mutant runs in well under a second.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog import merkle
from agentplane_journal.tlog.tree import (
    MissingNodeError,
    Node,
    TreeBuilder,
    consistency_ranges,
    frontier,
    inclusion_ranges,
    new_nodes,
    proof_from_nodes,
    range_nodes,
    root_from_nodes,
    root_with,
    sibling_nodes,
)

N = 33
LEAVES = [merkle.leaf_hash(Digest.of(i.to_bytes(4, "big"))) for i in range(N)]


def _stored(n: int) -> dict[Node, bytes]:
    builder, stored = TreeBuilder(), dict[Node, bytes]()
    for leaf in LEAVES[:n]:
        stored.update(builder.add(bytes(leaf)))
    return stored


STORED = _stored(N)


def test_ranges_frontiers_and_proofs_equal_merkles() -> None:
    assert frontier(11) == [(3, 0), (1, 4), (0, 10)]
    assert range_nodes(8, 11) == [(1, 4), (0, 10)]
    assert range_nodes(0, 1) == [(0, 0)]
    for n in range(1, N + 1):
        assert root_from_nodes(n, STORED) == bytes(merkle.root(LEAVES[:n]))
        for i in range(n):
            ranges = inclusion_ranges(i, n)
            assert proof_from_nodes(ranges, STORED) == merkle.inclusion_proof(LEAVES[:n], i)
        for m in range(n + 1):
            ranges = consistency_ranges(m, n)
            assert proof_from_nodes(ranges, STORED) == merkle.consistency_proof(LEAVES[:n], m)
    assert consistency_ranges(0, 5) == [] and consistency_ranges(5, 5) == []
    assert consistency_ranges(4, 8) == [(4, 8)]
    assert consistency_ranges(3, 8) == [(2, 3), (3, 4), (0, 2), (4, 8)]


@pytest.mark.parametrize(
    ("lo", "hi", "message"),
    [
        (0, 0, "leaf range 0..0 is empty or negative"),
        (3, 2, "leaf range 3..2 is empty or negative"),
        (-1, 2, "leaf range -1..2 is empty or negative"),
        (1, 3, "leaf range 1..3 is not a subtree of an RFC 6962 tree"),
        (2, 6, "leaf range 2..6 is not a subtree"),
    ],
)
def test_a_range_that_is_no_rfc_subtree_is_refused(lo: int, hi: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        range_nodes(lo, hi)


def test_proof_arguments_out_of_range_are_refused() -> None:
    for index, size in ((-1, 3), (3, 3), (0, 0)):
        with pytest.raises(IndexError, match=f"leaf index {index} is outside a tree of {size}"):
            inclusion_ranges(index, size)
    assert inclusion_ranges(0, 1) == []
    for old, size in ((-1, 3), (4, 3)):
        with pytest.raises(ValueError, match=f"old_size {old} is not within 0..{size}"):
            consistency_ranges(old, size)


def test_a_missing_node_is_named_with_the_leaves_it_covers() -> None:
    error = MissingNodeError((2, 3))
    assert error.node == (2, 3)
    assert str(error) == "the stored tree lacks node (level 2, index 3), which covers leaves 12..15"
    assert isinstance(error, LookupError)
    partial = {k: v for k, v in STORED.items() if k != (1, 4)}
    with pytest.raises(MissingNodeError) as info:
        root_from_nodes(11, partial)
    assert info.value.node == (1, 4)
    with pytest.raises(MissingNodeError) as info:
        new_nodes(3, bytes(LEAVES[3]), {k: v for k, v in STORED.items() if k != (1, 0)})
    assert info.value.node == (1, 0)


def test_a_leaf_completes_its_right_child_chain_bottom_up() -> None:
    nodes = new_nodes(7, bytes(LEAVES[7]), STORED)
    assert [node for node, _ in nodes] == [(0, 7), (1, 3), (2, 1), (3, 0)]
    assert [value for _, value in nodes] == [STORED[node] for node, _ in nodes]
    assert new_nodes(8, b"x" * 32, {}) == [((0, 8), b"x" * 32)]


def test_a_builder_resumes_from_a_frontier_and_refuses_a_missing_piece() -> None:
    assert TreeBuilder().root() is None
    assert list(TreeBuilder().frontier_hashes()) == []
    for size in (1, 5, 8, 11):
        pieces = {node: STORED[node] for node in frontier(size)}
        builder = TreeBuilder(size, pieces)
        assert builder.size == size
        assert builder.root() == bytes(merkle.root(LEAVES[:size]))
        assert dict(builder.frontier_hashes()) == pieces
        added = builder.add(bytes(LEAVES[size]))
        assert added == new_nodes(size, bytes(LEAVES[size]), STORED)
        assert builder.root() == bytes(merkle.root(LEAVES[: size + 1]))
        assert dict(builder.frontier_hashes()) == {n: STORED[n] for n in frontier(size + 1)}
    assert TreeBuilder(0, None).size == 0
    with pytest.raises(MissingNodeError) as info:
        TreeBuilder(11, {(3, 0): STORED[(3, 0)]})
    assert info.value.node == (1, 4)  # the first missing piece
    with pytest.raises(MissingNodeError) as info:
        TreeBuilder(11)
    assert info.value.node == (3, 0)
    extra = {**{n: STORED[n] for n in frontier(5)}, (0, 0): STORED[(0, 0)]}
    assert TreeBuilder(5, extra).root() == bytes(merkle.root(LEAVES[:5]))


def _cases() -> list[tuple[int, int, int, int]]:
    out = []
    for size in range(1, 20):
        for level in range(4):
            width = size >> level
            for lo in range(width):
                for hi in range(lo + 1, width + 1):
                    out.append((size, level, lo, hi))
    return out


def test_a_tile_hashes_up_to_the_root_with_exactly_its_sibling_nodes() -> None:
    for size, level, lo, hi in _cases():
        siblings = sibling_nodes(size, level, lo, hi)
        first, end = lo << level, hi << level
        for lev, idx in siblings:  # stored, and outside the given range
            assert (idx + 1) << lev <= size
            assert (idx + 1) << lev <= first or idx << lev >= end
        assert len(siblings) == len(set(siblings))
        given = [STORED[(level, i)] for i in range(lo, hi)]
        only = {node: STORED[node] for node in siblings}
        expected = bytes(merkle.root(LEAVES[:size]))
        assert root_with(size, level, lo, given, only) == expected, (size, level, lo, hi)
        for missing in siblings:  # every sibling is needed
            fewer = {k: v for k, v in only.items() if k != missing}
            with pytest.raises(MissingNodeError) as info:
                root_with(size, level, lo, given, fewer)
            assert info.value.node == missing
        if given:
            wrong = [bytes(32), *given[1:]]
            assert root_with(size, level, lo, wrong, only) != expected


def test_sibling_nodes_refuses_a_range_outside_the_tree() -> None:
    for size, level, lo, hi in (
        (8, 0, 0, 0),
        (8, 0, 3, 2),
        (8, 0, -1, 2),
        (8, 1, 0, 5),
        (8, 0, 0, 9),
    ):
        with pytest.raises(ValueError, match=f"are not within {size} leaves"):
            sibling_nodes(size, level, lo, hi)
    assert sibling_nodes(8, 1, 0, 4) == []
    assert sibling_nodes(8, 0, 0, 8) == []
    assert sibling_nodes(8, 0, 7, 8) == [(2, 0), (1, 2), (0, 6)]
