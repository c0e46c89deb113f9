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


# Restore's two constructors (pass one, per record): the same append as the constructor's,
# and the same refusals, for what each is given.

_RUN = RunId.parse("run_01ARZ3NDEKTSV4RRFFQ69G5FAV")


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"case": "case_01ARZ3NDEKTSV4RRFFQ69G5FAV", "step": 3, "phase": "compensating"},
        {"effect_key": "ab" * 32, "v": 7},
    ],
)
def test_of_canonical_payload_builds_the_constructors_append(kwargs: dict[str, object]) -> None:
    payload = {"text": "x", "n": [1, 2]}
    built = Append.of_canonical_payload(_RUN, "EffectStarted", payload, **kwargs)  # type: ignore[arg-type]
    expected = Append(_RUN, "EffectStarted", payload, **kwargs)  # type: ignore[arg-type]
    assert built == expected and repr(built) == repr(expected)
    assert built.payload is not payload  # copied, as the constructor copies
    assert Append.of_canonical_payload(_RUN, "Note", {}).phase == "forward"


def test_of_canonical_payload_refuses_what_the_constructor_refuses() -> None:
    with pytest.raises(ValueError):
        Append.of_canonical_payload(_RUN, "a\n", {})
    with pytest.raises(ValueError):
        Append.of_canonical_payload(_RUN, "Note", {"seq": 1})  # a reserved member
    with pytest.raises(ValueError):
        Append.of_canonical_payload(_RUN, "Note", {}, v=70_000)


@pytest.mark.parametrize("v", [0, 1, 65_535])
def test_of_bare_envelope_builds_the_constructors_append(v: int) -> None:
    payload = {"text": "x", "n": [1, 2]}
    built = Append.of_bare_envelope(_RUN, "Note", payload, v)
    expected = Append(_RUN, "Note", payload, v=v)
    assert built == expected and repr(built) == repr(expected)
    assert (built.case, built.step, built.phase, built.effect_key) == (None, None, "forward", None)
    assert built.body(1, 0) == expected.body(1, 0)
    assert built.payload is payload  # not copied: the caller built it afresh


def test_of_bare_envelope_refuses_what_the_constructor_refuses() -> None:
    with pytest.raises(TypeError):
        Append.of_bare_envelope(str(_RUN), "Note", {}, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Append.of_bare_envelope(_RUN, "Note", [], 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^kind contains the control character"):
        Append.of_bare_envelope(_RUN, "a\n", {}, 0)
    with pytest.raises(ValueError):
        Append.of_bare_envelope(_RUN, "Note", {}, 70_000)
    with pytest.raises(TypeError):
        Append.of_bare_envelope(_RUN, "Note", {}, "1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be empty"):  # the admission key
        Append.of_bare_envelope(_RUN, "RunAdmitted", {"idempotency_key": ""}, 0)
    with pytest.raises(ValueError, match="must be a boolean"):  # a kind's newer member
        Append.of_bare_envelope(_RUN, "EffectFailed", {"permanent": 1}, 0)
