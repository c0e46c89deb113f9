"""Behind PgBouncer in transaction-pooling mode: the store, the push store, the CLI, migrations.

A PgBouncer (``pool_mode = transaction``) is started on a loopback port in front of the
test cluster (``support/pgtopology.py``). With ``?pgbouncer=true`` on the URL the whole
behaviour battery of both stores and the contract's races run again through it: their
modules (test_store, test_push, test_races, test_push_races) are marked
``THROUGH_PGBOUNCER``, so each PostgreSQL case runs once more with ``via=pgbouncer``
(tests/conftest.py; the SQLite half has nothing to pool). Without the option the known trap
is shown to bite: asyncpg's cached, per-client statement names meet on a shared server
connection.

Skipped without ``pgbouncer`` on a developer's machine; a failure in CI (``CI`` set).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import text

from agentplane_journal import (
    HEAD_REVISION,
    BackendError,
    RunId,
    SqlJournalStore,
    SqlPushStore,
    pgbouncer_connect_args,
)
from agentplane_journal.db.engine import split_url
from agentplane_journal.migrations.commands import current_revision, upgrade

from support.databases import run_blocking
from support.helpers import admitted, note
from support.pgtopology import PgBouncer, need_pgbouncer

pytestmark = [pytest.mark.pgbouncer, pytest.mark.postgres]

CLI = [sys.executable, "-m", "agentplane_journal.cli.main"]


@pytest.fixture(scope="module")
def pg_battery_url(pg_database: Callable[..., str], pgbouncer: PgBouncer) -> str:
    """This module's shared database, reached through the pooler."""
    return pgbouncer.url(pg_database())


# -- the option itself ----------------------------------------------------------------


def test_the_url_option_is_removed_and_turns_on_pooler_safe_connections() -> None:
    url, options = split_url("postgresql+asyncpg://u@h:6432/db?pgbouncer=true&ssl=require")
    assert "pgbouncer" not in url.query and url.query["ssl"] == "require"
    args = options["connect_args"]
    assert args["statement_cache_size"] == 0 and args["prepared_statement_cache_size"] == 0
    names = {args["prepared_statement_name_func"]() for _ in range(100)}
    assert len(names) == 100, "statement names must be unique across clients"
    assert set(pgbouncer_connect_args()) == set(args)
    for off in ("false", "0", "off"):
        url, options = split_url(f"postgresql+asyncpg://u@h/db?pgbouncer={off}")
        assert options == {} and "pgbouncer" not in url.query


def test_the_url_option_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ValueError, match="true or false"):
        split_url("postgresql+asyncpg://u@h/db?pgbouncer=maybe")
    with pytest.raises(ValueError, match="postgresql"):
        split_url("sqlite+aiosqlite:///j.db?pgbouncer=true")


# -- the trap, and migrations and the CLI through the pooler ----------------------------


async def test_without_the_option_asyncpg_prepared_statements_break(
    pg_server: str, pg_database: Callable[..., str]
) -> None:
    """The reason for the option: a statement prepared (and cached) in one transaction is
    executed in a later one, which the pooler has put on another server connection."""
    need_pgbouncer()
    database = pg_database()
    pgbouncer = PgBouncer(pg_server, pool_size=2, round_robin=True)

    async def workload(url: str) -> tuple[list[BaseException], SqlJournalStore, RunId]:
        stores = [await SqlJournalStore.connect(url) for _ in range(8)]
        run = RunId.generate()

        async def write(store: SqlJournalStore, i: int) -> None:
            for j in range(10):
                await store.append(1, [note(run, f"{i}-{j}")])

        results = await asyncio.gather(
            *(write(s, i) for i, s in enumerate(stores)), return_exceptions=True
        )
        await asyncio.gather(*(s.close() for s in stores[1:]))
        return [r for r in results if isinstance(r, BaseException)], stores[0], run

    try:
        for _ in range(10):  # whether a transaction moves to another connection is timing
            errors, store, _ = await workload(pgbouncer.url(database, pgbouncer=False))
            await store.close()
            if errors:
                break
        assert errors, "the trap did not show: every transaction stayed on one connection"
        assert all(isinstance(e, BackendError) for e in errors), errors
        assert any("prepared statement" in str(e) for e in errors)

        # The same workload with the option: every append lands.
        errors, store, run = await workload(pgbouncer.url(database))
        try:
            assert errors == []
            assert len(await store.read(run)) == 80
            await store.verify(run)
        finally:
            await store.close()
    finally:
        pgbouncer.stop()


async def test_migrations_run_through_the_pooler(
    pg_database: Callable[..., str], pgbouncer: PgBouncer
) -> None:
    url = pgbouncer.url(pg_database(migrated=False))
    assert await current_revision(url) is None
    await upgrade(url)
    assert await current_revision(url) == HEAD_REVISION
    await upgrade(url)  # idempotent
    async with await SqlPushStore.connect(url) as push:
        assert await push.list(RunId.generate()) == []


def test_the_cli_runs_through_the_pooler(
    pg_database: Callable[..., str], pgbouncer: PgBouncer
) -> None:
    url = pgbouncer.url(pg_database(migrated=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, "--url", url], capture_output=True, text=True, env=env, timeout=60
        )

    assert cli("upgrade").returncode == 0
    run = RunId.generate()

    async def build() -> None:
        async with await SqlJournalStore.connect(url) as store:
            await store.append(1, [admitted(run), note(run, "through the pooler")])
            await store.seal(run, 1, "succeeded")

    run_blocking(build())
    for args in (("runs",), ("show", str(run)), ("verify", "--all"), ("checkpoint",)):
        result = cli(*args)
        assert result.returncode == 0, (args, result.stderr)
    assert "through the pooler" in cli("show", str(run)).stdout
    export = cli("export", "--format", "journal", "--all")
    assert export.returncode == 0 and str(run) in export.stdout


async def test_the_store_keeps_no_session_state(pg_battery_url: str) -> None:
    """Nothing of a session outlives a transaction: no advisory locks, no SET, no temp tables.

    Through the pooler each transaction may land on another server connection, so the store
    must not rely on any; after a workload the pooled server sessions hold none of it.
    """
    tenant = f"t{uuid.uuid4().hex[:10]}"
    async with await SqlJournalStore.connect(pg_battery_url, tenant=tenant) as store:
        run = RunId.generate()
        lease = await store.acquire(run, "owner", 60)
        await store.append(lease.epoch, [admitted(run), note(run)])
        await store.seal(run, lease.epoch, "succeeded")
        await store.checkpoint()
        async with store.engine.connect() as conn:
            locks = await conn.scalar(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            )
            changed = await conn.scalar(
                text(
                    "SELECT string_agg(name, ',') FROM pg_settings WHERE source = 'session' "
                    # the parameters PgBouncer itself keeps in step on every server connection
                    "AND name NOT IN ('client_encoding', 'DateStyle', 'TimeZone', "
                    "'standard_conforming_strings', 'application_name')"
                )
            )
            temp = await conn.scalar(
                text("SELECT count(*) FROM pg_class WHERE relpersistence = 't'")
            )
        assert (locks, changed, temp) == (0, None, 0)
