"""The admission audit's page-wise scan of ``RunAdmitted`` records (``journal/admission_audit.py``:
``_scan_page``), on both dialects: how many statements it takes and what each reads.

The scan reads the records' sizes :data:`~agentplane_journal.journal.admission_audit.SCAN_PAGE`
at a time, then the records themselves in statements of at most
:data:`~agentplane_journal.journal.reads.PAGE_BYTES` bytes (one record more than that if it
is alone), as few as that allows; so whatever it reads, the statements it issues are its
memory bound, and they are counted here (the statements on ``journal`` the engine runs).
Each statement reads this tenant's admissions only, between two positions that another
tenant's runs may sit between; and the positions are ordered by run and seq whatever order
the table's heap holds them in (on PostgreSQL, with index scans off, so that the database
must sort: SQLite reads its primary key's index in order whatever a statement asks).

Written against the mutants of ``_scan_page`` that survived tools/mutation.py admission_scan
(issue 39).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from agentplane_journal import RunId, SqlJournalStore, canonical_bytes
from agentplane_journal.journal import admission_audit, reads

from support.admissions import admit, sql


@contextmanager
def _statements(store: SqlJournalStore) -> Iterator[list[str]]:
    """The scan's statements while the block runs: ``sizes`` (a page of positions and
    sizes) and ``records`` (the rows between two positions), in the order issued."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM journal" not in statement or "RunAdmitted" not in str(args[0]):
            return
        if "length(journal.raw)" in statement:
            seen.append("sizes")
        elif ">=" in statement:
            seen.append("records")

    event.listen(store.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", before)


async def _sizes(store: SqlJournalStore) -> list[int]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT length(raw) FROM journal WHERE tenant = :t AND kind = 'RunAdmitted' "
                "ORDER BY run_id, seq"
            ),
            {"t": store.tenant},
        )
        return [int(r[0]) for r in rows]


async def test_a_page_of_positions_is_read_scan_page_at_a_time(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        await admit(store, f"k{i}")
    monkeypatch.setattr(admission_audit, "SCAN_PAGE", 2)
    with _statements(store) as seen:
        audit = await store.audit_admissions()
    assert audit.ok and audit.admissions == 5
    # Pages of 2, 2 and 1 positions; each page's records fit one statement.
    assert seen == ["sizes", "records"] * 3


@pytest.mark.parametrize("fit", [1, 2, 3])
async def test_each_statement_holds_as_many_records_as_fit_its_bytes(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch, fit: int
) -> None:
    for i in range(5):
        await admit(store, f"k{i}")  # records of one size: keys and run ids of one length
    sizes = await _sizes(store)
    assert len(set(sizes)) == 1
    # exactly `fit` records' bytes a statement (one byte less for a single record: it is
    # read alone all the same)
    monkeypatch.setattr(reads, "PAGE_BYTES", fit * sizes[0] - (fit == 1))
    with _statements(store) as seen:
        audit = await store.audit_admissions()
    assert audit.ok and audit.admissions == 5
    assert seen == ["sizes"] + ["records"] * -(-5 // fit)


async def test_a_statement_reads_this_tenants_admissions_only(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    other: SqlJournalStore = await make_store(tenant=store.tenant + "-other")
    mine: list[RunId] = []
    for i in range(4):  # run ids taken in turn: the other tenant's sort between ours
        mine.append(await admit(store, f"mine{i}"))
        await admit(other, f"theirs{i}")
    await sql(other, "DELETE FROM run_admission WHERE tenant = :t")  # theirs held by no row
    audit = await store.audit_admissions()
    assert (audit.ok, audit.admissions, audit.unclaimed, audit.notes) == (True, 4, 0, [])


def _forged_row(run: RunId, seq: int) -> dict[str, Any]:
    """A hash-valid ``RunAdmitted`` at ``seq`` whose key no writer writes (a number): a
    ``bad-record`` finding that names its run and seq."""
    body = {"seq": seq, "run": run.ulid, "epoch": 0, "v": 4, "kind": "RunAdmitted"}
    raw = canonical_bytes({**body, "capability": "c", "idempotency_key": seq})
    return {"r": str(run), "s": seq, "h": hashlib.sha256(bytes(32) + raw).digest(), "raw": raw}


def _heap_order(store: SqlJournalStore, dialect: str) -> None:
    """PostgreSQL: every new connection of ``store`` reads tables in heap order (no index
    scans), so the positions come in the order a statement's ORDER BY makes them."""
    if dialect != "postgresql":
        return

    def connect(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        for setting in ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan"):
            cursor.execute(f"SET {setting} = off")
        cursor.close()

    event.listen(store.engine.sync_engine, "connect", connect)


@pytest.mark.parametrize(("page", "page_bytes"), [(2, 1), (1000, 10**9)])
async def test_positions_are_scanned_in_order_whatever_order_the_heap_holds(
    make_store: Callable[..., Any],
    dialect: str,
    monkeypatch: pytest.MonkeyPatch,
    page: int,
    page_bytes: int,
) -> None:
    writer: SqlJournalStore = await make_store()
    runs = sorted((RunId.generate() for _ in range(2)), key=str)
    # The last run's rows first, each run's last seq first.
    for run in reversed(runs):
        for seq in (3, 2, 1):
            await sql(
                writer,
                "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
                "VALUES (:t, :r, :s, 0, 'RunAdmitted', :p, :h, :raw)",
                p=bytes(32),
                **_forged_row(run, seq),
            )
    store: SqlJournalStore = await make_store()
    _heap_order(store, dialect)
    await store.engine.dispose()  # no connection opened before the settings
    monkeypatch.setattr(admission_audit, "SCAN_PAGE", page)
    monkeypatch.setattr(reads, "PAGE_BYTES", page_bytes)
    audit = await store.audit_admissions()
    found = [(f.what, f.run, f.seq) for f in audit.findings]
    assert found == [("bad-record", str(run), seq) for run in runs for seq in (1, 2, 3)]
