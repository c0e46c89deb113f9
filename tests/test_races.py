"""The concurrency claims of the store contract, raced against a real PostgreSQL.

Each test starts K store instances (each its own engine, so its own connections, as K
runtime instances would be), warms their connections, then releases them together from a
start barrier. READ COMMITTED, the server default, throughout. Every test has been seen to
fail against a deliberately broken mechanism; docs/concepts/concurrency.md and the
issue note say how each was broken.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agentplane_journal import (
    Append,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    RunId,
    RunSealedError,
    SqlJournalStore,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

from support.clock import FakeClock
from support.helpers import admitted, key, note, started
from support.markers import THROUGH_PGBOUNCER
from support.races import K, no_surprises, race

pytestmark = [pytest.mark.race, *THROUGH_PGBOUNCER]


# 1 -------------------------------------------------------------------------------------


async def test_appenders_on_one_leased_run_all_succeed_in_one_chain(instances: Any) -> None:
    stores = await instances()
    run = RunId.generate()
    lease = await stores[0].acquire(run, "owner", 300)
    results = await race(
        *(lambda s=s, i=i: s.append(lease.epoch, [note(run, str(i))]) for i, s in enumerate(stores))
    )
    no_surprises(results)
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, K + 1))
    assert sorted(r.body["text"] for r in records) == sorted(str(i) for i in range(K))
    await stores[0].verify(run)


# 2 -------------------------------------------------------------------------------------


async def test_appenders_on_an_unleased_run_never_fork_the_chain(instances: Any) -> None:
    stores = await instances()
    run = RunId.generate()
    # EffectDone carries an effect key but is not unique: a collision on it must never be
    # reported as a duplicate effect (0.4.0 mislabels any keyed unique violation).
    done = Append(run, "EffectDone", {"output": None}, effect_key=key(9))
    results = await race(*(lambda s=s: s.append(1, [done, note(run)]) for s in stores))
    no_surprises(results)  # nothing failed, so nothing was mislabelled either
    records = await stores[0].read(run)
    assert [r.seq for r in records] == list(range(1, 2 * K + 1))
    # batches are contiguous: nothing of one batch interleaves with another
    assert [r.kind for r in records] == ["EffectDone", "Note"] * K
    await stores[0].verify(run)


# 3 -------------------------------------------------------------------------------------


async def test_owners_racing_for_a_fresh_run_get_exactly_one_lease(instances: Any) -> None:
    stores = await instances()
    for _ in range(5):  # a few fresh runs: the window is narrow
        run = RunId.generate()
        results = await race(
            *(lambda s=s, i=i, r=run: s.acquire(r, f"owner-{i}", 300) for i, s in enumerate(stores))
        )
        no_surprises(results, LeaseHeldError)
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert len(winners) == 1 and winners[0].epoch == 1
        losers = [r for r in results if isinstance(r, LeaseHeldError)]
        assert all(e.owner == winners[0].owner and e.epoch == 1 for e in losers)
        # the winner really holds it: a third party is refused naming the winner
        with pytest.raises(LeaseHeldError) as caught:
            await stores[0].acquire(run, "third-party", 300)
        assert caught.value.owner == winners[0].owner


# 4 -------------------------------------------------------------------------------------


async def test_owners_taking_over_an_expired_lease_get_one_new_epoch(
    instances: Any, clock: FakeClock
) -> None:
    stores = await instances()
    run = RunId.generate()
    first = await stores[0].acquire(run, "lapsed", 1)
    clock.advance(5)
    results = await race(
        *(lambda s=s, i=i: s.acquire(run, f"owner-{i}", 300) for i, s in enumerate(stores))
    )
    no_surprises(results, LeaseHeldError)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1 and winners[0].epoch == first.epoch + 1
    assert all(e.epoch == first.epoch + 1 for e in results if isinstance(e, LeaseHeldError))


# 5 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("leased", [True, False], ids=["leased", "unleased"])
async def test_racing_starts_of_one_effect_write_exactly_one(instances: Any, leased: bool) -> None:
    stores = await instances()
    run = RunId.generate()
    epoch = (await stores[0].acquire(run, "owner", 300)).epoch if leased else 1
    results = await race(*(lambda s=s: s.append(epoch, [started(run, key(5))]) for s in stores))
    no_surprises(results, DuplicateEffectError)
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(r.effect_key == key(5) for r in results if isinstance(r, DuplicateEffectError))
    records = await stores[0].read(run)
    assert len(records) == 1 and records[0].kind == "EffectStarted"


# 6 -------------------------------------------------------------------------------------


async def test_a_stale_writer_racing_a_takeover_never_writes_after_it(
    instances: Any, clock: FakeClock
) -> None:
    stores = await instances()
    run = RunId.generate()
    old = await stores[0].acquire(run, "old-owner", 1)
    await stores[0].append(old.epoch, [admitted(run)])
    clock.advance(5)  # the old lease lapses; its holder does not know yet
    new_epoch: list[int] = []

    async def stale_writer(store: SqlJournalStore) -> list[Any]:
        outcomes = []
        for i in range(6):
            try:
                await store.append(old.epoch, [note(run, f"stale {i}")])
                outcomes.append("ok")
            except FencedError:
                outcomes.append("fenced")
        return outcomes

    async def new_owner(store: SqlJournalStore) -> None:
        lease = await store.acquire(run, "new-owner", 300)
        new_epoch.append(lease.epoch)
        for i in range(6):
            await store.append(lease.epoch, [note(run, f"new {i}")])

    results = await race(  # K - 1 stale writers against one new owner
        *(lambda s=s: stale_writer(s) for s in stores[: K - 1]),
        lambda: new_owner(stores[K - 1]),
    )
    no_surprises(results)
    epochs = [r.epoch for r in await stores[0].read(run)]
    assert epochs == sorted(epochs), "a record at the old epoch landed after the new epoch's"
    assert new_epoch == [old.epoch + 1] and epochs.count(old.epoch + 1) == 6
    await stores[0].verify(run)


# 7 -------------------------------------------------------------------------------------


async def test_a_seal_racing_appends_logs_the_final_head(instances: Any) -> None:
    stores = await instances()
    for _ in range(4):
        run = RunId.generate()
        lease = await stores[0].acquire(run, "owner", 300)
        await stores[0].append(lease.epoch, [admitted(run)])
        sealer = stores[K // 2]
        results = await race(
            *(
                lambda s=s, r=run, e=lease.epoch: s.append(e, [note(r)])
                for s in stores
                if s is not sealer
            ),
            lambda s=sealer, r=run, e=lease.epoch: s.seal(r, e, "succeeded"),
        )
        no_surprises(results, RunSealedError)
        head = await stores[0].head(run)
        inclusion = await stores[0].inclusion_proof(run)
        assert inclusion is not None and inclusion.seal == head.hash == results[-1]
        appended = sum(1 for r in results[:-1] if not isinstance(r, BaseException))
        assert head.seq == 1 + appended
        with pytest.raises(RunSealedError):
            await stores[1].append(lease.epoch, [note(run)])


async def test_racing_seals_of_one_run_take_one_position(instances: Any) -> None:
    stores = await instances()
    run = RunId.generate()
    await stores[0].append(1, [admitted(run)])
    results = await race(*(lambda s=s: s.seal(run, 1, "succeeded") for s in stores))
    no_surprises(results)
    assert len(set(results)) == 1
    assert (await stores[0].checkpoint()).size == 1


# 8 -------------------------------------------------------------------------------------


async def test_checkpoints_taken_during_racing_seals_are_all_prefixes(instances: Any) -> None:
    stores = await instances(K + 1)
    sealers, reader = stores[:K], stores[K]
    runs = [RunId.generate() for _ in range(K * 3)]
    for i, run in enumerate(runs):
        await sealers[i % K].append(1, [admitted(run)])
    observed = []
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            observed.append(await reader.checkpoint())
            await asyncio.sleep(0)

    async def seal_some(i: int) -> None:
        for run in runs[i::K]:
            await sealers[i].seal(run, 1, "succeeded")

    watcher = asyncio.create_task(watch())
    results = await race(*(lambda i=i: seal_some(i) for i in range(K)))
    done.set()
    await watcher
    no_surprises(results)
    final = await reader.checkpoint()
    assert final.size == len(runs)
    assert len({c.size for c in observed}) > 2, "the reader saw too little of the race"
    for cp in observed:
        proof = await reader.consistency_proof(cp.size)
        assert verify_consistency(cp.size, cp.root, final.size, final.root, proof), (
            f"checkpoint of size {cp.size} is not a prefix of the final log"
        )


async def test_inclusion_proofs_during_racing_seals_always_verify(instances: Any) -> None:
    stores = await instances(K + 1)
    sealers, reader = stores[:K], stores[K]
    runs = [RunId.generate() for _ in range(K * 2)]
    for i, run in enumerate(runs):
        await sealers[i % K].append(1, [admitted(run)])
    proofs = []
    done = asyncio.Event()

    async def prove() -> None:
        while not done.is_set():
            for run in runs:
                if (inc := await reader.inclusion_proof(run)) is not None:
                    proofs.append(inc)
            await asyncio.sleep(0)

    async def seal_some(i: int) -> None:
        for run in runs[i::K]:
            await sealers[i].seal(run, 1, "succeeded")

    prover = asyncio.create_task(prove())
    results = await race(*(lambda i=i: seal_some(i) for i in range(K)))
    done.set()
    await prover
    no_surprises(results)
    # the log only grows, so the root at any size is the root of the final leaves' prefix
    leaves = [
        leaf_hash(inc.seal)
        for inc in sorted(
            [p for p in [await reader.inclusion_proof(r) for r in runs] if p], key=lambda p: p.index
        )
    ]
    assert proofs, "the prover saw nothing sealed"
    for inc in proofs:
        assert inc.index < inc.size
        assert verify_inclusion(
            leaf_hash(inc.seal), inc.index, inc.size, list(inc.proof), root(leaves[: inc.size])
        )


# 9 -------------------------------------------------------------------------------------


async def test_racing_stop_requests_record_exactly_one_asker(instances: Any) -> None:
    stores = await instances()
    run = RunId.generate()
    results = await race(
        *(
            lambda s=s, i=i: s.request_cancel(run, f"actor-{i}", f"reason {i}")
            for i, s in enumerate(stores)
        )
    )
    no_surprises(results)
    assert results.count(True) == 1 and results.count(False) == K - 1
    winner = results.index(True)
    cancellation = await stores[0].cancellation(run)
    assert cancellation is not None
    assert (cancellation.actor, cancellation.reason) == (f"actor-{winner}", f"reason {winner}")


# tenants -------------------------------------------------------------------------------


async def test_two_tenants_sealing_at_once_keep_exact_separate_logs(
    pg_battery_url: str, clock: FakeClock
) -> None:
    names = [f"iso{uuid.uuid4().hex[:8]}" for _ in range(2)]
    stores = [
        await SqlJournalStore.connect(pg_battery_url, tenant=names[i % 2], clock=clock)
        for i in range(K)
    ]
    try:
        runs = [RunId.generate() for _ in range(K)]

        async def work(i: int) -> None:
            await stores[i].append(1, [admitted(runs[i])])
            await stores[i].seal(runs[i], 1, "succeeded")

        no_surprises(await race(*(lambda i=i: work(i) for i in range(K))))
        for t in range(2):
            cp = await stores[t].checkpoint()
            assert cp.size == K // 2 and cp.origin == f"agentplane/{names[t]}"
            mine = [await stores[t].inclusion_proof(runs[i]) for i in range(t, K, 2)]
            assert sorted(p.index for p in mine if p) == list(range(K // 2))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
