"""Erasure where users need it: the adapters' record kinds are sealed field by field (what
carries the caller's data sealed, what a reader routes on clear), and the LangGraph saver,
the OpenAI Agents session and the Pydantic AI store can erase a thread or a conversation
(its scope): afterwards it reads as absent (or as typed erased), others are untouched, and
``verify --all`` passes with the erasure listed."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from agentplane_journal import SqlJournalStore
from agentplane_journal.core.sealed import Erased, sealed_fields, still_sealed, wrap_value
from agentplane_journal.errors import PayloadsErasedError
from agentplane_journal.keyring import FileKeySource, Keyring, ScopeErasedError
from agentplane_journal.keyring.store import SealingStore

from support.databases import run_blocking

# -- 1. the field lists (pure) -----------------------------------------------------------

OWN = {
    "LangGraphCheckpoint": (
        {
            "thread": "t",
            "ns": "",
            "id": "c1",
            "parent": "c0",
            "checkpoint": ["json", "e30="],
            "metadata": ["json", "e30="],
            "blobs": [],
        },
        ["checkpoint", "metadata", "blobs"],
    ),
    "LangGraphWrites": (
        {"thread": "t", "ns": "", "checkpoint": "c1", "task": "k", "path": "", "writes": []},
        ["writes"],
    ),
    "LangGraphDeleted": ({"thread": "t", "why": "delete_thread"}, []),
    "LangGraphCopied": ({"thread": "t", "from": "s", "from_seq": 3, "from_head": "ab"}, []),
    "SessionItemsAdded": ({"items": [{"role": "user", "content": "hi"}]}, ["items"]),
    "SessionItemPopped": ({"item_seq": 2, "item_index": 0}, []),
    "SessionCleared": ({}, []),
    "ConversationSaved": (
        {"record": {"conversation_id": "c"}, "entries": []},
        ["record", "entries"],
    ),
    "ConversationDeleted": ({"revision": "r1"}, []),
}


@pytest.mark.parametrize("kind", sorted(OWN))
def test_own_kinds_seal_the_callers_data_and_keep_routing_clear(kind: str) -> None:
    payload, expected = OWN[kind]
    fields = sealed_fields(kind, payload)
    assert [".".join(f.path) for f in fields] == expected
    assert all(not f.text for f in fields)
    routing = {"thread", "ns", "id", "parent", "task", "path", "revision", "why", "from"}
    assert not routing & {".".join(f.path) for f in fields}


def test_own_kinds_list_only_the_fields_present() -> None:
    assert sealed_fields("LangGraphCheckpoint", {"thread": "t", "checkpoint": ["json", ""]}) == [
        f
        for f in sealed_fields("LangGraphCheckpoint", OWN["LangGraphCheckpoint"][0])
        if f.path == ("checkpoint",)
    ]
    assert sealed_fields("SessionItemsAdded", {}) == []


def test_agentplane_kinds_are_unchanged() -> None:
    assert [f.path for f in sealed_fields("RunAdmitted", {"input": 1})] == [("input",)]
    assert sealed_fields("RunAdmitted", {"idempotency_key": "k"}) == []
    assert [f.path for f in sealed_fields("Note", {"text": "x"})] == [("text",)]


def test_still_sealed_names_what_a_reader_could_not_open() -> None:
    payload, _ = OWN["ConversationSaved"]
    assert still_sealed("ConversationSaved", payload) == []
    closed = {**payload, "record": wrap_value(b"\x01envelope")}
    assert still_sealed("ConversationSaved", closed) == ["record"]
    gone = {**payload, "entries": Erased("t/run")}
    assert still_sealed("ConversationSaved", gone) == ["entries"]
    assert still_sealed("SessionCleared", {}) == []
    # a hostile marker of another shape is not "sealed": the reader's own checks judge it
    assert still_sealed("SessionItemsAdded", {"items": {"$sealed": 1}}) == []


# -- 2. the LangGraph saver ----------------------------------------------------------------

lg = pytest.importorskip("langgraph.graph")


class State(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def _draft(state: State) -> dict[str, Any]:
    return {"log": [f"draft:{state['topic']}"]}


def _graph(saver: Any) -> Any:
    builder = lg.StateGraph(State)
    builder.add_node("draft", _draft)
    builder.add_edge(lg.START, "draft")
    builder.add_edge("draft", lg.END)
    return builder.compile(checkpointer=saver)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _verify_all_lists(cli: Callable[..., Any], url: str, scopes: list[str]) -> None:
    verified = cli("verify", "--all", "--url", url, "--json")
    assert verified.returncode == 0, verified.out
    report = json.loads(verified.stdout)
    assert report["failed"] == 0
    assert [e["scope"] for e in report["erasures"]] == scopes


@pytest.mark.parametrize("profile", ["agentplane-0.4", "agentplane-0.22"])
def test_langgraph_delete_thread_erases_the_threads_scope(
    fresh: Callable[..., str], cli: Callable[..., Any], tmp_path: Path, profile: str
) -> None:
    from agentplane_journal.langgraph import JournalSaver, thread_run
    from agentplane_journal.langgraph.erasure import thread_scope

    url = fresh()
    keys = tmp_path / "keys.json"

    async def scenario() -> str:
        async with await SqlJournalStore.connect(url, profile=profile) as store:
            saver = JournalSaver(store, keyring=Keyring(FileKeySource(keys)))
            g = _graph(saver)
            await g.ainvoke({"topic": "secret-topic", "log": []}, _cfg("gone"))
            await g.ainvoke({"topic": "kept-topic", "log": []}, _cfg("kept"))
            raw = b"".join(r.raw for r in await store.read(thread_run("gone")))
            assert b"secret" not in raw  # node names and ids stay clear, values do not
            got = await saver.aget_tuple(_cfg("gone"))
            assert got is not None and got.checkpoint["channel_values"]["topic"] == "secret-topic"
            kept = await saver.aget_tuple(_cfg("kept"))
            assert kept is not None

            await saver.adelete_thread("gone", erase=True, by="dpo", reason="art. 17")
            assert await saver.aget_tuple(_cfg("gone")) is None
            cold = JournalSaver(store, keyring=Keyring(FileKeySource(keys)))
            assert await cold.aget_tuple(_cfg("gone")) is None
            again = await cold.aget_tuple(_cfg("kept"))
            assert again is not None and again.checkpoint == kept.checkpoint
            # A lean resume of a sealed thread replays it (its reads by seq are not opened):
            # nine puts moving one channel, so the newest names records out of the last 8.
            from langgraph.checkpoint.base.id import uuid6

            config = kept.config
            for i in range(9):
                versions = {**kept.checkpoint["channel_versions"], "topic": 100 + i}
                moved = {**kept.checkpoint, "id": str(uuid6(clock_seq=-1))}
                moved.update(channel_values={"topic": f"t{i}"}, channel_versions=versions)
                config = await saver.aput(config, moved, {}, {"topic": 100 + i})  # type: ignore[arg-type]
            lean = JournalSaver(store, keyring=Keyring(FileKeySource(keys)), lean_resume=True)
            opened = await lean.aget_tuple(_cfg("kept"))
            whole = await JournalSaver(store, keyring=Keyring(FileKeySource(keys))).aget_tuple(
                _cfg("kept")
            )
            assert opened is not None and whole is not None
            assert opened.checkpoint == whole.checkpoint
            assert len(whole.checkpoint["channel_values"]) > 1
            threads = {t.config["configurable"]["thread_id"] async for t in cold.alist(None)}
            assert threads == {"kept"} and cold.damaged == []
            await cold.averify_thread("gone")  # the chain is intact
            with pytest.raises(ScopeErasedError):  # a late write is refused, never lands
                await _graph(cold).ainvoke({"topic": "x", "log": []}, _cfg("gone"))
            await saver.adelete_thread("gone", erase=True, by="dpo")  # idempotent
            await saver.aclose()
            await cold.aclose()
            return thread_scope(store.tenant, "gone")

    scope = run_blocking(scenario())
    _verify_all_lists(cli, url, [scope])


async def test_langgraph_an_erasure_without_tombstone_reads_as_typed_erased(
    make_store: Callable[..., Any], tmp_path: Path
) -> None:
    from agentplane_journal.langgraph import JournalSaver
    from agentplane_journal.langgraph.erasure import thread_scope

    store: SqlJournalStore = await make_store()
    keyring = Keyring(FileKeySource(tmp_path / "keys.json"))
    saver = JournalSaver(store, keyring=keyring)
    await _graph(saver).ainvoke({"topic": "t", "log": []}, _cfg("t1"))
    await saver.aclose()
    # a saver with no keyring reads a sealed thread as unreadable, typed, never corrupt
    with pytest.raises(PayloadsErasedError, match="no key"):
        await JournalSaver(store).aget_tuple(_cfg("t1"))
    # erasing the scope directly (the CLI's `erase SCOPE`): no tombstone
    await SealingStore(store, keyring).erase(thread_scope(store.tenant, "t1"), by="ops")
    with pytest.raises(PayloadsErasedError) as gone:
        await JournalSaver(store, keyring=keyring).aget_tuple(_cfg("t1"))
    assert gone.value.seq == 1 and "checkpoint" in gone.value.fields
    with pytest.raises(PayloadsErasedError):
        await JournalSaver(store, keyring=keyring).acopy_thread("t1", "t2")


async def test_langgraph_erase_on_an_unsealed_saver_is_refused_before_writing(
    make_store: Callable[..., Any],
) -> None:
    from agentplane_journal.langgraph import JournalSaver, thread_run

    store: SqlJournalStore = await make_store()
    saver = JournalSaver(store, erase_on_delete=True)
    await _graph(saver).ainvoke({"topic": "t", "log": []}, _cfg("t1"))
    head = await store.head(thread_run("t1"))
    with pytest.raises(TypeError, match="keyring="):
        await saver.adelete_thread("t1")
    assert await store.head(thread_run("t1")) == head
    await saver.adelete_thread("t1", erase=False)  # the tombstone alone, as LangGraph's
    assert await saver.aget_tuple(_cfg("t1")) is None
    await saver.aclose()


# -- 3. the OpenAI Agents session and the Pydantic AI store ----------------------------------


@pytest.mark.parametrize("profile", ["agentplane-0.4", "agentplane-0.22"])
def test_openai_agents_session_erase(
    fresh: Callable[..., str], cli: Callable[..., Any], tmp_path: Path, profile: str
) -> None:
    pytest.importorskip("agents")
    from agentplane_journal.adapters.openai_agents import JournalSession

    url = fresh()
    keys = tmp_path / "keys.json"

    async def scenario() -> str:
        async with await SqlJournalStore.connect(url, profile=profile) as store:
            sealing = SealingStore(store, Keyring(FileKeySource(keys)))
            gone, kept = JournalSession(sealing, "s-gone"), JournalSession(sealing, "s-kept")
            secret: Any = {"role": "user", "content": "my card is 4111"}
            await gone.add_items([secret, {"role": "assistant", "content": "noted"}])
            await gone.pop_item()
            await kept.add_items([{"role": "user", "content": "hello"}])
            run = await gone.conversation.run_id()
            assert run is not None
            raw = b"".join(r.raw for r in await store.read(run))
            assert b"4111" not in raw and b"noted" not in raw
            assert await gone.get_items() == [secret]

            erasure = await gone.erase(by="dpo", reason="art. 17")
            assert erasure is not None and erasure.covered_run == str(run)
            assert await gone.get_items() == []
            assert await JournalSession(sealing, "s-gone").get_items() == []
            assert await JournalSession(sealing, "s-kept").get_items() == [
                {"role": "user", "content": "hello"}
            ]
            with pytest.raises(ScopeErasedError):
                await gone.add_items([{"role": "user", "content": "again"}])
            assert await gone.erase(by="dpo") == erasure  # idempotent: the first one
            assert await JournalSession(sealing, "never").erase(by="dpo") is None
            # a reader with no key: the tombstone makes it empty too, not corrupt
            assert await JournalSession(store, "s-gone").get_items() == []
            await store.verify(run)
            return sealing.scope_of(run)

    scope = run_blocking(scenario())
    _verify_all_lists(cli, url, [scope])


async def test_openai_agents_erased_without_tombstone_is_typed_and_unsealed_erase_refused(
    make_store: Callable[..., Any], tmp_path: Path
) -> None:
    pytest.importorskip("agents")
    from agentplane_journal.adapters.openai_agents import JournalSession

    store: SqlJournalStore = await make_store()
    sealing = SealingStore(store, Keyring(FileKeySource(tmp_path / "keys.json")))
    session = JournalSession(sealing, "s1")
    await session.add_items([{"role": "user", "content": "hi"}])
    with pytest.raises(PayloadsErasedError, match="no key"):
        await JournalSession(store, "s1").get_items()
    run = await session.conversation.run_id()
    assert run is not None
    await sealing.erase(sealing.scope_of(run), by="ops")  # the CLI's erase: no tombstone
    # A new handle (a new process, a new request) reads it as erased; a warm handle keeps
    # what it opened before (documented: erase through the adapter to clear it too).
    with pytest.raises(PayloadsErasedError) as gone:
        await JournalSession(sealing, "s1").get_items()
    assert gone.value.seq == 2 and gone.value.fields == ["items"]

    plain = JournalSession(store, "s2")
    await plain.add_items([{"role": "user", "content": "hi"}])
    head = await store.head(await plain.conversation.run_id())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SealingStore"):
        await plain.erase(by="dpo")
    assert await store.head(await plain.conversation.run_id()) == head  # type: ignore[arg-type]


@pytest.mark.parametrize("profile", ["agentplane-0.4", "agentplane-0.22"])
def test_pydantic_ai_store_erase(
    fresh: Callable[..., str], cli: Callable[..., Any], tmp_path: Path, profile: str
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.models.test import TestModel

    from agentplane_journal.adapters.pydantic_ai import JournalConversationStore

    url = fresh()
    keys = tmp_path / "keys.json"

    async def turn(conversations: JournalConversationStore, cid: str, prompt: str) -> None:
        conversation = await conversations.load(cid) or Conversation(conversation_id=cid)
        agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
        await conversations.save(await agent.run(prompt, conversation=conversation))

    async def scenario() -> str:
        async with await SqlJournalStore.connect(url, profile=profile) as store:
            sealing = SealingStore(store, Keyring(FileKeySource(keys)))
            conversations = JournalConversationStore(sealing)
            await turn(conversations, "c-gone", "my card is 4111")
            await turn(conversations, "c-gone", "and my address")
            await turn(conversations, "c-kept", "hello")
            run = await conversations.conversation("c-gone").run_id()
            assert run is not None
            raw = b"".join(r.raw for r in await store.read(run))
            assert b"4111" not in raw and b"address" not in raw
            assert await conversations.load("c-gone") is not None

            erasure = await conversations.erase("c-gone", by="dpo", reason="art. 17")
            assert erasure is not None and erasure.covered_run == str(run)
            fresh_reader = JournalConversationStore(sealing)
            assert await fresh_reader.load("c-gone") is None
            kept = await fresh_reader.load("c-kept")
            assert kept is not None and len(kept.messages) == 2
            listed = await fresh_reader.read_records()
            assert [r.conversation_id for r in listed] == ["c-kept"]
            with pytest.raises(ScopeErasedError):
                await turn(fresh_reader, "c-gone", "again")
            assert await conversations.erase("c-gone", by="dpo") == erasure
            await store.verify(run)
            return sealing.scope_of(run)

    scope = run_blocking(scenario())
    _verify_all_lists(cli, url, [scope])


async def test_langgraph_a_forged_sealed_payload_is_tampering_and_the_walk_goes_on(
    make_store: Callable[..., Any], tmp_path: Path
) -> None:
    from agentplane_journal.keyring import EnvelopeRefusedError
    from agentplane_journal.langgraph import JournalSaver, thread_run
    from agentplane_journal.langgraph.records import CHECKPOINT

    store: SqlJournalStore = await make_store()
    keyring = Keyring(FileKeySource(tmp_path / "keys.json"))
    saver = JournalSaver(store, keyring=keyring)
    await _graph(saver).ainvoke({"topic": "t", "log": []}, _cfg("fine"))
    await saver.aclose()
    # someone with write access but no key appends a chain-valid record with a forged envelope
    run = thread_run("evil")
    forged = {"thread": "evil", "ns": "", "id": "c1", "blobs": []}
    forged["checkpoint"] = wrap_value(b"\x01\x00\x00\x00\x02{}" + bytes(40))
    forged["metadata"] = ["json", "e30="]
    await store.append(0, [store.profile.append(run, CHECKPOINT, forged)])

    reader = JournalSaver(store, keyring=keyring)
    with pytest.raises(EnvelopeRefusedError):
        await reader.aget_tuple(_cfg("evil"))
    threads = {t.config["configurable"]["thread_id"] async for t in reader.alist(None)}
    assert threads == {"fine"}
    assert [(r, e.seq) for r, e in reader.damaged] == [(run, 1)]  # type: ignore[attr-defined]
