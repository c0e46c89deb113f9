"""The OpenAI Agents SDK session adapter, on both dialects, with a real SDK agent.

The model is stubbed (no network): a ``Model`` that answers every turn with one message
naming how many input items it was given, so the test sees exactly what history the SDK
read back from the journal. Skips when the SDK is absent, except under ``CI``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import (
    AGENTPLANE_0_22,
    Append,
    ConversationBusyError,
    CorruptRecordError,
    Digest,
    Record,
    RunId,
    RunSealedError,
    SqlJournalStore,
)

try:
    import agents
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText
except ImportError as missing:  # pragma: no cover - the extra is not installed
    if os.environ.get("CI"):
        raise
    pytest.skip(f"the OpenAI Agents SDK is not installed: {missing}", allow_module_level=True)

from agentplane_journal.adapters.openai_agents import JournalSession, replay


class CountingModel(Model):
    """Answers each turn with how many input items the SDK sent it."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        count = 1 if isinstance(input, str) else len(input)
        self.seen.append(count)
        message = ResponseOutputMessage(
            id=f"msg_{len(self.seen)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=f"saw {count}", annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - not used
        raise NotImplementedError


async def edit(store: Any, run: Any, seq: int, old: bytes, new: bytes) -> None:
    """An at-rest edit by someone with write access to the table (no key)."""
    where = "WHERE tenant = :t AND run_id = :r AND seq = :s"
    params = {"t": store.tenant, "r": str(run), "s": seq}
    async with store.engine.begin() as conn:
        raw = (await conn.execute(text(f"SELECT raw FROM journal {where}"), params)).scalar_one()
        await conn.execute(
            text(f"UPDATE journal SET raw = :raw {where}"), {**params, "raw": raw.replace(old, new)}
        )


def user(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": text_}


async def test_the_protocol_round_trips_and_pop_and_clear_are_recorded(store: Any) -> None:
    session = JournalSession(store, "chat-1")
    assert isinstance(session, agents.memory.Session)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([user("a"), user("b")])
    await session.add_items([user("c")])
    assert await session.get_items() == [user("a"), user("b"), user("c")]
    assert await session.get_items(limit=2) == [user("b"), user("c")]
    assert await session.get_items(limit=0) == []
    assert await session.pop_item() == user("c")
    assert await session.get_items() == [user("a"), user("b")]
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([user("d")])
    # a new handle (another process) sees the same conversation
    assert await JournalSession(store, "chat-1").get_items() == [user("d")]
    run = await session.conversation.run_id()
    assert run is not None
    kinds = [r.kind for r in await store.read(run)]
    assert kinds == [
        "RunAdmitted",
        "SessionItemsAdded",
        "SessionItemsAdded",
        "SessionItemPopped",
        "SessionCleared",
        "SessionItemsAdded",
    ]
    await store.verify(run)


async def test_a_real_agent_reads_its_history_back_from_the_journal(store: Any) -> None:
    model = CountingModel()
    agent = agents.Agent(name="assistant", instructions="be brief", model=model)
    session = JournalSession(store, "agent-chat")
    first = await agents.Runner.run(agent, "hello", session=session)
    assert first.final_output == "saw 1"
    second = await agents.Runner.run(agent, "again", session=JournalSession(store, "agent-chat"))
    # the second turn was sent the first turn's question and answer, then the new question
    assert second.final_output == "saw 3"
    items = await session.get_items()
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]


async def test_concurrent_writers_take_turns_and_never_lose_an_item(make_store: Any) -> None:
    stores = [await make_store() for _ in range(4)]
    sessions = [JournalSession(s, "shared") for s in stores]
    await sessions[0].add_items([user("seed")])

    async def writer(k: int) -> None:
        for i in range(5):
            await sessions[k].add_items([user(f"{k}-{i}")])

    await asyncio.gather(*(writer(k) for k in range(4)))
    items = await sessions[0].get_items()
    assert len(items) == 21
    assert sorted(i["content"] for i in items[1:]) == sorted(
        f"{k}-{i}" for k in range(4) for i in range(5)
    )
    # and concurrent pops remove distinct items
    popped = await asyncio.gather(*(s.pop_item() for s in sessions))
    assert len({p["content"] for p in popped if p}) == 4
    assert len(await sessions[0].get_items()) == 17


async def test_two_processes_creating_one_session_share_one_run(make_store: Any) -> None:
    a, b = await make_store(), await make_store()
    await asyncio.gather(
        JournalSession(a, "race").add_items([user("from a")]),
        JournalSession(b, "race").add_items([user("from b")]),
    )
    ra = await JournalSession(a, "race").conversation.run_id()
    rb = await JournalSession(b, "race").conversation.run_id()
    assert ra == rb
    assert len(await JournalSession(a, "race").get_items()) == 2


async def test_a_claim_held_by_a_dead_writer_is_waited_for_then_named(
    store: Any, clock: Any
) -> None:
    session = JournalSession(store, "stuck", wait=0.05)
    await session.add_items([user("x")])
    run = await session.conversation.run_id()
    assert run is not None
    await store.acquire(run, "dead-writer", 60)  # a writer that died mid-change
    with pytest.raises(ConversationBusyError) as busy:
        await session.add_items([user("y")])
    assert busy.value.owner == "dead-writer"
    assert "nothing of this change was written" in str(busy.value)
    clock.advance(61)  # its claim lapses: the next change takes over
    await session.add_items([user("y")])
    assert await session.get_items() == [user("x"), user("y")]


async def test_an_edited_item_fails_the_read_instead_of_reaching_the_agent(
    store: Any,
) -> None:
    session = JournalSession(store, "tampered")
    await session.add_items([user("pay alice 10")])
    run = await session.conversation.run_id()
    await edit(store, run, 2, b"alice", b"mallory")
    with pytest.raises(CorruptRecordError):
        await session.get_items()


async def test_a_sealed_session_refuses_items_and_catches_a_deleted_tail(store: Any) -> None:
    session = JournalSession(store, "sealed")
    await session.add_items([user("a")])
    await session.add_items([user("b")])
    assert await session.seal() is not None
    with pytest.raises(RunSealedError):
        await session.add_items([user("c")])
    run = await session.conversation.run_id()
    async with store.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = 3"),
            {"t": store.tenant, "r": str(run)},
        )
    with pytest.raises(CorruptRecordError):
        await session.get_items()


def chain(*appends: Append) -> list[Record]:
    """Records as a writer without our adapter (or with the table and no key) could seal them."""
    records: list[Record] = []
    prev = Digest.ZERO
    for seq, append in enumerate(appends, 1):
        records.append(Record.seal(append.body(seq, 1), prev))
        prev = records[-1].hash
    return records


def test_replay_refuses_a_pop_that_names_an_older_item() -> None:
    run = RunId.generate()
    added = Append(run, "SessionItemsAdded", {"items": [user("a"), user("b")]})
    good = chain(added, Append(run, "SessionItemPopped", {"item_seq": 1, "item_index": 1}))
    assert [item for _s, _i, item in replay(good)] == [user("a")]
    forged = chain(added, Append(run, "SessionItemPopped", {"item_seq": 1, "item_index": 0}))
    with pytest.raises(CorruptRecordError, match="not the newest"):
        replay(forged)
    with pytest.raises(CorruptRecordError, match="no item list"):
        replay(chain(Append(run, "SessionItemsAdded", {"items": "a"})))


async def test_a_bad_limit_and_a_bad_id_are_refused_before_any_statement(
    store: SqlJournalStore,
) -> None:
    with pytest.raises(ValueError):
        JournalSession(store, "")
    with pytest.raises(ValueError):
        await JournalSession(store, "x").get_items(limit=-1)


async def test_a_session_in_an_agentplane_0_22_journal_writes_that_profile(
    make_store: Any,
) -> None:
    store = await make_store(profile=AGENTPLANE_0_22)
    session = JournalSession(store, "v1")
    await session.add_items([user("a")])
    assert await session.pop_item() == user("a")
    run = await session.conversation.run_id()
    assert run is not None
    records = await store.read(run)
    assert {r.body["v"] for r in records} == {1} and records[0].canon == 1
    await store.verify(run)


async def test_an_admission_row_pointed_at_another_run_is_refused_not_followed(
    store: Any,
) -> None:
    """run_admission is a side table: pointing a session's key at another session's run
    (write access, no key) must not serve that run's history as this session's."""
    await JournalSession(store, "alice").add_items([user("alice's secret")])
    await JournalSession(store, "bob").add_items([user("bob's")])
    alice_run = await JournalSession(store, "alice").conversation.run_id()
    async with store.engine.begin() as conn:
        await conn.execute(
            text("UPDATE run_admission SET run_id = :r WHERE tenant = :t AND key = :k"),
            {"r": str(alice_run), "t": store.tenant, "k": "openai-agents:bob"},
        )
    with pytest.raises(CorruptRecordError, match="does not begin with the admission"):
        await JournalSession(store, "bob").get_items()
