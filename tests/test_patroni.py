"""Automatic failover and a planned switchover under Patroni, with 16 writers and a sealer.

Patroni (``tests/support/patroni.py``: etcd and two nodes on loopback ports, ``synchronous_mode``
on, ``ttl`` 8 s) decides who leads; the stores reach the leader by the multi-host URL with
``target_session_attrs=read-write`` and are never re-pointed or restarted. The writers,
the checkpoint reader and the audit are ``failover_ledger.py``'s, shared with
``test_failover.py`` (where the standby is promoted by hand).

* **failover**: once every writer has been acknowledged, the leader's walsender is frozen
  (``SIGSTOP``), so nothing the leader writes now reaches the standby (a partition); a
  second later, once the reader has saved a checkpoint in the partition, the leader node
  dies (``SIGKILL`` to Patroni, the postmaster and every backend) and Patroni promotes the
  synchronous standby once the leader key expires. With ``synchronous_mode`` a commit in the
  partition waits for the standby and dies unacknowledged: nothing acknowledged is lost,
  nothing forks, every checkpoint saved before the crash is a prefix of the new leader's
  log, and every writer writes again on the same store object.
* **switchover**: ``patronictl switchover`` moves the leader in mid-traffic (the old leader
  shuts down cleanly and follows the new one); the same holds. Once more with the stores on
  one address, HAProxy's (``tests/support/haproxy.py``), which routes by Patroni's ``/primary``
  health check and cuts the sessions it holds to a node that stops leading.

Each is shown able to fail by a deliberately broken setting: a parameter, skipped unless
``AGENTPLANE_JOURNAL_TEST_PATRONI_RED=1``, that runs the same assertions and must go red. The
failover with ``synchronous_mode: false`` (and ``maximum_lag_on_failover`` large enough that
Patroni promotes the cut-off standby) loses the partition's acknowledged records; the
switchover with a URL naming the old leader's host alone leaves every writer refused by the
demoted leader, never resuming.

All share one synchronous cluster (its start is most of the cost): the switchovers first,
which leave two healthy nodes, then the failover, which leaves one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
from support.haproxy import HAProxy
from support.patroni import Node, PatroniCluster
from support.pgtopology import dsn

pytestmark = [pytest.mark.race, pytest.mark.postgres, pytest.mark.patroni, pytest.mark.slow]

RED = os.environ.get("AGENTPLANE_JOURNAL_TEST_PATRONI_RED") == "1"
red = pytest.mark.skipif(
    not RED, reason="the deliberately broken setting: AGENTPLANE_JOURNAL_TEST_PATRONI_RED=1"
)


async def _walsenders(url: str) -> list[int]:
    conn = await asyncpg.connect(dsn(url))
    try:
        return [r["pid"] for r in await conn.fetch("SELECT pid FROM pg_stat_replication")]
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def patroni() -> Iterator[PatroniCluster]:
    """The synchronous cluster both tests share, migrated: the switchover runs first (it
    leaves two healthy nodes), the failover last (it leaves one)."""
    cluster = PatroniCluster()
    try:
        leader = cluster.leader()
        assert leader is not None
        # in a thread of its own: the failover test may ask for this inside its event loop
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, upgrade(cluster.node_url(leader))).result()
        yield cluster
    finally:
        cluster.stop()


def _leader_only(cluster: PatroniCluster, leader: Node) -> str:
    """The broken URL: the leader's host alone, as if no failover could ever move it."""
    return cluster.node_url(leader)


class Clock:
    """Seconds since the test began, printed with each step (shown with ``-s``)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, step: str) -> None:
        print(f"{time.monotonic() - self.start:6.1f}s {step}")


class Traffic:
    """16 writers and a checkpoint reader on their own stores, all on one URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tenant = f"pa{uuid.uuid4().hex[:8]}"
        self.stores: list[SqlJournalStore] = []
        self.ledger, self.stop = Ledger(), asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for _ in range(WRITERS + 1):
            self.stores.append(await SqlJournalStore.connect(self.url, tenant=self.tenant))
        self.tasks = [
            asyncio.create_task(writer(i, s, self.ledger, self.stop))
            for i, s in enumerate(self.stores[:-1])
        ]
        self.tasks.append(asyncio.create_task(reader(self.stores[-1], self.ledger, self.stop)))

    async def finish(self) -> None:
        self.stop.set()
        async with asyncio.timeout(90):
            await asyncio.gather(*self.tasks)

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.stores), return_exceptions=True)

    async def audit(
        self, leader_url: str, checked: tuple[str, ...], tmp_path: Path
    ) -> tuple[list[str], subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        """The ledger against the new leader; the CLI's ``verify --all`` and ``consistency``
        with the largest checkpoint saved in a ``checked`` phase."""
        async with await SqlJournalStore.connect(leader_url, tenant=self.tenant) as store:
            final = await store.checkpoint()
            problems = await find_problems(store, self.ledger, final, checked)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}
        base = ["--url", leader_url, "--tenant", self.tenant]

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*CLI, *args, *base], capture_output=True, text=True, env=env, timeout=60
            )

        cps = [cp for cp, phase in self.ledger.checkpoints if phase in checked]
        saved = tmp_path / "saved.note"
        saved.write_text(max(cps, key=lambda c: c.size).to_note())
        verify_all, consistency = await asyncio.gather(
            asyncio.to_thread(cli, "verify", "--all"),
            asyncio.to_thread(cli, "consistency", f"@{saved}"),
        )
        outcomes = {
            phase: {o: n for o in OUTCOMES if (n := sum(b.outcome == o for b in batches))}
            for phase in dict.fromkeys(b.phase for b in self.ledger.batches)
            if (batches := [b for b in self.ledger.batches if b.phase == phase])
        }
        print(  # shown with -s: what the run did, and what the checks found
            f"batches {outcomes}, seals {len(self.ledger.seals)}, "
            f"checkpoints {len(self.ledger.checkpoints)}, final log {final.size}, "
            f"resumed writers {writers_acked(self.ledger, 'after')}, "
            f"problems {len(problems)}: {problems[:3]}"
        )
        return problems, verify_all, consistency


@pytest.mark.parametrize(
    "hosts", ["every node", "through HAProxy", pytest.param("the leader only", marks=red)]
)
async def test_a_patroni_switchover_in_mid_traffic_loses_nothing_and_writers_follow(
    hosts: str, patroni: PatroniCluster, tmp_path: Path
) -> None:
    clock, cluster = Clock(), patroni
    await asyncio.to_thread(cluster.wait_healthy)
    old = cluster.leader()
    assert old is not None
    candidate = next(n for n in cluster.nodes if n is not old)
    proxy = HAProxy(cluster, tmp_path) if hosts == "through HAProxy" else None
    if proxy is not None:
        url = proxy.url()  # one address; Patroni's /primary check picks the node
    elif hosts == "every node":
        url = cluster.url()
    else:
        url = _leader_only(cluster, old)
    traffic = Traffic(url)
    try:
        await traffic.start()
        clock("traffic started")
        await until_every_writer_acked(traffic.ledger, "normal")

        traffic.ledger.phase = "switchover"
        done = await asyncio.to_thread(cluster.switchover, old, candidate)
        assert done.returncode == 0, done.stdout + done.stderr
        new = await asyncio.to_thread(cluster.wait_new_leader, old)
        clock(f"{new.name} leads")
        assert new is candidate
        traffic.ledger.phase = "after"
        await until_every_writer_acked(traffic.ledger, "after")
        await traffic.finish()
        clock("traffic finished")

        problems, verify_all, consistency = await traffic.audit(
            cluster.node_url(new), ("normal", "switchover", "after"), tmp_path
        )
        clock("audited")
        assert problems == [], problems[:10]
        assert verify_all.returncode == 0, verify_all.stdout + verify_all.stderr
        assert consistency.returncode == 0, consistency.stdout + consistency.stderr
    finally:
        await traffic.close()
        if proxy is not None:
            proxy.stop()


@pytest.mark.parametrize("replication", ["synchronous", pytest.param("asynchronous", marks=red)])
async def test_patroni_fails_over_a_dead_leader_and_nothing_acknowledged_is_lost(
    replication: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    clock = Clock()
    own: PatroniCluster | None = None
    if replication == "synchronous":
        cluster: PatroniCluster = request.getfixturevalue("patroni")
    else:  # the broken setting, and its accomplice: promote however far behind
        cluster = own = await asyncio.to_thread(
            PatroniCluster, synchronous=False, maximum_lag_on_failover=1 << 40
        )
    traffic: Traffic | None = None
    try:
        await asyncio.to_thread(cluster.wait_healthy)
        old = cluster.leader()
        assert old is not None
        if own is not None:
            await upgrade(cluster.node_url(old))
        traffic = Traffic(cluster.url())
        await traffic.start()
        clock("traffic started")
        await until_every_writer_acked(traffic.ledger, "normal")

        # The partition: the leader's walsender stops sending (the standby stays connected,
        # so Patroni still counts it as the synchronous standby).
        frozen = await _walsenders(cluster.node_url(old))
        assert frozen, "no walsender on the leader"
        traffic.ledger.phase = "partition"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(1.0)  # writers try to commit; whatever they are told is checked
        await until_checkpointed(traffic.ledger, "partition")
        if own is not None:  # the broken setting: something acknowledged only the leader holds
            await until(
                traffic.ledger,
                "an ack in the partition",
                lambda led: writers_acked(led, "partition"),
            )

        traffic.ledger.phase = "failover"
        await asyncio.to_thread(cluster.crash, old)
        new = await asyncio.to_thread(cluster.wait_new_leader, old)
        clock(f"{new.name} leads")
        traffic.ledger.phase = "after"
        await until_every_writer_acked(traffic.ledger, "after")
        await traffic.finish()
        clock("traffic finished")

        problems, verify_all, consistency = await traffic.audit(
            cluster.node_url(new), ("normal", "partition"), tmp_path
        )
        clock("audited")
        assert problems == [], problems[:10]
        assert verify_all.returncode == 0, verify_all.stdout + verify_all.stderr
        assert consistency.returncode == 0, consistency.stdout + consistency.stderr
    finally:
        if traffic is not None:
            await traffic.close()
        if own is not None:
            await asyncio.to_thread(own.stop)
