"""``store.read_back``: a run's last records below a seq, with its seal, in one statement
(backends/reader.py's ``BACK``): the general unit's answer, one hop on SQLite, and a hostile
row reported, never a crash."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import aiosqlite
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import RunId, SqlJournalStore, StoreError

from support.helpers import note
from support.tamper import SIGNER
from support.tamper_cases import CASES, tamper


async def _written(store: SqlJournalStore, n: int) -> RunId:
    run = RunId.generate()
    lease = await store.acquire(run, "worker", 60)
    for i in range(n):
        await store.append(lease.epoch, [note(run, f"note {i}")])
    return run


async def test_read_back_answers_what_the_general_unit_answers(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    run = await _written(store, 12)
    asks = [(None, 5), (None, 100), (8, 3), (4, 10), (1, 5), (13, 2)]
    async with store.engine.connect() as conn, AsyncSession(bind=conn) as session:
        general = [await store.read_back(run, b, n, session=session) for b, n in asks]
    assert [await store.read_back(run, b, n) for b, n in asks] == general
    assert store._shared.reader is not None  # the lean reads served it
    every = await store.read(run)
    assert general[0] == (every[7:], None)  # the last 5, in seq order, not sealed
    assert general[1] == (every, None)
    assert general[2] == (every[4:7], None)  # below seq 8: 5, 6, 7
    assert general[3] == (every[:3], None)
    assert general[4] == ([], None)
    empty = RunId.generate()
    assert await store.read_back(empty, None, 5) == ([], None)
    await store.seal(run, 1, "done")
    records, sealed = await store.read_back(run, None, 2)
    assert [r.seq for r in records] == [11, 12] and sealed == every[-1].hash


@pytest.fixture
def hops() -> Iterator[list[int]]:
    counted = [0]
    original = aiosqlite.Connection._execute

    async def counting(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return await original(self, fn, *args, **kwargs)

    aiosqlite.Connection._execute = counting  # type: ignore[method-assign]
    try:
        yield counted
    finally:
        aiosqlite.Connection._execute = original  # type: ignore[method-assign]


async def test_read_back_is_one_hop_on_sqlite(
    sqlite_database: Callable[..., str], hops: list[int]
) -> None:
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        run = await _written(store, 10)
        # The last append's connection, parked for the next append, back in the pool now:
        # its return (the pool's reset, a hop) would otherwise land inside a counted read.
        writer = store._shared.writer
        assert writer is not None
        await writer.idle()
        await store.read_back(run, None, 3)  # the first read checks out the connection
        before = hops[0]
        assert len((await store.read_back(run, 9, 4))[0]) == 4
        assert hops[0] - before <= 1
    finally:
        await store.close()


@pytest.mark.parametrize("name", list(CASES))
async def test_read_back_reports_a_hostile_row_and_never_crashes(
    make_store: Callable[..., Any], name: str
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    _, broken = await tamper(store, name)
    for run in broken:
        for below in (None, 2, 3, 5):
            try:
                await store.read_back(run, below, 3)
            except StoreError:
                pass
