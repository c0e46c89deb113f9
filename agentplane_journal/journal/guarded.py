"""Guarded appends: a change computed from what a reader saw lands only if the run still ends there.

What the conversation adapters (:mod:`agentplane_journal.adapters.conversation`) write with,
in one transaction per change instead of a claim, an append and a release (three commits):

* :meth:`GuardedAppends.guarded_read` reads a run's records from a seq on, and its seal, in
  **one statement** (one snapshot): the sealed head from ``run_seal`` and the run's leaf in
  the stored Merkle tree (``log_tree``, level 0, by its unique run key), compared here as
  ``inclusion_proof`` compares them, without the recursive proof query. A reader that keeps
  what it verified asks only for what came after it (and for its own last record again, to
  see that it is still there, unchanged).
* :meth:`GuardedAppends.guarded_append` appends a batch **only if the run's head is still**
  ``expected`` (its seq and hash, read from the head row under the run mutex; a head other
  than ``expected`` is re-hashed from its row, so a forged one is refused, never compared):
  otherwise :class:`HeadMovedError` names the head found and nothing is written. A change
  computed from a stale read therefore cannot land, and writers take turns on the run mutex,
  as every append does.

**Leases.** A conversation run is not leased by its writers, but a lease row may exist: a
claim of an older version of the adapters, or ``ConversationRun.seal``'s. A live claim is
respected: :class:`~agentplane_journal.errors.LeaseHeldError` names it and nothing is
written (the adapter waits for it). A lapsed one is fenced for good in the same transaction
(released at its epoch + 1, as a takeover would leave it), so its late append is refused. A
released lease fences the runtime's appends as always; a guarded append writes at its epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, literal, select, true, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import BindParameter

from agentplane_journal.backends.sqlite import guarded as sqlite
from agentplane_journal.core.admission import claimed_keys
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.core.checks import check_int, check_run, check_text
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.db import selfwait
from agentplane_journal.db.dialect import Dialect, SqliteDialect
from agentplane_journal.db.driver_rows import driver_rows
from agentplane_journal.db.models import Journal, LogTree, RunAdmission, RunLease, RunSeal
from agentplane_journal.db.statements import (
    RECORD_COLUMNS,
    digest,
    hot_statements,
    record_from_row,
    records_from_rows,
    stored_int,
    stored_run,
    stored_text,
)
from agentplane_journal.errors import (
    ConflictError,
    CorruptLogError,
    LeaseHeldError,
    RunSealedError,
)
from agentplane_journal.journal.writes import RunState, RunWrites
from agentplane_journal.tlog.merkle import raw_leaf

__all__ = ["GuardedAppends", "HeadMovedError", "Tail"]


class HeadMovedError(ConflictError):
    """A guarded append found another head than the one its change was computed from.

    Nothing was written. ``seq``/``head`` are the head found (re-hashed from its row under the
    run mutex): read what came after the head you had, and compute the change again.
    """

    def __init__(self, run: RunId, seq: int, head: Digest) -> None:
        super().__init__(
            f"run {run} now ends at seq {seq} ({head.hex()[:12]}), not where this change was "
            "computed; nothing was written: read the run again and retry the change"
        )
        self.run, self.seq, self.head = run, seq, head


class Tail:
    """What :meth:`GuardedAppends.guarded_read` read: records from a seq on, and the seal."""

    __slots__ = ("records", "sealed")

    def __init__(self, records: list[Record], sealed: Digest | None) -> None:
        self.records = records
        #: The sealed chain head (``None``: not sealed), checked against the run's log leaf.
        self.sealed = sealed


@functools.cache
def _admitted_read(dialect: Dialect) -> Any:
    """A conversation's cold read (:meth:`GuardedAppends.guarded_read_admitted`), built once."""
    tenant: BindParameter[str] = bindparam("tenant")
    admitted = (
        select(RunAdmission.run_id.label("run_id"))
        .where(RunAdmission.tenant == tenant, RunAdmission.key == bindparam("key"))
        .subquery()
    )
    sealed = (
        select(RunSeal.chain_head)
        .where(RunSeal.tenant == tenant, RunSeal.run_id == admitted.c.run_id)
        .scalar_subquery()
    )
    leaf = (
        select(LogTree.hash)
        .where(LogTree.tenant == tenant, LogTree.run_id == admitted.c.run_id, LogTree.level == 0)
        .limit(1)
        .scalar_subquery()
    )
    one = select(literal(1).label("one")).subquery()
    chain = and_(Journal.tenant == tenant, Journal.run_id == admitted.c.run_id)
    return (
        select(admitted.c.run_id, sealed, leaf, *RECORD_COLUMNS)
        .select_from(one.outerjoin(admitted, true()).outerjoin(Journal, chain))
        .order_by(Journal.seq)
    )


@functools.cache
def _statements(dialect: Dialect) -> tuple[Any, Any]:
    """The tail read and the guarded append's state read, built once per dialect (and so
    compiled once): the general unit's forms of :mod:`..backends.sqlite.guarded`'s SQL."""
    tenant: BindParameter[str] = bindparam("tenant")
    run_id: BindParameter[str] = bindparam("run_id")
    sealed = (
        select(RunSeal.chain_head)
        .where(RunSeal.tenant == tenant, RunSeal.run_id == run_id)
        .scalar_subquery()
    )
    leaf = (
        select(LogTree.hash)
        .where(LogTree.tenant == tenant, LogTree.run_id == run_id, LogTree.level == 0)
        .limit(1)  # unique by (tenant, run_id); a hostile duplicate is the audit's
        .scalar_subquery()
    )
    records = (
        select(*RECORD_COLUMNS)
        .where(Journal.tenant == tenant, Journal.run_id == run_id, Journal.seq >= bindparam("seq"))
        .subquery()
    )
    one = select(literal(1).label("one")).subquery()
    tail = (
        select(sealed, leaf, *records.c)
        .select_from(one.outerjoin(records, true()))
        .order_by(records.c.seq)
    )
    lease = (RunLease.tenant == tenant, RunLease.run_id == run_id)
    last = (
        select(*RECORD_COLUMNS)
        .where(Journal.tenant == tenant, Journal.run_id == run_id)
        .order_by(Journal.seq.desc())
        .limit(1)
        .subquery()
    )
    # The lease rows FOR UPDATE, after the run mutex, as the store's own run_state reads them.
    state = select(
        select(RunLease.epoch).where(*lease).with_for_update().scalar_subquery(),
        select(RunLease.owner).where(*lease).with_for_update().scalar_subquery(),
        select(RunLease.expires_at).where(*lease).with_for_update().scalar_subquery(),
        select(RunSeal.outcome)
        .where(RunSeal.tenant == tenant, RunSeal.run_id == run_id)
        .scalar_subquery(),
        literal(0).label("current"),  # the general unit always takes the run mutex
        *last.c,
    ).select_from(one.outerjoin(last, true()))
    return tail, state


def judge(
    run: RunId, now: int, row: tuple[Any, ...], expected: tuple[int, Digest] | None
) -> tuple[int, bool, int, Digest]:
    """A guarded append's checks on its state row (the lease's epoch, owner and expiry, the
    seal's outcome, whether the activity row is current, the head row's columns), read under
    the run mutex: the epoch to write at, whether a lapsed lease must be fenced first (its
    epoch + 1 is then the epoch), and the head to chain onto. A live lease is
    :class:`LeaseHeldError`, a seal :class:`RunSealedError`, another head than ``expected``
    :class:`HeadMovedError`; a column that holds what it may not, :class:`CorruptRecordError`.
    The head the change was computed from is recognised by its seq and hash columns; any
    other is re-hashed from its row (a forged one refused) before it is compared or chained
    onto. Pure: both databases' paths call it, on whichever thread runs the transaction."""
    lease_epoch, lease_owner, lease_expires, sealed_outcome = row[:4]
    epoch, fence = 1, False
    if lease_epoch is not None:
        epoch = stored_int(lease_epoch, 0, "run_lease.epoch")
        owner = stored_text(lease_owner, 0, "run_lease.owner")
        if owner != RELEASED_OWNER:
            expires = stored_int(lease_expires, 0, "run_lease.expires_at")
            if expires > now:
                raise LeaseHeldError(run, owner, epoch, expires - now)
            epoch, fence = epoch + 1, True  # released at a new epoch: its holder is fenced
    if sealed_outcome is not None:
        raise RunSealedError(run, stored_text(sealed_outcome, 0, "run_seal.outcome"))
    if row[5] is None:
        head_seq, head_hash = 0, Digest.ZERO
    elif (
        expected is not None
        and type(row[5]) is int
        and row[5] == expected[0]
        and type(row[7]) is bytes
        and row[7] == bytes(expected[1])
    ):
        # The head the change was computed from, by its seq and hash columns: the caller
        # verified that record when it read it, and the batch chains onto that hash, which
        # is what the row must hash to (an edit of its other columns is verify's to report,
        # as the append hot path's known head is).
        head_seq, head_hash = expected
    else:
        head = record_from_row(row[5:])  # re-hashed: a forged head is refused here
        head_seq, head_hash = head.seq, head.hash
    if expected is not None and (head_seq, head_hash) != expected:
        raise HeadMovedError(run, head_seq, head_hash)
    return epoch, fence, head_seq, head_hash


class GuardedAppends(RunWrites):
    """The store's guarded appends and the tail read they pair with (no state of its own);
    the unit of work's steps are :class:`~agentplane_journal.journal.writes.RunWrites`'s."""

    async def guarded_read(self, run: RunId, from_seq: int = 1) -> Tail:
        """The run's records from ``from_seq`` on (hash-checked, as every read) and its seal,
        in one statement on the primary (one thread hop on SQLite). A seal whose leaf in the
        stored tree is missing or is not the hash of its head is :class:`CorruptLogError`:
        the seal row was edited."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        if isinstance(self.dialect, SqliteDialect):
            await self._ready()
            async with sqlite.checked_out(self._bind) as driver:
                (seal, leaf), records = await sqlite.read_in_one_hop(
                    driver, self.tenant, str(run), from_seq
                )
            return Tail(records, _sealed(run, seal, leaf))
        tail, _ = _statements(self.dialect)
        params = {"tenant": self.tenant, "run_id": str(run), "seq": from_seq}

        async def unit(session: AsyncSession) -> Tail:
            rows = await driver_rows(session, tail, params)
            first = rows[0] if rows else (None, None)
            records = records_from_rows(r[2:] for r in rows if r[2] is not None)
            return Tail(records, _sealed(run, first[0], first[1]))

        return await self.unit(unit, read_only=True, primary=True)

    async def guarded_read_admitted(self, key: str) -> tuple[RunId | None, Tail]:
        """The run admission key ``key`` names (``None``: no run holds it), with its seal and
        all its records (as :meth:`guarded_read` from seq 1), in one statement: a conversation's
        cold read. The index is not trusted: the caller checks that the run's first record
        claims ``key``."""
        key = check_text(key, "key", allow_empty=True)
        if isinstance(self.dialect, SqliteDialect):
            await self._ready()
            async with sqlite.checked_out(self._bind) as driver:
                (held, seal, leaf), records = await sqlite.admitted_in_one_hop(
                    driver, self.tenant, key
                )
        else:
            stmt = _admitted_read(self.dialect)
            params = {"tenant": self.tenant, "key": key}

            async def unit(session: AsyncSession) -> list[Any]:
                rows = await driver_rows(session, stmt, params)
                first = rows[0] if rows else (None, None, None)
                return [first[:3], records_from_rows(r[3:] for r in rows if r[3] is not None)]

            (held, seal, leaf), records = await self.unit(unit, read_only=True, primary=True)
        if held is None:
            return None, Tail([], None)
        run = stored_run(held, "run_admission.run_id")
        return run, Tail(records, _sealed(run, seal, leaf))

    async def guarded_append(
        self, run: RunId, batch: Sequence[Append], *, expected: tuple[int, Digest] | None
    ) -> list[Record]:
        """Append ``batch`` to ``run`` in one transaction if its head is ``expected``.

        ``expected``: the head the change was computed from (``(0, Digest.ZERO)``: the run
        has no record yet), or ``None`` for a change that holds whatever the run says (an
        append of new items). Otherwise :class:`HeadMovedError`; a live lease is
        :class:`LeaseHeldError`, a sealed run :class:`RunSealedError`; nothing is written.
        A batch the store's hot paths do not take either (a ``RunSealed``, an effect's start,
        an admission claim) runs in the general unit of work on SQLite too.
        """
        run = check_run(run)
        items, of = self.check_batch(batch)
        if of is None:
            return []
        if of != run:
            raise ValueError(f"the batch is for {of}, not {run}")
        self.refuse_own_wait(run)
        plain = not claimed_keys(items) and all(
            i.kind not in (RUN_SEALED, EFFECT_STARTED) for i in items
        )
        if plain and isinstance(self.dialect, SqliteDialect):
            await self._ready()
            profile = self.profile
            self.refuse_other_profile(items, profile)
            try:
                async with sqlite.checked_out(self._bind) as driver:
                    return await sqlite.append_in_one_hop(
                        driver,
                        judge,
                        tenant=self.tenant,
                        run=run,
                        now=self.now(),
                        expected=expected,
                        items=items,
                        signer=self._signer,
                        profile=profile,
                    )
            finally:
                self._wrote()
        _, state_read = _statements(self.dialect)
        statements = hot_statements(self.dialect)

        async def unit(session: AsyncSession) -> list[Record]:
            now = self.now()
            params = {"tenant": self.tenant, "run_id": str(run), "now": now}
            conn = await session.connection()
            await conn.execute(statements.run_mutex, params)
            if conn.sync_connection is not None:  # as the store's own appends do
                selfwait.hold(conn.sync_connection, self.tenant, str(run))
            row = tuple((await conn.execute(state_read, params)).one())
            epoch, fence, head_seq, head_hash = judge(run, now, row, expected)
            if fence:
                await session.execute(_fence(self.tenant, run, epoch - 1))
            state = RunState(None, None, head_seq, head_hash)
            return await self.write_batch(session, run, epoch, state, items)

        return await self.unit(unit, run=run)


def _fence(tenant: str, run: RunId, epoch: int) -> Any:
    """Release a lapsed claim at a new epoch (what a takeover leaves), so that its holder,
    late, is fenced for good."""
    return (
        update(RunLease)
        .where(RunLease.tenant == tenant, RunLease.run_id == str(run), RunLease.epoch == epoch)
        .values(owner=RELEASED_OWNER, expires_at=0, epoch=epoch + 1)
    )


def _sealed(run: RunId, seal: Any, leaf: Any) -> Digest | None:
    """The sealed head, checked against the run's leaf in the stored tree (``None``: not
    sealed)."""
    if seal is None:
        return None
    sealed = digest(seal, 0)
    if type(leaf) is not bytes or leaf != raw_leaf(bytes(sealed)):  # TEXT on SQLite: no leaf
        raise CorruptLogError(
            0,
            f"{run} is sealed, but the stored tree has no leaf for it or its leaf is not "
            "the hash of its sealed chain head",
        )
    return sealed
