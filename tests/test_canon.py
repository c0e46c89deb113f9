"""Canonical JSON: known answers from wire-format.md and properties of the encoder."""

from __future__ import annotations

import decimal
import enum
import json
import math
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentplane_journal import EffectKey
from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes, format_float

# --- known answers -------------------------------------------------------------------------


def test_spec_example_sorts_keys_recursively_and_drops_whitespace() -> None:
    value = {"z": 1, "a": {"y": [2, 1], "b": None}}
    assert canonical_bytes(value) == b'{"a":{"b":null,"y":[2,1]},"z":1}'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # every example in wire-format.md
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e+16"),
        (1e-5, "0.00001"),
        (1e-7, "1e-7"),
        (1.2345e-7, "1.2345e-7"),
        (123456789012345680000.0, "1.2345678901234568e+20"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        # the layout's boundaries, pinned from the same rule
        (0.0, "0.0"),
        (9999999999999998.0, "9999999999999998.0"),  # k = 16, last plain
        (1.0000000000000002e16, "1.0000000000000002e+16"),
        (-1e16, "-1e+16"),
        (-1e15, "-1000000000000000.0"),
        (1e17, "1e+17"),
        (1e21, "1e+21"),
        (1e22, "1e+22"),
        (1e100, "1e+100"),
        (1e308, "1e+308"),
        (-1.7976931348623157e308, "-1.7976931348623157e+308"),
        (1e-4, "0.0001"),
        (9.999999999999999e-5, "0.00009999999999999999"),  # k = -4, last plain
        (1.5e-5, "0.000015"),
        (2.5e-5, "0.000025"),
        (-1e-5, "-0.00001"),
        (9.99999999999999e-6, "9.99999999999999e-6"),  # k = -5, first scientific
        (1e-6, "1e-6"),
        (-1e-7, "-1e-7"),
        (1e-100, "1e-100"),
        (-1e-100, "-1e-100"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),  # smallest normal
        (2.225073858507201e-308, "2.225073858507201e-308"),  # largest subnormal
        (1e-323, "1e-323"),
        (-5e-324, "-5e-324"),
        (1.5, "1.5"),
        # e-05 with a fraction: repr's mantissa holds a point that the plain layout drops.
        (1.5e-05, "0.000015"),
        (-1.5e-05, "-0.000015"),
        (-2.25e-05, "-0.0000225"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (123456.789, "123456.789"),
        (9007199254740993.0, "9007199254740992.0"),
    ],
)
def test_floats_are_laid_out_like_serde_json_1_0_151(value: float, text: str) -> None:
    assert format_float(value) == text
    assert canonical_bytes(value) == text.encode()
    assert canonical_bytes({"x": [value]}) == b'{"x":[' + text.encode() + b"]}"


def test_an_effect_key_over_a_large_float_uses_the_new_layout() -> None:
    # The replay divergence issue 13 is about: the key is derived over canonical args.
    args = {"amount": 1e16}
    assert canonical_bytes(args) == b'{"amount":1e+16}'
    assert EffectKey.derive(0, "forward", 0, 1, "pay", canonical_bytes(args)) == EffectKey.derive(
        0, "forward", 0, 1, "pay", b'{"amount":1e+16}'
    )
    assert EffectKey.derive(0, "forward", 0, 1, "pay", canonical_bytes(args)) != EffectKey.derive(
        0, "forward", 0, 1, "pay", b'{"amount":1e16}'
    )


def test_keys_sort_by_utf16_code_unit_across_the_astral_boundary() -> None:
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+E000 although its code point
    # is larger: code-point order would put U+E000 first.
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3, "\uffff": 4}
    assert canonical_bytes(value) == '{"a":3,"\U0001f600":2,"\ue000":1,"\uffff":4}'.encode()


def test_keys_below_the_surrogate_range_sort_by_code_point() -> None:
    value = {"b": 1, "B": 2, "é": 3, "a": 4, "": 5, "aa": 6}
    assert canonical_bytes(value) == '{"":5,"B":2,"a":4,"aa":6,"b":1,"é":3}'.encode()


@pytest.mark.parametrize(
    ("char", "escaped"),
    [
        ('"', b'\\"'),
        ("\\", b"\\\\"),
        ("\b", b"\\b"),
        ("\f", b"\\f"),
        ("\n", b"\\n"),
        ("\r", b"\\r"),
        ("\t", b"\\t"),
        ("\x00", b"\\u0000"),
        ("\x01", b"\\u0001"),
        ("\x0b", b"\\u000b"),
        ("\x1b", b"\\u001b"),
        ("\x1f", b"\\u001f"),
        ("\x7f", b"\x7f"),
        ("\u2028", "\u2028".encode()),
        ("\u2029", "\u2029".encode()),
        ("/", b"/"),
        ("é", "é".encode()),
        ("\U0001f600", "\U0001f600".encode()),
        ("\ufeff", "\ufeff".encode()),
    ],
)
def test_strings_escape_exactly_as_serde_json(char: str, escaped: bytes) -> None:
    assert canonical_bytes(char) == b'"' + escaped + b'"'
    assert canonical_bytes({char: 0}) == b'{"' + escaped + b'":0}'


def test_every_c0_control_is_escaped_in_lower_case_hex() -> None:
    short = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    for code in range(0x20):
        char = chr(code)
        expected = short.get(char, f"\\u{code:04x}")
        assert canonical_bytes(char) == f'"{expected}"'.encode()


def test_scalars_and_containers() -> None:
    assert canonical_bytes(None) == b"null"
    assert canonical_bytes(True) == b"true"
    assert canonical_bytes(False) == b"false"
    assert canonical_bytes([True, 1, False, 0]) == b"[true,1,false,0]"
    assert canonical_bytes((1, "a", None)) == b'[1,"a",null]'
    assert canonical_bytes({}) == b"{}"
    assert canonical_bytes([]) == b"[]"
    assert canonical_bytes({"a": [], "b": {}}) == b'{"a":[],"b":{}}'


def test_integers_at_the_i64_and_u64_limits_are_written_in_full() -> None:
    assert canonical_bytes(2**64 - 1) == b"18446744073709551615"
    assert canonical_bytes(-(2**63)) == b"-9223372036854775808"
    assert canonical_bytes(0) == b"0"
    assert canonical_bytes(-1) == b"-1"


def test_enum_subclasses_are_written_as_their_base_value() -> None:
    class Color(enum.IntEnum):
        RED = 7

    class Mode(enum.StrEnum):
        RETRY = "retry"

    assert canonical_bytes({"c": Color.RED, "m": Mode.RETRY}) == b'{"c":7,"m":"retry"}'


# --- refusals name the path ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1, 10**30])
def test_integers_beyond_64_bits_are_refused_not_rounded(bad: int) -> None:
    with pytest.raises(ValueError, match=r"^payload\.n: integer .* does not fit"):
        canonical_bytes({"n": bad}, path="payload")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_with_their_path(bad: float) -> None:
    with pytest.raises(ValueError, match=r"^payload\.items\[3\]: .*(NaN|Infinity)"):
        canonical_bytes({"items": [1, 2, 3, bad]}, path="payload")


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(TypeError, match=r"^payload\.a: object keys must be strings"):
        canonical_bytes({"a": {1: "x"}}, path="payload")
    with pytest.raises(TypeError, match=r"^value: object keys must be strings"):
        canonical_bytes({None: 1})


def test_a_lone_surrogate_in_a_value_is_refused_with_its_path() -> None:
    with pytest.raises(ValueError, match=r"^payload\.x\[1\]\.y: .*lone surrogate"):
        canonical_bytes({"x": ["ok", {"y": "a\ud800b"}]}, path="payload")


def test_a_lone_surrogate_in_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^payload\.x: object key .*lone surrogate"):
        canonical_bytes({"x": {"\udfff": 1, "b": 2}}, path="payload")


@pytest.mark.parametrize("bad", [{1, 2}, b"bytes", object(), 1j])
def test_values_that_are_not_json_are_refused_with_their_type(bad: object) -> None:
    with pytest.raises(TypeError, match=rf"^body\.k\[0\]: {type(bad).__name__} is not JSON"):
        canonical_bytes({"k": [bad]}, path="body")


def test_nesting_up_to_serde_jsons_limit_is_accepted_and_deeper_is_refused() -> None:
    ok: object = []
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    assert canonical_bytes(ok) == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    with pytest.raises(ValueError, match="nested more than 127 levels"):
        canonical_bytes([ok])


def test_a_self_referencing_value_is_refused_not_a_crash() -> None:
    loop: dict[str, object] = {}
    loop["me"] = loop
    with pytest.raises(ValueError, match="refers to itself"):
        canonical_bytes(loop)


# --- properties ------------------------------------------------------------------------------

_keys = st.text(max_size=6)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_keys, children, max_size=5),
    max_leaves=30,
)


def _reinsert_reversed(value: object) -> object:
    """The same value with every dict's insertion order reversed."""
    if isinstance(value, dict):
        return {k: _reinsert_reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reinsert_reversed(v) for v in value]
    return value


def _has_high_key_or_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(k and max(k) >= "\ud800" for k in value) or any(
            _has_high_key_or_float(v) for v in value.values()
        )
    if isinstance(value, list):
        return any(_has_high_key_or_float(v) for v in value)
    return False


@settings(max_examples=300)
@given(_json)
def test_canonical_bytes_do_not_depend_on_dict_insertion_order(value: object) -> None:
    assert canonical_bytes(_reinsert_reversed(value)) == canonical_bytes(value)


@settings(max_examples=300)
@given(_json)
def test_canonical_bytes_round_trip_through_a_json_parser(value: object) -> None:
    raw = canonical_bytes(value)
    assert json.loads(raw) == value
    assert canonical_bytes(json.loads(raw)) == raw  # canonical form is a fixed point


@settings(max_examples=300)
@given(_json)
def test_without_floats_or_astral_keys_the_bytes_match_pythons_sorted_compact_json(
    value: object,
) -> None:
    # json.dumps sorts by code point and writes floats Python's way; where neither matters
    # it is an independent implementation of the same rules.
    if _has_high_key_or_float(value):
        return
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_bytes(value) == expected.encode("utf-8")


def _expected_layout(x: float) -> str:
    """wire-format.md's float rule, written out independently of ``format_float``.

    The digits and point position come from ``decimal`` reading repr's text (the spec's
    "Python's repr digits"), then the three cases of the rule are applied literally.
    """
    sign, digit_tuple, exponent = decimal.Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    stripped = digits.lstrip("0")
    if not stripped:  # zero: serde_json writes 0.0 / -0.0
        return ("-" if sign else "") + "0.0"
    k = len(digits) + exponent - (len(digits) - len(stripped))  # value = 0.d x 10^k
    d = stripped.rstrip("0")
    n = len(d)
    if 0 < k <= 16:
        text = d + "0" * (k - n) + ".0" if n <= k else d[:k] + "." + d[k:]
    elif -5 < k <= 0:
        text = "0." + "0" * (-k) + d
    else:
        e = k - 1
        text = d[0] + ("." + d[1:] if n > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return ("-" if sign else "") + text


_SCIENTIFIC = re.compile(r"-?[1-9](\.[0-9]*[1-9])?e[-+][1-9][0-9]*")
_PLAIN = re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]+")
_bit_patterns = (
    st.integers(min_value=0, max_value=2**64 - 1)
    .map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0])
    .filter(math.isfinite)
)


def _check_layout(x: float) -> None:
    text = format_float(x)
    assert float(text) == x
    assert math.copysign(1.0, float(text)) == math.copysign(1.0, x)
    assert text == _expected_layout(x)
    if x == 0 or 1e-5 <= abs(x) < 1e16:
        assert _PLAIN.fullmatch(text), text
        assert not text.endswith("0") or text.endswith(".0"), text
    else:
        assert _SCIENTIFIC.fullmatch(text), text
        assert ("e+" in text) == (abs(x) >= 1e16), text
    # the digits are repr's shortest ones: same significant digits, same count
    digits = re.sub(r"e.*|[-.]", "", repr(abs(x))).strip("0")
    assert re.sub(r"e.*|[-+.]", "", text.partition("e")[0]).strip("0") == digits


@settings(max_examples=2000)
@given(_bit_patterns)
def test_float_text_from_random_bit_patterns_round_trips_and_follows_the_rule(x: float) -> None:
    _check_layout(x)


@settings(max_examples=1000)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_round_trips_and_follows_the_rule(x: float) -> None:
    _check_layout(x)


@pytest.mark.parametrize("power", range(-324, 309))
def test_every_power_of_ten_and_its_neighbours_follow_the_rule(power: int) -> None:
    x = float(f"1e{power}")
    for y in (x, math.nextafter(x, 0.0), math.nextafter(x, math.inf), -x):
        if math.isfinite(y):
            _check_layout(y)
