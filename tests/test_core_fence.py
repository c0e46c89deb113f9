"""The fence and the run state a run-changing transaction acts on, pure.

Every append, seal and bulk write asks :func:`fenced` whether its epoch may write, and
:func:`run_state_from` what the run's lease, seal and head say, from the ``run_state`` row it
read under the run mutex; :func:`chain_batch` lays out the rows it then inserts. These tests
feed them rows and batches directly (no database), so ``tools/mutation.py batch run_state``
can run every mutant of them in seconds; tests/test_store.py holds the same rules on both
dialects through the store.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentplane_journal import AGENTPLANE_0_22
from agentplane_journal.core.append import Append
from agentplane_journal.core.batch import COLUMNS, RELEASED_OWNER, chain_batch, fenced
from agentplane_journal.core.ids import CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import (
    DOMAIN_RECORD,
    Ed25519Signer,
    Ed25519Verifier,
    signing_hash,
)
from agentplane_journal.errors import CorruptRecordError, FencedError
from agentplane_journal.journal.writes import RunState, run_state_from

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
CASE = CaseId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
KEY = EffectKey(bytes(range(32)))
SIGNER = Ed25519Signer("w", bytes(range(32)))
HEAD = Digest.of(b"the head")


# -- the fence -----------------------------------------------------------------------------


def test_a_run_without_a_lease_row_fences_nothing() -> None:
    for epoch in (0, 1, 7):
        assert fenced(RUN, epoch, None, None) is None
        assert fenced(RUN, epoch, None, RELEASED_OWNER) is None


def test_a_live_lease_accepts_its_epoch_only() -> None:
    assert fenced(RUN, 3, 3, "w") is None
    for epoch in (2, 4, 0):
        refused = fenced(RUN, epoch, 3, "w")
        assert isinstance(refused, FencedError)
        assert (refused.run, refused.held, refused.current) == (RUN, epoch, 3)


def test_a_released_lease_fences_every_epoch_its_own_too() -> None:
    assert RELEASED_OWNER == ""
    refused = fenced(RUN, 3, 3, "")
    assert isinstance(refused, FencedError) and refused.current == 3
    assert fenced(RUN, 3, 3, " ") is None


# -- the run state under the mutex ---------------------------------------------------------


def _head(seq: int = 4) -> tuple[Any, ...]:
    """A RECORD_COLUMNS row of a well-formed head record at ``seq``."""
    body = Append(RUN, "Note", {"text": "t"}).body(seq, 3)
    rec = Record.seal(body, HEAD)
    return (
        seq,
        bytes(HEAD),
        bytes(rec.hash),
        bytes(rec.raw),
        None,
        None,
        f"run_{RUN.ulid}",
        3,
        "Note",
        None,
        None,
    )


NO_HEAD = (None,) * 11


def test_a_fresh_run_starts_at_the_zero_head() -> None:
    state = run_state_from(RUN, 1, (None, None, None, None, *NO_HEAD))
    assert state == RunState(None, None, 0, Digest.ZERO)


def test_the_head_is_the_head_record_re_hashed() -> None:
    row = _head(4)
    state = run_state_from(RUN, 3, (3, "w", None, None, *row))
    assert state.head_seq == 4
    assert state.head_hash == Digest(row[2]) and state.head_hash != Digest.ZERO
    assert state.sealed_outcome is None and state.sealed_head is None


def test_a_forged_head_is_refused_never_chained_onto() -> None:
    row = list(_head(4))
    row[2] = bytes(Digest.of(b"forged"))
    with pytest.raises(CorruptRecordError):
        run_state_from(RUN, 3, (3, "w", None, None, *row))


def test_a_sealed_run_says_its_outcome_and_head() -> None:
    sealed = bytes(Digest.of(b"terminal"))
    state = run_state_from(RUN, 3, (3, "w", "completed", sealed, *_head(5)))
    assert (state.sealed_outcome, state.sealed_head, state.head_seq) == ("completed", sealed, 5)
    # A seal row without a lease row (0.4.0 runs, restores): read the same way.
    state = run_state_from(RUN, 9, (None, None, "failed", sealed, *_head(5)))
    assert state.sealed_outcome == "failed"


@pytest.mark.parametrize(("epoch", "owner"), [(2, "w"), (4, "w"), (3, "")])
def test_a_displaced_or_released_writer_is_fenced_before_anything_is_read(
    epoch: int, owner: str
) -> None:
    # The head row is forged: the fence must refuse first, whatever the rest says.
    row = list(_head(4))
    row[2] = b"x"
    with pytest.raises(FencedError) as caught:
        run_state_from(RUN, epoch, (3, owner, "completed", None, *row))
    assert (caught.value.held, caught.value.current) == (epoch, 3)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        (("3", "w", None, None), "run_lease.epoch"),
        ((True, "w", None, None), "run_lease.epoch"),
        ((3, b"w", None, None), "run_lease.owner"),
        ((3, None, None, None), "run_lease.owner"),
        ((3, "w", b"completed", None), "run_seal.outcome"),
        ((None, None, 7, None), "run_seal.outcome"),
    ],
)
def test_a_lease_or_seal_column_of_the_wrong_type_is_corrupt(
    row: tuple[Any, ...], column: str
) -> None:
    with pytest.raises(CorruptRecordError, match=f"the {column} column holds") as caught:
        run_state_from(RUN, 3, (*row, *NO_HEAD))
    assert caught.value.seq == 0


# -- the rows a batch inserts --------------------------------------------------------------


def test_a_batch_is_chained_after_the_head_and_laid_out_in_column_order() -> None:
    items = [
        Append(RUN, "EffectStarted", {"text": "a"}, step=1, effect_key=KEY, case=CASE),
        Append(RUN, "Note", {"text": "b"}),
    ]
    records, rows, conclusion = chain_batch("t", RUN.ulid, 3, 4, HEAD, items, SIGNER)
    assert conclusion is None
    assert [r.seq for r in records] == [5, 6]
    assert records[0].prev_hash == HEAD and records[1].prev_hash == records[0].hash
    assert records[0].body["epoch"] == 3
    verifier = Ed25519Verifier().trust("w", SIGNER.public_key)
    for r in records:
        assert r.attestation is not None
        message = signing_hash(DOMAIN_RECORD, r.hash)
        assert verifier.verify("w", message, r.attestation.signature)
    assert len(COLUMNS) == len(rows[0]) == 12
    first = dict(zip(COLUMNS, rows[0], strict=True))
    assert first == {
        "tenant": "t",
        "run_id": RUN.ulid,
        "seq": 5,
        "epoch": 3,
        "kind": "EffectStarted",
        "effect_key": KEY.hex(),
        "prev_hash": bytes(HEAD),
        "hash": bytes(records[0].hash),
        "raw": records[0].raw,
        "key_id": "w",
        "signature": records[0].attestation.signature if records[0].attestation else None,
        "case_id": str(CASE),
    }
    second = dict(zip(COLUMNS, rows[1], strict=True))
    assert (second["effect_key"], second["case_id"], second["prev_hash"]) == (
        None,
        None,
        bytes(records[0].hash),
    )
    _, unsigned, _ = chain_batch("t", RUN.ulid, 3, 4, HEAD, items[1:], None)
    assert unsigned[0][9:11] == (None, None)


def test_a_batch_ending_in_a_seal_returns_its_outcome_and_the_profile_seals_it() -> None:
    items = [
        AGENTPLANE_0_22.append(RUN, "Note", {"text": "x", "n": 1e16}),
        AGENTPLANE_0_22.append(RUN, "RunSealed", {"outcome": "completed"}),
    ]
    records, _, conclusion = chain_batch(
        "t", RUN.ulid, 1, 0, Digest.ZERO, items, None, AGENTPLANE_0_22
    )
    assert conclusion == "completed"
    assert b'"n":10000000000000000' in records[0].raw  # RFC 8785's digits, not 0.4's 1e16
    _, _, none = chain_batch("t", RUN.ulid, 1, 0, Digest.ZERO, items[:1], None, AGENTPLANE_0_22)
    assert none is None
