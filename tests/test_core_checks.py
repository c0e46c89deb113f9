"""The argument checks' rules (core/checks.py), each held by a test that fails without it.

Written against the mutants that survived (tools/mutation.py checks). Pure.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentplane_journal.core.checks import (
    MAX_I64,
    MAX_KEY_ID_BYTES,
    MAX_LABEL_BYTES,
    check_int,
    check_key_id,
    check_label,
    check_run,
    check_text,
    check_ttl,
    is_int,
    lease_expiry,
)
from agentplane_journal.core.ids import RunId


def test_the_limits_are_the_documented_ones() -> None:
    assert (MAX_I64, MAX_LABEL_BYTES, MAX_KEY_ID_BYTES) == (2**63 - 1, 1024, 256)


def test_is_int_refuses_bools_and_other_numbers() -> None:
    assert is_int(0) and is_int(-5) and is_int(2**70)
    assert not is_int(True) and not is_int(1.0) and not is_int("1")


@pytest.mark.parametrize("value", ["Note", "caf\u00e9", "a b", "x" * 1024, "\u00e9" * 512])
def test_a_label_of_printable_text_within_the_limit_is_accepted(value: str) -> None:
    assert check_label(value, "kind") == value


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("", ValueError, "kind must not be empty"),
        ("   ", ValueError, "kind must not be empty"),
        ("\u3000", ValueError, "kind must not be empty"),
        ("x" * 1025, ValueError, "kind is 1025 bytes in UTF-8; the limit is 1024"),
        ("\u00e9" * 513, ValueError, "kind is 1026 bytes in UTF-8; the limit is 1024"),
        ("a\nb", ValueError, "kind contains the control character U+000A; it must be one line"),
        ("\u00e9\x1b[31m", ValueError, "kind contains the control character U+001B"),
        ("\u00e9\x7f", ValueError, "kind contains the control character U+007F"),
        ("a\ud800", ValueError, "kind is not valid Unicode (it contains a lone surrogate)"),
        (b"Note", TypeError, "kind must be a str, not bytes"),
        (None, TypeError, "kind must be a str, not NoneType"),
    ],
)
def test_a_bad_label_is_refused_naming_it(value: object, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        check_label(value, "kind")
    assert str(info.value) == message or str(info.value).startswith(message)


def test_a_label_subclass_of_str_takes_the_careful_path() -> None:
    class Text(str):
        pass

    assert check_label(Text("Note"), "kind") == "Note"
    with pytest.raises(ValueError, match="control character"):
        check_label(Text("a\tb"), "kind")


def test_a_key_id_is_a_label_of_at_most_256_bytes() -> None:
    assert check_key_id("k" * 256) == "k" * 256
    with pytest.raises(ValueError, match="key_id is 257 bytes in UTF-8; the limit is 256"):
        check_key_id("k" * 257)
    with pytest.raises(ValueError, match="key_id is 258 bytes"):
        check_key_id("\u00e9" * 129)
    with pytest.raises(ValueError, match="key_id must not be empty"):
        check_key_id("")
    assert check_label("x" * 20, "y", max_bytes=20) == "x" * 20
    with pytest.raises(ValueError, match="y is 21 bytes in UTF-8; the limit is 20"):
        check_label("x" * 21, "y", max_bytes=20)


def test_an_int_is_checked_within_its_bounds() -> None:
    assert check_int(0, "n") == 0
    assert check_int(MAX_I64, "n") == MAX_I64
    assert check_int(5, "n", minimum=5, maximum=5) == 5
    for value, lo, hi in ((-1, 0, MAX_I64), (MAX_I64 + 1, 0, MAX_I64), (4, 5, 9), (10, 5, 9)):
        with pytest.raises(ValueError) as info:
            check_int(value, "n", minimum=lo, maximum=hi)
        assert str(info.value) == f"n must be between {lo} and {hi}, got {value}"
    for bad in (True, 1.0, "1", None):
        with pytest.raises(TypeError) as type_info:
            check_int(bad, "n")
        assert str(type_info.value) == f"n must be an integer, not {type(bad).__name__}"


def test_text_is_refused_empty_with_nul_a_surrogate_or_too_long() -> None:
    assert check_text("a", "t") == "a"
    assert check_text("", "t", allow_empty=True) == ""
    assert check_text(" ", "t", allow_empty=True) == " "
    assert check_text("abc", "t", max_len=3) == "abc"
    cases: list[tuple[object, dict[str, object], type, str]] = [
        (1, {}, TypeError, "t must be a string, not int"),
        ("", {}, ValueError, "t must not be empty"),
        (" \t", {}, ValueError, "t must not be empty"),
        ("a\x00", {}, ValueError, "t must not contain NUL characters"),
        ("\x00", {"allow_empty": True}, ValueError, "t must not contain NUL characters"),
        ("a\udc00", {}, ValueError, "t is not valid Unicode (it contains a lone surrogate)"),
        ("abcd", {"max_len": 3}, ValueError, "t is 4 characters long; the limit is 3"),
    ]
    for value, options, error, message in cases:
        with pytest.raises(error) as info:
            check_text(value, "t", **options)  # type: ignore[arg-type]
        assert str(info.value) == message


def test_a_run_is_a_run_id_or_its_text() -> None:
    run = RunId.generate()
    assert check_run(run) is run
    assert check_run(str(run)) == run
    with pytest.raises(ValueError):
        check_run("run_x")
    with pytest.raises(TypeError, match="run must be a RunId or its text form, not bytes"):
        check_run(str(run).encode())
    with pytest.raises(TypeError, match="parent must be a RunId or its text form, not int"):
        check_run(1, "parent")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1, 1),
        (30, 30),
        (1.9, 1),
        (2.0, 2),
        (timedelta(seconds=1), 1),
        (timedelta(seconds=2, milliseconds=999), 2),
        (MAX_I64, MAX_I64),
    ],
)
def test_a_ttl_is_whole_seconds_truncated(value: object, seconds: int) -> None:
    assert check_ttl(value) == seconds
    assert type(check_ttl(value)) is int


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "ttl must be at least 1 second, got 0 in whole seconds"),
        (-3, ValueError, "ttl must be at least 1 second, got -3 in whole seconds"),
        (0.5, ValueError, "ttl must be at least 1 second, got 0 in whole seconds"),
        (-1.5, ValueError, "ttl must be at least 1 second, got -1 in whole seconds"),
        (timedelta(milliseconds=500), ValueError, "got 0 in whole seconds"),
        (timedelta(seconds=-1, milliseconds=500), ValueError, "got 0 in whole seconds"),
        (timedelta(seconds=-2), ValueError, "got -2 in whole seconds"),
        (float("inf"), ValueError, "ttl must be a finite number of seconds, got inf"),
        (float("nan"), ValueError, "ttl must be a finite number of seconds, got nan"),
        (True, TypeError, "ttl (whole seconds) must be an integer, not bool"),
        ("5", TypeError, "ttl (whole seconds) must be an integer, not str"),
        (MAX_I64 + 1, ValueError, "ttl (whole seconds) must be between 1 and"),
    ],
)
def test_a_ttl_below_a_second_or_not_a_number_is_refused(
    value: object, error: type, message: str
) -> None:
    with pytest.raises(error) as info:
        check_ttl(value)
    assert message in str(info.value)


def test_a_lease_expiry_must_fit_a_bigint() -> None:
    assert lease_expiry(10, 5) == 15
    assert lease_expiry(MAX_I64 - 5, 5) == MAX_I64
    with pytest.raises(ValueError) as info:
        lease_expiry(MAX_I64 - 5, 6)
    assert str(info.value) == (
        "ttl 6 is too long: now + ttl must fit a signed 64-bit integer (at most 5 seconds from now)"
    )
