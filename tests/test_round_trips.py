"""An append costs a fixed number of round trips, whatever the batch size.

Counted, not timed, at the driver: on PostgreSQL every request the client waits on (each
SQLAlchemy statement, asyncpg's BEGIN and COMMIT, and each call the hot path makes on the asyncpg
connection itself); on SQLite every aiosqlite thread hop (each wakes the event loop), and
the statements SQLite runs (its trace callback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiosqlite
import asyncpg
import pytest
from sqlalchemy import event

from agentplane_journal import RunId, SqlJournalStore

from support.helpers import concluded, note


@contextmanager
def counting(store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the client waited on: ``BEGIN``/``COMMIT``/the statement's verb, or ``hop``."""
    seen: list[str] = []
    engine = store.engine.sync_engine
    postgres = store.engine.dialect.name == "postgresql"

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if postgres:
            seen.append(statement.split(None, 1)[0].upper())

    def raw(name: str) -> None:
        original = getattr(asyncpg.Connection, name)

        async def wrapper(self: Any, query: str, *args: Any, **kw: Any) -> Any:
            seen.append(query.split(None, 1)[0].upper())
            return await original(self, query, *args, **kw)

        monkeypatch.setattr(asyncpg.Connection, name, wrapper)

    # The hot path's own calls, and asyncpg's BEGIN and COMMIT (SQLAlchemy's statements go
    # through prepared statements, counted by the cursor event above).
    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        raw(name)

    original_hop = aiosqlite.Connection._execute

    async def hop(self: Any, fn: Any, *args: Any, **kw: Any) -> Any:
        seen.append("hop")
        return await original_hop(self, fn, *args, **kw)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", hop)
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        monkeypatch.undo()


async def test_an_append_costs_one_round_trip_whatever_its_size(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "owner", 300)
    await store.append(lease.epoch, [note(run)])  # the schema check, the pool, the head
    sizes = {}
    for n in (1, 10, 1000):
        with counting(store, monkeypatch) as seen:
            await store.append(lease.epoch, [note(run, str(i)) for i in range(n)])
        sizes[n] = list(seen)
    assert sizes[1] == sizes[10] == sizes[1000]
    if store.engine.dialect.name == "postgresql":
        # one autocommitted statement: mutex, fence, seal, head check, records, activity
        assert sizes[1] == ["WITH"], sizes[1]
    else:
        # the whole transaction on the connection's thread; back-to-back appends keep the
        # connection, so not even the pool's reset on return comes between them
        assert sizes[1] == ["hop"], sizes[1]


async def test_a_first_append_to_a_run_costs_the_general_unit_of_work(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunId.generate()
    await store.append(1, [note(run)])  # warm the pool and the schema check
    other = RunId.generate()
    with counting(store, monkeypatch) as seen:
        await store.append(1, [note(other)])
    if store.engine.dialect.name == "postgresql":
        # no known head yet: BEGIN, run mutex, fence+seal+head, INSERT, COMMIT
        assert len(seen) == 5, seen
    else:
        assert seen == ["hop"], seen  # SQLite reads its head under the write lock


async def settled(store: SqlJournalStore) -> None:
    """The SQLite write queue idle, its connection back in the pool (as between bursts)."""
    writer = store._shared.writer
    if writer is not None:
        await writer.idle()


async def test_a_concluding_append_costs_the_general_unit_of_work(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunId.generate()
    await store.append(1, [note(run)])
    await settled(store)
    with counting(store, monkeypatch) as seen:
        await store.append(1, [note(run), concluded(run, "succeeded")])
    if store.engine.dialect.name == "postgresql":
        assert len(seen) == 6, seen  # + the outcome upsert
    else:
        # SQLAlchemy's statements hop for the cursor, the execute and each fetch
        assert len(seen) == 23, seen


async def test_a_seal_costs_a_fixed_number_of_round_trips(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunId.generate()
    await store.append(1, [note(run)])
    await settled(store)
    with counting(store, monkeypatch) as seen:
        await store.seal(run, 1, "succeeded")
    # PostgreSQL: BEGIN, run mutex, fence+seal+head, log counter, seal INSERT, the stored
    # tree's read and write, COMMIT (the general unit of work: seals are not the hot path)
    expected = 8 if store.engine.dialect.name == "postgresql" else 26
    assert len(seen) == expected, seen


async def test_concurrent_appends_to_distinct_runs_share_one_round_trip(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit (on by default): one statement (PostgreSQL) or one thread hop (SQLite)
    for the appends that wait for it together."""
    runs = [RunId.generate() for _ in range(8)]
    for run in runs:
        await store.append(1, [note(run)])  # every head known
    await settled(store)
    with counting(store, monkeypatch) as seen:
        await asyncio.gather(*(store.append(1, [note(run, "together")]) for run in runs))
    if store.engine.dialect.name == "postgresql":
        assert seen == ["WITH"], seen  # one multi-run statement
    else:
        assert set(seen) == {"hop"} and len(seen) < len(runs), seen  # a transaction per group
