"""Races 1, 2, 6 and 7 of the store contract, with every writer in a host session of its own.

As in ``test_races.py``, K stores each have their own engine (so their own connections), on
PostgreSQL at READ COMMITTED; here each writer opens an ``AsyncSession`` of its own on its
store's engine, as a host's request would, passes it as ``session=`` and commits it (or rolls
it back on a refusal). The store commits nothing: the run mutex and the fence it takes are
held by the host's transaction until the host's COMMIT.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import Append, FencedError, RunId, RunSealedError, SqlJournalStore

from support.clock import FakeClock
from support.helpers import admitted, key, note
from support.races import K, no_surprises, race

pytestmark = pytest.mark.race


async def in_host_session(
    store: SqlJournalStore, call: Callable[[AsyncSession], Awaitable[Any]]
) -> Any:
    """One host request: its own session on the store's engine; commit, or roll back.

    After the store's call the request goes on with a statement of its own before it
    commits, as a handler does: the store's locks must hold across it.
    """
    async with AsyncSession(store.engine) as session:
        try:
            result = await call(session)
            await session.execute(text("SELECT 1"))
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
        return result


def append(store: SqlJournalStore, epoch: int, batch: list[Append]) -> Callable[[], Any]:
    return lambda: in_host_session(store, lambda s: store.append(epoch, batch, session=s))


# 1 -------------------------------------------------------------------------------------


async def test_host_session_appenders_on_one_leased_run_all_succeed_in_one_chain(
    instances: Any,
) -> None:
    stores = await instances()
    run = RunId.generate()
    lease = await stores[0].acquire(run, "owner", 300)
    results = await race(
        *(append(s, lease.epoch, [note(run, str(i))]) for i, s in enumerate(stores))
    )
    no_surprises(results)
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, K + 1))
    assert sorted(r.body["text"] for r in records) == sorted(str(i) for i in range(K))
    await stores[0].verify(run)


# 2 -------------------------------------------------------------------------------------


async def test_host_session_appenders_on_an_unleased_run_never_fork_the_chain(
    instances: Any,
) -> None:
    stores = await instances()
    run = RunId.generate()
    done = Append(run, "EffectDone", {"output": None}, effect_key=key(9))
    results = await race(*(append(s, 1, [done, note(run)]) for s in stores))
    no_surprises(results)
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, 2 * K + 1))
    assert [r.kind for r in records] == ["EffectDone", "Note"] * K
    await stores[0].verify(run)


# 6 -------------------------------------------------------------------------------------


async def test_a_stale_host_session_writer_racing_a_takeover_never_writes_after_it(
    instances: Any, clock: FakeClock
) -> None:
    stores = await instances()
    run = RunId.generate()
    old = await stores[0].acquire(run, "old-owner", 1)
    await stores[0].append(old.epoch, [admitted(run)])
    clock.advance(5)
    new_epoch: list[int] = []

    async def stale_writer(store: SqlJournalStore) -> list[str]:
        outcomes = []
        for i in range(6):
            try:
                await append(store, old.epoch, [note(run, f"stale {i}")])()
                outcomes.append("ok")
            except FencedError:
                outcomes.append("fenced")
        return outcomes

    async def new_owner(store: SqlJournalStore) -> None:
        lease = await in_host_session(
            store, lambda s: store.acquire(run, "new-owner", 300, session=s)
        )
        new_epoch.append(lease.epoch)
        for i in range(6):
            await append(store, lease.epoch, [note(run, f"new {i}")])()

    results = await race(
        *(lambda s=s: stale_writer(s) for s in stores[: K - 1]),
        lambda: new_owner(stores[K - 1]),
    )
    no_surprises(results)
    epochs = [r.epoch for r in await stores[0].read(run)]
    assert epochs == sorted(epochs), "a record at the old epoch landed after the new epoch's"
    assert new_epoch == [old.epoch + 1] and epochs.count(old.epoch + 1) == 6
    await stores[0].verify(run)


# 7 -------------------------------------------------------------------------------------


async def test_a_host_session_seal_racing_appends_logs_the_final_head(instances: Any) -> None:
    stores = await instances()
    for _ in range(4):
        run = RunId.generate()
        lease = await stores[0].acquire(run, "owner", 300)
        await stores[0].append(lease.epoch, [admitted(run)])
        sealer = stores[K // 2]
        results = await race(
            *(append(s, lease.epoch, [note(run)]) for s in stores if s is not sealer),
            lambda s=sealer, r=run, e=lease.epoch: in_host_session(
                s, lambda session: s.seal(r, e, "succeeded", session=session)
            ),
        )
        no_surprises(results, RunSealedError)
        head = await stores[0].head(run)
        inclusion = await stores[0].inclusion_proof(run)
        assert inclusion is not None and inclusion.seal == head.hash == results[-1]
        appended = sum(1 for r in results[:-1] if not isinstance(r, BaseException))
        assert head.seq == 1 + appended
        with pytest.raises(RunSealedError):
            await append(stores[1], lease.epoch, [note(run)])()
