"""The RFC 6962 log: known answers, a differential check against the RFC's recursive
definitions, and exhaustive proof checks for every tree of 1..64 leaves."""

from __future__ import annotations

import hashlib

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

HASH1 = Digest.from_hex("2895d2438a27e13c3d825753bf22466bf517515edd723caf8c879e35e051a31b")
HASH2 = Digest.from_hex("5d865793cc141aa089f1fabd4315b643a6fcadce797d687c75406bf935f19174")


def leaves(n: int) -> list[Digest]:
    return [leaf_hash(Digest.of(i.to_bytes(4, "big"))) for i in range(n)]


# --- the RFC's recursive definitions, written as plainly as possible ------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[Digest]) -> Digest:
    if not d:
        return Digest.of(b"")
    if len(d) == 1:
        return d[0]
    k = _k(len(d))
    return Digest(hashlib.sha256(b"\x01" + bytes(ref_mth(d[:k])) + bytes(ref_mth(d[k:]))).digest())


def ref_path(m: int, d: list[Digest]) -> list[Digest]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_shape(m: int, n: int) -> list[str]:
    """Which side each sibling of leaf m sits on, leaf upwards, in a tree of n leaves."""
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*ref_shape(m, k), "right"]
    return [*ref_shape(m - k, n - k), "left"]


def ref_subproof(m: int, d: list[Digest], complete: bool) -> list[Digest]:
    n = len(d)
    if m == n:
        return [] if complete else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return [*ref_subproof(m, d[:k], complete), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


# --- known answers ---------------------------------------------------------------------------


def test_known_answers_from_the_wire_format() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"b")
    assert leaf_hash(a).hex() == "a23bd5b06da9048238a65b3f1d9d0b9e15fae3dde262688e6489aa4c763d1820"
    assert (
        root([leaf_hash(a), leaf_hash(b)]).hex()
        == "ad5ca6cddc0b27c6a83e332bf28011769236e6c6a1f786ebf7b5267b37a5bd22"
    )


def test_known_answers_for_the_sealed_run_fixture() -> None:
    assert (
        leaf_hash(HASH2).hex() == "029e20c52702bd93c2e5d3feb2fffcac3288a7c936a98a8a59a2dbc8ad3adc31"
    )
    assert (
        root([leaf_hash(HASH1), leaf_hash(HASH2)]).hex()
        == "f0f94ac9cea0854f3adbd5401984b2dc8246e2b2c6888403dfe184c2ca4ad108"
    )


def test_the_empty_root_is_the_rfc_value_not_zeros() -> None:
    assert root([]) == EMPTY_ROOT
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert EMPTY_ROOT != Digest.ZERO


def test_hashes_are_domain_separated() -> None:
    x, y = Digest.of(b"x"), Digest.of(b"y")
    assert leaf_hash(x) == Digest.of(b"\x00" + bytes(x))
    assert node_hash(x, y) == Digest.of(b"\x01" + bytes(x) + bytes(y))
    assert node_hash(x, y) != node_hash(y, x)


def test_a_single_leaf_is_its_own_root() -> None:
    (only,) = leaves(1)
    assert root([only]) == only


def test_roots_proofs_match_the_rfcs_recursive_definitions() -> None:
    for n in range(0, 40):
        d = leaves(n)
        assert root(d) == ref_mth(d), n
        for m in range(n):
            assert inclusion_proof(d, m) == ref_path(m, d), (n, m)
        for m in range(1, n):
            assert consistency_proof(d, m) == ref_subproof(m, d, True), (n, m)


def test_a_large_log_splits_at_the_largest_power_of_two() -> None:
    d = leaves(100_000)
    assert root(d) == node_hash(root(d[:65_536]), root(d[65_536:]))


# --- exhaustive proof checks -----------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 65))
def test_every_leaf_proves_inclusion_and_wrong_claims_are_rejected(n: int) -> None:
    d = leaves(n)
    head = root(d)
    for i in range(n):
        proof = inclusion_proof(d, i)
        assert verify_inclusion(d[i], i, n, proof, head)
        assert not verify_inclusion(d[i], i, n, proof, Digest.of(b"forged"))
        assert not verify_inclusion(d[(i + 1) % n], i, n, proof, head) or n == 1
        for j in range(n):
            if j != i:
                assert not verify_inclusion(d[i], j, n, proof, head)
        for size in (i, n - 1, n + 1, 2 * n):
            if size != n:
                # A proof is only the sibling hashes; under another size it can still
                # verify when that size gives the leaf the very same path (index 0 of 3
                # and of 4 both go left, left), which is why a checkpoint binds size and
                # root together. Every other wrong size must be rejected.
                same_path = i < size and ref_shape(i, size) == ref_shape(i, n)
                assert verify_inclusion(d[i], i, size, proof, head) is same_path, (i, size)
        assert not verify_inclusion(d[i], i, n, [*proof, d[0]], head)
        assert not verify_inclusion(d[i], i, n, [*proof, head], head)
        if proof:
            assert not verify_inclusion(d[i], i, n, proof[:-1], head)
            assert not verify_inclusion(d[i], i, n, proof[1:], head)


@pytest.mark.parametrize("n", range(1, 65))
def test_every_prefix_proves_consistency_and_forgeries_are_rejected(n: int) -> None:
    d = leaves(n)
    heads = [root(d[:m]) for m in range(n + 1)]
    new = heads[n]
    for m in range(n + 1):
        proof = consistency_proof(d, m)
        old = heads[m]
        assert verify_consistency(m, old, n, new, proof), (n, m)
        if m in (0, n):
            assert proof == []
        else:
            assert proof
            assert not verify_consistency(m, Digest.of(b"forged"), n, new, proof)
            assert not verify_consistency(m, old, n, Digest.of(b"forged"), proof)
            assert not verify_consistency(m, old, n, new, [*proof, d[0]])
            assert not verify_consistency(m, old, n, new, proof[:-1])
            assert not verify_consistency(m, old, n, new, proof[1:])
            for size in (n - 1, n + 1, 2 * n):
                # As with inclusion, another size whose proof has the same shape computes
                # the same roots; a size whose proof has another length must be refused.
                if m < size and len(ref_subproof(m, leaves(size), True)) != len(proof):
                    assert not verify_consistency(m, old, size, new, proof), (m, size)
            for other in (m - 1, m + 1):
                if 0 < other < n:
                    assert not verify_consistency(other, old, n, new, proof)
                    assert not verify_consistency(other, heads[other], n, new, proof)
        assert not verify_consistency(n + 1, new, n, new, [])


def test_the_empty_log_is_consistent_only_with_the_empty_root() -> None:
    d = leaves(5)
    assert verify_consistency(0, EMPTY_ROOT, 5, root(d), [])
    assert verify_consistency(0, EMPTY_ROOT, 0, EMPTY_ROOT, [])
    assert not verify_consistency(0, Digest.ZERO, 5, root(d), [])  # agentplane 0.4.0's zeros
    assert not verify_consistency(0, EMPTY_ROOT, 5, root(d), [d[0]])


def test_equal_sizes_need_equal_roots_and_an_empty_proof() -> None:
    d = leaves(6)
    assert verify_consistency(6, root(d), 6, root(d), [])
    assert not verify_consistency(6, root(d), 6, root(d[:5]), [])
    assert not verify_consistency(6, root(d), 6, root(d), [d[0]])


@pytest.mark.parametrize(
    "args",
    [
        (-1, 2),
        (0, -1),
        (True, 2),
        (2, 2),
        (0, 2.0),
        (0, None),
    ],
)
def test_inclusion_verification_answers_false_to_malformed_sizes(args: tuple[object, ...]) -> None:
    d = leaves(2)
    index, size = args
    assert verify_inclusion(d[0], index, size, [d[1]], root(d)) is False  # type: ignore[arg-type]


def test_verifiers_answer_false_never_raise_on_garbage() -> None:
    d = leaves(4)
    head = root(d)
    proof = inclusion_proof(d, 1)
    assert verify_inclusion(d[1], 1, 4, [bytes(p) for p in proof], head) is False  # type: ignore[misc]
    assert verify_inclusion(d[1], 1, 4, None, head) is False  # type: ignore[arg-type]
    assert verify_inclusion(bytes(d[1]), 1, 4, proof, head) is False  # type: ignore[arg-type]
    assert verify_inclusion(d[1], 1, 4, proof, None) is False  # type: ignore[arg-type]
    cproof = consistency_proof(d, 3)
    old = root(d[:3])
    assert verify_consistency(-1, old, 4, head, cproof) is False
    assert verify_consistency(3, old, -4, head, cproof) is False
    assert verify_consistency(3, old, 4, head, ["x"]) is False  # type: ignore[list-item]
    assert verify_consistency(3, old, 4, head, 5) is False  # type: ignore[arg-type]
    assert verify_consistency(3, None, 4, head, cproof) is False  # type: ignore[arg-type]
    assert verify_consistency(4, head, 3, old, cproof) is False
    assert verify_consistency(3, old, 4, head, []) is False


def test_provers_refuse_out_of_range_arguments() -> None:
    d = leaves(3)
    for bad in (-1, 3, 10):
        with pytest.raises(IndexError):
            inclusion_proof(d, bad)
    with pytest.raises(IndexError):
        inclusion_proof([], 0)
    with pytest.raises(ValueError, match="larger than the log"):
        consistency_proof(d, 4)
    with pytest.raises(ValueError, match="negative"):
        consistency_proof(d, -1)
    assert consistency_proof([], 0) == []
    with pytest.raises(TypeError):
        root([b"\x00" * 32])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        leaf_hash(b"\x00" * 32)  # type: ignore[arg-type]
