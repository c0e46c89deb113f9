"""What a run-changing transaction learns once it holds the run mutex, judged in one place.

The store's ``_lock_run`` reads one run's ``run_state`` row under its mutex;
:mod:`agentplane_journal.journal.bulk` reads many runs' rows at once. Both hand each row to
:func:`run_state_from`, so the fence, the seal and the re-hashed head are judged by the same
code whichever path wrote the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentplane_journal.core.batch import fenced
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.db.statements import record_from_row, stored_int, stored_text

__all__ = ["RunState", "run_state_from"]


@dataclass(frozen=True, slots=True)
class RunState:
    """What a run-changing transaction learns once it holds the run mutex."""

    sealed_outcome: str | None
    sealed_head: bytes | None
    head_seq: int
    head_hash: Digest


def run_state_from(run: RunId, epoch: int, row: tuple[Any, ...]) -> RunState:
    """Fence ``epoch`` and read the run's state from its ``run_state`` row (lease epoch and
    owner, seal outcome and head, then the head record's columns or NULLs), as read under
    the run mutex."""
    lease_epoch, lease_owner, sealed_outcome, sealed_head = row[:4]
    if lease_epoch is not None:
        lease_epoch = stored_int(lease_epoch, 0, "run_lease.epoch")
        lease_owner = stored_text(lease_owner, 0, "run_lease.owner")
        # A released lease fences every epoch until someone acquires it again.
        refused = fenced(run, epoch, lease_epoch, lease_owner)
        if refused is not None:
            raise refused
    if sealed_outcome is not None:
        sealed_outcome = stored_text(sealed_outcome, 0, "run_seal.outcome")
    if row[4] is None:
        head_seq, head_hash = 0, Digest.ZERO
    else:
        # The head is re-hashed and checked against its columns in this transaction: a
        # forged head is refused here, never chained onto or sealed into the log.
        head = record_from_row(row[4:])
        head_seq, head_hash = head.seq, head.hash
    return RunState(
        sealed_outcome=sealed_outcome,
        sealed_head=sealed_head,
        head_seq=head_seq,
        head_hash=head_hash,
    )
