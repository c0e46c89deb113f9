"""Signed notes' rules, each held by a test that fails without it (tlog/note.py; the spec's
and Go's known answers are in tests/test_note.py).

Written against the mutants that survived the older tests (tools/mutation.py).
"""

from __future__ import annotations

import base64

import pytest

from agentplane_journal.tlog.note import (
    MAX_SIGNATURES,
    NoteSigner,
    NoteVerificationError,
    NoteVerifier,
    key_hash,
    open_note,
    sign_note,
)

SIGNER = NoteSigner("log", bytes(range(32)))
OTHER = NoteSigner("witness", bytes(range(1, 33)))
TEXT = "log\n1\nroot\n"


def test_a_public_key_is_exactly_32_bytes() -> None:
    for bad in (bytes(31), bytes(33), "k" * 32):
        with pytest.raises(ValueError, match="an Ed25519 public key is exactly 32 bytes"):
            key_hash("log", bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="an Ed25519 public key is exactly 32 bytes"):
            NoteVerifier("log", bad)  # type: ignore[arg-type]
    assert key_hash("log", bytearray(SIGNER.public_key)) == SIGNER.key_hash


def test_a_verifier_key_round_trips_and_its_shape_is_checked() -> None:
    verifier = NoteVerifier.from_key(SIGNER.verifier_key)
    assert verifier == SIGNER.verifier
    assert verifier.verifier_key == SIGNER.verifier_key
    hash_text = f"{SIGNER.key_hash:08x}"
    shape = "expected NAME+HASH+KEY (8 hex digits, then base64 of 0x01 and the public key)"
    for vkey in ("log", f"log+{hash_text}", f"+{hash_text}"):
        with pytest.raises(ValueError) as info:
            NoteVerifier.from_key(vkey)
        message = str(info.value)
        assert message in (
            f"{vkey!r} is not a verifier key: {shape}",
            f"{vkey!r} is not a verifier key: the key name is empty",
        )
    with pytest.raises(ValueError) as info:
        NoteVerifier.from_key(f"log+{hash_text}")
    assert str(info.value) == f"'log+{hash_text}' is not a verifier key: {shape}"


def test_a_verifier_refuses_a_signature_of_the_wrong_length() -> None:
    verifier = SIGNER.verifier
    signature = base64.b64decode(SIGNER.signature_line(TEXT).split(" ")[2])[4:]
    assert verifier.verify(TEXT.encode(), signature)
    for bad in (b"", signature[:63], signature + b"\x00", bytes(65)):
        assert verifier.verify(TEXT.encode(), bad) is False


@pytest.mark.parametrize("bad", ["\x01", "\x00", "\ud800", "\udabc", "\udfff"])
def test_a_control_character_or_lone_surrogate_is_refused_in_text_and_note(bad: str) -> None:
    text = f"log{bad}\n1\nroot\n"
    with pytest.raises(ValueError) as info:
        sign_note(text, SIGNER)
    assert str(info.value).startswith("note text contains U+")
    with pytest.raises(ValueError) as info:
        open_note(sign_note(TEXT, SIGNER).replace("root", "root" + bad), [SIGNER.verifier_key])
    assert str(info.value).startswith("the note contains U+")
    for fine in ("\ud7ff", "\ue000", "\x7f"):
        assert open_note(sign_note(f"log{fine}\n", SIGNER), [SIGNER.verifier]).text == (
            f"log{fine}\n"
        )


def test_a_note_whose_text_is_one_newline_opens() -> None:
    note = sign_note("\n", SIGNER)
    assert note.startswith("\n\n")
    assert open_note(note, [SIGNER.verifier]).text == "\n"


def test_the_largest_number_of_signature_lines_is_accepted_and_one_more_refused() -> None:
    signers = [SIGNER] + [NoteSigner(f"w{i}", bytes([i]) * 32) for i in range(MAX_SIGNATURES)]
    note = sign_note(TEXT, *signers[:MAX_SIGNATURES])
    assert len(open_note(note, [SIGNER.verifier]).unverified) == MAX_SIGNATURES - 1
    with pytest.raises(ValueError, match=f"the note has {MAX_SIGNATURES + 1} signature lines"):
        open_note(sign_note(TEXT, *signers), [SIGNER.verifier])


def test_a_malformed_signature_line_is_named_by_its_number() -> None:
    good = sign_note(TEXT, SIGNER)
    with pytest.raises(ValueError) as info:
        open_note(TEXT + "\n- log AAAA\n", [SIGNER.verifier])
    assert str(info.value) == "signature line 1 does not start with an em dash and a space ('— ')"
    for bad_line, problem in (
        ("\u2014 witness\n", "is not '— <key name> <base64 signature>'"),
        ("\u2014 witness \n", "is not '— <key name> <base64 signature>'"),
        (
            "\u2014 witness AAAAAA==\n",
            "the signature is too short to hold a key ID and a signature",
        ),
    ):
        with pytest.raises(ValueError) as info:
            open_note(good + bad_line, [SIGNER.verifier])
        assert str(info.value).startswith("signature line 2")
        assert problem in str(info.value)


def test_a_five_byte_signature_blob_of_an_unknown_key_is_listed_not_refused() -> None:
    blob = base64.b64encode(b"\x00\x00\x00\x07\x01").decode()
    note = sign_note(TEXT, SIGNER) + f"\u2014 witness {blob}\n"
    opened = open_note(note, [SIGNER.verifier])
    assert opened.unverified == (("witness", 7),)


def test_a_failed_trusted_signature_names_the_signers_so_far() -> None:
    note = sign_note(TEXT, OTHER, SIGNER).replace("log\n1", "log\n2", 1)
    with pytest.raises(NoteVerificationError) as info:
        open_note(note, [SIGNER.verifier, OTHER.verifier])
    assert info.value.names == ("witness",)
    assert str(info.value) == (
        f"the signature by trusted key 'witness' ({OTHER.key_hash:08x}) does not verify: the "
        "note was altered, or it was not signed by that key"
    )


def test_a_note_no_trusted_key_signed_names_every_signer() -> None:
    third = NoteSigner("third", bytes(range(2, 34)))
    with pytest.raises(NoteVerificationError) as info:
        open_note(sign_note(TEXT, OTHER, third), [SIGNER.verifier])
    assert info.value.names == ("witness", "third")
    assert str(info.value) == (
        f"no trusted key signed this note (it is signed by 'witness' ({OTHER.key_hash:08x}), "
        f"'third' ({third.key_hash:08x})); trust the log's verifier key to check it"
    )


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (7, "a key name is a str, not int"),
        ("", "the key name is empty"),
        ("a+b", "key name 'a+b' contains '+', which the verifier key format reserves"),
        ("a b", "key name 'a b' contains a space or control character (U+0020)"),
        ("a\x01", "key name 'a\\x01' contains a space or control character (U+0001)"),
        ("a\ud800", "key name 'a\\ud800' is not valid Unicode (lone surrogate)"),
        ("a\udfff", "key name 'a\\udfff' is not valid Unicode (lone surrogate)"),
    ],
)
def test_a_bad_key_name_is_refused_saying_why(name: object, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        NoteSigner(name, bytes(32))  # type: ignore[arg-type]
    assert str(info.value) == problem
    with pytest.raises(ValueError) as info:
        NoteVerifier(name, SIGNER.public_key)  # type: ignore[arg-type]
    assert str(info.value) == problem
    if isinstance(name, str) and name and "+" not in name:
        vkey = SIGNER.verifier_key.replace("log+", f"{name}+", 1)
        with pytest.raises(ValueError) as info:
            NoteVerifier.from_key(vkey)
        assert str(info.value) == f"{vkey!r} is not a verifier key: {problem}"


def test_names_beside_the_surrogates_are_fine() -> None:
    for name in ("a\ud7ff", "a\ue000", "\u00e9"):
        assert NoteSigner(name, bytes(32)).name == name
