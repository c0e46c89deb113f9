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
import time
import uuid
from typing import Any

import asyncpg
import pytest

from agentplane_journal import SqlJournalStore
from agentplane_journal.migrations.commands import upgrade

from support.failover_ledger import (
    CLI,
    OUTCOMES,
    WRITERS,
    Ledger,
    find_problems,
    reader,
    until,
    until_checkpointed,
    until_every_writer_acked,
    writer,
    writers_acked,
)
from support.pgcluster import Cluster
from support.pgtopology import dsn

pytestmark = [pytest.mark.race, pytest.mark.postgres]


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
        tasks = [asyncio.create_task(writer(i, s, ledger, stop)) for i, s in enumerate(stores[:-1])]
        tasks.append(asyncio.create_task(reader(stores[-1], ledger, stop)))

        await until_every_writer_acked(ledger, "normal")
        ledger.phase = "partition"
        await _sql(standby, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")
        await _until(primary, "SELECT count(*) = 0 FROM pg_stat_replication", "the partition")
        await asyncio.sleep(1.0)  # writers try to commit; whatever they are told is checked
        await until_checkpointed(ledger, "partition")
        if not synchronous:  # something acknowledged that only the primary holds
            await until(
                ledger, "an ack in the partition", lambda led: writers_acked(led, "partition")
            )
        ledger.phase = "failover"
        # In threads, so the writers keep going (and failing, and retrying) meanwhile.
        await asyncio.to_thread(primary.pg_ctl, "-m", "immediate", "stop")
        await asyncio.to_thread(standby.pg_ctl, "promote", "-w", "-t", "60")
        ledger.phase = "after"
        await until_every_writer_acked(ledger, "after")  # the same store objects carried on
        stop.set()
        async with asyncio.timeout(90):
            await asyncio.gather(*tasks)

        cps = [cp for cp, phase in ledger.checkpoints if phase == "partition"]

        async with await SqlJournalStore.connect(standby.url, tenant=tenant) as audit:
            final = await audit.checkpoint()
            problems = await find_problems(audit, ledger, final)

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
