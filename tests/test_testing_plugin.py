"""``agentplane_journal.testing``: the fixture a host's own suite uses, run as a host would.

A host's test suite (its conftest naming the plugin, a test that appends and reads back) is
written to a temporary directory and run by pytest in a subprocess: on SQLite by default,
and on PostgreSQL when ``AGENTPLANE_JOURNAL_TEST_URL`` names a server; each test gets its
own database, and the PostgreSQL one is dropped afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.migration_tools import query

pytestmark = pytest.mark.slow

HOST_CONFTEST = 'pytest_plugins = ["agentplane_journal.testing"]\n'

HOST_TEST = """
import asyncio

from agentplane_journal import Append, RunId, SqlJournalStore


async def _round_trip(url: str) -> int:
    store = await SqlJournalStore.connect(url)
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "test", 30)
        await store.append(lease.epoch, [Append(run, "Note", {"text": "hello"})])
        return len(await store.read(run))
    finally:
        await store.close()


def test_a_fresh_journal(journal_database: str) -> None:
    print("URL", journal_database)
    assert asyncio.run(_round_trip(journal_database)) == 1


def test_another_fresh_journal(journal_database: str) -> None:
    assert asyncio.run(_round_trip(journal_database)) == 1
"""


def _host_suite(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "host_tests"
    suite.mkdir()
    (suite / "conftest.py").write_text(HOST_CONFTEST)
    (suite / "test_journal.py").write_text(HOST_TEST)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(suite)],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_fixture_gives_a_host_suite_a_migrated_sqlite_journal(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTPLANE_JOURNAL_TEST_URL"}
    result = _host_suite(tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout and "URL sqlite+aiosqlite:///" in result.stdout


@pytest.mark.postgres
async def test_the_fixture_gives_a_host_suite_a_postgresql_journal_and_drops_it(
    tmp_path: Path, pg_database: Callable[..., str]
) -> None:
    server = pg_database(migrated=False)
    env = {**os.environ, "AGENTPLANE_JOURNAL_TEST_URL": server}
    result = _host_suite(tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout and "URL postgresql+asyncpg://" in result.stdout
    left = await query(
        server, "SELECT datname FROM pg_database WHERE datname LIKE 'journal_test_%'"
    )
    assert left == []
