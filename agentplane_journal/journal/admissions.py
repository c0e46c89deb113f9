"""Admission keys in the database: claimed inside the append, looked up, retired, rebuilt.

A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`, as agentplane 0.22.0
has them (``admitted_as``, ``forget_admissions`` and the claim in ``append``):

* **The claim is part of the append.** :meth:`Admissions._claim_admissions` runs in the
  append's own transaction, after its records are inserted, on every path that writes
  records: the general unit of work, ``append_atomic``, and a host's ``session=`` (in its
  savepoint). A batch holding a keyed ``RunAdmitted`` never takes the hot paths
  (``SqlJournalStore.append`` sends it to the general unit): an admission happens once per
  run, so the hot statements gain nothing from carrying a second table, and keeping the
  claim in one place keeps one arbiter. The key is therefore taken exactly when the run
  becomes real: a refused batch (fenced, sealed, a duplicate effect, a record too large, a
  duplicate admission) rolls the claim back with the records, and spends no key.
* **The primary key is the arbiter**, not a read. The claim is ``INSERT .. ON CONFLICT
  (tenant, key) DO NOTHING RETURNING``: no unique violation is ever raised (which on
  PostgreSQL would abort the transaction before the holder could be read), and a concurrent
  claimer of the same key waits on the index entry until the first transaction ends, then
  inserts (it rolled back) or inserts nothing (it committed). Only then is the holder read,
  in a later statement that sees the winner's commit, and the append is refused with
  :class:`DuplicateAdmissionError` naming it. The refusal is raised inside the unit of work,
  which rolls back: it surely did not commit.
* **Derived, so rebuildable.** ``run_admission`` is an index of the ``RunAdmitted`` records,
  never their authority: :meth:`Admissions.audit_admissions` says where the table disagrees
  with the records and :meth:`Admissions.reindex_admissions` rebuilds it
  (:mod:`agentplane_journal.journal.admission_audit`).
* **Retiring a key reopens the door it closed.** :meth:`Admissions.forget_admissions` takes a
  required cutoff and no default window: a redelivery that arrives after its key is retired
  admits a second run, so only an operator who knows the emitter's retry horizon may choose
  it. Retiring deletes index rows only; no record changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeVar

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from agentplane_journal.core.admission import check_cutoff, claimed_keys
from agentplane_journal.core.append import Append
from agentplane_journal.core.checks import check_text
from agentplane_journal.core.ids import RunId
from agentplane_journal.db.models import RunAdmission
from agentplane_journal.db.statements import stored_run
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import BackendError, DuplicateAdmissionError
from agentplane_journal.journal.admission_audit import AdmissionAudit, audit

__all__ = ["Admissions"]

T = TypeVar("T")

#: How often a claim is tried when its holder was retired between the claim and the read of
#: the holder (a ``forget_admissions`` committing in that instant): each try either claims
#: the key or finds a holder, so this is only ever reached by a retirement per try.
_CLAIM_TRIES = 4


class Admissions(Repository):
    """The store's admission keys (no state of its own)."""

    async def _claim_admissions(
        self, session: AsyncSession, run: RunId, items: Sequence[Append]
    ) -> None:
        """Claim every key ``items`` carries for ``run``, in the append's transaction.

        Called after the records are inserted, under the run mutex; a refusal raises
        :class:`DuplicateAdmissionError` and the caller's unit rolls back everything.
        """
        keys = claimed_keys(items)
        if not keys:
            return
        conn = await session.connection()
        now = self.now()
        for key in keys:  # sorted: overlapping claims take their keys in one order
            await self._claim(conn, run, key, now)

    async def _claim(self, conn: AsyncConnection, run: RunId, key: str, now: int) -> None:
        claim = (
            self.dialect.insert(RunAdmission)
            .values(tenant=self.tenant, key=key, run_id=str(run), admitted_at=now)
            .on_conflict_do_nothing(index_elements=[RunAdmission.tenant, RunAdmission.key])
            .returning(RunAdmission.key)
        )
        holder = select(RunAdmission.run_id).where(
            RunAdmission.tenant == self.tenant, RunAdmission.key == key
        )
        for _ in range(_CLAIM_TRIES):
            if (await conn.execute(claim)).first() is not None:
                return
            # Taken. A later statement, so on PostgreSQL a snapshot that sees the commit the
            # claim waited for; an unreadable holder is corruption, raised in this unit.
            held = (await conn.execute(holder)).scalar_one_or_none()
            if held is not None:
                raise DuplicateAdmissionError(key, stored_run(held, "run_admission.run_id"))
        raise BackendError(
            f"admission key {key!r} was retired and claimed again {_CLAIM_TRIES} times while "
            "this append claimed it; nothing was written: retry the append"
        )

    async def admitted_as(self, key: str, *, session: AsyncSession | None = None) -> RunId | None:
        """The run that holds admission key ``key`` in this tenant, or ``None``.

        Read on the primary (never a replica that may be behind), but it is not the arbiter:
        two instances admitting one message may both see ``None`` here, and the append's
        claim picks the winner (:class:`DuplicateAdmissionError` names it to the loser). A
        stored run id that does not parse is :class:`CorruptRecordError`, never ``None``.
        """
        key = check_text(key, "key", allow_empty=True)
        stmt = select(RunAdmission.run_id).where(
            RunAdmission.tenant == self.tenant, RunAdmission.key == key
        )

        async def unit(session: AsyncSession) -> RunId | None:
            held = (await session.execute(stmt)).scalar_one_or_none()
            return None if held is None else stored_run(held, "run_admission.run_id")

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def forget_admissions(
        self, older_than: int | datetime, *, session: AsyncSession | None = None
    ) -> int:
        """Retire the admission keys claimed before ``older_than``; return how many.

        ``older_than`` is required (whole seconds since the Unix epoch, or an aware
        ``datetime``): **retiring a key reopens the door it closed**, since a redelivery of
        its message then admits a second run, so the window must exceed the emitter's retry
        horizon and only the operator knows it. A key is retired when it was claimed
        strictly before the cutoff, by the store's clock (``admitted_at``, which only orders
        retirement). Only index rows are deleted: the runs and their ``RunAdmitted`` records
        stay, and ``reindex_admissions`` would claim their keys again.
        """
        cutoff = check_cutoff(older_than)
        stmt = delete(RunAdmission).where(
            RunAdmission.tenant == self.tenant, RunAdmission.admitted_at < cutoff
        )

        async def unit(session: AsyncSession) -> int:
            conn = await session.connection()
            return int((await conn.execute(stmt)).rowcount)

        return await self.unit(unit, session=session)

    async def audit_admissions(self) -> AdmissionAudit:
        """Where ``run_admission`` disagrees with the ``RunAdmitted`` records; writes nothing.

        ``verify --all`` runs it. See :mod:`agentplane_journal.journal.admission_audit` for
        what is a finding (a row no record backs) and what is only reported (keys that no
        row holds, which retiring them does on purpose).
        """
        return await self._audit(fix=False)

    async def reindex_admissions(self) -> AdmissionAudit:
        """Rebuild ``run_admission`` from the ``RunAdmitted`` records where they disagree.

        Removes rows no record backs, and claims every key the records carry that no row
        holds, **retired keys included**: a rebuild closes doors, never opens one. What it
        cannot repair (a record that fails verification, a row whose run cannot be read)
        is reported and left as it is. Resumable: every step is its own transaction and
        safe beside live appends (a live claim always wins).
        """
        return await self._audit(fix=True)

    async def _audit(self, *, fix: bool) -> AdmissionAudit:
        async def read(fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
            return await self.unit(fn, read_only=True)

        async def write(fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
            return await self.unit(fn)

        return await audit(self.tenant, self.dialect, self._now, read, write, fix=fix)
