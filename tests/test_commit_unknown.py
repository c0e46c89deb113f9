"""A connection lost during COMMIT is ``CommitUnknownError``, and it really is unknown.

The reproduction is PostgreSQL's own in-doubt window: with a synchronous standby named that
never connects, COMMIT writes its commit record locally and then waits for the standby. We
terminate the backend while it waits. The client loses the connection without an answer,
and yet the transaction *has* committed locally: exactly the case where reporting "rolled
back" would be a lie. (PostgreSQL only: SQLite has no connection to lose.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import Append, CommitUnknownError, RunId, SqlJournalStore

from support.databases import dsn
from support.helpers import note


@pytest.fixture
async def hanging_commits(pg_server: str) -> AsyncIterator[asyncpg.Connection]:
    """Make commits that ask for synchronous replication wait for a standby that never comes.

    Sessions at the cluster's default (``synchronous_commit=off``) are unaffected; only a
    transaction that sets ``synchronous_commit = on`` waits.
    """
    admin = await asyncpg.connect(dsn(pg_server))
    await admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    await admin.execute("SELECT pg_reload_conf()")
    try:
        yield admin
    finally:
        await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await admin.execute("SELECT pg_reload_conf()")
        await admin.close()


async def _terminate_when_waiting(admin: asyncpg.Connection, database: str) -> int:
    for _ in range(500):
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'SyncRep'",
            database,
        )
        if pid is not None:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
            return pid
        await asyncio.sleep(0.01)
    raise AssertionError("no backend ever waited in COMMIT for the standby")


async def test_a_connection_lost_during_commit_is_commit_unknown(
    hanging_commits: asyncpg.Connection, pg_database: object
) -> None:
    url = pg_database()  # type: ignore[operator]
    database = url.rsplit("/", 1)[1]
    store = await SqlJournalStore.connect(url, tenant=f"t{uuid.uuid4().hex[:8]}")
    try:
        run = RunId.generate()

        async def work(session: AsyncSession) -> list[Append]:
            await session.execute(text("SET LOCAL synchronous_commit = on"))
            return [note(run, "in doubt")]

        killer = asyncio.create_task(_terminate_when_waiting(hanging_commits, database))
        with pytest.raises(CommitUnknownError) as caught:
            await store.append_atomic(run, 1, work)
        await killer
        assert caught.value.__cause__ is not None
        assert "unknown" in str(caught.value)

        # The store keeps working on a fresh connection, and the "unknown" commit landed.
        records = await store.read(run)
        assert [r.body["text"] for r in records] == ["in doubt"]
        assert await store.append(1, [note(run, "after")])
        await store.verify(run)
    finally:
        await store.close()


async def test_a_commit_the_server_refuses_is_an_ordinary_error(pg_database: object) -> None:
    """A deferred constraint failing at COMMIT is an answer: rolled back, not unknown."""
    url = pg_database()  # type: ignore[operator]
    store = await SqlJournalStore.connect(url)
    try:
        async with store.engine.begin() as conn:
            await conn.execute(
                text(
                    "CREATE TABLE host_unique (k int, CONSTRAINT host_unique_k UNIQUE (k) "
                    "DEFERRABLE INITIALLY DEFERRED)"
                )
            )
        run = RunId.generate()

        async def work(session: AsyncSession) -> list[Append]:
            await session.execute(text("INSERT INTO host_unique VALUES (1), (1)"))
            return [note(run)]

        from agentplane_journal import BackendError

        with pytest.raises(BackendError) as caught:
            await store.append_atomic(run, 1, work)
        assert not isinstance(caught.value, CommitUnknownError)
        assert await store.read(run) == []
    finally:
        await store.close()


async def test_a_commit_that_outlives_command_timeout_is_commit_unknown_and_landed(
    hanging_commits: asyncpg.Connection, pg_database: object
) -> None:
    """asyncpg's ``command_timeout`` raises ``TimeoutError`` (an ``OSError``), not a driver
    error: it used to be reported as BackendError ("refused") although the COMMIT had been
    written locally, so a caller retrying on BackendError wrote twice."""
    url = pg_database()  # type: ignore[operator]
    store = await SqlJournalStore.connect(
        url,
        tenant=f"t{uuid.uuid4().hex[:8]}",
        engine_options={"connect_args": {"command_timeout": 1}},
    )
    try:
        run = RunId.generate()

        async def work(session: AsyncSession) -> list[Append]:
            await session.execute(text("SET LOCAL synchronous_commit = on"))
            return [note(run, "timed out in COMMIT")]

        with pytest.raises(CommitUnknownError) as caught:
            await store.append_atomic(run, 1, work)
        assert isinstance(caught.value.__cause__, TimeoutError)

        # asyncpg cancelled the wait for the standby; the commit was already local.
        await hanging_commits.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await hanging_commits.execute("SELECT pg_reload_conf()")
        records = await store.read(run)
        assert [r.body["text"] for r in records] == ["timed out in COMMIT"]
        assert await store.append(1, [note(run, "after")])
        await store.verify(run)
    finally:
        await store.close()
