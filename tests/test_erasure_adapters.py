"""Erasure where users need it: the adapters' record kinds are sealed field by field (what
carries the caller's data sealed, what a reader routes on clear), and the LangGraph saver,
the OpenAI Agents session and the Pydantic AI store can erase a thread or a conversation
(its scope): afterwards it reads as absent (or as typed erased), others are untouched, and
``verify --all`` passes with the erasure listed."""

from __future__ import annotations

import pytest

from agentplane_journal.core.sealed import Erased, sealed_fields, still_sealed, wrap_value

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
