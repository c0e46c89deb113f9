"""A first lease fences every append that commits after ``acquire()`` returns, on every path.

An unleased run takes epoch-0 appends. Once an owner's first ``acquire`` has returned, no
epoch-0 append may commit: it is refused with :class:`FencedError` or it committed before.
The danger is a lease row that does not exist yet: ``FOR UPDATE`` on an absent row locks
nothing, so an append that read "no lease" could commit after the lease did. ``acquire``
therefore takes the run mutex first, like every append and seal (``leases.py``).

Each test stops an epoch-0 append at the worst moment (behind another transaction's hold of
the run mutex, or inside its own transaction after the fence), lets a first ``acquire`` of
another store run, and looks, the instant that acquire returns, whether the append's record
is visible. If it is not, the append must never commit. Seen red on the code before this
fix for all three (the hot single-run statement, the group statement, the general unit).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from agentplane_journal import FencedError, RunId, SqlJournalStore

from support.clock import FakeClock
from support.databases import dsn
from support.helpers import note
from support.races import until_waiting


@pytest.fixture
async def trio(database_url: str, clock: FakeClock) -> AsyncIterator[list[SqlJournalStore]]:
    """Three stores of one fresh tenant on their own engines: writer, owner, observer."""
    tenant = f"first{uuid.uuid4().hex[:10]}"
    opened = [
        await SqlJournalStore.connect(database_url, tenant=tenant, clock=clock) for _ in range(3)
    ]
    yield opened
    await asyncio.gather(*(s.close() for s in opened))


def has(records: list[Any], text: str) -> bool:
    return any(r.body.get("text") == text for r in records)


async def acquire_and_look(
    owner: SqlJournalStore, observer: SqlJournalStore, run: RunId, text: str
) -> bool:
    """Acquire ``run``'s first lease; whether ``text``'s record was visible the instant after."""
    await owner.acquire(run, "owner", 300)
    return has(await observer.read(run), text)


def judge(outcome: Any, seen_at_acquire: bool, final: list[Any], text: str) -> None:
    if not seen_at_acquire:
        assert not has(final, text), "an epoch-0 append committed after a first acquire returned"
        assert isinstance(outcome, FencedError), f"expected FencedError, got {outcome!r}"
    else:
        assert outcome == [r for r in final if r.body.get("text") == text]


async def _held_mutex(url: str, tenant: str, run: RunId) -> tuple[asyncpg.Connection, Any]:
    conn = await asyncpg.connect(dsn(url))
    tx = conn.transaction()
    await tx.start()
    await conn.execute(
        "SELECT 1 FROM run_activity WHERE tenant = $1 AND run_id = $2 FOR UPDATE",
        tenant,
        str(run),
    )
    return conn, tx


@pytest.mark.postgres
@pytest.mark.race
@pytest.mark.parametrize("grouped", [False, True], ids=["single-run", "group"])
async def test_a_hot_epoch_0_append_behind_a_rolled_back_holder_is_fenced_by_a_first_acquire(
    pg_battery_url: str, clock: FakeClock, grouped: bool
) -> None:
    """The hot statement's snapshot predates the lease; the mutex row it waited for looks
    unchanged because its holder rolled back. It must not write at epoch 0."""
    tenant = f"first{uuid.uuid4().hex[:10]}"
    writer, owner, observer = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock) for _ in range(3)
    ]
    try:
        run, other = RunId.generate(), RunId.generate()
        for r in (run, other):
            await writer.append(0, [note(r, "warm")])  # the writer knows both heads
        conn, tx = await _held_mutex(pg_battery_url, tenant, run)
        try:
            appends = [asyncio.create_task(writer.append(0, [note(run, "late")]))]
            if grouped:
                appends.append(asyncio.create_task(writer.append(0, [note(other, "beside")])))
            await until_waiting(pg_battery_url, 1)
            look = asyncio.create_task(acquire_and_look(owner, observer, run, "late"))
            await until_waiting(pg_battery_url, 2, give_up=look)
        finally:
            await tx.rollback()
            await conn.close()
        seen = await look
        outcomes = await asyncio.gather(*appends, return_exceptions=True)
        judge(outcomes[0], seen, await observer.read(run), "late")
        if grouped:
            assert not isinstance(outcomes[1], BaseException), outcomes[1]
    finally:
        await asyncio.gather(writer.close(), owner.close(), observer.close())


async def test_an_epoch_0_unit_past_its_fence_is_not_overtaken_by_a_first_acquire(
    trio: list[SqlJournalStore], database_url: str
) -> None:
    """The general unit of work, held between its fence and its commit (``append_atomic``'s
    work runs there): a first acquire must wait for it or fence it."""
    writer, owner, observer = trio
    run = RunId.generate()
    await writer.append(0, [note(run, "first")])
    look: asyncio.Task[bool] | None = None

    async def work(session: Any) -> list[Any]:
        nonlocal look
        look = asyncio.create_task(acquire_and_look(owner, observer, run, "late"))
        if database_url.startswith("postgresql"):
            await until_waiting(database_url, 1, give_up=look)
        else:  # SQLite's lock wait is in the busy handler: give it time to be waiting
            await asyncio.wait({look}, timeout=0.5)
        return [note(run, "late")]

    outcome: Any
    try:
        outcome = await writer.append_atomic(run, 0, work)
    except FencedError as exc:
        outcome = exc
    assert look is not None
    judge(outcome, await look, await observer.read(run), "late")
