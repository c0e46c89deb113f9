"""Canon v1 (RFC 8785, integers exact) against an implementation we did not write.

The ``rfc8785`` package (Trail of Bits) is the oracle over the I-JSON domain (integers within
±(2^53-1), finite doubles, Unicode without lone surrogates); the RFC's own appendix vectors and
agentplane 0.22.0's pinned vectors are known answers; outside I-JSON (integers beyond 2^53),
where JCS has no answer, integers stay exact as agentplane writes them.
"""

from __future__ import annotations

import math
import os
import struct
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes
from agentplane_journal.core.canon_v1 import (
    _shortest,
    _tie_upper,
    agentplane_number,
    canonical_bytes_rfc8785,
    canonical_bytes_v1,
    es_number,
)
from agentplane_journal.core.ids import Digest

try:
    import rfc8785
except ImportError:  # pragma: no cover - the CI installs it (the `test` extra)
    rfc8785 = None


@pytest.fixture(scope="module")
def jcs() -> object:
    if rfc8785 is None:
        message = "the rfc8785 package is not installed (pip install rfc8785)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must check canon v1 against rfc8785: {message}")
        pytest.skip(message)
    return rfc8785


def _f(bits: int) -> float:
    value: float = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    return value


# --- RFC 8785 Appendix B: IEEE-754 bit patterns and their JCS text --------------------------

APPENDIX_B = [
    (0x0000000000000000, "0"),
    (0x8000000000000000, "0"),  # minus zero
    (0x0000000000000001, "5e-324"),  # min subnormal
    (0x8000000000000001, "-5e-324"),
    (0x7FEFFFFFFFFFFFFF, "1.7976931348623157e+308"),  # max double
    (0xFFEFFFFFFFFFFFFF, "-1.7976931348623157e+308"),
    (0x4340000000000000, "9007199254740992"),  # 2^53
    (0xC340000000000000, "-9007199254740992"),
    (0x4430000000000000, "295147905179352830000"),
    (0x44B52D02C7E14AF5, "9.999999999999997e+22"),
    (0x44B52D02C7E14AF6, "1e+23"),
    (0x44B52D02C7E14AF7, "1.0000000000000001e+23"),
    (0x444B1AE4D6E2EF4E, "999999999999999700000"),
    (0x444B1AE4D6E2EF4F, "999999999999999900000"),
    (0x444B1AE4D6E2EF50, "1e+21"),
    (0x3EB0C6F7A0B5ED8C, "9.999999999999997e-7"),
    (0x3EB0C6F7A0B5ED8D, "0.000001"),
    (0x41B3DE4355555553, "333333333.3333332"),
    (0x41B3DE4355555554, "333333333.33333325"),
    (0x41B3DE4355555555, "333333333.3333333"),
    (0x41B3DE4355555556, "333333333.3333334"),
    (0x41B3DE4355555557, "333333333.33333343"),
    (0xBECBF647612F3696, "-0.0000033333333333333333"),
    (0x43143FF3C1CB0959, "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), APPENDIX_B, ids=[t for _, t in APPENDIX_B])
def test_rfc8785_appendix_b_numbers(bits: int, text: str) -> None:
    assert es_number(_f(bits)) == text
    assert canonical_bytes_rfc8785([_f(bits)]) == f"[{text}]".encode()
    # agentplane's canon v1 writes the standard's text, except at Appendix B's one exact tie
    # (1424953923781206.25), where Rust's digits are the upper ones (agentplane's own
    # `interop22 canon` says 1424953923781206.3: tests/test_interop22.py)
    agentplane = AGENTPLANE_TIES.get(text, text)
    assert canonical_bytes_v1([_f(bits)]) == f"[{agentplane}]".encode()


#: RFC 8785 text -> agentplane 0.22's, for the doubles exactly halfway between two shortest
#: digit strings (agentplane's `canon` on these inputs, pinned: agentplane_number's docstring)
AGENTPLANE_TIES = {
    "1424953923781206.2": "1424953923781206.3",
    "2.9802322387695312e-8": "2.9802322387695313e-8",
    "1973340522371668.2": "1973340522371668.3",
    "-2.9802322387695312e-8": "-2.9802322387695313e-8",
}


@pytest.mark.parametrize(("rfc", "agentplane"), AGENTPLANE_TIES.items())
def test_exact_ties_take_agentplanes_upper_digits_in_canon_v1_only(
    rfc: str, agentplane: str
) -> None:
    x = float(rfc)
    assert es_number(x) == rfc and canonical_bytes_rfc8785({"x": x}) == f'{{"x":{rfc}}}'.encode()
    assert agentplane_number(x) == agentplane
    assert float(agentplane) == x  # the same double: only the spelling differs
    # the fast path (plain dicts) and the general path both take agentplane's digits
    assert canonical_bytes_v1({"x": x}) == f'{{"x":{agentplane}}}'.encode()
    assert canonical_bytes_v1({"x": [x, True]}) == f'{{"x":[{agentplane},true]}}'.encode()


@pytest.mark.parametrize("bits", [0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0xFFF0000000000000])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits: int) -> None:
    with pytest.raises(ValueError, match=r"value\.x: .*(NaN|Infinity)"):
        canonical_bytes_v1({"x": _f(bits)})


def test_rfc8785_section_3_2_2_sample() -> None:
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert canonical_bytes_v1(value) == expected


def test_rfc8785_section_3_2_3_sorting_by_utf16_code_units() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    order = [k for k in canonical_bytes_v1(value).decode().split('"')[1::4]]
    assert order == ["\\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


# --- agentplane 0.22.0's own vectors (src/core/canon.rs, src/core/id.rs) --------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (4.5, "4.5"),
        (0.002, "0.002"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1e30, "1e+30"),
        (1e-27, "1e-27"),
        (9_007_199_254_740_992.0, "9007199254740992"),
        (333_333_333.333_333_29, "333333333.3333333"),
        (9.999_999_999_999_997e22, "9.999999999999997e+22"),
        (5e-324, "5e-324"),
        (1.797_693_134_862_315_7e308, "1.7976931348623157e+308"),
        (-4.5, "-4.5"),
        (-1e30, "-1e+30"),
        # the examples: where canon v1 and the 0.4 canon part
        (1e16, "10000000000000000"),
        (100.0, "100"),
    ],
)
def test_agentplane_022_double_vectors(value: float, text: str) -> None:
    assert es_number(value) == text


def test_agentplane_022_mixed_number_shapes() -> None:
    value = {"big": 1e30, "frac": 4.5, "int": 100, "neg": -0.0, "small": 1e-7, "whole": 100.0}
    raw = canonical_bytes_v1(value)
    assert raw == b'{"big":1e+30,"frac":4.5,"int":100,"neg":0,"small":1e-7,"whole":100}'
    # ...and what the 0.4 canon writes for the same value, three members apart
    assert canonical_bytes(value) == (
        b'{"big":1e+30,"frac":4.5,"int":100,"neg":-0.0,"small":1e-7,"whole":100.0}'
    )


def test_agentplane_022_pinned_digests() -> None:
    # src/core/id.rs: SHA-256 pinned to values computed outside agentplane (and outside us).
    assert Digest.of(b"").hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert Digest.of(b"agentplane").hex() == (
        "c0f8f77669f4860960387db0dc9984894587bcfcc75d1846ffd3574563833443"
    )
    assert Digest.chain(Digest.of(b""), b"agentplane").hex() == (
        "171c5eddf30189b0efde9c71eb14f77685fab77d7750152d032f9e7cf4181159"
    )
    # canon.rs's sorted-keys guard, through the same hash
    raw = canonical_bytes_v1({"z": 1, "a": 2, "m": 3})
    assert raw == b'{"a":2,"m":3,"z":1}'
    assert Digest.of(raw) == Digest.of(canonical_bytes_v1({"a": 2, "m": 3, "z": 1}))


def test_keys_sort_by_utf16_code_unit_not_utf8_byte() -> None:
    text = canonical_bytes_v1({"\U00010000": 1, "\uffff": 2}).decode()
    assert text.index("\U00010000") < text.index("\uffff")


def test_integers_beyond_double_precision_stay_exact_and_distinct() -> None:
    for n in (2**53 + 1, 2**63 - 1, 2**64 - 1, -(2**63), -(2**53) - 1):
        assert canonical_bytes_v1(n) == str(n).encode()
        assert canonical_bytes_v1({"n": n}) == b'{"n":' + str(n).encode() + b"}"
    assert canonical_bytes_v1(2**53 + 1) != canonical_bytes_v1(2**53)
    assert canonical_bytes_v1(float(2**53)) == canonical_bytes_v1(2**53)


@pytest.mark.parametrize("n", [2**64, -(2**63) - 1])
def test_integers_beyond_64_bits_are_refused_with_their_path(n: int) -> None:
    with pytest.raises(ValueError, match=r"value\.a\[0\]: integer .* does not fit"):
        canonical_bytes_v1({"a": [n]})


def test_refusals_name_the_path() -> None:
    with pytest.raises(TypeError, match=r"payload\.x: object keys must be strings"):
        canonical_bytes_v1({"x": {1: 2}}, path="payload")
    with pytest.raises(ValueError, match=r"value\.s: string contains a lone surrogate"):
        canonical_bytes_v1({"s": "\ud800"})
    with pytest.raises(TypeError, match=r"value\[0\]: set is not JSON"):
        canonical_bytes_v1([set()])
    deep: object = 0
    for _ in range(MAX_DEPTH):
        deep = [deep]
    canonical_bytes_v1(deep)
    with pytest.raises(ValueError, match="nested more than"):
        canonical_bytes_v1([deep])


# --- properties against rfc8785 ------------------------------------------------------------

_MIN_NORMAL = sys.float_info.min
#: Every place a float's layout changes, in either canon, and its neighbours.
_BOUNDARIES = [
    0.0,
    -0.0,
    5e-324,
    _MIN_NORMAL,
    math.nextafter(_MIN_NORMAL, 0.0),  # the largest subnormal
    math.nextafter(_MIN_NORMAL, 1.0),
    1e-7,
    math.nextafter(1e-7, 1.0),
    math.nextafter(1e-6, 0.0),
    1e-6,
    1e-5,
    math.nextafter(1e-4, 0.0),
    1e-4,
    1.0,
    100.0,
    1e15,
    math.nextafter(1e16, 0.0),
    1e16,
    math.nextafter(1e16, math.inf),
    float(2**53 - 1),
    float(2**53),
    math.nextafter(1e21, 0.0),
    1e21,
    math.nextafter(1e21, math.inf),
    sys.float_info.max,
]
_FLOATS = st.one_of(
    st.sampled_from(_BOUNDARIES + [-x for x in _BOUNDARIES]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**53) + 1, 2**53 - 1).map(float),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),  # I-JSON's integers
    _FLOATS,
    st.text(),  # hypothesis's text holds no lone surrogates
)
_IJSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=24,
)


@settings(max_examples=200, deadline=None)
@given(value=_IJSON)
def test_matches_rfc8785_over_the_ijson_domain(jcs: object, value: object) -> None:
    assert canonical_bytes_rfc8785(value) == rfc8785.dumps(value)
    if not _has_tie(value):  # canon v1 parts from the standard only at exact ties
        assert canonical_bytes_v1(value) == rfc8785.dumps(value)


def _has_tie(value: object) -> bool:
    if type(value) is float and value != 0.0:
        return _tie_upper(abs(value), *_shortest(abs(value))) is not None
    if isinstance(value, dict):
        return any(_has_tie(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_tie(v) for v in value)
    return False


@settings(max_examples=150, deadline=None)
@given(x=_FLOATS)
@example(x=1e21)
@example(x=1e-7)
@example(x=-0.0)
@example(x=5e-324)
@example(x=float(2**53 - 1))
def test_every_float_matches_rfc8785_alone_and_nested(jcs: object, x: float) -> None:
    expected = rfc8785.dumps(x)
    assert es_number(x).encode() == expected
    # the C encoder's fast path (dicts of plain values) and the general path agree
    value = {"a": x, "b": [x, "s"]}
    assert canonical_bytes_rfc8785(value) == rfc8785.dumps(value)
    if not _has_tie(x):
        assert agentplane_number(x) == es_number(x)
        assert canonical_bytes_v1(value) == rfc8785.dumps(value)


@settings(max_examples=100, deadline=None)
@given(
    value=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text()),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=16,
    )
)
def test_without_floats_canon_v1_is_the_04_canon(value: object) -> None:
    """The two rules part only at floats: integers (exact, to u64), strings, keys agree."""
    assert canonical_bytes_v1(value) == canonical_bytes(value)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(-(2**63), 2**64 - 1))
def test_integers_are_exact_everywhere(n: int) -> None:
    assert canonical_bytes_v1([n]) == f"[{n}]".encode()
