"""What a database's hot append path offers the store: the :class:`HotPath` protocol.

:class:`HotPath` is all the store (:mod:`agentplane_journal.journal.store`) sees: it hands an
append that it cannot settle more cheaply elsewhere to its hot path, chosen once by the
dialect object (:func:`agentplane_journal.backends.dispatch.hot_path`), and never reaches
into a writer's fields; a writer gets what it needs of the store as arguments, never the
store itself. It lives here, below ``backends/`` (which implements it), so that the shared
state of :mod:`agentplane_journal.db.unit` holds the writer typed, and a reader (and mypy) can
follow an append from the store into the writer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Signer

__all__ = ["CancelRequested", "General", "HeadMoved", "HotPath", "LogSeal"]

#: The same append as a general unit of work (``store.py``), whose answers are the reference.
General = Callable[[], Awaitable[list[Record]]]

#: The tenant log's seal run synchronously (``TenantLog.append_with``): given a runner of
#: SQLAlchemy statements on the open write transaction and the leaves ``(run_id, chain_head,
#: sealed_at, outcome)``, it writes the seals and the tree and returns their log positions.
LogSeal = Callable[
    [Callable[[Any, Any], Sequence[Sequence[Any]]], Sequence[tuple[str, bytes, int, str]]],
    list[int],
]


class CancelRequested(Exception):
    """Internal: an append made ``unless_cancelled`` found the run's stop request, and wrote
    nothing (its transaction, or its savepoint, rolled back): ``actor`` and ``reason`` are
    the request's. The store turns it into its answer; no caller of the store sees it."""

    def __init__(self, actor: str, reason: str) -> None:
        super().__init__(actor, reason)
        self.actor = actor
        self.reason = reason


class HeadMoved(Exception):
    """Internal: an admission made ``after`` a head found the run's head elsewhere (someone
    wrote since the caller read it), and wrote nothing, not even its lease claim. ``found``
    is the head's seq. The LangGraph saver turns it into ``ThreadMovedError``."""

    def __init__(self, found: int) -> None:
        super().__init__(found)
        self.found = found


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
        profile: WireProfile = AGENTPLANE_0_4,
        *,
        unless_cancelled: bool = False,
    ) -> list[Record]:
        """Append ``items`` (one run's batch: no duplicate key, no conclusion, no admission
        key), sealed under the journal's wire ``profile``, or run ``general()`` when this path
        cannot settle it; the contract's errors are raised. ``unless_cancelled``: in the same
        transaction, write nothing and raise :class:`CancelRequested` if the run has a stop
        request (``general`` then checks it too)."""
        ...

    def remember(self, tenant: str, run_id: str, record: Record) -> None:
        """``record`` is the run's head, as a general unit of work just committed it."""
        ...

    async def admit(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        owner: str,
        expires_at: int,
        items: Sequence[Append],
        keys: Sequence[str],
        profile: WireProfile = AGENTPLANE_0_4,
        after: int | None = None,
    ) -> list[Record] | None:
        """A fresh run's admission (its lease claim for ``owner`` until ``expires_at``,
        ``items`` and the claims of ``keys``) in one transaction, or ``None`` when this
        path does not do admissions (the store then runs its general unit of work). ``after``:
        the batch lands only on a head at that seq, else :class:`HeadMoved`."""
        ...

    async def conclude(
        self,
        tenant: str,
        signer: Signer | None,
        now: int,
        run: RunId,
        epoch: int,
        items: Sequence[Append],
        outcome: str,
        seal: LogSeal,
        profile: WireProfile = AGENTPLANE_0_4,
        *,
        counter: str = "",
        max_index: int = 0,
    ) -> list[Record] | None:
        """A run's conclusion (``items`` ending with its ``RunSealed``, the run's leaf in the
        tenant's log through ``seal`` with ``outcome``, the lease at ``epoch`` released) in one
        transaction; ``None`` when this path does not do conclusions, or not this one (the
        store then runs its general unit of work). ``counter``: the tenant's log counter
        row, ``max_index`` the log's largest position (for a path that seals by itself)."""
        ...

    async def idle(self) -> None:
        """Wait until every queued append is answered and the connections are back."""
        ...
