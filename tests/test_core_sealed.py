"""Which fields are sealed, how a sealed field is marked, what it is bound to (core/sealed.py),
each rule held by a test that fails without it.

Written against the mutants that survived tests/test_sealed_core.py (tools/mutation.py
sealed). Pure: markers are built from literal bytes, no key ring, no database.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentplane_journal.core.sealed import (
    SEALED,
    Erased,
    get_at,
    is_sealed,
    is_sealed_text,
    journal_aad,
    scope,
    sealed_fields,
    set_at,
    still_sealed,
    unwrap_text,
    unwrap_value,
    wrap_text,
    wrap_value,
)

RAW = bytes(range(40))
B64 = base64.b64encode(RAW).decode("ascii")


def _paths(kind: str, payload: Mapping[str, Any]) -> list[tuple[tuple[str, ...], bool]]:
    return [(f.path, f.text) for f in sealed_fields(kind, payload)]


class _View(Mapping[str, Any]):
    """A read-only mapping that is not a dict: the rules ask for a Mapping."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


# -- scope and associated data ---------------------------------------------------------------


def test_a_scope_is_tenant_slash_unit() -> None:
    assert scope("acme", "run_X") == "acme/run_X"


def test_the_aad_names_the_effect_or_a_dash() -> None:
    assert journal_aad("t", "r", "EffectDone", "ab") == b"journal:t:r:EffectDone:ab"
    assert journal_aad("t", "r", "Note", None) == b"journal:t:r:Note:-"
    assert journal_aad("t", "r", "Note", "") == b"journal:t:r:Note:-"
    assert journal_aad("t", "r", "Note", "é") == "journal:t:r:Note:é".encode()


# -- the field list --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "member"),
    [("RunAdmitted", "input"), ("PlanFrozen", "plan"), ("EffectDone", "output")],
)
def test_a_json_field_is_sealed_only_when_present(kind: str, member: str) -> None:
    assert _paths(kind, {member: None}) == [((member,), False)]
    assert _paths(kind, {"other": 1}) == []


def test_effect_started_seals_its_descriptors_args_only_in_a_mapping() -> None:
    assert _paths("EffectStarted", {"descriptor": _View({"args": 1})}) == [
        (("descriptor", "args"), False)
    ]
    assert _paths("EffectStarted", {"descriptor": {"kind": "k"}}) == []
    assert _paths("EffectStarted", {"descriptor": ["args"]}) == []
    assert _paths("EffectStarted", {"args": 1}) == []


def test_effect_reconciled_seals_a_present_output_then_a_text_detail() -> None:
    assert _paths("EffectReconciled", {"output": 0, "detail": "d"}) == [
        (("output",), False),
        (("detail",), True),
    ]
    assert _paths("EffectReconciled", {"output": None}) == []
    assert _paths("EffectReconciled", {"output": False, "detail": 5}) == [(("output",), False)]
    assert _paths("EffectReconciled", {}) == []


@pytest.mark.parametrize(
    ("kind", "member"), [("GroupSettled", "detail"), ("EffectFailed", "error"), ("Note", "text")]
)
def test_a_text_field_is_sealed_only_when_it_is_text(kind: str, member: str) -> None:
    assert _paths(kind, {member: ""}) == [((member,), True)]
    assert _paths(kind, {member: None}) == []
    assert _paths(kind, {member: {"x": 1}}) == []


def test_run_sealed_seals_its_output_then_a_text_reason() -> None:
    assert _paths("RunSealed", {"output": None, "reason": "r"}) == [
        (("output",), False),
        (("reason",), True),
    ]
    assert _paths("RunSealed", {"reason": 3}) == []
    assert _paths("RunSealed", {"outcome": "ok"}) == []


def test_the_packages_own_kinds_seal_their_payload_fields_present() -> None:
    full = {"checkpoint": 1, "metadata": 2, "blobs": 3, "thread": "t"}
    assert _paths("LangGraphCheckpoint", full) == [
        (("checkpoint",), False),
        (("metadata",), False),
        (("blobs",), False),
    ]
    assert _paths("LangGraphCheckpoint", {"metadata": 2}) == [(("metadata",), False)]
    assert _paths("LangGraphWrites", {"writes": [], "task": "t"}) == [(("writes",), False)]
    assert _paths("SessionItemsAdded", {"items": []}) == [(("items",), False)]
    assert _paths("ConversationSaved", {"record": {}, "entries": []}) == [
        (("record",), False),
        (("entries",), False),
    ]
    assert _paths("LangGraphDeleted", {"checkpoint": 1, "writes": 2}) == []
    # a kind's own members only: another kind's sealed names stay clear
    assert _paths("RunAdmitted", {"output": 1, "text": "t"}) == []
    assert _paths("Note", {"input": 1}) == []


# -- what a reader could not open ------------------------------------------------------------


def test_still_sealed_names_closed_and_erased_fields_by_dotted_path() -> None:
    payload = {"descriptor": {"kind": "k", "args": wrap_value(RAW)}}
    assert still_sealed("EffectStarted", payload) == ["descriptor.args"]
    assert still_sealed("EffectStarted", {"descriptor": {"args": Erased("s")}}) == [
        "descriptor.args"
    ]
    assert still_sealed("EffectStarted", {"descriptor": {"args": {"a": 1}}}) == []


def test_still_sealed_reads_a_text_field_as_text_and_a_json_field_as_json() -> None:
    # a sealed-text string in a JSON field is a string, and a marker object in a text field
    # is never a text field at all: each kind of field opens its own kind of marker
    assert still_sealed("Note", {"text": wrap_text(RAW)}) == ["text"]
    assert still_sealed("Note", {"text": "plain words"}) == []
    assert still_sealed("EffectDone", {"output": wrap_text(RAW)}) == []
    assert still_sealed("EffectDone", {"output": wrap_value(RAW)}) == ["output"]
    both = {"output": Erased("s"), "detail": wrap_text(RAW)}
    assert still_sealed("EffectReconciled", both) == ["output", "detail"]


def test_an_erased_value_shows_only_its_scope() -> None:
    gone = Erased("acme/run_X")
    assert gone.at is None and gone.reason is None
    assert repr(gone) == "Erased(scope='acme/run_X')"
    assert repr(Erased("s", 1.0, "why")) == "Erased(scope='s')"


# -- reaching into a payload -----------------------------------------------------------------


def test_get_at_follows_the_path() -> None:
    payload = {"a": {"b": {"c": 3}}, "c": 9}
    assert get_at(payload, ("a", "b", "c")) == 3
    assert get_at(payload, ("c",)) == 9
    assert get_at(payload, ()) is payload


def test_set_at_copies_every_level_it_changes() -> None:
    inner = {"args": 1, "kind": "k"}
    payload = {"descriptor": inner, "x": 2}
    out = set_at(payload, ("descriptor", "args"), "new")
    assert out == {"descriptor": {"args": "new", "kind": "k"}, "x": 2}
    assert payload == {"descriptor": {"args": 1, "kind": "k"}, "x": 2}
    assert inner == {"args": 1, "kind": "k"} and out["descriptor"] is not inner
    top = set_at(payload, ("x",), 5)
    assert top == {"descriptor": inner, "x": 5} and payload["x"] == 2


# -- markers ---------------------------------------------------------------------------------


def test_markers_are_exact_base64() -> None:
    assert wrap_value(RAW) == {SEALED: B64} and SEALED == "$sealed"
    assert wrap_text(RAW) == "$sealed:" + B64
    assert unwrap_value({SEALED: B64}) == RAW
    assert unwrap_text("$sealed:" + B64) == RAW
    assert unwrap_text(wrap_text(b"")) == b"" and is_sealed_text("$sealed:")


@pytest.mark.parametrize(
    "text",
    [
        "$sealed:" + B64[:-1] + "!",  # a character outside base64 (not silently dropped)
        "$sealed:" + B64 + "\n",
        "$sealed:é" + B64,  # not ASCII
        "$sealed:" + B64[:-2],  # bad padding
        "$sealed" + B64,  # no colon
        "sealed:" + B64,
        " $sealed:" + B64,
        B64,
    ],
)
def test_a_text_that_is_not_exactly_a_marker_is_not_sealed(text: str) -> None:
    assert unwrap_text(text) is None
    assert not is_sealed_text(text)


@pytest.mark.parametrize("value", [None, 5, b"$sealed:AAAA", ["$sealed:AAAA"]])
def test_a_non_string_is_no_sealed_text(value: object) -> None:
    assert unwrap_text(value) is None and not is_sealed_text(value)


def test_a_json_marker_is_exactly_one_string_member() -> None:
    assert is_sealed({SEALED: B64}) and is_sealed(_View({SEALED: B64}))
    assert is_sealed({SEALED: "not base64!"})  # a marker; unwrap says it holds nothing
    assert unwrap_value({SEALED: "not base64!"}) is None
    assert unwrap_value({SEALED: B64[:-1] + "!"}) is None
    assert unwrap_value({SEALED: "é"}) is None
    assert not is_sealed({SEALED: B64, "x": 1})
    assert not is_sealed({})
    assert not is_sealed({SEALED: 1}) and not is_sealed({SEALED: None})
    assert not is_sealed({"other": B64})
    assert not is_sealed([SEALED]) and not is_sealed(SEALED + ":" + B64)
    assert unwrap_value({SEALED: B64, "x": 1}) is None
    assert unwrap_value("$sealed:" + B64) is None
