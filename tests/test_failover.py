"""A failover under load: the primary dies hard while 16 writers append and seal.

A primary of its own (not the session's cluster: it is killed) and a streaming standby made
with ``pg_basebackup -R``. Every store's URL lists both hosts with
``target_session_attrs=read-write``, so after the failover the same store objects find the
new primary themselves: no restart, no re-pointing. The timeline:

1. **normal**: 16 writers (each its own store, as 16 runtime instances) take a lease, append
   batches of two records and seal each run after three batches; a reader takes checkpoints.
2. **partition**: the standby stops receiving WAL (its ``primary_conninfo`` is emptied), so
   whatever the primary acknowledges now exists only on the primary.
3. **failover**: the primary is stopped with ``pg_ctl stop -m immediate`` in mid-traffic, and
   the standby is promoted (``pg_ctl promote``).
4. **after**: the writers carry on against the new primary.

Then every writer's ledger is checked against the new primary: each acknowledged record is
there with the hash the writer was given, each ``CommitUnknownError`` batch is all there or
all absent, each refused batch is absent, every run verifies (no fork, no gap), the log is
dense, every acknowledged seal is in the log, and every checkpoint seen before the failover
is a prefix of the final log (consistency proofs, and the CLI's ``consistency``).

With synchronous replication (``synchronous_standby_names = '*'``) all of that holds: a commit
in the partition waits for the standby and dies with the primary, unacknowledged. With
asynchronous replication the same checks must find the loss: the partition's acknowledged
records are gone (or their seqs reused by later writes, a fork for anyone who saw them),
its seals are gone, and the checkpoints taken in it are not prefixes of the new log. That
half is the test that the test can fail. ``verify --all`` passes in both: the promoted
standby holds an earlier, self-consistent state; only what was saved outside the database
(checkpoints, acknowledgements) can tell.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
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
from agentplane_journal.migrations.commands import upgrade

from helpers import note
from pgcluster import Cluster
from pgtopology import dsn

pytestmark = pytest.mark.race

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


@dataclass
class Ledger:
    """What the writers were told, and when."""

    phase: str = "normal"
    batches: list[Batch] = field(default_factory=list)
    seals: dict[RunId, tuple[Digest, str]] = field(default_factory=dict)
    checkpoints: list[tuple[Checkpoint, str]] = field(default_factory=list)
    runs: set[RunId] = field(default_factory=set)


async def _retry(stop: asyncio.Event, call: Any) -> Any:
    """Retry through the failover (refused or unknown: both retryable for these calls)."""
    while True:
        try:
            return await call()
        except (BackendError, CommitUnknownError):
            if stop.is_set():
                return None
            await asyncio.sleep(0.02)


async def _claim(stop: asyncio.Event, store: SqlJournalStore, run: RunId, owner: str) -> Any:
    """``acquire`` through the failover. A claim whose COMMIT was lost may have landed;
    ``acquire`` never renews, so its retry is then refused naming this very owner (unique
    to this writer and run), and that refusal carries the epoch the lost answer held."""
    try:
        return await _retry(stop, lambda: store.acquire(run, owner, 600))
    except LeaseHeldError as held:
        if held.owner != owner:
            raise
        return Lease(run, owner, held.epoch)


async def _writer(i: int, store: SqlJournalStore, ledger: Ledger, stop: asyncio.Event) -> None:
    while not stop.is_set():
        run = RunId.generate()
        ledger.runs.add(run)
        lease = await _claim(stop, store, run, f"writer-{i}")
        if lease is None:
            return
        for b in range(3):
            texts = [f"{run}/{b}/{k}" for k in range(2)]
            phase = ledger.phase
            try:
                records = await store.append(lease.epoch, [note(run, t) for t in texts])
                ledger.batches.append(Batch(run, texts, phase, "acked", records))
            except CommitUnknownError:
                ledger.batches.append(Batch(run, texts, phase, "unknown"))
            except (BackendError, FencedError):
                ledger.batches.append(Batch(run, texts, phase, "refused"))
                await asyncio.sleep(0.02)
        phase = ledger.phase
        # A seal is idempotent (a re-seal returns the sealed head), so it is retried.
        head = await _retry(stop, lambda r=run, e=lease.epoch: store.seal(r, e, "succeeded"))
        if head is not None:
            ledger.seals[run] = (head, phase)


async def _reader(store: SqlJournalStore, ledger: Ledger, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            ledger.checkpoints.append((await store.checkpoint(), ledger.phase))
        except (BackendError, CommitUnknownError):
            pass
        await asyncio.sleep(0.02)


async def _sql(cluster: Cluster, *statements: str) -> Any:
    conn = await asyncpg.connect(dsn(cluster.url))
    try:
        result = None
        for statement in statements:
            result = await conn.fetchval(statement)
        return result
    finally:
        await conn.close()


async def _until(cluster: Cluster, query: str, what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not await _sql(cluster, query):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _problems(store: SqlJournalStore, ledger: Ledger, final: Checkpoint) -> list[str]:
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
        if phase not in ("normal", "partition"):
            continue
        proof = await store.consistency_proof(cp.size) if cp.size <= final.size else None
        if proof is None or not verify_consistency(cp.size, cp.root, final.size, final.root, proof):
            problems.append(f"checkpoint of size {cp.size} ({phase}) is not a prefix")
    return problems


@pytest.mark.parametrize("replication", ["synchronous", "asynchronous"])
async def test_a_failover_in_mid_traffic(replication: str, tmp_path: Any) -> None:
    synchronous = replication == "synchronous"
    # The primary commits durably on its own; synchronous mode also waits for the standby.
    primary = Cluster(options="-c synchronous_commit=on")
    standby: Cluster | None = None
    stores: list[SqlJournalStore] = []
    try:
        await upgrade(primary.url)
        standby = Cluster(replica_of=primary)
        if synchronous:
            # Set after the base backup, so the promoted standby does not wait for a standby.
            await _sql(
                primary,
                "ALTER SYSTEM SET synchronous_standby_names = '*'",
                "SELECT pg_reload_conf()",
            )
            await _until(
                primary,
                "SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
                "the standby to be synchronous",
            )
        url = (
            f"postgresql+asyncpg://postgres@/postgres?host=127.0.0.1:{primary.port}"
            f"&host=127.0.0.1:{standby.port}&target_session_attrs=read-write"
        )
        tenant = f"fo{uuid.uuid4().hex[:8]}"
        stores = [await SqlJournalStore.connect(url, tenant=tenant) for _ in range(WRITERS + 1)]
        ledger, stop = Ledger(), asyncio.Event()
        tasks = [
            asyncio.create_task(_writer(i, s, ledger, stop)) for i, s in enumerate(stores[:-1])
        ]
        tasks.append(asyncio.create_task(_reader(stores[-1], ledger, stop)))

        await asyncio.sleep(1.5)
        ledger.phase = "partition"
        await _sql(standby, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")
        await _until(primary, "SELECT count(*) = 0 FROM pg_stat_replication", "the partition")
        await asyncio.sleep(1.0)
        ledger.phase = "failover"
        # In threads, so the writers keep going (and failing, and retrying) meanwhile.
        await asyncio.to_thread(primary.pg_ctl, "-m", "immediate", "stop")
        await asyncio.to_thread(standby.pg_ctl, "promote", "-w", "-t", "60")
        ledger.phase = "after"
        await asyncio.sleep(1.5)
        stop.set()
        async with asyncio.timeout(90):
            await asyncio.gather(*tasks)

        acked = [b for b in ledger.batches if b.outcome == "acked"]
        for phase in ("normal", "after"):
            assert any(b.phase == phase for b in acked), f"no write was acknowledged {phase}"
        # the same store objects carried on: most writers wrote again after the failover
        assert len({b.run for b in acked if b.phase == "after"}) >= WRITERS // 2
        cps = [cp for cp, phase in ledger.checkpoints if phase == "partition"]
        assert cps, "the reader saw no checkpoint during the partition"

        async with await SqlJournalStore.connect(standby.url, tenant=tenant) as audit:
            final = await audit.checkpoint()
            problems = await _problems(audit, ledger, final)

        # The CLI an auditor runs: verify --all, and a saved checkpoint's consistency.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}
        base = ["--url", standby.url, "--tenant", tenant]

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*CLI, *args, *base], capture_output=True, text=True, env=env, timeout=60
            )

        verify_all = await asyncio.to_thread(cli, "verify", "--all")
        saved = tmp_path / "saved.note"
        saved.write_text(max(cps, key=lambda c: c.size).to_note())
        consistency = await asyncio.to_thread(cli, "consistency", f"@{saved}")
        outcomes = {o: sum(b.outcome == o for b in ledger.batches) for o in OUTCOMES}
        print(  # shown with -s: what the run did, and what the checks found
            f"{replication}: batches {outcomes}, seals {len(ledger.seals)}, "
            f"checkpoints {len(ledger.checkpoints)}, final log {final.size}, "
            f"problems {len(problems)}: {problems[:3]}"
        )
        # Both modes: what survived is a consistent state, which verify --all accepts.
        assert verify_all.returncode == 0, verify_all.stdout + verify_all.stderr
        if synchronous:
            assert problems == [], problems[:10]
            assert consistency.returncode == 0, consistency.stdout + consistency.stderr
        else:
            # The loss is found, by the writers' acknowledgements and by saved checkpoints.
            lost = [p for p in problems if p.startswith("acknowledged")]
            assert lost, "asynchronous replication lost nothing: the partition did not bite"
            assert any("is not a prefix" in p for p in problems), problems[:10]
            assert consistency.returncode == 1, consistency.stdout + consistency.stderr
            assert not any("half there" in p or "does not verify" in p for p in problems)
    finally:
        await asyncio.gather(*(s.close() for s in stores), return_exceptions=True)
        if standby is not None:
            standby.stop()
        primary.stop()
