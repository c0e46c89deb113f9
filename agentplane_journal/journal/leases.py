"""Who may write a run and whether it should stop: leases and cancellation requests.

A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`. The fence that a lease
protects is checked by the store's writers under the run mutex (``SqlJournalStore._lock_run``);
this module only takes, renews and frees leases, and records stop requests.

* **A fresh lease** is one ``INSERT .. ON CONFLICT DO UPDATE .. WHERE`` statement: a
  concurrent first acquire waits on the unique index and re-evaluates the predicate against
  the winner's row, so exactly one owner gets epoch 1 (0.4.0's read-then-upsert handed two
  owners epoch 1).
* **Release** is an update, never a delete: the epoch stays in the row, so the next acquire
  gets epoch + 1 and the released epoch stays fenced.
* **Both take the run mutex first** (the run's ``run_activity`` row), as every append and
  seal does, without moving its ``updated_at`` or leaving a row behind (:func:`_take_mutex`).
  A lease row that does not exist yet cannot be locked: an append that read "no lease"
  under the mutex could otherwise commit after a first ``acquire`` had returned. Under the
  mutex, an append either committed before the lease was written or sees it. The mutex
  row gets a new version, so a hot statement whose snapshot predates the lease sees its
  mutex row changed and defers to the general unit; and since a lease row is only written
  under the mutex, the hot statements, which skip a locked mutex row, never wait on it.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import case, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.core.checks import (
    MAX_I64,
    check_int,
    check_label,
    check_run,
    check_text,
    check_ttl,
)
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.values import Cancellation, Lease
from agentplane_journal.db.models import RunCancel, RunLease
from agentplane_journal.db.statements import hot_statements, stored_int, stored_text
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import BackendError, LeaseHeldError

__all__ = ["RunControl"]


class RunControl(Repository):
    """The store's leases and cancellation requests (no state of its own)."""

    # -- leases ------------------------------------------------------------------------

    async def acquire(
        self, run: RunId, owner: str, ttl: int | timedelta, *, session: AsyncSession | None = None
    ) -> Lease:
        """Take, renew or take over the run's lease; ``ttl`` in whole seconds (at least 1).

        No lease: epoch 1. Expired or released: epoch + 1, for the same owner too. Live and
        ours: renewal, same epoch. Live and another's: :class:`LeaseHeldError`.
        """
        run = check_run(run)
        owner = check_label(owner, "owner")
        ttl = check_ttl(ttl)
        if self._now() + ttl > MAX_I64:
            raise ValueError(
                f"ttl {ttl} is too long: now + ttl must fit a signed 64-bit integer "
                f"(at most {MAX_I64 - self._now()} seconds from now)"
            )
        d = self._dialect

        async def unit(session: AsyncSession) -> Lease:
            claimed = await self._take_mutex(session, run, claim=True)
            lease = await take(session)
            if claimed:
                await self._drop_claim(session, run)
            return lease

        async def take(session: AsyncSession) -> Lease:
            for _ in range(8):
                now = self._now()
                insert = d.insert(RunLease).values(
                    tenant=self.tenant,
                    run_id=str(run),
                    owner=owner,
                    epoch=1,
                    expires_at=now + ttl,
                )
                lapsed = RunLease.expires_at <= now
                stmt = insert.on_conflict_do_update(
                    index_elements=[RunLease.tenant, RunLease.run_id],
                    set_={
                        "owner": insert.excluded.owner,
                        "epoch": case((lapsed, RunLease.epoch + 1), else_=RunLease.epoch),
                        "expires_at": insert.excluded.expires_at,
                    },
                    where=or_(lapsed, RunLease.owner == owner),
                ).returning(RunLease.epoch)
                epoch = (await session.execute(stmt)).scalar_one_or_none()
                if epoch is not None:
                    return Lease(run, owner, int(epoch))
                held = (
                    await session.execute(
                        select(RunLease.owner, RunLease.epoch, RunLease.expires_at).where(
                            RunLease.tenant == self.tenant, RunLease.run_id == str(run)
                        )
                    )
                ).one_or_none()
                if held is None:
                    continue
                expires = stored_int(held.expires_at, 0, "run_lease.expires_at")
                holder = stored_text(held.owner, 0, "run_lease.owner")
                if expires > now and holder != owner:
                    held_epoch = stored_int(held.epoch, 0, "run_lease.epoch")
                    raise LeaseHeldError(run, holder, held_epoch, expires - now)
            raise BackendError(f"the lease of {run} kept changing while acquiring it; retry")

        return await self._unit(unit, session=session)

    async def release_lease(
        self, run: RunId, epoch: int, *, session: AsyncSession | None = None
    ) -> None:
        """Free the lease now if ``epoch`` is current; otherwise a silent no-op. Idempotent.

        An update, never a delete: the epoch stays in the row, so the next acquire gets
        epoch + 1 and the released epoch stays fenced.
        """
        run = check_run(run)
        epoch = check_int(epoch, "epoch")
        stmt = (
            update(RunLease)
            .where(
                RunLease.tenant == self.tenant,
                RunLease.run_id == str(run),
                RunLease.epoch == epoch,
            )
            .values(owner=RELEASED_OWNER, expires_at=0)
        )

        async def unit(session: AsyncSession) -> None:
            await self._take_mutex(session, run, claim=False)  # no row: no append to fence
            await session.execute(stmt)

        await self._unit(unit, session=session)

    async def _take_mutex(self, session: AsyncSession, run: RunId, *, claim: bool) -> bool:
        """Take the run mutex for a lease change; ``True`` if that inserted the activity row,
        which :meth:`_drop_claim` must delete before COMMIT (a lease is not activity)."""
        statements = hot_statements(self._dialect)
        params = {"tenant": self.tenant, "run_id": str(run), "now": self._now()}
        of = {"of_tenant": self.tenant, "of_run_id": str(run)}
        conn = await session.connection()
        for _ in range(8):
            if (await conn.execute(statements.run_touch, of)).first() is not None:
                return False
            if not claim:
                return False
            # No row yet: insert one, or wait for a first append's uncommitted one and,
            # once it committed, take that row's lock on the next turn.
            if (await conn.execute(statements.run_claim, params)).first() is not None:
                return True
        raise BackendError(f"the activity row of {run} kept changing while locking it; retry")

    async def _drop_claim(self, session: AsyncSession, run: RunId) -> None:
        of = {"of_tenant": self.tenant, "of_run_id": str(run)}
        await (await session.connection()).execute(hot_statements(self._dialect).run_unclaim, of)

    # -- cancellation ------------------------------------------------------------------

    async def request_cancel(
        self, run: RunId, actor: str, reason: str, *, session: AsyncSession | None = None
    ) -> bool:
        """Record a stop request (no lease needed); ``True`` if recorded, ``False`` if one was."""
        run = check_run(run)
        actor = check_label(actor, "actor")
        reason = check_text(reason, "reason", allow_empty=True)
        d = self._dialect

        async def unit(session: AsyncSession) -> bool:
            stmt = (
                d.insert(RunCancel)
                .values(
                    tenant=self.tenant,
                    run_id=str(run),
                    actor=actor,
                    reason=reason,
                    requested_at=self._now(),
                )
                .on_conflict_do_nothing(index_elements=[RunCancel.tenant, RunCancel.run_id])
                .returning(RunCancel.run_id)
            )
            return (await session.execute(stmt)).first() is not None

        return await self._unit(unit, session=session)

    async def cancellation(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Cancellation | None:
        """The recorded stop request, or ``None``."""
        run = check_run(run)
        stmt = select(RunCancel.actor, RunCancel.reason).where(
            RunCancel.tenant == self.tenant, RunCancel.run_id == str(run)
        )

        async def unit(session: AsyncSession) -> Cancellation | None:
            row = (await session.execute(stmt)).one_or_none()
            if row is None:
                return None
            actor = stored_text(row.actor, 0, "run_cancel.actor")
            return Cancellation(actor, stored_text(row.reason, 0, "run_cancel.reason"))

        return await self._unit(unit, read_only=True, primary=True, session=session)
