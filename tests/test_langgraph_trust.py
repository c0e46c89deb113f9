"""The LangGraph saver's trust model (docs/guides/langgraph.md, "Trust model"), row by row.

Each row is a tampering made with SQL by an attacker without a signing key, after a saver
with ``share_verified=True`` verified the thread up to its point (seq ``P``) and the writer
went on (seqs ``P+1 .. H``). Columns: a **warm** read (a saver going on from the process's
verified point: it reads seqs ``P .. H`` only), a **cold** read (a saver without one: the
whole chain), the same two on a **sealed** thread, and ``verify --all``. Every cell is
asserted: caught (``CorruptRecordError``, never an answer built from the edit) or not caught
(the read answers; the table says so).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentplane_journal import SqlJournalStore

from support.langgraph_graph import INSERT_COPY, caught, cfg, edit_content, forge_tail, graph, sql
from support.tamper import run_cli

try:
    from langgraph.types import Command

    from agentplane_journal.langgraph import JournalSaver, thread_run
    from agentplane_journal.langgraph.memo import THREADS
except ImportError:  # pragma: no cover - the extra is absent
    if os.environ.get("CI"):
        raise
    pytest.skip("langgraph is not installed (pip install -e '.[test]')", allow_module_level=True)


@dataclass
class Thread:
    store: SqlJournalStore
    writer: JournalSaver
    name: str
    point: int  # the shared verified point
    head: int  # the last record written

    @property
    def run(self) -> str:
        return str(thread_run(self.name))

    async def sql(self, statement: str, **params: Any) -> None:
        for part in statement.split(";"):
            await sql(self.store, part, r=self.run, **params)


_SWAP = (
    "UPDATE journal SET seq = 1000000 WHERE tenant = :t AND run_id = :r AND seq = :a;"
    "UPDATE journal SET seq = :a WHERE tenant = :t AND run_id = :r AND seq = :b;"
    "UPDATE journal SET seq = :b WHERE tenant = :t AND run_id = :r AND seq = 1000000"
)


async def _edit_after(t: Thread, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.point + 1)


async def _edit_point(t: Thread, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=t.point)


async def _delete_after(t: Thread, dialect: str) -> None:
    await t.sql("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s", s=t.point + 1)


async def _reorder_after(t: Thread, dialect: str) -> None:
    await t.sql(_SWAP, a=t.point + 1, b=t.point + 2)


async def _insert_after(t: Thread, dialect: str) -> None:
    await t.sql(INSERT_COPY, s=t.point + 1, n=t.point + 2)


async def _edit_prefix(t: Thread, dialect: str) -> None:
    await t.sql(edit_content(dialect), s=2)


async def _truncate(t: Thread, dialect: str) -> None:
    await t.sql("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq > :s", s=t.point)


async def _forge_tail(t: Thread, dialect: str) -> None:
    await forge_tail(t.store, t.name, JournalSaver(t.store))


#: row -> (tampering, (warm, cold, verify) unsealed, (warm, cold, verify) sealed): caught?
Tamper = Callable[[Thread, str], Awaitable[None]]
#: (warm, cold, verify --all): caught?
ALL, COLD, NONE = (True, True, True), (False, True, True), (False, False, False)
ROWS: dict[str, tuple[Tamper, tuple[bool, ...], tuple[bool, ...]]] = {
    "edit of a record after the verified point": (_edit_after, ALL, ALL),
    "edit of the verified point's record": (_edit_point, ALL, ALL),
    "deletion among the records after it": (_delete_after, ALL, ALL),
    "reordering among them": (_reorder_after, ALL, ALL),
    "insertion among them": (_insert_after, ALL, ALL),
    "edit before the verified point": (_edit_prefix, COLD, COLD),
    "truncation back to the verified point": (_truncate, NONE, ALL),
    "a forged tail, rightly chained": (_forge_tail, NONE, ALL),
}


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("row", list(ROWS))
async def test_each_row_of_the_trust_model(
    make_store: Callable[..., Any], dialect: str, row: str, sealed: bool
) -> None:
    tamper, unsealed_expected, sealed_expected = ROWS[row]
    store: SqlJournalStore = await make_store()
    name = f"trust-{row[:20]}-{sealed}"
    writer = JournalSaver(store)
    app = graph(writer)
    await app.ainvoke({"topic": "t", "log": []}, cfg(name))  # up to the interrupt
    # A saver of this process verifies the thread: the shared point.
    first = JournalSaver(store, share_verified=True)
    assert await first.aget_tuple(cfg(name)) is not None
    point = (await store.head(thread_run(name))).seq
    await app.ainvoke(Command(resume="yes"), cfg(name))  # the writer goes on
    head = (await store.head(thread_run(name))).seq
    assert head >= point + 3
    if sealed:
        await writer.aseal_thread(name)
    await writer.aclose()
    await tamper(Thread(store, writer, name, point, head), dialect)

    warm = JournalSaver(store, share_verified=True)  # a new saver, from the shared point
    cold = JournalSaver(store)  # a saver without one: the whole chain
    got = (
        await caught(warm.aget_tuple(cfg(name))),
        await caught(cold.aget_tuple(cfg(name))),
        await caught(store.verify(thread_run(name))),
    )
    assert got == (sealed_expected if sealed else unsealed_expected)
    THREADS.forget(warm._memo_key(store, thread_run(name)))


async def test_a_verify_all_finds_what_the_shared_point_does_not(
    make_store: Callable[..., Any], dialect: str, database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    writer = JournalSaver(store)
    await graph(writer).ainvoke({"topic": "t", "log": []}, cfg("trust-all"))
    await writer.aclose()
    reader = JournalSaver(store, share_verified=True)
    before = await reader.aget_tuple(cfg("trust-all"))
    await sql(store, edit_content(dialect), r=str(thread_run("trust-all")), s=2)
    # The shared point goes on from the true state (never from the edit) ...
    again = await JournalSaver(store, share_verified=True).aget_tuple(cfg("trust-all"))
    assert before is not None and again is not None
    assert again.checkpoint == before.checkpoint
    # ... and verify --all reports the edit.
    result = run_cli("verify", "--all", "--json", "--url", database_url, "--tenant", store.tenant)
    assert result.returncode != 0 and str(thread_run("trust-all")) in result.stdout, result
