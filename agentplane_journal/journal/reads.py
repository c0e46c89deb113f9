"""The per-run reads of :class:`~agentplane_journal.journal.store.SqlJournalStore`: what a run says.

Records (whole, streamed, or page by page), heads, the case history, verification, and the
run indexes (:mod:`agentplane_journal.journal.run_indexes`, a base of :class:`RunReads`).
What an audit reads of many runs at once and the tenant's Merkle log are
:mod:`agentplane_journal.journal.audits`'s. Every record is hash-checked and compared with its
columns on the way out (:func:`~agentplane_journal.db.statements.record_from_row`), so a row
an attacker edited is :class:`CorruptRecordError`, never an answer.

:class:`RunReads` is a base of ``SqlJournalStore``; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import literal, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.backends import reader as lean
from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.checks import check_int, check_run
from agentplane_journal.core.ids import CaseId, Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.core.values import Head
from agentplane_journal.db.driver_rows import _driver_rows as _driver_rows  # tests/test_stream.py
from agentplane_journal.db.driver_rows import driver_rows
from agentplane_journal.db.models import Journal, RunSeal
from agentplane_journal.db.statements import (
    RECORD_COLUMNS,
    digest,
    record_from_row,
    records_from_rows,
)
from agentplane_journal.journal.run_pages import RunPages

__all__ = ["PAGE_BYTES", "STREAM_PAGE", "RunReads", "driver_rows"]

#: Records per page when ``verify`` streams a run (its memory is one page, not the run).
STREAM_PAGE = 1000

#: The stored bytes (``raw``) a page of :meth:`RunReads.stream` or ``verify`` holds at most,
#: besides its first record: a page ends at :data:`STREAM_PAGE` records or at this many
#: bytes, whichever comes first, so a run of large records streams in the same memory as
#: one of small ones. 1,000 records of ~150 bytes are ~150 KiB, far below it.
PAGE_BYTES = 4 * 2**20

#: The largest ``page_size`` :meth:`RunReads.stream` takes (100 x ``store.MAX_INSERT_ROWS``).
_MAX_STREAM_PAGE = 100_000

#: ``read_back``'s bound when it reads from the head: above any seq (``BIGINT``'s largest).
_NO_BOUND = 2**63 - 1


class RunReads(RunPages):
    """The store's per-run reads: every method here only reads."""

    # -- reading -----------------------------------------------------------------------

    async def read(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """The run's records from ``from_seq`` (inclusive; 0 reads like 1), hash-checked."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        reader = await self._lean(session, primary=False)
        if reader is not None:
            return records_from_rows(await reader.rows(lean.FROM, self.tenant, str(run), from_seq))
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq >= from_seq)
            .order_by(Journal.seq)
        )

        async def unit(session: AsyncSession) -> list[Record]:
            return records_from_rows(await driver_rows(session, stmt))

        return await self.unit(unit, read_only=True, session=session)

    async def read_sealed(
        self, run: RunId, from_seq: int = 1, *, session: AsyncSession | None = None
    ) -> tuple[list[Record], Digest | None]:
        """The run's records from ``from_seq``, hash-checked, and its sealed head (``None``:
        not sealed), on the primary, in one transaction: the seal first, so the records read
        after it are the ones it sealed (what a writer that reads its own writes and checks a
        seal needs, e.g. the LangGraph saver; ``RunCheck.finish(sealed)`` compares them)."""
        run = check_run(run)
        from_seq = check_int(from_seq, "from_seq")
        reader = await self._lean(session, primary=True)
        if reader is not None:  # the seal and the records from one statement: one snapshot
            rows = await reader.rows(lean.SEALED, self.tenant, str(run), from_seq)
            seal = rows[0][-1] if rows else None
            records = (
                []
                if not rows or rows[0][0] is None
                else records_from_rows(tuple(row)[:-1] for row in rows)
            )
            last = records[-1].seq if records else 0
            return records, None if seal is None else digest(seal, last)
        seal_stmt = select(RunSeal.chain_head).where(
            RunSeal.tenant == self.tenant, RunSeal.run_id == str(run)
        )
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq >= from_seq)
            .order_by(Journal.seq)
        )

        async def unit(session: AsyncSession) -> tuple[list[Record], Digest | None]:
            seal = await driver_rows(session, seal_stmt)
            records = records_from_rows(await driver_rows(session, stmt))
            last = records[-1].seq if records else 0
            return records, digest(seal[0][0], last) if seal else None

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def read_back(
        self,
        run: RunId,
        below: int | None,
        limit: int,
        *,
        session: AsyncSession | None = None,
    ) -> tuple[list[Record], Digest | None]:
        """The run's last ``limit`` records below seq ``below`` (``None``: from its head),
        **in seq order**, hash-checked, and its sealed head (``None``: not sealed), on the
        primary, in one snapshot: a reader that wants the run's end reads back from the head
        a page at a time instead of reading the run (``JournalSaver.list`` with a
        ``limit``). It vouches for each record alone: the caller checks the page as a chain
        onto the head (``RunCheck`` from the page's first ``prev_hash``) and the seal."""
        run = check_run(run)
        limit = check_int(limit, "limit", minimum=1, maximum=_MAX_STREAM_PAGE)
        bound = _NO_BOUND if below is None else check_int(below, "below", minimum=1)
        reader = await self._lean(session, primary=True)
        if reader is not None:  # the seal and the page from one statement: one snapshot
            rows = await reader.rows(lean.BACK, self.tenant, str(run), bound, limit)
            seal = rows[0][-1] if rows else None
            records = (
                []
                if not rows or rows[0][0] is None
                else records_from_rows(tuple(row)[:-1] for row in reversed(rows))
            )
            last = records[-1].seq if records else 0
            return records, None if seal is None else digest(seal, last)
        seal_stmt = select(RunSeal.chain_head).where(
            RunSeal.tenant == self.tenant, RunSeal.run_id == str(run)
        )
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq < bound)
            .order_by(Journal.seq.desc())
            .limit(limit)
        )

        async def unit(session: AsyncSession) -> tuple[list[Record], Digest | None]:
            seal = await driver_rows(session, seal_stmt)
            records = records_from_rows(reversed(await driver_rows(session, stmt)))
            last = records[-1].seq if records else 0
            return records, digest(seal[0][0], last) if seal else None

        return await self.unit(unit, read_only=True, primary=True, session=session)

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

    async def head(self, run: RunId, *, session: AsyncSession | None = None) -> Head:
        """``Head(seq, hash)``; an unwritten run is ``Head(0, Digest.ZERO)``.

        The last row is re-hashed and checked against its columns like any read, so a
        forged head is :class:`CorruptRecordError`, not an answer.
        """
        run = check_run(run)
        reader = await self._lean(session, primary=True)
        if reader is not None:
            rows = await reader.rows(lean.HEAD, self.tenant, str(run))
            if not rows:
                return Head(0, Digest.ZERO)
            record = record_from_row(tuple(rows[0]))
            return Head(record.seq, record.hash)
        stmt = select(*RECORD_COLUMNS).where(self._key(run)).order_by(Journal.seq.desc()).limit(1)

        async def unit(session: AsyncSession) -> Head:
            row = (await session.execute(stmt)).one_or_none()
            if row is None:
                return Head(0, Digest.ZERO)
            record = record_from_row(row)
            return Head(record.seq, record.hash)

        return await self.unit(unit, read_only=True, primary=True, session=session)

    async def record_at(
        self, run: RunId, seq: int, *, session: AsyncSession | None = None
    ) -> Record | None:
        """The run's record at ``seq`` (``None``: there is none), hash-checked and compared
        with its columns like any read; one statement, whatever the run's length.

        It vouches for that record alone: that it is on the run's chain needs its
        neighbours (``verify``), a seal or a signature (see docs/guides/langgraph.md's trust
        model for what a reader that keeps a verified point can check)."""
        run = check_run(run)
        seq = check_int(seq, "seq", minimum=1)
        found = await self.records_at(run, [seq], session=session)
        return found[0] if found else None

    async def records_at(
        self, run: RunId, seqs: Sequence[int], *, session: AsyncSession | None = None
    ) -> list[Record]:
        """The run's records at ``seqs`` that exist, by seq, each hash-checked and compared
        with its columns: one statement for the lot (a reader that knows which records it
        needs, such as a LangGraph checkpoint naming the records holding its blobs, reads
        those and not the run). A missing seq is simply absent: the caller that expected it
        says what that means."""
        run = check_run(run)
        wanted = sorted({check_int(s, "seq", minimum=1) for s in seqs})
        if not wanted:
            return []
        reader = await self._lean(session, primary=False)
        if reader is not None:
            statement = lean.SEQS.replace("{seqs}", self.dialect.seqs_from_param)
            listed = self.dialect.seq_list(wanted)
            rows = await reader.rows(statement, self.tenant, str(run), listed)
            return [record_from_row(tuple(row)) for row in rows]
        stmt = (
            select(*RECORD_COLUMNS)
            .where(self._key(run), Journal.seq.in_(wanted))
            .order_by(Journal.seq)
        )

        async def unit(session: AsyncSession) -> list[Record]:
            return [record_from_row(row) for row in await driver_rows(session, stmt)]

        return await self.unit(unit, read_only=True, session=session)

    async def case_history(
        self, case: CaseId, limit: int, *, session: AsyncSession | None = None
    ) -> list[Record]:
        """Every record whose body names ``case``, from any run, by run id then seq.

        What it sees: the rows whose ``case_id`` column names the case *or* whose bytes
        contain its ULID as written. Each is hash-checked and compared with its columns, so a
        row whose ``case_id`` was added or removed (the body still names the case literally)
        is :class:`CorruptRecordError`, and a row that merely mentions the ULID is left out.

        What it cannot see: a hash-valid record whose body names the case only in a spelling
        other than the literal ULID (JSON escapes such as ``\\u0046``, in the value or in the
        ``case`` key) *and* whose ``case_id`` column does not name it (NULLed, or never set
        because the body was forged so). Neither the index nor the byte scan offers it, so it
        is not in the answer and no error is raised here. Such a record is never a valid one:
        every read refuses a ``case`` member not written literally, and its column disagrees
        with its hashed body, so :meth:`verify` of its run (and ``verify --all``) reports it
        as :class:`CorruptRecordError`. An answer is complete for the records that verify;
        audit with ``verify`` before trusting an absence.

        The byte scan reads the tenant's journal: this costs a scan, not an index lookup
        (see the README's "Tamper evidence").
        """
        if isinstance(case, str):
            case = CaseId.parse(case)
        if not isinstance(case, CaseId):
            raise TypeError(f"case must be a CaseId, not {type(case).__name__}")
        limit = check_int(limit, "limit")
        ulid = case.ulid
        candidates = or_(
            Journal.case_id == str(case), self.dialect.contains_bytes(Journal.raw, ulid.encode())
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

        return await self.unit(unit, read_only=True, session=session)

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
        reader = await self._lean(session, primary=False)
        if reader is not None:
            found = await reader.rows(lean.SEAL, self.tenant, str(run))
            sealed: object = found[0][0] if found else None
        else:
            sealed = await self.unit(seal_unit, read_only=True, session=session)
        check = RunCheck(verifier, require_signature)
        if reader is not None:
            async for _ in self._lean_pages(reader, run, 1, STREAM_PAGE, PAGE_BYTES, check):
                pass  # each page fed to check
        else:
            async for page in self._pages(run, 1, STREAM_PAGE, PAGE_BYTES, session):
                check.feed(page)
        return check.finish(None if sealed is None else digest(sealed, check.last))
