"""What ``read_runs`` and ``audit_runs`` (``journal/audits.py``) answer, to the byte, the
row and the database, on both dialects.

A page of runs is filled to exactly its byte budget (a run without records costs nothing),
counts and returns this tenant's rows only (another tenant may hold a run of the same id),
stops a run's records at its first corrupt row, carries each run's seal and leaf, reads in
the caller's transaction when given one, goes to the read engine (a replica) when there is
one, reads the sizes of the runs asked only, and returns each run's records in seq order
and the runs in id order whatever order the table's heap holds them in (on PostgreSQL,
with index scans turned off in the reading transaction, so the database must sort).

Written against the mutants tools/mutation.py audit_reads left alive (issue 39).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import Record
from agentplane_journal.db.driver_rows import driver_rows
from agentplane_journal.db.models import Journal
from agentplane_journal.journal import audits

from support.admissions import sql
from support.helpers import admitted, note

# Index scans off in the reading transaction: the planner must read the heap in the order
# it holds the rows and sort what the statement asks, so an ORDER BY left out shows
# (SQLite reads its primary key's index in order whatever the statement says). With sorts
# off as well, a UNION or DISTINCT is hashed rather than sorted, so one left unordered shows
# too (a sort still runs where the statement asks for one: nothing else can answer it).
_HEAP_ORDER = [
    "SET LOCAL enable_indexscan = off",
    "SET LOCAL enable_indexonlyscan = off",
    "SET LOCAL enable_bitmapscan = off",
]


async def _run(store: SqlJournalStore, run: RunId, notes: int, pad: int = 0) -> int:
    """A run of a ``RunAdmitted`` and ``notes`` notes of ``pad`` bytes; its lease's epoch."""
    lease = await store.acquire(run, "audit", 60)
    await store.append(lease.epoch, [admitted(run)] + [note(run, "x" * pad) for _ in range(notes)])
    return lease.epoch


async def _stored(store: SqlJournalStore, run: RunId) -> int:
    return sum(len(r.raw) for r in await store.read(run))


async def test_a_page_is_filled_to_exactly_its_byte_budget(store: SqlJournalStore) -> None:
    a, b, empty = RunId.generate(), RunId.generate(), RunId.generate()
    await _run(store, a, 2, pad=100)
    await _run(store, b, 3, pad=50)
    sa, sb = await _stored(store, a), await _stored(store, b)
    # Both runs fit a budget of their bytes exactly; a run without records costs nothing.
    page = await store.read_runs([a, b, empty], page_bytes=sa + sb)
    assert list(page) == [a, b, empty]
    assert all(read.whole is True for read in page.values())
    assert page[a].records == await store.read(a) and page[empty].records == []
    assert list(await store.read_runs([a, b], page_bytes=sa + sb - 1)) == [a]
    # One run of exactly the budget is read whole; a byte less, it comes back unread.
    (read,) = (await store.read_runs([a], page_bytes=sa)).values()
    assert read.whole is True and read.records == await store.read(a)
    (read,) = (await store.read_runs([a], page_bytes=sa - 1)).values()
    assert read.whole is False and read.records == []


async def test_a_run_whose_rows_were_emptied_costs_no_bytes_and_is_read(
    store: SqlJournalStore,
) -> None:
    a, emptied = RunId.generate(), RunId.generate()
    await _run(store, a, 1)
    await _run(store, emptied, 0)
    await sql(
        store,
        "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r",
        raw=b"",
        r=str(emptied),
    )
    page = await store.read_runs([a, emptied], page_bytes=await _stored(store, a))
    assert list(page) == [a, emptied]  # in the page, and named corrupt there
    assert page[emptied].records == [] and page[emptied].error is not None


async def test_a_page_counts_and_reads_this_tenants_rows_only(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    other: SqlJournalStore = await make_store(tenant=store.tenant + "-other")
    run = RunId.generate()
    await _run(store, run, 1)
    await _run(other, run, 5, pad=500)  # the same run id, larger, in another tenant
    mine = await store.read(run)
    (read,) = (await store.read_runs([run], page_bytes=await _stored(store, run))).values()
    assert read.whole is True and read.records == mine


async def test_a_corrupt_row_ends_its_own_runs_records_only(store: SqlJournalStore) -> None:
    bad, good = RunId.generate(), RunId.generate()
    await _run(store, bad, 4)
    await _run(store, good, 2)
    before = await store.read(bad)
    await sql(
        store,
        "UPDATE journal SET kind = 'Forged' WHERE tenant = :t AND run_id = :r AND seq = 3",
        r=str(bad),
    )
    page = await store.read_runs([bad, good])
    assert page[bad].records == before[:2]
    error = page[bad].error
    assert error is not None and error.seq == 3
    assert page[good].records == await store.read(good) and page[good].error is None


async def test_a_page_carries_each_runs_seal_and_leaf(store: SqlJournalStore) -> None:
    runs = [RunId.generate() for _ in range(3)]
    epochs = [await _run(store, run, 1) for run in runs]
    for run, epoch in list(zip(runs, epochs, strict=True))[1:]:
        await store.seal(run, epoch, "succeeded")
    log = await store.sealed_runs()
    page = await store.read_runs(runs)
    assert (page[runs[0]].sealed, page[runs[0]].position) == (None, None)
    for position, (run, head) in enumerate(log):
        assert page[run].position == position
        assert bytes(page[run].sealed) == bytes(head) == bytes(page[run].records[-1].hash)


async def test_read_runs_reads_in_the_callers_transaction(store: SqlJournalStore) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "host", 60)
    sessions = async_sessionmaker(store.engine, expire_on_commit=False)
    async with sessions() as session, session.begin():
        await store.append(lease.epoch, [note(run, "uncommitted")], session=session)
        (read,) = (await store.read_runs([run], session=session)).values()
        assert [r.body["text"] for r in read.records] == ["uncommitted"]


async def test_the_sizes_of_the_runs_asked_only_are_read(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked, others = RunId.generate(), [RunId.generate() for _ in range(3)]
    for run in [asked, *others]:
        await _run(store, run, 1)
    answers: list[list[Any]] = []

    async def counted(session: AsyncSession, stmt: Any, params: Any = None) -> list[Any]:
        rows = await real(session, stmt, params)
        answers.append(rows)
        return rows

    real = driver_rows
    monkeypatch.setattr(audits, "driver_rows", counted)
    await store.read_runs([asked])
    sizes = answers[0]  # run id -> its bytes: the first statement
    assert [row[0] for row in sizes] == [str(asked)]


@pytest.fixture
def two_databases(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> tuple[str, str]:
    if dialect == "sqlite":
        return sqlite_database(), sqlite_database()
    make: Callable[..., str] = request.getfixturevalue("pg_database")
    return make(), make()


async def test_the_audit_reads_go_to_the_read_engine(two_databases: tuple[str, str]) -> None:
    primary_url, replica_url = two_databases
    store = await SqlJournalStore.connect(primary_url, read_url=replica_url)
    try:
        run = RunId.generate()
        await _run(store, run, 1)
        # The "replica" is another database, which has none of it: where each read went
        # shows in its answer.
        assert await store.audit_runs() == []
        (read,) = (await store.read_runs([run])).values()
        assert read.records == [] and read.sealed is None
    finally:
        await store.close()


async def test_the_default_page_of_runs_is_a_thousand(store: SqlJournalStore) -> None:
    runs = sorted(str(RunId.generate()) for _ in range(1001))
    async with store.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, "
                "outcome) VALUES (:t, :r, :h, :i, 0, 'x')"
            ),
            [{"t": store.tenant, "r": r, "h": bytes(32), "i": i} for i, r in enumerate(runs)],
        )
    assert await store.audit_runs() == runs[:1000]
    assert await store.audit_runs(after=runs[999]) == runs[1000:]


def _rows(tenant: str, run: RunId, n: int) -> list[dict[str, Any]]:
    """A run's ``n`` chained note rows, as an append would write them."""
    prev, rows = Digest.ZERO, []
    for seq in range(1, n + 1):
        record = Record.seal(Append(run, "Note", {"text": f"n{seq}"}).body(seq, 1), prev, None)
        rows.append(
            {
                "tenant": tenant,
                "run_id": str(run),
                "seq": seq,
                "epoch": 1,
                "kind": "Note",
                "effect_key": None,
                "prev_hash": bytes(prev),
                "hash": bytes(record.hash),
                "raw": record.raw,
                "key_id": None,
                "signature": None,
                "case_id": None,
            }
        )
        prev = record.hash
    return rows


async def _heap_order(session: AsyncSession, dialect: str, *, sort: bool) -> None:
    if dialect == "postgresql":
        for statement in _HEAP_ORDER:
            await session.execute(text(statement))
        await session.execute(text(f"SET LOCAL enable_sort = {'on' if sort else 'off'}"))


async def test_records_and_runs_come_in_order_whatever_order_the_heap_holds(
    store: SqlJournalStore, dialect: str
) -> None:
    # Runs written last id first, each run's rows last seq first; seal-only runs too
    # (their run_seal rows, last id first), so each side of audit_runs' union is read
    # from a heap in the reverse of the order it must answer.
    written = sorted((RunId.generate() for _ in range(6)), key=str, reverse=True)
    sealed_only = sorted((RunId.generate() for _ in range(6)), key=str, reverse=True)
    rows = [row for run in written for row in reversed(_rows(store.tenant, run, 4))]

    async def unit(session: Any) -> None:
        await session.execute(Journal.__table__.insert(), rows)
        for i, run in enumerate(sealed_only):
            await session.execute(
                text(
                    "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, "
                    "outcome) VALUES (:t, :r, :h, :i, 0, 'x')"
                ),
                {"t": store.tenant, "r": str(run), "h": bytes(32), "i": i},
            )

    await store._unit(unit)
    every = sorted(map(str, written + sealed_only))
    sessions = async_sessionmaker(store.engine, expire_on_commit=False)
    async with sessions() as session, session.begin():
        await _heap_order(session, dialect, sort=True)
        page = await store.read_runs(written, session=session)
        for run in written:
            assert [r.seq for r in page[run].records] == [1, 2, 3, 4]
        await _heap_order(session, dialect, sort=False)
        seen: list[object] = []
        after = None
        for _ in range(len(every)):  # bounded: a page that never ends is a failure, not a hang
            batch = await store.audit_runs(after=after, limit=3, session=session)
            if not batch:
                break
            seen += batch
            after = str(batch[-1])
        assert seen == every
        assert await store.audit_runs(session=session) == every
