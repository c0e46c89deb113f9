"""Pydantic AI's ConversationStore over the journal, on both dialects, with a real agent.

The agent's model is Pydantic AI's own ``TestModel`` (no network). Skips when Pydantic AI is
absent, except under ``CI``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import CorruptRecordError, RunSealedError

try:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict
    from pydantic_ai.models.test import TestModel
except ImportError as missing:  # pragma: no cover - the extra is not installed
    if os.environ.get("CI"):
        raise
    pytest.skip(f"Pydantic AI is not installed: {missing}", allow_module_level=True)

from agentplane_journal.adapters.pydantic_ai import JournalConversationStore


def agent() -> Agent[None, str]:
    return Agent(TestModel(custom_output_text="noted"), instructions="be brief")


async def turn(conversations: JournalConversationStore, cid: str, prompt: str) -> Any:
    conversation = await conversations.load(cid) or Conversation(conversation_id=cid)
    result = await agent().run(prompt, conversation=conversation)
    await conversations.save(result)
    return result


async def test_an_agent_continues_a_conversation_saved_in_the_journal(store: Any) -> None:
    conversations = JournalConversationStore(store)
    await turn(conversations, "c1", "first")
    # another process (another store object) continues it
    again = JournalConversationStore(store)
    result = await turn(again, "c1", "second")
    loaded = await again.load("c1")
    assert loaded is not None
    assert loaded.messages == result.all_messages()
    assert len(loaded.messages) == 4
    prompts = [
        part.content
        for message in loaded.messages
        for part in message.parts
        if part.part_kind == "user-prompt"
    ]
    assert prompts == ["first", "second"]
    entries = await again.load_entries("c1")
    assert entries is not None and len(entries) == 4
    run = await again.conversation("c1").run_id()
    assert run is not None
    kinds = [r.kind for r in await store.read(run)]
    assert kinds == ["RunAdmitted", "ConversationSaved", "ConversationSaved"]
    await store.verify(run)


async def test_a_stale_save_is_a_conflict_and_writes_nothing(store: Any) -> None:
    conversations = JournalConversationStore(store)
    await turn(conversations, "c2", "hello")
    one = await conversations.load("c2")
    two = await conversations.load("c2")
    assert one is not None and two is not None
    await conversations.save(await agent().run("from one", conversation=one))
    with pytest.raises(ConversationConflict):
        await conversations.save(await agent().run("from two", conversation=two))
    run = await conversations.conversation("c2").run_id()
    assert run is not None
    assert len(await store.read(run)) == 3  # admission + two saves: the stale one wrote nothing


async def test_concurrent_saves_of_one_revision_land_once(make_store: Any) -> None:
    stores = [await make_store() for _ in range(4)]
    await turn(JournalConversationStore(stores[0]), "c3", "seed")
    loaded = [await JournalConversationStore(s).load("c3") for s in stores]
    results = [await agent().run(f"writer {k}", conversation=c) for k, c in enumerate(loaded)]
    outcomes = await asyncio.gather(
        *(JournalConversationStore(s).save(r) for s, r in zip(stores, results, strict=True)),
        return_exceptions=True,
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, ConversationConflict) for o in refused), refused


async def test_branch_fork_list_and_delete_behave_as_pydantic_ai_documents(store: Any) -> None:
    conversations = JournalConversationStore(store)
    await turn(conversations, "c4", "one")
    await turn(conversations, "c4", "two")
    loaded = await conversations.load("c4")
    assert loaded is not None and len(loaded.messages) == 4
    fork = await conversations.fork("c4", at=2, new_conversation_id="c4-fork", scope="alice")
    assert len(fork.messages) == 2
    branched = await conversations.branch("c4", at=2, expected_revision=loaded.revision)
    assert len(branched.messages) == 2
    record = await conversations.read_record("c4")
    assert record is not None and len(record.branches) == 1
    listed = await conversations.list_conversations()
    assert {r.conversation_id for r in listed} >= {"c4", "c4-fork"}
    assert [r.conversation_id for r in await conversations.list_conversations(scope="alice")] == [
        "c4-fork"
    ]
    await conversations.delete("c4")
    assert await conversations.load("c4") is None
    # the fork still reads: its entries point into the deleted conversation, which kept them
    reread = await JournalConversationStore(store).load("c4-fork")
    assert reread is not None and reread.messages == fork.messages
    # the deletion is a record, not an erasure
    run = await conversations.conversation("c4").run_id()
    assert run is not None
    assert (await store.read(run))[-1].kind == "ConversationDeleted"
    # and the conversation can be created again under its id, with a new revision
    await turn(conversations, "c4", "again")
    again = await conversations.load("c4")
    assert again is not None and len(again.messages) == 2


async def test_an_edited_message_fails_the_load(store: Any) -> None:
    conversations = JournalConversationStore(store)
    await turn(conversations, "c5", "pay alice 10")
    run = await conversations.conversation("c5").run_id()
    where = "WHERE tenant = :t AND run_id = :r AND seq = 2"
    params = {"t": store.tenant, "r": str(run)}
    async with store.engine.begin() as conn:
        raw = (await conn.execute(text(f"SELECT raw FROM journal {where}"), params)).scalar_one()
        await conn.execute(
            text(f"UPDATE journal SET raw = :raw {where}"),
            {**params, "raw": raw.replace(b"alice", b"mallory")},
        )
    with pytest.raises(CorruptRecordError):
        await JournalConversationStore(store).load("c5")


async def test_a_sealed_conversation_takes_no_more_saves(store: Any) -> None:
    conversations = JournalConversationStore(store)
    await turn(conversations, "c6", "hello")
    assert await conversations.seal("c6") is not None
    with pytest.raises(RunSealedError):
        await turn(conversations, "c6", "more")
    assert await conversations.seal("never-saved") is None


async def test_a_paused_run_waits_in_the_journal_for_approval_and_resumes_once(
    make_store: Any,
) -> None:
    """Human in the loop: a tool needing approval pauses the run; its deferred request is
    saved with the conversation, and another process approves and resumes it."""
    refunds: list[int] = []
    support = Agent(TestModel(), output_type=[str, DeferredToolRequests])

    @support.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        refunds.append(amount)
        return f"refunded {amount}"

    conversations = JournalConversationStore(await make_store())
    paused = await support.run("refund me", conversation=Conversation(conversation_id="hitl"))
    assert isinstance(paused.output, DeferredToolRequests) and refunds == []
    await conversations.save(paused)

    elsewhere = JournalConversationStore(await make_store())  # the approver's process
    loaded = await elsewhere.load("hitl")
    assert loaded is not None and loaded.deferred_tool_requests is not None
    calls = loaded.deferred_tool_requests.approvals
    assert [c.tool_name for c in calls] == ["refund"]
    approvals = DeferredToolResults(approvals={c.tool_call_id: True for c in calls})
    resumed = await support.run(conversation=loaded, deferred_tool_results=approvals)
    await elsewhere.save(resumed)
    assert refunds == [0]
    final = await JournalConversationStore(await make_store()).load("hitl")
    assert final is not None and final.deferred_tool_requests is None
    assert final.messages == resumed.all_messages()
