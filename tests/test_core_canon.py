"""Both canonical-JSON rules' fast paths write exactly what their general encoders write
(core/canon.py, core/canon_v1.py), item after item, level after level.

Each rule hands a value to json's C encoder only when ``_plain`` has walked all of it and
found nothing the C encoder writes differently. Written against the mutants that survived
the older tests (tools/mutation.py): a walk that stops checking after one ordinary item
(``continue`` made ``break``) lets ``[1.5, 100.0]`` out as ``[1.5,100.0]`` under canon v1, so
every kind of plain item is followed here by every kind of item that is not.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentplane_journal.core import canon, canon_v1
from agentplane_journal.core.canon import MAX_DEPTH, canonical_bytes
from agentplane_journal.core.canon_v1 import canonical_bytes_v1

try:
    import rfc8785
except ImportError:  # pragma: no cover - the CI installs it (the `test` extra)
    rfc8785 = None


def general(value: object) -> bytes:
    """canon.py without its fast path."""
    return canon._general_bytes(value, "value")


def general_v1(value: object) -> bytes:
    """canon_v1.py without its fast path (the same refusals, by the same path)."""
    out: list[str] = []
    try:
        canon_v1._write(value, out, 1, canon_v1.agentplane_number)
    except canon._Refusal as refusal:
        where = "value" + "".join(reversed(refusal.segments))
        raise refusal.error(f"{where}: {refusal.detail}") from None
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        where = canon._find_surrogate(value, "value") or "value"
        raise ValueError(
            f"{where}: string contains a lone surrogate, which is not valid Unicode "
            "and cannot be written as UTF-8"
        ) from None


def outcome(encode: Any, value: object) -> tuple[str, object]:
    try:
        return "bytes", encode(value)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)


class Small(IntEnum):
    ONE = 1


# Items the C encoder writes as each rule does (per rule: canon v1 writes an integral float
# as an integer, so 100.0 is plain only under 0.4's rule).
PLAIN = ["a", None, True, False, 7, -(2**63), 2**64 - 1, 1.5, [1], (2,), {"k": "v"}, {}, []]
# Items it writes differently, or must not write at all, under at least one rule.
OTHER: list[object] = [
    100.0,
    -0.0,
    0.0,
    1e16,
    1e21,
    1e-5,
    1e-7,
    5e-324,
    2**70,
    -(2**63) - 1,
    2**64,
    float("nan"),
    float("inf"),
    Small.ONE,
    OrderedDict(b=1, a=2),
    {1: "int key"},
    {"\ue000": 1, "\U0001f600": 2},
    "\ud800",
    b"bytes",
    [1.5, 100.0],
    {"k": [1, 1e16]},
]


@pytest.mark.parametrize("before", PLAIN)
@pytest.mark.parametrize("after", OTHER)
def test_an_item_after_a_plain_one_is_still_checked_in_lists_and_objects(
    before: object, after: object
) -> None:
    for value in ([before, after], (before, after), {"a": before, "b": after}):
        assert outcome(canonical_bytes, value) == outcome(general, value)
        assert outcome(canonical_bytes_v1, value) == outcome(general_v1, value)
        deep = [[value]]
        assert outcome(canonical_bytes, deep) == outcome(general, deep)
        assert outcome(canonical_bytes_v1, deep) == outcome(general_v1, deep)


def test_the_mixes_the_fast_path_once_let_through_under_canon_v1() -> None:
    assert canonical_bytes_v1([1.5, 100.0]) == b"[1.5,100]"
    assert canonical_bytes_v1({"a": 1.5, "b": 1e16}) == b'{"a":1.5,"b":10000000000000000}'
    assert canonical_bytes_v1(["x", -0.0, 1e21]) == b'["x",0,1e+21]'
    with pytest.raises(ValueError, match=r"^value\[1\]: integer 1180591620717411303424 does"):
        canonical_bytes_v1([1.5, 2**70])
    with pytest.raises(ValueError, match=r"^value\.b: integer"):
        canonical_bytes_v1({"a": 1.5, "b": 2**70})
    # and the 0.4 rule, where 100.0 stays 100.0 but 1e-5 is laid out by serde_json
    assert canonical_bytes([1.5, 100.0, 1e-5]) == b"[1.5,100.0,0.00001]"
    with pytest.raises(ValueError, match=r"^value\[1\]: integer"):
        canonical_bytes([1.5, 2**70])


@pytest.mark.skipif(rfc8785 is None, reason="the rfc8785 package is not installed")
@pytest.mark.parametrize(
    "value",
    [
        [1.5, 100.0],
        [1.5, 1e16],
        ["a", 1e16, 1e21, 1e-7],
        [True, None, 0.5, -0.0, 100.0],
        {"a": 1.5, "b": 100.0, "c": [2.5, 3.0]},
        {"z": [0.1, 1e-6], "a": {"b": 0.25, "c": 1e300}},
    ],
)
def test_canon_v1_agrees_with_rfc8785_on_mixes_of_ordinary_and_other_floats(
    value: object,
) -> None:
    assert rfc8785 is not None
    assert canonical_bytes_v1(value) == rfc8785.dumps(value)


def nested(levels: int, container: str) -> Any:
    value: Any = [] if container == "list" else {}
    for _ in range(levels - 1):
        value = [value] if container == "list" else {"k": value}
    return value


@pytest.mark.parametrize("container", ["list", "object"])
@pytest.mark.parametrize("encode", [canonical_bytes, canonical_bytes_v1])
def test_the_depth_limit_is_exact_through_lists_and_objects(container: str, encode: Any) -> None:
    at_limit = nested(MAX_DEPTH, container)
    assert encode(at_limit) == general(at_limit)
    assert encode([1, at_limit[0] if container == "list" else at_limit["k"]]) is not None
    for past in (nested(MAX_DEPTH + 1, container), [1, "a", nested(MAX_DEPTH, container)]):
        with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} levels deep"):
            encode(past)


@pytest.mark.parametrize("encode", [canonical_bytes, canonical_bytes_v1])
def test_many_small_objects_side_by_side_are_not_deep(encode: Any) -> None:
    wide = [{"n": i, "m": [i]} for i in range(300)]
    assert encode(wide) == general(wide)
    assert encode({"a": wide, "b": [[]] * 200}) == general({"a": wide, "b": [[]] * 200})


def test_a_self_referencing_value_is_refused_not_a_crash() -> None:
    loop: list[Any] = [1.5]
    loop.append(loop)
    for encode in (canonical_bytes, canonical_bytes_v1):
        with pytest.raises(ValueError, match="refers to itself"):
            encode(loop)


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([100.0, 1e16, 1e21, 1e-5, 1e-7, -0.0, 0.5, 1e-4])
    | st.text(max_size=4)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=int(os.environ.get("CANON_MIX_EXAMPLES", "300")), deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=5))
def test_fast_path_and_general_encoder_agree_on_arbitrary_mixes(value: list[object]) -> None:
    assert outcome(canonical_bytes, value) == outcome(general, value)
    assert outcome(canonical_bytes_v1, value) == outcome(general_v1, value)


# --- known answers for what only the general encoder writes --------------------------------


class FloatSub(float):
    pass


class StrSub(str):
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


class TupleSub(tuple):  # type: ignore[type-arg]
    __slots__ = ()


class DictSub(dict):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize("encode", [canonical_bytes, canonical_bytes_v1])
def test_subclasses_are_written_as_their_base_type(encode: Any) -> None:
    value = {
        "f": FloatSub(1.5),
        "s": StrSub("x"),
        "l": ListSub([1, FloatSub(2.5)]),
        "t": TupleSub((StrSub("y"),)),
        "d": DictSub(b=DictSub(), a=[ListSub()]),
        "i": Small.ONE,
    }
    expected = b'{"d":{"a":[[]],"b":{}},"f":1.5,"i":1,"l":[1,2.5],"s":"x","t":["y"]}'
    assert encode(value) == expected
    assert encode(ListSub([FloatSub(1.5), StrSub("z")])) == b'[1.5,"z"]'
    assert encode(DictSub(k=TupleSub())) == b'{"k":[]}'
    assert encode(FloatSub(0.5)) == b"0.5"
    assert encode(StrSub("q")) == b'"q"'
    with pytest.raises(ValueError, match=r"^value\.k: NaN is not JSON"):
        encode(DictSub(k=FloatSub("nan")))


@pytest.mark.parametrize("encode", [canonical_bytes, canonical_bytes_v1])
def test_every_refusal_says_what_and_where(encode: Any) -> None:
    cases: list[tuple[object, type[Exception], str]] = [
        (float("nan"), ValueError, "value: NaN is not JSON; canonical JSON has no NaN or infinity"),
        (
            [float("inf")],
            ValueError,
            "value[0]: Infinity is not JSON; canonical JSON has no NaN or infinity",
        ),
        (
            {"a": float("-inf")},
            ValueError,
            "value.a: -Infinity is not JSON; canonical JSON has no NaN or infinity",
        ),
        ({1: 2}, TypeError, "value: object keys must be strings, found int 1"),
        ({"a": {None: 2}}, TypeError, "value.a: object keys must be strings, found NoneType None"),
        (
            {"\ud800": 1, "\ue000": 2},
            ValueError,
            "value: object key '\\ud800' contains a lone surrogate, which is not valid Unicode",
        ),
        (
            {"\ud800": 1},
            ValueError,
            "value: object key '\\ud800' contains a lone surrogate, which is not valid Unicode",
        ),
        (
            {"b": ["ok", "\udfff"], "\ue000": "\ud800"},
            ValueError,
            "value.b[1]: string contains a lone surrogate, which is not valid Unicode and "
            "cannot be written as UTF-8",
        ),
        (
            [2**64],
            ValueError,
            "value[0]: integer 18446744073709551616 does not fit a 64-bit integer "
            "(-9223372036854775808..18446744073709551615); write it as a string",
        ),
        (
            nested(MAX_DEPTH + 1, "list"),
            ValueError,
            f"nested more than {MAX_DEPTH} levels deep (or refers to itself); agentplane's "
            "reader cannot decode such a record",
        ),
        (
            [object()],
            TypeError,
            "value[0]: object is not JSON; use dict, list, tuple, str, int, float, bool or None",
        ),
    ]
    for value, error, message in cases:
        with pytest.raises(error) as info:
            encode(value)
        assert str(info.value).endswith(message), (value, str(info.value))
        assert str(info.value).startswith("value")


def test_keys_from_u_d800_up_sort_by_utf16_in_both_rules() -> None:
    value = {"\ud7ff": 1, "\ue000": 2, "\U0001f600": 3, "a": 4}
    expected = '{"a":4,"\ud7ff":1,"\U0001f600":3,"\ue000":2}'.encode()
    assert canonical_bytes(value) == expected
    assert canonical_bytes_v1(value) == expected


def test_agentplane_takes_the_upper_digits_on_an_exact_tie_of_16_digits() -> None:
    """Exact ties occur at 16 digits as well as 17 (``739539868053668.25`` lies halfway
    between ``…668.2`` and ``…668.3``): a check that started at 17 would write the standard's
    even digits where agentplane writes the upper ones."""
    x = 739539868053668.25
    assert repr(x) == "739539868053668.2"
    assert canon_v1.es_number(x) == "739539868053668.2"
    assert canon_v1.agentplane_number(x) == "739539868053668.3"
    assert canon_v1.agentplane_number(-x) == "-739539868053668.3"
    assert canonical_bytes_v1([x, -x]) == b"[739539868053668.3,-739539868053668.3]"
    assert canon_v1.canonical_bytes_rfc8785([x]) == b"[739539868053668.2]"
    y = 1259266790452956.25  # 17 digits
    assert canon_v1.agentplane_number(y) == "1259266790452956.3"
    assert canon_v1.es_number(y) == "1259266790452956.2"


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (1.5e-7, "1.5e-7"),
        (-2.5e-7, "-2.5e-7"),
        (1.5e21, "1.5e+21"),
        (1e21, "1e+21"),
        (1.25e-7, "1.25e-7"),
        (1e-7, "1e-7"),
    ],
)
def test_the_exponent_form_keeps_every_digit(x: float, text: str) -> None:
    assert canon_v1.es_number(x) == text
    assert canon_v1.agentplane_number(x) == text


def test_the_standards_writer_refuses_naming_the_path() -> None:
    with pytest.raises(ValueError, match=r"^value: "):
        canon_v1.canonical_bytes_rfc8785(2**70)
    with pytest.raises(ValueError, match=r"^value\[0\]: "):
        canon_v1.canonical_bytes_rfc8785([float("nan")])
    with pytest.raises(ValueError, match=r"^args\.a: "):
        canon_v1.canonical_bytes_rfc8785({"a": 2**70}, path="args")


@pytest.mark.parametrize("container", ["list", "object"])
def test_canon_v1s_general_writer_keeps_the_exact_depth_limit(container: str) -> None:
    """A value the fast path hands on (an integral float, written ``100`` by ECMAScript)
    nested exactly MAX_DEPTH deep is written; one level more is refused."""

    def deep(levels: int) -> Any:
        value: Any = [100.0] if container == "list" else {"k": 100.0}
        for _ in range(levels - 1):
            value = [value] if container == "list" else {"k": value}
        return value

    at_limit = canonical_bytes_v1(deep(MAX_DEPTH))
    assert at_limit.count(b"100") == 1 and b"100.0" not in at_limit
    assert at_limit == general_v1(deep(MAX_DEPTH))
    with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} levels deep"):
        canonical_bytes_v1(deep(MAX_DEPTH + 1))


@pytest.mark.parametrize("module", [canon, canon_v1], ids=["canon", "canon_v1"])
def test_a_value_made_only_of_plain_items_takes_the_fast_path(module: Any) -> None:
    """The fast path is the cost promise (one C encoder pass per record body): a walk that
    wrongly refused every dict, list or tuple (its type read from another value, the dict
    lost before its keys are joined) would send every body to the general encoder, with
    the same bytes, and only this notices."""
    for item in PLAIN:
        for value in ({"a": item, "b": [item]}, [item, {"k": item}], (item,)):
            assert module._plain(value, 1) is True, value
    assert canon._plain({"a": 1.5, "b": [100.0]}, 1) is True
