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

from agentplane_journal.core import jsonload
from agentplane_journal.core.append import RESERVED_MEMBERS, Append
from agentplane_journal.core.canon import canonical_of_sorted
from agentplane_journal.core.checks import MAX_I64
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.profile import (
    AGENTPLANE_0_4,
    WireProfile,
    profile_named,
    profile_of_record,
)
from agentplane_journal.core.record import MAX_RECORD_BYTES, decode_wire
from agentplane_journal.errors import CommitUnknownError, UnavailableError
from agentplane_journal.exportfmt.lines import PROFILE_BY_CANON
from agentplane_journal.exportfmt.read import read_line
from agentplane_journal.journal.bulk import RowOp, RowsOp, SealOp, write_rows
from agentplane_journal.journal.restore_check import Frame, Judge, RestoreRefused
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


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each non-blank line as :func:`~.exportfmt.read.read_line` reads it (a sentence for an
    unreadable one), with its number."""
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            value = read_line(line.removesuffix(b"\n"))
            if value is not None:
                yield number, value


def _wire(value: dict[str, Any], number: int) -> dict[str, Any]:
    raw = value.get("raw")
    if not isinstance(raw, str):
        raise RestoreRefused(
            f"line {number}: a record line carries no wire bytes (`raw`) — restoring its "
            "display copy instead would rebuild what the readable half says rather than what "
            "the chain hashed, so the file is refused instead of guessed at"
        )
    try:
        body = decode_wire(raw)  # numbers as the writer meant them (1e20 stored as an integer)
    except RecursionError:  # nested past any body a writer makes: refused, not a traceback
        body = jsonload.JsonTooDeep(jsonload.MAX_JSON_DEPTH)
    except ValueError as exc:
        body = exc
    if not isinstance(body, dict):
        raise RestoreRefused(
            f"line {number}: a record line's wire bytes do not parse as a record "
            "— it cannot be replayed as written, and its display copy is not a substitute"
        )
    return body


def check_frame(path: Path, spool: Spool | None = None) -> Frame:
    """Pass one (:mod:`~agentplane_journal.journal.restore_check`): every line judged as
    ``verify-export`` judges it, and every record's ``append`` built, under its own run's
    block, and checked against the wire profile its version names; what it established
    written to ``spool``, if given, for pass two."""
    judge = Judge(spool)
    line, record = judge.line, judge.record  # bound once: called per line and record
    try:
        for number, value in _lines(path):
            run = line(number, value)
            if run is None or isinstance(value, str):
                continue
            read = judge.last_read
            shown = value.get("body")
            if read is not None and read[0] is not value.get("raw"):
                read = None  # not this line's (never expected): nothing reused
            if read is not None and read[3] is shown and type(shown) is dict:
                # The commonest record, taken here rather than through _replay_of (which
                # would take the same branch first): the verifier wrote its body back.
                try:
                    proven = _proven(shown, run, read[0], read)  # read[0] is the line's raw
                except (TypeError, ValueError, KeyError, RecursionError):
                    proven = None  # judged the ordinary way below, as _replay_of does
                if proven is not None:
                    data, epoch, append = proven
                    carried = value.get("hash")
                    record(number, data, shown, epoch, append, carried, True, AGENTPLANE_0_4, read)
                    continue
            data, body, epoch, append, profile = _replay_of(value, run, number)
            resealed = profile is not None
            record(number, data, body, epoch, append, value.get("hash"), resealed, profile, read)
        return judge.finish()
    finally:
        judge.close()


def _replay_of(
    value: dict[str, Any],
    run: RunId,
    number: int,
    read: tuple[str, bytes, bytes, object] | None = None,
) -> tuple[bytes, dict[str, Any], int, Append, WireProfile | None]:
    """``(raw, body, epoch, append, resealed)`` for a record line (``resealed``: the profile
    whose bytes were compared, else ``None``).

    The line's readable ``body`` was parsed with the line; when the append built from it
    is written by its version's profile as exactly the line's wire bytes, it *is* the
    record (canonical JSON is one text per value), and the wire bytes need no parse of
    their own (``resealed``: that comparison is made). Anything else (a display copy that
    differs, a body the profile writes otherwise, an unreplayable one) is read from the wire
    bytes as before, and judged there: the same verdicts and messages either way.

    ``read``: the verifier's reading of this line (``ExportVerifier.last_read``); where it
    wrote this very body back as this very ``raw`` (:func:`_proven`), that writing is the
    comparison, and is not made again."""
    raw = value.get("raw")
    if not isinstance(raw, str):
        _wire(value, number)  # refuses it, naming the line
        raise AssertionError("unreachable")
    shown = value.get("body")
    if type(shown) is dict:
        try:
            proven = _proven(shown, run, raw, read)
            if proven is not None:
                return proven[0], shown, proven[1], proven[2], AGENTPLANE_0_4
        except (TypeError, ValueError, KeyError, RecursionError):
            pass  # judged the ordinary way below
    data = raw.encode("utf-8", "surrogatepass")
    if type(shown) is dict and len(data) <= MAX_RECORD_BYTES:
        try:
            epoch, append = append_of(shown, run)
            profile = profile_of_record(shown)
            if (
                profile is not None
                and append.run == run
                and profile.canonicalize(append.body(shown["seq"], epoch), path="body") == data
            ):
                return data, shown, epoch, append, profile
        except (TypeError, ValueError, KeyError, RecursionError):
            pass  # judged from the wire bytes below
    body = _wire(value, number)
    epoch, append = _replayable(body, run, number)
    return data, body, epoch, append, None


def _proven(
    shown: dict[str, Any], run: RunId, raw: str, read: tuple[str, bytes, bytes, object] | None
) -> tuple[bytes, int, Append] | None:
    """``(bytes, epoch, append)`` when the verifier's reading shows, with no canonical
    JSON written here, that ``append``'s body is written by ``agentplane-0.4`` as exactly
    ``raw``'s bytes; ``None`` when not shown (the caller then compares the ordinary way).

    The chain of equalities, each checked: the verifier wrote ``shown`` (the very object)
    with canonical JSON's C encoder as exactly ``raw`` (the very object);
    :func:`~agentplane_journal.core.canon.canonical_of_sorted` holds that writing to be
    ``canonical_bytes(shown)`` (else ``None`` here); the payload is members of ``shown``,
    so it has canonical bytes too and :meth:`Append.of_canonical_payload` skips only that
    check; and ``append.body(seq, epoch)`` is ``shown`` again member for member
    (:func:`_same_json`), so its canonical bytes are those same bytes. A line whose wire
    bytes are anything else cannot pass: every step compares with what was written."""
    if read is None or read[3] is not shown or read[0] is not raw:
        return None
    if profile_of_record(shown) is not AGENTPLANE_0_4:
        return None  # the other profile's canonical JSON is not the C encoder's
    data = canonical_of_sorted(shown, raw)
    if data is None or len(data) > MAX_RECORD_BYTES:
        return None
    bare = _bare(shown, run)
    if bare is not None:
        return data, bare[0], bare[1]
    epoch, append = append_of(shown, run, canonical_payload=True)
    if append.run != run or not _same_json(append.body(shown["seq"], epoch), shown):
        return None
    return data, epoch, append


def _bare(shown: dict[str, Any], run: RunId) -> tuple[int, Append] | None:
    """``(epoch, append)`` for a body whose envelope is bare (``seq``, ``run``, ``epoch``,
    ``v`` and ``kind``, nothing else of :data:`RESERVED_MEMBERS`); ``None`` for any other
    body (:func:`_proven` then builds it by :func:`append_of` and compares it member for
    member).

    What :func:`_same_json` would establish of ``append.body(seq, epoch)`` holds here by
    construction, so that body is not built: its payload members are ``shown``'s own (the
    very objects), ``seq``, ``epoch`` and ``v`` are ``shown``'s, ``kind`` is ``shown``'s
    string (:func:`~agentplane_journal.core.checks.check_label` returns it), and ``run`` is
    checked to be the block's ULID text; the members ``body`` leaves out when unset (case,
    step, phase, effect key) are absent from ``shown`` too, since exactly five reserved
    members are present and they are these five. ``body``'s range checks on ``seq`` and
    ``epoch`` are made here."""
    payload = {k: x for k, x in shown.items() if k not in RESERVED_MEMBERS}
    if len(shown) - len(payload) != _BARE_MEMBERS:
        return None
    seq, epoch, kind = shown.get("seq"), shown.get("epoch"), shown.get("kind")
    named, v = shown.get("run"), shown.get("v")
    if (
        type(seq) is not int
        or type(epoch) is not int
        or type(kind) is not str
        or type(named) is not str
        or type(v) is not int
        or not 1 <= seq <= MAX_I64
        or not 0 <= epoch <= MAX_I64
        or named != run.ulid
    ):
        return None
    return epoch, Append.of_bare_envelope(run, kind, payload, v)


_BARE_MEMBERS = 5
"""``seq``, ``run``, ``epoch``, ``v`` and ``kind``: the reserved members every body has."""


def _same_json(built: dict[str, Any], shown: dict[str, Any]) -> bool:
    """Whether ``built`` is ``shown`` as JSON: the same members, each value the very same
    object or an ``int`` or ``str`` equal to it and of its exact type (``True == 1`` and
    ``1.0 == 1`` in Python, not in JSON; ``-0.0 == 0.0`` is never taken)."""
    if len(built) != len(shown):
        return False
    for key, value in shown.items():
        other = built.get(key, _ABSENT)
        if other is value:
            continue
        kind = type(value)
        if (kind is str or kind is int) and type(other) is kind and other == value:
            continue
        return False
    return True


_ABSENT = object()


def append_of(
    body: dict[str, Any], run: RunId | None = None, *, canonical_payload: bool = False
) -> tuple[int, Append]:
    """``(epoch, Append)`` that re-creates ``body``: the envelope's members as the append's
    fields, every other member its payload (one place, so no field can be forgotten).
    ``run``: the block's, used as it is when the body names it (no second parse).
    ``canonical_payload``: the caller holds ``body``'s canonical bytes
    (:meth:`Append.of_canonical_payload`)."""
    payload = {k: v for k, v in body.items() if k not in RESERVED_MEMBERS}
    epoch = body.get("epoch")
    if type(epoch) is not int:
        raise ValueError(f"record {body.get('seq')!r} has no integer epoch")
    named = body.get("run")
    build = Append.of_canonical_payload if canonical_payload else Append
    return epoch, build(
        run if run is not None and named == run.ulid else str(named),
        str(body.get("kind")),
        payload,
        case=body.get("case"),
        step=body.get("step"),
        phase=body.get("phase", "forward"),
        effect_key=body.get("effect_key"),
        v=body.get("v", 0),
    )


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
            run = RunId.parse(entry[0])  # pass one's run_block parsed it
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


def _replayable(body: dict[str, Any], run: RunId, number: int) -> tuple[int, Append]:
    """:func:`append_of`, or :class:`RestoreRefused` naming the line (pass one finds every
    such line before anything is written; pass two meets only lines pass one accepted)."""
    try:
        epoch, append = append_of(body)
    except (TypeError, ValueError) as exc:
        raise RestoreRefused(f"line {number}: the record cannot be replayed ({exc})") from None
    if append.run != run:
        raise RestoreRefused(
            f"line {number}: a record of run {append.run} sits in run {run}'s block — "
            "replaying it would mix two runs' chains; the file was edited or damaged"
        )
    return epoch, append


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
