"""The witness layer's errors: a cosignature stale, forked or unavailable."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    ConflictError,
    CorruptionError,
    StoreError,
    UnavailableError,
)


class WitnessError(StoreError):
    """A witness did not cosign a checkpoint (c2sp.org/tlog-witness). ``witness`` names it.

    Three kinds, because they ask for three different reactions: :class:`WitnessStaleError`
    (routine: the witness is at another size, retry from there), :class:`WitnessForkedError`
    (an integrity alarm: the witness holds a view this log is not consistent with) and
    :class:`WitnessUnavailableError` (the witness could not be asked or answered nonsense).
    """

    def __init__(self, witness: str, message: str) -> None:
        super().__init__(f"witness {witness}: {message}")
        self.witness = witness


class WitnessStaleError(WitnessError, ConflictError):
    """409: the old size sent is not the witness's; ``witness_size`` is the size it holds.

    Not a fork: another submitter (or an earlier run of this one) moved the witness on. The
    client retries once from that size; only a size larger than this log is alarming, and
    that is reported as :class:`WitnessForkedError`.
    """

    def __init__(self, witness: str, witness_size: int) -> None:
        super().__init__(
            witness, f"it last cosigned size {witness_size}, not the old size sent (409)"
        )
        self.witness_size = witness_size


class WitnessForkedError(WitnessError, CorruptionError):
    """The witness refused the checkpoint as inconsistent with what it saw (422), or it saw
    a larger tree than this log has. Either this log forked or shrank, or someone showed the
    witness another log under this origin and key: a split view. Investigate before anything
    else; re-submitting cannot fix it."""


class WitnessUnavailableError(WitnessError, UnavailableError):
    """The witness could not be asked, or its answer was not a protocol answer (a timeout, a
    404 for an origin it does not know, a 403 for a log key it does not trust, a 200 without
    a valid cosignature from its key). Nothing is known about the log from it."""
