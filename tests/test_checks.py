"""Revision 0004_checks: a named CHECK on every counter and instant, on both dialects.

* the models declare exactly the floors the revision creates, and they are agentplane
  0.22.0's constraints by name; the two that are lower (``journal.epoch``,
  ``run_seal.log_index`` >= 0) are values the store itself writes: an epoch-0 append and
  each tenant's first seal, both shown here;
* the database holds them (SQLite: in the table's own SQL) and refuses a write below each
  floor, and accepts one at it;
* upgrading from ``0003_contract_0_22`` with rows keeps every row, index (partial
  predicates, descending keys), default and key, and gives exactly a fresh database's
  schema; downgrading removes every CHECK and gives ``0003``'s schema back; ``alembic
  check`` is clean;
* a table holding a value below a floor is refused before any DDL, naming table, column
  and count, nothing changed; on SQLite the rebuilds are one transaction (a failure in the
  last table leaves the first as they were);
* the offline script (``upgrade --sql``) for SQLite runs and gives the migrated schema.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import CheckConstraint, insert, inspect, pool
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import BackendError, RunId, SqlJournalStore
from agentplane_journal.db.models import COLUMN_FLOORS, metadata
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations import commands as migrate
from agentplane_journal.migrations.commands import current_revision, upgrade, upgrade_sql

from support.helpers import admitted, concluded, note
from support.migration_tools import alembic_ok, catalog, execute, query, table_contents

PREVIOUS = "0003_contract_0_22"
CHECKS = "0004_checks"
#: The tables 0003 and 0004 have: the package's, less those of later revisions
#: (``journal_profile``: 0005_wire_profile; ``log_cosignature``: 0006_cosignatures), which a
#: database downgraded below them does not have.
LATER_TABLES = frozenset({"journal_profile", "log_cosignature"})
TABLES_0004 = frozenset(metadata.tables) - LATER_TABLES
#: agentplane 0.22.0's floors (its SCHEMA's inline CHECKs), where they differ from ours.
STRICTER_IN_022 = {("journal", "epoch"): 1, ("run_seal", "log_index"): 1}


@pytest.fixture
def empty_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """A fresh, never-migrated database of this test's dialect."""
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


def _plain(sql: str) -> str:
    """A CHECK expression without parentheses and spacing (PostgreSQL adds both)."""
    return re.sub(r"[()\s]", "", sql)


def declared() -> dict[str, dict[str, str]]:
    """The models' CHECKs: table -> name -> expression."""
    return {
        table.name: {
            str(c.name): str(c.sqltext) for c in table.constraints if isinstance(c, CheckConstraint)
        }
        for table in metadata.sorted_tables
        if table.name in TABLES_0004
    }


async def stored_checks(url: str) -> dict[str, dict[str, str]]:
    """What the database says: table -> name -> expression (plain, see ``_plain``)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:

            def read(sync: Any) -> dict[str, dict[str, str]]:
                inspector = inspect(sync)
                return {
                    t: {c["name"]: _plain(c["sqltext"]) for c in inspector.get_check_constraints(t)}
                    for t in TABLES_0004
                }

            return await conn.run_sync(read)
    finally:
        await engine.dispose()


def _declared_plain() -> dict[str, dict[str, str]]:
    return {t: {n: _plain(s) for n, s in checks.items()} for t, checks in declared().items()}


def _sqlite_normal(cat: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """A SQLite catalog with each object's SQL spaced and quoted one way (a rebuilt table's
    name comes back quoted, ``CREATE TABLE "journal"``, and its columns one to a line)."""
    rows = []
    for kind, name, table, sql in cat["objects"]:
        sql = re.sub(r'^CREATE TABLE "(\w+)"', r"CREATE TABLE \1", sql)
        rows.append((kind, name, table, re.sub(r"\s+", " ", sql)))
    return {"objects": sorted(rows)}


async def _downgrade(url: str, revision: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: migrate.downgrade_connection(c, revision))
    finally:
        await engine.dispose()


# -- what is declared -----------------------------------------------------------------------


def test_the_models_declare_the_floors_the_revision_creates() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    frozen = script.get_revision("0004_checks").module.FLOORS
    assert frozen == COLUMN_FLOORS
    expected = {
        table: {f"{table}_{c}_check": f"{c} >= {f}" for c, f in floors.items()}
        for table, floors in COLUMN_FLOORS.items()
    }
    assert {t: c for t, c in declared().items() if c} == expected
    # agentplane 0.22.0's thirteen, by table and column; ours differ in exactly two floors.
    assert sum(len(f) for f in COLUMN_FLOORS.values()) == 13
    for (table, column), theirs in STRICTER_IN_022.items():
        assert COLUMN_FLOORS[table][column] == theirs - 1


async def test_the_store_writes_epoch_0_and_log_index_0_which_0_22s_floors_refuse(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run = RunId.generate()
    [record] = await store.append(0, [admitted(run)])  # a run that never had a lease
    assert record.epoch == 0
    await store.append(0, [concluded(run, "succeeded")])
    await store.seal(run, 0, "succeeded")
    inclusion = await store.inclusion_proof(run)
    assert inclusion is not None and inclusion.index == 0  # the tenant's first leaf
    assert await store.audit_bounds() == []


async def test_a_clock_before_1970_is_refused_by_the_checks_and_nothing_is_written(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store(clock=lambda: -5.0)
    run = RunId.generate()
    with pytest.raises(BackendError, match="run_activity_updated_at_check"):
        await store.append(0, [admitted(run)])
    assert await store.read(run) == []
    with pytest.raises(BackendError, match="run_cancel_requested_at_check"):
        await store.request_cancel(run, "ops", "stop")
    assert await store.cancellation(run) is None


async def test_every_check_is_in_the_database_and_refuses_a_value_below_its_floor(
    empty_url: str, dialect: str
) -> None:
    await upgrade(empty_url)
    assert await stored_checks(empty_url) == _declared_plain()
    if dialect == "sqlite":  # in the table's own SQL, where SQLite enforces it
        tables = dict(await query(empty_url, "SELECT name, sql FROM sqlite_master"))
        for table, checks in declared().items():
            for name, condition in checks.items():
                assert f"CONSTRAINT {name} CHECK ({condition})" in tables[table]
    else:
        rows = await query(
            empty_url,
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'c' "
            "AND connamespace = 'public'::regnamespace",
        )
        assert dict(rows) == {
            name: f"CHECK (({condition}))"
            for checks in declared().values()
            for name, condition in checks.items()
        }

    engine = create_async_engine(empty_url, poolclass=pool.NullPool)
    try:
        for table, floors in COLUMN_FLOORS.items():
            for column, floor in floors.items():
                row = _row(table) | {column: floor}
                async with engine.connect() as conn:  # at the floor: accepted
                    await conn.execute(insert(metadata.tables[table]).values(row))
                    await conn.rollback()
                async with engine.connect() as conn:  # one below: refused, by name
                    with pytest.raises(IntegrityError, match=f"{table}_{column}_check"):
                        await conn.execute(
                            insert(metadata.tables[table]).values(row | {column: floor - 1})
                        )
                    await conn.rollback()
    finally:
        await engine.dispose()


def _row(table: str) -> dict[str, Any]:
    """A row of ``table`` that breaks no constraint."""
    values: dict[str, Any] = {}
    for column in metadata.tables[table].columns:
        if column.name in COLUMN_FLOORS[table]:
            values[column.name] = COLUMN_FLOORS[table][column.name] + 1
        elif column.type.python_type is bytes:
            values[column.name] = b"\x00" * 32
        elif column.type.python_type is bool:
            values[column.name] = False
        elif column.type.python_type is int:
            values[column.name] = 1
        else:
            values[column.name] = f"x-{column.name}"
    return values


# -- upgrade and downgrade, with rows -------------------------------------------------------


async def _write_rows(url: str) -> tuple[RunId, RunId]:
    """Rows in every table the revision touches, as the store and the push store write them."""
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        loose, leased = RunId.generate(), RunId.generate()
        await store.append(0, [admitted(loose), note(loose)])  # epoch 0
        lease = await store.acquire(leased, "worker", 60)
        await store.append(lease.epoch, [admitted(leased), concluded(leased, "succeeded")])
        await store.seal(leased, lease.epoch, "succeeded")  # log_index 0
        await store.release_lease(leased, lease.epoch)  # owner '', expires_at 0
        await store.request_cancel(loose, "ops", "stop it")
    finally:
        await store.close()
    await execute(
        url,
        "INSERT INTO run_admission (tenant, key, run_id, admitted_at) "
        f"VALUES ('acme', 'order-7', '{leased}', 0)",
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq, attempts, "
        f"next_attempt_at, parked) VALUES ('acme', '{loose}', 'cfg', 'https://h.example/', 0, "
        f"0, 0, false), ('acme', '{loose}', 'parked', 'https://h.example/', 4, 9, 17, true)",
    )
    return loose, leased


async def test_upgrade_and_downgrade_between_0003_and_0004_keep_every_row(
    empty_url: str, dialect: str, request: pytest.FixtureRequest
) -> None:
    url = empty_url
    await upgrade(url)
    loose, _ = await _write_rows(url)
    tables = set(TABLES_0004)
    rows = await table_contents(url, tables)

    # Down: every CHECK gone, every row kept, and 0003's schema exactly.
    await _downgrade(url, PREVIOUS)
    assert await current_revision(url) == PREVIOUS
    assert await stored_checks(url) == {t: {} for t in TABLES_0004}
    assert await table_contents(url, tables) == rows
    if dialect == "sqlite":
        fresh = request.getfixturevalue("sqlite_database")(migrated=False)
    else:
        fresh = await asyncio.to_thread(request.getfixturevalue("pg_database"), False)
    await upgrade(fresh, PREVIOUS)
    at_0003 = await catalog(url)
    if dialect == "sqlite":
        assert _sqlite_normal(at_0003) == _sqlite_normal(await catalog(fresh))
    else:
        assert at_0003 == await catalog(fresh)

    # Up again: the CHECKs back, every row kept, and a fresh database's schema exactly.
    await upgrade(url)
    assert await current_revision(url) == HEAD_REVISION
    assert await stored_checks(url) == _declared_plain()
    assert await table_contents(url, tables) == rows
    await upgrade(fresh)
    assert await catalog(url) == await catalog(fresh)
    assert "No new upgrade operations detected" in alembic_ok("check", url=url)

    # The store works on the rows it wrote before.
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        assert len(await store.read(loose)) == 2
        await store.append(0, [concluded(loose, "failed")])
        await store.seal(loose, 0, "failed")
        assert (await store.checkpoint()).size == 2
        assert await store.audit_bounds() == []
    finally:
        await store.close()


async def test_sqlite_keeps_indexes_and_a_hosts_views_and_triggers_through_the_rebuilds(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database(migrated=False)
    await upgrade(url, PREVIOUS)
    # A host's view over a rebuilt table (a rename would re-check it and fail while the
    # table is missing) and its trigger on one (dropped with the old table).
    await execute(
        url,
        "CREATE VIEW host_cancels AS SELECT run_id, actor FROM run_cancel",
        "CREATE TABLE host_audit (run_id TEXT)",
        "CREATE TRIGGER host_on_cancel AFTER INSERT ON run_cancel "
        "BEGIN INSERT INTO host_audit VALUES (NEW.run_id); END",
    )
    later = ", ".join(f"'{t}'" for t in sorted(LATER_TABLES))  # their own indexes come and go
    others = (
        "SELECT type, name, sql FROM sqlite_master WHERE type <> 'table' "
        f"AND tbl_name NOT IN ({later}) ORDER BY name"
    )
    before = await query(url, others)
    await upgrade(url, CHECKS)  # the head adds tables (and SQLite their autoindexes)
    assert await query(url, others) == before
    indexes = dict((n, sql) for kind, n, sql in before if kind == "index")
    assert indexes["run_activity_recent"] == (
        "CREATE INDEX run_activity_recent ON run_activity (tenant, updated_at DESC, run_id DESC)"
    )
    assert indexes["push_delivery_due"].endswith("WHERE NOT parked")
    await execute(
        url,
        "INSERT INTO run_cancel (tenant, run_id, actor, reason, requested_at) "
        "VALUES ('t', 'r', 'ops', 'stop', 0)",
    )
    assert await query(url, "SELECT * FROM host_audit") == [("r",)]
    assert await query(url, "SELECT * FROM host_cancels") == [("r", "ops")]
    await _downgrade(url, PREVIOUS)
    assert await query(url, others) == before


# -- refusals -------------------------------------------------------------------------------


async def test_rows_below_a_floor_refuse_the_upgrade_naming_them_and_nothing_changes(
    empty_url: str,
) -> None:
    url = empty_url
    await upgrade(url, PREVIOUS)
    run = str(RunId.generate())
    await execute(
        url,
        "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at) "
        f"VALUES ('acme', '{run}', 'w', 0, -5)",
        "INSERT INTO run_cancel (tenant, run_id, actor, reason, requested_at) "
        f"VALUES ('acme', '{run}', 'ops', 'stop', -1), ('b', '{run}', 'ops', 'stop', -2)",
    )
    before = await catalog(url), await table_contents(url, TABLES_0004)

    with pytest.raises(ValueError) as refused:
        await upgrade(url)
    message = str(refused.value)
    for finding in (
        "run_lease.epoch: 1 row(s) below 1",
        "run_lease.expires_at: 1 row(s) below 0",
        "run_cancel.requested_at: 2 row(s) below 0",
        "(SELECT * FROM run_cancel WHERE requested_at < 0)",
        "Nothing was changed",
    ):
        assert finding in message, message
    assert await current_revision(url) == PREVIOUS
    assert (await catalog(url), await table_contents(url, TABLES_0004)) == before

    # The command line says the same, exit 2, no traceback.
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentplane_journal", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "run_cancel.requested_at: 2 row(s) below 0" in result.stderr
    assert "Traceback" not in result.stderr

    # Corrected, the upgrade goes through.
    await execute(url, "DELETE FROM run_lease", "UPDATE run_cancel SET requested_at = 0")
    await upgrade(url)
    assert await current_revision(url) == HEAD_REVISION


async def test_sqlite_rebuilds_are_all_or_nothing(sqlite_database: Callable[..., str]) -> None:
    url = sqlite_database(migrated=False)
    await upgrade(url, PREVIOUS)
    await _write_rows_0003(url)
    # Something in the way of the last table's rebuild (push_delivery comes after journal).
    await execute(url, "CREATE TABLE _alembic_tmp_push_delivery (x INTEGER)")
    before = await catalog(url), await table_contents(url, TABLES_0004)

    with pytest.raises(Exception, match="_alembic_tmp_push_delivery"):
        await upgrade(url)
    assert await current_revision(url) == PREVIOUS
    assert (await catalog(url), await table_contents(url, TABLES_0004)) == before

    await execute(url, "DROP TABLE _alembic_tmp_push_delivery")
    await upgrade(url)
    assert await stored_checks(url) == _declared_plain()


async def _write_rows_0003(url: str) -> None:
    run = str(RunId.generate())
    await execute(
        url,
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        f"VALUES ('acme', '{run}', 1, 0, 'Note', x'00', x'01', x'02')",
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
        f"VALUES ('acme', '{run}', 'cfg', 'https://h.example/', 1)",
    )


# -- the offline script ---------------------------------------------------------------------


def test_the_printed_sqlite_ddl_runs_and_gives_the_migrated_schema(
    sqlite_database: Callable[..., str], tmp_path: Path
) -> None:
    script = StringIO()
    upgrade_sql("sqlite", output=script)
    assert "CONSTRAINT journal_epoch_check CHECK (epoch >= 0)" in script.getvalue()
    made = tmp_path / "from-script.db"
    with sqlite3.connect(made) as conn:
        conn.executescript(script.getvalue())
    migrated = sqlite_database()
    objects = "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master"
    with sqlite3.connect(made) as a, sqlite3.connect(migrated.split("///", 1)[1]) as b:
        # (The script spells a tab as four spaces; the SQL is otherwise the same.)
        assert _sqlite_normal({"objects": a.execute(objects).fetchall()}) == _sqlite_normal(
            {"objects": b.execute(objects).fetchall()}
        )
