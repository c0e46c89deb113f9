"""What both hot paths share: a batch sealed into journal rows, and the fence. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentplane_journal.core.append import RUN_SEALED, Append
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer
from agentplane_journal.core.wire_errors import FencedError

__all__ = ["COLUMNS", "RELEASED_OWNER", "fenced", "chain_batch"]

#: 0.4.0 marks a released lease with an empty owner (and ``expires_at = 0``).
RELEASED_OWNER = ""

#: The journal's columns, in the order :func:`chain_batch` lays out a row.
COLUMNS = (
    "tenant",
    "run_id",
    "seq",
    "epoch",
    "kind",
    "effect_key",
    "prev_hash",
    "hash",
    "raw",
    "key_id",
    "signature",
    "case_id",
)


def chain_batch(
    tenant: str,
    run_id: str,
    epoch: int,
    head_seq: int,
    head_hash: Digest,
    items: Sequence[Append],
    signer: Signer | None,
    profile: WireProfile = AGENTPLANE_0_4,
) -> tuple[list[Record], list[tuple[Any, ...]], str | None]:
    """Chain, canonicalise and sign ``items`` after ``head``: the records, their journal rows
    (in :data:`COLUMNS` order) and the batch's ``RunSealed`` outcome, if it concludes the run.
    ``profile`` is the journal's wire profile, whose canonical-JSON rule seals the bodies (the
    store has refused items in another profile, :meth:`WireProfile.refusal`, before any
    transaction). Pure: no I/O, so it runs wherever the transaction does."""
    canon = profile.canonicalize
    records: list[Record] = []
    rows: list[tuple[Any, ...]] = []
    prev, seq, conclusion = head_hash, head_seq, None
    for item in items:
        seq += 1
        record = Record.seal(item.body(seq, epoch), prev, signer, canon=canon)
        prev_bytes = prev._bytes
        prev = record.hash
        records.append(record)
        att = record.attestation
        rows.append(
            (
                tenant,
                run_id,
                seq,
                epoch,
                item.kind,
                None if item.effect_key is None else item.effect_key.hex(),
                prev_bytes,
                prev._bytes,
                record.raw,
                None if att is None else att.key_id,
                None if att is None else att.signature,
                None if item.case is None else str(item.case),
            )
        )
        if item.kind == RUN_SEALED:
            conclusion = item.payload["outcome"]
    return records, rows, conclusion


def fenced(run: RunId, epoch: int, lease_epoch: Any, lease_owner: Any) -> FencedError | None:
    """The fence: a run with a lease row accepts only its current epoch, a released one none."""
    if lease_epoch is not None and (epoch != lease_epoch or lease_owner == RELEASED_OWNER):
        return FencedError(run, epoch, int(lease_epoch))
    return None
