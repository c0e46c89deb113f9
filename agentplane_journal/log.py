"""The tenant's Merkle log in the database: sealing a leaf, the checkpoint and the proofs.

The journal store (:mod:`agentplane_journal.store`) owns runs: their chains, leases and
the run mutex. This module owns what a seal adds to the log and what the log answers, so
each can be read in one sitting. Every method here runs inside a unit of work the store
opened (one transaction, one ``AsyncSession``); the store keeps thin methods that take the
run mutex, fence, and delegate.

How the log's guarantees are made:

* **Dense, commit-ordered positions.** A seal takes the next position from the tenant's
  ``journal_counter`` row, whose lock it holds until COMMIT: the next sealer of that tenant
  waits, so positions are handed out in commit order and every snapshot of the log is a
  prefix of every later one. (A sequence hands out values in allocation order; a seal that
  commits late then lands *before* leaves a checkpoint has already committed to.)
* **Proofs from one snapshot.** ``checkpoint``, ``inclusion_proof`` and ``consistency_proof``
  read the log with a single statement.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from . import merkle
from .checkpoint import Checkpoint, Inclusion
from .dialect import Dialect, counter_next
from .errors import BackendError
from .ids import Digest, RunId
from .models import RunSeal
from .statements import digest

__all__ = ["TenantLog"]

_LOG_POSITION = "log_position/"


class TenantLog:
    """One tenant's Merkle log, spoken to through the session of the store's unit of work."""

    def __init__(self, dialect: Dialect, tenant: str, origin: str) -> None:
        self._dialect = dialect
        self.tenant = tenant
        self.origin = origin

    async def append(
        self, session: AsyncSession, run: RunId, head: Digest, sealed_at: int, outcome: str
    ) -> int:
        """Enter ``run`` sealed at ``head`` as the log's next leaf; return its log index.

        The caller holds the run mutex and has checked the run is not sealed yet; this
        takes the tenant's log counter, held until COMMIT (see the module docstring).
        """
        name = _LOG_POSITION + self.tenant
        first = (
            select(func.coalesce(func.max(RunSeal.log_index), -1) + 1)
            .where(RunSeal.tenant == self.tenant)
            .scalar_subquery()
        )
        position = (await session.execute(counter_next(self._dialect, name, first))).scalar_one()
        await session.execute(
            RunSeal.__table__.insert().values(
                tenant=self.tenant,
                run_id=str(run),
                chain_head=bytes(head),
                log_index=position,
                sealed_at=sealed_at,
                outcome=outcome,
            )
        )
        return int(position)

    async def _leaves(self, session: AsyncSession) -> list[tuple[str, bytes]]:
        rows = await session.execute(
            select(RunSeal.run_id, RunSeal.chain_head)
            .where(RunSeal.tenant == self.tenant)
            .order_by(RunSeal.log_index)
        )
        return [(r[0], r[1]) for r in rows]

    async def sealed_runs(self, session: AsyncSession) -> list[tuple[RunId, Digest]]:
        """The log in order, ``(run, sealed chain head)`` per leaf, from one snapshot."""
        return [(RunId.parse(r), digest(h, 0)) for r, h in await self._leaves(session)]

    async def checkpoint(self, session: AsyncSession) -> Checkpoint:
        """``Checkpoint(origin, size, root)`` over the sealed runs in log order."""
        leaves = [merkle.leaf_hash(digest(h, 0)) for _, h in await self._leaves(session)]
        return Checkpoint(self.origin, len(leaves), merkle.root(leaves))

    async def consistency_proof(self, session: AsyncSession, old_size: int) -> list[Digest]:
        """RFC 6962 proof that the log of ``old_size`` is a prefix of the current one."""
        leaves = [merkle.leaf_hash(digest(h, 0)) for _, h in await self._leaves(session)]
        if old_size > len(leaves):
            raise BackendError(
                f"a checkpoint of size {old_size} is larger than this log ({len(leaves)}): "
                "either it belongs to another log (check the origin), or runs were removed"
            )
        return list(merkle.consistency_proof(leaves, old_size))

    async def inclusion_proof(self, session: AsyncSession, run: RunId) -> Inclusion | None:
        """``Inclusion`` for a sealed run from one snapshot; ``None`` if never sealed."""
        run_id = str(run)
        rows = await self._leaves(session)
        index = next((i for i, (rid, _) in enumerate(rows) if rid == run_id), None)
        if index is None:
            return None
        leaves = [merkle.leaf_hash(digest(h, 0)) for _, h in rows]
        return Inclusion(
            index=index,
            size=len(leaves),
            seal=digest(rows[index][1], 0),
            proof=tuple(merkle.inclusion_proof(leaves, index)),
        )
