"""What an audit enumerates (``journal/audits.py``: ``audit_runs``, ``read_runs``), on both
dialects: runs with a record or only a seal, in this tenant only, paged strictly after
``after``, bounded by ``limit``, in the caller's transaction when given one.

Written against the mutants that survived tools/mutation.py audit_reads (the existing tests
page by an ``after`` they always pass, and never seal a run without records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from agentplane_journal import RunId, SqlJournalStore

from support.admissions import admit, sql
from support.helpers import note


async def _seal_only(store: SqlJournalStore, run: RunId, position: int) -> None:
    """A seal whose run has no records (its records were lost): still a run to audit."""
    await sql(
        store,
        "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome) "
        "VALUES (:t, :r, :h, :i, 0, 'x')",
        r=str(run),
        h=bytes(32),
        i=position,
    )


async def test_runs_with_records_or_only_a_seal_are_enumerated_in_order(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    other: SqlJournalStore = await make_store(tenant=store.tenant + "-other")
    written = [await admit(store, None) for _ in range(3)]
    sealed_only = [RunId.generate() for _ in range(2)]
    for position, run in enumerate(sealed_only):
        await _seal_only(store, run, position)
    await _seal_only(other, RunId.generate(), 0)  # another tenant's seal: never listed here
    await admit(other, None)
    every = sorted(map(str, written + sealed_only))
    assert await store.audit_runs() == every  # after=None, the default limit
    assert await store.audit_runs(limit=2) == every[:2]
    for i, after in enumerate(every):
        assert await store.audit_runs(after=after) == every[i + 1 :]
        assert await store.audit_runs(after=after, limit=1) == every[i + 1 : i + 2]


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_limit_below_one_is_refused_naming_it(store: SqlJournalStore, limit: int) -> None:
    with pytest.raises(ValueError, match=r"^limit must be between 1 and"):
        await store.audit_runs(limit=limit)


async def test_a_page_budget_below_one_byte_is_refused_naming_it(store: SqlJournalStore) -> None:
    run = await admit(store, None)
    with pytest.raises(ValueError, match=r"^page_bytes must be between 1 and"):
        await store.read_runs([run], page_bytes=0)


async def test_audit_runs_reads_in_the_callers_transaction(store: SqlJournalStore) -> None:
    run = RunId.generate()
    lease = await store.acquire(run, "host", 60)
    sessions = async_sessionmaker(store.engine, expire_on_commit=False)
    async with sessions() as session, session.begin():
        await store.append(lease.epoch, [note(run, "uncommitted")], session=session)
        assert await store.audit_runs(session=session) == [str(run)]


async def test_text_after_is_checked_naming_it(store: SqlJournalStore) -> None:
    with pytest.raises(ValueError, match=r"^after "):
        await store.audit_runs(after="run_\x00")


async def test_a_hostile_run_id_sorting_first_is_still_enumerated(
    make_store: Callable[..., Any], dialect: str
) -> None:
    """No ``after`` means from the very first stored id, not from some text that sorts
    low: a stored run id that is not one (``Mallory`` sorts before ``None``) is listed too."""
    if dialect != "sqlite":
        pytest.skip("PostgreSQL's column checks refuse a run id that is not one")
    store: SqlJournalStore = await make_store()
    run = await admit(store, None)
    await sql(
        store,
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "VALUES (:t, 'Mallory', 1, 0, 'Note', :z, :z, X'7B7D')",
        z=bytes(32),
    )
    assert await store.audit_runs() == ["Mallory", str(run)]
