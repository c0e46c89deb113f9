"""Record signing's rules (core/signing.py) the older tests/test_signing.py left unheld, each
held by a test that fails without it. Written against the mutants that survived
(tools/mutation.py signing). Pure.
"""

from __future__ import annotations

from agentplane_journal.core.signing import Ed25519Signer, Ed25519Verifier

SEED = bytes(range(32))


def test_a_verifier_answers_false_for_a_hostile_key_id_or_message() -> None:
    signer = Ed25519Signer("k1", SEED)
    verifier = Ed25519Verifier().trust("k1", signer.public_key)
    signature = signer.sign(b"m")
    assert verifier.verify("k1", b"m", signature)
    assert verifier.verify("k1", bytearray(b"m"), memoryview(signature))  # type: ignore[arg-type]
    assert verifier.verify(["k1"], b"m", signature) is False  # type: ignore[arg-type]
    assert verifier.verify("k1", "m", signature) is False  # type: ignore[arg-type]
    assert verifier.verify("k1", None, signature) is False  # type: ignore[arg-type]


def test_reprs_show_the_key_id_and_a_public_key_prefix_never_the_seed() -> None:
    signer = Ed25519Signer("k1", SEED)
    assert repr(signer) == f"Ed25519Signer(key_id='k1', public_key={signer.public_key[:4].hex()}…)"
    assert str(signer) == repr(signer)
    verifier = Ed25519Verifier().trust("b", signer.public_key).trust("a", signer.public_key)
    assert repr(verifier) == "Ed25519Verifier(trusted=['a', 'b'])"
