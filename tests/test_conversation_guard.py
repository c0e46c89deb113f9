"""The session adapters' one-transaction changes: guarded appends, warm reads, hostile rows.

Both dialects (the ``store``/``make_store`` battery), plus a race on PostgreSQL: 16 store
instances (16 connections) popping one session at once remove 16 different items, and 16
Pydantic AI saves of one revision land once. The same races with the guard taken out (each
change lands wherever the run ends) are run here too and must go wrong, so each race is
shown able to fail with the mechanism broken.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import (
    Append,
    ConversationBusyError,
    CorruptLogError,
    CorruptRecordError,
    Digest,
    FencedError,
    LeaseHeldError,
    RunId,
    RunSealedError,
    SqlJournalStore,
)
from agentplane_journal.journal.guarded import GuardedAppends, HeadMovedError

try:
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict
    from pydantic_ai.models.test import TestModel

    from agentplane_journal.adapters.openai_agents import JournalSession
    from agentplane_journal.adapters.pydantic_ai import JournalConversationStore
except ImportError as missing:  # pragma: no cover - the extras are not installed
    if os.environ.get("CI"):
        raise
    pytest.skip(f"an adapter's framework is not installed: {missing}", allow_module_level=True)

from support.clock import FakeClock
from support.races import K, no_surprises, race


def user(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": text_}


async def sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    """An at-rest write by someone with write access to the tables (no key)."""
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), {"t": store.tenant, **params})


async def delete(store: SqlJournalStore, run: RunId, seq: int) -> None:
    where = "WHERE tenant = :t AND run_id = :r AND seq = :s"
    await sql(store, f"DELETE FROM journal {where}", r=str(run), s=seq)


async def edit(store: SqlJournalStore, run: RunId, seq: int, old: bytes, new: bytes) -> None:
    where = "WHERE tenant = :t AND run_id = :r AND seq = :s"
    params = {"t": store.tenant, "r": str(run), "s": seq}
    async with store.engine.begin() as conn:
        raw = (await conn.execute(text(f"SELECT raw FROM journal {where}"), params)).scalar_one()
        await conn.execute(
            text(f"UPDATE journal SET raw = :raw {where}"), {**params, "raw": raw.replace(old, new)}
        )


async def note(store: SqlJournalStore, run: RunId) -> list[Append]:
    return [Append(run, "Note", {"text": "x"})]


# -- the store's guarded append ------------------------------------------------------


async def test_a_guarded_append_lands_only_on_the_head_it_was_computed_from(
    store: SqlJournalStore,
) -> None:
    run = RunId.generate()
    first = await store.guarded_append(run, await note(store, run), expected=(0, Digest.ZERO))
    head = (first[-1].seq, first[-1].hash)
    with pytest.raises(HeadMovedError) as moved:  # computed as if the run were empty
        await store.guarded_append(run, await note(store, run), expected=(0, Digest.ZERO))
    assert (moved.value.seq, moved.value.head) == head
    assert len(await store.read(run)) == 1  # nothing of it was written
    second = await store.guarded_append(run, await note(store, run), expected=head)
    assert second[0].seq == 2 and second[0].prev_hash == head[1]
    # unguarded: lands wherever the run ends
    assert (await store.guarded_append(run, await note(store, run), expected=None))[0].seq == 3
    await store.verify(run)


async def test_a_live_claim_is_respected_and_a_lapsed_one_is_fenced_for_good(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    run = RunId.generate()
    await store.guarded_append(run, await note(store, run), expected=None)
    lease = await store.acquire(run, "old-writer", 10)
    with pytest.raises(LeaseHeldError):
        await store.guarded_append(run, await note(store, run), expected=None)
    clock.advance(11)  # the claim lapsed: the next guarded append fences its holder
    written = await store.guarded_append(run, await note(store, run), expected=None)
    assert written[0].epoch == lease.epoch + 1
    with pytest.raises(FencedError):  # the old writer, late
        await store.append(lease.epoch, await note(store, run))
    assert len(await store.read(run)) == 2


async def test_a_forged_head_row_is_reported_not_chained_onto(store: SqlJournalStore) -> None:
    run = RunId.generate()
    await store.guarded_append(run, await note(store, run), expected=None)
    await sql(
        store,
        "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r",
        raw=b'{"forged": true}',
        r=str(run),
    )
    with pytest.raises(CorruptRecordError):
        await store.guarded_append(run, await note(store, run), expected=None)


async def test_hostile_lease_and_admission_rows_are_reported_never_a_crash(
    store: SqlJournalStore, dialect: str
) -> None:
    session = JournalSession(store, "hostile")
    await session.add_items([user("a")])
    run = await session.conversation.run_id()
    assert run is not None
    await store.acquire(run, "someone", 60)
    if dialect == "sqlite":  # a column of another type: only SQLite lets it be stored
        await sql(store, "UPDATE run_lease SET expires_at = 'soon' WHERE tenant = :t", r=str(run))
        with pytest.raises(CorruptRecordError, match="expires_at"):
            await session.add_items([user("b")])
    await sql(store, "UPDATE run_admission SET run_id = 'not a run id' WHERE tenant = :t")
    with pytest.raises(CorruptRecordError, match="run_admission"):
        await JournalSession(store, "hostile").get_items()


async def test_a_seal_row_edited_to_another_head_fails_the_read(store: SqlJournalStore) -> None:
    session = JournalSession(store, "sealed")
    await session.add_items([user("a")])
    await session.add_items([user("b")])
    await session.seal()
    run = await session.conversation.run_id()
    assert run is not None
    # the tail deleted, and the seal row pointed at the new head: the log's leaf disagrees
    head = (await store.read(run))[1].hash
    await sql(
        store, "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = 3", r=str(run)
    )
    await sql(
        store,
        "UPDATE run_seal SET chain_head = :h WHERE tenant = :t AND run_id = :r",
        h=bytes(head),
        r=str(run),
    )
    with pytest.raises(CorruptLogError):
        await JournalSession(store, "sealed").get_items()


async def test_a_hostile_seal_or_leaf_is_reported_never_a_crash(
    store: SqlJournalStore, dialect: str
) -> None:
    session = JournalSession(store, "sealed-hostile")
    await session.add_items([user("a")])
    await session.seal()
    run = await session.conversation.run_id()
    assert run is not None
    if dialect == "sqlite":  # a TEXT leaf: only SQLite lets another type be stored
        await sql(
            store, "UPDATE log_tree SET hash = 'x' WHERE tenant = :t AND run_id = :r", r=str(run)
        )
        with pytest.raises(CorruptLogError):
            await JournalSession(store, "sealed-hostile").get_items()
    await sql(store, "DELETE FROM log_tree WHERE tenant = :t AND run_id = :r", r=str(run))
    with pytest.raises(CorruptLogError):
        await JournalSession(store, "sealed-hostile").get_items()
    with pytest.raises(CorruptLogError):
        await session.get_items()  # a warm handle reads the seal at every read


# -- what a handle remembers ---------------------------------------------------------


async def test_a_warm_handle_reads_only_what_follows_and_sees_its_last_record_go(
    store: SqlJournalStore,
) -> None:
    warm = JournalSession(store, "warm")
    for i in range(3):
        await warm.add_items([user(str(i))])
    assert len(await warm.get_items()) == 3
    run = await warm.conversation.run_id()
    assert run is not None
    # another writer's items are read and verified onto what the handle verified
    await JournalSession(store, "warm").add_items([user("3")])
    assert [i["content"] for i in await warm.get_items()] == ["0", "1", "2", "3"]
    # an edit of an earlier record: the warm handle keeps what it verified (the edit never
    # reaches the agent), a new handle reads the whole run and reports it
    await edit(store, run, 2, b'"0"', b'"9"')
    assert [i["content"] for i in await warm.get_items()] == ["0", "1", "2", "3"]
    with pytest.raises(CorruptRecordError):
        await JournalSession(store, "warm").get_items()
    # its own last verified record deleted: the warm handle reports it
    await sql(
        store, "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = 5", r=str(run)
    )
    with pytest.raises(CorruptRecordError, match="gone or changed"):
        await warm.get_items()


async def test_a_pop_from_a_stale_handle_reads_on_and_removes_the_next_item(
    make_store: Any,
) -> None:
    a, b = JournalSession(await make_store(), "s"), JournalSession(await make_store(), "s")
    await a.add_items([user("1"), user("2"), user("3")])
    assert len(await b.get_items()) == 3  # both handles now hold the same state
    assert await a.pop_item() == user("3")
    assert await b.pop_item() == user("2")  # computed from "3", refused, computed again
    assert await b.get_items() == [user("1")] == await a.get_items()


async def test_one_handle_used_by_many_tasks_at_once_stays_consistent(
    store: SqlJournalStore,
) -> None:
    """Reads and changes of one handle take turns: none mistakes another's records for a
    rewrite of what it verified, and concurrent pops remove different items."""
    session = JournalSession(store, "shared-handle")
    await session.add_items([user(str(i)) for i in range(8)])
    other = JournalSession(store, "shared-handle")
    results = await asyncio.gather(
        *(session.pop_item() for _ in range(4)),
        *(session.get_items() for _ in range(4)),
        *(other.add_items([user(f"x{i}")]) for i in range(4)),
    )
    popped = [r["content"] for r in results[:4]]
    assert len(set(popped)) == 4
    assert len(await session.get_items()) == 8


async def test_a_live_claim_makes_a_change_wait_then_busy(store: SqlJournalStore) -> None:
    session = JournalSession(store, "claimed", wait=0.05)
    await session.add_items([user("a")])
    run = await session.conversation.run_id()
    assert run is not None
    await store.acquire(run, "sealer", 60)
    with pytest.raises(ConversationBusyError):
        await session.pop_item()
    assert await session.get_items() == [user("a")]  # reads are not blocked by a claim
    assert await store.guarded_append(run, [], expected=None) == []  # nothing to write


async def test_a_sealed_session_refuses_a_guarded_append(store: SqlJournalStore) -> None:
    session = JournalSession(store, "done")
    await session.add_items([user("a")])
    await session.seal()
    run = await session.conversation.run_id()
    assert run is not None
    with pytest.raises(RunSealedError):
        await store.guarded_append(run, await note(store, run), expected=None)
    with pytest.raises(RunSealedError):
        await session.pop_item()


# -- the race on PostgreSQL ----------------------------------------------------------


def agent() -> Agent[None, str]:
    return Agent(TestModel(custom_output_text="noted"))


async def _pop_race(url: str, clock: FakeClock) -> tuple[list[Any], list[Any]]:
    tenant = f"pop{uuid.uuid4().hex[:10]}"
    stores = [await SqlJournalStore.connect(url, tenant=tenant, clock=clock) for _ in range(K)]
    try:
        sessions = [JournalSession(s, "shared", wait=60) for s in stores]
        await sessions[0].add_items([user(str(i)) for i in range(K)])
        for s in sessions:  # each instance warm, on its own connection, with the same state
            assert len(await s.get_items()) == K
        popped = await race(*(s.pop_item for s in sessions))
        try:
            left: list[Any] = await JournalSession(stores[0], "shared").get_items()
        except CorruptRecordError as corrupt:
            left = [corrupt]
        return popped, left
    finally:
        await asyncio.gather(*(s.close() for s in stores))


@pytest.mark.race
@pytest.mark.postgres
async def test_16_instances_popping_one_session_remove_16_different_items(
    pg_battery_url: str, clock: FakeClock
) -> None:
    popped, left = await _pop_race(pg_battery_url, clock)
    no_surprises(popped)
    assert sorted(p["content"] for p in popped) == sorted(str(i) for i in range(K))
    assert left == []


@pytest.mark.race
@pytest.mark.postgres
async def test_the_pop_race_goes_wrong_with_the_guard_taken_out(
    pg_battery_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race above has teeth: every change landing wherever the run ends (no ``expected``
    head) lets stale pops land, and the session's history stops making sense."""
    guarded = GuardedAppends.guarded_append

    async def unguarded(self: Any, run: RunId, batch: Any, *, expected: Any) -> Any:
        return await guarded(self, run, batch, expected=None)

    monkeypatch.setattr(GuardedAppends, "guarded_append", unguarded)
    popped, left = await _pop_race(pg_battery_url, clock)
    distinct = {p["content"] for p in popped if isinstance(p, dict)}
    assert len(distinct) < K or (left and isinstance(left[0], CorruptRecordError))


async def _save_race(url: str, clock: FakeClock) -> tuple[list[Any], Any]:
    """16 store instances save one revision at once. Each one's handle verified that
    revision at its load, so its ``save`` reads nothing first: the guarded append alone
    decides which lands."""
    tenant = f"save{uuid.uuid4().hex[:10]}"
    stores = [await SqlJournalStore.connect(url, tenant=tenant, clock=clock) for _ in range(K)]
    try:
        cid = "contended"
        first = JournalConversationStore(stores[0])
        await first.save(await agent().run("seed", conversation=Conversation(conversation_id=cid)))
        conversations = [JournalConversationStore(s) for s in stores]
        loaded = [await c.load(cid) for c in conversations]
        results = [await agent().run(f"writer {k}", conversation=c) for k, c in enumerate(loaded)]
        outcomes = await race(
            *(lambda c=c, r=r: c.save(r) for c, r in zip(conversations, results, strict=True))
        )
        return outcomes, await JournalConversationStore(stores[0]).load(cid)
    finally:
        await asyncio.gather(*(s.close() for s in stores))


@pytest.mark.race
@pytest.mark.postgres
async def test_16_saves_of_one_revision_land_once(pg_battery_url: str, clock: FakeClock) -> None:
    outcomes, reread = await _save_race(pg_battery_url, clock)
    no_surprises(outcomes, ConversationConflict)
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert reread is not None and len(reread.messages) == 4


@pytest.mark.race
@pytest.mark.postgres
async def test_the_save_race_goes_wrong_with_the_guard_taken_out(
    pg_battery_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race above has teeth: with each save landing wherever the run ends, saves of one
    revision computed from the same verified state all land (nothing read them again)."""
    guarded = GuardedAppends.guarded_append

    async def unguarded(self: Any, run: RunId, batch: Any, *, expected: Any) -> Any:
        return await guarded(self, run, batch, expected=None)

    monkeypatch.setattr(GuardedAppends, "guarded_append", unguarded)
    outcomes, _ = await _save_race(pg_battery_url, clock)
    assert sum(not isinstance(o, BaseException) for o in outcomes) > 1
