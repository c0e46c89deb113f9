"""Behind a transaction pooler the hot appends run as server-side functions (revision 0007).

With ``?pgbouncer=true`` nothing the client prepares outlives its transaction, so the append
statements would be parsed and planned for every append. Revision ``0007_pooled_append``
holds them as PL/pgSQL functions, whose plans the server connection keeps; the writer calls
those instead. What is shown here, on PostgreSQL (SQLite has no pooler and no functions):

* the functions' bodies are the live statements (a change to one without a new revision is
  caught here);
* appends with the option call the functions (the server's function statistics count the
  calls) and keep every answer of the contract: written, fenced, sealed, duplicate effect,
  a group of runs in one call;
* in a schema of their own the functions live there, and the downgrade removes them.

The whole behaviour battery and the races run through a real PgBouncer with the option in
``test_pgbouncer.py``, hence through these functions. Seen red: with the writer calling the
plain statement again, the function statistics count no call.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import (
    DuplicateEffectError,
    FencedError,
    RunId,
    RunSealedError,
    SqlJournalStore,
)
from agentplane_journal.backends.postgresql import sql as pgsql
from agentplane_journal.migrations.commands import downgrade_connection, upgrade

from support.helpers import admitted, key, note, started
from support.migration_tools import execute, query

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = {"agentplane_journal_append_one", "agentplane_journal_append_many"}
SCHEMA = "apj_pooled"


def _revision() -> ModuleType:
    path = ROOT / "alembic" / "versions" / "0007_pooled_append.py"
    spec = importlib.util.spec_from_file_location("pooled_append_revision", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _words(text: str) -> list[str]:
    return text.split()


def test_the_functions_hold_the_live_statements() -> None:
    revision = _revision()
    # Whitespace aside (the revision wraps two long lines), the same statements: a change
    # to the live ones needs a revision that replaces the functions.
    assert _words(revision.ONE) == _words(pgsql.ONE)
    assert _words(revision.MANY) == _words(pgsql.MANY)
    assert pgsql.pooled(pgsql.ONE, None).startswith(f"SELECT * FROM {revision.APPEND_ONE}(")
    assert pgsql.pooled(pgsql.MANY, "s").startswith(f'SELECT * FROM "s".{revision.APPEND_MANY}(')


async def _calls(url: str, schema: str = "public") -> dict[str, int]:
    rows = await query(
        url,
        "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = :schema",
        schema=schema,
    )
    return {name: calls for name, calls in rows}


async def _functions(url: str) -> set[tuple[str, str]]:
    rows = await query(
        url,
        "SELECT n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n"
        " ON n.oid = p.pronamespace WHERE p.proname LIKE 'agentplane_journal_%'",
    )
    return {(schema, name) for schema, name in rows}


@pytest.mark.postgres
async def test_pooled_appends_call_the_functions_and_keep_every_answer(pg_database) -> None:
    url = pg_database()
    database = url.rsplit("/", 1)[1]
    # Count PL/pgSQL calls in this database's sessions (the store's connections start after).
    await execute(url, f"ALTER DATABASE \"{database}\" SET track_functions = 'pl'")
    store = await SqlJournalStore.connect(url + "?pgbouncer=true", tenant="pooled")
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)
        await store.append(lease.epoch, [admitted(run)])  # the general path learns the head
        for i in range(3):  # the single-run function
            await store.append(lease.epoch, [note(run, f"n{i}")])
        await store.append(lease.epoch, [started(run, key(1))])
        with pytest.raises(DuplicateEffectError):
            await store.append(lease.epoch, [started(run, key(1))])

        runs = [RunId.generate() for _ in range(8)]
        leases = [await store.acquire(r, "w", 60) for r in runs]
        for r, held in zip(runs, leases, strict=True):
            await store.append(held.epoch, [admitted(r)])
        # Appends to eight runs at once: one waits for the statement in flight, the rest
        # share the next one (the group function).
        for i in range(3):
            await asyncio.gather(
                *(
                    store.append(held.epoch, [note(r, f"g{i}")])
                    for r, held in zip(runs, leases, strict=True)
                )
            )

        await store.release_lease(runs[1], leases[1].epoch)
        again = await store.acquire(runs[1], "thief", 60)
        with pytest.raises(FencedError):
            await store.append(leases[1].epoch, [note(runs[1], "late")])
        await store.seal(runs[2], leases[2].epoch, "succeeded")
        with pytest.raises(RunSealedError):
            await store.append(leases[2].epoch, [note(runs[2], "after the seal")])

        assert [r.seq for r in await store.read(run)] == [1, 2, 3, 4, 5]
        for r in runs:
            assert [x.seq for x in await store.read(r)] == [1, 2, 3, 4]
            await store.verify(r)
        assert again.epoch == leases[1].epoch + 1
    finally:
        await store.close()

    calls = await _calls(url)
    assert calls.get("agentplane_journal_append_one", 0) >= 4, calls
    assert calls.get("agentplane_journal_append_many", 0) >= 1, calls


@pytest.mark.postgres
async def test_in_a_schema_of_its_own_and_gone_after_the_downgrade(pg_database) -> None:
    url = pg_database(migrated=False)
    await upgrade(url, schema=SCHEMA)
    assert {n for s, n in await _functions(url) if s == SCHEMA} == FUNCTIONS
    assert {n for s, n in await _functions(url) if s != SCHEMA} == set()

    store = await SqlJournalStore.connect(url + "?pgbouncer=true", schema=SCHEMA, tenant="t")
    try:
        runs = [RunId.generate() for _ in range(4)]
        leases = [await store.acquire(r, "w", 60) for r in runs]
        for r, held in zip(runs, leases, strict=True):
            await store.append(held.epoch, [admitted(r)])
        await asyncio.gather(
            *(store.append(h.epoch, [note(r)]) for r, h in zip(runs, leases, strict=True))
        )
        for r in runs:
            assert len(await store.read(r)) == 2
    finally:
        await store.close()

    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(
                lambda c: downgrade_connection(c, "0006_cosignatures", schema=SCHEMA)
            )
    finally:
        await engine.dispose()
    assert await _functions(url) == set()
    await upgrade(url, schema=SCHEMA)
    assert {n for _, n in await _functions(url)} == FUNCTIONS
