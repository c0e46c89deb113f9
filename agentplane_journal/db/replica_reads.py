"""The store's standby side: whether reads come from a standby, the replication state, waiting
for a standby to catch up, and read-your-writes on a replica.

:class:`ReplicaReads` is a base of :class:`agentplane_journal.db.unit.Repository`; its methods
run on the repository's :class:`~agentplane_journal.db.shared.SharedState`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.db.dialect import READ_ONLY
from agentplane_journal.db.driver_errors import describe
from agentplane_journal.db.replication import ReplicationState, replication, wait_received
from agentplane_journal.db.shared import SharedState
from agentplane_journal.errors import BackendError, StoreError

__all__ = ["ReplicaReads"]

T = TypeVar("T")


class ReplicaReads:
    """Standby reads, replication state and read-your-writes (a base of ``Repository``)."""

    _shared: SharedState

    if TYPE_CHECKING:  # supplied by Repository

        async def _ready(self) -> None: ...

        async def unit(
            self,
            fn: Callable[[AsyncSession], Awaitable[T]],
            *,
            read_only: bool = False,
            primary: bool = False,
            translate: Callable[[DBAPIError], StoreError | None] | None = None,
            session: AsyncSession | None = None,
            run: Any = None,
        ) -> T: ...

    async def reads_from_standby(self) -> bool:
        """Whether the server that answers this store's audit reads is a standby still in
        recovery (a streaming replica): its log may be behind the primary's, so a log
        smaller than a saved checkpoint there means "not replayed yet", not "truncated"."""
        dialect = self._shared.dialect

        async def unit(session: AsyncSession) -> bool:
            return await dialect.standby(await session.connection())

        return await self.unit(unit, read_only=True)

    async def replication(self) -> ReplicationState:
        """What a failover could lose now: the primary's WAL end and how far each streaming
        standby has flushed and replayed it (:mod:`agentplane_journal.db.replication`).
        Read on the primary; SQLite has no replication (no position, no standbys)."""
        await self._ready()
        shared = self._shared
        try:
            async with shared.engine.connect() as conn:
                return await replication(shared.dialect, conn)
        except DBAPIError as exc:
            raise BackendError(f"cannot read the replication state: {describe(exc)}") from exc

    async def wait_standby(self, within: float) -> ReplicationState:
        """Wait up to ``within`` seconds until a standby has flushed everything this
        primary acknowledged before the call (so a failover to it cannot lose what was read
        before, such as a checkpoint); the state last seen, ``.safe`` if one did."""
        await self._ready()
        shared = self._shared
        try:
            async with shared.engine.connect() as conn:
                position = await shared.dialect.wal_position(conn)
                if position is None:
                    return ReplicationState(None, ())
                await conn.commit()  # each poll in a transaction of its own
                return await wait_received(shared.dialect, conn, position, within)
        except DBAPIError as exc:
            raise BackendError(f"cannot read the replication state: {describe(exc)}") from exc

    def _wrote(self, *, host: bool = False) -> None:
        """Note, for read-your-writes, a write of this store that has *ended* (committed,
        failed or unknown): a read that starts afterwards reads a WAL position past it. A
        write in the host's session (``host``) ends when the host commits, which the store
        does not see: from then on every replica read checks."""
        self._shared.writes += 1
        if host:
            self._shared.host_writes = True

    async def _replica_has_our_writes(self, session: AsyncSession) -> bool:
        """Whether the replica ``session`` reads from has replayed every write this store
        has begun: read-your-writes (on unless ``read_your_writes=False``).

        Nothing to check when the store has not written since the replica was last seen
        past its writes. Otherwise one statement on the primary reads where its WAL ends
        (every commit acknowledged so far lies before it) and one on the replica, first in
        the read's own transaction, whether replay has passed it; a standby's replay only
        moves forward, so the read that follows sees at least that much. Writes are counted
        when they end, so the count read first covers only writes before the position; a
        write still in flight is not waited for (only acknowledged ones are promised).
        Costs nothing on the write path.
        """
        shared = self._shared
        writes = shared.writes
        if not shared.read_your_writes or (writes == shared.caught_up and not shared.host_writes):
            return True
        async with shared.engine.connect() as primary:
            primary = await primary.execution_options(**{READ_ONLY: True})
            position = await shared.dialect.wal_position(primary)
        if position is None:
            return True
        if not await shared.dialect.replayed(await session.connection(), position):
            return False
        shared.caught_up = max(shared.caught_up, writes)
        return True
