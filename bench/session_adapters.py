"""The session adapters against what a user would otherwise pick, in one process, on SQLite.

    python bench/session_adapters.py [--rounds 7] [--calls 200] [--count]

Peers (same process, same disk, interleaved rounds, medians):

* OpenAI Agents SDK: ``JournalSession`` vs the SDK's own ``SQLiteSession`` (a file):
  ``add_items`` of 2 items (calls/s), a cold ``get_items()`` of a 100-item session (a new
  session object each time: ms), and ``pop_item()`` (ms).
* Pydantic AI: ``JournalConversationStore.save`` vs a bare ``sqlite3`` JSON-row store (the
  five primitives in ~50 lines, one ``BEGIN IMMEDIATE`` .. ``COMMIT`` per change, the
  revision checked inside it) on a growing conversation (saves/s; the agent's run is not
  timed).

``--count`` prints, per call, the transactions (``BEGIN``), statements and thread hand-offs
to SQLite (aiosqlite calls) our adapters make, from sqlite3's own trace of what ran.
Figures, never assertions; the machine's load moves them, the ratios less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from agents import SQLiteSession
from backends import sqlite_backend
from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.test import TestModel
from sqlalchemy import event

from agentplane_journal import SqlJournalStore
from agentplane_journal.adapters.openai_agents import JournalSession
from agentplane_journal.adapters.pydantic_ai import JournalConversationStore

_RECORD = TypeAdapter(ConversationRecord)


class BareConversationStore(ConversationStore):
    """Pydantic AI's five primitives over ``sqlite3``: a JSON row per record and per entry."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS rec (id TEXT PRIMARY KEY, rev TEXT, body TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS ent (id TEXT PRIMARY KEY, body TEXT)")

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        row = self.db.execute("SELECT body FROM rec WHERE id = ?", (conversation_id,)).fetchone()
        return None if row is None else _RECORD.validate_json(row[0])

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        rows = self.db.execute("SELECT body FROM rec").fetchall()
        found = [_RECORD.validate_json(r[0]) for r in rows]
        return [r for r in found if scope is None or r.scope == scope][:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        db, cid = self.db, record.conversation_id
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT rev FROM rec WHERE id = ?", (cid,)).fetchone()
            if (row[0] if row else None) != expected_revision:
                raise ConversationConflict(cid)
            db.execute(
                "INSERT INTO rec VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE"
                " SET rev = excluded.rev, body = excluded.body",
                (cid, record.revision, _RECORD.dump_json(record).decode()),
            )
            db.executemany(
                "INSERT INTO ent VALUES (?, ?)", [(e.id, _entry(e)) for e in new_entries]
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        raise NotImplementedError

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        row = self.db.execute("SELECT body FROM ent WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise LookupError(entry_id)
        data = json.loads(row[0])
        message = ModelMessagesTypeAdapter.validate_python([data["message"]])[0]
        return ConversationEntry(id=data["id"], parent_id=data["parent_id"], message=message)


def _entry(e: ConversationEntry) -> str:
    message = ModelMessagesTypeAdapter.dump_python([e.message], mode="json")[0]
    return json.dumps({"id": e.id, "parent_id": e.parent_id, "message": message})


def item(i: int) -> Any:
    return {"role": "user", "content": f"message number {i} with a little text in it"}


# -- one timed round of each workload -----------------------------------------------


async def add_items(make: Callable[[str], Any], calls: int, name: str) -> float:
    """Calls per second of ``add_items`` (2 items) on one session."""
    session = make(name)
    await session.add_items([item(0), item(1)])
    start = time.perf_counter()
    for i in range(calls):
        await session.add_items([item(i), item(i + 1)])
    return calls / (time.perf_counter() - start)


async def cold_get(make: Callable[[str], Any], calls: int, name: str) -> float:
    """Milliseconds of ``get_items()`` of a 100-item session by a new session object."""
    writer = make(name)
    for i in range(0, 100, 10):
        await writer.add_items([item(j) for j in range(i, i + 10)])
    start = time.perf_counter()
    for _ in range(calls):
        items = await make(name).get_items()
    elapsed = time.perf_counter() - start
    assert len(items) == 100
    return elapsed / calls * 1000


async def pop(make: Callable[[str], Any], calls: int, name: str) -> float:
    """Milliseconds of ``pop_item()`` on one session (refilled outside the timing)."""
    session = make(name)
    await session.add_items([item(j) for j in range(calls)])
    start = time.perf_counter()
    for _ in range(calls):
        assert await session.pop_item() is not None
    return (time.perf_counter() - start) / calls * 1000


async def saves(store: ConversationStore, calls: int, name: str) -> float:
    """Saves per second of one conversation growing a turn per save (runs not timed)."""
    agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
    conversation: Conversation = Conversation(conversation_id=name)
    spent = 0.0
    for i in range(calls):
        result = await agent.run(f"turn {i}", conversation=conversation)
        start = time.perf_counter()
        await store.save(result)
        spent += time.perf_counter() - start
        conversation = result.conversation
    return calls / spent


# -- counting ------------------------------------------------------------------------


@asynccontextmanager
async def counting(store: SqlJournalStore) -> AsyncIterator[dict[str, int]]:
    """What runs on SQLite inside the block: transactions, statements, hand-offs."""
    counts = {"transactions": 0, "statements": 0, "hand-offs": 0}

    def trace(sql: str) -> None:
        counts["statements"] += 1
        if sql.lstrip().upper().startswith("BEGIN"):
            counts["transactions"] += 1

    original = aiosqlite.Connection._execute

    async def hop(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counts["hand-offs"] += 1
        return await original(self, fn, *args, **kwargs)

    def on_connect(dbapi: Any, _record: Any) -> None:
        dbapi._connection._conn.set_trace_callback(trace)

    sync = store.engine.sync_engine
    event.listen(sync, "connect", on_connect)
    await store.engine.dispose()  # new connections, traced
    aiosqlite.Connection._execute = hop  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        aiosqlite.Connection._execute = original  # type: ignore[method-assign]
        event.remove(sync, "connect", on_connect)
        await store.engine.dispose()


async def count(url: str) -> None:
    store = await SqlJournalStore.connect(url)
    try:
        warm = JournalSession(store, "counted")
        await warm.add_items([item(0), item(1)])
        await warm.get_items()
        cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("add_items (warm handle)", lambda: warm.add_items([item(2), item(3)])),
            ("get_items (cold handle)", lambda: JournalSession(store, "counted").get_items()),
            ("pop_item (warm handle)", warm.pop_item),
        ]
        conversations = JournalConversationStore(store)
        agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
        first = await agent.run("one", conversation=Conversation(conversation_id="counted"))
        await conversations.save(first)
        turns = [first]

        async def save() -> None:
            turns.append(await agent.run("more", conversation=turns[-1].conversation))
            await conversations.save(turns[-1])

        cases.append(("pydantic save (warm store)", save))
        for label, call in cases:
            async with counting(store) as counts:
                await call()  # opens the traced connections
                counts.update(dict.fromkeys(counts, 0))
                await call()
            print(
                f"  {label:28s} {counts['transactions']} transactions, "
                f"{counts['statements']} statements, {counts['hand-offs']} hand-offs"
            )
    finally:
        await store.close()


# -- the rounds ----------------------------------------------------------------------


async def bench(url: str, scratch: str, rounds: int, calls: int) -> None:
    store = await SqlJournalStore.connect(url)
    peer_path = os.path.join(scratch, "peer.db")
    bare = BareConversationStore(os.path.join(scratch, "bare.db"))
    sdk_sessions: list[SQLiteSession] = []

    def sdk(name: str) -> SQLiteSession:
        session = SQLiteSession(name, peer_path)
        sdk_sessions.append(session)
        return session

    def ours(name: str) -> JournalSession:
        return JournalSession(store, name)

    results: dict[str, dict[str, list[float]]] = {}

    def note(workload: str, who: str, value: float) -> None:
        results.setdefault(workload, {}).setdefault(who, []).append(value)

    try:
        for r in range(rounds):
            for who, make in (("ours", ours), ("peer", sdk)):
                note("add_items calls/s", who, await add_items(make, calls, f"add-{who}-{r}"))
                note("cold get_items ms", who, await cold_get(make, calls // 4, f"get-{who}-{r}"))
                note("pop_item ms", who, await pop(make, calls // 2, f"pop-{who}-{r}"))
            conversations = JournalConversationStore(store)
            note("pydantic save saves/s", "ours", await saves(conversations, calls // 2, f"c{r}"))
            note("pydantic save saves/s", "peer", await saves(bare, calls // 2, f"c{r}"))
    finally:
        for session in sdk_sessions:
            session.close()
        bare.db.close()
        await store.close()
    higher_is_better = {"add_items calls/s", "pydantic save saves/s"}
    for workload, by in results.items():
        ours_m, peer_m = statistics.median(by["ours"]), statistics.median(by["peer"])
        ratio = ours_m / peer_m if workload in higher_is_better else peer_m / ours_m
        spread = sorted(
            (o / p if workload in higher_is_better else p / o)
            for o, p in zip(by["ours"], by["peer"], strict=True)
        )
        print(
            f"  {workload:24s} ours {ours_m:8.2f}  peer {peer_m:8.2f}  "
            f"ratio {ratio:.2f} (rounds {spread[0]:.2f}-{spread[-1]:.2f}; >1 is ours faster)"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--count", action="store_true", help="count statements, do not time")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    async with sqlite_backend() as backend:
        print(backend.settings)
        if args.count:
            await count(backend.url)
        else:
            await bench(backend.url, backend.scratch, args.rounds, args.calls)


if __name__ == "__main__":
    asyncio.run(main())
