"""agentplane's store contracts, as Protocols: what a runtime is written against.

:class:`JournalStore` (runs: appends, leases, seals, the log, reads) and :class:`PushStore`
(webhook registrations and their cursors), with the meanings of ``store-contract.md``; any
store that has these methods with those meanings can back agentplane.
:class:`~agentplane_journal.journal.store.SqlJournalStore` and
:class:`~agentplane_journal.push.store.SqlPushStore` implement them, and re-export them.

(``builtins.list`` in annotations: inside these classes ``list`` is a method.)
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import CaseId, Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.core.values import Cancellation, Head, Lease
from agentplane_journal.push.values import PushConfig, PushRegistration
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion

__all__ = ["JournalStore", "PushStore"]


@runtime_checkable
class JournalStore(Protocol):
    """agentplane's journal store contract (see the README and ``store-contract.md``)."""

    tenant: str

    def for_tenant(self, name: str) -> JournalStore: ...
    def is_shared(self) -> bool: ...
    async def append(
        self, epoch: int, batch: Sequence[Append], *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def append_atomic(
        self,
        run: RunId,
        epoch: int,
        work: Callable[[AsyncSession], Awaitable[Iterable[Append]]],
        *,
        session: AsyncSession | None = None,
    ) -> list[Record]: ...
    async def read(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def head(self, run: RunId, *, session: AsyncSession | None = None) -> Head: ...
    async def acquire(
        self, run: RunId, owner: str, ttl: int, *, session: AsyncSession | None = None
    ) -> Lease: ...
    async def renew(
        self, run: RunId, owner: str, epoch: int, ttl: int, *, session: AsyncSession | None = None
    ) -> Lease: ...
    async def abandoned_runs(
        self, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]: ...
    async def release_lease(
        self, run: RunId, epoch: int, *, session: AsyncSession | None = None
    ) -> None: ...
    async def seal(
        self, run: RunId, epoch: int, outcome: str, *, session: AsyncSession | None = None
    ) -> Digest: ...
    async def sealed_runs(
        self, *, session: AsyncSession | None = None
    ) -> list[tuple[RunId, Digest]]: ...
    async def checkpoint(self, *, session: AsyncSession | None = None) -> Checkpoint: ...
    async def consistency_proof(
        self, old_size: int, *, session: AsyncSession | None = None
    ) -> list[Digest]: ...
    async def inclusion_proof(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Inclusion | None: ...
    async def runs_by_outcome(
        self, outcome: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]: ...
    async def admitted_as(
        self, key: str, *, session: AsyncSession | None = None
    ) -> RunId | None: ...
    async def forget_admissions(
        self, older_than: int | datetime, *, session: AsyncSession | None = None
    ) -> int: ...
    async def recent_runs(
        self,
        after: tuple[RunId, int] | None = None,
        limit: int = 100,
        *,
        session: AsyncSession | None = None,
    ) -> list[tuple[RunId, int]]: ...
    async def case_history(
        self, case: CaseId, limit: int, *, session: AsyncSession | None = None
    ) -> list[Record]: ...
    async def request_cancel(
        self, run: RunId, actor: str, reason: str, *, session: AsyncSession | None = None
    ) -> bool: ...
    async def cancellation(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Cancellation | None: ...
    async def verify(
        self,
        run: RunId,
        verifier: Verifier | None = None,
        require_signature: bool = False,
        *,
        session: AsyncSession | None = None,
    ) -> Digest: ...


@runtime_checkable
class PushStore(Protocol):
    """agentplane's push-delivery store contract (see ``store-contract.md``).

    (``builtins.list`` in annotations: inside these classes ``list`` is the method.)
    """

    tenant: str

    def for_tenant(self, name: str) -> PushStore: ...
    async def put(
        self, config: PushConfig, next_seq: int, *, session: AsyncSession | None = None
    ) -> None: ...
    async def get(
        self, task: RunId, id: str, *, session: AsyncSession | None = None
    ) -> PushConfig | None: ...
    async def list(
        self, task: RunId, *, session: AsyncSession | None = None
    ) -> builtins.list[PushConfig]: ...
    async def due(
        self, at: int, limit: int, *, session: AsyncSession | None = None
    ) -> builtins.list[PushRegistration]: ...
    async def advance(
        self, task: RunId, id: str, next_seq: int, *, session: AsyncSession | None = None
    ) -> None: ...
    async def retry(
        self,
        task: RunId,
        id: str,
        next_attempt_at: int,
        error: str,
        *,
        session: AsyncSession | None = None,
    ) -> None: ...
    async def park(
        self, task: RunId, id: str, error: str, *, session: AsyncSession | None = None
    ) -> None: ...
    async def parked(
        self,
        limit: int,
        *,
        after: tuple[RunId, str] | None = None,
        session: AsyncSession | None = None,
    ) -> builtins.list[PushRegistration]: ...
    async def unpark(
        self, task: RunId, id: str, at: int, *, session: AsyncSession | None = None
    ) -> bool: ...
    async def delete(
        self, task: RunId, id: str, *, session: AsyncSession | None = None
    ) -> None: ...
