"""A warm change is one transaction and one hop; a Pydantic AI save reads nothing first.

Both dialects. A save through ``JournalConversationStore.save`` answers Pydantic AI's
``read_record`` from the state its handle verified last when the conversation is at that
state's revision, and writes with the guarded append, which lands only on the head that
state was verified up to. These tests show that reading nothing first changes no outcome: a
save from a handle another store moved on from still lands nothing (``ConversationConflict``),
and a save of a conversation at a newer revision than the handle's (saved elsewhere) is read
and lands. On SQLite the guarded append's connection goes back to the pool without the reset
hop, unless the hop could have left a transaction open (then it is reset: shown with the
hop broken that way, and with the reset skipped regardless, which must go wrong).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import Append, BackendError, CorruptRecordError, RunId, SqlJournalStore
from agentplane_journal.backends.sqlite import guarded as sqlite_guarded
from agentplane_journal.journal import guarded

try:
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.run import AgentRunResult

    from agentplane_journal.adapters.openai_agents import JournalSession
    from agentplane_journal.adapters.pydantic_ai import JournalConversationStore
except ImportError as missing:  # pragma: no cover - the extras are not installed
    if os.environ.get("CI"):
        raise
    pytest.skip(f"an adapter's framework is not installed: {missing}", allow_module_level=True)

from support.counting import counting


async def turn(prompt: str, after: AgentRunResult[str] | None = None) -> AgentRunResult[str]:
    agent = Agent(TestModel(custom_output_text="noted"))
    conversation = after.conversation if after is not None else Conversation(conversation_id="c")
    return await agent.run(prompt, conversation=conversation)


async def test_a_warm_save_is_one_transaction_one_hop_and_five_round_trips(
    store: SqlJournalStore, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversations = JournalConversationStore(store)
    first = await turn("one")
    await conversations.save(first)
    second = await turn("two", first)
    rehashed: list[int] = []
    original = guarded.record_from_row

    def counted(row: Any, prev: Any = None) -> Any:
        rehashed.append(1)
        return original(row, prev)

    monkeypatch.setattr(guarded, "record_from_row", counted)
    with counting(store.engine) as counts:
        await conversations.save(second)
    assert rehashed == []  # the head it computed from, known by its columns
    # One commit: the guarded append (the run's state read under its mutex, the INSERT).
    assert (counts.transactions, counts.commits) == (1, 1), counts.reads
    if dialect == "sqlite":
        # BEGIN IMMEDIATE, the state read, the INSERT, COMMIT: one hop to aiosqlite's thread
        # (before: a read of what is new, one hop more, and each connection's reset, two).
        assert (counts.statements, counts.hops) == (2, 1)
    else:
        # BEGIN, the run mutex, the state read, the INSERT, COMMIT (before: 8, with the read).
        assert (counts.statements, counts.sent) == (3, 5)
    loaded = await JournalConversationStore(store).load("c")
    assert loaded is not None and len(loaded.messages) == 4


async def test_a_warm_session_change_and_a_cold_read_are_one_hop_each(
    store: SqlJournalStore, dialect: str
) -> None:
    session = JournalSession(store, "s")
    await session.add_items([{"role": "user", "content": "a"}])
    with counting(store.engine) as added:
        await session.add_items([{"role": "user", "content": "b"}])
    with counting(store.engine) as read:
        assert len(await JournalSession(store, "s").get_items()) == 2
    assert (added.transactions, added.commits, read.transactions, read.commits) == (1, 1, 1, 0)
    if dialect == "sqlite":
        assert (added.hops, read.hops) == (1, 1)  # no reset hop on the pool's return
    else:
        assert (added.sent, read.sent) == (5, 3)  # a read: BEGIN, the statement, COMMIT


async def test_a_save_from_a_handle_another_store_moved_on_from_lands_nothing(
    make_store: Callable[..., Any],
) -> None:
    here = JournalConversationStore(await make_store())
    there = JournalConversationStore(await make_store())
    first = await turn("one")
    await here.save(first)  # this handle verified the conversation at first's revision
    loaded = await there.load("c")
    assert loaded is not None
    await there.save(await Agent(TestModel()).run("elsewhere", conversation=loaded))
    stale = await turn("two", first)  # from the revision this handle still holds
    with pytest.raises(ConversationConflict):
        await here.save(stale)
    again = await JournalConversationStore(await make_store()).load("c")
    assert again is not None and len(again.messages) == 4  # the other store's save only
    assert [m.parts[0].content for m in again.messages[2:3]] == ["elsewhere"]  # type: ignore[union-attr]


async def test_a_save_at_a_newer_revision_than_the_handle_holds_reads_it_and_lands(
    make_store: Callable[..., Any],
) -> None:
    here = JournalConversationStore(await make_store())
    there = JournalConversationStore(await make_store())
    await here.save(await turn("one"))  # this handle holds the first revision
    loaded = await there.load("c")
    assert loaded is not None
    moved = await Agent(TestModel()).run("elsewhere", conversation=loaded)
    await there.save(moved)
    newer = await Agent(TestModel()).run("three", conversation=moved.conversation)
    await here.save(newer)  # at the other store's revision: read, then written
    again = await JournalConversationStore(await make_store()).load("c")
    assert again is not None and len(again.messages) == 6


def _left_open(conn: sqlite3.Connection, *args: Any) -> Any:
    """A hop that fails with its transaction still open (a ROLLBACK that could not run)."""
    conn.execute("BEGIN IMMEDIATE")
    raise sqlite3.OperationalError("disk I/O error (simulated, transaction left open)")


@pytest.fixture
async def sqlite_store(sqlite_database: Callable[..., str]) -> AsyncIterator[SqlJournalStore]:
    store = await SqlJournalStore.connect(sqlite_database())
    try:
        yield store
    finally:
        await store.close()


async def test_a_connection_a_failed_hop_may_leave_in_a_transaction_is_reset(
    sqlite_store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = JournalSession(sqlite_store, "r")
    await session.add_items([{"role": "user", "content": "a"}])
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_guarded, "_append", _left_open)
        with pytest.raises(BackendError):
            await session.add_items([{"role": "user", "content": "b"}])
    # One connection at a time here: the next change gets the one the failure gave back.
    await session.add_items([{"role": "user", "content": "c"}])
    contents = [i["content"] for i in await JournalSession(sqlite_store, "r").get_items()]
    assert contents == ["a", "c"]


async def test_the_reset_is_needed_there_skipping_it_regardless_goes_wrong(
    sqlite_store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above has teeth: with the reset skipped after any outcome, the connection
    goes back in the failed hop's transaction and the next change cannot begin its own."""
    session = JournalSession(sqlite_store, "r")
    await session.add_items([{"role": "user", "content": "a"}])
    monkeypatch.setattr(sqlite_guarded, "ConflictError", Exception)  # every error "judged"
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_guarded, "_append", _left_open)
        with pytest.raises(BackendError):
            await session.add_items([{"role": "user", "content": "b"}])
    with pytest.raises(BackendError, match="within a transaction"):
        await session.add_items([{"role": "user", "content": "c"}])


async def test_the_expected_head_is_known_by_its_columns_any_other_is_rehashed(
    store: SqlJournalStore,
) -> None:
    """The guarded append compares the head row's seq and hash columns with the head the
    change was computed from (verified when it was read) instead of re-hashing the row: a
    head whose hash column was edited is no longer that head and is re-hashed (refused), and
    an edit of the row's other columns under the right hash is left to verify, which reports
    it (the new record chains onto the true hash)."""
    run = RunId.generate()
    first = await store.guarded_append(run, [Append(run, "Note", {"n": 1})], expected=None)
    head = (first[-1].seq, first[-1].hash)
    where = "WHERE tenant = :t AND run_id = :r AND seq = 1"
    params = {"t": store.tenant, "r": str(run)}

    async def column(name: str, value: bytes) -> None:
        async with store.engine.begin() as conn:
            await conn.execute(
                text(f"UPDATE journal SET {name} = :v {where}"), {**params, "v": value}
            )

    await column("hash", b"\0" * 32)
    with pytest.raises(CorruptRecordError):  # re-hashed: not chained onto, not a "move"
        await store.guarded_append(run, [Append(run, "Note", {"n": 2})], expected=head)
    await column("hash", bytes(head[1]))
    assert b'"n":1' in first[-1].raw
    await column("raw", first[-1].raw.replace(b'"n":1', b'"n":7'))
    second = await store.guarded_append(run, [Append(run, "Note", {"n": 2})], expected=head)
    assert second[0].prev_hash == head[1]
    with pytest.raises(CorruptRecordError):
        await store.verify(run)


async def test_a_change_cancelled_mid_hop_gives_its_connection_back(
    sqlite_store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while its hop runs on aiosqlite's thread, a change's connection goes back to
    the pool the ordinary way (reset, queued behind the hop), also when the caller is
    cancelled again meanwhile, and the next change finds the database free. (Without the
    shielded return SQLAlchemy's reset would invalidate the connection instead: back in the
    pool as well, so this test does not tell the two apart.)"""
    session = JournalSession(sqlite_store, "x")
    await session.add_items([{"role": "user", "content": "a"}])
    entered, release = threading.Event(), threading.Event()
    original = sqlite_guarded._append

    def held(*args: Any) -> Any:
        entered.set()
        release.wait(10)
        return original(*args)

    monkeypatch.setattr(sqlite_guarded, "_append", held)
    task = asyncio.ensure_future(session.add_items([{"role": "user", "content": "b"}]))
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    await asyncio.sleep(0.01)
    task.cancel()  # again, while the connection is being given back
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    pool = sqlite_store.engine.sync_engine.pool
    assert pool.checkedout() == 0  # type: ignore[attr-defined]
    monkeypatch.setattr(sqlite_guarded, "_append", original)
    await session.add_items([{"role": "user", "content": "c"}])
    contents = [i["content"] for i in await JournalSession(sqlite_store, "x").get_items()]
    assert contents[0] == "a" and contents[-1] == "c"  # "b" landed or not, never half


async def test_a_sqlalchemy_without_the_private_return_gives_the_connection_back_reset(
    sqlite_store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skipped reset rests on SQLAlchemy's private ``_close_special``: a SQLAlchemy whose
    method takes other arguments (or has none) gets its connection back the ordinary way,
    reset: one hop more, nothing lost. (Red with the ``TypeError`` not caught.)"""
    from sqlalchemy.pool.base import _ConnectionFairy

    def other(self: Any) -> None:  # no transaction_reset: a call to it raises TypeError
        raise AssertionError("never reached")

    monkeypatch.setattr(_ConnectionFairy, "_close_special", other)
    session = JournalSession(sqlite_store, "p")
    await session.add_items([{"role": "user", "content": "a"}])
    with counting(sqlite_store.engine) as added:
        await session.add_items([{"role": "user", "content": "b"}])
    assert added.hops == 2  # the change, then the pool's reset
    pool = sqlite_store.engine.sync_engine.pool
    assert pool.checkedout() == 0  # type: ignore[attr-defined]
    assert len(await JournalSession(sqlite_store, "p").get_items()) == 2
