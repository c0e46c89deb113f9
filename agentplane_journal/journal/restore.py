"""Restoring an export (format 1) into an empty store, and proving it by an equal root.

Through the store's own ``append`` and ``seal``, never by writing rows: whatever derived
index ``append`` maintains (exactly-once, outcomes, admissions, activity, the log's tree), a
restore maintains, with nothing to enumerate. Three properties reproduce the original bytes
rather than similar ones (agentplane 0.22's ``export::from_jsonl``):

* ``seq`` is re-derived and lands identically: an empty store, the same records in order;
* ``epoch`` is **carried**: it is inside the hashed body, so each maximal group of a run's
  records with one epoch is one ``append`` under that epoch (a store with no lease rows
  fences nothing), and a run that changed hands restores with its epochs;
* runs are **sealed in log order**: that order is the Merkle log. An export written in log
  order (ours) seals each run as its block ends; any other order holds the seals it cannot
  place yet (a run id, an epoch and an outcome each) until the gap before them is filled.

Two passes over the file, so that a file that cannot be restored is refused before anything
is written: the first checks the frame (header, format version, trailer) and that every
record line carries wire bytes that parse; the second replays. Memory is a batch of records
(:data:`BATCH`), whatever the file's size. The target must be empty (no record, no seal):
a restore rebuilds a history, it does not merge one.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentplane_journal.core.append import RESERVED_MEMBERS, Append
from agentplane_journal.core.checkpoint import Checkpoint
from agentplane_journal.core.export_lines import (
    FORMAT_VERSION,
    HEADER,
    PROFILE_BY_CANON,
    RUN_BLOCK,
    TRAILER,
    parse_checkpoint,
    parse_ulid_run,
)
from agentplane_journal.core.ids import RunId
from agentplane_journal.journal.store import SqlJournalStore

__all__ = ["BATCH", "WINDOW", "RestoreRefused", "RestoreReport", "restore_export"]

BATCH = 500
"""Records per ``append`` (one transaction); an epoch change ends a batch early."""

WINDOW = 16
"""Runs whose appends may be in flight at once (each at most :data:`BATCH` records)."""

_FALLBACK_OUTCOME = "restored"


class RestoreRefused(ValueError):
    """The export cannot be restored, or the target is not empty; nothing was written."""


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
        """Equal root at equal size: every record of every run, in log order, rebuilt to the
        same commitment (the origin is the target store's name, compared apart)."""
        return self.expected.size == self.rebuilt.size and self.expected.root == self.rebuilt.root

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


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    with path.open("r", encoding="utf-8", newline="\n") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                yield number, None
                continue
            yield number, value if isinstance(value, dict) else None


def _wire(value: dict[str, Any], number: int) -> dict[str, Any]:
    raw = value.get("raw")
    if not isinstance(raw, str):
        raise RestoreRefused(
            f"line {number}: a record line carries no wire bytes (`raw`) — restoring its "
            "display copy instead would rebuild what the readable half says rather than what "
            "the chain hashed, so the file is refused instead of guessed at"
        )
    try:
        body = json.loads(raw)
    except ValueError as exc:
        body = exc
    if not isinstance(body, dict):
        raise RestoreRefused(
            f"line {number}: a record line's wire bytes do not parse as a record "
            "— it cannot be replayed as written, and its display copy is not a substitute"
        )
    return body


@dataclass(slots=True)
class _Frame:
    checkpoint: Checkpoint
    canon: int | None
    signed: int = 0


def check_frame(path: Path) -> _Frame:
    """Pass one: the header's format, a trailer, and replayable wire bytes on every record."""
    version: object = None
    checkpoint: Checkpoint | None = None
    canon: int | None = None
    complete = False
    signed = 0
    for number, value in _lines(path):
        if value is None:
            continue  # agentplane's parse skips what it cannot read; so does ours
        kind = value.get("kind")
        if kind == HEADER:
            version = value.get("version")
            c = value.get("canon")
            canon = c if type(c) is int else None
            checkpoint = parse_checkpoint(value.get("checkpoint"))
        elif kind == TRAILER:
            complete = True
        elif kind is None:
            _wire(value, number)
            if value.get("attestation") is not None:
                signed += 1
    if version != FORMAT_VERSION:
        raise RestoreRefused(
            f"the export claims format version {version!r} and this build reads "
            f"{FORMAT_VERSION} — restoring a format this build cannot fully parse would "
            "rebuild an unknowable subset and call it a history"
        )
    if not complete:
        raise RestoreRefused(
            "the export has no trailer, so it was cut short — every line in it is a valid "
            "prefix, and restoring a prefix would rebuild a partial history shaped exactly "
            "like a whole one. Re-take the export"
        )
    if checkpoint is None:
        raise RestoreRefused("the export's header carries no readable checkpoint")
    return _Frame(checkpoint, canon, signed)


def append_of(body: dict[str, Any]) -> tuple[int, Append]:
    """``(epoch, Append)`` that re-creates ``body``: the envelope's members as the append's
    fields, every other member its payload (one place, so no field can be forgotten)."""
    payload = {k: v for k, v in body.items() if k not in RESERVED_MEMBERS}
    epoch = body.get("epoch")
    if type(epoch) is not int:
        raise ValueError(f"record {body.get('seq')!r} has no integer epoch")
    return epoch, Append(
        str(body.get("run")),
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
    """Appends a run's records in order and seals runs in log order.

    A run of at most :data:`BATCH` records is appended by a task of its own, up to
    :data:`WINDOW` runs at once (different runs are independent, and the store's group
    commit lets concurrent appends share commits); a longer one is appended batch by batch as
    it is read. A seal waits for its run's appends and for every lower log position.
    """

    def __init__(self, store: SqlJournalStore, report: RestoreReport) -> None:
        self.store, self.report = store, report
        self.groups: list[tuple[int, list[Append], list[str]]] = []
        self.held = 0  # records in self.groups
        self.inflight: deque[asyncio.Task[None]] = deque()
        self.next_index = 0
        self.pending: dict[int, tuple[RunId, int, str, asyncio.Task[None] | None]] = {}

    async def _write(self, groups: list[tuple[int, list[Append], list[str]]]) -> None:
        for epoch, batch, hashes in groups:
            written = await self.store.append(epoch, batch)
            self.report.records += len(written)
            self.report.differing += sum(
                r.hash.hex() != h for r, h in zip(written, hashes, strict=False)
            )

    async def record(self, epoch: int, append: Append, hash_hex: object) -> None:
        last = self.groups[-1] if self.groups else None
        if last is None or last[0] != epoch or len(last[1]) >= BATCH:
            if self.held >= BATCH:  # a long run: what is held goes now, in order
                groups, self.groups, self.held = self.groups, [], 0
                await self._write(groups)
            last = (epoch, [], [])
            self.groups.append(last)
        last[1].append(append)
        last[2].append(hash_hex if isinstance(hash_hex, str) else "")
        self.held += 1

    async def end_run(self, run: RunId, index: int | None, outcome: str | None) -> None:
        groups, self.groups, self.held = self.groups, [], 0
        if not groups:
            return
        task = asyncio.create_task(self._write(groups))
        self.inflight.append(task)
        if len(self.inflight) > WINDOW:
            await self.inflight.popleft()
        if index is not None:
            self.pending[index] = (run, groups[-1][0], outcome or _FALLBACK_OUTCOME, task)
            await self.drain(False)

    async def drain(self, everything: bool) -> None:
        while self.next_index in self.pending or (everything and self.pending):
            at = self.next_index if self.next_index in self.pending else min(self.pending)
            run, epoch, outcome, task = self.pending.pop(at)
            if task is not None:
                await task
            await self.store.seal(run, epoch, outcome)
            self.next_index = at + 1

    async def finish(self) -> None:
        while self.inflight:
            await self.inflight.popleft()
        await self.drain(True)

    async def abandon(self) -> None:
        for task in self.inflight:
            task.cancel()
        await asyncio.gather(*self.inflight, return_exceptions=True)


async def restore_export(store: SqlJournalStore, path: Path) -> RestoreReport:
    """Replay the export at ``path`` into ``store``'s (empty) tenant; report the roots.

    :class:`RestoreRefused` (nothing written) for a file that cannot be restored or a target
    that is not empty; a store error part-way propagates (restore into a fresh database).
    """
    frame = check_frame(path)
    await _refuse_non_empty(store)
    # The records are replayed through append, which re-seals each body in the tenant's wire
    # profile: the empty target takes the export's, so the bytes (and the root) come back.
    wanted = PROFILE_BY_CANON.get(frame.canon) if frame.canon is not None else None
    if wanted is not None and (await store.wire_profile()).name != wanted:
        await store.migrate_profile(wanted)
    report = RestoreReport(expected=frame.checkpoint, rebuilt=frame.checkpoint)
    replay = _Replay(store, report)
    try:
        await _replay(path, replay, report)
    except BaseException:
        await replay.abandon()
        raise
    report.rebuilt = await store.checkpoint()
    _not_carried(report, frame)
    return report


async def _replay(path: Path, replay: _Replay, report: RestoreReport) -> None:
    run: RunId | None = None
    index: int | None = None
    outcome: str | None = None
    for number, value in _lines(path):
        if value is None:
            continue
        kind = value.get("kind")
        if kind == RUN_BLOCK:
            if run is not None:
                await replay.end_run(run, index, outcome)
            run, outcome = parse_ulid_run(value.get("run")), None
            i = value.get("index")
            index = i if type(i) is int and value.get("seal") is not None else None
            if run is not None:
                report.runs += 1
        elif kind is None and run is not None:
            body = _wire(value, number)
            if body.get("kind") == "RunSealed" and isinstance(body.get("outcome"), str):
                outcome = body["outcome"]
            try:
                epoch, append = append_of(body)
            except (TypeError, ValueError) as exc:
                raise RestoreRefused(
                    f"line {number}: the record cannot be replayed ({exc}); what was written "
                    "before it stays — restore into a fresh database after fixing the file"
                ) from None
            await replay.record(epoch, append, value.get("hash"))
    if run is not None:
        await replay.end_run(run, index, outcome)
    await replay.finish()


def _not_carried(report: RestoreReport, frame: _Frame) -> None:
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
