"""Reads from a replica: ``read_engine=`` / ``read_url=`` take the audit reads, never a writer's.

First on both dialects, with a "replica" that is plainly another database, so where each
call went is visible in its answer. Then (PostgreSQL) with a real streaming standby whose
replay is paused: its checkpoint is an older checkpoint of the same log, and the primary
proves it a prefix.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import Checkpoint, RunId, SqlJournalStore, verify_consistency
from agentplane_journal.migrations.commands import upgrade

from support.helpers import admitted, note
from support.pgcluster import Cluster
from support.pgtopology import dsn, wait_replayed

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CLI = [sys.executable, "-m", "agentplane_journal.cli.main"]
README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def two_databases(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> tuple[str, str]:
    if dialect == "sqlite":
        return sqlite_database(), sqlite_database()
    make: Callable[..., str] = request.getfixturevalue("pg_database")
    return make(), make()


async def test_audit_reads_go_to_the_read_engine_and_writer_reads_do_not(
    two_databases: tuple[str, str],
) -> None:
    primary_url, replica_url = two_databases
    store = await SqlJournalStore.connect(primary_url, read_url=replica_url)
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "owner", 60)
        await store.append(lease.epoch, [admitted(run), note(run)])
        await store.request_cancel(run, "operator", "enough")
        await store.seal(run, lease.epoch, "succeeded")
        # The writer's reads see the primary ...
        assert (await store.head(run)).seq == 2
        assert await store.cancellation(run) is not None
        # ... the audit reads see the "replica", which has none of it.
        assert await store.read(run) == []
        assert (await store.checkpoint()).size == 0
        assert await store.sealed_runs() == []
        assert await store.inclusion_proof(run) is None
        assert await store.runs_by_outcome("succeeded", 10) == []
        assert await store.recent_runs() == []
        assert await store.for_tenant("other").read(run) == []  # tenant handles share it
        assert not await store.reads_from_standby()  # another database, not a standby
    finally:
        await store.close()


def test_require_standby_refuses_a_checkpoint_no_standby_received(
    two_databases: tuple[str, str],
) -> None:
    """No standby (the test server has none; SQLite has no replication): ``replication``
    says the primary is the only copy, ``checkpoint --require-standby`` hands nothing out."""
    url = two_databases[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, "--url", url], capture_output=True, text=True, env=env, timeout=60
        )

    shown = json.loads(cli("replication", "--json").stdout)
    assert shown["standbys"] == [] and shown["safe"] is False
    refused = cli("checkpoint", "--require-standby", "0.2")
    assert refused.stdout == ""
    if shown["position"] is None:  # SQLite
        assert refused.returncode == 2 and "no standby" in refused.stderr
        assert "only copy" in shown["summary"]
    else:
        assert refused.returncode == 4, refused.stderr
        assert "no standby received this checkpoint" in refused.stderr


async def test_a_read_engine_must_be_an_engine_of_the_same_backend(
    sqlite_database: Callable[..., str],
) -> None:
    engine = create_async_engine(sqlite_database())
    try:
        with pytest.raises(TypeError, match="read_engine"):
            SqlJournalStore(engine, read_engine="sqlite+aiosqlite:///x.db")  # type: ignore[arg-type]
        other = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
        with pytest.raises(ValueError, match="replica of the same database"):
            SqlJournalStore(engine, read_engine=other)
        await other.dispose()
    finally:
        await engine.dispose()


async def test_closing_disposes_a_read_engine_the_store_opened_but_not_a_callers(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    callers: Any = create_async_engine(url)
    store = SqlJournalStore(create_async_engine(url), read_engine=callers)
    await store.read(RunId.generate())
    await store.close()
    assert await SqlJournalStore(callers).read(RunId.generate()) == []  # still usable
    await callers.dispose()


# -- a real streaming replica, paused behind the primary -------------------------------


async def _sql(cluster: Cluster, statement: str) -> Any:
    conn = await asyncpg.connect(dsn(cluster.url))
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


async def test_a_lagging_replica_answers_an_older_checkpoint_that_is_a_prefix(
    tmp_path: Path,
) -> None:
    primary = Cluster()
    standby: Cluster | None = None
    try:
        await upgrade(primary.url)
        standby = Cluster(replica_of=primary)
        tenant = f"rr{uuid.uuid4().hex[:8]}"
        store = await SqlJournalStore.connect(primary.url, read_url=standby.url, tenant=tenant)
        direct = await SqlJournalStore.connect(primary.url, tenant=tenant)
        auditor = await SqlJournalStore.connect(
            primary.url, read_url=standby.url, tenant=tenant, read_your_writes=False
        )
        try:

            async def seal_new_run() -> RunId:
                run = RunId.generate()
                lease = await store.acquire(run, "owner", 60)
                await store.append(lease.epoch, [admitted(run), note(run)])
                await store.seal(run, lease.epoch, "succeeded")
                return run

            for _ in range(3):
                await seal_new_run()
            await wait_replayed(primary, standby)
            assert await store.checkpoint() == await direct.checkpoint()
            assert await auditor.checkpoint() == await direct.checkpoint()

            # Replay stops; the primary moves on.
            await _sql(standby, "SELECT pg_wal_replay_pause()")
            assert await _sql(standby, "SELECT pg_get_wal_replay_pause_state()") != "not paused"
            later = [await seal_new_run() for _ in range(4)]  # writes go to the primary
            lagging = await auditor.checkpoint()  # from the replica
            current = await direct.checkpoint()
            assert (lagging.size, current.size) == (3, 7)
            assert lagging.origin == current.origin
            proof = await direct.consistency_proof(lagging.size)
            assert verify_consistency(lagging.size, lagging.root, current.size, current.root, proof)
            # The replica does not know the later runs yet: a pure audit reader
            # (read_your_writes=False) sees its state ...
            assert await auditor.inclusion_proof(later[0]) is None
            assert await auditor.read(later[0]) == []
            # ... the store that wrote them reads its own writes (from the primary, since
            # the replica has not replayed them).
            assert await store.checkpoint() == current
            inclusion = await store.inclusion_proof(later[-1])
            assert inclusion is not None and inclusion.verify(current.root)
            assert len(await store.read(later[0])) == 2
            await store.verify(later[0])
            assert (await store.head(later[0])).seq == 2

            # The README's first example, as written but for read_url= at the paused replica.
            example = re.search(
                r"## Using it\n\n(?:<!--[^>]*-->\n)?```python\n(.*?)```",
                README.read_text(encoding="utf-8"),
                re.S,
            )
            assert example is not None
            code = example.group(1)
            for was, now in (
                ('url = "sqlite+aiosqlite:///journal.db"', f"url = {primary.url!r}"),
                (
                    "SqlJournalStore.connect(url)",
                    f"SqlJournalStore.connect(url, read_url={standby.url!r})",
                ),
            ):
                assert was in code
                code = code.replace(was, now)
            ran = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=120,
            )
            assert ran.returncode == 0, ran.stderr
            assert ran.stdout.startswith("agentplane\n1\n")

            # The CLI: an audit on the replica, then the primary proves the saved note a prefix.
            env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}
            base = ["--url", primary.url, "--tenant", tenant]

            def cli(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [*CLI, *args, *base], capture_output=True, text=True, env=env, timeout=60
                )

            shown = await asyncio.to_thread(cli, "checkpoint", "--json", "--read-url", standby.url)
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["size"] == 3
            saved = tmp_path / "lagging.note"
            saved.write_text(lagging.to_note())
            proved = await asyncio.to_thread(cli, "consistency", f"@{saved}")
            assert proved.returncode == 0, proved.stdout + proved.stderr

            # The primary's newer checkpoint against the lagging standby: behind (exit 3),
            # never "truncated or rewritten"; the same with the standby as --read-url.
            assert await auditor.reads_from_standby() and not await direct.reads_from_standby()
            newer = tmp_path / "current.note"
            newer.write_text(current.to_note())
            for url, args in (
                (standby.url, ["consistency", f"@{newer}"]),
                (primary.url, ["consistency", f"@{newer}", "--read-url", standby.url]),
                (standby.url, ["prove", str(later[0]), "--checkpoint", f"@{newer}"]),
            ):
                behind = await asyncio.to_thread(
                    subprocess.run,
                    [*CLI, *args, "--url", url, "--tenant", tenant],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=60,
                )
                assert behind.returncode == 3, (args, behind.stdout, behind.stderr)
                assert "this server is behind (size 3 < 7)" in behind.stderr
                assert "truncated" not in behind.stdout + behind.stderr
            # The asynchronous window: the standby lacks 4 sealed runs (replay paused), and
            # a checkpoint is handed out once a standby has flushed it (flushing goes on).
            window = await asyncio.to_thread(
                cli, "replication", "--json", "--read-url", standby.url
            )
            assert window.returncode == 0, window.stderr
            shown_window = json.loads(window.stdout)
            assert shown_window["log"] == {
                "primary_size": 7,
                "standby_size": 3,
                "missing_seals": 4,
            }
            assert len(shown_window["standbys"]) == 1
            assert shown_window["standbys"][0]["unreplayed_bytes"] > 0
            required = await asyncio.to_thread(cli, "checkpoint", "--require-standby", "60")
            assert required.returncode == 0, required.stderr
            assert Checkpoint.from_note(required.stdout) == current

            # A primary whose log is smaller than a note: that is still tampering.
            bigger = Checkpoint(current.origin, 9, current.root)
            newer.write_text(bigger.to_note())
            tampered = await asyncio.to_thread(cli, "consistency", f"@{newer}")
            assert tampered.returncode == 1
            assert "truncated or rewritten" in tampered.stdout

            # Replay resumes: the replica catches up to the primary's checkpoint.
            await _sql(standby, "SELECT pg_wal_replay_resume()")
            await wait_replayed(primary, standby)
            assert await auditor.checkpoint() == current
        finally:
            await store.close()
            await direct.close()
            await auditor.close()
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()
