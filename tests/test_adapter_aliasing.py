"""A session adapter's handle never shares objects with its caller (issue 32's warm handles).

The one-transaction change (issue 32) folds a handle's own writes into the state it
verified instead of reading them back. What it folds must be what was stored: objects the
caller handed in (an OpenAI Agents item, a Pydantic AI message) and goes on holding are not,
since the caller may change them after the write. Such a change must not reach what the
warm handle answers; it answers what a cold read of the journal answers. Both dialects.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentplane_journal import SqlJournalStore

try:
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.models.test import TestModel

    from agentplane_journal.adapters.openai_agents import JournalSession
    from agentplane_journal.adapters.pydantic_ai import JournalConversationStore
except ImportError as missing:  # pragma: no cover - the extras are not installed
    if os.environ.get("CI"):
        raise
    pytest.skip(f"an adapter's framework is not installed: {missing}", allow_module_level=True)


async def test_an_item_changed_by_its_caller_after_add_items_is_not_the_sessions(
    store: SqlJournalStore,
) -> None:
    session = JournalSession(store, "aliased")
    item: dict[str, Any] = {"role": "user", "content": [{"type": "input_text", "text": "sent"}]}
    await session.add_items([item])  # type: ignore[list-item]
    item["content"][0]["text"] = "changed afterwards"
    item["content"].append({"type": "input_text", "text": "added afterwards"})
    item["role"] = "assistant"
    cold = await JournalSession(store, "aliased").get_items()
    assert cold == [{"role": "user", "content": [{"type": "input_text", "text": "sent"}]}]
    assert await session.get_items() == cold  # the warm handle: what was stored
    assert await session.pop_item() == cold[0]


async def test_a_message_changed_by_its_caller_after_save_is_not_the_conversations(
    store: SqlJournalStore,
) -> None:
    conversations = JournalConversationStore(store)
    agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
    result = await agent.run("sent", conversation=Conversation(conversation_id="aliased"))
    await conversations.save(result)
    for message in result.all_messages():
        for part in message.parts:
            if part.part_kind == "user-prompt":
                part.content = "changed afterwards"

    def prompts(conversation: Conversation | None) -> list[Any]:
        assert conversation is not None
        return [
            part.content
            for message in conversation.messages
            for part in message.parts
            if part.part_kind == "user-prompt"
        ]

    cold = await JournalConversationStore(store).load("aliased")
    assert prompts(cold) == ["sent"]
    warm = await conversations.load("aliased")  # the store that saved it
    assert prompts(warm) == ["sent"]
    # What a load hands out is the caller's to change, too: the next load is still the journal's.
    assert warm is not None
    for message in warm.messages:
        for part in message.parts:
            if part.part_kind == "user-prompt":
                part.content = "changed after the load"
    assert prompts(await conversations.load("aliased")) == ["sent"]


async def test_a_loaded_conversations_usage_changed_by_its_caller_is_not_the_stores(
    store: SqlJournalStore,
) -> None:
    conversations = JournalConversationStore(store)
    agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
    result = await agent.run("sent", conversation=Conversation(conversation_id="usage"))
    await conversations.save(result)
    loaded = await conversations.load("usage")
    assert loaded is not None
    stored = loaded.usage.input_tokens
    loaded.usage.input_tokens += 1000  # the caller's object, as a run's accounting may be
    cold = await JournalConversationStore(store).load("usage")
    warm = await conversations.load("usage")
    assert cold is not None and warm is not None
    assert cold.usage.input_tokens == stored
    assert warm.usage.input_tokens == stored


async def test_a_listed_record_changed_by_its_caller_is_not_the_stores(
    store: SqlJournalStore,
) -> None:
    conversations = JournalConversationStore(store)
    agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
    result = await agent.run("sent", conversation=Conversation(conversation_id="listed"))
    await conversations.save(result)
    [listed] = [r for r in await conversations.read_records() if r.conversation_id == "listed"]
    stored = listed.usage.input_tokens
    listed.usage.input_tokens += 1000
    warm = await conversations.load("listed")
    assert warm is not None and warm.usage.input_tokens == stored
