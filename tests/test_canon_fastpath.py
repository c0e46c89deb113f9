"""The append path's cheap cases are the general cases, byte for byte and refusal for refusal.

``canonical_bytes`` writes the common value through json's C encoder after one walk
(``canon._plain``), ``check_label`` accepts printable ASCII without its per-character walk,
and ``Record.seal`` builds its record without the frozen ``__init__``. None of that may
change a byte, a hash or an error: shown here against the general encoder, against an
independent restatement of wire-format.md's rules, and against the label check as it was.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import inspect
import json
import math
import pickle
import unicodedata
from collections import OrderedDict, defaultdict
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentplane_journal import Append, Digest, Record, RunId
from agentplane_journal.core import canon as canon
from agentplane_journal.core.append import RECORD_VERSION, RESERVED_MEMBERS
from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes
from agentplane_journal.core.checks import MAX_LABEL_BYTES, check_label
from agentplane_journal.core.ids import PHASES, CaseId, EffectKey, validate_step

pytestmark = pytest.mark.slow

RUN = RunId.parse("run_01J9Z8Y7X6W5V4T3S2R1Q0P9NM")
PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    pass


class Items(list):  # type: ignore[type-arg]
    pass


# --- an independent restatement of wire-format.md's "Canonical bytes" ---------------------

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Refused(Exception):
    """The spec refuses this value."""


def _spec_float(x: float) -> str:
    if not math.isfinite(x):
        raise Refused("NaN and the infinities are refused")
    sign, digit_tuple, exponent = decimal.Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return ("-" if sign else "") + "0.0"
    k = len(digits) + exponent  # value = 0.d x 10^k (leading zeros already stripped)
    d = digits.rstrip("0")
    n = len(d)
    if 0 < k <= 16:
        text = d + "0" * (k - n) + ".0" if n <= k else d[:k] + "." + d[k:]
    elif -5 < k <= 0:
        text = "0." + "0" * (-k) + d
    else:
        e = k - 1
        text = d[0] + ("." + d[1:] if n > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return ("-" if sign else "") + text


def _spec_string(s: str) -> str:
    out = []
    for ch in s:
        if "\ud800" <= ch <= "\udfff":
            raise Refused("lone surrogate")
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def spec(value: object, depth: int = 1) -> str:
    """The spec's canonical JSON of ``value``, written from the rules, not from canon.py."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if not -(2**63) <= value <= 2**64 - 1:
            raise Refused("integer beyond 64 bits")
        return str(int(value))
    if isinstance(value, float):
        return _spec_float(float(value))
    if isinstance(value, str):
        return _spec_string(value)
    if isinstance(value, dict | list | tuple) and depth > MAX_DEPTH:
        raise Refused("too deep")
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Refused("non-string key")
        for k in value:
            _spec_string(k)  # a surrogate key is refused too
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(_spec_string(k) + ":" + spec(value[k], depth + 1) for k in keys) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(spec(item, depth + 1) for item in value) + "]"
    raise Refused(f"{type(value).__name__} is not JSON")


# --- values: the tricky cases on purpose ------------------------------------------------------

_CHARS = st.one_of(
    st.characters(codec="utf-8"),  # any scalar value, astral included
    st.sampled_from(list('"\\/\b\f\n\r\t\x00\x01\x1f\x7f\x85\u2028\u2029')),
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),  # sorts differently in UTF-16
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates: refused
)
_TEXT = st.text(_CHARS, max_size=8) | st.text(max_size=8)
_ASCII_KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=6)
_KEYS = _ASCII_KEYS | _TEXT
_ODD_KEYS = st.one_of(st.integers(-3, 3), st.floats(), st.booleans(), st.none())
_FLOATS = st.one_of(
    st.floats(),  # NaN and the infinities included
    st.sampled_from(
        [0.0, -0.0, 1e-4, 9.999e-5, 1e-5, 1e-7, 5e-324, 1e15, 1e16, 1.7976931348623157e308]
    ),
    st.floats(min_value=1e-12, max_value=1e-3),
)
_INTS = st.one_of(
    st.integers(-(2**64), 2**65),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    _FLOATS,
    _TEXT,
    st.sampled_from([Colour.RED, Level.HIGH, Ratio(0.5), Ratio(1e-7)]),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=2).map(Items),
        st.dictionaries(_KEYS, children, max_size=4),
        st.dictionaries(_ASCII_KEYS, children, max_size=4),
        st.dictionaries(_KEYS, children, max_size=2).map(OrderedDict),
        st.dictionaries(_ODD_KEYS, children, max_size=2),
    )


VALUES = st.recursive(_SCALARS, _containers, max_leaves=25)
#: Mostly values the fast path takes, so that its acceptances are exercised too.
PLAIN_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_ASCII_KEYS | st.text(max_size=4), c),
    max_leaves=25,
)


def _outcome(encode: Any, value: object) -> tuple[str, Any]:
    try:
        return ("bytes", encode(value))
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))


def _general(value: object) -> bytes:
    return canon._general_bytes(value, "value")


def _deep(levels: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


DEEP = [_deep(MAX_DEPTH - 1), _deep(MAX_DEPTH), _deep(MAX_DEPTH + 1), _deep(MAX_DEPTH, [])]


@settings(max_examples=800, deadline=None)
@given(VALUES | PLAIN_VALUES)
@example({"\ue000": 1, "\U0001f600": 2})  # code-point order and UTF-16 order disagree
@example({"b": {"\uffff": 0, "\U00010000": 1}, "a": 1})
@example({"x": [1e-5, 1e-7, 1e16, -0.0, 123456789012345680000.0]})
@example({"n": 2**64 - 1, "m": -(2**63)})
@example({"n": 2**64})
@example({1: "an int key the C encoder would turn into a string"})
@example({True: 1})
@example({"s": "\ud800"})
@example({"\udfff": 1})
@example({"c": "\x00\x1f\x7f\u2028\U0010ffff"})
@example({"e": Colour.RED, "i": Level.HIGH, "f": Ratio(0.25)})
def test_canonical_bytes_are_the_general_encoders_bytes_and_refusals(value: object) -> None:
    assert _outcome(canonical_bytes, value) == _outcome(_general, value)


@settings(max_examples=600, deadline=None)
@given(VALUES | PLAIN_VALUES)
@example({"\ue000": 1, "\U0001f600": 2})
@example({"x": [1e-5, 1e-7, 1e16, 1e-4, 9.9e-5]})
def test_canonical_bytes_are_the_specs_bytes(value: object) -> None:
    try:
        expected: bytes | None = spec(value).encode("utf-8")
    except Refused:
        expected = None
    try:
        got: bytes | None = canonical_bytes(value)
    except (ValueError, TypeError):
        got = None
    assert got == expected


@pytest.mark.parametrize("value", DEEP, ids=["126", "127", "128", "127+empty"])
def test_nesting_at_the_limit_is_decided_as_the_general_encoder_decides(value: object) -> None:
    assert _outcome(canonical_bytes, value) == _outcome(_general, value)


def test_a_self_referencing_value_gets_the_general_refusal() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    with pytest.raises(ValueError, match="refers to itself") as fast:
        canonical_bytes(loop, path="payload")
    with pytest.raises(ValueError) as general:
        canon._general_bytes(loop, "payload")
    assert str(fast.value) == str(general.value)


def test_subclasses_and_mappings_take_the_general_encoder() -> None:
    counts: defaultdict[str, int] = defaultdict(int, {"b": 1, "a": 2})
    for value in ({"x": counts}, [Items([1])], {"k": Colour.RED}, OrderedDict(z=1, a=2)):
        assert not canon._plain(value, 1)  # type: ignore[arg-type]
        assert canonical_bytes(value) == _general(value)


def test_the_common_payload_and_body_take_the_fast_path() -> None:
    # Not a behaviour, a performance guard: if these fell back, nothing would fail.
    body = Append(RUN, "Note", PAYLOAD).body(1, 1)
    assert canon._plain(PAYLOAD, 1) and canon._plain(body, 1)
    assert canonical_bytes(body) == json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


# --- Append and Record.seal ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, VALUES | PLAIN_VALUES, max_size=4), st.integers(1, 2**63 - 1))
def test_an_append_is_refused_exactly_when_its_payload_is_and_seals_to_the_specs_bytes(
    payload: dict[str, Any], seq: int
) -> None:
    try:
        spec(payload)
        refused = None
    except Refused:
        refused = _outcome(lambda p: canon._general_bytes(p, "payload"), payload)
    if not RESERVED_MEMBERS.isdisjoint(payload):
        return  # refused before the payload is looked at (tests/test_record.py)
    try:
        item = Append(RUN, "Note", payload, step=7)
    except (ValueError, TypeError) as exc:
        assert refused == (type(exc).__name__, str(exc))
        return
    assert refused is None
    body = item.body(seq, 3)
    record = Record.seal(body, Digest.ZERO)
    assert record.raw == spec(body).encode("utf-8") == _general(body)
    assert record.hash == Digest.chain(Digest.ZERO, record.raw)
    assert record == Record(body, record.raw, Digest.ZERO, record.hash)


def test_a_nested_edit_after_construction_is_what_the_seal_writes() -> None:
    # The seal encodes the body as it is when sealed, as it always has.
    nested = {"n": 1}
    item = Append(RUN, "Note", {"out": nested})
    nested["n"] = 2
    assert Record.seal(item.body(1, 1), Digest.ZERO).raw.count(b'"out":{"n":2}') == 1
    nested["n"] = math.nan
    with pytest.raises(ValueError, match=r"^body\.out\.n: NaN is not JSON"):
        Record.seal(item.body(1, 1), Digest.ZERO)


def test_the_first_reserved_member_in_the_callers_order_is_named() -> None:
    with pytest.raises(ValueError, match="payload field 'seq' collides"):
        Append(RUN, "Note", {"text": 1, "seq": 1, "kind": 2})
    with pytest.raises(ValueError, match="payload field 'kind' collides"):
        Append(RUN, "Note", {"kind": 2, "seq": 1})


# --- check_label, against the check as it was ----------------------------------------------


def _label_before(value: object, name: str, *, max_bytes: int = MAX_LABEL_BYTES) -> str:
    """limits.check_label before its printable-ASCII shortcut, verbatim."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise ValueError(
                f"{name} contains the control character U+{ord(ch):04X}; "
                "it must be one line of printable text"
            )
        if category == "Cs":
            raise ValueError(f"{name} is not valid Unicode (it contains a lone surrogate)")
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"{name} is {size} bytes in UTF-8; the limit is {max_bytes}")
    return value


_LABELS = st.one_of(
    st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12),
    st.text(_CHARS, max_size=12),
    st.text(st.sampled_from(" \t\n\x0b\x0c\r\x1c\x1f\x7f\x85\xa0\u2028\u3000a"), max_size=6),
    st.builds(lambda c, n: c * n, st.sampled_from("a ~\x7f\xe9\u20ac"), st.integers(0, 1100)),
    st.sampled_from([Colour.RED, 7, None, b"Note", "Note", "EffectStarted", "", " "]),
)


@settings(max_examples=1500, deadline=None)
@given(_LABELS, st.sampled_from([MAX_LABEL_BYTES, 256, 4]))
def test_check_label_refuses_exactly_what_it_refused_before(value: object, limit: int) -> None:
    assert _outcome(lambda v: check_label(v, "kind", max_bytes=limit), value) == _outcome(
        lambda v: _label_before(v, "kind", max_bytes=limit), value
    )


# --- Append's written-out __init__, against the generated one it replaced -------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _AppendBefore:
    """record.Append's fields and __post_init__ before __init__ was written out, verbatim
    (with the label check and canonical encoder as they were)."""

    run: RunId
    kind: str
    payload: dict[str, Any] = dataclasses.field(default=None, hash=False)  # type: ignore[assignment]
    _: dataclasses.KW_ONLY
    case: CaseId | None = None
    step: int | None = None
    phase: str = "forward"
    effect_key: EffectKey | None = None
    v: int = RECORD_VERSION

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "run", RunId.parse(self.run))
        _label_before(self.kind, "kind")
        payload = self.payload
        if payload is None:
            payload = {}
        elif not isinstance(payload, dict):
            raise TypeError(
                f"payload must be a dict of the kind's fields, not {type(payload).__name__}"
            )
        else:
            payload = dict(payload)
        for key in payload:
            if key in RESERVED_MEMBERS:
                raise ValueError(
                    f"payload field {key!r} collides with the record body's own member "
                    f"{key!r}; rename the field (reserved: {', '.join(sorted(RESERVED_MEMBERS))})"
                )
        canon._general_bytes(payload, "payload")
        set_(self, "payload", payload)
        if self.case is not None:
            set_(self, "case", CaseId.parse(self.case))
        if self.step is not None:
            set_(self, "step", validate_step(self.step))
        if not isinstance(self.phase, str) or self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; expected one of {', '.join(PHASES)}")
        key = self.effect_key
        if isinstance(key, str):
            set_(self, "effect_key", EffectKey.from_hex(key))
        elif key is not None and not isinstance(key, EffectKey):
            raise TypeError(
                f"effect_key must be an EffectKey or 64 hex digits, not {type(key).__name__}"
            )
        if not (isinstance(self.v, int) and not isinstance(self.v, bool)):
            raise TypeError(f"v must be an int, not {type(self.v).__name__}")
        if not 0 <= self.v <= 0xFFFF:
            raise ValueError(f"v {self.v} is outside 0..{0xFFFF} (an unsigned 16-bit integer)")


CASE = CaseId.parse("case_01J9Z8Y7X6W5V4T3S2R1Q0P9NM")
_ANY = st.sampled_from([None, 0, -1, True, 1.5, "", "x", b"x", [], {}])
_ARGS = st.fixed_dictionaries(
    {
        "run": st.sampled_from([RUN, str(RUN), RUN.ulid, RUN.ulid.lower(), str(CASE), CASE, 7]),
        "kind": _LABELS,
        "payload": st.one_of(
            st.none(),
            st.dictionaries(_KEYS | st.sampled_from(sorted(RESERVED_MEMBERS)), VALUES, max_size=3),
            st.sampled_from([[("a", 1)], "text", OrderedDict(b=1, a=2)]),
        ),
    },
    optional={
        "case": st.sampled_from([None, CASE, str(CASE), CASE.ulid, RUN, "case_nope", 3]),
        "step": st.one_of(st.none(), st.integers(-1, 2**32), st.sampled_from([True, 1.0, "1"])),
        "phase": st.one_of(st.sampled_from([*PHASES, "Forward", "", Colour.RED]), _ANY),
        "effect_key": st.one_of(
            st.sampled_from([None, "ab" * 32, "AB" * 32, "ab" * 31, EffectKey(b"\x01" * 32)]),
            _ANY,
        ),
        "v": st.one_of(st.integers(-1, 2**16), st.sampled_from([Level.HIGH, True, 4.0, "4"])),
    },
)


def _built(cls: Any, args: dict[str, Any]) -> tuple[str, Any]:
    args = dict(args)
    try:
        item = cls(args.pop("run"), args.pop("kind"), args.pop("payload"), **args)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))
    fields = [f.name for f in dataclasses.fields(item)]
    return ("built", [(name, type(getattr(item, name)), getattr(item, name)) for name in fields])


@settings(max_examples=800, deadline=None)
@given(_ARGS)
def test_append_builds_and_refuses_exactly_as_before(args: dict[str, Any]) -> None:
    assert _built(Append, args) == _built(_AppendBefore, args)


def test_append_is_still_a_frozen_dataclass_with_the_same_interface() -> None:
    item = Append(RUN, "Note", {"a": 1}, step=2, effect_key="ab" * 32)
    assert [f.name for f in dataclasses.fields(Append)] == [
        f.name for f in dataclasses.fields(_AppendBefore)
    ]

    def params(cls: type) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]

    assert params(Append) == params(_AppendBefore)
    assert Append.__match_args__ == ("run", "kind", "payload")
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.kind = "Other"  # type: ignore[misc]
    assert dataclasses.replace(item, kind="Other").kind == "Other"
    with pytest.raises(ValueError, match="control character"):
        dataclasses.replace(item, kind="a\nb")
    assert (
        pickle.loads(pickle.dumps(item))
        == item
        == Append(RUN, "Note", {"a": 1}, step=2, effect_key="ab" * 32)
    )
    assert hash(item) == hash(Append(RUN, "Note", {"b": 2}, step=2, effect_key="ab" * 32))
    assert repr(item).startswith("Append(run=RunId('run_")
