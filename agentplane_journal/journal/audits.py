"""The audit side of :class:`~agentplane_journal.journal.store.SqlJournalStore`: many runs at once
and the tenant's log.

What an audit reads (``verify --all``, ``export --all``): the runs it enumerates, their
records and seals a page of runs at a time, the inclusion paths an export's header holds,
and the tenant's Merkle log as readers see it: checkpoints, proofs, and its audit and
rebuild (the SQL of which is :mod:`agentplane_journal.journal.log`'s). Kept apart from
:mod:`agentplane_journal.journal.reads`, the per-run reads, whose page bounds
(:data:`~agentplane_journal.journal.reads.PAGE_BYTES`, read at call time) and row fetching
(:func:`~agentplane_journal.db.driver_rows.driver_rows`) it shares. Every record is hash-checked and
compared with its columns on the way out, so a row an attacker edited is
:class:`CorruptRecordError`, never an answer.

:class:`AuditReads` is a base of ``SqlJournalStore``; it holds no state of its own (the
store's ``__init__`` sets ``tenant_log``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, union
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.backends import reader as lean
from agentplane_journal.core.checks import check_int, check_run, check_text
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.db.driver_rows import driver_rows
from agentplane_journal.db.models import Journal, RunSeal
from agentplane_journal.db.statements import RECORD_COLUMNS, record_from_row
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal import export_pages
from agentplane_journal.journal import reads as reads
from agentplane_journal.journal.bounds import BoundsFinding, audit_bounds
from agentplane_journal.journal.log import TenantLog
from agentplane_journal.journal.log_audit import LogAudit
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion

__all__ = ["AuditReads", "RunRead"]


@dataclass(slots=True)
class RunRead:
    """One run of :meth:`SqlJournalStore.read_runs`: its records, or why they are unreadable.

    ``records`` stops before the first row that is corrupt (``error`` names its seq);
    ``sealed`` is the run's ``run_seal.chain_head`` column as stored (``None``: not
    sealed), ``position`` its leaf in the stored tree. ``whole`` is false for a run whose
    records alone exceed the page's byte budget: none were read (``records`` is empty);
    check it page by page with :meth:`~agentplane_journal.journal.reads.RunReads.pages`, as
    ``verify`` does.
    """

    records: list[Record]
    error: CorruptRecordError | None = None
    sealed: Any = None
    position: int | None = None
    whole: bool = True


class AuditReads(Repository):
    """The store's audit reads: every method here only reads (``reindex_log`` repairs the
    log's derived tree from the seals, never a record)."""

    tenant_log: TenantLog

    async def _lean(self, session: AsyncSession | None, primary: bool) -> lean.Reader | None:
        """The store's lean reads (``RunReads._lean``, which the store's own comes from);
        a repository without them reads by the general unit of work."""
        return None

    async def read_runs(
        self,
        runs: Sequence[RunId],
        *,
        page_bytes: int | None = None,
        session: AsyncSession | None = None,
    ) -> dict[RunId, RunRead]:
        """Many runs' records and seals in one transaction of three statements (audits' pages).

        Bounded by bytes as a stream's page is: runs are taken in the order given while
        their records' stored bytes (``length(raw)``, summed per run by the database without
        reading them) add up to at most ``page_bytes``
        (:data:`~agentplane_journal.journal.reads.PAGE_BYTES`, looked up at each call), and the
        result holds only those, in order: a prefix of ``runs``, never empty; read the rest
        with another call. A first run that alone exceeds the budget comes back with its
        seal and no records (``RunRead.whole`` false): check it with
        :meth:`~agentplane_journal.journal.reads.RunReads.pages`.
        A corrupt row ends its own run's records (``RunRead.error``), never the others'.
        """
        budget = reads.PAGE_BYTES if page_bytes is None else page_bytes
        budget = check_int(budget, "page_bytes", minimum=1)
        runs = [check_run(r) for r in runs]
        if not runs:
            return {}
        by_id = {str(r): r for r in runs}
        sizes_stmt = (
            select(Journal.run_id, func.sum(func.coalesce(func.length(Journal.raw), 0)))
            .where(Journal.tenant == self.tenant, Journal.run_id.in_(list(by_id)))
            .group_by(Journal.run_id)
        )

        async def unit(session: AsyncSession) -> dict[RunId, RunRead]:
            sizes = {row[0]: row[1] or 0 for row in await driver_rows(session, sizes_stmt)}
            taken: dict[str, RunId] = {}
            total = 0
            for run_id, run in by_id.items():
                size = sizes.get(run_id, 0)
                if taken and total + size > budget:
                    break
                taken[run_id], total = run, total + size
            out = {r: RunRead([]) for r in taken.values()}
            # Seals before records, as verify does: a sealed run's records cannot change
            # after it.
            for run_id, (head, position) in (
                await self.tenant_log.seals_of(session, list(taken))
            ).items():
                out[taken[run_id]].sealed, out[taken[run_id]].position = head, position
            if total > budget:  # one run, too large for a page: its pages are read apart
                next(iter(out.values())).whole = False
                return out
            stmt = (
                select(*RECORD_COLUMNS)
                .where(Journal.tenant == self.tenant, Journal.run_id.in_(list(taken)))
                .order_by(Journal.run_id, Journal.seq)
            )
            for row in await driver_rows(session, stmt):
                entry = out[taken[row[6]]]
                if entry.error is None:
                    try:
                        entry.records.append(record_from_row(row))
                    except CorruptRecordError as error:
                        entry.error = error
            return out

        return await self.unit(unit, read_only=True, session=session)

    async def export_page(
        self,
        phase: str,
        key: tuple[Any, Any],
        *,
        size: int,
        page_bytes: int | None = None,
        rows: int = export_pages.PAGE_ROWS,
    ) -> list[Any]:
        """One page of ``export --all`` in one statement (:mod:`~agentplane_journal.journal.
        export_pages`): rows in export order after ``key``, each with its run's seal and leaf
        beside the record's columns, at most ``rows`` of them and ``page_bytes`` of ``raw``
        past the first (:data:`~agentplane_journal.journal.reads.PAGE_BYTES` by default).
        The rows are as the driver returned them: the caller checks each record."""
        budget = reads.PAGE_BYTES if page_bytes is None else page_bytes
        budget = check_int(budget, "page_bytes", minimum=1)
        rows = check_int(rows, "rows", minimum=1)
        windowed = self.dialect.windowed_export_pages
        if not windowed and phase != export_pages.SEAL_ONLY:
            reader = await self._lean(None, primary=False)
            if reader is not None and reader.cuts_pages:
                # Cut by bytes on SQLite's thread as the rows are stepped, in the one hop.
                sql, args = export_pages.sqlite_page(self.tenant, phase, key, size, rows)
                return await reader.rows_within(sql, args, export_pages.RAW, budget)
        stmt = export_pages.page_statement(phase, rows, windowed)
        params = export_pages.page_params(self.tenant, phase, key, size, budget)

        async def unit(session: AsyncSession) -> list[Any]:
            return await driver_rows(session, stmt, params)

        return await self.unit(unit, read_only=True)

    async def inclusion_paths_at(
        self, size: int, positions: Sequence[int], *, session: AsyncSession | None = None
    ) -> dict[int, list[Digest]]:
        """Inclusion paths of leaf ``positions`` at a past log ``size`` (an export's header)."""
        size = check_int(size, "size")
        positions = [check_int(p, "position") for p in positions]

        async def unit(session: AsyncSession) -> dict[int, list[Digest]]:
            return await self.tenant_log.paths_at(session, size, positions)

        return await self.unit(unit, read_only=True, session=session)

    async def audit_runs(
        self,
        after: RunId | str | None = None,
        limit: int = 1000,
        *,
        session: AsyncSession | None = None,
    ) -> list[object]:
        """Every run of this tenant with a record or a seal, by stored run id, ascending.

        What an audit enumerates (``verify --all``, ``export --all``): the journal and the
        log themselves, not ``run_activity``, which is a side index that can lose a row.
        Values are the ``run_id`` columns *as stored*: one that is not a canonical run id
        is a finding of the audit, not an error here. Page with ``after`` = the last value.

        ``after`` is ``None``, a :class:`RunId`, or text (any text a ``run_id`` column can
        hold, canonical or not, so a page can end on a non-canonical id); anything else is a
        ``TypeError``, and text the database cannot hold (NUL, a lone surrogate) a
        ``ValueError``, before any statement. (On SQLite a hostile row may store a run id
        that is not text at all; it is returned as stored, but cannot be paged past.)
        """
        limit = check_int(limit, "limit", minimum=1)
        after = _check_after(after)
        journal = select(Journal.run_id).where(Journal.tenant == self.tenant)
        sealed = select(RunSeal.run_id).where(RunSeal.tenant == self.tenant)
        if after is not None:
            journal = journal.where(Journal.run_id > after)
            sealed = sealed.where(RunSeal.run_id > after)
        # Each side stops after `limit` distinct ids (an ordered index scan), then the union.
        j = journal.distinct().order_by(Journal.run_id).limit(limit).subquery()
        s = sealed.order_by(RunSeal.run_id).limit(limit).subquery()
        both = union(select(j.c.run_id), select(s.c.run_id)).subquery()
        stmt = select(both.c.run_id).order_by(both.c.run_id).limit(limit)

        async def unit(session: AsyncSession) -> list[object]:
            return list((await session.execute(stmt)).scalars())

        return await self.unit(unit, read_only=True, session=session)

    # -- the log -----------------------------------------------------------------------

    async def sealed_runs(
        self, *, session: AsyncSession | None = None
    ) -> list[tuple[RunId, Digest]]:
        """This tenant's log in order, from one snapshot: ``(run, sealed chain head)`` per leaf.

        An auditor's index: position ``i`` is leaf ``i``, so every run's current head can be
        compared with the head the log committed to, in one read of the log.
        """
        return await self.unit(self.tenant_log.sealed_runs, read_only=True, session=session)

    async def checkpoint(self, *, session: AsyncSession | None = None) -> Checkpoint:
        """``Checkpoint(origin, size, root)`` over this tenant's sealed runs in log order."""
        return await self.unit(self.tenant_log.checkpoint, read_only=True, session=session)

    async def consistency_proof(
        self, old_size: int, *, session: AsyncSession | None = None
    ) -> list[Digest]:
        """RFC 6962 proof that the log of ``old_size`` is a prefix of the current one."""
        old_size = check_int(old_size, "old_size")

        async def unit(session: AsyncSession) -> list[Digest]:
            return await self.tenant_log.consistency_proof(session, old_size)

        return await self.unit(unit, read_only=True, session=session)

    async def audit_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Re-derive the stored Merkle tree from the seals; the first bad position is named.

        Read-only, one transaction per :data:`~agentplane_journal.journal.log.AUDIT_PAGE` leaves;
        ``progress(done, total)`` after each. ``verify --all`` runs it.
        """

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self.unit(fn, read_only=True)

        return await self.tenant_log.audit(unit, progress)

    async def audit_bounds(self, *, session: AsyncSession | None = None) -> list[BoundsFinding]:
        """This tenant's stored counters and instants below their floors, by table and column.

        Each has a CHECK (revision ``0004_checks``) that no write passes, so a finding means
        a constraint was dropped and a row edited around the store. Read-only, one statement
        per table; ``verify --all`` runs it and fails on any finding. Empty: all in bounds.
        """

        async def unit(session: AsyncSession) -> list[BoundsFinding]:
            return await audit_bounds(session, self.tenant)

        return await self.unit(unit, read_only=True, session=session)

    async def reindex_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Rebuild the stored tree where it disagrees with the seals (resumable; see
        :meth:`TenantLog.reindex <agentplane_journal.journal.log.TenantLog.reindex>`)."""

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self.unit(fn)

        return await self.tenant_log.reindex(unit, progress)

    async def inclusion_proof(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Inclusion | None:
        """``Inclusion`` for a sealed run from one snapshot of the log; ``None`` if never sealed."""
        run = check_run(run)

        async def unit(session: AsyncSession) -> Inclusion | None:
            return await self.tenant_log.inclusion_proof(session, run)

        return await self.unit(unit, read_only=True, session=session)


def _check_after(after: object) -> str | None:
    """``audit_runs``' ``after`` as the text it is compared with, or a clear error."""
    if after is None or isinstance(after, RunId):
        return None if after is None else str(after)
    if not isinstance(after, str):
        raise TypeError(
            "after must be None, a RunId or the text of a run id as audit_runs returns it, "
            f"not {type(after).__name__}"
        )
    return check_text(after, "after", allow_empty=True)
