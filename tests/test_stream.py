"""Streaming reads: ``store.stream(run)`` and ``verify(run)`` page through a run by seq.

On both dialects: the stream is ``read`` record for record whatever the page size, checks
its arguments before any statement, and ``verify`` still names the first bad seq when the
damage sits on a page boundary. A run of 50,000 small records streams and verifies within a
few MiB of Python memory (tracemalloc's peak; a bound, not a timing), and so does a run of
large records: pages end at ``PAGE_BYTES`` of stored records as well as at a count.
"""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import Append, CorruptRecordError, RunId, SqlJournalStore
from agentplane_journal.db.models import Journal
from agentplane_journal.journal import reads as reads
from agentplane_journal.journal.reads import PAGE_BYTES

from support.helpers import admitted
from support.streams import MiB, bulk_run


async def _run_of(store: SqlJournalStore, n: int) -> RunId:
    run = RunId.generate()
    lease = await store.acquire(run, "w", 600)
    await store.append(lease.epoch, [admitted(run)])
    done = 1
    while done < n:
        batch = [Append(run, "Note", {"text": f"n{done + i}"}) for i in range(min(1000, n - done))]
        await store.append(lease.epoch, batch)
        done += len(batch)
    return run


async def test_stream_is_read_record_for_record_at_any_page_size(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run = await _run_of(store, 53)
    everything = await store.read(run)
    for page_size in (1, 7, 53, 1000):
        assert [r async for r in store.stream(run, page_size=page_size)] == everything
    assert [r async for r in store.stream(run, 20, page_size=7)] == everything[19:]
    assert [r async for r in store.stream(run, 0)] == everything
    assert [r async for r in store.stream(run, 54)] == []
    assert [r async for r in store.stream(RunId.generate())] == []


async def test_stream_refuses_bad_arguments_before_any_statement(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    with pytest.raises(TypeError):
        store.stream(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.stream(RunId.generate(), -1)
    with pytest.raises(ValueError):
        store.stream(RunId.generate(), page_size=0)


@pytest.mark.parametrize("victim", [999, 1000, 1001, 1500])
async def test_verify_names_the_first_bad_seq_across_pages(
    make_store: Callable[..., Any], victim: int
) -> None:
    store = await make_store()
    run = await _run_of(store, 2100)
    head = await store.verify(run)
    assert head == (await store.head(run)).hash

    async def unit(session: Any) -> None:
        await session.execute(
            text("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s"),
            {"t": store.tenant, "r": str(run), "s": victim},
        )

    await store._unit(unit)
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == victim + 1  # the record after the gap


@pytest.mark.slow
async def test_a_run_of_50000_records_streams_and_verifies_in_a_few_mib(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run = await bulk_run(store, 50_000)
    await store.verify(run)  # warm: statement caches, connections

    tracemalloc.start()  # (it slows Python down about tenfold: the stream's check is shorter)
    try:
        head = await store.verify(run)
        verified = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        count, last = 0, None
        async for record in store.stream(run, 40_001):
            count, last = count + 1, record
        streamed = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 10_000 and last is not None and head == last.hash
    # One page of 1,000 records is about 1.5 MiB; the whole run would be about 60 MiB.
    assert streamed < 8 * MiB, f"stream peaked at {streamed / MiB:.1f} MiB"
    assert verified < 8 * MiB, f"verify peaked at {verified / MiB:.1f} MiB"


@pytest.mark.slow
async def test_a_run_of_large_records_streams_and_verifies_in_pages_bounded_by_bytes(
    make_store: Callable[..., Any],
) -> None:
    # 200 records of 256 KiB: ~50 MiB stored, ~100 MiB as records (the bytes and the
    # decoded text). Pages of 1,000 records would hold the whole run; pages of at most
    # PAGE_BYTES hold ~16 records.
    store = await make_store()
    run = await bulk_run(store, 200, pad=256 * 1024, chunk=20)
    await store.verify(run)  # warm

    tracemalloc.start()
    try:
        head = await store.verify(run)
        verified = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        count, last = 0, None
        async for record in store.stream(run):
            count, last = count + 1, record
        streamed = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 200 and last is not None and head == last.hash
    assert PAGE_BYTES == 4 * MiB
    # A page: ~4 MiB of stored bytes, the same again decoded, the driver's buffers.
    assert streamed < 24 * MiB, f"stream peaked at {streamed / MiB:.1f} MiB"
    assert verified < 24 * MiB, f"verify peaked at {verified / MiB:.1f} MiB"


async def _pages(store: SqlJournalStore, run: RunId, at: int, size: int, budget: int) -> list[Any]:
    return [page async for page in store._pages(run, at, size, budget, None)]


@pytest.mark.parametrize("budget", [1, 100, 1000, 3333, 10**9])
async def test_pages_end_at_the_byte_budget_and_join_up(
    make_store: Callable[..., Any], budget: int
) -> None:
    store = await make_store()
    run = await bulk_run(store, 40)
    sizes = {r.seq: len(r.raw) for r in await store.read(run)}
    everything = await store.read(run)
    for size in (1, 7, 1000):
        for at in (1, 17):
            pages = await _pages(store, run, at, size, budget)
            assert [r for page in pages for r in page] == everything[at - 1 :]
            for page, following in itertools.pairwise(pages):
                stored = sum(sizes[r.seq] for r in page)
                # Each page is at most `size` records; all but its last record came in
                # under the budget, and it ended there because of one bound or the other.
                assert len(page) <= size
                assert stored - len(page[-1].raw) < budget
                assert len(page) == size or stored >= budget
                assert following[0].seq == page[-1].seq + 1
    streamed = [r async for r in store.stream(run, page_bytes=budget, page_size=7)]
    assert streamed == everything


async def test_stream_refuses_a_bad_page_bytes_before_any_statement(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    with pytest.raises(ValueError):
        store.stream(RunId.generate(), page_bytes=0)
    with pytest.raises(TypeError):
        store.stream(RunId.generate(), page_bytes="4M")  # type: ignore[arg-type]


@pytest.mark.parametrize("victim", [5, 6, 7, 30])
async def test_verify_names_the_first_bad_seq_across_byte_bounded_pages(
    make_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, victim: int
) -> None:
    store = await make_store()
    run = await bulk_run(store, 40, pad=1000)
    # Pages of ~6 records: the victims sit at, before and after a boundary, and mid-run.
    monkeypatch.setattr(reads, "PAGE_BYTES", 6 * 1000)
    head = await store.verify(run)
    assert head == (await store.head(run)).hash

    async def grow(session: Any) -> None:
        # A row far larger than a page (the attacker's): a page of its own, refused.
        await session.execute(
            text("UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r AND seq = :s"),
            {"raw": b"{" + b" " * (5 * MiB) + b"}", "t": store.tenant, "r": str(run), "s": victim},
        )

    await store._unit(grow)
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == victim
    with pytest.raises(CorruptRecordError) as caught:
        [r async for r in store.stream(run, page_bytes=6 * 1000)]
    assert caught.value.seq == victim

    async def delete(session: Any) -> None:
        await session.execute(
            text("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s"),
            {"t": store.tenant, "r": str(run), "s": victim},
        )

    await store._unit(delete)
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == victim + 1  # the record after the gap


async def test_driver_rows_are_the_rows_core_returns_even_when_sqlalchemy_buffers_them(
    store: SqlJournalStore,
) -> None:
    # reads.driver_rows takes the rows from the DBAPI cursor; under a fetch strategy that
    # buffers rows in SQLAlchemy (here a server-side cursor) it must take them from there.
    from sqlalchemy import select

    from agentplane_journal.db.statements import RECORD_COLUMNS
    from agentplane_journal.journal.reads import _driver_rows

    run = await _run_of(store, 1200)
    stmt = select(*RECORD_COLUMNS).where(Journal.run_id == str(run)).order_by(Journal.seq)
    buffered = stmt.execution_options(stream_results=True, max_row_buffer=100)

    async def unit(session: Any) -> tuple[list[Any], ...]:
        conn = await session.connection()
        core = [tuple(row) for row in await conn.execute(stmt)]
        plain = await conn.run_sync(_driver_rows, stmt, None)
        streamed = await conn.run_sync(_driver_rows, buffered, None)
        return core, [tuple(r) for r in plain], [tuple(r) for r in streamed]

    core, plain, streamed = await store._unit(unit, read_only=True)
    assert len(core) == 1200 and plain == core and streamed == core
