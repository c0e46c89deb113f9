"""Signatures: the signing input, Ed25519 signer/verifier, and attested chains."""

from __future__ import annotations

import copy
import pickle

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.chain import verify_attested, verify_chain
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Attestation, Record
from agentplane_journal.core.signing import (
    DOMAIN_RECORD,
    Ed25519Signer,
    Ed25519Verifier,
    Signer,
    Verifier,
    signing_hash,
)
from agentplane_journal.errors import CorruptRecordError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
HASH1 = Digest.from_hex("2895d2438a27e13c3d825753bf22466bf517515edd723caf8c879e35e051a31b")

# RFC 8032 §7.1, test 1 (empty message).
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)

SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))


def signed_chain(n: int, signer: Signer | None) -> list[Record]:
    records: list[Record] = []
    prev = Digest.ZERO
    for seq in range(1, n + 1):
        record = Record.seal(Append(RUN, "Note", {"text": f"n{seq}"}).body(seq, 1), prev, signer)
        records.append(record)
        prev = record.hash
    return records


def rehash(records: list[Record], index: int, new_text: str, keep_signatures: bool) -> list[Record]:
    """What someone with write access but without the key can do: edit a record and
    rebuild a perfectly consistent chain from there, keeping (or dropping) the old
    signatures because they cannot make new ones."""
    out = records[:index]
    prev = out[-1].hash if out else Digest.ZERO
    for record in records[index:]:
        body = dict(record.body)
        if record.seq == records[index].seq:
            body["text"] = new_text
        rebuilt = Record.seal(body, prev)
        attestation = record.attestation if keep_signatures else None
        out.append(Record(rebuilt.body, rebuilt.raw, rebuilt.prev_hash, rebuilt.hash, attestation))
        prev = rebuilt.hash
    return out


def test_domain_label_is_agentplanes() -> None:
    assert DOMAIN_RECORD == "io.github.hupe1980.agentplane/record/v1"


def test_signing_input_for_hash1_matches_the_known_answer() -> None:
    assert (
        signing_hash(DOMAIN_RECORD, HASH1).hex()
        == "fc28d3dda9b358727efa1e5ae543c145b2d17374ce9e9525130774ddb078a01e"
    )


def test_signing_input_is_domain_separated() -> None:
    assert signing_hash(DOMAIN_RECORD, HASH1) != signing_hash(
        "io.github.hupe1980.agentplane/manifest/v1", HASH1
    )


def test_signer_matches_rfc8032_test_vector_1() -> None:
    signer = Ed25519Signer("rfc", RFC_SEED)
    assert signer.public_key == RFC_PUBLIC
    assert signer.sign(b"") == RFC_SIGNATURE
    assert Ed25519Verifier().trust("rfc", RFC_PUBLIC).verify("rfc", b"", RFC_SIGNATURE)


def test_signer_and_verifier_satisfy_the_protocols() -> None:
    assert isinstance(Ed25519Signer("a", SEED_A), Signer)
    assert isinstance(Ed25519Verifier(), Verifier)


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_a_seed_that_is_not_32_bytes_is_a_value_error(size: int) -> None:
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        Ed25519Signer("a", bytes(size))


def test_a_seed_must_be_bytes_and_the_key_id_text() -> None:
    with pytest.raises(TypeError):
        Ed25519Signer("a", SEED_A.hex())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Ed25519Signer(None, SEED_A)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Ed25519Signer("", SEED_A)


def test_the_signer_never_shows_or_exposes_its_seed() -> None:
    seed = bytes.fromhex("c0ffee" * 10 + "beef")
    signer = Ed25519Signer("spiffe://plane/writer", seed)
    for text in (repr(signer), str(signer), f"{signer}"):
        assert seed.hex() not in text and seed.hex().upper() not in text
        assert repr(seed) not in text and "c0ffee" not in text
        assert "spiffe://plane/writer" in text
    assert not hasattr(signer, "seed")
    assert not hasattr(signer, "__dict__")
    with pytest.raises(TypeError):
        pickle.dumps(signer)
    with pytest.raises(TypeError):
        copy.copy(signer)
    with pytest.raises(AttributeError):
        signer.key_id = "other"  # type: ignore[misc]


def test_a_seed_error_does_not_echo_the_seed() -> None:
    secret = b"s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3"
    with pytest.raises(ValueError) as info:
        Ed25519Signer("a", secret)
    assert "s3cr3t" not in str(info.value) and secret.hex() not in str(info.value)


def test_verifier_refuses_unknown_keys_bad_lengths_and_bad_signatures() -> None:
    signer = Ed25519Signer("a", SEED_A)
    verifier = Ed25519Verifier().trust("a", signer.public_key)
    message = signing_hash(DOMAIN_RECORD, HASH1)
    signature = signer.sign(message)
    assert verifier.verify("a", message, signature)
    assert not verifier.verify("b", message, signature)
    assert not verifier.verify("a", message, signature[:63])
    assert not verifier.verify("a", message, signature + b"\x00")
    assert not verifier.verify("a", message, bytes(64))
    assert not verifier.verify("a", message[:-1] + b"\x00", signature)
    assert not verifier.verify("a", message, b"\xab" + message)  # agentplane's stub signer
    assert not verifier.verify(None, message, signature)  # type: ignore[arg-type]
    assert not verifier.verify("a", message, "sig")  # type: ignore[arg-type]


def test_trust_is_chainable_and_checks_the_key_length() -> None:
    a, b = Ed25519Signer("a", SEED_A), Ed25519Signer("b", SEED_B)
    verifier = Ed25519Verifier().trust("a", a.public_key).trust("b", b.public_key)
    assert verifier.verify("b", b"m", b.sign(b"m"))
    assert not verifier.verify("a", b"m", b.sign(b"m"))
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        verifier.trust("c", bytes(31))


# --- attested chains -------------------------------------------------------------------------


def test_a_record_signed_here_verifies() -> None:
    signer = Ed25519Signer("spiffe://plane/writer", SEED_A)
    records = signed_chain(3, signer)
    for record in records:
        assert record.attestation is not None
        assert record.attestation.key_id == "spiffe://plane/writer"
        assert len(record.attestation.signature) == 64
    verifier = Ed25519Verifier().trust(signer.key_id, signer.public_key)
    assert verify_attested(records, verifier, require_signature=True) == records[-1].hash


def test_an_attestation_survives_the_read_round_trip() -> None:
    signer = Ed25519Signer("w", SEED_A)
    (written,) = signed_chain(1, signer)
    read = Record.from_stored(written.raw, written.prev_hash, written.hash, written.attestation)
    assert (
        read.attestation == written.attestation == Attestation("w", written.attestation.signature)
    )  # type: ignore[union-attr]


def test_a_chain_rebuilt_without_the_key_verifies_as_a_chain_but_fails_attestation() -> None:
    signer = Ed25519Signer("w", SEED_A)
    verifier = Ed25519Verifier().trust("w", signer.public_key)
    forged = rehash(signed_chain(4, signer), 1, "rewritten", keep_signatures=True)
    assert verify_chain(forged) == forged[-1].hash
    with pytest.raises(CorruptRecordError, match="'w' did not make") as info:
        verify_attested(forged, verifier)
    assert info.value.seq == 2


def test_a_rebuilt_chain_with_stripped_signatures_fails_only_when_signatures_are_required() -> None:
    signer = Ed25519Signer("w", SEED_A)
    verifier = Ed25519Verifier().trust("w", signer.public_key)
    stripped = rehash(signed_chain(3, signer), 1, "rewritten", keep_signatures=False)
    assert verify_attested(stripped, verifier) == stripped[-1].hash
    with pytest.raises(CorruptRecordError, match="record 2 carries no signature") as info:
        verify_attested(stripped, verifier, require_signature=True)
    assert info.value.seq == 2


def test_an_unchanged_rebuild_reusing_the_signatures_still_verifies() -> None:
    signer = Ed25519Signer("w", SEED_A)
    records = signed_chain(3, signer)
    rebuilt = rehash(records, 0, "n1", keep_signatures=True)
    assert rebuilt == records
    verify_attested(rebuilt, Ed25519Verifier().trust("w", signer.public_key), True)


def test_a_signature_by_an_unknown_or_wrong_key_fails() -> None:
    signer = Ed25519Signer("w", SEED_A)
    records = signed_chain(2, signer)
    with pytest.raises(CorruptRecordError, match="did not make") as info:
        verify_attested(records, Ed25519Verifier())
    assert info.value.seq == 1
    impostor = Ed25519Signer("w", SEED_B).public_key
    with pytest.raises(CorruptRecordError, match="'w' did not make"):
        verify_attested(records, Ed25519Verifier().trust("w", impostor))


def test_an_unsigned_journal_is_ordinary_unless_a_signature_is_required() -> None:
    records = signed_chain(3, None)
    assert all(r.attestation is None for r in records)
    assert verify_attested(records, Ed25519Verifier()) == records[-1].hash
    with pytest.raises(
        CorruptRecordError,
        match="record 1 carries no signature, and this verification required one",
    ):
        verify_attested(records, Ed25519Verifier(), require_signature=True)


def test_attestation_checks_run_after_the_chain_checks() -> None:
    signer = Ed25519Signer("w", SEED_A)
    records = signed_chain(3, signer)
    with pytest.raises(CorruptRecordError, match="sequence gap") as info:
        verify_attested([records[0], records[2]], Ed25519Verifier())
    assert info.value.seq == 3


def test_verify_attested_accepts_a_generator_and_a_slice_start() -> None:
    signer = Ed25519Signer("w", SEED_A)
    records = signed_chain(4, signer)
    verifier = Ed25519Verifier().trust("w", signer.public_key)
    assert verify_attested((r for r in records), verifier) == records[-1].hash
    assert verify_attested(records[2:], verifier, True, start=records[1].hash) == records[-1].hash
