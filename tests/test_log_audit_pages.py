"""The stored tree's audit and rebuild, page by page (``journal/log_audit.py``), on both
dialects, in pages of two leaves so that a log of seven sealed runs crosses four of them.

What the slow tests show on 5,000 leaves (``tests/test_log.py``) and through the command
line (``tests/test_log_tamper.py``), fast enough for mutation testing: each edit of the
stored tree or of the seals is named at the first position it breaks, with what is wrong;
the rebuild rewrites exactly the rows that disagree, the audit is clean again and the
checkpoint's root is the seals' own; the seals' ``log_index`` values are renumbered densely
in their order and the log counter reset when either is no position; an edited seal is
kept and stays reported; progress is told page by page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, text

from agentplane_journal import Digest, RunId, SqlJournalStore, leaf_hash, root
from agentplane_journal.journal import log_audit
from agentplane_journal.tlog.merkle import raw_leaf

from support.checks_tools import around_checks
from support.helpers import note
from support.logs import bulk_seal
from support.tamper import SIGNER, honest_run

BIG = 2**63 - 1
PAGE = 2  # leaves per audit page here (4096 in production)
_NODE = "WHERE tenant = :t AND level = :lv AND idx = :ix"


@pytest.fixture(autouse=True)
def _small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_audit, "AUDIT_PAGE", PAGE)


async def _log(store: SqlJournalStore) -> list[tuple[str, bytes]]:
    """Seven sealed runs: three with their records (leaves 0..2), four adopted without
    them (3..6); ``(run id, chain head)`` per leaf."""
    for _ in range(3):
        await honest_run(store, seal=True)
    heads = [bytes(Digest.of(f"adopted/{i}".encode())) for i in range(4)]
    adopted = [
        (f"run_01J0000000000000000000000{i}", h, 1_700_000_000, "x") for i, h in enumerate(heads)
    ]
    await bulk_seal(store, adopted)
    return [(str(run), bytes(head)) for run, head in await store.sealed_runs()]


async def _sql(
    store: SqlJournalStore, statement: str, *, around: tuple[str, ...] = (), **params: object
) -> None:
    async with store.engine.begin() as conn, around_checks(conn, *around):
        await conn.execute(text(statement), {"t": store.tenant, **params})


async def _seals(store: SqlJournalStore) -> list[tuple[str, object]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT run_id, log_index FROM run_seal WHERE tenant = :t ORDER BY log_index"),
            {"t": store.tenant},
        )
        return [(r[0], r[1]) for r in rows]


async def _root_is_the_seals(store: SqlJournalStore) -> None:
    leaves = [leaf_hash(head) for _, head in await store.sealed_runs()]
    checkpoint = await store.checkpoint()
    assert (checkpoint.size, checkpoint.root) == (len(leaves), root(leaves))


async def test_a_clean_log_is_audited_page_by_page(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    told: list[tuple[int, int]] = []
    audit = await store.audit_log(lambda done, total: told.append((done, total)))
    assert (audit.ok, audit.size, audit.repaired, audit.kept) == (True, 7, 0, 0)
    assert told == [(2, 7), (4, 7), (6, 7), (7, 7)]
    told.clear()
    rebuilt = await store.reindex_log(lambda done, total: told.append((done, total)))
    assert (rebuilt.ok, rebuilt.size, rebuilt.repaired) == (True, 7, 0)
    assert told == [(2, 7), (4, 7), (6, 7), (7, 7)]


# Seven leaves: the stored tree holds (0, 0..6), (1, 0..2) and (2, 0). Each edit: the
# position the audit names, a word of its detail, the rows the rebuild rewrites or removes,
# and whether only SQLite can store it (its columns take any storage class). A row that is
# no node a seal writes is left out of the pages ("is missing" where it stood) and removed.
TREE_EDITS: list[tuple[str, dict[str, int], int, str, int, bool]] = [
    (
        f"UPDATE log_tree SET hash = :h {_NODE}",
        {"lv": 0, "ix": 5},
        5,
        "not the seal's hash",
        1,
        False,
    ),
    (
        f"UPDATE log_tree SET hash = :h {_NODE}",
        {"lv": 1, "ix": 1},
        2,
        "(level 1, index 1) does not hash its children",
        1,
        False,
    ),
    (f"DELETE FROM log_tree {_NODE}", {"lv": 2, "ix": 0}, 0, "is missing", 1, False),
    (
        f"UPDATE log_tree SET run_id = NULL {_NODE}",
        {"lv": 0, "ix": 3},
        3,
        "(level 0, index 3) names run None, not run_01J00000000000000000000000",
        1,
        False,
    ),
    (f"DELETE FROM log_tree {_NODE}", {"lv": 0, "ix": 6}, 6, "is missing", 1, False),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 1, 3, :h)",
        {},
        7,
        "beyond its 7 leaves",
        1,
        False,
    ),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 1, 9, :h)",
        {},
        18,
        "the stored tree holds node (level 1, index 9) beyond its 7 leaves",
        1,
        False,
    ),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 0, 9, :h)",
        {},
        7,
        "holds 10 leaves, but 7 runs are sealed",
        1,
        False,
    ),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, -1, 0, :h)",
        {},
        7,
        "the stored tree holds 1 row(s) that are no node a seal writes (a level outside "
        "0..62, a negative index, a hash not of 32 bytes, or a value of the wrong type)",
        1,
        False,
    ),
    (f"UPDATE log_tree SET level = -1 {_NODE}", {"lv": 1, "ix": 1}, 2, "is missing", 2, False),
    (f"UPDATE log_tree SET idx = -1 {_NODE}", {"lv": 1, "ix": 1}, 2, "is missing", 2, False),
    (f"UPDATE log_tree SET hash = :short {_NODE}", {"lv": 1, "ix": 1}, 2, "is missing", 1, False),
    (
        f"UPDATE log_tree SET level = CAST('1' AS BLOB) {_NODE}",
        {"lv": 1, "ix": 1},
        2,
        "is missing",
        2,
        True,
    ),
    # a fraction that int() would read as leaf 0's index
    (f"UPDATE log_tree SET idx = 0.5 {_NODE}", {"lv": 0, "ix": 1}, 1, "is missing", 1, True),
    (
        f"UPDATE log_tree SET hash = '0123456789abcdef0123456789abcdef' {_NODE}",
        {"lv": 1, "ix": 1},
        2,
        "is missing",
        1,
        True,
    ),
    (
        f"UPDATE log_tree SET run_id = CAST(run_id AS BLOB) {_NODE}",
        {"lv": 0, "ix": 2},
        2,
        "is missing",
        1,
        True,
    ),
]


@pytest.mark.parametrize("edit", range(len(TREE_EDITS)))
async def test_an_edited_tree_is_named_at_its_first_bad_position_and_rebuilt(
    make_store: Callable[..., Any], dialect: str, edit: int
) -> None:
    statement, where, position, detail, rewritten, sqlite_only = TREE_EDITS[edit]
    if sqlite_only and dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse this value")
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    await _sql(store, statement, h=bytes(32), short=b"\x01", lv=where.get("lv"), ix=where.get("ix"))
    audit = await store.audit_log()
    assert (audit.first_bad, audit.size, audit.repaired) == (position, 7, 0), audit
    assert audit.detail is not None and audit.detail.endswith(detail), audit
    rebuilt = await store.reindex_log()
    # (a rebuild names a row beyond the log at the log's end, where it sweeps it)
    at = min(position, 7)
    assert (rebuilt.first_bad, rebuilt.repaired, rebuilt.kept) == (at, rewritten, 0), rebuilt
    if at == 7:
        assert rebuilt.detail == "1 stored row(s) beyond the 7 sealed runs or no node at all"
    assert (await store.audit_log()).ok
    await _root_is_the_seals(store)


async def test_a_seal_the_tree_missed_is_added_to_it(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    await _sql(
        store,
        "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome) "
        "VALUES (:t, 'run_01J00000000000000000000009', :h, 100000, 0, 'x')",
        h=bytes(32),
    )
    # Its leaf (0, 7) completes (1, 3), (2, 1) and (3, 0), which covers position 0.
    audit = await store.audit_log()
    assert (audit.first_bad, audit.size, audit.detail) == (
        0,
        8,
        "stored node (level 3, index 0) is missing",
    ), audit
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (0, 4), rebuilt
    assert (await store.audit_log()).ok
    await _root_is_the_seals(store)


async def _counter(store: SqlJournalStore) -> object:
    async with store.engine.connect() as conn:
        return (
            await conn.execute(
                text("SELECT value FROM journal_counter WHERE name = 'log_position/' || :t"),
                {"t": store.tenant},
            )
        ).scalar_one_or_none()


async def _auditor(make_store: Callable[..., Any], dialect: str) -> SqlJournalStore:
    """Another store of the tenant whose PostgreSQL connections read tables in heap order
    (no index scans), so a statement gets its rows in the order its ORDER BY makes them
    (SQLite reads an index in order whatever the statement says). An edited row's new
    version lies at the end of the heap."""
    auditor: SqlJournalStore = await make_store(signer=SIGNER)
    if dialect == "postgresql":

        def connect(dbapi_connection: Any, _: Any) -> None:
            cursor = dbapi_connection.cursor()
            for setting in ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan"):
                cursor.execute(f"SET {setting} = off")
            cursor.close()

        event.listen(auditor.engine.sync_engine, "connect", connect)
        await auditor.engine.dispose()
    return auditor


# A seal's log_index made no position: the largest integer (on which the next seal would
# overflow) or TEXT (SQLite) on the last seal, a fraction (SQLite) that keeps its rank, and
# a negative one that moves a seal first (the renumbering keeps that new order). The rows
# rewritten: the seals moved, the counter reset, and the tree's nodes a new order changes.
@pytest.mark.parametrize(
    ("value", "seal", "around", "sqlite_only", "repaired"),
    [
        (str(BIG), 6, (), False, 2),
        ("-7", 4, ("run_seal",), False, 15),
        ("'last'", 6, (), True, 2),
        ("log_index + 0.5", 6, (), True, 2),
    ],
)
async def test_a_seal_whose_log_index_is_no_position_is_renumbered_in_order(
    make_store: Callable[..., Any],
    dialect: str,
    value: str,
    seal: int,
    around: tuple[str, ...],
    sqlite_only: bool,
    repaired: int,
) -> None:
    if sqlite_only and dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse this value")
    store: SqlJournalStore = await make_store(signer=SIGNER)
    log = await _log(store)
    moved = log[seal][0]
    await _sql(
        store,
        f"UPDATE run_seal SET log_index = {value} WHERE tenant = :t AND run_id = :r",
        around=around,
        r=moved,
    )
    seals = await _seals(store)
    order = [run for run, _ in seals]
    where = order.index(moved)  # its rank
    auditor = await _auditor(make_store, dialect)
    audit = await auditor.audit_log()
    assert audit.first_bad == where, audit
    assert audit.detail == (
        f"the seal of {moved} has log_index {seals[where][1]!r}, not a position "
        f"0..{log_audit.MAX_LOG_INDEX} (`reindex-log` renumbers the seals in their order)"
    )
    rebuilt = await auditor.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (where, repaired), rebuilt
    assert rebuilt.detail == (
        f"the seal of {moved} has log_index {seals[where][1]!r}, not a position "
        f"0..{log_audit.MAX_LOG_INDEX}: the seals were renumbered in their order"
    )
    assert await _seals(store) == [(run, i) for i, run in enumerate(order)]
    assert await _counter(store) == 6
    assert (await auditor.audit_log()).ok
    await _root_is_the_seals(store)
    late = await honest_run(store, seal=True)  # the counter goes on from the last rank
    assert (await _seals(store))[-1] == (str(late.run), 7)


async def test_renumbering_steps_around_the_values_seals_still_hold(
    make_store: Callable[..., Any],
) -> None:
    # The first seal at -1 (no position), the last at 7 (a position, past a gap): each is
    # moved through a temporary value that no seal holds, never onto the last one's 7.
    store: SqlJournalStore = await make_store(signer=SIGNER)
    log = await _log(store)
    await _sql(
        store,
        "UPDATE run_seal SET log_index = -1 WHERE tenant = :t AND run_id = :r",
        around=("run_seal",),
        r=log[0][0],
    )
    await _sql(
        store, "UPDATE run_seal SET log_index = 7 WHERE tenant = :t AND run_id = :r", r=log[6][0]
    )
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (0, 3), rebuilt  # two seals, the counter
    assert await _seals(store) == [(run, i) for i, (run, _) in enumerate(log)]
    assert (await store.audit_log()).ok


@pytest.mark.parametrize("value", [str(BIG), "-5"])
async def test_a_log_counter_that_is_no_position_is_named_and_reset(
    make_store: Callable[..., Any], value: str
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    await _sql(
        store, f"UPDATE journal_counter SET value = {value} WHERE name = 'log_position/' || :t"
    )
    audit = await store.audit_log()
    assert audit.first_bad == 7, audit
    assert audit.detail == (
        f"the log counter holds {value}, not a position: the next seal would fail "
        "(`reindex-log` resets it)"
    )
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (7, 1), rebuilt
    assert rebuilt.detail == f"the log counter holds {value}, not a position: it was reset"
    assert await _counter(store) == 6
    assert (await store.audit_log()).ok
    late = await honest_run(store, seal=True)
    assert (await _seals(store))[-1] == (str(late.run), 7)


async def test_an_empty_log_is_clean_and_its_lost_counter_starts_again(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    audit = await store.audit_log()
    assert (audit.ok, audit.size) == (True, 0), audit
    await _sql(
        store,
        f"INSERT INTO journal_counter (name, value) VALUES ('log_position/' || :t, {BIG})",
    )
    assert (await store.audit_log()).first_bad == 0
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (0, 1), rebuilt
    assert await _counter(store) == -1
    first = await honest_run(store, seal=True)
    assert await _seals(store) == [(str(first.run), 0)]
    assert (await store.audit_log()).ok


async def test_a_tree_lost_whole_is_named_and_rebuilt(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    await _sql(store, "DELETE FROM log_tree WHERE tenant = :t")
    await _sql(
        store, "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, -1, 0, :h)", h=bytes(32)
    )
    audit = await store.audit_log()
    assert (audit.first_bad, audit.size) == (0, 7), audit
    rebuilt = await store.reindex_log()
    # 7 + 3 + 1 nodes written, the last page's leaf among them, and the hostile row swept
    assert (rebuilt.first_bad, rebuilt.repaired) == (0, 12), rebuilt
    assert (await store.audit_log()).ok
    await _root_is_the_seals(store)


async def test_an_audit_checks_the_log_its_census_counted(make_store: Callable[..., Any]) -> None:
    """Seals that land after the census are the next audit's: this one checks seven."""
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    units = 0

    async def unit(fn: Callable[[Any], Any], primary: bool = False) -> Any:
        nonlocal units
        result = await store._unit(fn, read_only=True)
        units += 1
        if units == 1:  # the census: two seals land before the first page
            await bulk_seal(
                store,
                [(f"run_01J000000000000000000001{i}", bytes(32), 0, "x") for i in range(2)],
            )
        return result

    told: list[tuple[int, int]] = []
    audit = await log_audit.audit_pages(store._log, unit, False, lambda d, t: told.append((d, t)))
    assert (audit.ok, audit.size) == (True, 7), audit
    assert told == [(2, 7), (4, 7), (6, 7), (7, 7)]
    assert (await store.audit_log()).size == 9


# A seal edited (its chain head no longer the one its run's records end at, or not 32
# bytes, or on SQLite not bytes at all): no rebuild can repair it, so it is kept, counted and
# stays reported, and the tree keeps the leaf it holds for the run; where the tree lost that
# leaf too, the rebuild writes the seal's own leaf (of no bytes, for a head that is none).
EDITED_SEALS: list[tuple[str, str, bool]] = [
    (
        "X'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'",
        "holds a chain head its run's records do not end at (the seal or the records were edited)",
        False,
    ),
    ("X'01'", "holds a chain head of 1 bytes, not 32", False),
    ("'0123456789abcdef0123456789abcdef'", "holds text as its chain head, not 32 bytes", True),
]


@pytest.mark.parametrize("edit", range(len(EDITED_SEALS)))
async def test_an_edited_seal_is_kept_and_stays_reported(
    make_store: Callable[..., Any], dialect: str, edit: int
) -> None:
    head, problem, sqlite_only = EDITED_SEALS[edit]
    if sqlite_only and dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse this value")
    sealed = bytes.fromhex(head[2:-1]) if head.startswith("X'") else b""  # what a leaf hashes
    if dialect == "postgresql":
        head = head.replace("X'", "'\\x")
    store: SqlJournalStore = await make_store(signer=SIGNER)
    log = await _log(store)
    before = await store.checkpoint()
    for run, _ in (log[1], log[2]):
        await _sql(
            store,
            f"UPDATE run_seal SET chain_head = {head} WHERE tenant = :t AND run_id = :r",
            r=run,
        )
    for report in (await store.audit_log(), await store.reindex_log(), await store.audit_log()):
        assert (report.first_bad, report.kept, report.repaired) == (1, 2, 0), report
        assert report.detail == (
            f"the seal of {log[1][0]} {problem}: no rebuild can repair a seal "
            f"(`verify {log[1][0]}` shows the run)"
        ), report
    assert await store.checkpoint() == before  # the tree keeps the leaves it holds for them
    await _sql(store, "DELETE FROM log_tree WHERE tenant = :t AND level = 0 AND idx = 1")
    rebuilt = await store.reindex_log()
    # the leaf, and the two nodes above it, which now hash it: named at leaf 0, their first
    assert (rebuilt.first_bad, rebuilt.kept, rebuilt.repaired) == (0, 2, 3), rebuilt
    async with store.engine.connect() as conn:
        leaf = (
            await conn.execute(
                text("SELECT hash FROM log_tree WHERE tenant = :t AND level = 0 AND idx = 1"),
                {"t": store.tenant},
            )
        ).scalar_one()
    assert bytes(leaf) == raw_leaf(sealed)


async def _snapshot(store: SqlJournalStore) -> list[Any]:
    """Every log row of the tenant: its seals, its tree, its counter."""
    async with store.engine.connect() as conn:
        out: list[Any] = []
        for table, order in (("run_seal", "run_id"), ("log_tree", "level, idx")):
            rows = await conn.execute(
                text(f"SELECT * FROM {table} WHERE tenant = :t ORDER BY {order}"),
                {"t": store.tenant},
            )
            out.append([tuple(r) for r in rows])
    return [*out, await _counter(store)]


async def test_another_tenants_log_is_none_of_this_audits_business(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    other: SqlJournalStore = await make_store(tenant=store.tenant + "-other", signer=SIGNER)
    log = await _log(store)
    # The other tenant: a longer log under the same run ids (other heads, so other nodes at
    # the same positions), more records under one of this tenant's sealed runs, a hostile
    # node and a seal whose log_index is no position.
    shared = log[0][0]
    lease = await other.acquire(RunId.parse(shared), "other", 60)
    await other.append(lease.epoch, [note(RunId.parse(shared)) for _ in range(6)])
    theirs = [(run, bytes(Digest.of(run.encode())), 0, "x") for run, _ in log[3:]]
    theirs += [(f"run_01J000000000000000000002{i}", bytes(32), 0, "x") for i in range(5)]
    await bulk_seal(other, theirs)
    await _sql(
        other, "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, -1, 0, :h)", h=bytes(32)
    )
    await _sql(
        other,
        f"UPDATE run_seal SET log_index = {BIG} WHERE tenant = :t AND run_id = :r",
        r=theirs[-1][0],
    )
    before = await _snapshot(other)
    audit = await store.audit_log()
    assert (audit.ok, audit.size) == (True, 7), audit
    rebuilt = await store.reindex_log()
    assert (rebuilt.ok, rebuilt.repaired) == (True, 0), rebuilt
    # This tenant's last seal (a run id the other tenant has sealed too) made no position,
    # and its counter lost: renumbered and reset from this tenant's seals alone.
    await _sql(
        store,
        f"UPDATE run_seal SET log_index = {BIG} WHERE tenant = :t AND run_id = :r",
        r=log[6][0],
    )
    await _sql(store, "UPDATE journal_counter SET value = -5 WHERE name = 'log_position/' || :t")
    # and its leaf lost: rewritten here only, though the other tenant's leaf names that run
    await _sql(store, "DELETE FROM log_tree WHERE tenant = :t AND level = 0 AND idx = 6")
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (6, 3), rebuilt
    assert await _seals(store) == [(run, i) for i, (run, _) in enumerate(log)]
    assert await _counter(store) == 6
    assert (await store.audit_log()).ok
    assert await _snapshot(other) == before
