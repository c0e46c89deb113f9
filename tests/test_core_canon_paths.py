"""Which string a lone-surrogate refusal names (core/canon.py's ``_find_surrogate``): the first
in canonical order, which sorts keys by UTF-16 code units as serde_json's writer does, not by
code points.

Written against the mutants of ``_find_surrogate`` that survived tools/mutation.py canon.
Pure.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.canon import canonical_bytes


def _named(value: object) -> str:
    with pytest.raises(ValueError, match="lone surrogate") as caught:
        canonical_bytes(value, path="body")
    return str(caught.value).split(": ", 1)[0]


def test_the_first_surrogate_in_utf16_key_order_is_named() -> None:
    # U+10000 is D800 DC00 in UTF-16, before U+FFFF; by code point it comes after.
    assert _named({"\uffff": "\ud800", "\U00010000": "\udc00"}) == "body.\U00010000"
    assert _named({"b": "\ud800", "a": "ok", "c": "\udfff"}) == "body.b"


def test_the_path_runs_through_objects_and_lists() -> None:
    assert _named({"b": "\ud800", "a": ["x", "\ud800"]}) == "body.a[1]"
    assert _named([{"k": ["\ud800"]}]) == "body[0].k[0]"
    assert _named("\ud800") == "body"
