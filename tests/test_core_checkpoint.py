"""Checkpoint notes' rules, each held by a test that fails without it (tlog/checkpoint.py;
the round trips and the 0.4.0 empty note are in tests/test_checkpoint.py).

Written against the mutants that survived the older tests (tools/mutation.py).
"""

from __future__ import annotations

import base64

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion
from agentplane_journal.tlog.merkle import EMPTY_ROOT
from agentplane_journal.tlog.note import NoteSigner, sign_note

ROOT = Digest.of(b"root")
ROOT64 = base64.b64encode(bytes(ROOT)).decode()


@pytest.mark.parametrize(
    ("size", "problem"),
    [
        ("", "the size line is empty"),
        (" 1", "size ' 1' has surrounding space"),
        ("+1", "size '+1' has a sign"),
        ("-1", "size '-1' has a sign"),
        ("X1", "size 'X1' has a character that is not an ASCII digit"),
        ("1X", "size '1X' has a character that is not an ASCII digit"),
        ("\u0661", "size '\u0661' has a character that is not an ASCII digit"),
        ("01", "size '01' has a leading zero"),
    ],
)
def test_each_second_spelling_of_a_size_is_refused_naming_its_rule(size: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        Checkpoint.from_note(f"log\n{size}\n{ROOT64}\n")
    assert str(info.value).startswith(f"checkpoint note: {problem}; the size is")


@pytest.mark.parametrize(
    ("origin", "problem"),
    [
        ("", "the origin line is empty"),
        ("a\tb", "the origin 'a\\tb' contains the control character U+0009"),
        ("a\x7fb", "the origin 'a\\x7fb' contains the control character U+007F"),
    ],
)
def test_an_origin_that_is_empty_or_holds_a_control_character_is_refused(
    origin: str, problem: str
) -> None:
    with pytest.raises(ValueError) as info:
        Checkpoint.from_note(f"{origin}\n1\n{ROOT64}\n")
    assert str(info.value) == f"checkpoint note: {problem}"
    with pytest.raises(ValueError) as info:
        Checkpoint(origin, 1, ROOT)
    assert str(info.value) == f"checkpoint origin: {problem}"


def test_the_accepted_spellings() -> None:
    for size in ("0", "1", "10", str(2**64 - 1)):
        root = EMPTY_ROOT if size == "0" else ROOT
        text = f"log \u00e9\n{size}\n{base64.b64encode(bytes(root)).decode()}\n"
        assert Checkpoint.from_note(text).to_note() == text


def test_an_empty_extension_line_in_a_signed_note_is_refused_as_an_extension() -> None:
    signer = NoteSigner("log", bytes(range(32)))
    text = sign_note(Checkpoint("log", 1, ROOT).to_note() + "\n", signer)
    with pytest.raises(ValueError, match="the body has 1 extension line"):
        Checkpoint.from_signed_note(text, [signer.verifier_key])
    two = sign_note(Checkpoint("log", 1, ROOT).to_note() + "x\ny\n", signer)
    with pytest.raises(ValueError, match="the body has 2 extension line"):
        Checkpoint.from_signed_note(two, [signer.verifier_key])
    plain = Checkpoint("log", 1, ROOT).to_signed_note(signer)
    assert Checkpoint.from_signed_note(plain, [signer.verifier_key]) == Checkpoint("log", 1, ROOT)


@pytest.mark.parametrize("bad", ["1", 1.0, None, True])
def test_an_inclusions_index_and_size_are_ints(bad: object) -> None:
    for name in ("index", "size"):
        values = {"index": 0, "size": 1, name: bad}
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            Inclusion(values["index"], values["size"], ROOT, ())  # type: ignore[arg-type]
