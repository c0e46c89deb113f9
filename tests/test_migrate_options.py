"""Where the tables go, what an upgrade refuses, and the DDL a DBA reviews.

* A PostgreSQL schema of the journal's own (``schema=`` / ``--schema``): migrations (version
  table included), the journal store, the push store and the command line all work there,
  and the default schema is left untouched. SQLite refuses a schema.
* A host table with one of our names is refused before anything is created, naming it.
* ``agentplane-journal upgrade --sql`` prints the DDL for both dialects, connecting nowhere.
* ``upgrade_connection`` on a connection inside a transaction refuses, unless told the
  caller will commit (``join_transaction=True``), and then goes with that transaction.
* The library takes the CLI's URLs (``postgresql://``, ``postgres://``, ``sqlite://``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Text, pool
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentplane_journal import (
    PushConfig,
    RunId,
    SchemaConflictError,
    SchemaOutOfDateError,
    SqlJournalStore,
    SqlPushStore,
)
from agentplane_journal.db.engine import async_url
from agentplane_journal.db.models import TABLE_NAMES, VERSION_TABLE
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import (
    current_revision,
    downgrade_connection,
    upgrade,
    upgrade_connection,
)

from support.helpers import admitted, concluded
from support.migration_tools import catalog, execute, query, table_names

SCHEMA = "agent_journal"
PREVIOUS = "0001_journal_schema"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentplane_journal", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def acli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args)


async def tables_in(url: str, schema: str) -> set[str]:
    rows = await query(
        url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = :s",
        s=schema,
    )
    return {r[0] for r in rows}


async def sequences_in(url: str, schema: str) -> set[str]:
    rows = await query(url, "SELECT sequencename FROM pg_sequences WHERE schemaname = :s", s=schema)
    return {r[0] for r in rows}


@pytest.fixture
def pg_url(pg_database: Callable[..., str]) -> str:
    return pg_database(migrated=False)


@pytest.fixture
def url(dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]) -> str:
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


# -- a schema of its own ------------------------------------------------------------------


@pytest.mark.postgres
async def test_the_journal_in_its_own_schema_leaves_the_default_schema_untouched(
    pg_url: str,
) -> None:
    await execute(pg_url, "CREATE TABLE journal (id integer PRIMARY KEY, title text)")
    await upgrade(pg_url, schema=SCHEMA)

    assert await tables_in(pg_url, SCHEMA) == set(TABLE_NAMES)
    assert await sequences_in(pg_url, SCHEMA) == {"run_log_position", "run_conclusion_ordinal"}
    assert await tables_in(pg_url, "public") == {"journal"}  # the host's own, untouched
    assert await sequences_in(pg_url, "public") == set()
    assert await current_revision(pg_url, schema=SCHEMA) == HEAD_REVISION
    assert await current_revision(pg_url) is None
    with pytest.raises(SchemaOutOfDateError):
        await SqlJournalStore.connect(pg_url)  # the default layout has no journal

    store = await SqlJournalStore.connect(pg_url, schema=SCHEMA, tenant="acme")
    try:
        assert store.schema == SCHEMA
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)
        await store.append(lease.epoch, [admitted(run), concluded(run, "succeeded")])
        head = await store.seal(run, lease.epoch, "succeeded")
        assert await store.verify(run) == head
        assert await store.runs_by_outcome("succeeded", 10) == [run]  # the sequence, there
        checkpoint = await store.checkpoint()
        proof = await store.inclusion_proof(run)
        assert proof is not None and proof.verify(checkpoint.root)
        assert await store.request_cancel(run, "ops", "stop")
    finally:
        await store.close()

    push = await SqlPushStore.connect(pg_url, schema=SCHEMA, tenant="acme")
    try:
        await push.put(PushConfig("cfg-1", run, "https://hooks.example/a"), next_seq=1)
        await push.advance(run, "cfg-1", 3)
        [due] = await push.due(at=2**40, limit=10)
        assert due.next_seq == 3
    finally:
        await push.close()

    rows = await query(pg_url, f"SELECT count(*) FROM {SCHEMA}.journal WHERE tenant = 'acme'")
    assert rows == [(2,)]
    assert await query(pg_url, f"SELECT version_num FROM {SCHEMA}.{VERSION_TABLE}") == [
        (HEAD_REVISION,)
    ]
    assert await tables_in(pg_url, "public") == {"journal"}

    # The stored tree dropped and rebuilt from the schema's run_seal (0002's data migration).
    engine = create_async_engine(pg_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: downgrade_connection(c, PREVIOUS, schema=SCHEMA))
    finally:
        await engine.dispose()
    assert "log_tree" not in await tables_in(pg_url, SCHEMA)
    await upgrade(pg_url, schema=SCHEMA)
    store = await SqlJournalStore.connect(pg_url, schema=SCHEMA, tenant="acme")
    try:
        assert await store.checkpoint() == checkpoint
        again = await store.inclusion_proof(run)
        assert again is not None and again.verify(checkpoint.root)
    finally:
        await store.close()

    # Down and up again, inside the schema only.
    engine = create_async_engine(pg_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            with pytest.raises(ValueError, match="the journal holds records"):
                await conn.run_sync(lambda c: downgrade_connection(c, "base", schema=SCHEMA))
        assert "journal" in await tables_in(pg_url, SCHEMA)
        async with engine.connect() as conn:
            await conn.run_sync(
                lambda c: downgrade_connection(c, "base", schema=SCHEMA, drop_records=True)
            )
    finally:
        await engine.dispose()
    assert await tables_in(pg_url, SCHEMA) == {VERSION_TABLE}
    assert await sequences_in(pg_url, SCHEMA) == set()
    await upgrade(pg_url, schema=SCHEMA)
    assert await tables_in(pg_url, SCHEMA) == set(TABLE_NAMES)
    assert await tables_in(pg_url, "public") == {"journal"}


class _Host(DeclarativeBase):
    pass


class _Order(_Host):
    """A host's own model: schema-less, so it lives in the host's default schema."""

    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(Text)


@pytest.mark.postgres
async def test_host_rows_stay_in_the_hosts_schema_beside_a_journal_in_its_own(
    pg_url: str,
) -> None:
    """append_atomic's work and session= write the host's rows where its models say."""
    await upgrade(pg_url, schema=SCHEMA)
    await execute(pg_url, "CREATE TABLE orders (id integer PRIMARY KEY, run_id text NOT NULL)")
    engine = create_async_engine(pg_url)
    try:
        store = SqlJournalStore(engine, schema=SCHEMA)
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)

        async def work(session: AsyncSession) -> list[Any]:
            session.add(_Order(id=1, run_id=str(run)))
            return [admitted(run)]

        await store.append_atomic(run, lease.epoch, work)

        async with AsyncSession(engine) as session:
            session.add(_Order(id=2, run_id=str(run)))  # pending when the store's call runs
            await store.append(lease.epoch, [concluded(run, "succeeded")], session=session)
            session.add(_Order(id=3, run_id=str(run)))
            await session.commit()
        async with AsyncSession(engine) as session:
            session.add(_Order(id=4, run_id=str(run)))
            await store.append(lease.epoch, [concluded(run, "failed")], session=session)
            await session.rollback()  # neither the order nor the record
        assert (await store.head(run)).seq == 2
    finally:
        await engine.dispose()
    assert await query(pg_url, "SELECT id FROM public.orders ORDER BY id") == [(1,), (2,), (3,)]
    assert await tables_in(pg_url, SCHEMA) == set(TABLE_NAMES)
    assert await query(pg_url, f"SELECT count(*) FROM {SCHEMA}.journal") == [(2,)]


@pytest.mark.postgres
async def test_the_command_line_works_in_the_schema(pg_url: str) -> None:
    said = await acli("upgrade", "--url", pg_url, "--schema", SCHEMA)
    assert said.returncode == 0 and f"revision {HEAD_REVISION}" in said.stdout, said.stderr
    assert await tables_in(pg_url, "public") == set()
    store = await SqlJournalStore.connect(pg_url, schema=SCHEMA)
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)
        await store.append(lease.epoch, [admitted(run), concluded(run, "failed")])
        await store.seal(run, lease.epoch, "failed")
    finally:
        await store.close()
    for args in (("runs",), ("show", str(run)), ("verify", "--all"), ("checkpoint",)):
        result = await acli(*args, "--url", pg_url, "--schema", SCHEMA)
        assert result.returncode == 0, (args, result.stderr)
    assert str(run) in (await acli("runs", "--url", pg_url, "--schema", SCHEMA)).stdout
    # Without --schema the command looks in the default schema, finds no journal there, and
    # names the schema that has one (not "run upgrade": that would make a second, empty one).
    missing = await acli("runs", "--url", pg_url)
    assert missing.returncode == 2 and f"pass `--schema {SCHEMA}`" in missing.stderr
    assert "upgrade` here would create a second, empty journal" in missing.stderr
    with pytest.raises(SchemaOutOfDateError, match=f"schema={SCHEMA!r}") as caught:
        await SqlJournalStore.connect(pg_url)
    assert caught.value.elsewhere == [SCHEMA]
    bad = await acli("runs", "--url", pg_url, "--schema", "Robert'); DROP")
    assert bad.returncode == 2 and "not a plain PostgreSQL schema name" in bad.stderr


async def test_sqlite_refuses_a_schema_before_touching_anything(
    sqlite_database: Callable[..., str], tmp_path: Path
) -> None:
    url = sqlite_database(migrated=False)
    with pytest.raises(ValueError, match="sqlite has no schemas"):
        await upgrade(url, schema=SCHEMA)
    assert await table_names(url) == set()
    engine = create_async_engine(sqlite_database())
    try:
        with pytest.raises(ValueError, match="sqlite has no schemas"):
            SqlJournalStore(engine, schema=SCHEMA)
        with pytest.raises(ValueError, match="sqlite has no schemas"):
            SqlPushStore(engine, schema=SCHEMA)
    finally:
        await engine.dispose()
    result = await acli("upgrade", "--url", url, "--schema", SCHEMA)
    assert result.returncode == 2 and "sqlite has no schemas" in result.stderr


# -- name collisions ------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_host_table_with_one_of_our_names_is_refused_before_anything_is_created(
    url: str,
) -> None:
    await execute(url, "CREATE TABLE run_lease (id integer PRIMARY KEY, holder text)")
    before = await table_names(url)

    with pytest.raises(SchemaConflictError) as caught:
        await upgrade(url)
    err = caught.value
    assert err.table == "run_lease" and err.columns == ["id", "holder"]
    assert "'run_lease' already exists" in str(err) and "nothing was created" in str(err)
    assert await table_names(url) == before  # no journal tables, no version table

    result = await acli("upgrade", "--url", url)
    assert result.returncode == 2 and "'run_lease' already exists" in result.stderr
    assert await table_names(url) == before


# -- the DDL for review -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_cli_upgrade_sql_prints_the_ddl_and_connects_nowhere(dialect: str, tmp_path: Path) -> None:
    url = (
        f"sqlite:///{tmp_path / 'never.db'}"
        if dialect == "sqlite"
        else "postgresql://nobody@127.0.0.1:1/nowhere"
    )
    result = cli("upgrade", "--sql", "--url", url)
    assert result.returncode == 0, result.stderr
    sql = result.stdout
    assert f"CREATE TABLE {VERSION_TABLE}" in sql
    assert "CREATE TABLE IF NOT EXISTS journal (" in sql
    assert "CREATE UNIQUE INDEX IF NOT EXISTS journal_effect_started" in sql
    assert f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (" in sql
    assert f"version_num='{HEAD_REVISION}'" in sql or f"VALUES ('{HEAD_REVISION}')" in sql
    if dialect == "postgresql":
        assert "CREATE SEQUENCE IF NOT EXISTS run_conclusion_ordinal" in sql
        assert sql.count("BEGIN;") == 1 and sql.count("COMMIT;") == 1
    else:
        assert "SEQUENCE" not in sql
        assert not (tmp_path / "never.db").exists()

    if dialect == "postgresql":
        schema = cli("upgrade", "--sql", "--url", url, "--schema", SCHEMA).stdout
        assert f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}" in schema
        assert f"CREATE TABLE IF NOT EXISTS {SCHEMA}.journal (" in schema
        assert f"CREATE TABLE {SCHEMA}.{VERSION_TABLE}" in schema
        assert f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.run_log_position" in schema


@pytest.mark.postgres
async def test_the_printed_postgresql_ddl_runs_and_gives_the_migrated_schema(
    pg_database: Callable[..., str],
) -> None:
    ddl_db, migrated = (
        await asyncio.to_thread(pg_database, False),
        await asyncio.to_thread(pg_database, True),
    )
    sql = (await acli("upgrade", "--sql", "--url", ddl_db)).stdout

    conn = await asyncpg.connect(
        make_url(ddl_db).set(drivername="postgresql").render_as_string(False)
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()
    assert await catalog(ddl_db) == await catalog(migrated)
    assert await current_revision(ddl_db) == HEAD_REVISION


# -- upgrade_connection and the caller's transaction ------------------------------------------


async def test_upgrade_connection_refuses_a_transaction_it_cannot_commit_or_joins_it(
    url: str,
) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")  # autobegun: someone else's transaction
            with pytest.raises(RuntimeError, match="inside a transaction it cannot commit"):
                await conn.run_sync(upgrade_connection)
            await conn.rollback()
        assert await table_names(url) == set()

        # The caller's own transaction, which it commits: the journal goes with it.
        async with engine.begin() as conn:
            await conn.run_sync(lambda c: upgrade_connection(c, join_transaction=True))
        assert await current_revision(url) == HEAD_REVISION
    finally:
        await engine.dispose()


# -- URLs ---------------------------------------------------------------------------------------


def test_one_url_normalisation_gives_every_entry_point_the_async_drivers() -> None:
    cases = {
        "postgresql://u@h/db": "postgresql+asyncpg",
        "postgres://u@h/db": "postgresql+asyncpg",
        "postgresql+asyncpg://u@h/db": "postgresql+asyncpg",
        "sqlite:///x.db": "sqlite+aiosqlite",
        "sqlite+aiosqlite:///x.db": "sqlite+aiosqlite",
    }
    for raw, driver in cases.items():
        assert async_url(raw).drivername == driver
    for bad in ("postgresql+psycopg://u@h/db", "mysql://u@h/db"):
        with pytest.raises(ValueError, match="unsupported database"):
            async_url(bad)
    with pytest.raises(ValueError, match="not a database URL") as caught:
        async_url("user:secret@nowhere")
    assert "secret" not in str(caught.value)


async def test_the_library_takes_the_urls_the_cli_takes(url: str) -> None:
    plain = make_url(url)
    plain = plain.set(drivername=plain.get_backend_name())
    if plain.drivername == "postgresql":
        plain = plain.set(drivername="postgres")  # Heroku's spelling too
    text = plain.render_as_string(hide_password=False)
    assert "+" not in text.split("://")[0]

    assert await current_revision(text) is None
    await upgrade(text)
    assert await current_revision(text) == HEAD_REVISION
    store = await SqlJournalStore.connect(text)
    try:
        assert store.engine.dialect.driver in {"asyncpg", "aiosqlite"}
        assert (await store.checkpoint()).size == 0
    finally:
        await store.close()
    push = await SqlPushStore.connect(text)
    try:
        assert await push.list(RunId.generate()) == []
    finally:
        await push.close()
