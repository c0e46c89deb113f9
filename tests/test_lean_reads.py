"""The lean reads (backends/reader.py): the same answers as the general unit of work, in one
statement (one thread hop on SQLite), and every hostile row reported, never a crash."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import aiosqlite
import pytest

from agentplane_journal import RunId, SqlJournalStore, StoreError
from agentplane_journal.core.values import Head
from agentplane_journal.errors import CorruptRecordError

from support.helpers import note
from support.tamper import SIGNER
from support.tamper_cases import CASES, tamper


async def _written(store: SqlJournalStore, n: int) -> RunId:
    run = RunId.generate()
    lease = await store.acquire(run, "worker", 60)
    for i in range(n):
        await store.append(lease.epoch, [note(run, f"note {i}")])
    return run


async def test_lean_reads_answer_what_the_general_unit_answers(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    run = await _written(store, 12)
    async with store.engine.connect() as conn:  # the general path: a host's session
        from sqlalchemy.ext.asyncio import AsyncSession

        async with AsyncSession(bind=conn) as session:
            general = await store.read(run, 3, session=session)
            general_sealed = await store.read_sealed(run, session=session)
            general_head = await store.head(run, session=session)
            general_at = await store.records_at(run, [2, 5, 99], session=session)
    assert await store.read(run, 3) == general
    assert store._shared.reader is not None  # the lean reads served it
    assert await store.read_sealed(run) == general_sealed == (await store.read(run), None)
    assert await store.head(run) == general_head == Head(12, general[-1].hash)
    assert await store.records_at(run, [2, 5, 99]) == general_at
    assert [r.seq for r in general_at] == [2, 5]
    assert await store.record_at(run, 7) == general[4]
    assert await store.record_at(run, 13) is None
    # An unwritten run: nothing, the zero head, no seal.
    empty = RunId.generate()
    assert await store.read(empty) == []
    assert await store.read_sealed(empty) == ([], None)
    assert await store.head(empty) == Head(0, general_head.hash.ZERO)
    # A sealed run: its records and its sealed head from one statement.
    await store.seal(run, 1, "done")
    records, sealed = await store.read_sealed(run, 11)
    assert [r.seq for r in records] == [11, 12] and sealed == general_head.hash
    assert (await store.read_sealed(run, 13)) == ([], general_head.hash)


@pytest.fixture
def hops() -> Iterator[list[int]]:
    """Counts hand-offs to aiosqlite's thread (each call through its queue)."""
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


async def test_a_sqlite_read_is_one_hop_to_the_driver_thread(
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
        await store.read(run)  # the first read checks out the reader's connection
        for read in (
            lambda: store.read(run),
            lambda: store.read(run, 9),
            lambda: store.read_sealed(run),
            lambda: store.head(run),
            lambda: store.record_at(run, 4),
            lambda: store.records_at(run, [1, 4]),
        ):
            before = hops[0]
            await read()
            assert hops[0] - before <= 1
    finally:
        await store.close()


@pytest.mark.parametrize("name", list(CASES))
async def test_each_lean_read_reports_a_hostile_row_and_never_crashes(
    make_store: Callable[..., Any], name: str
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    _, broken = await tamper(store, name)
    for run in broken:
        for seq in (1, 2, 3, 4):
            for read in (
                store.read(run, seq),
                store.read_sealed(run, seq),
                store.record_at(run, seq),
                store.records_at(run, [seq, seq + 1]),
                store.head(run),
            ):
                try:
                    await read
                except StoreError:
                    pass


async def test_an_edited_row_read_alone_is_corrupt(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    victim, _ = await tamper(store, "kind column")  # seq 2's column
    with pytest.raises(CorruptRecordError):
        await store.record_at(victim.run, 2)
    with pytest.raises(CorruptRecordError):
        await store.read(victim.run, 2)
    with pytest.raises(CorruptRecordError):
        await store.read(victim.run)
    assert [r.seq for r in await store.read(victim.run, 3)] == [3]  # past it: not read
    assert (await store.record_at(victim.run, 1)) is not None  # a neighbour alone is intact


_EDIT_17 = "UPDATE journal SET kind = 'Other' WHERE tenant = :t AND run_id = :r AND seq = 17"


async def test_pages_fetched_ahead_join_up_and_every_page_is_checked(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    run = await _written(store, 25)
    pages = [[r.seq for r in page] async for page in store.pages(run, page_size=10)]
    assert pages == [list(range(1, 11)), list(range(11, 21)), list(range(21, 26))]
    assert [r.seq async for r in store.stream(run, 3, page_size=7)] == list(range(3, 26))
    one = len((await store.read(run, 5))[0].raw)
    cut = [len(page) async for page in store.pages(run, page_size=10, page_bytes=one * 3)]
    assert sum(cut) == 25 and max(cut) <= 4  # the byte budget cuts the pages too
    head = await store.verify(run)
    # A row edited in a later page: that page's check fails, whatever was fetched ahead.
    async with store.engine.begin() as conn:
        from sqlalchemy import text

        await conn.execute(
            text(
                "UPDATE journal SET kind = 'Other' WHERE tenant = :t AND run_id = :r AND seq = 17"
            ),
            {"t": store.tenant, "r": str(run)},
        )
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == 17
    with pytest.raises(CorruptRecordError):
        [r async for r in store.stream(run, page_size=10)]
    assert head == (await store.read(run, 25))[0].hash
