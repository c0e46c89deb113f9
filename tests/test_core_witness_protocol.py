"""The tlog-witness add-checkpoint exchange as data (tlog/witness_protocol.py): the request
body and what each answer means, each rule held by a test that fails without it.

Written against the mutants that survived tests/test_witness.py (tools/mutation.py
witness_protocol). Pure: answers are literal bytes, cosigned here; no network, no store.
"""

from __future__ import annotations

import base64

import pytest

from agentplane_journal.core.ids import Digest
from agentplane_journal.errors import (
    WitnessForkedError,
    WitnessStaleError,
    WitnessUnavailableError,
)
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosignature, Cosigner
from agentplane_journal.tlog.witness_protocol import (
    MAX_PROOF_LINES,
    UINT64_MAX,
    add_checkpoint_body,
    read_answer,
)

W1 = Cosigner("witness.example/w1", bytes(range(1, 33)))
W2 = Cosigner("witness.example/w2", bytes(range(2, 34)))
CP = Checkpoint("example.com/log", 8, Digest.of(b"root"))
NOTE = CP.to_note()
SIZE = "text/x.tlog.size"


def _answer(
    status: int, body: bytes | str = b"", *, old: int = 4, ctype: str | None = None
) -> Cosignature:
    raw = body.encode() if isinstance(body, str) else body
    return read_answer("w1", W1.key, CP, old, status, ctype, raw)


# -- the request -----------------------------------------------------------------------------


def test_the_body_is_old_size_proof_lines_blank_line_note() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"b")
    body = add_checkpoint_body(3, [a, b], "note\n")
    ha, hb = (base64.b64encode(bytes(h)).decode() for h in (a, b))
    assert body == f"old 3\n{ha}\n{hb}\n\nnote\n".encode()
    assert add_checkpoint_body(0, [], "n\n") == b"old 0\n\nn\n"
    assert add_checkpoint_body(0, [], "é") == "old 0\n\né".encode()


@pytest.mark.parametrize("old", [-1, True, False, 1.0, "3", None])
def test_an_old_size_that_is_not_a_uint_is_refused(old: object) -> None:
    with pytest.raises(ValueError, match="old size"):
        add_checkpoint_body(old, [], "n\n")  # type: ignore[arg-type]


def test_a_proof_is_at_most_63_hashes() -> None:
    hashes = [Digest.of(bytes([i])) for i in range(MAX_PROOF_LINES + 1)]
    assert MAX_PROOF_LINES == 63
    body = add_checkpoint_body(1, hashes[:MAX_PROOF_LINES], "n\n")
    assert body.count(b"\n") == 1 + MAX_PROOF_LINES + 2
    with pytest.raises(ValueError, match="at most 63"):
        add_checkpoint_body(1, hashes, "n\n")


# -- 200: a cosignature from the witness's own key -------------------------------------------


def test_the_newest_valid_cosignature_from_the_key_is_returned() -> None:
    old, new = W1.cosign(NOTE, 1_700_000_000), W1.cosign(NOTE, 1_700_000_100)
    assert _answer(200, f"{old.line}\n{new.line}\n") == new
    assert _answer(200, f"{new.line}\n{old.line}\n") == new


def test_blank_noise_and_other_keys_lines_are_skipped_not_the_end() -> None:
    good = W1.cosign(NOTE, 1_700_000_000)
    other = W2.cosign(NOTE, 1_700_000_500)
    noise = "— other " + base64.b64encode(bytes(70)).decode()
    body = f"\n  \n{noise}\nnot a signature line\n{other.line}\n\n{good.line}\n"
    assert _answer(200, body) == good


def test_a_cosignature_at_time_zero_or_over_another_checkpoint_is_not_one() -> None:
    zero = W1.cosign(NOTE, 0)
    assert W1.key.verify(NOTE, zero)  # it verifies; the spec's time 0 means no timestamp
    with pytest.raises(WitnessUnavailableError, match="without a valid"):
        _answer(200, zero.line)
    other = W1.cosign(Checkpoint("example.com/log", 9, Digest.of(b"root")).to_note(), 5)
    with pytest.raises(WitnessUnavailableError, match="without a valid"):
        _answer(200, other.line)
    assert _answer(200, f"{zero.line}\n{W1.cosign(NOTE, 1).line}").timestamp == 1


def test_bytes_that_are_not_utf8_do_not_crash_the_reader() -> None:
    good = W1.cosign(NOTE, 7)
    assert _answer(200, b"\xff\xfe\n" + good.line.encode()) == good
    with pytest.raises(WitnessUnavailableError, match="HTTP 500"):
        _answer(500, b"\xff")


def test_an_empty_200_is_unavailable_naming_the_witness_and_its_key() -> None:
    with pytest.raises(WitnessUnavailableError) as caught:
        _answer(200)
    assert caught.value.witness == "w1" and W1.key.vkey in str(caught.value)


@pytest.mark.parametrize("status", [201, 204, 202])
def test_another_2xx_is_no_cosignature(status: int) -> None:
    with pytest.raises(WitnessUnavailableError, match=f"HTTP {status}"):
        _answer(status, W1.cosign(NOTE, 7).line)


# -- 409: stale, with the witness's size -----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "size"),
    [("0", 0), ("12\n", 12), (" 7 \n", 7), (str(UINT64_MAX), UINT64_MAX), ("10", 10)],
)
def test_a_409_with_a_uint64_body_is_stale_at_that_size(body: str, size: int) -> None:
    with pytest.raises(WitnessStaleError) as caught:
        _answer(409, body, ctype=SIZE)
    assert caught.value.witness_size == size and caught.value.witness == "w1"


@pytest.mark.parametrize(
    "body",
    [
        "",
        " \n",
        "012",
        "00",
        "-1",
        "+5",
        "1_000",
        "1e3",
        "٣",  # an Arabic-Indic digit: isdigit(), and int() would read it
        "²",
        str(UINT64_MAX + 1),
        str(UINT64_MAX * 10),
        "9" * 21,
        "1" + "0" * 20,
        "<html>busy</html>",
    ],
)
def test_a_409_whose_body_is_not_a_uint64_is_unavailable_never_stale(body: str) -> None:
    with pytest.raises(WitnessUnavailableError, match="not a tree size") as caught:
        _answer(409, body, ctype=SIZE)
    assert caught.value.witness == "w1"


@pytest.mark.parametrize(
    "ctype", [None, "", SIZE, "TEXT/X.TLOG.SIZE", f" {SIZE} ", f"{SIZE}; charset=utf-8"]
)
def test_a_409_size_is_read_under_its_media_type_or_none(ctype: str | None) -> None:
    with pytest.raises(WitnessStaleError):
        _answer(409, "3", ctype=ctype)


@pytest.mark.parametrize("ctype", ["text/plain", "text/html; charset=utf-8", "x.tlog.size"])
def test_a_409_under_another_media_type_is_unavailable(ctype: str) -> None:
    with pytest.raises(WitnessUnavailableError, match="not a tree size"):
        _answer(409, "3", ctype=ctype)


# -- 422, 400 and the rest -------------------------------------------------------------------


def test_a_422_is_a_fork_whatever_the_old_size() -> None:
    for old in (0, 4, 8, 9):
        with pytest.raises(WitnessForkedError, match="inconsistent") as caught:
            _answer(422, old=old)
        assert caught.value.witness == "w1"


def test_a_400_is_a_fork_only_when_the_old_size_is_above_the_checkpoint() -> None:
    with pytest.raises(WitnessForkedError, match="shrank") as forked:
        _answer(400, old=CP.size + 1)
    assert forked.value.witness == "w1"
    for old in (CP.size, CP.size - 1, 0):
        with pytest.raises(WitnessUnavailableError, match="400") as unavailable:
            _answer(400, old=old)
        assert unavailable.value.witness == "w1"


def test_a_fork_class_size_on_another_status_is_no_fork() -> None:
    with pytest.raises(WitnessUnavailableError, match="HTTP 401"):
        _answer(401, old=CP.size + 1)
    with pytest.raises(WitnessUnavailableError, match="403"):
        _answer(403, old=CP.size + 1)


def test_403_and_404_say_what_to_configure() -> None:
    with pytest.raises(WitnessUnavailableError, match="log key") as forbidden:
        _answer(403)
    with pytest.raises(WitnessUnavailableError, match=r"origin 'example\.com/log'") as unknown:
        _answer(404)
    assert forbidden.value.witness == unknown.value.witness == "w1"


def test_an_answer_is_quoted_on_one_line_stripped_and_cut_at_200_characters() -> None:
    with pytest.raises(WitnessUnavailableError) as caught:
        _answer(500, "  first\nsecond\n\n")
    assert str(caught.value) == "witness w1: it answered HTTP 500: 'first second'"
    with pytest.raises(WitnessUnavailableError) as long:
        _answer(503, "y" + "x" * 300)
    assert str(long.value) == "witness w1: it answered HTTP 503: " + repr("y" + "x" * 199)
    with pytest.raises(WitnessUnavailableError) as bad:
        _answer(400, " a\nb ", old=1)
    assert str(bad.value).endswith(": 'a b'")
    with pytest.raises(WitnessUnavailableError) as junk:
        _answer(409, " <html>\nbusy ")
    assert str(junk.value).endswith(": '<html> busy'")
