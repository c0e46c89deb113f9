"""C2SP signed notes (Ed25519) and signed checkpoints: known answers and the trust rules.

Known answers are derived from c2sp.org/signed-note itself (key ID = SHA-256(name || 0x0A ||
0x01 || public key)[:4]; signature line = em dash, space, name, space, base64(key ID ||
Ed25519 signature)), computed here with hashlib and ``cryptography`` directly rather than
through the module under test, plus the worked example published with Go's
``golang.org/x/mod/sumdb/note`` (its key, text and signature line). Interop with the Go
implementation itself is in ``test_note_go.py``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import pickle

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentplane_journal import (
    Checkpoint,
    Digest,
    NoteSigner,
    NoteVerificationError,
    NoteVerifier,
    open_note,
    sign_note,
)
from agentplane_journal.tlog.note import MAX_SIGNATURES, key_hash

# RFC 8032 section 7.1, TEST 1: the seed and the public key it must give.
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
NAME = "example.com/log"

# The example in golang.org/x/mod/sumdb/note's documentation (example_test.go).
GO_SKEY_B64 = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"  # 0x01 || seed
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_SIGNATURE_LINE = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngo"
    "tpRZb6KE6RyyBwJnAM=\n"
)

SIGNER = NoteSigner(NAME, RFC_SEED)
WITNESS = NoteSigner("witness.example/w1", bytes(range(32)))
CP = Checkpoint(NAME, 5, Digest.of(b"root"))


# --- known answers ---------------------------------------------------------------------------


def test_the_key_hash_is_the_spec_formula() -> None:
    assert SIGNER.public_key == RFC_PUBLIC
    expected = hashlib.sha256(NAME.encode() + b"\x0a" + b"\x01" + RFC_PUBLIC).digest()[:4]
    assert SIGNER.key_hash == int.from_bytes(expected, "big") == 0xCC714670
    assert key_hash(NAME, RFC_PUBLIC) == 0xCC714670
    # The name and the type byte are both hashed: changing either changes the ID.
    assert key_hash("example.com/log2", RFC_PUBLIC) != SIGNER.key_hash


def test_the_verifier_key_is_name_hash_and_typed_base64_key() -> None:
    typed = base64.b64encode(b"\x01" + RFC_PUBLIC).decode()
    assert SIGNER.verifier_key == f"{NAME}+cc714670+{typed}"
    assert (
        SIGNER.verifier_key
        == "example.com/log+cc714670+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea"
    )
    assert NoteVerifier.from_key(SIGNER.verifier_key) == NoteVerifier(NAME, RFC_PUBLIC)


def test_the_signature_line_layout_is_key_id_then_ed25519_over_the_text() -> None:
    note = CP.to_signed_note(SIGNER)
    body = f"{NAME}\n5\n{base64.b64encode(bytes(Digest.of(b'root'))).decode()}\n"
    assert note.startswith(body + "\n\u2014 " + NAME + " ")
    assert note.endswith("\n") and note.count("\n") == 5
    blob = base64.b64decode(note[len(body) + 1 :].split(" ")[2].rstrip("\n"), validate=True)
    assert len(blob) == 4 + 64
    assert blob[:4] == bytes.fromhex("cc714670")
    Ed25519PublicKey.from_public_bytes(RFC_PUBLIC).verify(blob[4:], body.encode())  # raises if bad
    # Ed25519 is deterministic: the note is a fixed known answer.
    assert note == (
        "example.com/log\n5\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n\n"
        "— example.com/log zHFGcL2Z/N8AU5xPJL0cHlxaP4k19A1rdHMgrX50KwB0TsDv9K4aXSzDEV8l/Drsg"
        "K2Mbf7xFL/0cp0a++iNFI23WgE=\n"
    )


def test_gos_published_example_signs_and_opens_byte_for_byte() -> None:
    seed = base64.b64decode(GO_SKEY_B64)[1:]
    signer = NoteSigner("PeterNeumann", seed)
    assert signer.verifier_key == GO_VKEY
    assert sign_note(GO_TEXT, signer) == GO_TEXT + "\n" + GO_SIGNATURE_LINE
    opened = open_note(GO_TEXT + "\n" + GO_SIGNATURE_LINE, [GO_VKEY])
    assert opened.text == GO_TEXT
    assert [v.name for v in opened.verified] == ["PeterNeumann"]


# --- signed checkpoints ----------------------------------------------------------------------


def test_a_signed_checkpoint_round_trips() -> None:
    note = CP.to_signed_note(SIGNER)
    assert Checkpoint.from_signed_note(note, [SIGNER.verifier_key]) == CP
    assert Checkpoint.from_signed_note(note.encode(), [SIGNER.verifier]) == CP
    assert Checkpoint.from_signed_note(note, SIGNER.verifier_key) == CP  # one key alone


def test_signatures_from_unknown_keys_are_ignored_when_a_trusted_one_verifies() -> None:
    note = CP.to_signed_note(SIGNER, WITNESS)  # a witness cosigned
    assert Checkpoint.from_signed_note(note, [SIGNER.verifier_key]) == CP
    assert Checkpoint.from_signed_note(note, [WITNESS.verifier_key]) == CP
    opened = open_note(note, [WITNESS.verifier_key])
    assert opened.unverified == ((NAME, SIGNER.key_hash),)
    # Another key sharing the name, or the key ID, but not both, is an unknown key too.
    impostor = NoteSigner(NAME, bytes(32))
    assert (
        Checkpoint.from_signed_note(
            note + impostor.signature_line(CP.to_note()), [SIGNER.verifier_key]
        )
        == CP
    )


def test_a_note_only_unknown_keys_signed_is_refused() -> None:
    note = CP.to_signed_note(WITNESS)
    with pytest.raises(NoteVerificationError, match="no trusted key signed this note") as caught:
        Checkpoint.from_signed_note(note, [SIGNER.verifier_key])
    assert caught.value.names == ("witness.example/w1",)
    with pytest.raises(NoteVerificationError):
        Checkpoint.from_signed_note(note, [])


def test_a_bad_signature_from_a_trusted_key_rejects_the_whole_note() -> None:
    note = CP.to_signed_note(SIGNER, WITNESS)
    forged = Checkpoint(NAME, 5, Digest.of(b"forged")).to_note()
    altered = forged + note[len(CP.to_note()) :]
    for keys in ([SIGNER.verifier_key], [SIGNER.verifier_key, WITNESS.verifier_key]):
        with pytest.raises(NoteVerificationError, match="does not verify"):
            Checkpoint.from_signed_note(altered, keys)
    # A good trusted signature does not excuse a bad one from another trusted key.
    bad_witness = note.replace(WITNESS.signature_line(CP.to_note()), WITNESS.signature_line(forged))
    assert bad_witness != note
    with pytest.raises(NoteVerificationError, match=r"witness\.example/w1"):
        Checkpoint.from_signed_note(bad_witness, [SIGNER.verifier_key, WITNESS.verifier_key])
    assert Checkpoint.from_signed_note(bad_witness, [SIGNER.verifier_key]) == CP  # unknown: ignored


def test_a_body_that_is_not_a_strict_checkpoint_is_refused_after_its_signature() -> None:
    for text, problem in (
        ("hello\n", "expected exactly 3 lines"),
        (f"{NAME}\n05\n{base64.b64encode(bytes(32)).decode()}\n", "size"),
        (f"{NAME}\n5\nAAAA\n", "root decodes to 3 bytes"),
    ):
        with pytest.raises(ValueError, match=problem):
            Checkpoint.from_signed_note(sign_note(text, SIGNER), [SIGNER.verifier_key])


def test_extension_lines_are_refused() -> None:
    text = CP.to_note() + "extension line\n"
    with pytest.raises(ValueError, match="1 extension line"):
        Checkpoint.from_signed_note(sign_note(text, SIGNER), [SIGNER.verifier_key])


def test_an_unsigned_note_is_not_a_signed_note() -> None:
    with pytest.raises(ValueError, match="no blank line"):
        Checkpoint.from_signed_note(CP.to_note(), [SIGNER.verifier_key])


# --- malformed notes and keys ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mangle", "problem"),
    [
        (lambda n: n.rstrip("\n"), "must end with a newline"),
        (lambda n: n.replace("\u2014 ", "-- "), "em dash"),
        (lambda n: n.replace(f"{NAME} z", f"{NAME}  z"), "not standard base64"),
        (lambda n: n + "\u2014 other.example/k !!!!\n", "not standard base64"),
        (lambda n: n + "\u2014 other.example/k AAAA\n", "too short"),
        # an unknown key's line too: one spelling per signature (non-zero padding bits)
        (lambda n: n + "\u2014 other.example/k " + "A" * 42 + "B=\n", "canonical spelling"),
        (lambda n: n + "\u2014 other.example/k " + "A" * 43 + "\n", "multiple of 4"),
        (lambda n: n + "\u2014 other\u00a0key AAAAAAAAAAAAAAAAAAAAAAA=\n", "not '— <key name>"),
        (lambda n: n.replace("\n5\n", "\n5\t\n"), "U\\+0009"),
        (lambda n: n.replace("\n5\n", "\n5\r\n"), "U\\+000D"),
        (lambda n: n + "\n", "nothing follows its last blank line"),
        (lambda n: n + "\u2014 other.example/k\n", "not '— <key name>"),
    ],
)
def test_malformed_notes_are_refused_saying_what_is_wrong(mangle: object, problem: str) -> None:
    note = mangle(CP.to_signed_note(SIGNER))  # type: ignore[operator]
    with pytest.raises(ValueError, match=problem):
        Checkpoint.from_signed_note(note, [SIGNER.verifier_key])


def test_too_many_signature_lines_are_refused() -> None:
    line = WITNESS.signature_line(CP.to_note())
    note = CP.to_signed_note(SIGNER) + line * MAX_SIGNATURES
    with pytest.raises(ValueError, match="the limit is 100"):
        open_note(note, [SIGNER.verifier_key])
    assert open_note(CP.to_signed_note(SIGNER) + line * 15, [SIGNER.verifier_key])  # 16 sigs


def test_a_note_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(ValueError, match="valid UTF-8"):
        open_note(CP.to_signed_note(SIGNER).encode() + b"\xff\n", [SIGNER.verifier_key])


@pytest.mark.parametrize(
    ("vkey", "problem"),
    [
        ("example.com/log+cc714671+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea", "does not match"),
        (
            "example.com/log2+cc714670+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea",
            "does not match",
        ),
        ("example.com/log+cc714670+AtdamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea", "Ed25519"),
        (
            "example.com/log+cc714670+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1E",
            "NAME\\+HASH\\+KEY",
        ),
        (
            "example.com/log+cc71467+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea",
            "NAME\\+HASH\\+KEY",
        ),
        ("example.com/log", "NAME\\+HASH\\+KEY"),
        (
            "example.com/log+cc714670+AddamAGCsQq31Uv-08lkBzoO4XLz2qYjJa8CGmj3B1Ea",
            "not canonical",
        ),
        ("example com+cc714670+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea", "space"),
        ("+cc714670+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea", "empty"),
    ],
)
def test_bad_verifier_keys_are_refused(vkey: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        NoteVerifier.from_key(vkey)


def test_the_same_trusted_key_given_twice_is_one_key() -> None:
    note = CP.to_signed_note(SIGNER)
    opened = open_note(note, [SIGNER.verifier_key, SIGNER.verifier, SIGNER.verifier_key])
    assert opened.verified == (SIGNER.verifier,)


def test_key_names_are_checked() -> None:
    for bad in ("", "a b", "a+b", "a\u2003b", "a\nb", "a\x00b"):
        with pytest.raises(ValueError):
            NoteSigner(bad, RFC_SEED)
    with pytest.raises(ValueError, match="exactly 32 bytes, got 31"):
        NoteSigner(NAME, RFC_SEED[:31])
    with pytest.raises(TypeError):
        NoteSigner(NAME, RFC_SEED.hex())  # type: ignore[arg-type]


def test_note_text_is_checked_before_signing() -> None:
    with pytest.raises(ValueError, match="end with a newline"):
        sign_note("no newline", SIGNER)
    with pytest.raises(ValueError, match="U\\+001B"):
        sign_note("escape \x1b[31m\n", SIGNER)
    with pytest.raises(ValueError, match="share the key name"):
        sign_note("text\n", SIGNER, NoteSigner(NAME, RFC_SEED))


def test_the_signer_never_shows_or_pickles_its_seed() -> None:
    assert RFC_SEED.hex() not in repr(SIGNER) and RFC_SEED.hex() not in str(SIGNER)
    assert SIGNER.verifier_key in repr(SIGNER)
    assert not hasattr(SIGNER, "seed")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(SIGNER)
    with pytest.raises(TypeError):
        copy.copy(SIGNER)
    with pytest.raises(AttributeError):
        SIGNER.name = "other"  # type: ignore[misc]
