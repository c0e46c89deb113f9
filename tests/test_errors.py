"""Error attributes carry the caller's types, and messages still read as text."""

from __future__ import annotations

import pytest

from agentplane_journal import (
    AppendConflictError,
    DuplicateEffectError,
    EffectKey,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunId,
    RunSealedError,
    TransactionEndedError,
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
