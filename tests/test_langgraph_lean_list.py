"""``JournalSaver(lean_resume=True).alist(config, limit=n)``: a page of a thread's history
read back from its head, not the thread (langgraph/lean_list.py), and the trust model's
"lean list" rows (docs/guides/langgraph.md), on both dialects.

Each row is a tampering made with SQL by an attacker without a signing key, relative to what
a lean list reads: the page (its oldest answered checkpoint ``P`` to the head), and the
records its checkpoints name before ``P``. Every cell is asserted: caught
(``CorruptRecordError``) or not caught (the list answers; the table says so).
"""

from __future__ import annotations

import asyncio
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
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.types import Command

    from agentplane_journal.langgraph import JournalSaver, thread_run
    from agentplane_journal.langgraph.records import CHECKPOINT, deleted_append
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)

#: Checkpoints a listed page holds in the rows' thread.
LIMIT = 3


def ns_cfg(thread: str) -> dict[str, Any]:
    """A config as ``get_state_history`` passes it: the thread and its root namespace."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def turn(saver: JournalSaver, config: Any, step: int, **channels: Any) -> Any:
    """One graph step: a checkpoint moving ``step`` (and ``channels``), then a pending write."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    moved = {"step": step, **channels}
    latest = await saver.aget_tuple(config)
    versions = dict(latest.checkpoint["channel_versions"]) if latest else {}
    for name in moved:
        versions[name] = int(versions.get(name, 0)) + 1
    checkpoint["channel_versions"] = versions
    checkpoint["channel_values"] = moved
    new = {name: versions[name] for name in moved}
    config = await saver.aput(config, checkpoint, {"source": "loop", "step": step}, new)
    await saver.aput_writes(config, [("log", [f"reply {step}"])], f"task-{step}")
    return config


async def written(store: SqlJournalStore, thread: str, turns: int) -> JournalSaver:
    """A thread ``turns`` steps long by a saver that read it first (so its checkpoints name
    their records); ``topic`` moves at the first step only, so every later one names it."""
    writer = JournalSaver(store)
    config: Any = ns_cfg(thread)
    assert await writer.aget_tuple(config) is None
    for step in range(turns):
        extra = {"topic": "t"} if step == 0 else {}
        config = await turn(writer, config, step, **extra)
    return writer


async def listed(saver: JournalSaver, thread: str, **kw: Any) -> list[Any]:
    return [t async for t in saver.alist(ns_cfg(thread), **kw)]


class Counted:
    """The records a store's ``read_back`` and ``read_sealed`` returned, per call."""

    def __init__(self, store: SqlJournalStore) -> None:
        self.back: list[list[int]] = []
        self.whole: list[list[int]] = []
        back, whole = store.read_back, store.read_sealed

        async def read_back(*args: Any, **kw: Any) -> Any:
            records, seal = await back(*args, **kw)
            self.back.append([r.seq for r in records])
            return records, seal

        async def read_sealed(*args: Any, **kw: Any) -> Any:
            records, seal = await whole(*args, **kw)
            self.whole.append([r.seq for r in records])
            return records, seal

        store.read_back = read_back  # type: ignore[method-assign]
        store.read_sealed = read_sealed  # type: ignore[method-assign]


async def test_a_lean_list_answers_as_the_replay_does_and_reads_the_page_not_the_thread(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    writer = await written(store, "list-same", 60)
    await writer.aclose()
    full = JournalSaver(store)
    everything = await listed(full, "list-same")
    asks: list[dict[str, Any]] = [
        {"limit": 3},
        {"limit": 1},
        {"limit": 10, "before": everything[4].config},
        {"limit": 2, "filter": {"step": 57}},
        {"limit": 100},
    ]
    expected = [await listed(full, "list-same", **kw) for kw in asks]
    count = Counted(store)
    lean = JournalSaver(store, lean_resume=True)
    calls = []
    for kw, answer in zip(asks, expected, strict=True):
        assert await listed(lean, "list-same", **kw) == answer, kw
        calls.append(len(count.back))
    assert not count.whole  # the lean lists never read the thread
    # limit 3: one statement back from the head (a few records a step), none of the thread.
    assert calls[0] == 1 and count.back[0] == list(range(101, 121))
    # limit 100 > the thread: read back to seq 1, a page at a time, each twice the last.
    assert [page[0] for page in count.back[calls[3] :]][-1] == 1
    # The saver keeps nothing of a page: a write is checked as by a saver that never read.
    assert lean._cache == {} and not lean._seen


async def test_deletions_and_prunes_later_in_the_chain_are_honoured(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    writer = await written(store, "list-del", 12)
    history = await listed(writer, "list-del")
    await writer.adelete_for_runs([])  # nothing named: nothing appended
    # A deletion of two checkpoints inside what a page reads, then more steps.
    doomed = [("", history[1].config["configurable"]["checkpoint_id"])]
    doomed.append(("", history[3].config["configurable"]["checkpoint_id"]))
    run = thread_run("list-del")
    await writer._write(
        store, "list-del", [deleted_append(run, "list-del", "test", doomed)]
    )  # (as delete_for_runs appends one)
    config = history[0].config
    for step in range(12, 14):
        config = await turn(writer, config, step)
    full, lean = JournalSaver(store), JournalSaver(store, lean_resume=True)
    for limit in (2, 4, 6):
        got = await listed(lean, "list-del", limit=limit)
        assert got == await listed(full, "list-del", limit=limit)
    ids = [
        t.config["configurable"]["checkpoint_id"] for t in await listed(lean, "list-del", limit=6)
    ]
    assert not {cid for _, cid in doomed} & set(ids)
    # prune keeps the newest: a lean list then answers it alone, as the replay does.
    await writer.aprune(["list-del"])
    assert await listed(lean, "list-del", limit=5) == await listed(full, "list-del", limit=5)
    assert len(await listed(lean, "list-del", limit=5)) == 1
    # A whole-thread deletion: nothing before it is live.
    await writer.adelete_thread("list-del")
    assert await listed(lean, "list-del", limit=5) == []
    await writer.aclose()


async def test_a_page_that_cannot_vouch_is_answered_by_the_replay(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store()
    writer = await written(store, "list-blind", 6)
    await writer.aclose()
    blind = JournalSaver(store)  # writes without reading: its checkpoint names nothing
    latest = await JournalSaver(store).aget_tuple(ns_cfg("list-blind"))
    assert latest is not None
    await turn(blind, latest.config, 6)
    await blind.aclose()
    count = Counted(store)
    full, lean = JournalSaver(store), JournalSaver(store, lean_resume=True)
    assert await listed(lean, "list-blind", limit=2) == await listed(full, "list-blind", limit=2)
    assert count.whole and count.whole[0][0] == 1  # read whole
    # A copied thread: its checkpoints' names were the source's, so it is replayed too.
    await writer.acopy_thread("list-blind", "list-copy")
    for limit in (1, 3):
        assert await listed(lean, "list-copy", limit=limit) == await listed(
            full, "list-copy", limit=limit
        )


async def test_a_lean_resume_of_a_copied_thread_answers_as_the_replay_does(
    make_store: Callable[..., Any],
) -> None:
    # Red before the copy dropped the source's names: the copied checkpoint named source
    # seqs, which hold other records in the target (CorruptRecordError).
    store: SqlJournalStore = await make_store()
    writer = await written(store, "copy-src", 8)
    await writer.acopy_thread("copy-src", "copy-dst")
    await writer.aclose()
    assert await JournalSaver(store, lean_resume=True).aget_tuple(
        ns_cfg("copy-dst")
    ) == await JournalSaver(store).aget_tuple(ns_cfg("copy-dst"))


@pytest.mark.parametrize("tamper", [None, "edit", "move"])
async def test_a_checkpoint_put_while_its_pending_writes_land_names_them(
    make_store: Callable[..., Any], dialect: str, tamper: str | None
) -> None:
    # LangGraph writes a task's pending writes while it puts their checkpoint; a write that
    # lands first is before the checkpoint in the chain, where a lean read does not look, so
    # the checkpoint names it (``pending``: seq and hash) and a lean read fetches and checks
    # it. Red before the names were taken under the thread's lock (they ignored the write).
    store: SqlJournalStore = await make_store()
    writer = await written(store, "early", 3)
    latest = await writer.aget_tuple(ns_cfg("early"))
    assert latest is not None
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["channel_versions"] = dict(latest.checkpoint["channel_versions"])
    config = {
        "configurable": {**ns_cfg("early")["configurable"], "checkpoint_id": checkpoint["id"]}
    }
    put = writer.aput(latest.config, checkpoint, {"source": "loop", "step": 9}, {})
    early = writer.aput_writes(config, [("log", ["early"])], "task-early")
    await asyncio.gather(early, put)
    for i in range(7):  # the early write just out of a lean resume's last 8 records
        await writer.aput_writes(latest.config, [("log", [f"late {i}"])], f"task-late-{i}")
    await writer.aclose()
    records = await store.read(thread_run("early"))
    [put_record] = [r for r in records if r.kind == CHECKPOINT and r.body["id"] == checkpoint["id"]]
    [(seq, _)] = put_record.body["pending"]
    assert records[seq - 1].kind == "LangGraphWrites" and seq < put_record.seq
    full, lean = JournalSaver(store), JournalSaver(store, lean_resume=True)
    if tamper is None:
        latest_full = await full.aget_tuple(ns_cfg("early"))
        history = await listed(full, "early", limit=2)
        count = Counted(store)
        got = await lean.aget_tuple(ns_cfg("early"))
        assert got == latest_full and got and got.pending_writes
        assert count.whole == [list(range(seq + 1, seq + 9))]  # lean: the tail, + by seq
        assert await listed(JournalSaver(store, lean_resume=True), "early", limit=2) == history
        assert len(count.whole) == 1 and count.back  # read back from the head
        return
    run = str(thread_run("early"))
    await sql(store, edit_content(dialect) if tamper == "edit" else _MOVE, r=run, s=seq)
    assert await caught(lean.aget_tuple(ns_cfg("early")))
    assert await caught(listed(lean, "early", limit=2))
    assert await caught(store.verify(thread_run("early")))


@pytest.mark.parametrize("tamper", ["edit", "delete"])
async def test_a_page_read_further_back_is_checked_as_it_is_read(
    make_store: Callable[..., Any], dialect: str, tamper: str
) -> None:
    # A filter that matches an old checkpoint only: read back three statements deep, each
    # older page checked as linking onto the newer one before the filter opens its metadata.
    store: SqlJournalStore = await make_store()
    writer = await written(store, "list-deep", 30)
    await writer.aclose()
    count = Counted(store)
    lean = JournalSaver(store, lean_resume=True)
    want: dict[str, Any] = {"limit": 1, "filter": {"step": 2}}
    assert await listed(lean, "list-deep", **want) == await listed(
        JournalSaver(store), "list-deep", **want
    )
    assert len(count.back) == 3 and 30 in count.back[1]
    run = str(thread_run("list-deep"))
    if tamper == "edit":
        await sql(store, edit_content(dialect), r=run, s=30)
    else:
        await sql(store, _DELETE, r=run, s=30)
    assert await caught(listed(lean, "list-deep", **want))


async def test_a_lean_resume_of_an_interrupted_graph_keeps_its_pending_writes(
    make_store: Callable[..., Any],
) -> None:
    # A graph interrupted in its second invocation: a task's pending write landed before
    # the checkpoint it belongs to. Red before (6 of 6 runs): the lean read, which reads
    # from the checkpoint on, answered without it, so the graph would have resumed from
    # another state than the replay's.
    store: SqlJournalStore = await make_store()
    writer = JournalSaver(store)
    app = graph(writer)
    await app.ainvoke({"topic": "t", "log": []}, cfg("interrupted"))
    await app.ainvoke(Command(resume="yes"), cfg("interrupted"))
    await app.ainvoke({"topic": "u", "log": []}, cfg("interrupted"))  # interrupted again
    await writer.aclose()
    replayed = await JournalSaver(store).aget_tuple(cfg("interrupted"))
    assert replayed is not None and replayed.pending_writes
    lean = JournalSaver(store, lean_resume=True)
    assert await lean.aget_tuple(cfg("interrupted")) == replayed
    history = await listed(JournalSaver(store), "interrupted", limit=4)
    assert await listed(lean, "interrupted", limit=4) == history


# -- the trust model's "lean list" rows ---------------------------------------------------


@dataclass
class Page:
    """Where a lean list of the thread (``limit=LIMIT``) reads: its oldest answered
    checkpoint, the head, the records its checkpoints name before it, a record it reads
    that is no checkpoint, and a record it does not read."""

    store: SqlJournalStore
    name: str
    oldest: int
    head: int
    named: list[int]
    inside: int
    unread: int

    async def sql(self, statement: str, **params: Any) -> None:
        for part in statement.split(";"):
            await sql(self.store, part, r=str(thread_run(self.name)), **params)


_DELETE = "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s"
_MOVE = "UPDATE journal SET seq = 1000000 WHERE tenant = :t AND run_id = :r AND seq = :s"


async def _edit_answered(p: Page, dialect: str) -> None:
    await p.sql(edit_content(dialect), s=p.oldest)


async def _edit_named(p: Page, dialect: str) -> None:
    await p.sql(edit_content(dialect), s=p.named[0])


async def _rehash_named(p: Page, dialect: str) -> None:
    await rehash_blobs(p.store, p.name, p.named[0])


async def _move_named(p: Page, dialect: str) -> None:
    await p.sql(_MOVE, s=p.named[0])


async def _edit_inside(p: Page, dialect: str) -> None:
    await p.sql(edit_content(dialect), s=p.inside)


async def _delete_inside(p: Page, dialect: str) -> None:
    await p.sql(_DELETE, s=p.inside)


async def _insert_inside(p: Page, dialect: str) -> None:
    await p.sql(INSERT_COPY, s=p.inside, n=p.inside + 1)


async def _edit_unread(p: Page, dialect: str) -> None:
    await p.sql(edit_content(dialect), s=p.unread)


async def _truncate(p: Page, dialect: str) -> None:
    await p.sql("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq > :s", s=p.oldest)


async def _forge_tail(p: Page, dialect: str) -> None:
    await forge_tail(p.store, p.name, JournalSaver(p.store))


Tamper = Callable[[Page, str], Awaitable[None]]
#: (lean list, verify --all): caught?
BOTH, VERIFY, NEITHER = (True, True), (False, True), (False, False)
ROWS: dict[str, tuple[Tamper, tuple[bool, bool], tuple[bool, bool]]] = {
    "edit of a checkpoint it answers": (_edit_answered, BOTH, BOTH),
    "edit of a record a checkpoint names": (_edit_named, BOTH, BOTH),
    "a named record rewritten, hashes recomputed": (_rehash_named, BOTH, BOTH),
    "a named record moved away": (_move_named, BOTH, BOTH),
    "edit of a record in the page": (_edit_inside, BOTH, BOTH),
    "deletion of a record in the page": (_delete_inside, BOTH, BOTH),
    "insertion in the page": (_insert_inside, BOTH, BOTH),
    "edit of a record it does not read": (_edit_unread, VERIFY, VERIFY),
    "truncation back to its oldest checkpoint": (_truncate, NEITHER, BOTH),
    "a forged tail, rightly chained": (_forge_tail, NEITHER, BOTH),
}


async def _paged(store: SqlJournalStore, name: str, sealed: bool) -> Page:
    writer = await written(store, name, 20)  # longer than what the page reads back
    if sealed:
        await writer.aseal_thread(name)
    await writer.aclose()
    records = await store.read(thread_run(name))
    head = records[-1].seq
    answered = [r for r in records if r.kind == CHECKPOINT][-LIMIT:]
    oldest = answered[0].seq
    named = sorted({u[2] for r in answered for u in r.body["uses"] if u[2] < oldest})
    assert named and named[0] < oldest, named
    read_back = 4 * LIMIT + 8  # the first statement's records (langgraph/lean_list.py)
    unread = min(r.seq for r in records if r.seq not in named)
    assert unread <= head - read_back, (unread, head)
    return Page(store, name, oldest, head, named, oldest + 1, unread)


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("row", list(ROWS))
async def test_each_row_of_the_lean_list_column(
    make_store: Callable[..., Any], dialect: str, row: str, sealed: bool
) -> None:
    tamper, unsealed_expected, sealed_expected = ROWS[row]
    store: SqlJournalStore = await make_store()
    page = await _paged(store, f"list-{row[:24]}-{sealed}", sealed)
    await tamper(page, dialect)
    got = (
        await caught(listed(JournalSaver(store, lean_resume=True), page.name, limit=LIMIT)),
        await caught(store.verify(thread_run(page.name))),
    )
    assert got == (sealed_expected if sealed else unsealed_expected)


async def test_verify_all_reports_what_a_lean_list_does_not_read(
    make_store: Callable[..., Any], dialect: str, database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    page = await _paged(store, "list-all", False)
    await _edit_unread(page, dialect)
    assert await listed(JournalSaver(store, lean_resume=True), page.name, limit=LIMIT)
    result = run_cli("verify", "--all", "--json", "--url", database_url, "--tenant", store.tenant)
    assert result.returncode != 0 and str(thread_run(page.name)) in result.stdout, result
