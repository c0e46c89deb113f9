"""agentplane's push-delivery store contract, as a Protocol; :mod:`.push` implements it.

A delivery worker is written against this: any store that has these methods with these
meanings (see ``store-contract.md``) can back it.
"""

from __future__ import annotations

import builtins
from typing import Protocol, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncSession

from .ids import RunId
from .push_values import PushConfig, PushRegistration

__all__ = ["PushStore"]


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
    async def delete(
        self, task: RunId, id: str, *, session: AsyncSession | None = None
    ) -> None: ...
