"""``JournalSaver(lean_resume=True)``: a saver with no verified point resumes a thread from
its newest checkpoint and the records that checkpoint names (langgraph/lean.py), and the
trust model's "lean read" column (docs/guides/langgraph.md), row by row, on both dialects.

Each row is a tampering made with SQL by an attacker without a signing key, relative to
what a lean read reads: the newest checkpoint ``C``, the records after it up to the head
(the tail), and the records ``C`` names. Every cell is asserted: caught
(``CorruptRecordError``) or not caught (the read answers; the table says so).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentplane_journal import SqlJournalStore

from support.langgraph_graph import (
    INSERT_COPY,
    caught,
    cfg,
    edit_content,
    forge_tail,
    graph,
    rehash_blobs,
    sql,
)
from support.tamper import run_cli

try:
    from langgraph.types import Command

    from agentplane_journal.langgraph import JournalSaver, thread_run
    from agentplane_journal.langgraph.records import CHECKPOINT
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)


@dataclass
class Lean:
    """Where a lean read of the thread reads: the checkpoint, the head, the named records,
    and a record it does not read."""

    store: SqlJournalStore
    name: str
    checkpoint: int
    head: int
    named: list[int]
    unread: int

    async def sql(self, statement: str, **params: Any) -> None:
        for part in statement.split(";"):
            await sql(self.store, part, r=str(thread_run(self.name)), **params)


_DELETE = "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s"
#: The named record moved to a free seq: the name's seq then holds nothing.
_MOVE = "UPDATE journal SET seq = 1000000 WHERE tenant = :t AND run_id = :r AND seq = :s"


async def _edit_checkpoint(t: Lean, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.checkpoint)


async def _edit_named(t: Lean, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.named[0])


async def _rehash_named(t: Lean, dialect: str) -> None:
    await rehash_blobs(t.store, t.name, t.named[0])


async def _move_named(t: Lean, dialect: str) -> None:
    await t.sql(_MOVE, s=t.named[0])


async def _edit_tail(t: Lean, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.checkpoint + 1)


async def _delete_tail(t: Lean, dialect: str) -> None:
    await t.sql(_DELETE, s=t.checkpoint + 1)


async def _insert_tail(t: Lean, dialect: str) -> None:
    await t.sql(INSERT_COPY, s=t.checkpoint + 1, n=t.checkpoint + 2)


async def _edit_unread(t: Lean, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.unread)


async def _truncate(t: Lean, dialect: str) -> None:
    await t.sql(
        "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq > :s", s=t.checkpoint
    )


async def _forge_tail(t: Lean, dialect: str) -> None:
    await forge_tail(t.store, t.name, JournalSaver(t.store))


Tamper = Callable[[Lean, str], Awaitable[None]]
#: (lean read, verify --all): caught?
BOTH, VERIFY, NEITHER = (True, True), (False, True), (False, False)
ROWS: dict[str, tuple[Tamper, tuple[bool, bool], tuple[bool, bool]]] = {
    "edit of the checkpoint it resumes from": (_edit_checkpoint, BOTH, BOTH),
    "edit of a record it names": (_edit_named, BOTH, BOTH),
    "a record it names rewritten, hashes recomputed": (_rehash_named, BOTH, BOTH),
    "a record it names moved away": (_move_named, BOTH, BOTH),
    "edit of a record after the checkpoint": (_edit_tail, BOTH, BOTH),
    "deletion of a record after it": (_delete_tail, BOTH, BOTH),
    "insertion after it": (_insert_tail, BOTH, BOTH),
    "edit of a record it does not read": (_edit_unread, VERIFY, VERIFY),
    "truncation back to the checkpoint": (_truncate, NEITHER, BOTH),
    "a forged tail, rightly chained": (_forge_tail, NEITHER, BOTH),
}


async def _written(store: SqlJournalStore, name: str, sealed: bool) -> Lean:
    """A graph thread run to its end by one saver (which reads before it writes, so its
    checkpoints name their records), then where a lean read of it reads."""
    writer = JournalSaver(store)
    app = graph(writer)
    await app.ainvoke({"topic": "t", "log": []}, cfg(name))
    await app.ainvoke(Command(resume="yes"), cfg(name))
    latest = await writer.aget_tuple(cfg(name))
    assert latest is not None
    for task in ("task-1", "task-2"):  # pending writes after the newest checkpoint
        await writer.aput_writes(latest.config, [("log", [task])], task)
    if sealed:
        await writer.aseal_thread(name)
    await writer.aclose()
    records = await store.read(thread_run(name))
    head = records[-1].seq
    checkpoint = max(r.seq for r in records if r.kind == CHECKPOINT and r.body.get("ns") == "")
    named = sorted({use[2] for use in records[checkpoint - 1].body["uses"]})
    # One named record outside the last 8 (read by seq), records after the checkpoint.
    assert named[0] < head - 7 and checkpoint + 2 <= head, (named, checkpoint, head)
    unread = min(r.seq for r in records if r.seq not in named and r.seq < max(1, head - 7))
    return Lean(store, name, checkpoint, head, named, unread)


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("row", list(ROWS))
async def test_each_row_of_the_lean_column(
    make_store: Callable[..., Any], dialect: str, row: str, sealed: bool
) -> None:
    tamper, unsealed_expected, sealed_expected = ROWS[row]
    store: SqlJournalStore = await make_store()
    lean = await _written(store, f"lean-{row[:24]}-{sealed}", sealed)
    await tamper(lean, dialect)
    got = (
        await caught(JournalSaver(store, lean_resume=True).aget_tuple(cfg(lean.name))),
        await caught(store.verify(thread_run(lean.name))),
    )
    assert got == (sealed_expected if sealed else unsealed_expected)


async def test_a_lean_read_answers_as_the_replay_does_and_reads_no_more_as_the_thread_grows(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    lean = await _written(store, "lean-same", False)
    full = await JournalSaver(store).aget_tuple(cfg(lean.name))
    read: list[list[int]] = []
    original = store.read_sealed

    async def counted(run: Any, from_seq: int = 1, **kw: Any) -> Any:
        records, seal = await original(run, from_seq, **kw)
        read.append([r.seq for r in records])
        return records, seal

    store.read_sealed = counted  # type: ignore[method-assign]
    saver = JournalSaver(store, lean_resume=True)
    assert await saver.aget_tuple(cfg(lean.name)) == full
    assert len(read) == 1 and len(read[0]) <= 8 and read[0][-1] == lean.head
    # A warm read by the same saver goes on from its head (one record read again).
    assert await saver.aget_tuple(cfg(lean.name)) == full
    assert read[1] == [lean.head]
    # list, or a checkpoint by id, needs the thread: a whole read, which the replay answers.
    assert len([t async for t in saver.alist(cfg(lean.name))]) > 2
    assert read[2][0] == 1


async def test_a_checkpoint_that_names_nothing_is_resumed_by_replay(
    make_store: Callable[..., Any],
) -> None:
    # A writer that never read the thread cannot name the blob records (an old journal,
    # too): the lean reader replays it, and answers as any reader does.
    store: SqlJournalStore = await make_store()
    writer = JournalSaver(store)
    await graph(writer).ainvoke({"topic": "t", "log": []}, cfg("lean-old"))
    await writer.aclose()
    blind = JournalSaver(store)  # it writes without reading first
    latest = await JournalSaver(store).aget_tuple(cfg("lean-old"))
    assert latest is not None
    await blind.aput(
        latest.config, {**latest.checkpoint, "id": latest.checkpoint["id"][:-1] + "f"}, {}, {}
    )
    records = await store.read(thread_run("lean-old"))
    assert "uses" not in records[-1].body
    assert await JournalSaver(store, lean_resume=True).aget_tuple(
        cfg("lean-old")
    ) == await JournalSaver(store).aget_tuple(cfg("lean-old"))


async def test_verify_all_reports_what_a_lean_read_does_not_read(
    make_store: Callable[..., Any], dialect: str, database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    lean = await _written(store, "lean-all", False)
    await _edit_unread(lean, dialect)
    assert await JournalSaver(store, lean_resume=True).aget_tuple(cfg(lean.name)) is not None
    result = run_cli("verify", "--all", "--json", "--url", database_url, "--tenant", store.tenant)
    assert result.returncode != 0 and str(thread_run(lean.name)) in result.stdout, result
