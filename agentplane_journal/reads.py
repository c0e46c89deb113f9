"""The read side of :class:`~agentplane_journal.store.SqlJournalStore`: what a run says.

Records (whole, streamed, or many runs' at once for an audit's page), heads, the case
history, verification, the runs an audit enumerates, the run indexes, and the tenant's
Merkle log as readers see it: checkpoints, proofs, and its audit and rebuild (the SQL of
which is :mod:`agentplane_journal.log`'s). Every record is hash-checked and compared with
its columns on the way out (:func:`~agentplane_journal.statements.record_from_row`), so a
row an attacker edited is :class:`CorruptRecordError`, never an answer.

:class:`RunReads` is a base of ``SqlJournalStore``; it holds no state of its own (the
store's ``__init__`` sets ``_log``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, literal, or_, select, tuple_, union
from sqlalchemy.engine import Connection
from sqlalchemy.engine.cursor import _DEFAULT_FETCH as _PLAIN_FETCH
from sqlalchemy.ext.asyncio import AsyncSession

from .checkpoint import Checkpoint, Inclusion
from .errors import CorruptRecordError
from .ids import CaseId, Digest, RunId
from .limits import check_label
from .log import LogAudit, TenantLog
from .models import Journal, RunActivity, RunOutcome, RunSeal
from .record import Record, RunCheck
from .repository import Repository, check_int, check_run
from .signing import Verifier
from .statements import (
    RECORD_COLUMNS,
    digest,
    page_statement,
    record_from_row,
    records_from_rows,
    stored_int,
    stored_run,
)
from .values import Head

__all__ = ["PAGE_BYTES", "STREAM_PAGE", "RunRead", "RunReads", "driver_rows"]

#: Records per page when ``verify`` streams a run (its memory is one page, not the run).
STREAM_PAGE = 1000

#: The stored bytes (``raw``) a page of :meth:`RunReads.stream` or ``verify`` holds at most,
#: besides its first record: a page ends at :data:`STREAM_PAGE` records or at this many
#: bytes, whichever comes first, so a run of large records streams in the same memory as
#: one of small ones. 1,000 records of ~150 bytes are ~150 KiB, far below it.
PAGE_BYTES = 4 * 2**20

#: The largest ``page_size`` :meth:`RunReads.stream` takes (100 x ``store.MAX_INSERT_ROWS``).
_MAX_STREAM_PAGE = 100_000


@dataclass(slots=True)
class RunRead:
    """One run of :meth:`SqlJournalStore.read_runs`: its records, or why they are unreadable.

    ``records`` stops before the first row that is corrupt (``error`` names its seq);
    ``sealed`` is the run's ``run_seal.chain_head`` column as stored (``None``: not
    sealed), ``position`` its leaf in the stored tree. ``whole`` is false for a run whose
    records alone exceed the page's byte budget: none were read (``records`` is empty);
    check it page by page with :meth:`RunReads.pages`, as ``verify`` does.
    """

    records: list[Record]
    error: CorruptRecordError | None = None
    sealed: Any = None
    position: int | None = None
    whole: bool = True


async def driver_rows(
    session: AsyncSession, stmt: Any, params: dict[str, Any] | None = None
) -> list[Any]:
    """``stmt``'s rows as the driver returned them (tuples; asyncpg's records), in a list.

    Executed by SQLAlchemy Core on the session's connection (its transaction, execution
    options, compiled-statement cache, and its wrapping of driver errors, which
    ``Repository._unit`` translates), but the rows are taken from the DBAPI cursor, which
    already holds them all: the ORM's and even Core's per-row ``Row`` objects cost more than
    a read of a long run spends anywhere but on its checks. If SQLAlchemy ever buffers
    the rows itself (another fetch strategy), they come through its result instead, so no
    row is ever skipped.
    """
    conn = await session.connection()
    return await conn.run_sync(_driver_rows, stmt, params)


def _driver_rows(conn: Connection, stmt: Any, params: dict[str, Any] | None) -> list[Any]:
    result = conn.execute(stmt, params)
    try:
        if result.cursor_strategy is _PLAIN_FETCH and result.cursor is not None:
            return list(result.cursor.fetchall())
        return list(result)
    finally:
        result.close()


class RunReads(Repository):
    """The store's reads: every method here only reads (``reindex_log`` repairs the log's
    derived tree from the seals, never a record)."""

    _log: TenantLog

    def _key(self, run: RunId) -> Any:
        return and_(Journal.tenant == self.tenant, Journal.run_id == str(run))

    # -- reading -----------------------------------------------------------------------

    async def read(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """The run's records from ``from_seq`` (inclusive; 0 reads like 1), hash-checked."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq >= from_seq)
            .order_by(Journal.seq)
        )

        async def unit(session: AsyncSession) -> list[Record]:
            return records_from_rows(await driver_rows(session, stmt))

        return await self._unit(unit, read_only=True, session=session)

    def stream(
        self,
        run: RunId,
        from_seq: int = 1,
        *,
        page_size: int = 1000,
        page_bytes: int = PAGE_BYTES,
        session: AsyncSession | None = None,
    ) -> AsyncIterator[Record]:
        """``async for record in store.stream(run)``: :meth:`read` in bounded memory.

        Pages by seq of at most ``page_size`` records and at most ``page_bytes`` bytes of
        stored records (but at least one record), each its own read (records never change
        once written, so the pages join up; records appended meanwhile are streamed too, up
        to the page that comes back short). Every record is hash-checked as by :meth:`read`.
        """
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        page_size = check_int(page_size, "page_size", minimum=1, maximum=_MAX_STREAM_PAGE)
        page_bytes = check_int(page_bytes, "page_bytes", minimum=1)

        async def records() -> AsyncIterator[Record]:
            async for page in self._pages(run, from_seq, page_size, page_bytes, session):
                for record in page:
                    yield record

        return records()

    def pages(
        self,
        run: RunId,
        from_seq: int = 1,
        *,
        page_size: int = STREAM_PAGE,
        page_bytes: int = PAGE_BYTES,
        session: AsyncSession | None = None,
    ) -> AsyncIterator[list[Record]]:
        """:meth:`stream` a page at a time (``RunCheck.feed`` takes pages): the same pages,
        the same checks, the same bounds."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        page_size = check_int(page_size, "page_size", minimum=1, maximum=_MAX_STREAM_PAGE)
        page_bytes = check_int(page_bytes, "page_bytes", minimum=1)
        return self._pages(run, from_seq, page_size, page_bytes, session)

    async def _pages(
        self,
        run: RunId,
        from_seq: int,
        size: int,
        budget: int,
        session: AsyncSession | None,
    ) -> AsyncIterator[list[Record]]:
        """The run's records from ``from_seq`` in pages of at most ``size`` records and
        ``budget`` bytes (besides a page's first record), one read each."""
        stmt, tenant, run_id = page_statement(size), self.tenant, str(run)
        at = from_seq
        while True:

            async def unit(session: AsyncSession, at: int = at) -> list[Record]:
                params = {"tenant": tenant, "run_id": run_id, "from_seq": at, "budget": budget}
                return records_from_rows(await driver_rows(session, stmt, params))

            page = await self._unit(unit, read_only=True, session=session)
            if not page:
                return
            yield page
            # A short page is the run's end unless the budget cut it, which needs the bytes
            # before its next row (so the page's own bytes) to have reached the budget.
            # ``Record.raw`` is never shorter than what ``length`` counted for its row.
            if len(page) < size and sum(len(r.raw) for r in page) < budget:
                return
            at = page[-1].seq + 1

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
        reading them) add up to at most ``page_bytes`` (:data:`PAGE_BYTES`), and the result
        holds only those, in order: a prefix of ``runs``, never empty; read the rest with
        another call. A first run that alone exceeds the budget comes back with its seal and
        no records (``RunRead.whole`` false): check it with :meth:`pages`.
        A corrupt row ends its own run's records (``RunRead.error``), never the others'.
        """
        budget = PAGE_BYTES if page_bytes is None else page_bytes
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
                await self._log.seals_of(session, list(taken))
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

        return await self._unit(unit, read_only=True, session=session)

    async def inclusion_paths_at(
        self, size: int, positions: Sequence[int], *, session: AsyncSession | None = None
    ) -> dict[int, list[Digest]]:
        """Inclusion paths of leaf ``positions`` at a past log ``size`` (an export's header)."""
        size = check_int(size, "size")
        positions = [check_int(p, "position") for p in positions]

        async def unit(session: AsyncSession) -> dict[int, list[Digest]]:
            return await self._log.paths_at(session, size, positions)

        return await self._unit(unit, read_only=True, session=session)

    async def head(self, run: RunId, *, session: AsyncSession | None = None) -> Head:
        """``Head(seq, hash)``; an unwritten run is ``Head(0, Digest.ZERO)``.

        The last row is re-hashed and checked against its columns like any read, so a
        forged head is :class:`CorruptRecordError`, not an answer.
        """
        run = check_run(run)
        stmt = select(*RECORD_COLUMNS).where(self._key(run)).order_by(Journal.seq.desc()).limit(1)

        async def unit(session: AsyncSession) -> Head:
            row = (await session.execute(stmt)).one_or_none()
            if row is None:
                return Head(0, Digest.ZERO)
            record = record_from_row(row)
            return Head(record.seq, record.hash)

        return await self._unit(unit, read_only=True, primary=True, session=session)

    async def case_history(
        self, case: CaseId, limit: int, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """Every record whose body names ``case``, from any run, by run id then seq.

        Exact even if the ``case_id`` index lies: candidates are the rows whose column names
        the case *or* whose bytes contain its ULID (every body naming it does: a record is
        refused on read unless its ``case`` member appears in its bytes as written), each is
        hash-checked and compared with its columns, so a row whose ``case_id`` was added or
        removed is :class:`CorruptRecordError`, and a row that merely mentions the ULID is
        left out. The byte scan reads the tenant's journal: this costs a scan, not an index
        lookup (see the README's "Tamper evidence").
        """
        if isinstance(case, str):
            case = CaseId.parse(case)
        if not isinstance(case, CaseId):
            raise TypeError(f"case must be a CaseId, not {type(case).__name__}")
        limit = check_int(limit, "limit")
        ulid = case.ulid
        candidates = or_(
            Journal.case_id == str(case), self._dialect.contains_bytes(Journal.raw, ulid.encode())
        )
        page = max(limit, 100)

        async def unit(session: AsyncSession) -> list[Record]:
            found: list[Record] = []
            after: tuple[Any, Any] | None = None
            while len(found) < limit:
                stmt = select(*RECORD_COLUMNS).where(Journal.tenant == self.tenant, candidates)
                if after is not None:
                    stmt = stmt.where(
                        tuple_(Journal.run_id, Journal.seq)
                        > tuple_(literal(after[0]), literal(after[1]))
                    )
                rows = (
                    await session.execute(stmt.order_by(Journal.run_id, Journal.seq).limit(page))
                ).all()
                for row in rows:
                    record = record_from_row(row)
                    if record.body.get("case") == ulid:
                        found.append(record)
                        if len(found) == limit:
                            break
                if len(rows) < page:
                    break
                after = (rows[-1].run_id, rows[-1].seq)
            return found

        return await self._unit(unit, read_only=True, session=session)

    async def verify(
        self,
        run: RunId,
        verifier: Verifier | None = None,
        require_signature: bool = False,
        *,
        session: AsyncSession | None = None,
    ) -> Digest:
        """Check the whole run and return its head digest; the first bad seq is named.

        Contiguity from seq 1, links, hashes, every column against its body, exactly-once
        over the bodies (no two ``EffectStarted`` of one key), signatures when a verifier is
        given, and, for a sealed run, that its records end exactly at the sealed head (a
        run whose records were deleted, truncated or extended under its seal fails).
        """
        run = check_run(run)
        if require_signature and verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        seal_stmt = select(RunSeal.chain_head).where(
            RunSeal.tenant == self.tenant, RunSeal.run_id == str(run)
        )

        async def seal_unit(session: AsyncSession) -> object:
            return (await session.execute(seal_stmt)).scalar_one_or_none()

        # The seal first: once it is there no append lands, so the records read next (later
        # snapshots, page by page) are the ones it sealed. Pages keep memory bounded.
        sealed = await self._unit(seal_unit, read_only=True, session=session)
        check = RunCheck(verifier, require_signature)
        async for page in self._pages(run, 1, STREAM_PAGE, PAGE_BYTES, session):
            check.feed(page)
        return check.finish(None if sealed is None else digest(sealed, check.last))

    async def audit_runs(
        self, after: object = None, limit: int = 1000, *, session: AsyncSession | None = None
    ) -> list[object]:
        """Every run of this tenant with a record or a seal, by stored run id, ascending.

        What an audit enumerates (``verify --all``, ``export --all``): the journal and the
        log themselves, not ``run_activity``, which is a side index that can lose a row.
        Values are the ``run_id`` columns *as stored*: one that is not a canonical run id
        is a finding of the audit, not an error here. Page with ``after`` = the last value.
        """
        limit = check_int(limit, "limit", minimum=1)
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

        return await self._unit(unit, read_only=True, session=session)

    # -- the log -----------------------------------------------------------------------

    async def sealed_runs(
        self, *, session: AsyncSession | None = None
    ) -> list[tuple[RunId, Digest]]:
        """This tenant's log in order, from one snapshot: ``(run, sealed chain head)`` per leaf.

        An auditor's index: position ``i`` is leaf ``i``, so every run's current head can be
        compared with the head the log committed to, in one read of the log.
        """
        return await self._unit(self._log.sealed_runs, read_only=True, session=session)

    async def checkpoint(self, *, session: AsyncSession | None = None) -> Checkpoint:
        """``Checkpoint(origin, size, root)`` over this tenant's sealed runs in log order."""
        return await self._unit(self._log.checkpoint, read_only=True, session=session)

    async def consistency_proof(
        self, old_size: int, *, session: AsyncSession | None = None
    ) -> list[Digest]:
        """RFC 6962 proof that the log of ``old_size`` is a prefix of the current one."""
        old_size = check_int(old_size, "old_size")

        async def unit(session: AsyncSession) -> list[Digest]:
            return await self._log.consistency_proof(session, old_size)

        return await self._unit(unit, read_only=True, session=session)

    async def audit_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Re-derive the stored Merkle tree from the seals; the first bad position is named.

        Read-only, one transaction per :data:`~agentplane_journal.log.AUDIT_PAGE` leaves;
        ``progress(done, total)`` after each. ``verify --all`` runs it.
        """

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self._unit(fn, read_only=True)

        return await self._log.audit(unit, progress)

    async def reindex_log(self, progress: Callable[[int, int], None] | None = None) -> LogAudit:
        """Rebuild the stored tree where it disagrees with the seals (resumable; see
        :meth:`TenantLog.reindex <agentplane_journal.log.TenantLog.reindex>`)."""

        async def unit(fn: Callable[[AsyncSession], Awaitable[Any]], primary: bool = False) -> Any:
            return await self._unit(fn)

        return await self._log.reindex(unit, progress)

    async def inclusion_proof(
        self, run: RunId, *, session: AsyncSession | None = None
    ) -> Inclusion | None:
        """``Inclusion`` for a sealed run from one snapshot of the log; ``None`` if never sealed."""
        run = check_run(run)

        async def unit(session: AsyncSession) -> Inclusion | None:
            return await self._log.inclusion_proof(session, run)

        return await self._unit(unit, read_only=True, session=session)

    # -- indexes -----------------------------------------------------------------------

    async def runs_by_outcome(
        self, outcome: str, limit: int, *, session: AsyncSession | None = None
    ) -> list[RunId]:
        """Runs whose latest ``RunSealed`` record says ``outcome``, newest conclusion first."""
        outcome = check_label(outcome, "outcome")
        limit = check_int(limit, "limit")
        stmt = (
            select(RunOutcome.run_id)
            .where(RunOutcome.tenant == self.tenant, RunOutcome.outcome == outcome)
            .order_by(RunOutcome.ordinal.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[RunId]:
            rows = (await session.execute(stmt)).scalars()
            return [stored_run(r, "run_outcome.run_id") for r in rows]

        return await self._unit(unit, read_only=True, session=session)

    async def recent_runs(
        self,
        after: tuple[RunId, int] | None = None,
        limit: int = 100,
        *,
        session: AsyncSession | None = None,
    ) -> list[tuple[RunId, int]]:
        """``(run, updated_at)`` newest first, ties by run id descending; ``after`` pages."""
        limit = check_int(limit, "limit")
        where = [RunActivity.tenant == self.tenant]
        if after is not None:
            if not isinstance(after, tuple) or len(after) != 2:
                raise TypeError("after must be a (run, updated_at) pair as recent_runs returns")
            after_run, after_at = check_run(after[0]), check_int(after[1], "after's updated_at")
            where.append(
                tuple_(RunActivity.updated_at, RunActivity.run_id)
                < tuple_(literal(after_at), literal(str(after_run)))
            )
        stmt = (
            select(RunActivity.run_id, RunActivity.updated_at)
            .where(*where)
            .order_by(RunActivity.updated_at.desc(), RunActivity.run_id.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> list[tuple[RunId, int]]:
            return [
                (
                    stored_run(r[0], "run_activity.run_id"),
                    stored_int(r[1], 0, "run_activity.updated_at"),
                )
                for r in await session.execute(stmt)
            ]

        return await self._unit(unit, read_only=True, session=session)
