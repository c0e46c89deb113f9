"""The LangGraph graph the saver's tests run (draft, review with an interrupt, publish), and
what an attacker with write access and no key does to a thread: shared by
tests/test_langgraph.py, tests/test_langgraph_trust.py and tests/test_langgraph_lean.py.
Import it after checking that langgraph is installed."""

from __future__ import annotations

import base64
import operator
from collections.abc import Awaitable
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from sqlalchemy import insert, text

from agentplane_journal import CorruptRecordError, SqlJournalStore
from agentplane_journal.core.append import RESERVED_MEMBERS, Append
from agentplane_journal.core.batch import COLUMNS, chain_batch
from agentplane_journal.db.models import Journal
from agentplane_journal.langgraph import JournalSaver, thread_run
from agentplane_journal.langgraph.records import checkpoint_append


class State(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def draft(state: State) -> dict[str, Any]:
    return {"log": [f"draft:{state['topic']}"]}


def review(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "publish?", "draft": state["log"][-1]})
    return {"log": [f"review:{answer}"]}


def publish(state: State) -> dict[str, Any]:
    return {"log": ["published"]}


def graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), {"t": store.tenant, **params})


async def forge_tail(store: SqlJournalStore, thread: str, saver: JournalSaver) -> None:
    """What an attacker with write access and no key can do: chain a new checkpoint (its
    state rewritten) onto the thread's head, with every hash right."""
    run = thread_run(thread)
    records = await store.read(run)
    latest = await saver.aget_tuple(cfg(thread))
    assert latest is not None
    forged = dict(latest.checkpoint)
    forged["id"] = str(uuid6(clock_seq=-1))
    values = dict(forged.pop("channel_values"))
    values["topic"] = "forged"
    versions = dict(forged["channel_versions"])
    versions["topic"] = 999
    forged["channel_versions"] = versions
    append = checkpoint_append(
        run,
        thread,
        "",
        forged["id"],
        latest.checkpoint["id"],
        saver.serde.dumps_typed(forged),
        saver.serde.dumps_typed(latest.metadata),
        [("topic", "999", saver.serde.dumps_typed(values["topic"]))],
    )
    head = records[-1]
    _, rows, _ = chain_batch(
        store.tenant, str(run), head.body["epoch"], head.seq, head.hash, [append], None
    )
    async with store.engine.begin() as conn:
        await conn.execute(insert(Journal), [dict(zip(COLUMNS, rows[0], strict=True))])


def edit_content(dialect: str) -> str:
    """SQL rewriting record ``:s``'s stored bytes ('LangGraph' -> 'LangGraff'), hash untouched."""
    if dialect == "postgresql":
        return (
            "UPDATE journal SET raw = convert_to(replace(convert_from(raw, 'UTF8'), "
            "'LangGraph', 'LangGraff'), 'UTF8') WHERE tenant = :t AND run_id = :r AND seq = :s"
        )
    return (
        "UPDATE journal SET raw = CAST(REPLACE(CAST(raw AS TEXT), 'LangGraph', 'LangGraff') "
        "AS BLOB) WHERE tenant = :t AND run_id = :r AND seq = :s"
    )


#: A copy of record ``:n`` inserted at ``:s``, the rest moved up by one (by way of free seqs);
#: statements separated by ``;``.
INSERT_COPY = (
    "UPDATE journal SET seq = seq + 1000000 WHERE tenant = :t AND run_id = :r AND seq >= :s;"
    "UPDATE journal SET seq = seq - 999999 WHERE tenant = :t AND run_id = :r AND seq >= 1000000;"
    "INSERT INTO journal (tenant, run_id, seq, prev_hash, hash, raw, key_id, signature, epoch,"
    " kind, effect_key, case_id) SELECT tenant, run_id, :s, prev_hash, hash, raw, key_id,"
    " signature, epoch, kind, effect_key, case_id FROM journal"
    " WHERE tenant = :t AND run_id = :r AND seq = :n"
)


async def caught(read: Awaitable[Any]) -> bool:
    """Whether ``read`` refuses with :class:`CorruptRecordError` (any other error propagates)."""
    try:
        await read
    except CorruptRecordError:
        return True
    return False


async def rehash_blobs(store: SqlJournalStore, thread: str, seq: int) -> None:
    """Checkpoint record ``seq``'s blobs rewritten and the record sealed again onto the same
    predecessor: every hash right, its own and its row's; only a name of it disagrees."""
    run = thread_run(thread)
    record = (await store.records_at(run, [seq]))[0]
    payload = {k: v for k, v in record.body.items() if k not in RESERVED_MEMBERS}
    payload["blobs"] = [
        [b[0], b[1], "json", base64.b64encode(b'"forged"').decode()] for b in payload["blobs"]
    ]
    append = Append(run, record.kind, payload, v=record.body["v"])
    _, rows, _ = chain_batch(
        store.tenant, str(run), record.epoch, record.seq - 1, record.prev_hash, [append], None
    )
    row = dict(zip(COLUMNS, rows[0], strict=True))
    await sql(
        store,
        "UPDATE journal SET raw = :raw, hash = :hash WHERE tenant = :t AND run_id = :r"
        " AND seq = :s",
        r=str(run),
        s=record.seq,
        raw=row["raw"],
        hash=row["hash"],
    )
