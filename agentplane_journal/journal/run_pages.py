"""A run's records page by page, for :class:`~agentplane_journal.journal.reads.RunReads`.

Two ways to read a page: the store's lean reads (:mod:`agentplane_journal.backends.reader`:
one statement, one round trip or thread hop, no ORM, the next page fetched while this one is
checked) where nothing stands in their way, and the general unit of work otherwise (a host's
session, a replica for audit reads, a database the lean reads do not serve). Both end a page
at a record count or a byte budget and check every row (``records_from_rows``, or the
unsigned chain pass of ``db/row_chain.py`` for ``verify``). Kept apart from reads.py, which
holds what each read answers, so each can be read in one sitting.

:class:`RunPages` is a base of ``RunReads``; it holds no state of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import and_
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.backends import reader as lean
from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.record import Record
from agentplane_journal.db.driver_rows import driver_rows
from agentplane_journal.db.models import Journal
from agentplane_journal.db.row_chain import chain_rows
from agentplane_journal.db.statements import page_statement, records_from_rows
from agentplane_journal.journal.run_indexes import RunIndexes

__all__ = ["RunPages"]


def _left(fetch: asyncio.Future[Any] | None) -> None:
    """A page fetched ahead and not wanted: left to finish (a driver's statement is never
    interrupted mid-way), its outcome, error included, read by nobody."""
    if fetch is None:
        return
    if not fetch.done():
        fetch.add_done_callback(_left)
    elif not fetch.cancelled():
        fetch.exception()  # retrieved: never "exception was never retrieved"


def _fed(check: RunCheck, rows: list[Any]) -> tuple[int, int]:
    """``check.feed`` of the page ``rows`` hold; its last seq and stored bytes. Unsigned, the
    rows are chain-checked without building their records (``db/row_chain.py``), unless
    that pass has a doubt: then the records are built and fed, for the verdict."""
    if not check.signed:
        done = chain_rows(rows, check.head, check.last, check.started)
        if done is not None:
            check.advance(*done)
            return done[1], sum(len(row[3]) for row in rows)
    page = records_from_rows(rows)
    check.feed(page)
    return page[-1].seq, sum(len(r.raw) for r in page)


class RunPages(RunIndexes):
    """A run's records page by page (the lean reads or the unit of work): every method here
    only reads."""

    def _key(self, run: RunId) -> Any:
        return and_(Journal.tenant == self.tenant, Journal.run_id == str(run))

    async def _lean(self, session: AsyncSession | None, primary: bool) -> lean.Reader | None:
        """The store's lean reads (:mod:`agentplane_journal.backends.reader`: one statement,
        one round trip or thread hop, no ORM) for a read outside a host's ``session``, or
        ``None`` for the general unit of work: a host's session, a store whose audit reads
        go to a replica (unless ``primary``), a database the lean reads do not serve."""
        shared = self._shared
        if session is not None or (shared.read_sessions is not None and not primary):
            return None
        if not shared.reader_made:
            shared.reader = lean.open_reader(self.dialect, self._bind)
            shared.reader_made = True
        if shared.reader is not None:
            await self._ready()
        reader: lean.Reader | None = shared.reader
        return reader

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
        reader = await self._lean(session, primary=False)
        if reader is not None:
            async for records in self._lean_pages(reader, run, from_seq, size, budget):
                yield records
            return
        stmt, tenant, run_id = page_statement(size), self.tenant, str(run)
        at = from_seq
        while True:

            async def unit(session: AsyncSession, at: int = at) -> list[Record]:
                params = {"tenant": tenant, "run_id": run_id, "from_seq": at, "budget": budget}
                return records_from_rows(await driver_rows(session, stmt, params))

            page = await self.unit(unit, read_only=True, session=session)
            if not page:
                return
            yield page
            # A short page is the run's end unless the budget cut it, which needs the bytes
            # before its next row (so the page's own bytes) to have reached the budget.
            # ``Record.raw`` is never shorter than what ``length`` counted for its row.
            if len(page) < size and sum(len(r.raw) for r in page) < budget:
                return
            at = page[-1].seq + 1

    async def _lean_pages(
        self,
        reader: lean.Reader,
        run: RunId,
        at: int,
        size: int,
        budget: int,
        check: RunCheck | None = None,
    ) -> AsyncIterator[list[Record]]:
        """:meth:`_pages` by the lean reads, the next page fetched while this one is checked
        (on SQLite the driver's thread reads it meanwhile; on PostgreSQL the server).

        Where the next page starts is read from the rows before they are checked, only to
        start it early: the page's checks still decide (as in :meth:`_pages`) whether there
        is a next page and where; a fetch they do not confirm is left to finish unread, and
        a row whose seq is not an integer starts nothing. Memory: two pages at most (the
        one checked and the one fetched ahead), each within ``size`` and ``budget``.

        With ``check`` (``RunReads.verify``), each page is fed to it instead of yielded
        (:func:`_fed`: unsigned, without building its records).
        """
        tenant, run_id = self.tenant, str(run)

        def fetch(start: int) -> asyncio.Future[list[Any]]:
            rows = reader.rows(lean.PAGE, tenant, run_id, start, budget, size)
            return asyncio.ensure_future(rows)

        ahead: asyncio.Future[list[Any]] | None = fetch(at)
        try:
            while ahead is not None:
                rows = await ahead
                ahead = None
                if not rows:
                    return
                guess = rows[-1][0]
                if type(guess) is int and (
                    len(rows) >= size
                    or sum(len(r[3]) if type(r[3]) is bytes else budget for r in rows) >= budget
                ):
                    ahead = fetch(guess + 1)
                if check is None:
                    page = records_from_rows(rows)
                    yield page
                    last, stored = page[-1].seq, sum(len(r.raw) for r in page)
                else:
                    last, stored = _fed(check, rows)
                # As in _pages: a short page is the run's end unless the budget cut it.
                if len(rows) < size and stored < budget:
                    return
                if ahead is None or guess != last:
                    _left(ahead)
                    ahead = fetch(last + 1)
        finally:
            _left(ahead)
