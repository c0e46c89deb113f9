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
to SQLite (aiosqlite calls) our adapters make, from sqlite3's own trace of what ran, then the
same on PostgreSQL (``--pg-url``, or a throwaway durable cluster) from SQLAlchemy's events.
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
from backends import postgres_backend, sqlite_backend
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
from pydantic_ai.usage import UsageLimits
from sqlalchemy import event

from agentplane_journal import SqlJournalStore
from agentplane_journal.adapters.openai_agents import JournalSession
from agentplane_journal.adapters.pydantic_ai import JournalConversationStore

_NO_LIMIT = UsageLimits(request_limit=None)
"""A conversation saved a turn at a time outgrows pydantic-ai's default 50 requests."""

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


# -- the workloads: each side's ``step()`` returns the seconds its timed part took ------


Step = Callable[[], Awaitable[float]]


async def add_items(make: Callable[[str], Any], name: str, _calls: int) -> Step:
    """``add_items`` of 2 items on one session."""
    session, n = make(name), iter(range(10**9))
    await session.add_items([item(0), item(1)])

    async def step() -> float:
        i = next(n)
        start = time.perf_counter()
        await session.add_items([item(i), item(i + 1)])
        return time.perf_counter() - start

    return step


async def cold_get(make: Callable[[str], Any], name: str, _calls: int) -> Step:
    """``get_items()`` of a 100-item session (10 additions of 10) by a new session object."""
    writer = make(name)
    for i in range(0, 100, 10):
        await writer.add_items([item(j) for j in range(i, i + 10)])

    async def step() -> float:
        start = time.perf_counter()
        items = await make(name).get_items()
        elapsed = time.perf_counter() - start
        assert len(items) == 100
        return elapsed

    return step


async def pop(make: Callable[[str], Any], name: str, calls: int) -> Step:
    """``pop_item()`` on one session holding an item for every call."""
    session = make(name)
    await session.add_items([item(j) for j in range(calls)])

    async def step() -> float:
        start = time.perf_counter()
        assert await session.pop_item() is not None
        return time.perf_counter() - start

    return step


async def saves(store: ConversationStore, name: str, _calls: int) -> Step:
    """``save`` of one conversation growing a turn per save (the agent's run not timed)."""
    agent = Agent(TestModel(custom_output_text="noted"), instructions="be brief")
    turns = [Conversation(conversation_id=name)]

    async def step() -> float:
        result = await agent.run(
            f"turn {len(turns)}", conversation=turns[-1], usage_limits=_NO_LIMIT
        )
        start = time.perf_counter()
        await store.save(result)
        elapsed = time.perf_counter() - start
        turns.append(result.conversation)
        return elapsed

    return step


async def alternate(ours: Step, peer: Step, calls: int, block: int = 10) -> tuple[float, float]:
    """Seconds per call of each side, the sides taking turns by blocks of ``block`` calls
    (the first side alternating), so that both meet the same moments of the machine's load."""
    spent = {"ours": 0.0, "peer": 0.0}
    steps = {"ours": ours, "peer": peer}
    for b in range(max(calls // block, 1)):
        for side in ("ours", "peer") if b % 2 == 0 else ("peer", "ours"):
            for _ in range(block):
                spent[side] += await steps[side]()
    done = max(calls // block, 1) * block
    return spent["ours"] / done, spent["peer"] / done


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


@asynccontextmanager
async def counting_pg(store: SqlJournalStore) -> AsyncIterator[dict[str, int]]:
    """What goes through SQLAlchemy on PostgreSQL inside the block (its events): transactions
    (``begin``), statements (cursor executions) and round trips (the two, plus ``commit``).
    The store's PostgreSQL hot path talks to asyncpg directly and is not seen here."""
    counts = {"transactions": 0, "statements": 0, "round trips": 0}

    def on_begin(_conn: Any) -> None:
        counts["transactions"] += 1
        counts["round trips"] += 1

    def on_execute(*_: Any) -> None:
        counts["statements"] += 1
        counts["round trips"] += 1

    def on_commit(_conn: Any) -> None:
        counts["round trips"] += 1

    sync = store.engine.sync_engine
    hooks = (("begin", on_begin), ("before_cursor_execute", on_execute), ("commit", on_commit))
    for name, hook in hooks:
        event.listen(sync, name, hook)
    try:
        yield counts
    finally:
        for name, hook in hooks:
            event.remove(sync, name, hook)


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
            turns.append(
                await agent.run("more", conversation=turns[-1].conversation, usage_limits=_NO_LIMIT)
            )
            await conversations.save(turns[-1])

        cases.append(("pydantic save (warm store)", save))
        for label, call in cases:
            tracer = counting if url.startswith("sqlite") else counting_pg
            async with tracer(store) as counts:
                await call()  # opens the traced connections
                counts.update(dict.fromkeys(counts, 0))
                await call()
            print(f"  {label:28s} " + ", ".join(f"{n} {k}" for k, n in counts.items()))
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

    # (workload, per-call figure from seconds per call, higher is better)
    shown: dict[str, tuple[Callable[[float], float], bool]] = {
        "add_items calls/s": (lambda s: 1 / s, True),
        "cold get_items ms": (lambda s: s * 1000, False),
        "pop_item ms": (lambda s: s * 1000, False),
        "pydantic save saves/s": (lambda s: 1 / s, True),
    }
    results: dict[str, dict[str, list[float]]] = {w: {"ours": [], "peer": []} for w in shown}

    def note(workload: str, figures: tuple[float, float]) -> None:
        for who, seconds in zip(("ours", "peer"), figures, strict=True):
            results[workload][who].append(shown[workload][0](seconds))

    try:
        for r in range(rounds):
            for workload, make_step, n in (
                ("add_items calls/s", add_items, calls),
                ("cold get_items ms", cold_get, calls // 4),
                ("pop_item ms", pop, calls),
            ):
                mine = await make_step(ours, f"{workload}-ours-{r}", n)
                theirs = await make_step(sdk, f"{workload}-peer-{r}", n)
                note(workload, await alternate(mine, theirs, n))
            conversations = JournalConversationStore(store)
            mine = await saves(conversations, f"ours-{r}", calls // 2)
            theirs = await saves(bare, f"peer-{r}", calls // 2)
            note("pydantic save saves/s", await alternate(mine, theirs, calls // 2))
    finally:
        for session in sdk_sessions:
            session.close()
        bare.db.close()
        await store.close()
    for workload, (_, higher) in shown.items():
        by = results[workload]
        ours_m, peer_m = statistics.median(by["ours"]), statistics.median(by["peer"])
        ratio = ours_m / peer_m if higher else peer_m / ours_m
        spread = sorted(
            (o / p if higher else p / o) for o, p in zip(by["ours"], by["peer"], strict=True)
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
    parser.add_argument(
        "--pg-url", default=os.environ.get("AGENTPLANE_JOURNAL_BENCH_PG_URL"), help="with --count"
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    async with sqlite_backend() as backend:
        print(backend.settings)
        if args.count:
            await count(backend.url)
        else:
            await bench(backend.url, backend.scratch, args.rounds, args.calls)
    if args.count:  # the peers run on SQLite only: PostgreSQL is counted, not timed
        async with postgres_backend(args.pg_url) as backend:
            print(backend.settings)
            await count(backend.url)


if __name__ == "__main__":
    asyncio.run(main())
