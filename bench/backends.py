"""The databases a benchmark runs on: a fresh SQLite file, then PostgreSQL.

PostgreSQL is ``--pg-url`` / ``AGENTPLANE_JOURNAL_BENCH_PG_URL`` if given, else a throwaway
cluster started here (``tests/support/pgcluster.py``) **with the settings users run**: ``fsync``,
``synchronous_commit`` and ``full_page_writes`` on, so every commit waits for its WAL flush.
(The test suite's cluster turns all three off; figures measured on it would describe a
database nobody runs.) Each backend reports the durability settings it actually has, read
from the server or the connection, so the output says what was measured. Both databases are
migrated before the benchmark runs.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agentplane_journal.migrations.commands import upgrade


@dataclass(frozen=True)
class Backend:
    """One migrated database: its store URL and what the bare driver connects to."""

    name: str
    url: str
    driver_target: str  # a file path for aiosqlite, a DSN for asyncpg
    settings: str  # the durability settings in force, as the database reports them
    scratch: str  # a directory for other libraries' files (SQLite) or ""


@asynccontextmanager
async def sqlite_backend() -> AsyncIterator[Backend]:
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/bench.db"
        url = f"sqlite+aiosqlite:///{path}"
        await upgrade(url)
        yield Backend("sqlite", url, path, f"SQLite {sqlite3.sqlite_version}", tmp)


async def _pg_settings(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        names = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")
        values = [f"{n}={await conn.fetchval(f'SHOW {n}')}" for n in names]
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return f"PostgreSQL {version.split()[0]}: " + ", ".join(values)


@asynccontextmanager
async def postgres_backend(url: str | None) -> AsyncIterator[Backend]:
    cluster = None
    if url is None:
        from support.pgcluster import Cluster

        cluster = Cluster(durable=True)
        url = cluster.url
    try:
        await upgrade(url)
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        yield Backend("postgresql", url, dsn, await _pg_settings(dsn), "")
    finally:
        if cluster is not None:
            cluster.stop()
