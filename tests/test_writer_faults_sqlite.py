"""The SQLite append writer under a cancelled leader: every append answered once.

The promise ``tests/test_writer_faults_pg.py`` checks on PostgreSQL, made by the writer
skeleton both databases share (``backends/writer.py``): every append handed to the writer
is answered exactly once, in bounded time, whatever becomes of its leader, and what it was
told is what the journal holds. Another connection holds SQLite's write lock, so the
leader's transaction waits on its ``BEGIN IMMEDIATE`` while more appends queue behind it;
then the leader is cancelled. Seen red before the skeleton: the queued appends were never
answered (the SQLite writer started no leader for them until some other append came).

An idle writer's first append runs alone in its caller's task (``backends/sqlite/writer.py``),
and a leader for the appends behind it waits for that hop and takes its connection: the
first test pins the writer to leaders (a leader in its own transaction), the second cancels
a leader while it waits for a lone hop.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from typing import Any

from agentplane_journal import BackendError, RunId, SqlJournalStore
from agentplane_journal.backends.writer import GroupWriter

from support.helpers import note

BOUND = 10.0  # seconds: any append not answered by then has hung


async def until(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` holds (polled every 10 ms), or fail after ``BOUND``."""
    for _ in range(int(BOUND * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the writer never reached the awaited state")


async def test_a_cancelled_leader_leaves_no_append_unanswered(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    store = await SqlJournalStore.connect(url, group_commit=True)
    try:
        runs = [RunId.generate() for _ in range(6)]
        for run in runs:
            await store.append(1, [note(run, "warm")])
        writer: Any = store._shared.writer
        await writer.idle()
        writer.submit = functools.partial(GroupWriter.submit, writer)  # leaders only
        answered: dict[int, int] = {}
        answer = writer._answer

        def counting(group: list[Any], answers: list[Any]) -> None:
            for r in group:
                if not r.future.done():
                    answered[id(r)] = answered.get(id(r), 0) + 1
            answer(group, answers)

        writer._answer = counting
        holder = sqlite3.connect(url.removeprefix("sqlite+aiosqlite:///"), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the database's write lock
            first = [
                asyncio.create_task(store.append(1, [note(r, f"first {i}")]))
                for i, r in enumerate(runs[:3])
            ]
            # the leader took the first appends and is in their transaction
            await until(lambda: bool(writer._leaders) and writer._free == 0 and not writer._pending)
            queued = [
                asyncio.create_task(store.append(1, [note(r, f"queued {i}")]))
                for i, r in enumerate(runs[3:])
            ]
            await until(lambda: len(writer._pending) == len(queued))
            for leader in list(writer._leaders):
                leader.cancel()
            await asyncio.sleep(0.05)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        _, pending = await asyncio.wait([*first, *queued], timeout=BOUND)
        assert not pending, f"{len(pending)} appends hung"
        assert all(n == 1 for n in answered.values()), "an append was answered twice"
        for run, task in zip(runs[:3], first, strict=True):
            # in flight when its leader was cancelled: its transaction went on, on
            # aiosqlite's thread, so it may have landed, all or nothing
            assert task.cancelled(), task
            texts = [r.body["text"] for r in await store.read(run)]
            assert texts in (["warm"], ["warm", f"first {runs.index(run)}"]), texts
        for run, task in zip(runs[3:], queued, strict=True):
            error = task.exception()
            assert isinstance(error, BackendError), repr(error)
            assert "stopped before sending" in str(error)
            assert [r.body["text"] for r in await store.read(run)] == ["warm"]
        for run in runs:
            await store.verify(run)
        # And the writer still works.
        await asyncio.wait_for(store.append(1, [note(runs[0], "after")]), BOUND)
    finally:
        await store.close()


async def test_a_leader_cancelled_while_it_waits_for_a_lone_hop_answers_what_it_queued(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    store = await SqlJournalStore.connect(url, group_commit=True)
    try:
        runs = [RunId.generate() for _ in range(4)]
        for run in runs:
            await store.append(1, [note(run, "warm")])
        writer: Any = store._shared.writer
        await writer.idle()
        holder = sqlite3.connect(url.removeprefix("sqlite+aiosqlite:///"), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the database's write lock
            lone = asyncio.create_task(store.append(1, [note(runs[0], "lone")]))
            await until(lambda: writer._lone is not None)  # its hop waits on BEGIN IMMEDIATE
            queued = [asyncio.create_task(store.append(1, [note(r, "queued")])) for r in runs[1:]]
            # their leader waits for the lone hop's connection, nothing of theirs sent
            await until(lambda: bool(writer._leaders) and len(writer._pending) == len(queued))
            for leader in list(writer._leaders):
                leader.cancel()
            await asyncio.sleep(0.05)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        _, pending = await asyncio.wait([lone, *queued], timeout=BOUND)
        assert not pending, f"{len(pending)} appends hung"
        for run, task in zip(runs[1:], queued, strict=True):
            error = task.exception()
            assert isinstance(error, BackendError), repr(error)
            assert "stopped before sending" in str(error)
            assert [r.body["text"] for r in await store.read(run)] == ["warm"]
        assert [r.body["text"] for r in lone.result()] == ["lone"]
        assert [r.body["text"] for r in await store.read(runs[0])] == ["warm", "lone"]
        for run in runs:
            await store.verify(run)
        await writer.idle()  # every connection back, the parked one too
        await asyncio.wait_for(store.append(1, [note(runs[1], "after")]), BOUND)
    finally:
        await store.close()
