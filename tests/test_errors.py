"""Error attributes carry the caller's types, messages still read as text, and every public
error sits in StoreError in exactly the group docs/reference/api.md names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import agentplane_journal
from agentplane_journal import (
    AppendConflictError,
    BackendError,
    ConflictError,
    CorruptionError,
    DuplicateEffectError,
    EffectKey,
    FencedError,
    IncoherentCheckpointError,
    LeaseHeldError,
    LeaseNotHeldError,
    NoteVerificationError,
    OutcomeError,
    PoolerError,
    RefusedError,
    RestoreIncomplete,
    RestoreRefused,
    RunId,
    RunLostError,
    RunSealedError,
    SafeToRetry,
    StepError,
    StoreError,
    TransactionEndedError,
    UnavailableError,
    WitnessError,
    WitnessStaleError,
)

RUN = RunId.parse("run_01ARZ3NDEKTSV4RRFFQ69G5FAV")
KEY = EffectKey.derive(0, "forward", 1, 1, "probe", b"[1]")


def test_run_errors_hold_the_run_id_the_caller_passed() -> None:
    for err in (
        FencedError(RUN, 1, 2),
        LeaseHeldError(RUN, "instance-a", 3, 45),
        LeaseNotHeldError(RUN, "instance-a", 3, "the lease was released at epoch 3"),
        RunSealedError(RUN, "succeeded"),
        AppendConflictError(RUN, 7, "journal_pkey"),
        TransactionEndedError(RUN),
        TransactionEndedError(RUN, "COMMIT"),
    ):
        assert err.run is RUN
        assert type(err.run) is RunId and err.run == RUN
        assert err.run != str(RUN)  # ids never equal their text (see test_ids)
        assert "run_01ARZ3NDEKTSV4RRFFQ69G5FAV" in str(err)


def test_run_errors_parse_a_run_given_as_text() -> None:
    err = FencedError("run_01ARZ3NDEKTSV4RRFFQ69G5FAV", 1, 2)  # type: ignore[arg-type]
    assert type(err.run) is RunId and err.run == RUN
    with pytest.raises(ValueError, match="not a RunId"):
        RunSealedError("case_01ARZ3NDEKTSV4RRFFQ69G5FAV", "x")  # type: ignore[arg-type]


def test_the_duplicate_effect_error_holds_the_effect_key() -> None:
    err = DuplicateEffectError(KEY)
    assert err.effect_key is KEY and type(err.effect_key) is EffectKey
    assert f"ek:{KEY.hex()}" in str(err)
    with pytest.raises(TypeError, match="EffectKey"):
        DuplicateEffectError(KEY.hex())  # type: ignore[arg-type]


def test_messages_read_the_same_as_before() -> None:
    assert str(FencedError(RUN, 1, 2)).startswith(
        "fenced at run run_01ARZ3NDEKTSV4RRFFQ69G5FAV: held epoch 1, store is at 2;"
    )
    assert str(LeaseHeldError(RUN, "a", 3, 45)).startswith(
        "run run_01ARZ3NDEKTSV4RRFFQ69G5FAV is leased by 'a' at epoch 3 for another 45s"
    )
    assert str(RunSealedError(RUN, "ok")).startswith(
        "run run_01ARZ3NDEKTSV4RRFFQ69G5FAV is sealed as 'ok';"
    )


# -- the groups ---------------------------------------------------------------------------

GROUPS = (ConflictError, CorruptionError, UnavailableError, RefusedError, OutcomeError)
#: Bases that are families by layer, not groups; and a signal the caller raises.
FAMILIES = {StoreError, StepError, WitnessError, *GROUPS}
NOT_OURS_TO_RAISE = {SafeToRetry}


def documented_groups() -> dict[str, str]:
    """error name -> group name, from the table in docs/reference/api.md."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md").read_text()
    found: dict[str, str] = {}
    for row in re.findall(r"^\| `(\w+Error)` \| [^|]+ \| (.+) \|$", page, re.M):
        for name in re.findall(r"`(\w+)`", row[1]):
            assert name not in found, f"{name} is listed in two groups"
            found[name] = row[0]
    return found


def test_every_public_error_is_a_store_error_in_exactly_its_documented_group() -> None:
    documented = documented_groups()
    public = {
        name: obj
        for name in agentplane_journal.__all__
        if isinstance(obj := getattr(agentplane_journal, name), type)
        and issubclass(obj, BaseException)
    }
    assert set(documented) <= set(public), set(documented) - set(public)
    for name, cls in public.items():
        if cls in NOT_OURS_TO_RAISE:
            continue
        assert issubclass(cls, StoreError), f"{name} is outside StoreError"
        if cls in FAMILIES:
            continue
        groups = [g.__name__ for g in GROUPS if issubclass(cls, g)]
        assert len(groups) == 1, f"{name} is in {groups or 'no group'}"
        assert documented.get(name) == groups[0], (
            f"{name} is a {groups[0]}, docs/reference/api.md says {documented.get(name)}"
        )


def test_the_groups_are_extra_bases_so_old_except_clauses_still_catch() -> None:
    """Adding a group took no base away: what ``except`` caught before it still catches."""
    assert issubclass(RestoreRefused, ValueError) and issubclass(RestoreIncomplete, RuntimeError)
    assert issubclass(NoteVerificationError, ValueError)
    assert issubclass(IncoherentCheckpointError, ValueError)
    assert issubclass(PoolerError, BackendError) and issubclass(RunLostError, StepError)
    assert issubclass(WitnessStaleError, WitnessError)
    with pytest.raises(ConflictError):
        raise FencedError(RUN, 1, 2)


PACKAGE = Path(__file__).resolve().parents[1] / "agentplane_journal"


def bare_raises(source: str) -> list[str]:
    """Where ``source`` raises a family or a group itself (``raise StepError(...)``): such an
    error is in no group (or says nothing a caller can act on), so each raise names a member."""
    bare = {cls.__name__ for cls in FAMILIES}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in bare:
                found.append(f"{node.lineno}: raise {name}(...)")
    return found


def test_the_checker_sees_a_bare_family_raised() -> None:
    assert bare_raises("raise StepError('x')\nraise errors.RefusedError('y')\n") == [
        "1: raise StepError(...)",
        "2: raise RefusedError(...)",
    ]
    assert bare_raises("raise EffectInDoubtError(run, 'e', key, 'd')\nraise StepError\n") == []


def test_no_family_or_group_is_raised_bare() -> None:
    """Every error the package raises is a member of one group, never a family base or a
    group raised as such (seen red with steps/'s four bare ``StepError``s)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        found += [f"{relative}:{hit}" for hit in bare_raises(path.read_text(encoding="utf-8"))]
    assert found == [], "raise a member of a group instead:\n" + "\n".join(found)
