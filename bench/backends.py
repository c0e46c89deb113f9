"""The databases a benchmark runs on: a fresh SQLite file, then PostgreSQL.

PostgreSQL is ``--pg-url`` / ``AGENTPLANE_JOURNAL_BENCH_PG_URL`` if given, else a throwaway
cluster started here (``tests/pgcluster.py``). Both are migrated before the benchmark runs.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agentplane_journal.migrate import upgrade


@dataclass(frozen=True)
class Backend:
    """One migrated database: its store URL and what the bare driver connects to."""

    name: str
    url: str
    driver_target: str  # a file path for aiosqlite, a DSN for asyncpg


@asynccontextmanager
async def sqlite_backend() -> AsyncIterator[Backend]:
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/bench.db"
        url = f"sqlite+aiosqlite:///{path}"
        await upgrade(url)
        yield Backend("sqlite", url, path)


@asynccontextmanager
async def postgres_backend(url: str | None) -> AsyncIterator[Backend]:
    cluster = None
    if url is None:
        from pgcluster import Cluster

        cluster = Cluster()
        url = cluster.url
    try:
        await upgrade(url)
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        yield Backend("postgresql", url, dsn)
    finally:
        if cluster is not None:
            cluster.stop()
