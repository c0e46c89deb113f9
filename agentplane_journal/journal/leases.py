"""Who may write a run and whether it should stop: leases, the recovery queue, stop requests.

A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`. The fence that a lease
protects is checked by the store's writers under the run mutex (``RunWrites.lock_run``);
this module only claims, renews and frees leases, lists the abandoned ones, and records stop
requests. The lease protocol is agentplane 0.22.0's: ``acquire`` claims, ``renew`` extends.

* **A claim** (:meth:`RunControl.acquire`) is one ``INSERT .. ON CONFLICT DO UPDATE .. WHERE
  expires_at <= now`` statement: a fresh row gets epoch 1, a lapsed or released one epoch + 1,
  a live one (the caller's own too) nothing, which is :class:`LeaseHeldError`. A concurrent
  first acquire waits on the unique index and re-evaluates the predicate against the winner's
  row, so exactly one owner gets epoch 1 (0.4.0's read-then-upsert handed two owners epoch 1).
  It never renews: a same-owner acquire that renewed would let a heartbeat racing its run's
  conclusion re-take the lease the conclusion had just released, and a second entry point of
  one instance (a cancel, a delivery) drive a second execution under the *same* epoch, which
  fencing cannot see.
* **A renewal** (:meth:`RunControl.renew`) is one ``UPDATE .. WHERE owner = ? AND epoch = ?
  AND expires_at > now``: it extends only the lease the caller still holds, keeps the epoch,
  and never claims. Check and write are one statement, so a takeover either commits first
  (the renewal then matches nothing) or waits for the renewal and sees a live lease.
* **Release** is an update, never a delete: the epoch stays in the row, so the next acquire
  gets epoch + 1 and the released epoch stays fenced. A released row is also an expired one
  (``expires_at = 0``), which is how ``acquire`` frees it without a case of its own.
* **The recovery queue** (:meth:`RunControl.abandoned_runs`) is the leases that expired while
  still naming an owner: every clean exit releases, so those are the runs an instance died
  holding.
* **Lease changes take the run mutex first** (the run's ``run_activity`` row), as every append
  and seal does, without moving its ``updated_at`` or leaving a row behind (:func:`_take_mutex`).
  A lease row that does not exist yet cannot be locked: an append that read "no lease"
  under the mutex could otherwise commit after a first ``acquire`` had returned. Under the
  mutex, an append either committed before the lease was written or sees it. The mutex
  row gets a new version, so a hot statement whose snapshot predates the lease sees its
  mutex row changed and defers to the general unit; and since a lease row is only written
  under the mutex, the hot statements, which skip a locked mutex row, never wait on it.

Times are whole seconds of the store's clock, read once per call before any statement. A
wait for the run mutex can make a lease that lapsed meanwhile still look live: a claim is
then refused (retry it), a renewal extends a lease nobody has taken. A claim and a renewal
of one row are arbitrated by that row's lock either way, so at most one of them wins.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.core.checks import (
    check_int,
    check_label,
    check_run,
    check_text,
    check_ttl,
    lease_expiry,
)
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.values import Cancellation, Lease
from agentplane_journal.db.models import LEASE_HELD_PREDICATE, RunCancel, RunLease, RunSeal
from agentplane_journal.db.statements import hot_statements, stored_int, stored_run, stored_text
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import BackendError, LeaseHeldError, LeaseNotHeldError

__all__ = ["RunControl"]

# abandoned_runs spells a held lease exactly as the partial index ``run_lease_abandoned``
# does (the models' LEASE_HELD_PREDICATE): a literal, not a bound parameter, because a
# PostgreSQL generic plan (what a prepared statement becomes after five runs) cannot use a
# partial index that only a parameter's value implies (tests/test_leases.py shows both).
assert RELEASED_OWNER == "", "LEASE_HELD_PREDICATE spells the released marker as ''"


class RunControl(Repository):
    """The store's leases, its recovery queue and cancellation requests (no state of its own)."""

    # -- leases ------------------------------------------------------------------------

    async def acquire(
        self,
        run: RunId,
        owner: str,
        ttl: int | timedelta,
        *,
        reclaim: bool = False,
        session: AsyncSession | None = None,
    ) -> Lease:
        """Claim the run's lease if it is free: never granted, released, or expired.

        Always a new epoch: 1 on a fresh run, the previous holder's + 1 otherwise (for the
        same owner too), which fences whoever held it. A live lease is
        :class:`LeaseHeldError`, **even the caller's own**: extending a lease you hold is
        :meth:`renew`. ``ttl`` in whole seconds (an int, or a timedelta/float truncated to
        whole seconds); below one second, or ``now + ttl`` past a 64-bit integer, is a
        ``ValueError`` before any statement.

        ``reclaim=True`` also takes a live lease that names ``owner`` itself: an instance
        restarted under the same name reclaims what its previous life held without waiting
        for it to lapse (agentplane 0.22's own reclaim). Still a new epoch, so anything
        still running under that name is fenced: owner names must be unique per live
        process for this to be only a restart's shortcut.
        """
        run = check_run(run)
        owner = check_label(owner, "owner")
        if not isinstance(reclaim, bool):
            raise TypeError("reclaim must be True or False")
        ttl = check_ttl(ttl)
        now = self.now()
        claim = self._claim_statement(run, owner, ttl, now, reclaim=reclaim)

        async def unit(session: AsyncSession) -> Lease:
            claimed = await self._take_mutex(session, run, claim=True)
            epoch = (await session.execute(claim)).scalar_one_or_none()
            if epoch is None:
                # A live lease refused the claim. Its row is locked by the refused upsert
                # (PostgreSQL locks a conflicting row even when the WHERE is false; SQLite
                # holds the write lock), so this read names the holder that refused us.
                raise await self._holder(session, run, now)
            if claimed:
                await self._drop_claim(session, run)
            return Lease(run, owner, stored_int(epoch, 0, "run_lease.epoch"))

        return await self.unit(unit, session=session, run=run)

    def _claim_statement(self, run: RunId, owner: str, ttl: int, now: int, *, reclaim: bool) -> Any:
        """:meth:`acquire`'s one statement (``admit`` runs it too): the claim, or nothing."""
        insert = self.dialect.insert(RunLease).values(
            tenant=self.tenant,
            run_id=str(run),
            owner=owner,
            epoch=1,
            expires_at=lease_expiry(now, ttl),
        )
        return insert.on_conflict_do_update(
            index_elements=[RunLease.tenant, RunLease.run_id],
            set_={
                "owner": insert.excluded.owner,
                "epoch": RunLease.epoch + 1,
                "expires_at": insert.excluded.expires_at,
            },
            # Lapsed or released (a released row has expires_at 0): the only claimable rows,
            # and with ``reclaim`` the caller's own live lease.
            where=(RunLease.expires_at <= now) | (RunLease.owner == owner)
            if reclaim
            else RunLease.expires_at <= now,
        ).returning(RunLease.epoch)

    async def renew(
        self,
        run: RunId,
        owner: str,
        epoch: int,
        ttl: int | timedelta,
        *,
        session: AsyncSession | None = None,
    ) -> Lease:
        """Extend the lease ``owner`` still holds at ``epoch`` to ``now + ttl``; keep the epoch.

        Only a lease that is held, unexpired and unreleased by exactly ``(owner, epoch)`` is
        extended; anything else is :class:`LeaseNotHeldError` and changes nothing: the lease
        was released (the run concluded), lapsed (anyone may have taken it) or is held by
        somebody else. A failed renewal means *stop*. It never claims: a renewal that
        re-took a released lease would leave a live lease over a concluded run, which the
        recovery queue would hand out again once it lapsed. One guarded statement, so no
        takeover can slip between its check and its write. ``ttl`` as for :meth:`acquire`.
        """
        run = check_run(run)
        owner = check_label(owner, "owner")
        epoch = check_int(epoch, "epoch")
        ttl = check_ttl(ttl)
        now = self.now()
        extend = (
            update(RunLease)
            .where(
                RunLease.tenant == self.tenant,
                RunLease.run_id == str(run),
                RunLease.owner == owner,
                RunLease.epoch == epoch,
                RunLease.expires_at > now,
            )
            .values(expires_at=lease_expiry(now, ttl))
            .returning(RunLease.epoch)
        )

        async def unit(session: AsyncSession) -> Lease:
            # The mutex only if the run has an activity row (no row: no hot statement can
            # be reading this lease row NOWAIT); a renewal never creates one.
            await self._take_mutex(session, run, claim=False)
            if (await session.execute(extend)).first() is None:
                found = await self._lease_row(session, run)
                raise LeaseNotHeldError(run, owner, epoch, _described(found, now))
            return Lease(run, owner, epoch)

        return await self.unit(unit, session=session, run=run)

    async def abandoned_runs(
        self, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]:
        """Runs whose lease expired while still naming an owner: what an instance died holding.

        Every clean exit releases its lease (:meth:`release_lease`), so a lapsed lease that
        still names an owner is a run nobody will touch again unless something recovers it:
        take it over with :meth:`acquire` (a :class:`LeaseHeldError` means another instance
        got there first). A released run, a live lease and a sealed run (sealed, then never
        released) are not listed. Oldest expiry first, ties by run id, at most ``limit``;
        ``limit`` results means *at least* that many. Expiry is judged by the store's clock,
        the one leases are stamped with. A stored run id that does not parse is
        :class:`CorruptRecordError`, never skipped: this is the one list a stranded run is on.
        Served by the partial index ``run_lease_abandoned``.
        """
        limit = check_int(limit, "limit")
        sealed = exists().where(
            RunSeal.tenant == RunLease.tenant, RunSeal.run_id == RunLease.run_id
        )
        stmt = (
            select(RunLease.run_id)
            .where(
                RunLease.tenant == self.tenant,
                LEASE_HELD_PREDICATE,
                RunLease.expires_at <= self.now(),
                ~sealed,
            )
            .order_by(RunLease.expires_at, RunLease.run_id)
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[RunId]:
            rows = (await session.execute(stmt)).scalars()
            return [stored_run(r, "run_lease.run_id") for r in rows]

        # The primary: a sweeper acts on the answer, and a replica behind would list runs
        # that were taken over already.
        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def held_by(
        self, owner: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]:
        """Runs whose lease is live and names ``owner``, unsealed: what an instance of that
        name holds now, or held when it died (for :meth:`acquire` with ``reclaim=True``).
        At most ``limit``, ordered by run id; read on the primary."""
        owner = check_label(owner, "owner")
        limit = check_int(limit, "limit")
        sealed = exists().where(
            RunSeal.tenant == RunLease.tenant, RunSeal.run_id == RunLease.run_id
        )
        stmt = (
            select(RunLease.run_id)
            .where(
                RunLease.tenant == self.tenant,
                RunLease.owner == owner,
                RunLease.expires_at > self.now(),
                ~sealed,
            )
            .order_by(RunLease.run_id)
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[RunId]:
            rows = (await session.execute(stmt)).scalars()
            return [stored_run(r, "run_lease.run_id") for r in rows]

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def lease_of(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> tuple[str, int, int] | None:
        """The run's lease row as ``(owner, epoch, expires_at)``, or ``None`` if it has none.

        For an operator's view (``agentplane-journal steps``): a released lease has owner
        ``""`` and ``expires_at`` 0. Read on the primary; only a claim or a renewal decides.
        """
        run = check_run(run)

        async def unit(session: AsyncSession) -> tuple[str, int, int] | None:
            return await self._lease_row(session, run)

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def _lease_row(self, session: AsyncSession, run: RunId) -> tuple[str, int, int] | None:
        """The run's lease row as ``(owner, epoch, expires_at)``, checked, or ``None``."""
        row = (
            await session.execute(
                select(RunLease.owner, RunLease.epoch, RunLease.expires_at).where(
                    RunLease.tenant == self.tenant, RunLease.run_id == str(run)
                )
            )
        ).one_or_none()
        if row is None:
            return None
        return (
            stored_text(row.owner, 0, "run_lease.owner"),
            stored_int(row.epoch, 0, "run_lease.epoch"),
            stored_int(row.expires_at, 0, "run_lease.expires_at"),
        )

    async def _holder(self, session: AsyncSession, run: RunId, now: int) -> Exception:
        """The error for a refused claim: :class:`LeaseHeldError` naming the live holder."""
        found = await self._lease_row(session, run)
        if found is None:  # lease rows are never deleted, and this one refused a claim
            return BackendError(
                f"acquire of run {run} was refused but it has no lease row; lease rows are "
                "never deleted, so something outside this store removed it"
            )
        holder, epoch, expires = found
        return LeaseHeldError(run, holder, epoch, max(expires - now, 0))

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

        await self.unit(unit, session=session, run=run)

    async def _take_mutex(self, session: AsyncSession, run: RunId, *, claim: bool) -> bool:
        """Take the run mutex for a lease change; ``True`` if that inserted the activity row,
        which :meth:`_drop_claim` must delete before COMMIT (a lease is not activity)."""
        statements = hot_statements(self.dialect)
        params = {"tenant": self.tenant, "run_id": str(run), "now": self.now()}
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
        await (await session.connection()).execute(hot_statements(self.dialect).run_unclaim, of)

    # -- cancellation ------------------------------------------------------------------

    async def request_cancel(
        self, run: RunId, actor: str, reason: str, *, session: AsyncSession | None = None
    ) -> bool:
        """Record a stop request (no lease needed); ``True`` if recorded, ``False`` if one was."""
        run = check_run(run)
        actor = check_label(actor, "actor")
        reason = check_text(reason, "reason", allow_empty=True)
        d = self.dialect

        async def unit(session: AsyncSession) -> bool:
            stmt = (
                d.insert(RunCancel)
                .values(
                    tenant=self.tenant,
                    run_id=str(run),
                    actor=actor,
                    reason=reason,
                    requested_at=self.now(),
                )
                .on_conflict_do_nothing(index_elements=[RunCancel.tenant, RunCancel.run_id])
                .returning(RunCancel.run_id)
            )
            return (await session.execute(stmt)).first() is not None

        return await self.unit(unit, session=session)

    async def cancellation(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Cancellation | None:
        """The recorded stop request, or ``None``."""
        run = check_run(run)

        async def unit(session: AsyncSession) -> Cancellation | None:
            return await self._cancel_request(session, run)

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def _cancel_request(self, session: AsyncSession, run: RunId) -> Cancellation | None:
        """The run's stop request read in ``session``'s transaction, checked, or ``None``."""
        stmt = select(RunCancel.actor, RunCancel.reason).where(
            RunCancel.tenant == self.tenant, RunCancel.run_id == str(run)
        )
        row = (await session.execute(stmt)).one_or_none()
        if row is None:
            return None
        actor = stored_text(row.actor, 0, "run_cancel.actor")
        return Cancellation(actor, stored_text(row.reason, 0, "run_cancel.reason"))


def _described(found: tuple[str, int, int] | None, now: int) -> str:
    """What a refused renewal found, for :class:`LeaseNotHeldError`'s message."""
    if found is None:
        return "the run has no lease"
    owner, epoch, expires = found
    if owner == RELEASED_OWNER:
        return f"the lease was released at epoch {epoch}"
    if expires <= now:
        return f"{owner!r}'s lease at epoch {epoch} lapsed {now - expires}s ago"
    return f"the lease is held by {owner!r} at epoch {epoch} for another {expires - now}s"
