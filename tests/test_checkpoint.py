"""Checkpoint notes (C2SP tlog-checkpoint bodies) and inclusion values."""

from __future__ import annotations

import base64

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion, IncoherentCheckpointError
from agentplane_journal.tlog.merkle import (
    EMPTY_ROOT,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
)

HASH1 = Digest.from_hex("2895d2438a27e13c3d825753bf22466bf517515edd723caf8c879e35e051a31b")
HASH2 = Digest.from_hex("5d865793cc141aa089f1fabd4315b643a6fcadce797d687c75406bf935f19174")
ROOT = Digest.of(b"root")
ROOT_B64 = base64.b64encode(bytes(ROOT)).decode()


def test_the_empty_log_note_uses_the_rfc_empty_root() -> None:
    note = Checkpoint("agentplane", 0, EMPTY_ROOT).to_note()
    assert note == "agentplane\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"
    assert Checkpoint.from_note(note) == Checkpoint("agentplane", 0, EMPTY_ROOT)


V040_EMPTY_NOTE = "agentplane\n0\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"


def test_agentplane_0_4_0s_empty_log_note_parses_as_written_and_is_flagged() -> None:
    cp = Checkpoint.from_note(V040_EMPTY_NOTE)
    assert cp == Checkpoint("agentplane", 0, Digest.ZERO)  # the root as published
    assert cp.is_v040_empty and cp.to_note() == V040_EMPTY_NOTE
    assert cp.normalized() == Checkpoint("agentplane", 0, EMPTY_ROOT)
    assert not cp.normalized().is_v040_empty
    # The RFC check itself stays strict: it is the caller who knows 0.4.0's spelling.
    assert not verify_consistency(0, cp.root, 5, ROOT, [])
    assert verify_consistency(0, cp.normalized().root, 5, ROOT, [])


def test_only_size_zero_with_the_zero_root_is_the_0_4_0_empty_note() -> None:
    assert not Checkpoint("agentplane", 0, EMPTY_ROOT).is_v040_empty
    assert not Checkpoint("agentplane", 1, Digest.ZERO).is_v040_empty
    assert not Checkpoint("agentplane", 0, ROOT).is_v040_empty
    assert Checkpoint("agentplane/acme", 0, Digest.ZERO).is_v040_empty
    other = Checkpoint("agentplane", 3, ROOT)
    assert other.normalized() is other


def test_a_note_round_trips_with_a_size_beyond_32_bits_and_a_tenant_origin() -> None:
    checkpoint = Checkpoint("example.org/plane-a", 4294967296, ROOT)
    note = checkpoint.to_note()
    assert note == f"example.org/plane-a\n4294967296\n{ROOT_B64}\n"
    assert len(ROOT_B64) == 44 and ROOT_B64.endswith("=")
    assert Checkpoint.from_note(note) == checkpoint


def test_the_root_is_standard_base64_with_padding() -> None:
    awkward = Digest(bytes([0xFB, 0xFF, 0xBF] * 10 + [0xFF, 0xFE]))
    line = Checkpoint("o", 1, awkward).to_note().split("\n")[2]
    assert "+" in line and "/" in line and line.endswith("=")
    assert Checkpoint.from_note(f"o\n1\n{line}\n").root == awkward


NOT_CANONICAL = "not canonical standard padded base64"


@pytest.mark.parametrize(
    ("note", "problem"),
    [
        # three lines, each newline-terminated, nothing after
        ("", "end with a newline"),
        ("only-origin\n", "exactly 3 lines"),
        (f"origin\n1\n{ROOT_B64}", "end with a newline"),
        (f"origin\n1\n{ROOT_B64}\n\n", "exactly 3 lines"),
        (f"origin\n1\n{ROOT_B64}\nextension\n", "exactly 3 lines"),
        (f"origin\n1\n\n{ROOT_B64}\n", "exactly 3 lines"),
        # the origin: non-empty, one line of text
        (f"\n1\n{ROOT_B64}\n", "origin line is empty"),
        (f"ori\tgin\n1\n{ROOT_B64}\n", "control character"),
        (f"origin\r\n1\r\n{ROOT_B64}\r\n", "control character"),
        # the size: one decimal spelling
        (f"origin\n\n{ROOT_B64}\n", "the size line is empty"),
        ("origin\nnotanumber\nAAAA\n", "not an ASCII digit"),
        (f"origin\n-1\n{ROOT_B64}\n", "has a sign"),
        (f"origin\n+1\n{ROOT_B64}\n", "has a sign"),
        (f"origin\n01\n{ROOT_B64}\n", "has a leading zero"),
        (f"origin\n00\n{ROOT_B64}\n", "has a leading zero"),
        (f"origin\n 1\n{ROOT_B64}\n", "surrounding space"),
        (f"origin\n1 \n{ROOT_B64}\n", "surrounding space"),
        (f"origin\n1.0\n{ROOT_B64}\n", "not an ASCII digit"),
        (f"origin\n1_000\n{ROOT_B64}\n", "not an ASCII digit"),
        (f"origin\n\u0661\n{ROOT_B64}\n", "not an ASCII digit"),
        (f"origin\n{2**64}\n{ROOT_B64}\n", "does not fit 64 bits"),
        # the root: canonical standard padded base64 of 32 bytes
        ("origin\n1\nAAAA\n", "decodes to 3 bytes, not 32"),
        ("origin\n1\n" + base64.b64encode(bytes(33)).decode() + "\n", "not 32"),
        ("origin\n1\n\n", "decodes to 0 bytes, not 32"),
        ("origin\n1\n!!!\n", f"{NOT_CANONICAL}: it has a character outside"),
        (f"origin\n1\n{ROOT_B64.rstrip('=')}\n", f"{NOT_CANONICAL}: its length 43"),
        (f"origin\n1\n {ROOT_B64}\n", f"{NOT_CANONICAL}: it has a character outside"),
        (f"origin\n1\n{ROOT_B64[:-1]} \n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 43 + "-\n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 43 + "_\n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 40 + "A=AA\n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 41 + "===\n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 44 + "====\n", f"{NOT_CANONICAL}: it has a character outside"),
        ("origin\n1\n" + "A" * 42 + "B=\n", f"{NOT_CANONICAL}: it is not canonical"),
    ],
)
def test_malformed_notes_are_refused_naming_the_rule_they_break(note: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Checkpoint.from_note(note)


def test_a_root_of_zero_bytes_at_a_nonzero_size_is_well_formed() -> None:
    # 43 characters and one '=' are 32 bytes; "A" * 43 + "=" is 32 zero bytes, and only the
    # size-0 rule cares which root a note carries.
    assert Checkpoint.from_note("origin\n1\n" + "A" * 43 + "=\n").root == Digest.ZERO


def test_every_second_spelling_of_a_root_is_refused() -> None:
    # Each root whose last character carries non-zero padding bits decodes, by a lax
    # decoder, to the same 32 bytes as the canonical one: exactly one spelling parses.
    canonical = ROOT_B64
    assert canonical.endswith("=") and len(canonical) == 44
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(canonical[42])
    siblings = [c for i, c in enumerate(alphabet) if i >> 2 == last >> 2]
    assert len(siblings) == 4
    parsed = []
    for c in siblings:
        note = f"origin\n1\n{canonical[:42]}{c}=\n"
        assert base64.b64decode(note.split("\n")[2]) == bytes(ROOT)  # lax: all four
        try:
            parsed.append(Checkpoint.from_note(note))
        except ValueError as exc:
            assert "not canonical" in str(exc)
    assert parsed == [Checkpoint("origin", 1, ROOT)]


def test_a_size_zero_note_names_the_empty_log_or_is_refused() -> None:
    empty = Checkpoint.from_note(f"agentplane\n0\n{base64.b64encode(bytes(EMPTY_ROOT)).decode()}\n")
    assert empty == Checkpoint("agentplane", 0, EMPTY_ROOT) and empty.is_coherent
    assert Checkpoint.from_note(V040_EMPTY_NOTE).is_v040_empty  # flagged, not refused
    for root_ in (ROOT, HASH1, Digest.of(b"x")):
        lie = Checkpoint("agentplane", 0, root_)
        assert not lie.is_coherent
        with pytest.raises(IncoherentCheckpointError, match="size 0 names the empty log"):
            Checkpoint.from_note(lie.to_note())
    # The same root at size 1 is an ordinary checkpoint.
    assert Checkpoint.from_note(Checkpoint("agentplane", 1, ROOT).to_note()).is_coherent
    assert issubclass(IncoherentCheckpointError, ValueError)


@pytest.mark.parametrize("size", [0, 1, 2, 9, 10, 99, 100, 12345, 2**32, 2**63, 2**64 - 1])
def test_every_note_to_note_writes_parses_back_to_the_same_checkpoint(size: int) -> None:
    for root_ in (ROOT, HASH1, HASH2, Digest.ZERO, EMPTY_ROOT, Digest(bytes(range(32)))):
        checkpoint = Checkpoint("example.org/plane-a/acme", size, root_)
        if size == 0 and root_ not in (EMPTY_ROOT, Digest.ZERO):
            continue  # incoherent: never written by a log
        note = checkpoint.to_note()
        assert Checkpoint.from_note(note) == checkpoint
        assert Checkpoint.from_note(note).to_note() == note


def test_a_note_must_be_text() -> None:
    with pytest.raises(TypeError):
        Checkpoint.from_note(b"agentplane\n0\n")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("", 0, ROOT), ValueError),
        (("a\nb", 0, ROOT), ValueError),
        (("a", -1, ROOT), ValueError),
        (("a", 2**64, ROOT), ValueError),
        (("a", True, ROOT), TypeError),
        (("a", 1.0, ROOT), TypeError),
        (("a", 0, bytes(ROOT)), TypeError),
        ((None, 0, ROOT), TypeError),
    ],
)
def test_checkpoint_values_are_validated(args: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        Checkpoint(*args)  # type: ignore[arg-type]


def test_checkpoints_are_frozen_values() -> None:
    a, b = Checkpoint("o", 2, ROOT), Checkpoint("o", 2, ROOT)
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.size = 3  # type: ignore[misc]


def test_an_inclusion_takes_the_raw_seal_and_verifies_against_the_checkpoint_root() -> None:
    seals = [HASH1, HASH2, Digest.of(b"c")]
    leaves = [leaf_hash(s) for s in seals]
    head = root(leaves)
    for index, seal in enumerate(seals):
        inclusion = Inclusion(index, 3, seal, tuple(inclusion_proof(leaves, index)))
        assert inclusion.verify(head)
        assert not inclusion.verify(root(leaves[:2]))
        # a leaf hash passed as the seal is hashed twice and does not verify
        assert not Inclusion(index, 3, leaves[index], inclusion.proof).verify(head)


def test_an_inclusion_normalises_its_proof_to_a_tuple_and_checks_its_fields() -> None:
    proof = [Digest.of(b"p")]
    inclusion = Inclusion(0, 2, HASH1, proof)  # type: ignore[arg-type]
    assert inclusion.proof == (proof[0],)
    assert hash(inclusion) == hash(Inclusion(0, 2, HASH1, (proof[0],)))
    with pytest.raises(ValueError):
        Inclusion(-1, 2, HASH1, ())
    with pytest.raises(TypeError):
        Inclusion(0, 2, bytes(HASH1), ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Inclusion(0, 2, HASH1, (b"x" * 32,))  # type: ignore[arg-type]
