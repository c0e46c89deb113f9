"""What a database's hot append path offers the store: the :class:`HotPath` protocol.

The store (:mod:`agentplane_journal.journal.store`) hands an append that it cannot settle
more cheaply elsewhere to its hot path, chosen once by the dialect object
(:func:`agentplane_journal.backends.dispatch.hot_path`), and never reaches into a writer's
fields; a writer gets what it needs of the store as arguments, never the store itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer

__all__ = ["General", "HotPath"]

#: The same append as a general unit of work (``store.py``), whose answers are the reference.
General = Callable[[], Awaitable[list[Record]]]


class HotPath(Protocol):
    """One database's append path: one statement (PostgreSQL) or one thread hop (SQLite)."""

    async def append(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        epoch: int,
        items: Sequence[Append],
        keys: Sequence[EffectKey],
        general: General,
    ) -> list[Record]:
        """Append ``items`` (one run's batch, no duplicate key, no conclusion), or run
        ``general()`` when this path cannot settle it; the contract's errors are raised."""
        ...

    async def idle(self) -> None:
        """Wait until every queued append is answered and the connections are back."""
        ...
