"""The faster parses of export, verify-export and restore read exactly what the exact ones read.

``serde_value`` and ``body_text`` (exportfmt/body.py) read through a decoder built once,
``body_text`` takes the C writer unless a float below ``1e-4`` may be present, and
``jsonload.decode`` calls the C scanner straight: each is held here to its exact reference
on texts built to sit on those edges, types included (``1`` is not ``1.0``, ``0`` is not
``-0.0``). Pure: no database.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentplane_journal.core import jsonload
from agentplane_journal.core.record import decode_wire
from agentplane_journal.exportfmt.body import (
    _NUMBER_MINUS,
    _as_f64,
    _refuse_constant,
    _reordered,
    _serde_number,
    _write,
    body_text,
    serde_value,
)
from agentplane_journal.journal.restore_read import _wire

EDGES = [
    '{"a":-0}',
    '{"a": -0}',
    '{"a":[-0,0,-0.0]}',
    '{"a":1234567890123456789}',  # 19 digits: u64, int either way
    '{"a":-9223372036854775808}',  # i64::MIN
    '{"a":-9223372036854775809}',  # below i64: an f64 for serde_json
    '{"a":18446744073709551615}',  # u64::MAX
    '{"a":18446744073709551616}',  # beyond: an f64
    '{"a":\n 18446744073709551616}',  # whitespace before the token
    '{"a":[1,\t-99999999999999999999]}',
    '{"a":"-0 and 12345678901234567890 in a string"}',
    '{"a":1.0,"b":1,"c":true,"d":0.00001,"e":1e-7,"f":2.5E-5,"g":1e16}',
    '{"seq":1,"run":"01ARZ3NDEKTSV4RRFFQ69G5FAV","kind":"Note","text":"x","n":0.3333333333333333}',
    '{"a":{"b":[{"c":-0.0},{"d":100000000000000000000}]}}',
]


def _typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it, so ``1`` and ``1.0`` (and ``0`` and
    ``-0.0``) compare unequal."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    if type(value) is float:
        return ("float", math.copysign(1.0, value), value)
    return (type(value).__name__, value)


def _exact_serde(text: str) -> Any:
    return jsonload.loads(
        text, parse_int=_serde_number, parse_float=_as_f64, parse_constant=_refuse_constant
    )


@pytest.mark.parametrize("text", EDGES)
def test_serde_value_reads_what_the_per_token_parse_reads(text: str) -> None:
    assert _typed(serde_value(text)) == _typed(_exact_serde(text))
    assert _typed(serde_value(text.encode())) == _typed(_exact_serde(text))


@pytest.mark.parametrize("text", ["1234567890123456789012", " -0", "[-0]", "1e400"])
def test_serde_value_of_a_bare_value_is_exact_too(text: str) -> None:
    try:
        expected = _typed(_exact_serde(text))
    except ValueError:
        with pytest.raises(ValueError):
            serde_value(text)
        return
    assert _typed(serde_value(text)) == expected


@pytest.mark.parametrize("text", EDGES)
def test_body_text_writes_what_the_exact_writer_writes(text: str) -> None:
    out: list[str] = []
    _write(_reordered(_exact_serde(text)), out)  # every value through serde_json's layout
    assert body_text(text) == "".join(out)


@pytest.mark.parametrize("text", EDGES)
def test_restore_reads_the_wire_as_its_writer_meant(text: str) -> None:
    line = {"raw": text}
    assert _typed(_wire(line, 1)) == _typed(decode_wire(text))


@pytest.mark.parametrize(
    "text",
    [
        *['{"a":1}', ' {"a":1}', '{"a":1}\t', '{"a":1}x', "", "[", "1 2", '"x"', '{"a":NaN}'],
        *["[" * 300, "[" * 300 + "]" * 300],
    ],
)
def test_jsonload_decode_gives_the_verdict_of_loads(text: str) -> None:
    """The scanner called straight (no whitespace matching around it) accepts and refuses
    exactly what :func:`jsonload.loads` does, nesting bound included."""

    def verdict(read: Any) -> str:
        try:
            return repr(("ok", read(text)))
        except ValueError as exc:
            return repr((type(exc).__name__, str(exc)))

    assert verdict(lambda t: jsonload.decode(json.JSONDecoder(), t)) == verdict(jsonload.loads)


_DIGITS = str.maketrans("123456789", "000000000")

# A `-` only inside strings (dates, UUIDs: most real records) against one in a number, and
# strings the test takes for a number's (conservative: they only cost the exact path).
STRING_MINUS = [
    '{"t":"2026-12-05T07:10:00+00:00","id":"3f2b8a1e-7c4d-4e5f-9a0b-1c2d3e4f5a6b"}',
    '{"file":"name-e-5","a":1.5,"b":[0.3,2]}',  # `e-` after a letter is no exponent
    '{"a":"-","b":"--0","c":"x_1e-5"}',
]
NUMBER_MINUS = [
    '{"t":"2026-12-05","a":-0}',
    '{"t":"a-b","a":[1,2,-3]}',
    '{"t":"a-b",\t"a":\n -0.0}',
    '{"t":"a-b","x":2e-5}',
    '{"t":"a-b","x":2E-5}',
    '{"t":"a-b","x":1.5e-7}',
    '{"t":"a-b","x":[0,10E-1]}',
    '{"t":"a-b","x":-9223372036854775809}',
]
CONSERVATIVE = ['{"s":"a,-b"}', '{"s":"a -b"}', '{"s":"12e-5"}', '{"s":"1e-7c4d"}']


@pytest.mark.parametrize("text", STRING_MINUS + NUMBER_MINUS + CONSERVATIVE)
def test_the_minus_of_a_number_is_told_from_a_minus_in_a_string(text: str) -> None:
    assert (_NUMBER_MINUS.search(text) is None) == (text in STRING_MINUS)


@pytest.mark.parametrize("text", [t for t in EDGES if "0" * 20 not in t.translate(_DIGITS)])
@pytest.mark.parametrize("prefix", ["", '"note":"2026-12-05 a-b",'])
def test_body_text_given_the_parse_writes_what_the_exact_writer_writes(
    text: str, prefix: str
) -> None:
    """The fast path (``parsed`` given, as export gives it for a body without 20 digits in a
    row) writes what the exact writer writes, with a string's `-` beside the edges too."""
    text = "{" + prefix + text[1:]
    out: list[str] = []
    _write(_reordered(_exact_serde(text)), out)
    assert body_text(text, json.loads(text)) == "".join(out)


_numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(
    st.lists(st.one_of(_numbers, st.text(alphabet="-e0:,[ ", max_size=6)), min_size=1),
    st.sampled_from([(",", ":"), (", ", ": ")]),
)
def test_every_number_holding_a_minus_is_seen(values: list[Any], separators: Any) -> None:
    """Whatever the layout, a number written with a `-` (a sign, an exponent's) is found;
    the fast path is taken only where every `-` is a string's."""
    text = json.dumps({"v": values}, separators=separators)
    numeric = any(type(v) is not str and "-" in json.dumps(v) for v in values)
    if numeric:
        assert _NUMBER_MINUS.search(text) is not None
    out: list[str] = []
    _write(_reordered(_exact_serde(text)), out)
    assert body_text(text, json.loads(text)) == "".join(out)
