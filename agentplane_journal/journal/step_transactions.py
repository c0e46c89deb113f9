"""A durable-steps run's own transactions: :meth:`~StepTransactions.admit` (a fresh run's
lease and first batch) and :meth:`~StepTransactions.conclude` (the last batch, the seal and
the lease's release), each one transaction, through the hot path when it can take them.

:class:`StepTransactions` is a base of
:class:`~agentplane_journal.journal.store.SqlJournalStore`; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.admission import claimed_keys
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.core.checks import (
    check_int,
    check_label,
    check_run,
    check_ttl,
    lease_expiry,
)
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.values import Lease
from agentplane_journal.db.hotpath import HeadMoved
from agentplane_journal.db.models import RunLease
from agentplane_journal.db.statements import hot_statements, stored_int
from agentplane_journal.journal.log import TenantLog
from agentplane_journal.journal.log_audit import MAX_LOG_INDEX
from agentplane_journal.journal.writes import RunWrites

__all__ = ["StepTransactions"]


class StepTransactions(RunWrites):
    """A durable-steps run's admission and conclusion, each one transaction."""

    #: This tenant's Merkle log (set by ``SqlJournalStore``).
    tenant_log: TenantLog

    if TYPE_CHECKING:  # RunControl's (journal/leases.py), on the store

        def _claim_statement(
            self, run: RunId, owner: str, ttl: int, now: int, *, reclaim: bool
        ) -> Any: ...

        async def _holder(self, session: AsyncSession, run: RunId, now: int) -> Exception: ...

    async def admit(
        self,
        run: RunId,
        owner: str,
        ttl: int | timedelta,
        batch: Sequence[Append],
        *,
        after: int | None = None,
    ) -> tuple[Lease, list[Record]]:
        """Claim a fresh run's lease and append its first batch, in one transaction.

        What :meth:`acquire` then :meth:`append` do, committed together: the run and its
        lease exist both or neither, so a refused admission (a duplicate admission key, a
        database error) leaves nothing behind, not even an empty lease. A live lease on
        ``run`` is :class:`LeaseHeldError`.

        ``after``: the seq the caller last read the run at; when the run's head is elsewhere
        (someone wrote since) nothing is written, not even the claim, and
        :class:`~agentplane_journal.db.hotpath.HeadMoved` says where it is (the LangGraph
        saver's first write to a thread it read: claim, check and write in one transaction).
        """
        run = check_run(run)
        if after is not None:
            after = check_int(after, "after")
        owner = check_label(owner, "owner")
        ttl = check_ttl(ttl)
        items, batch_run = self.check_batch(batch)
        if batch_run != run:
            raise ValueError(f"admit's batch must be {run}'s records")
        await self._ready()
        now = self.now()

        async def unit(session: AsyncSession) -> tuple[Lease, list[Record]]:
            # Built here, not before the hot path: building it costs more than the hot
            # admission's statement.
            claim = self._claim_statement(run, owner, ttl, now, reclaim=False)
            # The run mutex first, as for every lease change and append (the activity row
            # the append keeps anyway), then the claim, then the fence under both.
            params = {"tenant": self.tenant, "run_id": str(run), "now": now}
            conn = await session.connection()
            await conn.execute(hot_statements(self.dialect).run_mutex, params)
            found = (await session.execute(claim)).scalar_one_or_none()
            if found is None:
                raise await self._holder(session, run, now)
            epoch = stored_int(found, 0, "run_lease.epoch")
            state = await self.lock_run(session, run, epoch, held=True)
            if after is not None and state.head_seq != after:
                raise HeadMoved(state.head_seq)  # rolls the claim back with it
            return Lease(run, owner, epoch), await self.write_batch(
                session, run, epoch, state, items
            )

        self.refuse_own_wait(run)
        self.refuse_other_profile(items, self.profile)
        try:  # SQLite: one thread hop, in the writer's queue (PostgreSQL: None)
            hot: list[Record] | None = await self._writer.admit(
                self.tenant,
                self._signer,
                now,
                run,
                owner,
                lease_expiry(now, ttl),
                items,
                claimed_keys(items),
                self.profile,
                after,
            )
        finally:
            self._wrote()
        if hot is not None:
            return Lease(run, owner, hot[-1].epoch), hot
        lease, records = await self.unit(unit, run=run)
        if records:
            self._writer.remember(self.tenant, str(run), records[-1])
        return lease, records

    async def conclude(
        self, epoch: int, batch: Sequence[Append], outcome: str
    ) -> tuple[list[Record], Digest]:
        """Append ``batch`` (ending with the run's ``RunSealed``), seal the run at its new
        head and release the lease at ``epoch``, in one transaction; return the records and
        the sealed head. Fenced and refused when sealed, as :meth:`append` and :meth:`seal`
        are; nothing of it commits unless all of it does."""
        epoch = check_int(epoch, "epoch")
        outcome = check_label(outcome, "outcome")
        items, run = self.check_batch(batch)
        if run is None or items[-1].kind != RUN_SEALED:
            raise ValueError("conclude's batch must end with the run's RunSealed record")
        release = (
            update(RunLease)
            .where(
                RunLease.tenant == self.tenant,
                RunLease.run_id == str(run),
                RunLease.epoch == epoch,
            )
            .values(owner=RELEASED_OWNER, expires_at=0)
        )

        async def unit(session: AsyncSession) -> tuple[list[Record], Digest]:
            state = await self.lock_run(session, run, epoch)  # the lease row is locked too
            records = await self.write_batch(session, run, epoch, state, items)
            head = records[-1].hash
            await self.tenant_log.append(session, [(str(run), bytes(head), self.now(), outcome)])
            await session.execute(release)
            return records, head

        if claimed_keys(items) or any(i.kind == EFFECT_STARTED for i in items):
            return await self.unit(unit, run=run)  # rare: the general unit claims and checks
        self.refuse_own_wait(run)
        await self._ready()
        self.refuse_other_profile(items, self.profile)
        try:  # SQLite: one thread hop in the group commit; PostgreSQL: one statement
            hot = await self._writer.conclude(
                self.tenant,
                self._signer,
                self.now(),
                run,
                epoch,
                items,
                outcome,
                self.tenant_log.append_with,
                self.profile,
                counter=self.tenant_log.counter_name,
                max_index=MAX_LOG_INDEX,
            )
        finally:
            self._wrote()
        if hot is not None:
            return hot, hot[-1].hash
        return await self.unit(unit, run=run)
