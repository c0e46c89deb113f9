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
from sqlalchemy import text

from agentplane_journal import Digest, SqlJournalStore, leaf_hash, root
from agentplane_journal.journal import log_audit

from support.checks_tools import around_checks
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


# Seven leaves: the stored tree holds (0, 0..6), (1, 0..2) and (2, 0). Each edit, the
# position the audit names, a word of its detail, and the rows the rebuild rewrites.
TREE_EDITS: list[tuple[str, dict[str, int], int, str, int]] = [
    (f"UPDATE log_tree SET hash = :h {_NODE}", {"lv": 0, "ix": 5}, 5, "not the seal's hash", 1),
    (
        f"UPDATE log_tree SET hash = :h {_NODE}",
        {"lv": 1, "ix": 1},
        2,
        "does not hash its children",
        1,
    ),
    (f"DELETE FROM log_tree {_NODE}", {"lv": 2, "ix": 0}, 0, "is missing", 1),
    (f"UPDATE log_tree SET run_id = NULL {_NODE}", {"lv": 0, "ix": 3}, 3, "names run None", 1),
    (f"DELETE FROM log_tree {_NODE}", {"lv": 0, "ix": 6}, 6, "is missing", 1),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 1, 3, :h)",
        {},
        7,
        "beyond its 7 leaves",
        1,
    ),
    (
        "INSERT INTO log_tree (tenant, level, idx, hash) VALUES (:t, 0, 9, :h)",
        {},
        7,
        "holds 10 leaves, but 7 runs are sealed",
        1,
    ),
    (f"UPDATE log_tree SET level = -1 {_NODE}", {"lv": 1, "ix": 1}, 2, "is missing", 2),
]


@pytest.mark.parametrize("edit", range(len(TREE_EDITS)))
async def test_an_edited_tree_is_named_at_its_first_bad_position_and_rebuilt(
    make_store: Callable[..., Any], edit: int
) -> None:
    statement, where, position, detail, rewritten = TREE_EDITS[edit]
    store: SqlJournalStore = await make_store(signer=SIGNER)
    await _log(store)
    await _sql(store, statement, h=bytes(32), lv=where.get("lv"), ix=where.get("ix"))
    audit = await store.audit_log()
    assert (audit.first_bad, audit.size, audit.repaired) == (position, 7, 0), audit
    assert detail in (audit.detail or ""), audit
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired, rebuilt.kept) == (position, rewritten, 0), rebuilt
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


# A seal's log_index made no position: the largest integer (on which the next seal would
# overflow) or TEXT (SQLite) on the last seal, a fraction (SQLite) that keeps its rank, and
# a negative one that moves a seal first (the renumbering keeps that new order).
@pytest.mark.parametrize(
    ("value", "seal", "around", "sqlite_only"),
    [
        (str(BIG), 6, (), False),
        ("-7", 4, ("run_seal",), False),
        ("'last'", 6, (), True),
        ("log_index + 0.5", 6, (), True),
    ],
)
async def test_a_seal_whose_log_index_is_no_position_is_renumbered_in_order(
    make_store: Callable[..., Any],
    dialect: str,
    value: str,
    seal: int,
    around: tuple[str, ...],
    sqlite_only: bool,
) -> None:
    if sqlite_only and dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse this value")
    store: SqlJournalStore = await make_store(signer=SIGNER)
    log = await _log(store)
    await _sql(
        store,
        f"UPDATE run_seal SET log_index = {value} WHERE tenant = :t AND run_id = :r",
        around=around,
        r=log[seal][0],
    )
    order = [run for run, _ in await _seals(store)]
    where = order.index(log[seal][0])  # its rank
    audit = await store.audit_log()
    assert audit.first_bad == where and "not a position" in (audit.detail or ""), audit
    rebuilt = await store.reindex_log()
    assert rebuilt.first_bad == where, rebuilt
    assert "renumbered in their order" in (rebuilt.detail or ""), rebuilt
    assert await _seals(store) == [(run, i) for i, run in enumerate(order)]
    assert (await store.audit_log()).ok
    await _root_is_the_seals(store)
    late = await honest_run(store, seal=True)  # the counter goes on from the last rank
    assert (await store.inclusion_proof(late.run)).index == 7  # type: ignore[union-attr]


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
    assert audit.first_bad == 7 and "log counter holds" in (audit.detail or ""), audit
    rebuilt = await store.reindex_log()
    assert (rebuilt.first_bad, rebuilt.repaired) == (7, 1), rebuilt
    assert "it was reset" in (rebuilt.detail or "")
    assert (await store.audit_log()).ok
    late = await honest_run(store, seal=True)
    assert (await store.inclusion_proof(late.run)).index == 7  # type: ignore[union-attr]


async def test_an_edited_seal_is_kept_and_stays_reported(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    log = await _log(store)
    before = await store.checkpoint()
    await _sql(
        store,
        "UPDATE run_seal SET chain_head = :h WHERE tenant = :t AND run_id = :r",
        h=bytes(range(32)),
        r=log[1][0],
    )
    for report in (await store.audit_log(), await store.reindex_log(), await store.audit_log()):
        assert (report.first_bad, report.kept, report.repaired) == (1, 1, 0), report
        assert "no rebuild can repair a seal" in (report.detail or ""), report
    assert await store.checkpoint() == before  # the tree keeps the leaf it holds for the run
