"""Group commit on PostgreSQL: one multi-run statement, and each append's own outcome.

``tests/test_group_commit.py`` runs the same battery on both dialects. Here, PostgreSQL
only: the group statement raced against other processes' stores (each on its own engine),
a takeover and a refused statement. Every group is watched, so a test that means to race a
group proves that the failing append really shared its statement with appends that
committed. Seen red against broken mechanisms: see docs/performance.md.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from agentplane_journal import (
    DuplicateEffectError,
    FencedError,
    RunId,
    RunSealedError,
    SqlJournalStore,
    upgrade,
)
from agentplane_journal.core.batch import chain_batch

from support.clock import FakeClock
from support.databases import dsn
from support.helpers import admitted, key, note, started
from support.races import race, until_waiting

pytestmark = [pytest.mark.race, pytest.mark.postgres]


@pytest.fixture
async def pair(pg_battery_url: str, clock: FakeClock) -> AsyncIterator[list[SqlJournalStore]]:
    """Two stores of one fresh tenant on their own engines (two processes, in effect)."""
    tenant = f"group{uuid.uuid4().hex[:10]}"
    opened = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock, group_commit=True)
        for _ in range(2)
    ]
    yield opened
    await asyncio.gather(*(s.close() for s in opened))


def watch(store: SqlJournalStore) -> list[list[tuple[RunId, str]]]:
    """Each statement's appends from now on: (run, how it was answered)."""
    seen: list[list[tuple[RunId, str]]] = []
    writer = store._shared.writer
    answer = writer._answer

    def watching(group: list[Any], answers: list[Any]) -> None:
        seen.append([(r.run, type(a).__name__) for r, a in zip(group, answers, strict=True)])
        answer(group, answers)

    writer._answer = watching
    return seen


def refusals(store: SqlJournalStore, into: list[str]) -> list[str]:
    """The SQLSTATE of each statement the server refuses from now on, into ``into``."""
    writer = store._shared.writer
    fetch = writer._fetch

    async def counting(driver: Any, statement: str, args: Any) -> Any:
        try:
            return await fetch(driver, statement, args)
        except Exception as exc:
            into.append(getattr(exc, "sqlstate", None) or type(exc).__name__)
            raise

    writer._fetch = counting
    return into


def shared_with_commits(groups: list[list[tuple[RunId, str]]], run: RunId, how: str) -> bool:
    """Whether an append to ``run`` answered ``how`` shared a statement with a commit."""
    return any((run, how) in g and any(r != run and a == "list" for r, a in g) for g in groups)


async def test_fenced_sealed_and_duplicate_appends_fail_alone_in_their_group(
    pair: list[SqlJournalStore],
) -> None:
    """Each failing append shares its statement with appends that the statement itself
    wrote (not rescued by the general unit of work after a failed group)."""
    store = pair[0]
    good = [RunId.generate() for _ in range(6)]
    fenced_run, sealed_run, effect_run = RunId.generate(), RunId.generate(), RunId.generate()
    epochs = {}
    for run in [*good, fenced_run, sealed_run, effect_run]:
        epochs[run] = (await store.acquire(run, "owner", 300)).epoch
        await store.append(epochs[run], [admitted(run)])
    await store.append(epochs[effect_run], [started(effect_run, key(7))])
    await store.seal(sealed_run, epochs[sealed_run], "succeeded")
    groups = watch(store)
    results = await asyncio.gather(
        *(store.append(epochs[r], [note(r, "a"), note(r, "b")]) for r in good),
        store.append(epochs[fenced_run] + 1, [note(fenced_run)]),
        store.append(epochs[sealed_run], [note(sealed_run)]),
        store.append(epochs[effect_run], [note(effect_run), started(effect_run, key(7))]),
        return_exceptions=True,
    )
    *written, was_fenced, was_sealed, was_duplicate = results
    assert all(isinstance(r, list) and len(r) == 2 for r in written), written
    assert isinstance(was_fenced, FencedError), was_fenced
    assert isinstance(was_sealed, RunSealedError), was_sealed
    assert isinstance(was_duplicate, DuplicateEffectError) and was_duplicate.effect_key == key(7)
    assert len(groups) == 1 and len(groups[0]) == len(results), groups
    assert [how for _, how in groups[0]] == ["list"] * len(good) + [
        "FencedError",
        "RunSealedError",
        "DuplicateEffectError",
    ], groups
    for run in good:
        assert [r.body.get("text") for r in await store.read(run)] == [None, "a", "b"]
    assert [r.kind for r in await store.read(effect_run)] == ["RunAdmitted", "EffectStarted"]
    assert len(await store.read(fenced_run)) == len(await store.read(sealed_run)) == 1


async def test_a_takeover_racing_a_group_fences_its_run_alone(
    pair: list[SqlJournalStore], clock: FakeClock
) -> None:
    """A group's appends keep coming while another process takes one run over: from the
    takeover on, that run's appends are fenced; every other append of their groups lands."""
    grouped, other = pair
    for _ in range(3):
        await _takeover_round(grouped, other, clock)


async def _takeover_round(
    grouped: SqlJournalStore, other: SqlJournalStore, clock: FakeClock
) -> None:
    good = [RunId.generate() for _ in range(6)]
    victim = RunId.generate()
    epochs = {r: (await grouped.acquire(r, "owner", 300)).epoch for r in good}
    old = await grouped.acquire(victim, "old-owner", 1)
    for r in [*good, victim]:
        await grouped.append(epochs.get(r, old.epoch), [admitted(r)])  # heads known
    clock.advance(5)  # the victim's lease lapses; its holder does not know yet
    groups = watch(grouped)
    stop = asyncio.Event()
    done = {r: 0 for r in good}

    async def good_writer(run: RunId) -> None:
        while not stop.is_set():
            await grouped.append(epochs[run], [note(run, "a"), note(run, "b")])
            done[run] += 1

    async def stale_writer() -> int:
        fenced = 0
        for i in range(500):
            try:
                await grouped.append(old.epoch, [note(victim, f"stale {i}")])
            except FencedError:
                fenced += 1
                if fenced == 3:
                    break
        stop.set()
        return fenced

    async def new_owner() -> tuple[int, int]:
        await asyncio.sleep(0.01)
        lease = await other.acquire(victim, "new-owner", 300)
        # An append in flight at the takeover held the lease row, so the acquire waited
        # for it: nothing at the old epoch may land past the head seen now.
        seen = (await other.head(victim)).seq
        await other.append(lease.epoch, [note(victim, "new")])
        return lease.epoch, seen

    results = await race(*(lambda r=r: good_writer(r) for r in good), stale_writer, new_owner)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert results[-2] == 3, "the stale writer was never fenced"
    new_epoch, seen = results[-1]
    records = await grouped.read(victim)
    late = [r.seq for r in records if r.seq > seen and r.epoch != new_epoch]
    assert not late, f"old-epoch records {late} landed after the takeover returned"
    assert new_epoch == old.epoch + 1
    for run in good:  # every batch whole, in one chain, none lost
        chain = await grouped.read(run)
        assert len(chain) == 1 + 2 * done[run]
        assert [r.body["text"] for r in chain[1:]] == ["a", "b"] * done[run]
        await grouped.verify(run)
    # The victim's appends went through groups; the one that met the takeover was fenced
    # by its group's statement or, when the takeover held the run mutex at that moment
    # (acquire takes it, and the statement skips a locked mutex row), by the general unit.
    # The group statement's own fence check is pinned deterministically above.
    assert any(run == victim for g in groups for run, _ in g), groups


async def test_a_refused_group_statement_still_commits_every_other_append(
    pair: list[SqlJournalStore], pg_battery_url: str
) -> None:
    """A unique violation the statement's checks cannot see (a row inserted behind the run
    mutex's back, committed while the group waits on it) refuses the whole statement; the
    group's appends are then run one by one, and all of them land."""
    grouped, _ = pair
    runs = [RunId.generate() for _ in range(6)]
    epochs = {r: (await grouped.acquire(r, "owner", 300)).epoch for r in runs}
    heads = {}
    for r in runs:
        heads[r] = (await grouped.append(epochs[r], [admitted(r)]))[-1]
    target = runs[2]
    head = heads[target].hash
    _, rows, _ = chain_batch(
        grouped.tenant, str(target), epochs[target], 1, head, [note(target, "x")], None
    )
    intruder = await asyncpg.connect(dsn(pg_battery_url))
    try:
        tx = intruder.transaction()
        await tx.start()
        await intruder.execute(
            "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash,"
            " raw, key_id, signature, case_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
            " $11, $12)",
            *rows[0],
        )
        groups = watch(grouped)
        refused = refusals(grouped, [])
        appends = [
            asyncio.ensure_future(grouped.append(epochs[r], [note(r, "grouped")])) for r in runs
        ]
        await until_waiting(intruder, 1, tries=1000)  # the group statement, on the intruder's row
        await tx.commit()
        results = await asyncio.gather(*appends, return_exceptions=True)
    finally:
        await intruder.close()
    assert all(isinstance(r, list) and len(r) == 1 for r in results), results
    assert len(groups[0]) == len(runs), groups
    assert refused == ["23505"], refused  # the group statement; none of the single ones
    for r in runs:
        chain = await grouped.read(r)
        expected = ["RunAdmitted", "Note", "Note"] if r == target else ["RunAdmitted", "Note"]
        assert [c.kind for c in chain] == expected
        await grouped.verify(r)


async def test_a_store_in_its_own_schema_appends_by_the_hot_path(pg_database: Any) -> None:
    """The writer names the store's schema (its bind's schema_translate_map)."""
    url = pg_database(migrated=False)
    await upgrade(url, schema="journal_here")
    store = await SqlJournalStore.connect(url, schema="journal_here")
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "w", 60)
        for i in range(3):  # the first by the general unit, then the hot path
            await store.append(lease.epoch, [note(run, str(i))])
        assert [r.seq for r in await store.read(run)] == [1, 2, 3]
    finally:
        await store.close()


async def test_two_processes_groups_over_the_same_runs_never_deadlock(
    pair: list[SqlJournalStore], pg_battery_url: str
) -> None:
    """Two stores' groups lock the same runs' rows, their appends in opposite orders, while a
    third transaction holds one mutex row: the group statements skip that run (its appends
    wait in general units of their own), take the other locks in run-id order, so neither
    statement is refused as a deadlock, and every append lands."""
    runs = sorted((RunId.generate() for _ in range(8)), key=str)  # unleased: both may write
    refused: list[str] = []
    for store in pair:
        for run in runs:  # each store knows a head (the first store's go stale: general)
            await store.append(1, [note(run, "warm")])
        refusals(store, refused)
    blocker = await asyncpg.connect(dsn(pg_battery_url))
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            "SELECT 1 FROM run_activity WHERE tenant = $1 AND run_id = $2 FOR UPDATE",
            pair[0].tenant,
            str(runs[3]),
        )
        groups = [watch(store) for store in pair]
        ahead = [
            asyncio.ensure_future(
                asyncio.gather(*(store.append(1, [note(r, "raced")]) for r in order))
            )
            for store, order in ((pair[0], runs), (pair[1], runs[::-1]))
        ]
        # Watched from another connection: pg_stat_activity is a snapshot per transaction.
        watcher = await asyncpg.connect(dsn(pg_battery_url))
        try:
            await until_waiting(watcher, 2, tries=1000)  # both stores' appends to the held run
        finally:
            await watcher.close()
        await tx.commit()
        results = await asyncio.gather(*ahead, return_exceptions=True)
    finally:
        await blocker.close()
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert all(len(g[0]) == len(runs) for g in groups), groups  # both were groups
    assert not refused, refused
    for run in runs:
        chain = await pair[0].read(run)
        assert [r.body["text"] for r in chain] == ["warm", "warm", "raced", "raced"]
        await pair[0].verify(run)


async def test_a_grouped_batch_with_two_started_keys_names_the_first(
    pair: list[SqlJournalStore],
) -> None:
    """As the general unit of work does: the batch's first key that had started."""
    store = pair[0]
    runs = [RunId.generate() for _ in range(3)]
    for run in runs:
        await store.append(1, [started(run, key(1)), started(run, key(2))])
    groups = watch(store)
    results = await asyncio.gather(
        store.append(1, [note(runs[0])]),
        store.append(
            1, [started(runs[1], key(3)), started(runs[1], key(2)), started(runs[1], key(1))]
        ),
        store.append(1, [note(runs[2])]),
        return_exceptions=True,
    )
    assert isinstance(results[1], DuplicateEffectError) and results[1].effect_key == key(2)
    assert [how for _, how in groups[0]] == ["list", "DuplicateEffectError", "list"], groups
