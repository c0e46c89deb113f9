"""A multi-worker app's first boot: N processes run ``upgrade`` on one fresh database at once.

Every guide runs ``await upgrade(url)`` at start-up, so the workers of a web app (or the
replicas of a deployment) migrate the same empty database together. The migration takes a
lock first (PostgreSQL: ``pg_advisory_xact_lock``; SQLite: ``BEGIN IMMEDIATE``), so one
process migrates and the others, once it commits, find the schema at head and do nothing.

Operating-system processes, not tasks: separate interpreters, separate connections, the
way workers boot. Half run the Python API, half the command line. Seen red with the lock
taken out of ``Dialect.begin_migration``: 4 and 6 of 8 PostgreSQL processes crashed in two
trials (``pg_type_typname_nsp_index``, ``relation ... already exists``), 5 and 3 of 8 on
SQLite (``table log_tree already exists``).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import SqlJournalStore
from agentplane_journal.adapters.openai_agents import JournalSession
from agentplane_journal.adapters.pydantic_ai import JournalConversationStore
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.langgraph import JournalSaver
from agentplane_journal.migrations.commands import current_revision, upgrade

REPO = Path(__file__).resolve().parent.parent
PROCESSES = 8

# Each process imports everything first, then waits for the same instant, so the
# migrations themselves overlap (an interpreter's start-up takes longer than the race).
_API = """
import asyncio, sys, time
from agentplane_journal.migrations.commands import upgrade
go = float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))
asyncio.run(upgrade(sys.argv[1]))
"""
_CLI = """
import sys, time
from agentplane_journal.cli import main as cli
cli._load()
go = float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))
sys.exit(cli.main(["upgrade", "--url", sys.argv[1]]))
"""


@pytest.fixture
def fresh(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> Callable[[], str]:
    """``fresh()`` -> the URL of a new, never-migrated database of this test's dialect."""
    if dialect == "sqlite":
        return lambda: sqlite_database(migrated=False)
    make = request.getfixturevalue("pg_database")
    return lambda: str(make(migrated=False))


@pytest.fixture
def fresh_url(fresh: Callable[[], str]) -> str:
    return fresh()


def race_upgrades(url: str, processes: int = PROCESSES) -> list[subprocess.CompletedProcess[str]]:
    """Start ``processes`` upgrades of ``url`` that begin migrating at the same instant."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    go = time.time() + 4.0  # time enough for every interpreter to import the package
    started = [
        subprocess.Popen(
            [sys.executable, "-c", _API if i % 2 else _CLI, url, repr(go)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    done = []
    for proc in started:
        out, err = proc.communicate(timeout=180)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.slow
async def test_eight_processes_upgrading_one_fresh_database_at_once_all_succeed(
    fresh_url: str,
) -> None:
    results = race_upgrades(fresh_url)

    failed = [r for r in results if r.returncode != 0]
    assert not failed, "\n---\n".join(r.stderr[-2000:] for r in failed)
    assert await current_revision(fresh_url) == HEAD_REVISION
    said = [r.stdout for r in results if "upgraded from" in r.stdout or "already at" in r.stdout]
    assert len(said) == PROCESSES // 2  # every command-line worker said what it found


# -- setup(), for users who expect LangGraph's start-up call ----------------------------------


async def test_the_savers_setup_migrates_a_fresh_database_and_again_does_nothing(
    fresh_url: str,
) -> None:
    async with JournalSaver.from_url(fresh_url) as saver:
        await saver.setup()
        await saver.setup()  # a second worker's: at head, nothing to do
        assert await current_revision(fresh_url) == HEAD_REVISION
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None


async def test_the_session_adapters_setup_migrates_a_fresh_database(
    fresh: Callable[[], str],
) -> None:
    for adapter in ("openai-agents", "pydantic-ai"):
        url = fresh()
        # connect() refuses an unmigrated database at once, unless told to check it later.
        store = await SqlJournalStore.connect(url, check_at_open=False)
        try:
            if adapter == "openai-agents":
                session = JournalSession(store, "s1")
                await session.setup()
                await session.add_items([{"role": "user", "content": "hello"}])
                assert len(await session.get_items()) == 1
            else:
                conversations = JournalConversationStore(store)
                await conversations.setup()
                assert await conversations.read_record("c1") is None
            assert await current_revision(url) == HEAD_REVISION
        finally:
            await store.close()


async def test_a_fresh_sqlite_file_written_by_another_connection_is_waited_for(
    tmp_path: Path,
) -> None:
    """The first boot's race, made certain: SQLite refuses ``PRAGMA journal_mode=WAL`` at once
    ("database is locked", no busy handler) while another connection holds the write lock of
    a file still in rollback mode; the connection's start waits and retries instead (CI saw
    one of eight upgrading processes fail there; red before the retry, at once)."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE IF NOT EXISTS other_app (x)")  # a file in rollback mode
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO other_app VALUES (1)")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        started = time.monotonic()
        await upgrade(f"sqlite+aiosqlite:///{path}")
        assert time.monotonic() - started >= 0.4  # it waited for the holder's COMMIT
    finally:
        release.join()
        holder.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        check.close()
    assert await current_revision(f"sqlite+aiosqlite:///{path}") == HEAD_REVISION
