"""Writing export format 1 (agentplane 0.22's) from a store, streaming.

The header's checkpoint is read first; every run is then described *as of it*: a run sealed
after it is written as still open (no ``index``/``seal``), so the file never disagrees
with its own first line. Runs come in log order (sealed runs by leaf position, a keyset page
of :data:`RUN_PAGE` positions at a time), then every other run by run id (keyset pages of
:meth:`~agentplane_journal.journal.audits.AuditReads.audit_runs`). Each page's records are
read with :meth:`~agentplane_journal.journal.audits.AuditReads.read_runs` (bounded by bytes);
a run too large for a page is read in its own pages and spooled (a temporary file past a
few MiB) so that a run which fails to read half-way is filed as unreadable with nothing of it
written. Memory is therefore a page of runs, whatever the journal's size.

Log order is what lets :mod:`agentplane_journal.journal.restore` seal each run as soon as its
block ends, with nothing held back. A run the store cannot read is named in the trailer and
the export continues: one damaged run must not withhold every healthy one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TextIO

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.db.models import RunSeal
from agentplane_journal.db.statements import digest
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
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["RUN_PAGE", "Progress", "export_runs", "store_canon", "write_export"]

RUN_PAGE = 1000
"""Runs listed (and their records read, at most ``PAGE_BYTES`` of them) per transaction."""

_SPOOL_BYTES = 4 << 20


def store_canon(store: SqlJournalStore) -> int:
    """The header's ``canon`` for this store: its tenant's wire profile's (``store.profile``;
    see ``CANON_BY_PROFILE``)."""
    return canon_for_profile(store.profile.name)


async def _sealed_page(
    store: SqlJournalStore, after: int, size: int, limit: int
) -> list[tuple[int, str]]:
    """``(log_index, run_id)`` of the sealed runs at positions ``after..size-1``, in order."""
    stmt = (
        select(RunSeal.log_index, RunSeal.run_id)
        .where(
            RunSeal.tenant == store.tenant,
            RunSeal.log_index >= after,
            RunSeal.log_index < size,
        )
        .order_by(RunSeal.log_index)
        .limit(limit)
    )

    async def unit(session: AsyncSession) -> list[tuple[int, str]]:
        return [(int(i), str(r)) for i, r in (await session.execute(stmt)).all()]

    return await store.unit(unit, read_only=True)


async def export_runs(store: SqlJournalStore, size: int) -> AsyncIterator[tuple[list[RunId], bool]]:
    """Every run in pages, ``(runs, in_log_phase)``: the log's first ``size`` leaves in
    order, then every run by id (the caller skips those it wrote in the first phase). A
    stored id that is not a canonical run id is skipped (``verify --all`` names it)."""
    at = 0
    while at < size:
        page = await _sealed_page(store, at, size, RUN_PAGE)
        if not page:
            break
        runs = [r for r in (_canonical(v) for _, v in page) if r is not None]
        if runs:
            yield runs, True
        at = page[-1][0] + 1
    after: RunId | str | None = None
    while True:
        listed = await store.audit_runs(after, RUN_PAGE)
        if not listed:
            return
        runs = [r for r in (_canonical(v) for v in listed) if r is not None]
        if runs:
            # Those in the log below `size` were written above; read_runs tells which.
            yield runs, False
        if len(listed) < RUN_PAGE:
            return
        last = listed[-1]
        after = last if isinstance(last, str) else str(last)


async def _not_in_log(store: SqlJournalStore, page: list[RunId], size: int) -> list[RunId]:
    """The runs of ``page`` that are not among the log's first ``size`` leaves (those were
    written in log order), asked of the seals alone so their records are not read twice."""

    async def unit(session: AsyncSession) -> set[str]:
        seals = await store.tenant_log.seals_of(session, [str(r) for r in page])
        return {run for run, (_, at) in seals.items() if at is not None and at < size}

    logged = await store.unit(unit, read_only=True)
    return [r for r in page if str(r) not in logged]


def _canonical(value: object) -> RunId | None:
    if not isinstance(value, str):
        return None
    try:
        run = RunId.parse(value)
    except ValueError:
        return None
    return run if str(run) == value else None


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

    async def pages() -> AsyncIterator[tuple[list[RunId], bool]]:
        if runs is not None:
            yield list(runs), True
            return
        async for page in export_runs(store, cp.size):
            yield page

    async for page, in_log_phase in pages():
        pending = list(page) if in_log_phase else await _not_in_log(store, page, cp.size)
        while pending:
            reads = await store.read_runs(pending)
            for run in [r for r in pending if r in reads]:
                read = reads[run]
                in_cp = read.position is not None and read.position < cp.size
                if in_cp and not in_log_phase:
                    continue  # written in log order already
                await _write_run(store, out, run, read, in_cp, trailer)
                if progress is not None:
                    progress(trailer.runs_requested, trailer.records)
            pending = [r for r in pending if r not in reads]
    out.write(trailer_line(trailer) + "\n")
    out.flush()
    return cp, trailer


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
            lines = [record_line(r) for r in read.records]
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
                    spool.write(record_line(record) + "\n")
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
