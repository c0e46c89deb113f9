"""The append hot path's claims, raced against a real PostgreSQL with warm head caches.

``tests/test_races.py`` races mostly cold stores (a store's first append to a run takes the
general unit of work). Here every appender has already appended to the run, so it holds the
run's head in its cache and appends with the one-statement path: what must hold is that
the statement's own checks (the mutex row's version, the lease row ``FOR UPDATE``, the seal,
the known head) refuse or defer exactly when the general path would. Each test has been seen
to fail against a deliberately broken statement (see docs/performance.md).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentplane_journal import FencedError, RunId, RunSealedError, SqlJournalStore

from support.clock import FakeClock
from support.helpers import admitted, note
from support.races import no_surprises, race

pytestmark = pytest.mark.race

K = 12


@pytest.fixture
async def stores(pg_battery_url: str, clock: FakeClock) -> AsyncIterator[list[SqlJournalStore]]:
    """K stores of one fresh tenant, each on its own engine, connections warmed."""
    tenant = f"fast{uuid.uuid4().hex[:10]}"
    opened = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock) for _ in range(K)
    ]
    await asyncio.gather(*(s.head(RunId.generate()) for s in opened))
    yield opened
    await asyncio.gather(*(s.close() for s in opened))


async def test_warm_appenders_sharing_one_store_and_run_build_one_chain(
    stores: list[SqlJournalStore],
) -> None:
    """Many tasks of each store append to one run: each guesses the head its store knows,
    most guesses are stale by the time the lock is theirs, and none may fork the chain."""
    run = RunId.generate()
    lease = await stores[0].acquire(run, "owner", 300)
    for s in stores:  # every store learns a head (all but the last stale at once)
        await s.append(lease.epoch, [note(run, "warm")])
    per_store = 4
    results = await race(
        *(
            lambda s=s, i=i: s.append(lease.epoch, [note(run, f"{i}"), note(run, f"{i}b")])
            for s in stores
            for i in range(per_store)
        )
    )
    no_surprises(results)
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, K + 2 * K * per_store + 1))
    texts = [r.body["text"] for r in records[K:]]
    assert all(texts[j + 1] == texts[j] + "b" for j in range(0, len(texts), 2)), "batch split"
    await stores[0].verify(run)


async def test_warm_one_record_appenders_sharing_one_run_build_one_chain(
    stores: list[SqlJournalStore],
) -> None:
    """As above with one record per append, the statement the writer sends for those
    (``sql.ONE_RECORD``: scalar parameters, the head read once): most heads are stale when
    the lock is had, and the statement must defer every such append, never fork the chain."""
    run = RunId.generate()
    lease = await stores[0].acquire(run, "owner", 300)
    for s in stores:
        await s.append(lease.epoch, [note(run, "warm")])
    per_store = 6
    results = await race(
        *(
            lambda s=s, i=i: s.append(lease.epoch, [note(run, f"{i}")])
            for s in stores
            for i in range(per_store)
        )
    )
    no_surprises(results)
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, K + K * per_store + 1))
    assert sorted(r.seq for got in results for r in got) == list(range(K + 1, len(records) + 1))
    await stores[0].verify(run)


async def test_a_warm_stale_writer_racing_a_takeover_never_writes_after_it(
    stores: list[SqlJournalStore], clock: FakeClock
) -> None:
    for _ in range(3):
        await _takeover(stores, clock)


async def _takeover(stores: list[SqlJournalStore], clock: FakeClock) -> None:
    run = RunId.generate()
    old = await stores[0].acquire(run, "old-owner", 1)
    stale = stores[: K - 1]
    for s in stale:  # each stale writer knows the run's head (the last one correctly)
        await s.append(old.epoch, [admitted(run)])
    clock.advance(5)  # the old lease lapses; its holders do not know yet

    async def stale_writer(store: SqlJournalStore) -> None:
        for i in range(6):
            try:
                await store.append(old.epoch, [note(run, f"stale {i}")])
            except FencedError:
                pass

    async def new_owner(store: SqlJournalStore) -> tuple[int, int]:
        lease = await store.acquire(run, "new-owner", 300)
        # An append in flight at the takeover held the lease row, so the acquire waited
        # for it: nothing at the old epoch may land past the head seen now.
        seen = (await store.head(run)).seq
        for i in range(6):
            await store.append(lease.epoch, [note(run, f"new {i}")])
        return lease.epoch, seen

    results = await race(
        *(lambda s=s: stale_writer(s) for s in stale), lambda: new_owner(stores[K - 1])
    )
    no_surprises(results)
    new_epoch, seen = results[-1]
    records = await stores[0].read(run)
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs), "a record at the old epoch landed after the new epoch's"
    assert new_epoch == old.epoch + 1 and epochs.count(new_epoch) == 6
    late = [r.seq for r in records if r.seq > seen and r.epoch != new_epoch]
    assert not late, f"old-epoch records {late} landed after the takeover returned"
    await stores[0].verify(run)


async def test_a_seal_racing_warm_appenders_logs_the_final_head(
    stores: list[SqlJournalStore],
) -> None:
    for _ in range(4):
        await _seal_race(stores)


async def _seal_race(stores: list[SqlJournalStore]) -> None:
    sealer, appenders = stores[0], stores[1:]
    run = RunId.generate()
    lease = await sealer.acquire(run, "owner", 300)
    for s in appenders:
        await s.append(lease.epoch, [admitted(run)])

    async def append_until_sealed(store: SqlJournalStore) -> int:
        done = 0
        for _ in range(5):
            try:
                await store.append(lease.epoch, [note(run)])
                done += 1
            except RunSealedError:
                break
        return done

    async def seal_soon() -> Any:
        await asyncio.sleep(0.005)
        return await sealer.seal(run, lease.epoch, "succeeded")

    results = await race(*(lambda s=s: append_until_sealed(s) for s in appenders), seal_soon)
    no_surprises(results)
    head = await sealer.head(run)
    inclusion = await sealer.inclusion_proof(run)
    assert inclusion is not None and inclusion.seal == head.hash == results[-1]
    assert head.seq == len(appenders) + sum(results[:-1]), "an append landed after the seal"
    for s in appenders:
        with pytest.raises(RunSealedError):
            await s.append(lease.epoch, [note(run)])


async def test_a_warm_writer_racing_a_release_is_fenced_from_then_on(
    stores: list[SqlJournalStore],
) -> None:
    for _ in range(4):
        await _release_race(stores)


async def _release_race(stores: list[SqlJournalStore]) -> None:
    run = RunId.generate()
    lease = await stores[0].acquire(run, "owner", 300)
    writers = stores[1:]
    for s in writers:
        await s.append(lease.epoch, [admitted(run)])

    async def writer(store: SqlJournalStore) -> None:
        for _ in range(8):
            try:
                await store.append(lease.epoch, [note(run)])
            except FencedError:
                pass

    async def release() -> int:
        await asyncio.sleep(0.005)
        await stores[0].release_lease(run, lease.epoch)
        # An append in flight held the lease row, so the release waited for it: nothing
        # may land past the head seen now.
        return (await stores[0].head(run)).seq

    results = await race(*(lambda s=s: writer(s) for s in writers), release)
    no_surprises(results)
    final = (await stores[0].head(run)).seq
    assert final == results[-1], f"{final - results[-1]} appends landed after the release"
    with pytest.raises(FencedError):
        await writers[0].append(lease.epoch, [note(run)])
    await stores[0].verify(run)
