"""An export record's readable ``body``, pure: the edges of serde_json's numbers, the shapes
a struct member may not have, and wire bytes no record has.

tests/test_export_bytes.py holds every record kind against agentplane 0.22's own text; these
hold the rest of :mod:`agentplane_journal.exportfmt.body` (``tools/mutation.py
export_body`` runs both against each of its mutants).
"""

from __future__ import annotations

import json

import pytest

from agentplane_journal.exportfmt import body as body_module
from agentplane_journal.exportfmt.body import (
    NESTED_MEMBERS,
    TOP_MEMBERS,
    VARIANT_MEMBERS,
    body_text,
    same_value,
    serde_value,
)


@pytest.fixture(autouse=True)
def _orders_looked_up_afresh() -> None:
    """Each test finds the body orders' caches empty (``_PLANS``, ``_EXACT``), so the code
    that fills them runs under every test, not once for the process: what it computes is
    what is checked (a cache filled earlier would answer for it)."""
    body_module._PLANS.clear()
    body_module._EXACT.clear()


U64 = 2**64 - 1
I64 = -(2**63)


def test_integers_within_64_bits_stay_integers_and_beyond_them_are_f64() -> None:
    for n in (0, 1, -1, U64, I64, 2**63):
        assert serde_value(str(n)) == n and type(serde_value(str(n))) is int
    for n in (U64 + 1, I64 - 1, 10**30, -(10**30)):
        value = serde_value(str(n))
        assert type(value) is float and value == float(n)
    assert serde_value("-0") == 0.0 and str(serde_value("-0")) == "-0.0"
    assert type(serde_value("0")) is int
    assert body_text(f'{{"a":[{U64},{I64},{U64 + 1},{I64 - 1},-0,0]}}') == (
        f'{{"a":[{U64},{I64},1.8446744073709552e+19,-9.223372036854776e+18,-0.0,0]}}'
    )


@pytest.mark.parametrize("token", ["1e400", "-1e400", "1" + "0" * 400, "-1" + "0" * 400])
def test_a_number_no_f64_holds_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match=r"is out of range for serde_json \(f64\)"):
        serde_value(token)
    with pytest.raises(ValueError, match="out of range"):
        body_text(f'{{"x":{token}}}')


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(constant: str) -> None:
    with pytest.raises(ValueError, match=f"{constant} is not JSON"):
        serde_value(f'{{"x":{constant}}}')
    with pytest.raises(ValueError, match="is not JSON"):
        body_text(f'{{"x":{constant}}}')


def test_small_floats_take_serde_jsons_layout() -> None:
    """json's encoder writes 1e-05 where serde_json writes 0.00001: a record holding a float
    below 1e-4 in magnitude takes the exact writer, every other float json's."""
    assert body_text('{"x":[0.00001,-0.00001,0.0001,-0.0001,0.0,1.5]}') == (
        '{"x":[0.00001,-0.00001,0.0001,-0.0001,0.0,1.5]}'
    )
    assert body_text('{"x":1e-7,"y":{"k":[1,"s",true,null]}}') == (
        '{"x":1e-7,"y":{"k":[1,"s",true,null]}}'
    )
    assert body_text('{"x":0.0,"y":1e-7}') == '{"x":0.0,"y":1e-7}'
    assert body_text('{"é":"ü\\n","x":1e-7}') == '{"é":"ü\\n","x":1e-7}'
    assert body_text('{"a":[],"b":{},"x":1e-7}') == '{"a":[],"b":{},"x":1e-7}'


def test_wire_bytes_that_are_no_object_are_refused() -> None:
    for raw in ("[1]", "1", '"s"', "null"):
        with pytest.raises(ValueError, match="the wire bytes are not a JSON object"):
            body_text(raw)


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError):
        body_text('{"x":"\\ud800"}')
    assert body_text('{"x":"\\ud83d\\ude00"}') == '{"x":"\U0001f600"}'


def test_the_envelope_leads_even_without_a_kind() -> None:
    wire = '{"z":1,"v":1,"seq":2,"run":"r","epoch":1}'
    assert body_text(wire) == '{"seq":2,"run":"r","epoch":1,"v":1,"z":1}'
    assert body_text('{"kind":7,"seq":1,"a":1}') == '{"seq":1,"kind":7,"a":1}'


def test_struct_members_of_another_shape_are_kept_as_they_are() -> None:
    """A hostile or foreign record may hold anything where a struct is declared: the body
    must still equal the wire, so nothing is reshaped that is not shaped as declared."""
    for value in ("s", 1, [1, 2], None, {"z": 1, "trust": "t"}):
        raw = json.dumps({"kind": "EffectDone", "declared": value, "seq": 1})
        body = json.loads(body_text(raw))
        assert body["declared"] == value
    # Released.field_labels: a map of labels; a list where the map is, a string where a
    # label is, a label list that is no list.
    for value in ([1], "s", {"a": "s"}, {"a": {"releases": "r"}}):
        raw = json.dumps({"kind": "Released", "field_labels": value})
        assert json.loads(body_text(raw))["field_labels"] == value
    raw = json.dumps({"kind": "CaseBound", "correlation": {"value": "7"}})
    assert body_text(raw) == '{"kind":"CaseBound","correlation":{"value":"7"}}'


def test_nested_structs_are_ordered_as_declared_at_every_level() -> None:
    label = {"releases": [{"scope": {"sensitivity": "s", "trust": "t"}, "basis": "b"}]}
    label |= {"trust": "t", "provenance": []}
    raw = json.dumps({"kind": "Released", "field_labels": {"b": label, "a": {}}})
    assert body_text(raw) == (
        '{"kind":"Released","field_labels":{"a":{},"b":{"provenance":[],"trust":"t",'
        '"releases":[{"scope":{"trust":"t","sensitivity":"s"},"basis":"b"}]}}}'
    )
    raw = json.dumps({"kind": "EffectStarted", "recovery": {"key": "k", "mode": "m", "x": 1}})
    assert body_text(raw) == '{"kind":"EffectStarted","recovery":{"mode":"m","key":"k","x":1}}'


def test_the_declared_orders_are_agentplane_022s() -> None:
    assert TOP_MEMBERS == ("seq", "run", "case", "step", "phase", "epoch", "v", "effect_key")
    assert len(VARIANT_MEMBERS) == 25
    assert VARIANT_MEMBERS["RunSealed"] == ("outcome", "reason", "chain_head")
    assert NESTED_MEMBERS[("Released", "field_labels")][0] == "map"
    assert NESTED_MEMBERS[("CaseBound", "correlation")][0] == "list"


def test_wire_bytes_are_read_with_serde_jsons_numbers_as_bytes_too() -> None:
    """serde_value takes the wire's bytes as verify-export reads them, with the same
    number rules as its text form: -0 and beyond 64 bits an f64, out of f64 range refused,
    NaN and Infinity not JSON."""
    assert serde_value(b'{"a":[1,"s"]}') == {"a": [1, "s"]}
    negative_zero = serde_value(b"-0")
    assert type(negative_zero) is float and str(negative_zero) == "-0.0"
    assert type(serde_value(str(U64 + 1).encode())) is float
    with pytest.raises(ValueError, match="out of range"):
        serde_value(b'{"x":1e400}')
    with pytest.raises(ValueError, match="NaN is not JSON"):
        serde_value(b'{"x":NaN}')


def test_a_small_float_written_with_a_capital_e_takes_serde_jsons_layout() -> None:
    assert body_text('{"x":1E-5}') == '{"x":0.00001}'
    assert body_text('{"x":1E-7}') == '{"x":1e-7}'


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_beside_a_small_float_is_not_json_either(constant: str) -> None:
    """A record holding a small float takes the exact writer's path; NaN or Infinity beside
    it is refused there too, naming the constant."""
    with pytest.raises(ValueError, match=f"{constant} is not JSON"):
        body_text(f'{{"a":1e-7,"x":{constant}}}')


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("a", "b"),
        ("1", 1),
        ({"a": 1}, {"b": 1}),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1}, {"a": 2}),
        ({"a": 1}, [1]),
        ([1], [1, 2]),
        ([1, 2], [1]),
        ([1], [2]),
        ([1], {"0": 1}),
        (1, 1.0),
        (True, 1),
        (10**400, 1e308),
        (10**400, 10**400),
        (U64 + 1, U64 + 1),
    ],
)
def test_values_serde_json_tells_apart_are_not_the_same(a: object, b: object) -> None:
    """An edited body must not pass for its wire bytes: every difference in a string, a key,
    a member, a length, an item or a number's kind is one (``b`` is the wire's reading,
    where an integer beyond 64 bits is already an f64; one no f64 holds is never equal)."""
    assert same_value(a, b) is False


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("a", "a"),
        ({"a": [1, {"b": None}], "c": 1.5}, {"a": [1, {"b": None}], "c": 1.5}),
        ([], []),
        ({}, {}),
        ([True, "x"], [True, "x"]),
        (U64 + 1, float(U64 + 1)),
        (I64 - 1, float(I64 - 1)),
    ],
)
def test_values_serde_json_holds_equal_are_the_same(a: object, b: object) -> None:
    assert same_value(a, b) is True
