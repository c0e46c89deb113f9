"""Restoring an export (format 1) into an empty store, and proving it by an equal root.

Through the store's own unit of work for appends and seals
(:func:`~agentplane_journal.journal.bulk.write_rows`): the run mutex, the fence for each
record's epoch, the head each run's rows must continue, then the records, the admission
claims, the outcomes and the log's leaves, as ``append`` and ``seal`` write them (the rows
are compared column by column with a store-written tenant's in tests/test_restore_rows.py).
What is written is what pass one established of each record (its bytes, compared with the
bytes ``append`` writes for it; its hash, chained over them; seq, epoch, kind, effect key,
case, admission key, outcome), kept in this process's own scratch file
(:mod:`~agentplane_journal.journal.restore_spool`), never the file read again. Three
properties reproduce the original bytes rather than similar ones (agentplane 0.22's
``export::from_jsonl``):

* ``seq`` lands identically: an empty store, each run's records from 1, in order;
* ``epoch`` is **carried**: it is inside the hashed body, so each maximal group of a run's
  records with one epoch is one ``append`` under that epoch (a store with no lease rows
  fences nothing), and a run that changed hands restores with its epochs;
* runs are **sealed in log order**: that order is the Merkle log. An export written in log
  order (ours) seals each run as its block ends; any other order holds the seals it cannot
  place yet (a run id, an epoch and an outcome each) until the gap before them is filled.

Two passes over the file, so that a file that cannot be restored is refused before anything
is written: the first (:mod:`~agentplane_journal.journal.restore_check`) judges it as
``verify-export`` does and checks that every record can be replayed and written in its own
wire profile, spooling what it established; the second writes from the spool. The verifier
and pass one read each line and run block alike (:mod:`~agentplane_journal.exportfmt.read`).
Memory is a chunk of records (:data:`BATCH`) and a chunk of the spool, whatever the file's
size. The target must be empty (no record, no seal): a restore rebuilds
a history, it does not merge one.

A tenant's records may be in both wire profiles (migrated, or written by two handles in the
window ``profiles.py`` describes). Each record is checked in the profile its version names
(its bytes are what that profile writes for it), so its bytes come back; the target records
the header's profile, and as the one it left the other profile the file's records are in
(:meth:`Profiles.restore_profile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentplane_journal.core.ids import RunId
from agentplane_journal.core.profile import (
    WireProfile,
    profile_named,
)
from agentplane_journal.errors import CommitUnknownError, UnavailableError
from agentplane_journal.exportfmt.lines import PROFILE_BY_CANON
from agentplane_journal.journal.bulk import RowOp, RowsOp, SealOp, write_rows
from agentplane_journal.journal.restore_check import Frame, RestoreRefused
from agentplane_journal.journal.restore_read import check_frame
from agentplane_journal.journal.restore_spool import Spool, Spooled
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = ["BATCH", "RestoreIncomplete", "RestoreRefused", "RestoreReport", "restore_export"]

BATCH = 2000
"""Records per transaction: a chunk (any number of runs' appends and seals; a chunk may end
inside a run). One chunk is written while the next is read."""

_FALLBACK_OUTCOME = "restored"


class RestoreIncomplete(RuntimeError, UnavailableError):
    """Writing failed part-way (the database refused a chunk, or could not be reached).

    Each chunk is one transaction, so the target holds whole chunks only: ``records``
    records and ``seals`` seals surely committed (the file's prefix), and nothing of a chunk
    the database refused. A chunk whose COMMIT lost its connection
    (:class:`~agentplane_journal.errors.CommitUnknownError`) may or may not have landed:
    its ``unknown_records`` records and ``unknown_seals`` seals are named as unknown, never
    counted either way. The prefix is a partial history shaped like a whole one, so it is
    named, never left silent: the target is no longer empty (another restore into it is
    refused) and must be dropped, or another tenant used, before restoring again.
    """

    def __init__(
        self,
        tenant: str,
        records: int,
        seals: int,
        cause: BaseException,
        unknown: tuple[int, int] = (0, 0),
    ) -> None:
        self.tenant, self.records, self.seals, self.cause = tenant, records, seals, cause
        self.unknown_records, self.unknown_seals = unknown
        if unknown != (0, 0):
            landed = (
                f"{records} record(s) and {seals} seal(s) surely committed, and whether the "
                f"chunk being committed when the connection was lost ({unknown[0]} record(s), "
                f"{unknown[1]} seal(s)) landed is unknown"
            )
        else:
            landed = (
                f"{records} record(s) and {seals} seal(s) committed, the chunk that failed "
                "rolled back"
            )
        super().__init__(
            f"the restore failed part-way ({type(cause).__name__}: {cause}); tenant "
            f"{tenant!r} now holds a PARTIAL history — at least {landed}. Do not use it: "
            "drop the database (or the tenant) and restore into a fresh one (`upgrade --url ...` "
            "first) once the cause is fixed"
        )


@dataclass(slots=True)
class RestoreReport:
    """What a restore did and what it could not carry (agentplane's ``RestoreReport``)."""

    expected: Checkpoint
    rebuilt: Checkpoint
    runs: int = 0
    records: int = 0
    differing: int = 0
    not_carried: list[str] = field(default_factory=list)

    @property
    def is_faithful(self) -> bool:
        """Equal root at equal size, and every record rebuilt to the hash the file carries:
        the log's commitment covers only sealed runs, so an open run's records count too (the
        origin is the target store's name, compared apart)."""
        return (
            self.expected.size == self.rebuilt.size
            and self.expected.root == self.rebuilt.root
            and not self.differing
        )

    def to_json(self) -> dict[str, Any]:
        def cp(c: Checkpoint) -> dict[str, Any]:
            return {"origin": c.origin, "size": c.size, "root": c.root.hex()}

        return {
            "faithful": self.is_faithful,
            "expected": cp(self.expected),
            "rebuilt": cp(self.rebuilt),
            "runs": self.runs,
            "records": self.records,
            "differing_records": self.differing,
            "not_carried": list(self.not_carried),
        }


async def _refuse_non_empty(store: SqlJournalStore) -> None:
    cp = await store.checkpoint()
    if cp.size or await store.audit_runs(None, 1):
        raise RestoreRefused(
            f"the target tenant {store.tenant!r} is not empty (log size {cp.size}, or records "
            "present); a restore rebuilds a history, it does not merge one — restore into a "
            "new database (`upgrade --url ...` first) or another --tenant"
        )


class _Replay:
    """Gathers a chunk of operations (each run's records in order, the seals in log order) and
    writes it in one transaction (:func:`~agentplane_journal.journal.bulk.write_rows`).

    A chunk ends after :data:`BATCH` records, at a run's end or in its middle (a long run
    continues in the next chunk from its committed head), so memory is a chunk whatever
    the file's size. One chunk is written while the next is read: at most two are held.
    A seal is placed once every lower log position is placed; an export in log order (ours)
    places each as its run ends.
    """

    def __init__(
        self,
        store: SqlJournalStore,
        report: RestoreReport,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.store, self.report, self.progress = store, report, progress
        self.ops: list[RowOp] = []
        self.group: tuple[RunId, int, list[Spooled]] | None = None
        self.held = 0  # records in self.ops and self.group
        self.epoch = 0  # the current run's last epoch
        self.inflight: asyncio.Task[tuple[int, int]] | None = None
        self.next_index = 0
        self.pending: dict[int, tuple[RunId, int, str]] = {}
        self.committed = (0, 0)  # (records, seals) surely committed
        self.unknown = (0, 0)  # (records, seals) of a chunk whose COMMIT outcome is unknown

    async def _write(self, ops: list[RowOp]) -> tuple[int, int]:
        records = sum(len(op.records) for op in ops if isinstance(op, RowsOp))
        seals = sum(1 for op in ops if isinstance(op, SealOp))
        try:
            await write_rows(self.store, ops)
        except CommitUnknownError:
            self.unknown = (records, seals)
            raise
        self.report.records += records
        return records, seals

    def _end_group(self) -> None:
        if self.group is not None and self.group[2]:
            self.ops.append(RowsOp(*self.group))
        self.group = None

    async def flush(self) -> None:
        """Send what is gathered as one transaction, after the previous one has committed."""
        self._end_group()
        ops, self.ops, self.held = self.ops, [], 0
        await self._settle()
        if ops:
            self.inflight = asyncio.create_task(self._write(ops))

    async def _settle(self) -> None:
        if self.inflight is not None:
            task, self.inflight = self.inflight, None
            records, seals = await task
            self.committed = (self.committed[0] + records, self.committed[1] + seals)
            if self.progress is not None:
                self.progress(self.report.runs, self.committed[0])

    def record(self, run: RunId, record: Spooled) -> bool:
        """One record, written with the run's others of its epoch; ``True`` once the chunk is
        full (the caller then awaits :meth:`flush`: mid-run or not, the run goes on in the
        next chunk)."""
        epoch = record[1]
        group = self.group
        if group is None or group[1] != epoch or group[0] is not run:  # a block's one RunId
            self._end_group()
            self.group = group = (run, epoch, [])
        group[2].append(record)
        self.epoch = epoch
        self.held += 1
        return self.held >= BATCH

    def end_run(
        self, run: RunId, index: int | None, outcome: str | None, *, any_records: bool
    ) -> None:
        self._end_group()
        if index is not None and any_records:
            self.pending[index] = (run, self.epoch, outcome or _FALLBACK_OUTCOME)
            self._place(False)

    def _place(self, everything: bool) -> None:
        while self.next_index in self.pending or (everything and self.pending):
            at = self.next_index if self.next_index in self.pending else min(self.pending)
            run, epoch, outcome = self.pending.pop(at)
            self.ops.append(SealOp(run, epoch, outcome))
            self.next_index = at + 1

    async def finish(self) -> None:
        self._end_group()
        self._place(True)
        await self.flush()
        await self._settle()

    async def abandon(self, *, cancel: bool) -> None:
        """After a failure: let the chunk in flight end (so ``committed`` counts it if it
        landed; its own failure is not the one reported), or cancel it."""
        if self.inflight is None:
            return
        if cancel:
            self.inflight.cancel()
        with contextlib.suppress(BaseException):
            await self._settle()


async def restore_export(
    store: SqlJournalStore, path: Path, progress: Callable[[int, int], None] | None = None
) -> RestoreReport:
    """Replay the export at ``path`` into ``store``'s (empty) tenant; report the roots.

    ``progress`` is told ``(runs read, records committed)`` after each chunk commits.

    :class:`RestoreRefused` (nothing written) for a file that cannot be restored or a target
    that is not empty; :class:`RestoreIncomplete` for a failure once writing has begun
    (what is committed stays, counted; restore into a fresh database).
    """
    with Spool() as spool, _collections_spared():
        frame = check_frame(path, spool)
        await _refuse_non_empty(store)
        # Each record is written as the bytes its own wire profile writes for it (pass one
        # compared them), so they come back whichever profiles they are in. The empty
        # target records the export's profile, and the other one its records are in.
        wanted = _target_profile(frame, await store.wire_profile())
        left = sorted(p.name for p in frame.profiles if p is not wanted)
        await store.restore_profile(wanted, profile_named(left[0]) if left else None)
        report = RestoreReport(expected=frame.checkpoint, rebuilt=frame.checkpoint)
        report.differing = frame.differing
        replay = _Replay(store, report, progress)
        try:
            await _replay(spool, replay, report)
        except Exception as exc:
            await replay.abandon(cancel=False)
            records, seals = replay.committed
            raise RestoreIncomplete(store.tenant, records, seals, exc, replay.unknown) from exc
        except BaseException:
            await replay.abandon(cancel=True)
            raise
    report.rebuilt = await store.checkpoint()
    _not_carried(report, frame)
    return report


@contextlib.contextmanager
def _collections_spared() -> Iterator[None]:
    """Python's cyclic collector spared the objects that were there before the restore.

    A restore allocates a few million objects (each line's parse, each record's append
    and row), which sets off the collector's full collections now and then, and each walks
    every object the process holds: the interpreter's modules, SQLAlchemy's statements and
    mappers. That walk was a tenth of a restore's CPU. :func:`gc.freeze` moves the objects
    of before into a generation no collection walks, and :func:`gc.unfreeze` hands them
    back when the restore ends, so a collection walks the restore's own objects only, and
    whatever cyclic garbage the objects of before hold is collected after it as it would
    have been. Left alone when the collector is off or something else froze objects (a
    server that freezes before it forks: unfreezing would undo that)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _target_profile(frame: Frame, current: WireProfile) -> WireProfile:
    """The header's profile (its ``canon``); for a ``canon`` this build does not name, the
    one profile the records are in, else the target's own."""
    named = PROFILE_BY_CANON.get(frame.canon) if frame.canon is not None else None
    if named is not None:
        return profile_named(named)
    return next(iter(frame.profiles)) if len(frame.profiles) == 1 else current


async def _replay(spool: Spool, replay: _Replay, report: RestoreReport) -> None:
    """Pass two: every block and record pass one spooled, in file order, written in chunks."""
    run: RunId | None = None
    index: int | None = None
    outcome: str | None = None
    records = 0
    for entry in spool.entries():
        if type(entry[0]) is str:  # a run block: (run ulid, log index or None)
            if run is not None:
                replay.end_run(run, index, outcome, any_records=records > 0)
            # The ULID text of pass one's own parsed RunId (the spool is this process's
            # own file): taken as it is, not parsed a second time.
            run = RunId._trusted(entry[0])
            index, outcome, records = entry[1], None, 0
            report.runs += 1
        elif run is not None:
            if entry[9] is not None:  # a RunSealed record's outcome
                outcome = entry[9]
            records += 1
            if replay.record(run, entry):
                await replay.flush()
    if run is not None:
        replay.end_run(run, index, outcome, any_records=records > 0)
    await replay.finish()


def _not_carried(report: RestoreReport, frame: Frame) -> None:
    notes = report.not_carried
    if report.rebuilt.origin != report.expected.origin:
        notes.append(
            f"the log's name — the export's log is '{report.expected.origin}' and the target "
            f"store names its log '{report.rebuilt.origin}' (pass --origin to keep the name)"
        )
    if report.differing:
        notes.append(
            f"{report.differing} record(s) rebuilt to a different hash than the export carries "
            "— the target store writes another wire profile than the export's, or the file "
            "was edited"
        )
    if frame.dropped:
        notes.append(
            f"{frame.dropped} open run(s) the export declared unreadable — the file carries "
            "none of their records, so the target holds none (`verify --all` on the source "
            "names the damage)"
        )
    if frame.signed:
        notes.append(
            f"{frame.signed} record(s) carried a signature that this restore did not reproduce "
            "— append signs as the restoring store's own signer (none here). Hashes and the "
            "Merkle root are unaffected"
        )
    notes.append(
        "activity and seal timestamps, and the outcome index's order — the run index, the "
        "seals and the conclusions' ordinals now follow the restore rather than when history "
        "happened; nothing derives a decision from them"
    )
    notes.append(
        "each seal's outcome label is taken from the run's RunSealed record "
        f"('{_FALLBACK_OUTCOME}' where it has none); a leaf is the chain head alone, so the "
        "root is unaffected"
    )
