"""The lease protocol raced against a real PostgreSQL: claims, renewals and the recovery queue.

Each store is its own engine, so its own connections, as separate runtime instances would
be; the racers start together from a barrier (``races.race``). Each test was seen red with
its mechanism broken (docs/concepts/concurrency.md says how):

* 32 first acquires of one fresh run: exactly one owner gets epoch 1.
* Renewals racing a takeover: once the lease is taken over, no renewal of the old
  ``(owner, epoch)`` succeeds, and the row names the new owner with the new owner's expiry.
* Two sweepers draining ``abandoned_runs`` with takeovers: each abandoned run is recovered
  exactly once, and nothing else is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentplane_journal import (
    FencedError,
    Lease,
    LeaseHeldError,
    LeaseNotHeldError,
    RunId,
    SqlJournalStore,
)

from support.clock import FakeClock
from support.helpers import admitted, note
from support.races import K, no_surprises, race

pytestmark = [pytest.mark.race, pytest.mark.postgres]

FIRST_ACQUIRERS = 32


async def holder(store: SqlJournalStore, run: RunId) -> LeaseHeldError:
    """The run's live holder, as a third party's refused claim names it."""
    with pytest.raises(LeaseHeldError) as held:
        await store.acquire(run, "a-third-party", 60)
    return held.value


async def test_postgres_first_acquire_admits_exactly_one_instance(instances: Any) -> None:
    """agentplane 0.22.0's ``postgres_first_acquire_admits_exactly_one_instance``: 32
    instances claim one fresh run at once; one gets epoch 1, every other is refused naming
    it, and only the winner can write."""
    stores = await instances(FIRST_ACQUIRERS)
    for _ in range(4):  # a few fresh runs: each is a new first-acquire window
        run = RunId.generate()
        results = await race(
            *(
                lambda s=s, i=i, r=run: s.acquire(r, f"instance-{i}", 300)
                for i, s in enumerate(stores)
            )
        )
        no_surprises(results, LeaseHeldError)
        winners = [r for r in results if isinstance(r, Lease)]
        assert [w.epoch for w in winners] == [1], f"{len(winners)} winners, at epochs {winners}"
        refusals = [r for r in results if isinstance(r, LeaseHeldError)]
        assert len(refusals) == FIRST_ACQUIRERS - 1
        assert {(e.owner, e.epoch) for e in refusals} == {(winners[0].owner, 1)}
        held = await holder(stores[0], run)
        assert (held.owner, held.epoch) == (winners[0].owner, 1)
        with pytest.raises(FencedError):  # the lease fences the unleased epoch 0
            await stores[1].append(0, [admitted(run)])
        await stores[2].append(1, [admitted(run)])


@pytest.mark.parametrize(
    "taker", ["instance-b", "instance-a"], ids=["another-instance", "the-same-instance-again"]
)
async def test_no_renewal_extends_a_lease_that_was_taken_over(
    instances: Any, clock: FakeClock, taker: str
) -> None:
    """The old owner's heartbeats race the takeover of its lapsed lease, by another instance
    or by a second entry point of the same one (same owner name, so only the epoch tells
    them apart). Renewals succeed while the lease is held; once the takeover has returned,
    none does, and the row keeps the new owner's epoch and expiry."""
    stores = await instances(K)
    run = RunId.generate()
    lease = await stores[0].acquire(run, "instance-a", 5)
    await stores[0].append(lease.epoch, [admitted(run)])  # the run mutex row exists
    renewed = asyncio.Event()
    taken = asyncio.Event()
    new: list[Lease] = []

    async def heartbeat(store: SqlJournalStore) -> list[tuple[bool, object]]:
        """Renew until 3 calls after the takeover; (began after it, outcome) per call."""
        calls: list[tuple[bool, object]] = []
        after = 0
        while after < 3:
            began_after = taken.is_set()
            after += began_after
            try:
                outcome: object = await store.renew(run, "instance-a", lease.epoch, 5)
                renewed.set()
            except LeaseNotHeldError as refused:
                outcome = refused
            calls.append((began_after, outcome))
            await asyncio.sleep(0)
        return calls

    async def takeover(store: SqlJournalStore) -> None:
        await renewed.wait()  # the heartbeats are live and succeeding
        clock.advance(10)  # the old owner stalls past its lease (renewals are for 5 s)
        new.append(await store.acquire(run, taker, 300))
        taken.set()

    results = await race(
        *(lambda s=s: heartbeat(s) for s in stores[:-1]), lambda: takeover(stores[-1])
    )
    no_surprises(results)
    assert new == [Lease(run, taker, lease.epoch + 1)]
    calls = [c for r in results[:-1] for c in r]
    assert any(isinstance(outcome, Lease) for _, outcome in calls)
    late = [outcome for began_after, outcome in calls if began_after]
    assert late, "no renewal raced the takeover"
    assert all(isinstance(o, LeaseNotHeldError) for o in late), "a lost lease was renewed"
    held = await holder(stores[0], run)
    assert (held.owner, held.epoch, held.remaining_secs) == (taker, lease.epoch + 1, 300)
    with pytest.raises(FencedError):
        await stores[0].append(lease.epoch, [note(run, "the old owner's")])


async def test_two_sweepers_recover_each_abandoned_run_exactly_once(
    instances: Any, clock: FakeClock
) -> None:
    """Two sweepers drain the recovery queue at once, a page at a time, taking each listed
    run over with ``acquire`` (``LeaseHeldError``: the other got there first). Every run an
    instance died holding is recovered exactly once, at the next epoch; nothing released,
    sealed or live is touched; the queue ends empty."""
    stores = await instances(3)
    setup, sweepers = stores[0], stores[1:]
    dead = [RunId.generate() for _ in range(24)]
    for i, run in enumerate(dead):
        lease = await setup.acquire(run, f"crashed-{i % 3}", 1 + i % 4)
        await setup.append(lease.epoch, [admitted(run)])
    finished, sealed, alive = RunId.generate(), RunId.generate(), RunId.generate()
    for run in (finished, sealed):
        lease = await setup.acquire(run, "clean", 1)
        await setup.append(lease.epoch, [admitted(run)])
    await setup.release_lease(finished, 1)
    await setup.seal(sealed, 1, "succeeded")
    await setup.acquire(alive, "working", 300)
    clock.advance(10)
    assert set(await setup.abandoned_runs(100)) == set(dead)

    async def sweep(store: SqlJournalStore, name: str) -> tuple[list[Lease], int]:
        recovered: list[Lease] = []
        collisions = 0
        while page := await store.abandoned_runs(4):
            for run in page:
                try:
                    recovered.append(await store.acquire(run, name, 300))
                except LeaseHeldError:
                    collisions += 1  # the other sweeper recovered it first
        return recovered, collisions

    results = await race(
        *(lambda s=s, i=i: sweep(s, f"sweeper-{i}") for i, s in enumerate(sweepers))
    )
    no_surprises(results)
    recovered = [lease for leases, _ in results for lease in leases]
    runs = [lease.run for lease in recovered]
    assert sorted(map(str, runs)) == sorted(map(str, dead)), "a run recovered twice or never"
    assert {lease.epoch for lease in recovered} == {2}
    assert await setup.abandoned_runs(100) == []
    for lease in recovered[:: max(1, len(recovered) // 6)]:
        held = await holder(setup, lease.run)
        assert (held.owner, held.epoch) == (lease.owner, 2)
    assert (await holder(setup, alive)).owner == "working"
    assert (await setup.acquire(finished, "next", 60)).epoch == 2
