"""Small frozen value types the journal store hands back."""

from __future__ import annotations

from dataclasses import dataclass

from agentplane_journal.core.ids import Digest, RunId

__all__ = ["Cancellation", "Head", "Lease"]


@dataclass(frozen=True, slots=True)
class Head:
    """A run's chain head: the last seq and its hash (``Head(0, Digest.ZERO)`` when unwritten)."""

    seq: int
    hash: Digest


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: write to ``run`` with ``epoch`` until it lapses or is released."""

    run: RunId
    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A durable stop request; the first asker stays on the record."""

    actor: str
    reason: str
