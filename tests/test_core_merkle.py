"""The Merkle log's argument checks, each held by a test that fails without it
(tlog/merkle.py; the RFC known answers and proof properties are in tests/test_merkle.py).

Written against the mutants that survived the older tests (tools/mutation.py).
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    split_point,
)

A, B = Digest.of(b"a"), Digest.of(b"b")


@pytest.mark.parametrize(("left", "right"), [(A, bytes(B)), (bytes(A), B), (b"a", b"b")])
def test_node_hash_takes_two_digests_only(left: object, right: object) -> None:
    with pytest.raises(TypeError, match="node_hash takes two Digests"):
        node_hash(left, right)  # type: ignore[arg-type]


def test_type_refusals_name_the_type() -> None:
    with pytest.raises(TypeError, match="leaf_hash takes a Digest, not bytes"):
        leaf_hash(bytes(A))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Merkle leaves are Digest leaf hashes, not str"):
        root([A, "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="index must be an int, not bool"):
        inclusion_proof([A, B], True)
    with pytest.raises(TypeError, match="old_size must be an int, not float"):
        consistency_proof([A, B], 1.0)  # type: ignore[arg-type]


def test_out_of_range_refusals_say_why() -> None:
    with pytest.raises(IndexError, match="leaf index 2 is outside a tree of 2 leaves"):
        inclusion_proof([A, B], 2)
    with pytest.raises(IndexError, match="leaf index -1 is outside a tree of 2 leaves"):
        inclusion_proof([A, B], -1)
    with pytest.raises(ValueError, match="old_size 3 is larger than the log \\(2 leaves\\)"):
        consistency_proof([A, B], 3)
    with pytest.raises(ValueError, match="old_size -1 is negative"):
        consistency_proof([A, B], -1)


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2), (4, 2), (5, 4), (8, 4), (9, 8), (1025, 1024)])
def test_split_point_is_the_largest_power_of_two_below_n(n: int, k: int) -> None:
    assert split_point(n) == k
