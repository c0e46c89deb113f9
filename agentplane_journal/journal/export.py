"""Writing export format 1 (agentplane 0.22's) from a store, streaming.

The header's checkpoint is read first; every run is then described *as of it*: a run sealed
after it is written as still open (no ``index``/``seal``), so the file never disagrees
with its own first line. Runs come in log order (sealed runs by
log position), then every other run by run id, each page read by **one** statement
(:mod:`~agentplane_journal.journal.export_pages`: a keyset range of records with each run's
seal and leaf beside them, bounded by rows and bytes) and every row checked as it is met
(:func:`~agentplane_journal.db.statements.record_from_row`: its hash over its bytes, its
columns against its body). A run's lines are held (a temporary file past a few MiB) until
the run ends, so that a run which fails to read half-way is filed as unreadable with nothing
of it written. Memory is therefore a page and a run, whatever the journal's size. An export
of named runs (``runs=``) reads them with
:meth:`~agentplane_journal.journal.audits.AuditReads.read_runs`.

Log order is what lets :mod:`agentplane_journal.journal.restore` seal each run as soon as its
block ends, with nothing held back. A run the store cannot read is named in the trailer and
the export continues: one damaged run must not withhold every healthy one.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from typing import IO, Any, TextIO

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import is_canonical_ulid
from agentplane_journal.db.row_bodies import plain_line
from agentplane_journal.db.statements import digest, record_from_row
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.exportfmt.lines import (
    Trailer,
    Unreadable,
    canon_for_profile,
    header_line,
    record_line,
    run_line,
    trailer_line,
)
from agentplane_journal.journal.audits import RunRead
from agentplane_journal.journal.export_pages import LOG, OPEN, PAGE_ROWS, SEAL_ONLY
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["Progress", "store_canon", "write_export"]

_SPOOL_BYTES = 4 << 20


def store_canon(store: SqlJournalStore) -> int:
    """The header's ``canon`` for this store: its tenant's wire profile's (``store.profile``;
    see ``CANON_BY_PROFILE``)."""
    return canon_for_profile(store.profile.name)


def _canonical(value: object) -> RunId | None:
    """The run a stored ``run_id`` names when it is a run id's exact text (``run_`` and an
    upper-case ULID), else ``None``: ``RunId.parse(value)`` whose ``str`` is ``value``, by
    the read path's cached ULID check (a parse per run was a tenth of the export)."""
    if isinstance(value, str) and value[:4] == "run_" and is_canonical_ulid(value[4:]):
        return RunId._trusted(value[4:])
    return None


Progress = Callable[[int, int], None]
"""Told ``(runs, records)`` written so far, after each run (the command line's meter)."""


async def write_export(
    store: SqlJournalStore,
    out: TextIO,
    runs: Sequence[RunId] | None = None,
    progress: Progress | None = None,
) -> tuple[Checkpoint, Trailer]:
    """Write the tenant's export (or just ``runs``) to ``out``; return its header's
    checkpoint and its trailer. Raises only for a failure to read the log or to write."""
    cp = await store.checkpoint()
    out.write(header_line(cp, store_canon(store)) + "\n")
    trailer = Trailer()
    if runs is None:
        await _export_all(store, out, cp.size, trailer, progress)
    else:
        pending = list(runs)
        while pending:
            reads = await store.read_runs(pending)
            for run in [r for r in pending if r in reads]:
                read = reads[run]
                in_cp = read.position is not None and read.position < cp.size
                await _write_run(store, out, run, read, in_cp, trailer)
                if progress is not None:
                    progress(trailer.runs_requested, trailer.records)
            pending = [r for r in pending if r not in reads]
    out.write(trailer_line(trailer) + "\n")
    out.flush()
    return cp, trailer


class _Block:
    """The run being read from the pages: its block's facts, then its lines (held until the
    run ends, so a run that fails to read half-way is filed unreadable with nothing of it
    written; past :data:`_SPOOL_BYTES` they go to a temporary file)."""

    __slots__ = ("count", "error", "held", "leaf", "lines", "run", "sealed", "spool")

    def __init__(self, run: RunId | None, sealed: Any, leaf: Any) -> None:
        self.run, self.sealed = run, sealed
        self.leaf: int | None = leaf if type(leaf) is int else None
        self.lines: list[str] = []
        self.held = 0
        self.spool: IO[str] | None = None
        self.count = 0
        self.error: str | None = None

    def add(self, row: Any) -> None:
        """One stored row of this run: checked (:func:`plain_line`, or for its verdict
        :func:`record_from_row`), then its line."""
        if self.error is not None:
            return
        try:
            line = plain_line(row)  # every check passed: the line from the row's own parts
            if line is None:
                try:
                    record = record_from_row(row)
                except CorruptRecordError as exc:
                    self.error = str(exc)
                    return
                line = record_line(record, read=True)
        except ValueError as exc:
            self.error = f"a record's wire bytes do not parse: {exc}"
            return
        self.count += 1
        if self.spool is not None:
            self.spool.write(line + "\n")
            return
        self.lines.append(line)
        self.held += len(line)
        if self.held > _SPOOL_BYTES:
            self.spool = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
            self.spool.write("\n".join(self.lines) + "\n")
            self.lines = []

    def write(self, out: TextIO, size: int, trailer: Trailer) -> None:
        """The run's block and its lines (or its entry in the trailer's unreadable list)."""
        if self.run is None:  # a stored id that is not a canonical run id: verify names it
            return
        seal: Digest | None = None
        if self.leaf is not None and self.leaf < size and self.sealed is not None:
            try:
                seal = digest(self.sealed, 0)
            except CorruptRecordError:
                seal = None
        out.write(run_line(self.run, self.leaf if seal is not None else None, seal) + "\n")
        trailer.runs_requested += 1
        if self.error is None and not self.count:
            self.error = "the store holds no records for this run"
        if self.error is not None:
            trailer.unreadable.append(Unreadable(self.run, self.error))
        elif self.spool is not None:
            self.spool.seek(0)
            shutil.copyfileobj(self.spool, out)
        else:
            out.write("\n".join(self.lines) + "\n")  # a block holds a line at least
        if self.error is None:
            trailer.records += self.count
            trailer.runs_exported += 1
        self.close()

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None


async def _pages(store: SqlJournalStore, phase: str, size: int) -> AsyncIterator[list[Any]]:
    """``phase``'s pages in order, each from the last row of the one before; the next is
    asked for before this one is handed over. (It only goes on while the caller awaits: on
    PostgreSQL the caller hands the loop back every few rows it writes, the dialect's
    ``export_handoff_rows``, so the server reads the next page meanwhile; on SQLite the
    page is written whole, then the next one read.)"""
    key: tuple[Any, Any] = (-1, 0) if phase == LOG else ("", 0)
    pending = asyncio.ensure_future(store.export_page(phase, key, size=size))
    try:
        while True:
            page = await pending
            if not page:
                return
            last = (page[-1][0], page[-1][1])
            if last == key:  # cannot happen in the database's own order; never loop
                raise RuntimeError(f"the export's {phase} pages did not advance past {key!r}")
            key = last
            if phase == SEAL_ONLY and len(page) < PAGE_ROWS:
                yield page
                return
            pending = asyncio.ensure_future(store.export_page(phase, key, size=size))
            yield page
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def _export_all(
    store: SqlJournalStore, out: TextIO, size: int, trailer: Trailer, progress: Progress | None
) -> None:
    """Every run, a page (one statement) at a time: the log's first ``size`` leaves in log
    order, then every other run by run id, then a seal that has no record and no leaf below
    ``size`` (a damaged journal's; named unreadable). Each row is checked as it is met.

    Where the database is a server (the dialect's ``export_handoff_rows``), the loop is
    handed back every so many rows, so that the next page's round trips go on while this
    one is written: the server reads it meanwhile."""
    step = store.dialect.export_handoff_rows
    for phase in (LOG, OPEN, SEAL_ONLY):
        blocks = _Blocks(out, size, trailer, progress)
        try:
            async for page in _pages(store, phase, size):
                if step is None:
                    blocks.rows(page)
                    continue
                for at in range(0, len(page), step):
                    await asyncio.sleep(0)  # the next page's statement is in flight
                    blocks.rows(page[at : at + step])
            blocks.end()
        finally:
            blocks.block.close()


class _Blocks:
    """A phase's rows into run blocks, as they come (a run may span pages)."""

    __slots__ = ("block", "key", "out", "progress", "size", "trailer")

    def __init__(self, out: TextIO, size: int, trailer: Trailer, progress: Progress | None):
        self.out, self.size, self.trailer, self.progress = out, size, trailer, progress
        self.block = _Block(None, None, None)  # a placeholder: writes nothing
        self.key: object = _NONE

    def rows(self, rows: Sequence[Any]) -> None:
        block, key = self.block, self.key
        for row in rows:
            if row[16]:  # a run the log phase wrote (its leaf is below the size)
                continue
            if row[0] != key:
                self.end(block)
                key = row[0]
                block = self.block = _Block(_canonical(row[2]), row[3], row[4])
            # A record (a seal's bare row has none), of a run the file can name.
            if row[11] is not None and block.run is not None:
                block.add(row[5:16])
        self.key = key

    def end(self, block: _Block | None = None) -> None:
        """The run being read ends (the last one of the phase: ``block`` omitted)."""
        block = self.block if block is None else block
        block.write(self.out, self.size, self.trailer)
        if self.progress is not None and block.run is not None:
            self.progress(self.trailer.runs_requested, self.trailer.records)


_NONE = object()


async def _write_run(
    store: SqlJournalStore,
    out: TextIO,
    run: RunId,
    read: RunRead,
    in_cp: bool,
    trailer: Trailer,
) -> None:
    seal: Digest | None = None
    if in_cp and read.sealed is not None:
        try:
            seal = digest(read.sealed, 0)
        except CorruptRecordError:
            seal = None
    out.write(run_line(run, read.position if seal is not None else None, seal) + "\n")
    trailer.runs_requested += 1

    def unreadable(reason: str) -> None:
        trailer.unreadable.append(Unreadable(run, reason))

    if read.error is not None:
        return unreadable(str(read.error))
    if read.whole:
        if not read.records:
            return unreadable("the store holds no records for this run")
        try:
            lines = [record_line(r, read=True) for r in read.records]
        except ValueError as exc:
            return unreadable(f"a record's wire bytes do not parse: {exc}")
        out.write("".join(line + "\n" for line in lines))
        trailer.records += len(lines)
        trailer.runs_exported += 1
        return None
    count = 0
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES, mode="w+", encoding="utf-8") as spool:
        try:
            async for part in store.pages(run):
                for record in part:
                    spool.write(record_line(record, read=True) + "\n")
                    count += 1
        except (CorruptRecordError, ValueError) as exc:
            return unreadable(str(exc))
        if count == 0:
            return unreadable("the store holds no records for this run")
        spool.seek(0)
        shutil.copyfileobj(spool, out)
    trailer.records += count
    trailer.runs_exported += 1
    return None
