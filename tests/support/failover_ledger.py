"""The failover tests' ledger: what 16 writers and a checkpoint reader were told, and its audit.

Shared by ``test_failover.py`` (a standby promoted by hand) and ``test_patroni.py`` (Patroni
promotes it). Each writer is its own store (a runtime instance): it takes a lease on a fresh
run, appends three batches of two records, and seals the run; every answer is written in the
:class:`Ledger` with the phase of the test it came in (acknowledged, ``CommitUnknownError``
"unknown", or refused). The reader saves checkpoints. Calls that a failover can interrupt are
retried on the same store object: the writers resume without a restart.

:func:`find_problems` is everything the new primary contradicts in the ledger: an acknowledged
record lost or replaced (a fork), an unknown batch half there, a refused batch there, a run
that does not verify, a log that is not dense, an acknowledged seal lost, or a checkpoint
saved in ``checked_phases`` that is not a prefix of the final log.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from agentplane_journal import (
    BackendError,
    Checkpoint,
    CommitUnknownError,
    CorruptRecordError,
    Digest,
    FencedError,
    Lease,
    LeaseHeldError,
    Record,
    RunId,
    SqlJournalStore,
    verify_consistency,
)
from agentplane_journal.db.models import RunSeal

from support.helpers import note

WRITERS = 16
OUTCOMES = ("acked", "unknown", "refused")
CLI = [sys.executable, "-m", "agentplane_journal.cli.main"]


@dataclass
class Batch:
    run: RunId
    texts: list[str]
    phase: str
    outcome: str  # acked | unknown | refused
    records: list[Record] = field(default_factory=list)
    writer: int = -1  # which writer (store) was told


@dataclass
class Ledger:
    """What the writers were told, and when."""

    phase: str = "normal"
    batches: list[Batch] = field(default_factory=list)
    seals: dict[RunId, tuple[Digest, str]] = field(default_factory=dict)
    checkpoints: list[tuple[Checkpoint, str]] = field(default_factory=list)
    runs: set[RunId] = field(default_factory=set)


def writers_acked(ledger: Ledger, phase: str) -> int:
    """How many writers had a batch acknowledged that they began in ``phase``."""
    return len({b.writer for b in ledger.batches if b.phase == phase and b.outcome == "acked"})


async def until(ledger: Ledger, what: str, done: Any, within: float = 60) -> None:
    """Until ``done(ledger)``: phases end when something happened in them, not after a
    sleep (``within`` only bounds what never happens, and then the test fails)."""
    deadline = time.monotonic() + within
    while not done(ledger):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


async def until_every_writer_acked(ledger: Ledger, phase: str) -> None:
    """Until each writer had a batch acknowledged in ``phase``: after a failover, the same
    store objects carry on, with no restart."""
    await until(
        ledger,
        f"every writer acknowledged in phase {phase!r}",
        lambda led: writers_acked(led, phase) == WRITERS,
    )


async def until_checkpointed(ledger: Ledger, phase: str) -> None:
    """Until the reader has saved a checkpoint in ``phase``."""
    await until(
        ledger,
        f"a checkpoint saved in phase {phase!r}",
        lambda led: any(p == phase for _, p in led.checkpoints),
    )


async def retry(stop: asyncio.Event, call: Any) -> Any:
    """Retry through the failover (refused or unknown: both retryable for these calls)."""
    while True:
        try:
            return await call()
        except (BackendError, CommitUnknownError):
            if stop.is_set():
                return None
            await asyncio.sleep(0.02)


async def claim(stop: asyncio.Event, store: SqlJournalStore, run: RunId, owner: str) -> Any:
    """``acquire`` through the failover. A claim whose COMMIT was lost may have landed;
    ``acquire`` never renews, so its retry is then refused naming this very owner (unique
    to this writer and run), and that refusal carries the epoch the lost answer held."""
    try:
        return await retry(stop, lambda: store.acquire(run, owner, 600))
    except LeaseHeldError as held:
        if held.owner != owner:
            raise
        return Lease(run, owner, held.epoch)


async def writer(i: int, store: SqlJournalStore, ledger: Ledger, stop: asyncio.Event) -> None:
    while not stop.is_set():
        run = RunId.generate()
        ledger.runs.add(run)
        lease = await claim(stop, store, run, f"writer-{i}")
        if lease is None:
            return
        for b in range(3):
            texts = [f"{run}/{b}/{k}" for k in range(2)]
            phase = ledger.phase
            try:
                records = await store.append(lease.epoch, [note(run, t) for t in texts])
                ledger.batches.append(Batch(run, texts, phase, "acked", records, i))
            except CommitUnknownError:
                ledger.batches.append(Batch(run, texts, phase, "unknown", writer=i))
            except (BackendError, FencedError):
                ledger.batches.append(Batch(run, texts, phase, "refused", writer=i))
                await asyncio.sleep(0.02)
        phase = ledger.phase
        # A seal is idempotent (a re-seal returns the sealed head), so it is retried.
        head = await retry(stop, lambda r=run, e=lease.epoch: store.seal(r, e, "succeeded"))
        if head is not None:
            ledger.seals[run] = (head, phase)


async def reader(store: SqlJournalStore, ledger: Ledger, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            ledger.checkpoints.append((await store.checkpoint(), ledger.phase))
        except (BackendError, CommitUnknownError):
            pass
        await asyncio.sleep(0.02)


async def find_problems(
    store: SqlJournalStore,
    ledger: Ledger,
    final: Checkpoint,
    checked_phases: tuple[str, ...] = ("normal", "partition"),
) -> list[str]:
    """Everything the new primary contradicts in what the writers and the reader were told."""
    problems: list[str] = []
    stored: dict[RunId, list[Record]] = {run: await store.read(run) for run in ledger.runs}
    by_text = {
        r.body["text"]: r for records in stored.values() for r in records if r.kind == "Note"
    }
    for batch in ledger.batches:
        present = [by_text.get(t) for t in batch.texts]
        if batch.outcome == "acked":
            for record in batch.records:
                now = next((r for r in stored[batch.run] if r.seq == record.seq), None)
                if now is None:
                    problems.append(f"acknowledged {batch.run} seq {record.seq} lost")
                elif now.hash != record.hash:
                    problems.append(f"acknowledged {batch.run} seq {record.seq} replaced (fork)")
        elif batch.outcome == "unknown":
            if any(present) and not all(present):
                problems.append(f"unknown batch of {batch.run} half there")
            if all(present):
                seqs = [r.seq for r in present if r is not None]
                if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
                    problems.append(f"unknown batch of {batch.run} not contiguous")
        elif any(present):
            problems.append(f"refused batch of {batch.run} is there")
    for run in ledger.runs:
        try:
            await store.verify(run)  # contiguous from seq 1, every link and hash
        except CorruptRecordError as exc:
            problems.append(f"{run} does not verify: {exc}")
    async with store.engine.connect() as conn:
        positions = (
            await conn.execute(
                select(RunSeal.log_index)
                .where(RunSeal.tenant == store.tenant)
                .order_by(RunSeal.log_index)
            )
        ).scalars()
        if list(positions) != list(range(final.size)):
            problems.append("the log is not dense")
    for run, (head, _phase) in ledger.seals.items():
        inclusion = await store.inclusion_proof(run)
        if inclusion is None or inclusion.seal != head:
            problems.append(f"acknowledged seal of {run} lost or changed")
    for cp, phase in ledger.checkpoints:
        if phase not in checked_phases:
            continue
        proof = await store.consistency_proof(cp.size) if cp.size <= final.size else None
        if proof is None or not verify_consistency(cp.size, cp.root, final.size, final.root, proof):
            problems.append(f"checkpoint of size {cp.size} ({phase}) is not a prefix")
    return problems
