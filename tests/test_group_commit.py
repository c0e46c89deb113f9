"""Group commit: concurrent appends share a transaction, and each keeps its own outcome.

With ``group_commit=True``, appends that arrive while a commit is in flight share the next
one: on SQLite a transaction, each append in its own savepoint; on PostgreSQL one statement
whose checks are per run. Raced here with many tasks of one store (group commit groups one
process's writers) on both; ``tests/test_group_commit_pg.py`` races PostgreSQL's groups
against other processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentplane_journal import (
    DuplicateEffectError,
    FencedError,
    RunId,
    RunSealedError,
    SqlJournalStore,
)

from support.clock import FakeClock
from support.helpers import admitted, key, note, started

pytestmark = pytest.mark.race


@pytest.fixture
async def grouped(database_url: str, clock: FakeClock) -> AsyncIterator[SqlJournalStore]:
    store = await SqlJournalStore.connect(database_url, clock=clock, group_commit=True)
    yield store
    await store.close()


def watch_groups(store: SqlJournalStore) -> list[list[RunId]]:
    """The runs of the appends each transaction (SQLite) or statement (PostgreSQL) carried,
    from now on."""
    groups: list[list[RunId]] = []
    writer = store._shared.writer
    if writer is not None:
        run = writer._run

        async def watching(driver: Any, group: list[Any]) -> bool:
            groups.append([request.run for request in group])
            return await run(driver, group)

        writer._run = watching
    return groups


async def test_one_failing_append_in_a_group_fails_alone(grouped: SqlJournalStore) -> None:
    store = grouped
    good = [RunId.generate() for _ in range(8)]
    fenced_run, sealed_run, effect_run = RunId.generate(), RunId.generate(), RunId.generate()
    pacer = RunId.generate()
    epochs = {}
    for run in [*good, fenced_run, sealed_run, effect_run, pacer]:
        epochs[run] = (await store.acquire(run, "owner", 300)).epoch
        await store.append(epochs[run], [admitted(run)])
    await store.append(epochs[effect_run], [started(effect_run, key(7))])
    await store.seal(sealed_run, epochs[sealed_run], "succeeded")
    groups = watch_groups(store)

    barrier = asyncio.Barrier(8 * 3 + 3 + 1)

    async def go(call: Any) -> Any:
        await barrier.wait()
        return await call()

    calls = [
        (lambda r=r, i=i: store.append(epochs[r], [note(r, f"{i}"), note(r, f"{i}b")]))
        for r in good
        for i in range(3)
    ]
    calls += [
        lambda: store.append(epochs[fenced_run] + 1, [note(fenced_run)]),  # a stale epoch
        lambda: store.append(epochs[sealed_run], [note(sealed_run)]),
        # fails on its second record, after its first is in the group's transaction
        lambda: store.append(epochs[effect_run], [note(effect_run), started(effect_run, key(7))]),
        # Last at the barrier, so first past it (the party that completes an asyncio.Barrier
        # does not wait): on SQLite it runs alone in its own hop (nothing queued yet, see
        # backends/sqlite/writer.py), and the others queue behind it, to share groups.
        lambda: store.append(epochs[pacer], [note(pacer)]),
    ]
    results = await asyncio.gather(*(go(c) for c in calls), return_exceptions=True)

    *written, was_fenced, was_sealed, was_duplicate, paced = results
    assert isinstance(paced, list) and len(paced) == 1, paced
    assert all(isinstance(r, list) and len(r) == 2 for r in written), written
    assert isinstance(was_fenced, FencedError), was_fenced
    assert isinstance(was_sealed, RunSealedError), was_sealed
    assert isinstance(was_duplicate, DuplicateEffectError) and was_duplicate.effect_key == key(7)
    for failing in (fenced_run, sealed_run, effect_run):  # it failed alone: others landed
        shared = [g for g in groups if failing in g and any(r in good for r in g)]
        assert shared, f"the append to {failing} never shared a transaction: {groups}"
    for run in good:  # every batch whole, in one chain
        records = await store.read(run)
        assert [r.seq for r in records] == list(range(1, 8))
        texts = [r.body["text"] for r in records[1:]]
        assert all(texts[j + 1] == texts[j] + "b" for j in range(0, 6, 2))
        await store.verify(run)
    assert [r.kind for r in await store.read(fenced_run)] == ["RunAdmitted"]
    assert len(await store.read(sealed_run)) == 1
    assert [r.kind for r in await store.read(effect_run)] == ["RunAdmitted", "EffectStarted"]
    records = await store.read(good[0])
    assert [r.seq for r in records] == list(range(1, 8))


async def test_a_group_of_appends_to_one_run_chains_in_order(grouped: SqlJournalStore) -> None:
    store = grouped
    run = RunId.generate()
    lease = await store.acquire(run, "owner", 300)
    results = await asyncio.gather(
        *(store.append(lease.epoch, [note(run, str(i))]) for i in range(40))
    )
    assert sorted(r[0].seq for r in results) == list(range(1, 41))
    await store.verify(run)
