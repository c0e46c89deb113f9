"""An append's rules (core/append.py) the record and fence tests left unheld, each held by a test
that fails without it. Written against the mutants that survived (tools/mutation.py append).
Pure.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import RunId

RUN = RunId.generate()
I64_MAX = 2**63 - 1


def test_a_kinds_newer_members_are_checked_by_json_type() -> None:
    with pytest.raises(ValueError, match="EffectFailed's 'permanent' member must be a boolean"):
        Append(RUN, "EffectFailed", {"permanent": 1})
    with pytest.raises(ValueError, match="RunAdmitted's 'canon' member must be an integer"):
        Append(RUN, "RunAdmitted", {"canon": 70000})
    assert Append(RUN, "EffectFailed", {"permanent": True}).payload == {"permanent": True}


def test_only_an_admission_checks_its_key() -> None:
    with pytest.raises(ValueError) as info:
        Append(RUN, "RunAdmitted", {"idempotency_key": " "})
    assert str(info.value) == "RunAdmitted's idempotency_key must not be empty"
    with pytest.raises(TypeError, match="RunAdmitted's idempotency_key must be a string"):
        Append(RUN, "RunAdmitted", {"idempotency_key": 5})
    assert Append(RUN, "Note", {"idempotency_key": " "}).idempotency_key is None
    assert Append(RUN, "RunAdmitted", {"idempotency_key": "k"}).idempotency_key == "k"


@pytest.mark.parametrize("v", [0, 1, 65535])
def test_a_version_is_a_u16(v: int) -> None:
    assert Append(RUN, "Note", v=v).v == v


@pytest.mark.parametrize(
    ("v", "error"), [(-1, ValueError), (65536, ValueError), (True, TypeError), (1.0, TypeError)]
)
def test_a_version_outside_u16_is_refused(v: object, error: type) -> None:
    with pytest.raises(error):
        Append(RUN, "Note", v=v)  # type: ignore[arg-type]


def test_seq_and_epoch_bounds_are_inclusive_and_typed() -> None:
    append = Append(RUN, "Note")
    body = append.body(I64_MAX, I64_MAX)
    assert (body["seq"], body["epoch"]) == (I64_MAX, I64_MAX)
    assert append.body(1, 0)["seq"] == 1
    for seq, epoch in ((0, 0), (I64_MAX + 1, 0), (1, -1), (1, I64_MAX + 1)):
        with pytest.raises(ValueError):
            append.body(seq, epoch)
    bad: tuple[tuple[object, object], ...] = ((True, 0), (1.0, 0), (1, False), (1, 1.0))
    for bad_seq, bad_epoch in bad:
        with pytest.raises(TypeError):
            append.body(bad_seq, bad_epoch)  # type: ignore[arg-type]


class _Int(int):
    """An int subclass (an IntEnum member, numpy's int is not one): an int, never a bool."""


def test_an_int_subclass_is_an_int_for_version_seq_and_epoch() -> None:
    append = Append(RUN, "Note", v=_Int(1))
    assert append.v == 1
    body = append.body(_Int(2), _Int(3))
    assert (body["seq"], body["epoch"]) == (2, 3)
