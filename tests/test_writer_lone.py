"""One caller at a time: its append runs in its own task, on a connection kept between calls.

On SQLite a lone append (nothing queued, no leader, no other lone hop in flight) is one hop
in the caller's own task, and the connection stays checked out for ``PARK_SECONDS``
(``backends/sqlite/writer.py``). Checked here: one hop per append even when the event loop
turns between appends (no pool checkout and checkin, each a ``ROLLBACK`` hop), appends
that arrive while a lone hop is in flight still share one commit behind it, and the parked
connection goes back to the pool. PostgreSQL's writer has no lone path; the race at the end
(many tasks, some alone, some grouped: every append lands once, in order, and every
connection is back in the pool after ``idle()``) runs on both.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.backends.sqlite import transaction as sqlite_transaction
from agentplane_journal.backends.sqlite import writer as sqlite_writer
from agentplane_journal.backends.sqlite.writer import PARK_SECONDS
from agentplane_journal.errors import BackendError

from support.counting import counting
from support.helpers import note

BOUND = 10.0


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(int(BOUND * 200)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the writer never reached the awaited state")


def checked_out(store: SqlJournalStore) -> int:
    pool: Any = store.engine.sync_engine.pool
    return int(pool.checkedout())


async def test_on_a_hosts_engine_no_connection_is_parked(
    sqlite_database: Callable[..., str],
) -> None:
    """A host may dispose of its engine right after its last append (and never close the
    store): a connection parked then would be left to the garbage collector, its thread
    answering a closed loop. So only an engine the store opened parks one."""
    engine = create_async_engine(sqlite_database())
    store = SqlJournalStore(engine)
    try:
        run = RunId.generate()
        for text in ("first", "second"):
            await store.append(1, [note(run, text)])
            assert store._shared.writer._parked is None  # type: ignore[union-attr]
        await until(lambda: checked_out(store) == 0)
    finally:
        await engine.dispose()


async def test_a_lone_writers_appends_are_one_hop_each_with_the_loop_turning_between(
    sqlite_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parked long enough that a loaded machine's pauses cannot outlast it (the wait is
    # timed; what is checked is that a parked connection is used, not how long it waits).
    monkeypatch.setattr(sqlite_writer, "PARK_SECONDS", 5.0)
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        run = RunId.generate()
        await store.append(1, [note(run, "first")])
        await store.append(1, [note(run, "warm")])
        with counting(store.engine) as counts:
            for i in range(20):
                for _ in range(3):  # the loop turns, as between a graph's steps
                    await asyncio.sleep(0)
                await store.append(1, [note(run, f"{i}")])
        # Seen red with the leader's one-loop-turn hold: 40 hops (a ROLLBACK to give the
        # connection back after each append).
        assert counts.hops == 20, counts
        assert counts.commits == 20, counts
        await store.verify(run)
    finally:
        await store.close()
    assert checked_out(store) == 0


async def test_appends_arriving_during_a_lone_hop_share_one_commit(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    store = await SqlJournalStore.connect(url)
    try:
        runs = [RunId.generate() for _ in range(9)]
        for run in runs:
            await store.append(1, [note(run, "warm")])
        writer: Any = store._shared.writer
        await writer.idle()
        holder = sqlite3.connect(url.removeprefix("sqlite+aiosqlite:///"), isolation_level=None)
        with counting(store.engine) as counts:
            try:
                holder.execute("BEGIN IMMEDIATE")  # the lone hop waits on its BEGIN IMMEDIATE
                lone = asyncio.create_task(store.append(1, [note(runs[0], "lone")]))
                await until(lambda: writer._lone is not None)
                behind = [
                    asyncio.create_task(store.append(1, [note(run, "behind")])) for run in runs[1:]
                ]
                # their leader waits for the lone hop, to carry them all on its connection
                await until(lambda: bool(writer._leaders) and len(writer._pending) == len(behind))
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            done, pending = await asyncio.wait([lone, *behind], timeout=BOUND)
            assert not pending
        # Seen red with a caller that goes alone whenever nothing is queued (not checking
        # for a lone hop in flight): 9 commits, one per append.
        assert counts.commits == 2, counts
        for task in done:
            assert len(task.result()) == 1
        for run in runs:
            assert len(await store.read(run)) == 2
            await store.verify(run)
    finally:
        await store.close()


async def test_the_parked_connection_goes_back_to_the_pool(
    sqlite_database: Callable[..., str],
) -> None:
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        run = RunId.generate()
        await store.append(1, [note(run, "first")])
        await store.append(1, [note(run, "parked")])
        assert store._shared.writer._parked is not None  # type: ignore[union-attr]
        assert checked_out(store) == 1
        await until(lambda: checked_out(store) == 0)  # after PARK_SECONDS and its reset hop
        await asyncio.sleep(PARK_SECONDS)
        await store.append(1, [note(run, "again")])  # checks one out anew
        await store.verify(run)
    finally:
        await store.close()
    assert checked_out(store) == 0


async def test_lone_and_grouped_appends_raced_all_land_in_order(
    database_url: str,
) -> None:
    store = await SqlJournalStore.connect(database_url, group_commit=True)
    try:
        runs = [RunId.generate() for _ in range(24)]
        for run in runs:
            await store.append(1, [note(run, "warm")])
        rng = random.Random(32)
        pauses = {run: [rng.choice((0, 0, 0.0005, 0.002, 0.02)) for _ in range(6)] for run in runs}

        async def writer(run: RunId) -> None:
            for i, pause in enumerate(pauses[run]):
                if pause:
                    await asyncio.sleep(pause)  # alone sometimes, in a burst other times
                await store.append(1, [note(run, f"{i}")])

        await asyncio.wait_for(asyncio.gather(*(writer(run) for run in runs)), 60)
        hot: Any = store._shared.writer
        await hot.idle()
        assert checked_out(store) == 0  # the parked connection too
        for run in runs:
            texts = [r.body["text"] for r in await store.read(run)]
            assert texts == ["warm", *(f"{i}" for i in range(6))], texts
            await store.verify(run)
    finally:
        await store.close()


async def test_a_lone_hop_holds_the_write_turn_and_gives_it_back(
    sqlite_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lone path takes the store's write turn itself (its fast path, inline): the
    store's other write transactions wait for it in the process, not on SQLite's busy
    handler, and find it free again after."""
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        run = RunId.generate()
        await store.append(1, [note(run, "warm")])
        writer: Any = store._shared.writer
        turn = writer._turn
        assert turn is not None and turn.free()
        held: list[bool] = []
        original = sqlite_transaction.transaction

        def spying(conn: sqlite3.Connection, group: list[Any]) -> list[Any]:
            held.append(turn._lock.locked())  # read on the hop's thread: the lock's flag
            return original(conn, group)

        monkeypatch.setattr(sqlite_writer, "transaction", spying)
        await store.append(1, [note(run, "alone")])
        assert held == [True]
        assert turn.free()
        await store.verify(run)
    finally:
        await store.close()


async def test_a_lone_hop_that_fails_outside_sqlite_writes_nothing_and_recovers(
    sqlite_database: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hop fails with something other than SQLite's answer (as aiosqlite's "Connection
    closed" would): the append is refused as never sent, its connection is not parked
    again, the write turn is free, and the next append lands after the first."""
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        run = RunId.generate()
        await store.append(1, [note(run, "warm")])
        writer: Any = store._shared.writer
        parked = writer._parked
        assert parked is not None
        original = sqlite_transaction.transaction

        def failing(conn: sqlite3.Connection, group: list[Any]) -> list[Any]:
            raise RuntimeError("the driver's thread is gone")

        monkeypatch.setattr(sqlite_writer, "transaction", failing)
        with pytest.raises(BackendError, match="cannot reach the database, nothing was written"):
            await store.append(1, [note(run, "refused")])
        assert writer._parked is None  # given back to the pool, not kept
        assert writer._turn.free()
        monkeypatch.setattr(sqlite_writer, "transaction", original)
        await store.append(1, [note(run, "after")])
        assert [r.body["text"] for r in await store.read(run)] == ["warm", "after"]
        await store.verify(run)
    finally:
        await store.close()
