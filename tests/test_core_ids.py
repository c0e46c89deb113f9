"""Identifiers' rules (core/ids.py) the older tests/test_ids.py left unheld, each held by a test
that fails without it. Written against the mutants that survived (tools/mutation.py ids). Pure.
"""

from __future__ import annotations

import hashlib
import operator
import struct

import pytest

from agentplane_journal.core.ids import (
    PHASES,
    CaseId,
    Digest,
    EffectKey,
    RunId,
    validate_step,
    validate_tenant,
)

U32_MAX = 2**32 - 1


def test_hashes_tell_different_values_apart_and_agree_with_equality() -> None:
    a, b = Digest.of(b"a"), Digest.of(b"b")
    assert hash(a) != hash(b)
    assert hash(a) == hash(Digest(bytes(a)))
    runs = [RunId.generate() for _ in range(3)]
    assert len({hash(r) for r in runs}) == 3
    assert hash(runs[0]) == hash(RunId.parse(str(runs[0])))


def test_a_u32_field_out_of_range_is_named() -> None:
    base = {"step": 0, "phase": PHASES[0], "ordinal": 0, "attempt": 0}
    for field in ("step", "ordinal", "attempt"):
        with pytest.raises(ValueError) as info:
            EffectKey.derive(**{**base, field: -1}, kind="k", canonical_args=b"")  # type: ignore[arg-type]
        assert str(info.value).startswith(f"{field} -1 is outside 0..{U32_MAX}")
        with pytest.raises(TypeError) as type_info:
            EffectKey.derive(**{**base, field: True}, kind="k", canonical_args=b"")  # type: ignore[arg-type]
        assert str(type_info.value) == f"{field} must be an int, not bool"
    with pytest.raises(ValueError) as info:
        validate_step(U32_MAX + 1)
    assert str(info.value).startswith(f"step {U32_MAX + 1} is outside")


def test_a_key_derives_over_unsigned_fields_up_to_u32_max() -> None:
    key = EffectKey.derive(U32_MAX, PHASES[-1], U32_MAX, U32_MAX, "kind", b"args")
    expected = hashlib.sha256(
        struct.pack(">IBIIQ", U32_MAX, len(PHASES) - 1, U32_MAX, U32_MAX, 4) + b"kind" + b"args"
    ).digest()
    assert bytes(key) == expected


def test_ids_order_by_their_text_and_only_against_their_own_type() -> None:
    a, b = sorted([RunId.generate(), RunId.generate()], key=str)
    assert a < b and a <= b and b > a and b >= a
    assert not (b < a) and not (b <= a) and not (a > b) and not (a >= b)
    assert not (a < a) and a <= a and not (a > a) and a >= a
    other: object = CaseId.generate()
    for compare in (operator.lt, operator.le, operator.gt, operator.ge):
        with pytest.raises(TypeError):
            compare(a, other)  # type: ignore[arg-type]


def test_a_tenant_may_hold_any_letter_but_slash_and_colon() -> None:
    assert validate_tenant("XX") == "XX"
    assert validate_tenant("acme-X_1") == "acme-X_1"
    for bad in ("a/b", "a:b"):
        with pytest.raises(ValueError, match="which is not allowed"):
            validate_tenant(bad)
