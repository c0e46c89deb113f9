"""Reads from a replica: ``read_engine=`` / ``read_url=`` take the audit reads, never a writer's.

First on both dialects, with a "replica" that is plainly another database, so where each
call went is visible in its answer. Then (PostgreSQL) with a real streaming standby whose
replay is paused: its checkpoint is an older checkpoint of the same log, and the primary
proves it a prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import RunId, SqlJournalStore

from helpers import admitted, note


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
    finally:
        await store.close()


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
