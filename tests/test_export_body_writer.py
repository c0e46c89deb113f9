"""exportfmt/body's compact writer and its order caches, called directly.

The compact writer is built once at import (``_compact``) and the order caches fill as bodies
are written; a test that only writes bodies cannot tell a writer built wrongly from the
encoder it falls back to, nor a cache that is filled and used from one recomputed each time.
These tests call ``_compact_writer`` and look at the caches themselves: the writer is the C
writer exactly when it writes what the encoder writes, and falls back otherwise; a cache
holds what was found, stays bounded, and what it holds is what the next body uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentplane_journal.exportfmt import body as body_module
from agentplane_journal.exportfmt.body import _BODY_ENCODER, _compact_writer, _reordered, body_text

_REAL = json.encoder.c_make_encoder  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _caches_empty() -> Iterator[None]:
    body_module._PLANS.clear()
    body_module._EXACT.clear()
    yield
    body_module._PLANS.clear()
    body_module._EXACT.clear()


def _encode() -> Callable[[Any], str]:
    return _BODY_ENCODER.encode


# -- the compact writer ---------------------------------------------------------------


VALUES: list[Any] = [
    {"b": 1, "a": [1, 1.5, 1e16, -0.0, 0.1, 2**64 - 1, -(2**63)], "c": {"z": {}, "y": []}},
    {"s": 'é\n\u001f"\\ \u2028 😀', "t": True, "f": False, "n": None},
    [],
    "x",
]


def test_the_compact_writer_is_the_c_writer_and_writes_what_encode_writes() -> None:
    write = _compact_writer()
    assert write != _encode()  # the C writer, built once
    for value in VALUES:
        assert write(value) == _BODY_ENCODER.encode(value)
    assert write({"b": 1, "a": 2}) == '{"b":1,"a":2}'  # members in the order given
    for value in (float("inf"), float("nan"), [float("-inf")]):
        with pytest.raises(ValueError):  # body_text's infinity: the exact path names it
            write(value)
    with pytest.raises(TypeError, match=r"^Object of type object is not JSON serializable$"):
        write([object()])
    with pytest.raises(TypeError):  # a key no JSON object holds: never skipped
        write({(1,): 2})


@pytest.mark.parametrize(
    ("wrote", "instead"),
    [
        ("-0.0", "0.0"),
        ("1.5", "1.50"),
        ("[1,", "[1.0,"),
        ("1e+16", "1e16"),
        ("true", "True"),
        ("null", "None"),
        ("é", "\\u00e9"),
        ("\\n", "\\u000a"),
        ("\\u001f", "\\u001F"),
        ('\\"', "\\u0022"),
        ("\\\\", "\\u005c"),
        ("{}", "{ }"),
        ("[]", "[ ]"),
    ],
)
def test_a_c_writer_that_writes_any_probe_value_otherwise_is_not_used(
    monkeypatch: pytest.MonkeyPatch, wrote: str, instead: str
) -> None:
    """The probe holds a value of every kind the writer writes differently: a C writer off
    by any one of them is dropped for the encoder. (Only the writer built without a circular
    check, ``_compact_writer``'s, is skewed: the encoder's is left true.)"""

    def skewed(*args: Any) -> Callable[[Any, int], list[str]]:
        real = _REAL(*args)
        if args[0] is not None:  # the encoder's own (with its circular check): left true
            return real  # type: ignore[no-any-return]

        def once(value: Any, level: int) -> list[str]:
            return ["".join(real(value, level)).replace(wrote, instead)]

        return once

    monkeypatch.setattr(json.encoder, "c_make_encoder", skewed)
    assert _compact_writer() == _encode()


def test_without_a_c_writer_the_encoder_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert _compact_writer() == _encode()
    monkeypatch.delattr(json.encoder, "c_make_encoder")
    assert _compact_writer() == _encode()


# -- the order caches -----------------------------------------------------------------


def _admitted(**extra: Any) -> dict[str, Any]:
    return {"kind": "RunAdmitted", "seq": 1, "run": "r", "input": {"b": 1, "a": 2}, **extra}


def test_a_kinds_plan_and_a_shapes_order_are_kept_and_used() -> None:
    wire = _admitted()
    first = _reordered(wire)
    assert list(first) == ["seq", "run", "kind", "input"]
    order, shaped = body_module._PLANS["RunAdmitted"]
    assert order[:9] == ("seq", "run", "case", "step", "phase", "epoch", "v", "effect_key", "kind")
    assert body_module._plan("RunAdmitted") == (order, shaped)
    # What the plan cache holds is what the kind's next new shape is ordered by.
    body_module._PLANS["RunAdmitted"] = (("input", "seq", "kind"), ())
    assert body_module._plan("RunAdmitted") == (("input", "seq", "kind"), ())
    assert list(_reordered(_admitted(v=1))) == ["input", "seq", "kind", "run", "v"]
    body_module._PLANS["RunAdmitted"] = (order, shaped)
    shape = ("RunAdmitted", *wire)
    kept = body_module._EXACT[shape]
    assert kept[0] == ("seq", "run", "kind", "input")
    # What the cache holds is what the next body of that shape is written by.
    body_module._EXACT[shape] = (("input", "kind", "run", "seq"), ())
    assert list(_reordered(_admitted())) == ["input", "kind", "run", "seq"]
    assert None not in body_module._EXACT


def test_the_caches_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_module, "_MAX_PLANS", 2)
    for n in range(4):
        _reordered({"kind": f"Invented{n}", "seq": n, f"m{n}": n})
    assert list(body_module._PLANS) == ["Invented0", "Invented1"]
    assert len(body_module._EXACT) == 2
    # Past the bound, an uncached kind is still written in its order.
    assert list(_reordered({"x": 1, "kind": "Invented9", "seq": 9})) == ["seq", "kind", "x"]


class _Kind(str):
    """A kind that is a ``str`` without being one exactly (no parse makes one)."""


def test_a_kind_that_is_no_exact_str_is_written_by_its_plan_without_the_shape_cache() -> None:
    wire = {"input": 1, "capability": 2, "kind": _Kind("RunAdmitted"), "seq": 1}
    assert list(_reordered(wire)) == ["seq", "kind", "capability", "input"]  # RunAdmitted's
    assert body_module._EXACT == {} and list(body_module._PLANS) == ["RunAdmitted"]


def test_a_kind_that_is_no_string_keeps_the_wire_order_after_the_top_members() -> None:
    wire = {"x": 1, "kind": 5, "seq": 1}
    assert list(_reordered(wire)) == ["seq", "x", "kind"]
    assert body_module._PLANS == {} and body_module._EXACT == {}


# -- body_text's fast path ------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ['{"seq":1,"x":0.00001}', '{"seq":1,"x":[0.00002,1]}', '{"seq":1,"x":0.000012345}'],
)
def test_a_small_float_with_no_exponent_is_written_the_exact_way(raw: str) -> None:
    """``0.00001`` holds no ``-`` and no ``e-``, yet the C writer writes it ``1e-05``:
    serde_json writes ``0.00001``, and so does the fast path, given the parse."""
    exact = body_text(raw)
    assert "e-" not in exact
    assert body_text(raw, json.loads(raw)) == exact


def test_a_constant_is_refused_by_name_on_either_decoder() -> None:
    for raw in ('{"a":NaN}', '{"a":NaN,"b":1e-5}', '{"a":-Infinity,"b":0.00001}'):
        with pytest.raises(ValueError, match=r"^(NaN|-Infinity) is not JSON$"):
            body_text(raw)
